//! An ETT-like metric per uplink from periodic probes (the MultiNAT thesis §2.2, §4.3.2; Roofnet).
//!
//! Roofnet's ETT is the expected time to get one 1500-byte packet across a link, counting
//! retransmissions: `ETT = ETX · S/B` with `ETX = 1/(d_f · d_r)` from broadcast probe
//! delivery ratios. A gateway sees neither link-layer rates nor per-direction delivery, so
//! the driver sends a probe per uplink at a fixed period (a TCP handshake to a configured
//! target: it answers end to end, which the thesis shows ETT lacks) and reports either its
//! round-trip time or a loss. We keep an EWMA of the RTT and an estimate `p` of the
//! round-trip success ratio, and use `ETT = srtt / p`: the expected time for one exchange
//! to get through when each failure costs another try.
//!
//! A lost probe is evidence, not a verdict. `p` is the mean of a Beta(1, 1) prior updated
//! with the last [`WINDOW`] probes (`(replies + 1) / (probes + 2)`): one loss among 20
//! moves it from 0.95 to 0.91, where an EWMA with gain 0.1 cut it by 10 % at once and
//! flipped the choice between two close uplinks on a single lost probe (the live gateway
//! then disagreed with its own offline replay). The choice itself has hysteresis
//! ([`Choice`]): the current uplink is left only for one whose ETT is lower by
//! [`SWITCH_MARGIN`], or when it lost [`LOSS_RUN_SWITCH`] probes in a row (a dead uplink
//! is left within that many of its probes).
//!
//! Invariants: an uplink with no reply yet has no metric and ranks after every measured
//! one; `p` never reaches 0 (at least `1 / (WINDOW + 2)`), so a dead uplink's ETT is large
//! but finite and it can recover.

use super::UplinkId;
use core::time::Duration;

/// EWMA gain of the RTT for each new reply (≈ the last 10 replies).
pub const GAIN: f64 = 0.1;
/// Probes in the delivery window.
pub const WINDOW: u32 = 20;
/// Lowest delivery ratio we believe; keeps the metric finite.
pub const MIN_DELIVERY: f64 = 0.01;
/// Another uplink must have an ETT this much lower (relative) to be switched to.
pub const SWITCH_MARGIN: f64 = 0.10;
/// The current uplink is left after this many consecutive lost probes.
pub const LOSS_RUN_SWITCH: u32 = 3;

/// Probe state of one uplink.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EttEstimator {
    srtt_us: f64,
    /// The last `window_len` probes, newest in bit 0 (1 = answered).
    window: u32,
    window_len: u32,
    loss_run: u32,
    samples: u64,
    losses: u64,
}

impl EttEstimator {
    fn push(&mut self, answered: bool) {
        let mask = (1u32 << WINDOW) - 1;
        self.window = ((self.window << 1) | u32::from(answered)) & mask;
        self.window_len = (self.window_len + 1).min(WINDOW);
        self.samples += 1;
    }

    /// Records a probe that came back after `rtt`.
    pub fn on_reply(&mut self, rtt: Duration) {
        let rtt_us = rtt.as_micros() as f64;
        // The first reply (even after only losses) seeds the RTT rather than averaging with 0.
        self.srtt_us = if self.srtt_us == 0.0 {
            rtt_us
        } else {
            (1.0 - GAIN) * self.srtt_us + GAIN * rtt_us
        };
        self.loss_run = 0;
        self.push(true);
    }

    /// Records a probe that got no answer within the driver's timeout.
    pub fn on_loss(&mut self) {
        self.loss_run += 1;
        self.losses += 1;
        self.push(false);
    }

    /// The metric in µs, `None` before the first reply.
    pub fn ett_us(&self) -> Option<f64> {
        (self.srtt_us > 0.0).then(|| self.srtt_us / self.delivery())
    }

