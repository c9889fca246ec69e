//! CUBIC congestion avoidance (RFC 9438) and HyStart's delay test, for the TCP-like flows
//! that stand in for a Linux sender: the lab's flows run CUBIC, and a window that halves
//! and grows by one segment per round trip (NewReno) recovers far more slowly from each
//! loss at the bandwidth-delay products of aggregated links, which made the simulator
//! pessimistic.
//!
//! The sender (`tcp.rs`) keeps slow start, loss detection and recovery; this module
//! decides the window after a congestion event and its growth in congestion avoidance,
//! and when slow start ends before any loss. Constants are Linux's: β = 0.7, C = 0.4,
//! fast convergence and the Reno-friendly region on; HyStart leaves slow start once a
//! round's minimum RTT exceeds the previous round's by clamp(RTT / 8, 4 ms, 16 ms) (the
//! delay test of Linux's `tcp_cubic` and RFC 9406). Without it slow start doubles into
//! the drop-tail queue and loses half a window at once, which a sender without SACK (as
//! this one) turns into timeouts that Linux does not have.
//!
//! Until its first congestion event (and again after a retransmission timeout, which
//! resets CUBIC's state) Linux grows the window by at least 5 % per round trip in
//! congestion avoidance (`tcp_cubic.c`: `cnt` ≤ 20 while `last_max_cwnd` is 0): the cubic
//! curve from a HyStart exit, with no `w_max` to aim at, is otherwise almost flat for
//! seconds. Without that rule the simulated 50 + 20 Mbit/s upload needed ~9 s to fill
//! its paths where the lab's took ~2.5 s.
//!
//! Invariants: windows are in segments; the growth target per ACK stays within
//! [cwnd, 1.5 × cwnd] (RFC 9438 §4.2); a congestion event never leaves a window above
//! the one it reduced.

use std::time::Duration;

/// Multiplicative decrease factor.
const BETA: f64 = 0.7;
/// Cubic growth constant, segments / s³.
const C: f64 = 0.4;

/// CUBIC's state between congestion events.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cubic {
    /// Window just before the last reduction (after fast convergence), segments.
    w_max: f64,
    /// Start of the current avoidance epoch and the time K (s) the cubic curve takes
    /// from the window then back to `w_max`.
    epoch: Option<(Duration, f64)>,
    /// Reno-friendly estimate of the window, segments.
    w_est: f64,
    /// Whether a congestion event came since the start or the last timeout.
    lost: bool,
}

/// Least growth before the first congestion event: one segment per this many acknowledged
/// (5 % per round trip; Linux's `cnt` cap while `last_max_cwnd` is 0).
const UNKNOWN_BW_CNT: f64 = 20.0;

impl Cubic {
    /// A congestion event with window `cwnd` (segments): returns the new slow-start
    /// threshold in segments (at least 2) and ends the current epoch.
    pub fn on_congestion(&mut self, cwnd: f64) -> f64 {
        // Fast convergence: a flow whose window peaked lower than last time releases
        // bandwidth to newer flows by aiming below its peak.
        self.w_max = if cwnd < self.w_max {
            cwnd * (1.0 + BETA) / 2.0
        } else {
            cwnd
        };
        self.epoch = None;
        self.lost = true;
        (cwnd * BETA).max(2.0)
    }

    /// A retransmission timeout, after `on_congestion` gave the new threshold: Linux
    /// resets CUBIC's state on entering loss recovery (`bictcp_state`), so growth starts
    /// over as if no congestion event had come.
    pub fn on_timeout(&mut self) {
        *self = Cubic::default();
    }

    /// The window after `acked` segments were acknowledged in congestion avoidance at
    /// `now`, from window `cwnd` (segments), with the smoothed round-trip time `rtt`.
    pub fn on_ack(&mut self, now: Duration, cwnd: f64, acked: f64, rtt: Duration) -> f64 {
        let (start, k) = match self.epoch {
            Some(e) => e,
            None => {
                // The epoch starts at the first ACK after the reduction (K from that
                // window), or from the current window if no loss came before.
                self.w_max = self.w_max.max(cwnd);
                self.w_est = cwnd;
                let e = (now, ((self.w_max - cwnd) / C).cbrt());
                self.epoch = Some(e);
                e
            }
        };
        let t = now.saturating_sub(start).as_secs_f64();
        let cubic = |t: f64| C * (t - k).powi(3) + self.w_max;
        // Reno-friendly region (RFC 9438 §4.3): grow at least as fast as Reno would
        // with the same β, which matters at small windows and short round trips.
        let alpha = if self.w_est < self.w_max {
            3.0 * (1.0 - BETA) / (1.0 + BETA)
        } else {
            1.0
        };
        self.w_est += alpha * acked / cwnd;
        let floor = if self.lost {
            cwnd
        } else {
            cwnd + acked / UNKNOWN_BW_CNT
        };
        if cubic(t) < self.w_est {
            return self.w_est.max(floor);
        }
        let target = cubic(t + rtt.as_secs_f64()).clamp(cwnd, 1.5 * cwnd);
        (cwnd + (target - cwnd) / cwnd * acked).max(floor)
    }
}

/// HyStart's delay test over rounds of one window.
#[derive(Debug, Clone, Copy, Default)]
pub struct HyStart {
    /// The round ends when this sequence number is acknowledged.
    round_end: u64,
    /// Minimum RTT of the previous round and of this one so far.
    last_min: Option<Duration>,
    cur_min: Option<Duration>,
    samples: u32,
}

/// RTT samples a round needs before its minimum is trusted.
const HYSTART_SAMPLES: u32 = 8;
/// Below this window (segments) slow start is left alone (Linux's `hystart_low_window`).
const HYSTART_LOW_WINDOW: f64 = 16.0;

