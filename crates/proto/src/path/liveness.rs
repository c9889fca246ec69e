//! Liveness of a path: `Up` while feedback is recent, `Suspect` once the oldest
//! unacknowledged datagram has waited well past the RTT, `Down` after the detection time
//! (longer on a path whose own RTT is longer: [`down_after`]); and when those changes, or
//! the next keepalive probe, are due (the session picks the probe schedule, [`Keepalive`]:
//! a quarter of the detection time while it carries user data, seconds while idle).
//!
//! The deadlines are asked for after every event the driver handles (for each path of
//! each session it wakes); `Instant + Duration` adds in u64 for that reason (`time.rs`).
//!
//! A path back from `Down` starts afresh, and is on probation (standby to the schedulers)
//! until it delivers what was sent since ([`Path::revive`]).
//!
//! A `Suspect` path turns `Up` again only on a timely ACK: of a datagram acknowledged
//! within the path's Suspect time before that sample (`Path::on_ack`). A link that trickles
//! out its queue (real driving traces: one delivery a second for 10 s) acknowledges
//! datagrams sent seconds ago; each such ACK used to clear the suspicion, the schedulers
//! put data on the path again, and that data waited behind the queue for seconds — the
//! inner TCP's cumulative ACK stood still for 2–3.5 s at a time while the other link
//! delivered. A path wrongly suspected, merely slow for a moment, acknowledges what it
//! was sent shortly before the suspicion within its usual time, and is `Up` again then.
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
    /// Marks the path proven (a handshake response arrived on it). Proof that it works
    /// now also restarts the liveness clock, and a path that was `Down` writes off what it
    /// sent meanwhile (its data was reinjected or held): an outage's keepalives, never to
    /// be acknowledged, turned it `Down` again at once, and filled its window, so after a
    /// heal nothing moved on it until its next keepalive's ACK (up to a probe interval).
    pub fn confirm(&mut self, now: Instant) {
        if self.available {
            if self.state == PathState::Down {
                self.revive(now, true);
            }
            self.set_state(now, PathState::Up);
            self.first_unacked_time = None;
        }
    }

    /// A `Down` path that feedback proves alive again: what it sent while down is written
    /// off (as `confirm` does), and its liveness clock starts from its return, also for
    /// the ACKs of the outage's datagrams that trickle in after it. Without this, the
    /// outage's keepalives sent after an acknowledged one — long unacknowledged, and
    /// mostly never to be (a link resuming at one delivery a second drops them) — turned
    /// the path `Down` again within milliseconds: on real driving traces a link coming
    /// back from a 10-s outage went Down and Up 2–13 times in 0.15 s.
    ///
    /// Proof that it works *now* is another matter: an ACK of a datagram that waited out the
    /// outage in the link's queue says only that the link delivered it at last (ATT's
    /// driving trace resumes at one delivery a second, after 10 s). Such a return puts the
    /// path on probation — schedulers see it on standby, used only while no other path is
    /// `Up` — until an ACK covers a datagram sent after the return (the keepalive probes
    /// earn it), as MPTCP keeps a "stale" subflow out of scheduling until it acknowledges
    /// new data. Data given to it at once waited there until the path turned Suspect, and
    /// the flow stalled for that long. `timely`: the reviving ACK is of a datagram sent
    /// within the path's Suspect time, so the path delivers now.
    ///
    /// What the path measured meanwhile is forgotten too, and its rate starts up again:
    /// the RTT and forward queue of datagrams that waited out the outage say nothing of
    /// the path now (their samples are not taken either, `Path::on_ack`). Kept, they
    /// held a cellular link back from a 1-s outage in drain at 0.12 Mbit/s for 2 s, its
    /// outage queue of 1.7 s still read as its own.
    pub(super) fn revive(&mut self, now: Instant, timely: bool) {
        self.rtt.restart();
        self.fwd.forget_queue();
        self.control.restart(now);
        self.acked_cum_bytes = self.cum_sent_bytes;
        self.first_unacked_time = None;
        self.revived_at = now;
        self.on_probation = !timely;
    }

    /// When the liveness clock of what is outstanding after `seq` started: the send time
    /// of the oldest eliciting datagram after it, but never before the path's return
    /// (`revive`); `None` if none is outstanding.
    pub(super) fn first_eliciting_after(&self, seq: u32, now: Instant) -> Option<Instant> {
        let mut s = seq.wrapping_add(1);
        while s != self.next_seq {
            match self.sent.get(s) {
                Some(r) if r.eliciting => return Some(r.time.max(self.revived_at)),
                Some(_) => {}
                // Record overwritten: assume the worst case, outstanding since now.
                None => return Some(now),
            }
            s = s.wrapping_add(1);
        }
        None
    }

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

    /// When a keepalive probe is next due under `k` (`None` while the local interface is
    /// unusable): `probe_interval` after the last eliciting datagram while the session is
    /// active, `k.idle_interval` after it once the session is idle by then; at once on a
    /// path never sent on.
    ///
    /// A pure function of the path and `k`, no clock: the deadline `poll_timeout` reports
    /// is the one `handle_timeout` acts on. Waking from idleness moves `k.idle_at` ahead,
    /// and a path whose last probe is older than `probe_interval` is then due at once.
    pub fn probe_deadline(&self, k: Keepalive) -> Option<Instant> {
        if !self.available {
            return None;
        }
        let Some(t) = self.last_sent_time else {
            return Some(Instant::ZERO);
        };
        let active = t + self.cfg.probe_interval;
        Some(match k.idle_at {
            Some(idle) if active >= idle => t + k.idle_interval.max(self.cfg.probe_interval),
            _ => active,
        })
    }

    /// When the last eliciting datagram (data or PING) was sent on the path.
    pub fn last_sent(&self) -> Option<Instant> {
        self.last_sent_time
    }
}

