//! One connection's race: attempts over several uplinks, one winner, the thesis's reset rules.
//!
//! The driver reports what happened to each attempt (`handle_connected`, `handle_refused`
//! for an RST / ECONNREFUSED, `handle_failed` for anything else, `handle_timeout` at
//! [`Race::poll_timeout`]) and carries out the [`Action`]s it pulls with
//! [`Race::poll_action`]: start an attempt, close one, use one, or refuse the client.
//!
//! Rules (the MultiNAT thesis §3.1, figures 3-2 and 3-3; the delay queue of §3.3.2):
//! - An RST or failure on one uplink is ignored while another attempt may still succeed.
//! - The client is refused only when every attempt has ended without a handshake (all
//!   refused, failed or timed out); [`Outcome::Refused`] when all of them were refused.
//! - The first completion is used at once unless the plan prefers another uplink and that
//!   one is still trying: then it is held for `hold` (the SYN-ACK delay queue). The hold
//!   ends early when the preferred uplink completes (it is used) or fails (the held one is).
//! - Once one uplink is used, every other attempt is closed and nothing reported about them
//!   afterwards — a late RST, a late completion — produces any action: the winner is never
//!   touched.
//!
//! Invariants (checked by the property test below): at most one `Use`, never both `Use` and
//! `RefuseClient`; every started attempt ends exactly once, by `Use`, `Close` or its own
//! refusal/failure; every `Use` names an uplink whose handshake completed; after the
//! decision no action is emitted; with time run out, every race is decided.

use super::predictor::Plan;
use super::{UplinkId, MAX_UPLINKS};
use arrayvec::ArrayVec;
use core::time::Duration;
use multihome_proto::Instant;
use std::collections::VecDeque;

/// What the driver must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Open a connection over this uplink.
    Start(UplinkId),
    /// Close this uplink's attempt (a loser, or a timed-out attempt).
    Close(UplinkId),
    /// Use this uplink's connection for the client.
    Use(UplinkId),
    /// Every attempt failed: refuse the client.
    RefuseClient,
}

/// How a race ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// This uplink's connection is used.
    Chosen(UplinkId),
    /// Every attempt was refused by the destination.
    Refused,
    /// Every attempt ended without a handshake, not all by refusal.
    Failed,
}

/// State of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptState {
    /// Not started yet; starts at this time.
    Planned(Instant),
    /// Connecting; times out at this deadline.
    Pending(Instant),
    /// Handshake completed at this time, not used (yet).
    Connected(Instant),
    /// Used for the client.
    Chosen,
    /// The destination refused (RST).
    Refused,
    /// Failed otherwise (unreachable, local error).
    Failed,
    /// No handshake within the connect timeout.
    TimedOut,
    /// Closed by us after another uplink was chosen.
    Abandoned,
    /// Never started: the race was decided first.
    Skipped,
}

impl AttemptState {
    /// True while the attempt could still be used.
    pub fn alive(self) -> bool {
        matches!(
            self,
            AttemptState::Planned(_) | AttemptState::Pending(_) | AttemptState::Connected(_)
        )
    }

    /// True once the attempt was started.
    pub fn started(self) -> bool {
        !matches!(self, AttemptState::Planned(_) | AttemptState::Skipped)
    }
}

/// What one started attempt showed about its uplink, measured from the attempt's own start
/// (a predictor that learns from every attempt, not only from the first to connect, needs
/// this: an attempt started 250 ms later that completed in 200 ms beat one that took 400).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptReport {
    /// The handshake completed this long after the attempt started.
    Connected(Duration),
    /// The destination refused it (RST).
    Refused,
    /// It failed otherwise (unreachable, local error).
    Failed,
    /// No handshake within the connect timeout.
    TimedOut,
    /// Still connecting when the race was decided, this long after it started: the uplink
    /// is at least this slow (a censored sample, not a failure).
    Unfinished(Duration),
}

/// When one attempt started and how it ended (the states above forget the times).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct AttemptTimes {
    started: Option<Instant>,
    connected: Option<Instant>,
}

