//! The path manager's observation of the session's paths (`observe`), and its
//! shared-bottleneck rule: what to do with a detour that only splits its direct path's
//! capacity (docs/AGGREGATION.md §9).
//!
//! While a detour and the direct path over the same link are both busy for `useless_after`,
//! their delivery rates together are compared with what one of them carries alone: the
//! direct path's rate while busy with no busy detour beside it for `ALONE_MIN`, or the
//! detour's rate measured in a trial (below); a pair whose rate is still growing (an inner
//! flow's start-up) waits until it has settled. Below (1 + `useless_gain`) × alone, the two
//! paths share a bottleneck and one of them is one too many:
//!
//! - if the direct path loses packets to transmission errors and the detour loses clearly
//!   fewer (`ERROR_LOSS_FLOOR`, `CLEANER`), the *direct* path goes on standby: every repair
//!   of a loss holds the inner flow's later packets for about a round trip, which costs the
//!   inner TCP more than the detour's extra delay once both carry the same capacity;
//! - otherwise the detour is retired for `useless_backoff`.
//!
//! When neither rate alone is known (the detour was up before the first transfer, the usual
//! case), a clean pair waits for a measurement to come by itself: a trial costs a dip of a
//! few seconds, more than a clean detour that adds nothing costs (it splits the same
//! capacity). A lossy direct path beside a cleaner detour is judged sooner, after
//! `TRIAL_AFTER`, by a trial: the direct path goes on standby for `TRIAL`, the detour
//! carries the link's data alone, and the pair's rate from before is compared with the
//! detour's alone. The trial state is the one the rule expects to keep, so a right guess
//! costs nothing. The opposite trial (the detour paused, the lossy direct path alone)
//! measures the lossy path at what an inner TCP gets through its losses, below its
//! capacity: the pair then looked like it added capacity and the standby came one judgement
//! later, 8 s into a transfer instead of 4. The packet-pair capacity cannot stand in: through
//! a shared bottleneck the other path's datagrams interleave with each pair and it reads
//! low, 4–9 Mbit/s on a 10 Mbit/s link.
//!
//! A standby ends when no active detour of its link is left, or after `useless_backoff`
//! (conditions change; the pair is judged again).
//!
//! Invariants: at most one direct standby (trial or kept) per link, held only while one of
//! that link's detours is active; every `Standby { standby: true }` action is followed,
//! sooner or later, by its `false` (also on release of every detour).

use super::{active, Action, DetourManager, PathObs, State};
use crate::path::{PathId, PathState};
use crate::Instant;
use std::time::Duration;

/// Error-loss rate above which a direct path's losses are worth avoiding (0.1 %).
const ERROR_LOSS_FLOOR: f64 = 0.001;
/// A detour is cleaner when its error-loss rate is below this fraction of the direct's.
const CLEANER: f64 = 0.5;
/// How long a direct path is on trial standby so that its detour is measured alone: enough
/// round trips (30 at 60 ms) for the detour's rate to grow into the capacity the direct
/// path used.
pub(super) const TRIAL: Duration = Duration::from_secs(2);
/// A lossy pair is judged once busy together this long instead of `useless_after`: long
/// enough for the direct path's error-loss estimate (tens of losses at 1 % on 10 Mbit/s)
/// and for the pair's rates to be past slow start.
const TRIAL_AFTER: Duration = Duration::from_secs(3);
/// A pair's rate together is its average over this much of its busy time (within the
/// shortest judgement, `TRIAL_AFTER`, and the meters' reach).
const TOGETHER_WINDOW: Duration = Duration::from_millis(1500);
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

/// How often a `DeliveryMeter` marks a path's delivered bytes, and how many marks it keeps
/// (2 s of history).
const METER_STEP: Duration = Duration::from_millis(250);
const METER_MARKS: usize = 9;

/// A path's bytes delivered, marked every `METER_STEP`: its average delivery rate over the
/// last second or two. The rule compares these averages, not the paths' own estimates:
/// those are max-filtered over ten round trips, so the sum of two of them reads high when
/// they peak at different times, as two paths through one bottleneck do (one gets what the
/// other leaves). Averages add up: a pair through a 10 Mbit/s bottleneck averages 10.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct DeliveryMeter {
    /// Ring of (when, bytes delivered by then); `next` is the slot written next.
    marks: [(Instant, u64); METER_MARKS],
    next: usize,
    /// Marks written, up to `METER_MARKS`.
    len: usize,
    /// The newest reading (between marks).
    latest: (Instant, u64),
}

