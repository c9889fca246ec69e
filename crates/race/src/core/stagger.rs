//! The `stagger` predictor's state (Happy Eyeballs, RFC 8305): handshake-time estimates per
//! uplink learned from every attempt, and the staggered plan they give.
//!
//! Why not the EWMA of race wins: a staggered race starts only the top-ranked uplink at
//! once and the next one `delay` later, so a top uplink that connects within `delay` is the
//! only one that ever completes; learning only "who connected first" locks the ranking
//! onto whichever uplink won the first tie, even the worst. Here every attempt the race
//! started teaches its uplink's estimate, measured from the attempt's own start:
//!
//! - a completion after `d` is a handshake-time sample `d` (EWMA, gain [`GAIN`]);
//! - a refusal, failure or timeout is a failed attempt: the success ratio (EWMA) drops,
//!   and the uplink's expected cost `srtt / success` rises (the same form as the probe
//!   metric: each failure costs another try);
//! - an attempt still connecting when another won is a censored sample: the uplink is at
//!   least that slow, so its estimate is raised to that time if it was lower.
//!
//! Re-probing (RFC 8305 §4 lets history order candidates, but history goes stale): an
//! uplink with no sample, or whose last sample is older than [`REPROBE_CONNECTIONS`] of
//! this predictor's connections or [`REPROBE_AFTER`], starts at time 0 beside the top-ranked
//! one, so a slow uplink that recovered (or a fast one that lost an early tie) is measured
//! again. The others keep the RFC 8305 stagger: the k-th of them starts `k · delay` after
//! the race. The cost is one extra handshake (reset at once if it loses) per stale uplink
//! every [`REPROBE_CONNECTIONS`] connections.
//!
//! Invariants: every uplink appears in the plan exactly once; the top-ranked uplink and
//! every stale one start at 0; estimates stay finite (success floored at [`MIN_SUCCESS`]).

use super::conn::AttemptReport;
use super::predictor::{Plan, PlannedAttempt};
use super::{UplinkId, MAX_UPLINKS};
use arrayvec::ArrayVec;
use core::time::Duration;
use multihome_proto::Instant;

/// EWMA gain of handshake-time and success samples (≈ the last 4–5 attempts: stagger
/// should follow a change within a few connections, unlike AvMet's long memory).
pub const GAIN: f64 = 0.25;
/// Lowest success ratio believed; keeps the cost finite so a failed uplink can recover.
pub const MIN_SUCCESS: f64 = 0.05;
/// An uplink not sampled in this many of the predictor's connections is probed again.
pub const REPROBE_CONNECTIONS: u64 = 16;
/// An uplink not sampled for this long is probed again.
pub const REPROBE_AFTER: Duration = Duration::from_secs(60);

/// What `stagger` knows about one uplink.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct HandshakeEstimate {
    srtt_us: Option<f64>,
    success: f64,
    /// (connection number, time) of the last sample; `None`: never tried.
    last: Option<(u64, Instant)>,
    samples: u64,
}

impl HandshakeEstimate {
    /// Learns from one attempt that ended in the predictor's connection number `conn`.
    pub fn on_attempt(&mut self, conn: u64, now: Instant, report: AttemptReport) {
        let first = self.samples == 0;
        let ok = match report {
            AttemptReport::Connected(d) => {
                let d = d.as_micros() as f64;
                self.srtt_us = Some(match self.srtt_us {
                    Some(s) => (1.0 - GAIN) * s + GAIN * d,
                    None => d,
                });
                Some(true)
            }
            AttemptReport::Unfinished(d) => {
                let d = d.as_micros() as f64;
                // At least this slow: raise the estimate, never lower it.
                self.srtt_us = Some(self.srtt_us.map_or(d, |s| s.max(d)));
                None
            }
            AttemptReport::Refused | AttemptReport::Failed | AttemptReport::TimedOut => Some(false),
        };
        if let Some(ok) = ok {
            let hit = if ok { 1.0 } else { 0.0 };
            self.success = if first {
                hit
            } else {
                (1.0 - GAIN) * self.success + GAIN * hit
            };
        } else if first {
            self.success = 1.0; // censored: no evidence of failure yet
        }
        self.samples += 1;
        self.last = Some((conn, now));
    }

    /// Expected handshake cost in µs (`srtt / success`); `None` before any time is known.
    pub fn cost_us(&self) -> Option<f64> {
        self.srtt_us.map(|s| s / self.success.max(MIN_SUCCESS))
    }

    /// Smoothed handshake time, if known.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt_us.map(|s| Duration::from_micros(s as u64))
    }

    /// Smoothed success ratio of attempts.
    pub fn success(&self) -> f64 {
        self.success
    }

    /// Attempts learned from.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// True when the uplink should be measured again at connection `conn`, time `now`.
    pub fn stale(&self, conn: u64, now: Instant) -> bool {
        match self.last {
            None => true,
            Some((c, at)) => {
                conn.saturating_sub(c) >= REPROBE_CONNECTIONS
                    || now.saturating_since(at) >= REPROBE_AFTER
            }
        }
    }
}

