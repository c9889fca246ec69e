//! Liveness of a path: `Up` while feedback is recent, `Suspect` once the oldest
//! unacknowledged datagram has waited well past the RTT, `Down` after the detection time;
//! and when those changes, or the next keepalive probe, are due.
//!
//! The deadlines are asked for after every event the driver handles (for each path of
//! each session it wakes), so they add durations in u64 microseconds (`after`) rather
//! than through `Instant + Duration`, whose rounding divides a u128 (a library call).
//!
//! Invariant: `state_deadline` is the earliest time `update_state` could change the state
//! without new input; `None` when no timeout can.

use super::{Path, PathState, RttEstimator};
use crate::Instant;
use core::time::Duration;

/// `t + d`, rounded up to the microsecond and saturating exactly as `Instant + Duration`
/// (`time.rs`): `d`'s whole seconds are whole microseconds, so only its sub-second nanos
/// need rounding, and that fits in u64.
fn after(t: Instant, d: Duration) -> Instant {
    let us = d
        .as_secs()
        .saturating_mul(1_000_000)
        .saturating_add(u64::from(d.subsec_nanos().div_ceil(1000)));
    Instant::from_micros(t.as_micros().saturating_add(us))
}

/// How long the oldest unacknowledged datagram may wait before an `Up` path turns
/// `Suspect`: two RTTs plus four deviations, between a third of the detection time and all
/// of it. The path keeps it (`Path::suspect_after`), updated with every RTT sample.
pub(super) fn suspect_after(rtt: &RttEstimator, detect: Duration) -> Duration {
    (rtt.smoothed() * 2 + rtt.var() * 4)
        .max(detect / 3)
        .min(detect)
}

impl Path {
    /// Re-evaluates liveness; returns the new state if it changed.
    pub fn update_state(&mut self, now: Instant) -> Option<PathState> {
        let old = self.state;
        let new = if !self.available {
            PathState::Down
        } else if let Some(t) = self.first_unacked_time {
            let waiting = now.saturating_since(t);
            if waiting >= self.cfg.detect {
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
                after(t, self.suspect_after)
            } else {
                after(t, self.cfg.detect)
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
                .map_or(Instant::ZERO, |t| after(t, self.cfg.probe_interval)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_rounds_and_saturates_as_instant_plus_duration() {
        let instants = [0, 1, 999_999, 1 << 40, u64::MAX - 1_000_000, u64::MAX];
        let durations = [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_nanos(999),
            Duration::from_nanos(1_001),
            Duration::from_millis(333) / 7,
            Duration::from_secs(1) - Duration::from_nanos(1),
            Duration::new(12_345, 678_901_234),
            Duration::new(u64::MAX / 1_000_000, 999_999_999),
            Duration::new(u64::MAX / 1_000_000 + 1, 0),
            Duration::MAX,
        ];
        for t in instants.map(Instant::from_micros) {
            for d in durations {
                assert_eq!(after(t, d), t + d, "{t:?} + {d:?}");
            }
        }
    }
}
