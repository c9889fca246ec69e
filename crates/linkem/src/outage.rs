//! Scheduled outages: the link is down in each [start, end) window (times since start-up).
//!
//! While down a direction drops every arriving frame; at the instant an outage begins the
//! queue is flushed (those frames are lost with the link), while frames already past the rate
//! stage — "on the wire" — still arrive. The pipeline applies that; this module only answers
//! "is t inside an outage?" and "which outage starts in (a, b]?".
//! Invariant: windows are sorted, non-empty and non-overlapping (overlaps are merged when
//! the schedule is built).

use serde::Deserialize;
use std::time::Duration;

/// Errors from building a schedule.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OutageError {
    /// An outage ends at or before it starts.
    #[error("outage ends ({end:?}) at or before it starts ({start:?})")]
    Empty {
        /// Start of the window.
        start: Duration,
        /// End of the window.
        end: Duration,
    },
}

/// One outage window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outage {
    /// When the link goes down (time since linkem started).
    #[serde(deserialize_with = "crate::units::serde_duration::required")]
    pub start: Duration,
    /// When it comes back.
    #[serde(deserialize_with = "crate::units::serde_duration::required")]
    pub end: Duration,
}

/// A sorted set of outage windows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutageSchedule {
    windows: Vec<Outage>,
}

impl OutageSchedule {
    /// Builds a schedule, merging overlapping or touching windows.
    pub fn new(mut windows: Vec<Outage>) -> Result<Self, OutageError> {
        if let Some(w) = windows.iter().find(|w| w.end <= w.start) {
            return Err(OutageError::Empty {
                start: w.start,
                end: w.end,
            });
        }
        windows.sort_by_key(|w| w.start);
        let mut merged: Vec<Outage> = Vec::with_capacity(windows.len());
        for w in windows {
            match merged.last_mut() {
                Some(last) if w.start <= last.end => last.end = last.end.max(w.end),
                _ => merged.push(w),
            }
        }
        Ok(OutageSchedule { windows: merged })
    }

    /// The windows, sorted.
    pub fn windows(&self) -> &[Outage] {
        &self.windows
    }

    /// Whether `t` is inside an outage.
    pub fn is_down(&self, t: Duration) -> bool {
        let i = self.windows.partition_point(|w| w.end <= t);
        self.windows.get(i).is_some_and(|w| w.start <= t)
    }

    /// Start of the first outage beginning in (after, upto].
    pub fn start_in(&self, after: Duration, upto: Duration) -> Option<Duration> {
        let i = self.windows.partition_point(|w| w.start <= after);
        self.windows.get(i).map(|w| w.start).filter(|&s| s <= upto)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: u64) -> Duration {
        Duration::from_secs(v)
    }

    #[test]
    fn windows_are_half_open_and_merged() {
        let sched = OutageSchedule::new(vec![
            Outage {
                start: s(10),
                end: s(12),
            },
            Outage {
                start: s(2),
                end: s(4),
            },
            Outage {
                start: s(3),
                end: s(5),
            },
        ])
        .unwrap();
        assert_eq!(sched.windows().len(), 2);
        assert!(!sched.is_down(s(1)));
        assert!(sched.is_down(s(2)));
        assert!(sched.is_down(s(4)));
        assert!(!sched.is_down(s(5)));
        assert!(sched.is_down(s(11)));
        assert_eq!(sched.start_in(s(0), s(100)), Some(s(2)));
        assert_eq!(sched.start_in(s(2), s(100)), Some(s(10)));
        assert_eq!(sched.start_in(s(2), s(9)), None);
        assert!(OutageSchedule::new(vec![Outage {
            start: s(3),
            end: s(3)
        }])
        .is_err());
    }
}