/// The probe schedule a session imposes on its paths (`session/keepalive.rs` decides it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    /// From when the session counts as idle; `None` while it stays active.
    pub idle_at: Option<Instant>,
    /// Probe interval once idle (a path's own `probe_interval` if that is longer).
    pub idle_interval: Duration,
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

    fn path_sent_at(ms: u64) -> Path {
        let addr = "10.0.0.1:7000".parse().unwrap();
        let cfg = super::super::PathConfig::from_detect(Duration::from_secs(1));
        let mut p = Path::new(super::super::PathId(0), addr, Instant::ZERO, cfg);
        p.on_sent(
            Instant::from_micros(ms * 1000),
            60,
            super::super::SentKind::Probe,
        );
        p
    }

    fn at(ms: u64) -> Instant {
        Instant::from_micros(ms * 1000)
    }

    #[test]
    fn probes_every_quarter_detect_while_active_and_every_keepalive_once_idle() {
        let p = path_sent_at(10_000);
        let idle_interval = Duration::from_secs(5);
        // Active for a long while yet: a quarter of the detection time.
        let active = Keepalive {
            idle_at: None,
            idle_interval,
        };
        assert_eq!(p.probe_deadline(active), Some(at(10_250)));
        let later = Keepalive {
            idle_at: Some(at(60_000)),
            idle_interval,
        };
        assert_eq!(p.probe_deadline(later), Some(at(10_250)));
        // Idle by the time the quarter is up: the keepalive interval.
        let idle = Keepalive {
            idle_at: Some(at(10_100)),
            idle_interval,
        };
        assert_eq!(p.probe_deadline(idle), Some(at(15_000)));
        // Never shorter than the active interval (a long detection time).
        let short = Keepalive {
            idle_at: Some(at(0)),
            idle_interval: Duration::from_millis(100),
        };
        assert_eq!(p.probe_deadline(short), Some(at(10_250)));
    }

    #[test]
    fn waking_makes_a_path_probed_long_ago_due_at_once() {
        let p = path_sent_at(10_000);
        // Data at 14 s makes the session active until 19 s: the path's last probe is
        // older than a quarter of the detection time, so the next is overdue now.
        let woken = Keepalive {
            idle_at: Some(at(19_000)),
            idle_interval: Duration::from_secs(5),
        };
        assert!(p.probe_deadline(woken).unwrap() <= at(14_000));
    }

    #[test]
    fn a_path_never_sent_on_is_probed_at_once_and_an_unusable_one_never() {
        let addr = "10.0.0.1:7000".parse().unwrap();
        let cfg = super::super::PathConfig::from_detect(Duration::from_secs(1));
        let mut p = Path::new(super::super::PathId(0), addr, Instant::ZERO, cfg);
        let k = Keepalive {
            idle_at: Some(Instant::ZERO),
            idle_interval: Duration::from_secs(5),
        };
        assert_eq!(p.probe_deadline(k), Some(Instant::ZERO));
        p.set_available(at(1), false);
        assert_eq!(p.probe_deadline(k), None);
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
