//! The path manager's observation of the session's paths (`observe`), and its
//! shared-bottleneck rule: what to do with a detour that only splits its direct path's
//! capacity (docs/AGGREGATION.md §9).
//!
//! While a detour and the direct path over the same link are both busy for
//! `useless_after`, their delivery rates together are compared with what the direct path
//! carries alone: its rate measured while busy with no busy detour beside it for `ALONE_MIN`.
//! When it never was (the detour was up before the first transfer, the usual case) and the
//! answer could move the link's data off a lossy direct path (below), the manager measures
//! it: the detour is paused (on standby) for `PAUSE`, the direct path carries everything
//! meanwhile, and the rates from before the pause are compared with it. Otherwise it waits
//! for a measurement to come by itself: a pause costs a dip of a few seconds (the inner flow
//! regrows into the detour's share afterwards), more than a clean detour that adds nothing
//! costs (it splits the same capacity). The packet-pair capacity cannot stand in: through a
//! shared bottleneck the other path's datagrams interleave with each pair and it reads low,
//! 4–9 Mbit/s on a 10 Mbit/s link.
//! Below (1 + `useless_gain`) × alone, the two paths share a bottleneck and one of them is
//! one too many:
//!
//! - if the direct path loses packets to transmission errors and the detour loses clearly
//!   fewer (`ERROR_LOSS_FLOOR`, `CLEANER`), the *direct* path goes on standby: every repair
//!   of a loss holds the inner flow's later packets for about a round trip, which costs the
//!   inner TCP more than the detour's extra delay once both carry the same capacity;
//! - otherwise the detour is retired for `useless_backoff`.
//!
//! A standby ends when no active detour of its link is left, or after `useless_backoff`
//! (conditions change; the pair is judged again).
//!
//! Invariants: at most one direct standby per link, held only while one of that link's
//! detours is active; every `Standby { standby: true }` action is followed, sooner or later,
//! by its `false` (also when the paused detour is retired, and on release of every detour).

use super::{active, Action, DetourManager, PathObs, State};
use crate::path::{PathId, PathState};
use crate::Instant;
use std::time::Duration;

/// Error-loss rate above which a direct path's losses are worth avoiding (0.1 %).
const ERROR_LOSS_FLOOR: f64 = 0.001;
/// A detour is cleaner when its error-loss rate is below this fraction of the direct's.
const CLEANER: f64 = 0.5;
/// How long a detour pauses so that its direct path is measured alone: enough round trips
/// (60 at 30 ms) for the direct path's rate to grow into the capacity the detour used.
pub(super) const PAUSE: Duration = Duration::from_secs(2);
/// The direct path's rate counts as its rate alone once it has been busy alone this long:
/// a shorter stretch (the first round trips of a transfer, before the detour joins) reads
/// the rate of a path still growing into its capacity, and a detour judged against it
/// looked useful forever.
const ALONE_MIN: Duration = Duration::from_secs(1);
/// A path stays busy across gaps in its data this short. An inner TCP's flight drains
/// for a moment after each loss it recovers from and while the receiver holds a repaired
/// hole (a round trip or two); one such instant used to restart the `useless_after` clock,
/// so a pair carrying inner CUBIC under 1 % loss was never judged at all.
const BUSY_GAP: Duration = Duration::from_millis(300);

/// Since when a condition (a path busy, a pair busy together) has held, forgiving gaps of
/// up to `BUSY_GAP`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct BusySpan {
    since: Option<Instant>,
    last: Option<Instant>,
}

impl BusySpan {
    /// Records whether the condition holds at `now`; returns since when it has held.
    pub(super) fn update(&mut self, now: Instant, holds: bool) -> Option<Instant> {
        if holds {
            self.last = Some(now);
            self.since.get_or_insert(now);
        } else if self.last.is_none_or(|t| now.saturating_since(t) > BUSY_GAP) {
            *self = BusySpan::default();
        }
        self.since
    }

    /// Starts the span afresh at `now` (a verdict was given; the next one waits a full span).
    pub(super) fn restart(&mut self, now: Instant) {
        self.since = self.last.map(|_| now);
    }

    /// Forgets the span.
    pub(super) fn clear(&mut self) {
        *self = BusySpan::default();
    }
}

/// A direct path on standby for a detour.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Standby {
    /// The detour's path that carries the link's data instead.
    pub detour: PathId,
    pub since: Instant,
}

/// A detour paused to measure its direct path alone, and what the pair did before.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Pause {
    pub since: Instant,
    /// Delivery rates of direct + detour, bytes/s, when both were busy.
    pub together: f64,
    /// The detour's error-loss rate then.
    pub detour_error_loss: f64,
}