    /// Estimated delivery ratio of probes (Beta(1, 1) prior, last [`WINDOW`] probes).
    pub fn delivery(&self) -> f64 {
        let replies = f64::from(self.window.count_ones());
        ((replies + 1.0) / (f64::from(self.window_len) + 2.0)).max(MIN_DELIVERY)
    }

    /// Smoothed probe RTT.
    pub fn srtt(&self) -> Duration {
        Duration::from_micros(self.srtt_us as u64)
    }

    /// Probes recorded (replies and losses).
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Probes lost.
    pub fn losses(&self) -> u64 {
        self.losses
    }

    /// Probes lost in a row since the last reply.
    pub fn loss_run(&self) -> u32 {
        self.loss_run
    }
}

/// Index of the uplink with the lowest ETT among `candidates` (unmeasured last, lowest
/// index on ties).
fn best_of(estimators: &[EttEstimator], candidates: impl Iterator<Item = usize>) -> Option<usize> {
    let key = |i: usize| estimators[i].ett_us().unwrap_or(f64::INFINITY);
    candidates.fold(None, |b, i| match b {
        Some(b) if key(b) <= key(i) => Some(b),
        _ => Some(i),
    })
}

/// Index of the uplink with the lowest ETT (unmeasured ones last, lowest index on ties).
pub fn best(estimators: &[EttEstimator]) -> usize {
    best_of(estimators, 0..estimators.len()).unwrap_or(0)
}

/// The probe predictor's current uplink, changed only with hysteresis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Choice {
    current: Option<usize>,
}

impl Choice {
    /// The uplink in use (uplink 0 before any probe answered).
    pub fn current(&self) -> UplinkId {
        UplinkId(self.current.unwrap_or(0) as u8)
    }