/// Uplinks by expected cost, lowest first (unknown cost last, lower index on ties).
pub fn ranking(est: &[HandshakeEstimate]) -> ArrayVec<UplinkId, MAX_UPLINKS> {
    let mut order: ArrayVec<UplinkId, MAX_UPLINKS> = (0..est.len().min(MAX_UPLINKS))
        .map(|i| UplinkId(i as u8))
        .collect();
    let key = |u: &UplinkId| est[u.index()].cost_us().unwrap_or(f64::INFINITY);
    // Stable sort: equal costs keep index order.
    order.sort_by(|a, b| key(a).total_cmp(&key(b)));
    order
}

/// The staggered plan at connection `conn`, time `now`: the top-ranked and every stale
/// uplink at 0, the rest `delay` apart in rank order.
pub fn plan(est: &[HandshakeEstimate], conn: u64, now: Instant, delay: Duration) -> Plan {
    let mut k = 0u32;
    let mut attempts: ArrayVec<PlannedAttempt, MAX_UPLINKS> = ranking(est)
        .into_iter()
        .enumerate()
        .map(|(rank, uplink)| {
            let start_after = if rank == 0 || est[uplink.index()].stale(conn, now) {
                Duration::ZERO
            } else {
                k += 1;
                delay * k
            };
            PlannedAttempt {
                uplink,
                start_after,
            }
        })
        .collect();
    // Start order (stable: the top-ranked one stays first among those at 0).
    attempts.sort_by_key(|a| a.start_after);
    Plan {
        attempts,
        preferred: None,
        hold: Duration::ZERO,
        advance_on_failure: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn t(v: u64) -> Instant {
        Instant::from_micros(v * 1000)
    }

    fn starts(p: &Plan) -> Vec<(u8, u64)> {
        p.attempts
            .iter()
            .map(|a| (a.uplink.0, a.start_after.as_millis() as u64))
            .collect()
    }

    #[test]
    fn failures_and_censored_samples_are_evidence() {
        let mut e = [HandshakeEstimate::default(); 3];
        e[0].on_attempt(0, t(0), AttemptReport::Connected(ms(40)));
        e[1].on_attempt(0, t(0), AttemptReport::Connected(ms(30)));
        e[2].on_attempt(0, t(0), AttemptReport::Connected(ms(10)));
        assert_eq!(
            ranking(&e).as_slice(),
            &[UplinkId(2), UplinkId(1), UplinkId(0)]
        );
        // Two failures on the fastest: 10 ms / 0.56 ≈ 18 ms, still first; two more and it
        // costs more than the 30 ms one.
        e[2].on_attempt(1, t(0), AttemptReport::Refused);
        e[2].on_attempt(1, t(0), AttemptReport::TimedOut);
        assert_eq!(ranking(&e)[0], UplinkId(2));
        e[2].on_attempt(2, t(0), AttemptReport::Failed);
        e[2].on_attempt(3, t(0), AttemptReport::Failed);
        assert_eq!(ranking(&e)[0], UplinkId(1), "{:?}", e[2].cost_us());
        // Still connecting after 50 ms when another won: at least 50 ms, never lowered.
        e[1].on_attempt(4, t(0), AttemptReport::Unfinished(ms(50)));
        assert_eq!(e[1].srtt(), Some(ms(50)));
        e[1].on_attempt(5, t(0), AttemptReport::Unfinished(ms(5)));
        assert_eq!(e[1].srtt(), Some(ms(50)));
        // 10 ms / 0.32 ≈ 32 ms, 40 ms, 50 ms.
        assert_eq!(
            ranking(&e).as_slice(),
            &[UplinkId(2), UplinkId(0), UplinkId(1)]
        );
    }

    /// An attempt that started 250 ms late and completed 200 ms after its own start beat the
    /// first one, which took 400 ms: it was still connecting when that one won, at 150 ms
    /// into its attempt, so it ranks first next time and is measured there.
    #[test]
    fn a_late_attempt_is_judged_from_its_own_start() {
        let mut e = [HandshakeEstimate::default(); 2];
        e[0].on_attempt(0, t(0), AttemptReport::Connected(ms(400)));
        e[1].on_attempt(0, t(0), AttemptReport::Unfinished(ms(150)));
        let p = plan(&e, 1, t(400), ms(250));
        assert_eq!(starts(&p), vec![(1, 0), (0, 250)]);
    }

    #[test]
    fn stale_uplinks_start_beside_the_top_one() {
        let mut e = [HandshakeEstimate::default(); 3];
        assert_eq!(
            starts(&plan(&e, 0, t(0), ms(250))),
            vec![(0, 0), (1, 0), (2, 0)],
            "never tried: all at once"
        );
        for (i, d) in [20, 30, 40].into_iter().enumerate() {
            e[i].on_attempt(0, t(0), AttemptReport::Connected(ms(d)));
        }
        assert_eq!(
            starts(&plan(&e, 1, t(10), ms(250))),
            vec![(0, 0), (1, 250), (2, 500)]
        );
        // Uplink 1 sampled again later; uplink 2 not for REPROBE_CONNECTIONS connections.
        e[1].on_attempt(10, t(10), AttemptReport::Connected(ms(30)));
        assert_eq!(
            starts(&plan(&e, REPROBE_CONNECTIONS, t(20), ms(250))),
            vec![(0, 0), (2, 0), (1, 250)]
        );
        // Or for REPROBE_AFTER.
        let late = t(10) + REPROBE_AFTER;
        assert_eq!(
            starts(&plan(&e, 11, late, ms(250))),
            vec![(0, 0), (1, 0), (2, 0)]
        );
    }
}