/// One connection's race.
#[derive(Debug, Clone)]
pub struct Race {
    started: Instant,
    attempts: ArrayVec<(UplinkId, AttemptState), MAX_UPLINKS>,
    /// Parallel to `attempts`.
    times: ArrayVec<AttemptTimes, MAX_UPLINKS>,
    preferred: Option<UplinkId>,
    hold: Duration,
    advance_on_failure: bool,
    connect_timeout: Duration,
    /// The earliest completion not on the preferred uplink, and when it is released.
    held: Option<(UplinkId, Instant)>,
    first: Option<(UplinkId, Instant)>,
    outcome: Option<(Outcome, Instant)>,
    actions: VecDeque<Action>,
}

impl Race {
    /// Starts a race at `now` following `plan`; each attempt gives up after
    /// `connect_timeout`. Attempts planned at offset 0 are started at once.
    pub fn new(now: Instant, plan: &Plan, connect_timeout: Duration) -> Race {
        let mut attempts = ArrayVec::new();
        for a in &plan.attempts {
            if attempts.iter().any(|(u, _)| *u == a.uplink) {
                continue; // each uplink at most once
            }
            attempts.push((a.uplink, AttemptState::Planned(now + a.start_after)));
        }
        let times = attempts.iter().map(|_| AttemptTimes::default()).collect();
        let mut race = Race {
            started: now,
            attempts,
            times,
            preferred: plan.preferred,
            hold: plan.hold,
            advance_on_failure: plan.advance_on_failure,
            connect_timeout,
            held: None,
            first: None,
            outcome: None,
            actions: VecDeque::new(),
        };
        race.handle_timeout(now);
        race
    }

    /// The handshake over `uplink` completed.
    pub fn handle_connected(&mut self, now: Instant, uplink: UplinkId) {
        let Some(i) = self.pending(uplink) else {
            return; // closed by us already, or never started: nothing to decide
        };
        self.attempts[i].1 = AttemptState::Connected(now);
        self.times[i].connected = Some(now);
        self.first.get_or_insert((uplink, now));
        let preferred_alive = self
            .preferred
            .and_then(|p| self.state(p))
            .is_some_and(AttemptState::alive);
        if self.preferred.is_none()
            || self.preferred == Some(uplink)
            || self.hold.is_zero()
            || !preferred_alive
        {
            self.choose(now, uplink);
        } else if self.held.is_none() {
            self.held = Some((uplink, now + self.hold));
        }
    }

    /// The destination refused the attempt over `uplink` (RST to our SYN).
    pub fn handle_refused(&mut self, now: Instant, uplink: UplinkId) {
        self.end_attempt(now, uplink, AttemptState::Refused);
    }

    /// The attempt over `uplink` failed for another reason (unreachable, local error).
    pub fn handle_failed(&mut self, now: Instant, uplink: UplinkId) {
        self.end_attempt(now, uplink, AttemptState::Failed);
    }

