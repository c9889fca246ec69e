//! NAT mode's race (the MultiNAT thesis §3.1, §3.3): the client's own SYN is copied out on
//! every uplink the plan names, and the SYN-ACKs and RSTs that come back are judged here.
//!
//! [`NatRace`] wraps a [`Race`] and turns its decisions into packet actions. The daemon
//! reports each SYN-ACK or RST that arrives for one of the race's uplink-side 4-tuples and
//! gets, for a SYN-ACK, a verdict on that packet ([`SynAckVerdict`]); for a RST nothing (it
//! is always dropped: the client never sees a server's RST directly, it is refused by
//! [`NatAction::RefuseClient`] instead). Rules:
//!
//! - The first SYN-ACK is forwarded to the client unless the plan prefers another uplink
//!   that is still trying: then it is **held** (kept in the netfilter queue: the thesis's
//!   SYN-ACK delay queue, §3.3.2) until the preferred one answers (its SYN-ACK is
//!   forwarded, the held one reset), fails, or the hold ends (the held one is forwarded).
//! - Every SYN-ACK that is not forwarded is answered with a RST on its uplink, whenever it
//!   arrives (a loser, a late one, one after a refusal); the winner's retransmitted SYN-ACK
//!   is forwarded again (the client's SYN-ACK may have been lost).
//! - A RST is ignored while another uplink may still connect; the client is refused only
//!   when every attempt has ended without a SYN-ACK; a late RST on a loser is ignored.
//!
//! Invariants (property test in `nat` tests): every reported SYN-ACK gets exactly one fate
//! — forwarded or reset, at once or later through [`NatAction::ForwardHeld`] /
//! [`NatAction::ResetHeld`]; at most one uplink is ever forwarded; never both a forward and
//! a refusal; once decided, no held SYN-ACK remains.

use super::conn::{Action, AttemptState, Race};
use super::{UplinkId, MAX_UPLINKS};
use multihome_proto::Instant;
use std::collections::VecDeque;

/// What the daemon must do for a NAT-mode connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NatAction {
    /// Send a copy of the client's SYN out of this uplink, from its address.
    SendSyn(UplinkId),
    /// This uplink won: hand the flow to the kernel's NAT over it, and forward its held
    /// SYN-ACK (readdressed) to the client.
    ForwardHeld(UplinkId),
    /// Answer this uplink's held SYN-ACK with a RST.
    ResetHeld(UplinkId),
    /// Every attempt ended without a SYN-ACK: refuse the client's SYN.
    RefuseClient,
}

/// What to do with a SYN-ACK just reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SynAckVerdict {
    /// Keep it; a later [`NatAction::ForwardHeld`] or [`NatAction::ResetHeld`] says which.
    Hold,
    /// Forward it to the client now (a retransmission of the winner's).
    Forward,
    /// Answer it with a RST now.
    Reset,
    /// Drop it: a duplicate of the SYN-ACK held for the same uplink.
    Drop,
}

/// One NAT-mode connection's race.
#[derive(Debug, Clone)]
pub struct NatRace {
    race: Race,
    held: [bool; MAX_UPLINKS],
    winner: Option<UplinkId>,
    actions: VecDeque<NatAction>,
}

impl NatRace {
    /// Wraps a race just begun (its first attempts become [`NatAction::SendSyn`]).
    pub fn new(race: Race) -> NatRace {
        let mut me = NatRace {
            race,
            held: [false; MAX_UPLINKS],
            winner: None,
            actions: VecDeque::new(),
        };
        me.pump();
        me
    }

    /// A SYN-ACK arrived on `uplink`.
    pub fn on_syn_ack(&mut self, now: Instant, uplink: UplinkId) -> SynAckVerdict {
        if let Some(w) = self.winner {
            return if w == uplink {
                SynAckVerdict::Forward
            } else {
                SynAckVerdict::Reset
            };
        }
        match self.race.state(uplink) {
            Some(AttemptState::Pending(_)) if self.race.outcome().is_none() => {
                self.held[uplink.index()] = true;
                self.race.handle_connected(now, uplink);
                self.pump();
                SynAckVerdict::Hold
            }
            Some(AttemptState::Connected(_)) if self.held[uplink.index()] => SynAckVerdict::Drop,
            _ => SynAckVerdict::Reset,
        }
    }

    /// A RST arrived on `uplink` (the destination refused it there).
    pub fn on_rst(&mut self, now: Instant, uplink: UplinkId) {
        self.race.handle_refused(now, uplink);
        self.pump();
    }

    /// Sending the SYN copy over `uplink` failed (no route, no address).
    pub fn on_failed(&mut self, now: Instant, uplink: UplinkId) {
        self.race.handle_failed(now, uplink);
        self.pump();
    }

    /// Time passed (at [`Self::poll_timeout`]).
    pub fn on_timeout(&mut self, now: Instant) {
        self.race.handle_timeout(now);
        self.pump();
    }

    /// When [`Self::on_timeout`] is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.race.poll_timeout()
    }

    /// The next action.
    pub fn poll_action(&mut self) -> Option<NatAction> {
        self.actions.pop_front()
    }

    /// The race (for its outcome and the predictor's reports).
    pub fn race(&self) -> &Race {
        &self.race
    }

    /// The winning uplink, once forwarded.
    pub fn winner(&self) -> Option<UplinkId> {
        self.winner
    }

    fn pump(&mut self) {
        while let Some(a) = self.race.poll_action() {
            let out = match a {
                Action::Start(u) => Some(NatAction::SendSyn(u)),
                Action::Use(u) => {
                    self.winner = Some(u);
                    self.take_held(u).then_some(NatAction::ForwardHeld(u))
                }
                Action::Close(u) => self.take_held(u).then_some(NatAction::ResetHeld(u)),
                Action::RefuseClient => Some(NatAction::RefuseClient),
            };
            self.actions.extend(out);
        }
    }

    fn take_held(&mut self, u: UplinkId) -> bool {
        self.held
            .get_mut(u.index())
            .is_some_and(|h| std::mem::replace(h, false))
    }
}

#[cfg(test)]
#[path = "nat_tests.rs"]
mod tests;