impl DeliveryMeter {
    /// Reads the path's cumulative bytes delivered at `now`.
    pub(super) fn record(&mut self, now: Instant, delivered: u64) {
        if delivered < self.latest.1 {
            *self = DeliveryMeter::default(); // a new path in the same slot
        }
        self.latest = (now, delivered);
        let last = self.marks[(self.next + METER_MARKS - 1) % METER_MARKS].0;
        if self.len == 0 || now.saturating_since(last) >= METER_STEP {
            self.marks[self.next] = (now, delivered);
            self.next = (self.next + 1) % METER_MARKS;
            self.len = (self.len + 1).min(METER_MARKS);
        }
    }

    /// Average delivery rate over the last `window` ± `METER_STEP`/2 (bytes/s), if the
    /// meter reaches back that far.
    pub(super) fn rate_over(&self, window: Duration) -> Option<f64> {
        let (now, bytes) = self.latest;
        let reach = window.saturating_sub(METER_STEP / 2);
        let (t, b) = (1..=self.len)
            .map(|k| self.marks[(self.next + METER_MARKS - k) % METER_MARKS])
            .find(|(t, _)| now.saturating_since(*t) >= reach)?;
        let secs = now.saturating_since(t).as_secs_f64();
        (secs > 0.0).then(|| (bytes - b) as f64 / secs)
    }
}

