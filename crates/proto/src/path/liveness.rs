//! Liveness of a path: `Up` while feedback is recent, `Suspect` once the oldest
//! unacknowledged datagram has waited well past the RTT, `Down` after the detection time
//! (longer on a path whose own RTT is longer: [`down_after`]); and when those changes, or
//! the next keepalive probe, are due.
//!
//! The deadlines are asked for after every event the driver handles (for each path of
//! each session it wakes); `Instant + Duration` adds in u64 for that reason (`time.rs`).
//!
//! Invariant: `state_deadline` is the earliest time `update_state` could change the state
//! without new input; `None` when no timeout can.

use super::{Path, PathState, RttEstimator};
use crate::Instant;
use core::time::Duration;

/// How long the oldest unacknowledged datagram may wait before an `Up` path turns
/// `Suspect`: two RTTs plus four deviations, between a tenth of the detection time and all
/// of it. The path keeps it (`Path::suspect_after`), updated with every RTT sample.
///
/// Why this soon: a path leaving `Up` is where failover starts — `best` moves to another
/// path and the failing path's unacknowledged data is reinjected (`session/reinject.rs`) —
/// and each millisecond before it is a millisecond of the inner flow's stall. A false
/// suspicion costs little: the path returns to `Up` with its next ACK, and the reinjected
/// copies are dropped as duplicates. The floor (100 ms at the default detection time, a
/// third of it before reinjection existed) keeps a path with a tiny RTT from being
/// suspected over a scheduling hiccup.
pub(super) fn suspect_after(rtt: &RttEstimator, detect: Duration) -> Duration {
    (rtt.smoothed() * 2 + rtt.var() * 4)
        .max(detect / 10)
        .min(detect)
}

/// How long the oldest unacknowledged datagram may wait before the path is `Down`: the
/// detection time, or three RTTs plus four deviations where that is longer, at most four
/// detection times.
///
/// Why longer on a slow path: a cellular link whose queue has grown to 700 ms of RTT
/// (measured on real driving traces) leaves its oldest datagram unacknowledged for over a
/// second while it still delivers; a fixed 1 s declared it dead, and when the other link
/// was already down the session had no path left and stalled. Failover does not wait for
/// `Down`: it starts at `Suspect` ([`suspect_after`], at most the detection time), so a
/// longer `Down` delays only giving the path up, not moving traffic off it. A path that
/// really died keeps its last RTT estimate (no new samples), so a path that was fast is
/// still declared down after the detection time.
pub(super) fn down_after(rtt: &RttEstimator, detect: Duration) -> Duration {
    (rtt.smoothed() * 3 + rtt.var() * 4)
        .max(detect)
        .min(detect * 4)
}

impl Path {
    /// Re-evaluates liveness; returns the new state if it changed.
    pub fn update_state(&mut self, now: Instant) -> Option<PathState> {
        let old = self.state;
        let new = if !self.available {
            PathState::Down
        } else if let Some(t) = self.first_unacked_time {
            let waiting = now.saturating_since(t);
            if waiting >= down_after(&self.rtt, self.cfg.detect) {
                PathState::Down
            } else if old == PathState::Up && waiting >= self.suspect_after {
                PathState::Suspect
            } else {
                old
            }
        } else {
            old
        };
        self.set_state(now, new);
        (new != old).then_some(new)
    }

    /// When the state may next change by timeout.
    pub fn state_deadline(&self) -> Option<Instant> {
        let t = self.first_unacked_time?;
        (self.state != PathState::Down && self.available).then(|| {
            if self.state == PathState::Up {
                t + self.suspect_after
            } else {
                t + down_after(&self.rtt, self.cfg.detect)
            }
        })
    }

    /// When a keepalive probe is next due.
    pub fn probe_deadline(&self) -> Option<Instant> {
        if !self.available {
            return None;
        }
        Some(
            self.last_sent_time
                .map_or(Instant::ZERO, |t| t + self.cfg.probe_interval),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rtt_of(ms: u64, samples: usize) -> RttEstimator {
        let mut r = RttEstimator::new(Duration::from_millis(ms));
        for _ in 0..samples {
            r.on_sample(Duration::from_millis(ms));
        }
        r
    }

    #[test]
    fn down_is_the_detection_time_on_a_fast_path() {
        let d = Duration::from_secs(1);
        assert_eq!(down_after(&rtt_of(30, 20), d), d);
    }

    #[test]
    fn a_slow_path_gets_three_rtts_up_to_four_detection_times() {
        let d = Duration::from_secs(1);
        let slow = down_after(&rtt_of(700, 50), d);
        assert!(slow >= Duration::from_millis(2100) && slow < Duration::from_millis(2300));
        assert_eq!(down_after(&rtt_of(3000, 50), d), d * 4);
    }
}
