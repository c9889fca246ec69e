//! The receiver states its own policy: the client tells the server, inside the session,
//! how its downlink traffic is to be treated — its rules and default, link policies
//! included — and the server applies that to the packets it sends the client. This is
//! MobilityFirst's host-stated policy (the host's GNRS entry, which the network applies
//! to traffic towards it); the DATA flags' two-bit code cannot say `only:wifi`.
//!
//! Client: `state_policy` encodes the classifier under a new epoch; a POLICY frame
//! (`wire/stated.rs`) rides in the next datagram with room for it, again every `retry`
//! until a POLICY_ACK of that epoch comes back. Server: a valid statement with a newer
//! epoch than the one in force replaces it; every valid one is acknowledged in the next
//! datagram (a lost ACK makes the client send it again); an invalid one is refused whole
//! (counted).
//!
//! What the server applies to a downlink packet (`downlink_policy`): the first stated
//! rule that matches it (rules match ports either way, so they fit the reverse
//! direction); else the policy learned from the client's packets of its flow (which
//! carries a DSCP-chosen `realtime` and its deadline), where a learned `best` stands for
//! the stated default if that is a link policy (link policies travel as `best`); else
//! the stated default; with no statement, the learned policy or the server's default.
//!
//! Invariants: the server holds at most one statement per session, of at most
//! `MAX_STATED_RULES` rules; a statement is applied whole or not at all; an older epoch
//! never replaces a newer one.

use super::{Session, Side};
use crate::policy::{Classifier, Policy};
use crate::wire::stated::{self, PolicyFrame, POLICY_ACK_LEN, POLICY_HEADER_LEN};
use crate::wire::FrameWriter;
use crate::Instant;
use core::time::Duration;

/// What `status` shows of the stated policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatedStats {
    /// Client: the epoch stated; server: the epoch in force (0: none).
    pub epoch: u32,
    /// Rules of that statement.
    pub rules: usize,
    /// Client: whether the server acknowledged it.
    pub acked: bool,
    /// Server: statements refused (invalid or beyond the bounds).
    pub refused: u64,
    /// Client: POLICY frames sent.
    pub sent: u64,
}

/// The client's statement as it goes on the wire.
#[derive(Debug)]
struct Ours {
    epoch: u32,
    default: (u8, u16),
    rules: Vec<u8>,
    acked: bool,
    next_send: Instant,
}

/// Both sides' state (one of the halves is used).
#[derive(Debug, Default)]
pub(super) struct Stated {
    ours: Option<Ours>,
    theirs: Option<(u32, Classifier)>,
    /// Server: the epoch to acknowledge in the next datagram.
    ack_due: Option<u32>,
    stats: StatedStats,
}

impl Stated {
    /// Client: whether a statement waits for its acknowledgement (the session stays
    /// active meanwhile, so it is sent again within round trips, `keepalive.rs`).
    pub(super) fn pending(&self) -> bool {
        self.ours.as_ref().is_some_and(|o| !o.acked)
    }
}

/// Shortest wait before a POLICY frame is sent again.
const MIN_RETRY: Duration = Duration::from_millis(100);

impl Session {
    /// Client: states `c` to the server (a new epoch). Returns false if it cannot be
    /// stated (more than `MAX_STATED_RULES` rules; the config refuses that).
    pub fn state_policy(&mut self, c: &Classifier) -> bool {
        let Some(rules) = stated::encode_rules(c) else {
            return false;
        };
        let epoch = self.stated.ours.as_ref().map_or(1, |o| o.epoch + 1);
        self.stated.ours = Some(Ours {
            epoch,
            default: stated::policy_code(c.default),
            rules,
            acked: false,
            next_send: Instant::ZERO,
        });
        true
    }

    /// The stated policy's figures.
    pub fn stated_stats(&self) -> StatedStats {
        let s = &self.stated;
        match (&s.ours, &s.theirs) {
            (Some(o), _) => StatedStats {
                epoch: o.epoch,
                rules: o.rules.len() / stated::RULE_LEN,
                acked: o.acked,
                ..s.stats
            },
            (None, Some((epoch, c))) => StatedStats {
                epoch: *epoch,
                rules: c.rules.len(),
                ..s.stats
            },
            (None, None) => s.stats,
        }
    }

    /// Server: the client's statement in force, with its epoch.
    pub fn stated_policy(&self) -> Option<(u32, &Classifier)> {
        self.stated.theirs.as_ref().map(|(e, c)| (*e, c))
    }

    /// Server: the policy of a packet for the client (see the module doc); `default` is
    /// the server's own.
    pub fn downlink_policy(&self, packet: &[u8], default: Policy) -> Policy {
        let learned = self.learned_policy(packet);
        let Some((_, c)) = &self.stated.theirs else {
            return learned.unwrap_or(default);
        };
        if let Some(p) = c.rule_policy(packet) {
            return p;
        }
        match learned {
            Some(Policy::Best) if matches!(c.default, Policy::Link(_)) => c.default,
            Some(p) => p,
            None => c.classify(packet),
        }
    }

    /// A POLICY frame arrived.
    pub(super) fn on_policy(&mut self, f: &PolicyFrame<'_>) {
        if self.side != Side::Server {
            self.counters.rx_malformed += 1;
            return;
        }
        let c = match stated::decode(f) {
            Ok(c) => c,
            Err(_) => {
                self.stated.stats.refused += 1;
                self.counters.rx_malformed += 1;
                return;
            }
        };
        let newer = self
            .stated
            .theirs
            .as_ref()
            .is_none_or(|(e, _)| f.epoch > *e);
        if newer {
            self.stated.theirs = Some((f.epoch, c));
        }
        self.stated.ack_due = Some(f.epoch);
    }

    /// A POLICY_ACK arrived: the server applies that epoch.
    pub(super) fn on_policy_ack(&mut self, epoch: u32) {
        if let Some(o) = self.stated.ours.as_mut().filter(|o| o.epoch == epoch) {
            o.acked = true;
        }
    }

    /// Writes what is due into a datagram being built, within `room` bytes: the client's
    /// POLICY frame while unacknowledged (again `retry` after the last one that went:
    /// twice the slowest live path's RTT, at least `MIN_RETRY`), the server's POLICY_ACK.
    /// They ride in datagrams that go anyway (a path with nothing else to carry still
    /// gets a keepalive probe every detect/4 while the statement is unacknowledged,
    /// `keepalive.rs`), so stating costs no datagram of its own. `None` only if the
    /// writer failed.
    pub(super) fn write_stated(
        &mut self,
        now: Instant,
        w: &mut FrameWriter<'_>,
        room: usize,
    ) -> Option<()> {
        if let Some(epoch) = self.stated.ack_due {
            if room >= POLICY_ACK_LEN {
                w.policy_ack(epoch).ok()?;
                self.stated.ack_due = None;
            }
            return Some(());
        }
        let retry = (self.live_rtt_range().1 * 2).max(MIN_RETRY);
        let Some(o) = self.stated.ours.as_mut() else {
            return Some(());
        };
        if o.acked || o.next_send > now || room < POLICY_HEADER_LEN + o.rules.len() {
            return Some(());
        }
        w.policy(&PolicyFrame {
            epoch: o.epoch,
            default: o.default,
            rules: &o.rules,
        })
        .ok()?;
        o.next_send = now + retry;
        self.stated.stats.sent += 1;
        Some(())
    }
}