/// A direct path on standby for a detour.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Standby {
    /// The detour's path that carries the link's data instead.
    pub detour: PathId,
    pub since: Instant,
    /// Still a trial: delivery rates of direct + detour (bytes/s) when both were busy,
    /// to be compared with the detour's alone at `since + TRIAL`.
    pub trial: Option<f64>,
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
            self.links[li].meter.record(now, direct.delivered);
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
                let detour_since = a.busy.update(now, p.busy);
                detour_busy |= detour_since.is_some();
                self.cands[c].meter.record(now, p.delivered);
                self.cands[c].state = State::Active(a);
                self.end_trial(now, li, c, p.rate_bps);
                let together_since = direct_since.zip(detour_since).map(|(d, t)| d.max(t));
                let due = if cleaner(direct.error_loss, p.error_loss) {
                    TRIAL_AFTER.min(self.cfg.useless_after)
                } else {
                    self.cfg.useless_after
                };
                // A pair whose direct path is on standby for this detour is judged; it is
                // judged again when the standby ends (a standby path still carries data
                // while the detour is not `Up`, which would look like a busy pair).
                let judged = self.links[li].standby.is_some_and(|s| s.detour == a.slot);
                if !judged && together_since.is_some_and(|t| now.saturating_since(t) >= due) {
                    self.judge_shared(now, li, c, &direct, &p);
                }
            }
            self.upkeep_standby(now, li);
            let rate = self.links[li].meter.rate_over(ALONE_MIN);
            self.note_alone(
                now,
                li,
                direct_since.is_some() && !detour_busy,
                rate.unwrap_or(direct.rate_bps),
            );
        }
    }

    /// Judges active candidate `c` (on link `li`, path observation `p`) against its direct
    /// path once both have been busy long enough.
    pub(super) fn judge_shared(
        &mut self,
        now: Instant,
        li: usize,
        c: usize,
        direct: &PathObs,
        p: &PathObs,
    ) {
        let alone_known = self.alone_rate(li, c) > 0.0;
        let pair = |w: Duration| {
            let d = self.links[li].meter.rate_over(w)?;
            Some(d + self.cands[c].meter.rate_over(w)?)
        };
        let (together, recent) = match (pair(TOGETHER_WINDOW), pair(TOGETHER_WINDOW / 2)) {
            (Some(t), Some(r)) => (t, r),
            _ => (direct.rate_bps + p.rate_bps, 0.0),
        };
        // Still growing (its last half-window carried more than (1 + gain) × the one
        // before: an inner flow in its start-up): judged later, at the first observation
        // where it has settled. Judged now, a pair that adds capacity read as one that
        // shares it (2 s into BBR's start-up on the core-limited network, it did).
        let earlier = 2.0 * together - recent;
        if recent > earlier * (1.0 + self.cfg.useless_gain) {
            return;
        }
        let State::Active(a) = &mut self.cands[c].state else {
            return;
        };
        if alone_known {
            a.busy.restart(now);
            self.verdict(now, li, c, together, direct, p.error_loss);
            return;
        }
        if !cleaner(direct.error_loss, p.error_loss) || self.links[li].standby.is_some() {
            a.busy.restart(now); // a trial would cost more than it can win
            return;
        }
        a.busy.clear();
        let slot = a.slot;
        self.put_on_standby(now, li, slot, Some(together));
    }

    /// Puts link `li`'s direct path on standby for detour `slot`: on trial (`trial`: the
    /// pair's rate together) or kept.
    fn put_on_standby(&mut self, now: Instant, li: usize, slot: PathId, trial: Option<f64>) {
        if trial.is_none() {
            self.counters.direct_standby += 1;
        }
        self.links[li].standby = Some(Standby {
            detour: slot,
            since: now,
            trial,
        });
        self.actions.push_back(Action::Standby {
            path: self.links[li].id,
            standby: true,
        });
    }

    /// Whether a pair carrying `together` bytes/s adds nothing to one of its paths alone at
    /// `alone`: the two share a bottleneck.
    fn shares_bottleneck(&self, together: f64, alone: f64) -> bool {
        together < alone * (1.0 + self.cfg.useless_gain)
    }

    /// What link `li`'s direct path or its detour `c` carries alone, bytes/s (0: unknown).
    fn alone_rate(&self, li: usize, c: usize) -> f64 {
        let detour = active(&self.cands[c]).map_or(0.0, |a| a.alone_rate);
        self.links[li].alone_rate.max(detour)
    }

    /// Ends link `li`'s trial standby for active candidate `c` after `TRIAL`, with what the
    /// detour carried alone over the trial's second half (its estimate `estimate`,
    /// bytes/s, if the meter has no answer). The standby is kept if the pair carried no
    /// more than that (the direct path added nothing), else it ends and the rate is
    /// remembered for later judgements.
    pub(super) fn end_trial(&mut self, now: Instant, li: usize, c: usize, estimate: f64) {
        let cand = &mut self.cands[c];
        let State::Active(a) = &mut cand.state else {
            return;
        };
        let Some(s) = self.links[li].standby.filter(|s| s.detour == a.slot) else {
            return;
        };
        let Some(together) = s.trial.filter(|_| now.saturating_since(s.since) >= TRIAL) else {
            return;
        };
        let rate = cand.meter.rate_over(TRIAL / 2).unwrap_or(estimate);
        a.alone_rate = rate;
        if self.shares_bottleneck(together, rate) {
            self.counters.direct_standby += 1;
            self.links[li].standby = Some(Standby {
                trial: None,
                since: now,
                ..s
            });
        } else {
            self.links[li].standby = None;
            self.actions.push_back(Action::Standby {
                path: self.links[li].id,
                standby: false,
            });
        }
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
        let alone = self.alone_rate(li, c);
        if alone <= 0.0 || !self.shares_bottleneck(together, alone) {
            return; // adds capacity (or still unknown): judged again later
        }
        let Some(a) = active(&self.cands[c]) else {
            return;
        };
        if cleaner(direct.error_loss, detour_error_loss) && self.links[li].standby.is_none() {
            self.put_on_standby(now, li, a.slot, None);
        } else {
            self.counters.retired_useless += 1;
            self.retire(now, c, self.cfg.useless_backoff);
        }
    }

    /// Notes whether link `li`'s direct path is busy alone now, at `rate` bytes/s (its
    /// average over the last `ALONE_MIN`).
    pub(super) fn note_alone(&mut self, now: Instant, li: usize, alone: bool, rate: f64) {
        let link = &mut self.links[li];
        if !alone {
            link.alone_since = None;
            return;
        }
        let since = *link.alone_since.get_or_insert(now);
        if now.saturating_since(since) >= ALONE_MIN {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds a meter `rate` bytes/s from `from` for `secs`, read every 10 ms.
    fn feed(m: &mut DeliveryMeter, from: (Instant, u64), rate: u64, secs: u64) -> (Instant, u64) {
        let (mut t, mut b) = from;
        for _ in 0..secs * 100 {
            t = t + Duration::from_millis(10);
            b += rate / 100;
            m.record(t, b);
        }
        (t, b)
    }

    #[test]
    fn meter_averages_over_the_window_and_forgets_older_bytes() {
        let mut m = DeliveryMeter::default();
        assert_eq!(m.rate_over(Duration::from_secs(1)), None);
        let at = feed(&mut m, (Instant::from_micros(0), 0), 100_000, 3);
        let r = m.rate_over(Duration::from_secs(1)).unwrap();
        assert!((r - 100_000.0).abs() < 1_000.0, "{r}");
        // The rate doubles: a 1-s window sees only the new rate, a 2-s one the mean.
        feed(&mut m, at, 200_000, 1);
        let r1 = m.rate_over(Duration::from_secs(1)).unwrap();
        let r2 = m.rate_over(Duration::from_secs(2)).unwrap();
        assert!((r1 - 200_000.0).abs() < 3_000.0, "{r1}");
        assert!((r2 - 150_000.0).abs() < 15_000.0, "{r2}");
        // Beyond the meter's 2-s reach: no answer rather than a wrong one.
        assert_eq!(m.rate_over(Duration::from_secs(3)), None);
    }

    #[test]
    fn meter_starts_over_for_a_new_path() {
        let mut m = DeliveryMeter::default();
        feed(&mut m, (Instant::from_micros(0), 0), 100_000, 3);
        m.record(Instant::from_micros(3_100_000), 10);
        assert_eq!(m.rate_over(Duration::from_millis(100)), None);
    }
}