impl HyStart {
    /// An ACK up to `ack` in slow start, with an RTT sample if it gave one, while
    /// `snd_max` is the highest sequence sent and the window is `cwnd` segments: whether
    /// slow start should end now.
    pub fn on_ack(&mut self, ack: u64, snd_max: u64, rtt: Option<Duration>, cwnd: f64) -> bool {
        if ack >= self.round_end {
            self.round_end = snd_max;
            self.last_min = self.cur_min.or(self.last_min);
            self.cur_min = None;
            self.samples = 0;
        }
        let Some(r) = rtt else {
            return false;
        };
        self.cur_min = Some(self.cur_min.map_or(r, |m| m.min(r)));
        self.samples += 1;
        let (Some(last), Some(cur)) = (self.last_min, self.cur_min) else {
            return false;
        };
        let thresh = (last / 8).clamp(Duration::from_millis(4), Duration::from_millis(16));
        cwnd >= HYSTART_LOW_WINDOW && self.samples >= HYSTART_SAMPLES && cur >= last + thresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: f64) -> Duration {
        Duration::from_secs_f64(x)
    }

    #[test]
    fn reduces_by_beta_and_regains_the_peak_after_k() {
        let mut c = Cubic::default();
        let ssthresh = c.on_congestion(1000.0);
        assert!((ssthresh - 700.0).abs() < 1e-9);
        // K = cbrt(300 / 0.4) ≈ 9.09 s; one window ACKed per 100 ms round trip (a
        // window this large is in the cubic region, above the Reno-friendly estimate).
        let rtt = s(0.1);
        let mut w = ssthresh;
        let mut t = 1.0;
        while t < 1.0 + 8.5 {
            w = c.on_ack(s(t), w, w, rtt);
            t += 0.1;
        }
        assert!(
            w < 1000.0 && w > 990.0,
            "just below the old peak before K: {w}"
        );
        while t < 1.0 + 11.0 {
            w = c.on_ack(s(t), w, w, rtt);
            t += 0.1;
        }
        assert!(w > 1001.0, "probing beyond the peak after K: {w}");
    }

    #[test]
    fn short_round_trips_grow_like_reno() {
        let mut c = Cubic::default();
        let mut w = c.on_congestion(100.0);
        // At 50 ms the cubic curve is slower than Reno with β = 0.7 (about 0.53
        // segments per round trip below the old peak): the Reno-friendly estimate leads.
        for i in 0..80 {
            w = c.on_ack(s(1.0 + f64::from(i) * 0.05), w, w, s(0.05));
        }
        assert!(w > 110.0 && w < 130.0, "{w}");
    }

    #[test]
    fn hystart_leaves_slow_start_when_the_queue_grows() {
        let ms = Duration::from_millis;
        let mut h = HyStart::default();
        // Round 1: 20 ms; round 2: 21 ms (below 20 + 4 ms); round 3: 25 ms.
        let mut snd_max = 100;
        for (round, rtt) in [(0u64, 20), (1, 21), (2, 25)] {
            let base = round * 100;
            let mut out = false;
            for k in 0..10 {
                out |= h.on_ack(base + k * 10, snd_max, Some(ms(rtt)), 32.0);
            }
            assert_eq!(out, round == 2, "round {round}");
            snd_max += 100;
        }
        let mut small = HyStart::default();
        let mut out = false;
        for (k, rtt) in [
            20, 20, 20, 20, 20, 20, 20, 20, 20, 40, 40, 40, 40, 40, 40, 40, 40, 40,
        ]
        .into_iter()
        .enumerate()
        {
            out |= small.on_ack(k as u64 * 10, 90 + 100 * (k as u64 / 9), Some(ms(rtt)), 8.0);
        }
        assert!(!out, "not below 16 segments");
    }

    /// Before any loss the window grows by at least 5 % per round trip (Linux), where the
    /// flat cubic curve from the HyStart exit would add a fraction of a segment; after a
    /// loss that floor is gone, and a timeout brings it back.
    #[test]
    fn growth_is_at_least_five_percent_per_rtt_until_the_first_loss() {
        let rtt = s(0.05);
        let grow = |c: &mut Cubic, mut w: f64, rounds: u32| {
            for i in 0..rounds {
                w = c.on_ack(s(10.0 + f64::from(i) * 0.05), w, w, rtt);
            }
            w
        };
        let mut fresh = Cubic::default();
        let w = grow(&mut fresh, 100.0, 20);
        assert!(
            w >= 100.0 * 1.05f64.powi(20) * 0.99,
            "20 rounds from 100: {w}"
        );
        let mut lossy = Cubic::default();
        lossy.on_congestion(100.0);
        let w = grow(&mut lossy, 100.0, 20);
        assert!(w < 150.0, "after a loss the cubic curve rules: {w}");
        lossy.on_timeout();
        let w = grow(&mut lossy, 100.0, 20);
        assert!(
            w >= 100.0 * 1.05f64.powi(20) * 0.99,
            "a timeout resets: {w}"
        );
    }

    #[test]
    fn fast_convergence_aims_below_a_lower_peak() {
        let mut c = Cubic::default();
        c.on_congestion(100.0);
        c.on_congestion(80.0);
        assert!((c.w_max - 68.0).abs() < 1e-9, "80 × 1.7 / 2");
    }

    #[test]
    fn small_windows_grow_at_least_like_reno() {
        let mut c = Cubic::default();
        let mut w = c.on_congestion(10.0);
        let rtt = s(0.01);
        for i in 0..200 {
            w = c.on_ack(s(f64::from(i) * 0.01), w, w, rtt);
        }
        // Reno-friendly growth from 7: ~0.53 segments per RTT below w_max, 1 above.
        assert!(w > 100.0, "200 round trips: {w}");
    }
}
