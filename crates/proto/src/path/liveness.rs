//! Liveness of a path: `Up` while feedback is recent, `Suspect` once the oldest
//! unacknowledged datagram has waited well past the RTT, `Down` after the detection time;
//! and when those changes, or the next keepalive probe, are due.
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
                t + self.suspect_after
            } else {
                t + self.cfg.detect
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