impl DetourManager {
    /// What the session's paths look like now (call before `handle_timeout`).
    pub fn observe(&mut self, now: Instant, paths: &[PathObs]) {
        let find = |id: PathId| paths.iter().find(|p| p.id == id).copied();
        for li in 0..self.links.len() {
            let Some(direct) = find(self.links[li].id) else {
                continue;
            };
            let direct_since = self.links[li].busy.update(now, direct.busy);
            let mut detour_busy = false;
            for c in 0..self.cands.len() {
                let Some(mut a) = active(&self.cands[c]).filter(|_| self.cands[c].link == li)
                else {
                    continue;
                };
                let Some(p) = find(a.slot) else { continue };
                if let Some(rtt) = p.min_rtt {
                    self.cands[c].rtt = Some(rtt);
                    self.cands[c].rtt_from_path = true;
                }
                a.down_since = match p.state {
                    PathState::Down => a.down_since.or(Some(now)),
                    _ => None,
                };
                if a.pause.is_some() {
                    self.cands[c].state = State::Active(a);
                    self.end_pause(now, li, c, &direct);
                    continue;
                }
                let detour_since = a.busy.update(now, p.busy);
                detour_busy |= detour_since.is_some();
                self.cands[c].state = State::Active(a);
                let together_since = direct_since.zip(detour_since).map(|(d, t)| d.max(t));
                if together_since.is_some_and(|t| now.saturating_since(t) >= self.cfg.useless_after)
                {
                    self.judge_shared(now, li, c, &direct, &p);
                }
            }
            self.upkeep_standby(now, li);
            self.note_alone(
                now,
                li,
                direct_since.is_some() && !detour_busy,
                direct.rate_bps,
            );
        }
    }

    /// Judges active candidate `c` (on link `li`, path observation `p`) against its direct
    /// path once both have been busy for `useless_after`.
    pub(super) fn judge_shared(
        &mut self,
        now: Instant,
        li: usize,
        c: usize,
        direct: &PathObs,
        p: &PathObs,
    ) {
        let together = direct.rate_bps + p.rate_bps;
        let State::Active(a) = &mut self.cands[c].state else {
            return;
        };
        if self.links[li].alone_rate > 0.0 {
            a.busy.restart(now);
            self.verdict(now, li, c, together, direct, p.error_loss);
            return;
        }
        if !cleaner(direct.error_loss, p.error_loss) {
            a.busy.restart(now); // a pause would cost more than it can win
            return;
        }
        a.busy.clear();
        a.pause = Some(Pause {
            since: now,
            together,
            detour_error_loss: p.error_loss,
        });
        self.actions.push_back(Action::Standby {
            path: a.slot,
            standby: true,
        });
    }

    /// Ends candidate `c`'s pause after `PAUSE` and judges with what it measured.
    pub(super) fn end_pause(&mut self, now: Instant, li: usize, c: usize, direct: &PathObs) {
        let State::Active(a) = &mut self.cands[c].state else {
            return;
        };
        let Some(pause) = a.pause.filter(|q| now.saturating_since(q.since) >= PAUSE) else {
            return;
        };
        a.pause = None;
        let slot = a.slot;
        self.actions.push_back(Action::Standby {
            path: slot,
            standby: false,
        });
        self.verdict(now, li, c, pause.together, direct, pause.detour_error_loss);
    }

    /// Keeps candidate `c`, puts the direct path on standby, or retires `c`.
    fn verdict(
        &mut self,
        now: Instant,
        li: usize,
        c: usize,
        together: f64,
        direct: &PathObs,
        detour_error_loss: f64,
    ) {
        let alone = self.links[li].alone_rate;
        if alone <= 0.0 || together >= alone * (1.0 + self.cfg.useless_gain) {
            return; // adds capacity (or still unknown): judged again later
        }
        let Some(a) = active(&self.cands[c]) else {
            return;
        };
        if cleaner(direct.error_loss, detour_error_loss) && self.links[li].standby.is_none() {
            self.counters.direct_standby += 1;
            self.links[li].standby = Some(Standby {
                detour: a.slot,
                since: now,
            });
            self.actions.push_back(Action::Standby {
                path: direct.id,
                standby: true,
            });
        } else {
            self.counters.retired_useless += 1;
            self.retire(now, c, self.cfg.useless_backoff);
        }
    }

    /// Notes whether link `li`'s direct path is busy alone now, at `rate` bytes/s.
    pub(super) fn note_alone(&mut self, now: Instant, li: usize, alone: bool, rate: f64) {
        let link = &mut self.links[li];
        if !alone {
            link.alone_since = None;
            return;
        }
        let since = *link.alone_since.get_or_insert(now);
        if now.saturating_since(since) >= ALONE_MIN {
            // The path's estimate is already max-filtered over its own window.
            link.alone_rate = rate;
        }
    }

    /// Ends link `li`'s standby if its detour is gone or it is due to be judged again.
    pub(super) fn upkeep_standby(&mut self, now: Instant, li: usize) {
        let Some(s) = self.links[li].standby else {
            return;
        };
        let held = self
            .cands
            .iter()
            .any(|c| c.link == li && active(c).is_some_and(|a| a.slot == s.detour));
        if !held || now.saturating_since(s.since) >= self.cfg.useless_backoff {
            self.links[li].standby = None;
            let path = self.links[li].id;
            self.actions.push_back(Action::Standby {
                path,
                standby: false,
            });
        }
    }
}

/// Whether a detour losing `detour` (error-loss rate) is clearly cleaner than its direct
/// path losing `direct`.
fn cleaner(direct: f64, detour: f64) -> bool {
    direct > ERROR_LOSS_FLOOR && detour < direct * CLEANER
}