    /// Time passed: start planned attempts, expire attempts and the hold.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.outcome.is_some() {
            return;
        }
        for i in 0..self.attempts.len() {
            let (u, st) = self.attempts[i];
            match st {
                AttemptState::Planned(at) if at <= now => self.start(now, i),
                AttemptState::Pending(deadline) if deadline <= now => {
                    self.attempts[i].1 = AttemptState::TimedOut;
                    self.actions.push_back(Action::Close(u));
                    if self.advance_on_failure {
                        self.start_next(now);
                    }
                }
                _ => {}
            }
        }
        if let Some((u, release)) = self.held {
            if release <= now {
                self.choose(now, u);
                return;
            }
        }
        self.after_loss(now);
    }

    /// The next time `handle_timeout` must be called, if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.outcome.is_some() {
            return None;
        }
        let attempts = self.attempts.iter().filter_map(|(_, st)| match st {
            AttemptState::Planned(t) | AttemptState::Pending(t) => Some(*t),
            _ => None,
        });
        attempts.chain(self.held.map(|(_, t)| t)).min()
    }

    /// The next action for the driver.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// How the race ended, and when; `None` while undecided.
    pub fn outcome(&self) -> Option<(Outcome, Instant)> {
        self.outcome
    }

    /// The uplink whose handshake completed first, and when (used or not).
    pub fn first_connected(&self) -> Option<(UplinkId, Instant)> {
        self.first
    }

    /// When the race started.
    pub fn started_at(&self) -> Instant {
        self.started
    }

    /// The state of the attempt over `uplink`, if the plan has one.
    pub fn state(&self, uplink: UplinkId) -> Option<AttemptState> {
        self.attempts
            .iter()
            .find(|(u, _)| *u == uplink)
            .map(|(_, s)| *s)
    }

    /// Every attempt of the plan with its state.
    pub fn attempts(&self) -> impl Iterator<Item = (UplinkId, AttemptState)> + '_ {
        self.attempts.iter().copied()
    }

    /// What each started attempt showed, once the race is decided (empty before).
    pub fn reports(&self) -> impl Iterator<Item = (UplinkId, AttemptReport)> + '_ {
        let decided = self.outcome.map(|(_, at)| at);
        self.attempts
            .iter()
            .zip(&self.times)
            .filter_map(move |(&(u, st), times)| {
                let (decided, started) = (decided?, times.started?);
                let report = match (times.connected, st) {
                    (Some(at), _) => AttemptReport::Connected(at.saturating_since(started)),
                    (None, AttemptState::Refused) => AttemptReport::Refused,
                    (None, AttemptState::Failed) => AttemptReport::Failed,
                    (None, AttemptState::TimedOut) => AttemptReport::TimedOut,
                    (None, _) => AttemptReport::Unfinished(decided.saturating_since(started)),
                };
                Some((u, report))
            })
    }

    fn pending(&self, uplink: UplinkId) -> Option<usize> {
        self.attempts
            .iter()
            .position(|(u, st)| *u == uplink && matches!(st, AttemptState::Pending(_)))
    }

    fn start(&mut self, now: Instant, i: usize) {
        self.attempts[i].1 = AttemptState::Pending(now + self.connect_timeout);
        self.times[i].started = Some(now);
        self.actions.push_back(Action::Start(self.attempts[i].0));
    }

    /// RFC 8305 §5: when an attempt fails, the next one starts without waiting its turn.
    fn start_next(&mut self, now: Instant) {
        let next = (0..self.attempts.len())
            .filter(|&i| matches!(self.attempts[i].1, AttemptState::Planned(_)))
            .min_by_key(|&i| match self.attempts[i].1 {
                AttemptState::Planned(t) => t,
                _ => unreachable!("filtered"),
            });
        if let Some(i) = next {
            self.start(now, i);
        }
    }

    fn end_attempt(&mut self, now: Instant, uplink: UplinkId, to: AttemptState) {
        let Some(i) = self.pending(uplink) else {
            // A late RST or error on a loser (or on the winner, whose errors belong to the
            // relay now): ignored, so the chosen connection is never touched.
            return;
        };
        self.attempts[i].1 = to;
        if self.advance_on_failure {
            self.start_next(now);
        }
        self.after_loss(now);
    }

    /// After an attempt ended: release a held completion if the preferred uplink is gone;
    /// refuse the client if nothing is left.
    fn after_loss(&mut self, now: Instant) {
        if self.outcome.is_some() {
            return;
        }
        if let Some((u, _)) = self.held {
            let preferred_alive = self
                .preferred
                .and_then(|p| self.state(p))
                .is_some_and(AttemptState::alive);
            if !preferred_alive {
                self.choose(now, u);
                return;
            }
        }
        if self.attempts.iter().any(|(_, st)| st.alive()) {
            return;
        }
        let all_refused = self
            .attempts
            .iter()
            .all(|(_, st)| *st == AttemptState::Refused);
        let outcome = if all_refused && !self.attempts.is_empty() {
            Outcome::Refused
        } else {
            Outcome::Failed
        };
        self.outcome = Some((outcome, now));
        self.actions.push_back(Action::RefuseClient);
    }

    fn choose(&mut self, now: Instant, uplink: UplinkId) {
        self.outcome = Some((Outcome::Chosen(uplink), now));
        self.held = None;
        self.actions.push_back(Action::Use(uplink));
        for (u, st) in self.attempts.iter_mut() {
            *st = match *st {
                _ if *u == uplink => AttemptState::Chosen,
                AttemptState::Pending(_) | AttemptState::Connected(_) => {
                    self.actions.push_back(Action::Close(*u));
                    AttemptState::Abandoned
                }
                AttemptState::Planned(_) => AttemptState::Skipped,
                other => other,
            };
        }
    }
}

#[cfg(test)]
#[path = "conn_tests.rs"]
mod tests;