    /// Reconsiders after a probe: keep the current uplink unless another's (not in a loss
    /// run) ETT is lower by [`SWITCH_MARGIN`], or the current one lost [`LOSS_RUN_SWITCH`] probes in a row (then
    /// the best of the others), or has no metric while another has.
    pub fn update(&mut self, est: &[EttEstimator]) {
        let Some(cur) = self.current.filter(|&c| c < est.len()) else {
            let b = best(est);
            self.current = est.get(b).and_then(|e| e.ett_us()).map(|_| b);
            return;
        };
        if est[cur].loss_run >= LOSS_RUN_SWITCH {
            if let Some(other) = best_of(est, (0..est.len()).filter(|&i| i != cur)) {
                if est[other].ett_us().is_some() {
                    self.current = Some(other);
                }
            }
            return;
        }
        // Never back to an uplink in a loss run, however good its (stale) RTT.
        let alive = (0..est.len()).filter(|&i| est[i].loss_run < LOSS_RUN_SWITCH);
        let Some(b) = best_of(est, alive) else { return };
        let better = match (est[b].ett_us(), est[cur].ett_us()) {
            (Some(eb), Some(ec)) => eb < (1.0 - SWITCH_MARGIN) * ec,
            (Some(_), None) => true,
            _ => false,
        };
        if better {
            self.current = Some(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn loss_raises_the_metric() {
        let mut clean = EttEstimator::default();
        let mut lossy = EttEstimator::default();
        for i in 0..50 {
            clean.on_reply(ms(30));
            if i % 3 == 0 {
                lossy.on_loss();
            } else {
                lossy.on_reply(ms(20));
            }
        }
        // Lossy: 20 ms at ~2/3 delivery ≈ 30 ms; a bit worse than clean's 30 ms on average
        // right after a loss, a bit better right after replies. Make the loss heavier:
        for _ in 0..5 {
            lossy.on_loss();
        }
        assert!(lossy.ett_us().unwrap() > clean.ett_us().unwrap());
        assert_eq!(best(&[clean, lossy]), 0);
        assert_eq!(lossy.losses(), 22);
    }

    #[test]
    fn unmeasured_ranks_last_and_dead_recovers() {
        let mut a = EttEstimator::default();
        let b = EttEstimator::default();
        assert_eq!(a.ett_us(), None);
        assert_eq!(best(&[b, b]), 0);
        for _ in 0..100 {
            a.on_loss();
        }
        assert_eq!(a.ett_us(), None, "never answered: no RTT, no metric");
        a.on_reply(ms(10));
        let dead = a.ett_us().unwrap();
        assert!(dead.is_finite() && dead > 10_000.0);
        for _ in 0..60 {
            a.on_reply(ms(10));
        }
        assert!(a.ett_us().unwrap() < 10_500.0, "{:?}", a.ett_us());
        assert_eq!(best(&[b, a]), 1);
    }

    fn feed(est: &mut [EttEstimator], choice: &mut Choice, i: usize, rtt: Option<u64>) {
        match rtt {
            Some(v) => est[i].on_reply(ms(v)),
            None => est[i].on_loss(),
        }
        choice.update(est);
    }

    /// Two close uplinks (10 and 10.5 ms): a single lost probe on the better one does not
    /// flip the choice (with the old EWMA of delivery, 10 ms / 0.9 = 11.1 ms > 10.5 did).
    #[test]
    fn one_lost_probe_does_not_flip_close_uplinks() {
        let mut est = [EttEstimator::default(); 2];
        let mut choice = Choice::default();
        for _ in 0..20 {
            feed(&mut est, &mut choice, 0, Some(10));
            est[1].on_reply(Duration::from_micros(10_500));
            choice.update(&est);
        }
        assert_eq!(choice.current(), UplinkId(0));
        feed(&mut est, &mut choice, 0, None);
        assert_eq!(choice.current(), UplinkId(0), "{est:?}");
        // Isolated losses (one in ten) never flip it either.
        for _ in 0..3 {
            for _ in 0..9 {
                feed(&mut est, &mut choice, 0, Some(10));
                est[1].on_reply(Duration::from_micros(10_500));
                choice.update(&est);
            }
            feed(&mut est, &mut choice, 0, None);
            assert_eq!(choice.current(), UplinkId(0), "isolated losses: {est:?}");
        }
    }

    /// A clearly better uplink is taken; a dead current one is left after
    /// LOSS_RUN_SWITCH probes, and not taken back while its loss run lasts.
    #[test]
    fn dead_uplink_is_left_within_a_bounded_number_of_probes() {
        let mut est = [EttEstimator::default(); 2];
        let mut choice = Choice::default();
        for _ in 0..20 {
            feed(&mut est, &mut choice, 0, Some(5));
            feed(&mut est, &mut choice, 1, Some(20));
        }
        assert_eq!(choice.current(), UplinkId(0));
        for k in 1..=LOSS_RUN_SWITCH {
            feed(&mut est, &mut choice, 0, None);
            let want = if k < LOSS_RUN_SWITCH { 0 } else { 1 };
            assert_eq!(choice.current(), UplinkId(want), "after {k} losses");
        }
        // Uplink 0's 5 ms RTT is still far better on paper; it stays dead, so no flip back.
        for _ in 0..10 {
            feed(&mut est, &mut choice, 1, Some(20));
            feed(&mut est, &mut choice, 0, None);
            assert_eq!(choice.current(), UplinkId(1));
        }
        // It recovers: once its ETT is 10 % better again, it is taken back.
        for _ in 0..20 {
            feed(&mut est, &mut choice, 0, Some(5));
        }
        assert_eq!(choice.current(), UplinkId(0), "{est:?}");
    }

    #[test]
    fn a_clearly_better_uplink_is_taken_a_slightly_better_one_not() {
        let mut est = [EttEstimator::default(); 2];
        let mut choice = Choice::default();
        feed(&mut est, &mut choice, 0, Some(20));
        assert_eq!(choice.current(), UplinkId(0));
        feed(&mut est, &mut choice, 1, Some(19));
        assert_eq!(choice.current(), UplinkId(0), "5 % better: stay");
        feed(&mut est, &mut choice, 1, Some(10));
        feed(&mut est, &mut choice, 1, Some(10));
        assert_eq!(choice.current(), UplinkId(1));
    }
}
