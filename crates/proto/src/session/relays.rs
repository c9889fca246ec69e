//! Relays handed out by the server: the server tells a client, inside the session, which
//! detour relays it may use (docs/PROTOCOL.md §15.7), and the client acknowledges the list
//! it applies. The path manager (`detour/manager.rs`) then treats them as candidates beside
//! the client's own.
//!
//! Server: `offer_relays` sets the list (encoded by `wire/relays.rs`) under an epoch; a
//! RELAYS frame rides in the next datagram with room for it, again every `retry` (twice the
//! slowest live path's RTT, at least 100 ms) until a RELAYS_ACK of that epoch comes back.
//! When no datagram had room for `FORCE_AFTER` past its time (a path busy with full-size
//! datagrams), a PING is queued to carry it: the list reaches the client even if every
//! copy so far was lost. Client: only one that announced it takes lists (handshake flag
//! `INIT_FLAG_RELAYS`) applies them; a valid list is acknowledged, and it replaces the one
//! applied if its epoch is newer; an invalid one is refused whole (counted).
//!
//! Invariants: a client holds at most one list of at most `MAX_HANDED_RELAYS` relays; a
//! list is applied whole or not at all; an older epoch never replaces a newer one within a
//! session (a new session starts over, as the server's epoch may have too).

use super::transmit::Job;
use super::{Session, Side};
use crate::detour::RelaySpec;
use crate::path::PathState;
use crate::wire::relays::{self, RelaysFrame, RELAYS_ACK_LEN, RELAYS_HEADER_LEN};
use crate::wire::FrameWriter;
use crate::Instant;
use core::time::Duration;

/// What `status` shows of the handed relay list.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelaysStats {
    /// Server: the epoch offered; client: the epoch applied (0: none).
    pub epoch: u32,
    /// Relays of that list.
    pub relays: usize,
    /// Server: whether the client acknowledged it.
    pub acked: bool,
    /// Server: RELAYS frames sent.
    pub sent: u64,
    /// Client: lists refused (malformed or beyond the bounds).
    pub refused: u64,
}

/// The server's list as it goes on the wire.
#[derive(Debug)]
struct Offer {
    epoch: u32,
    count: u8,
    relays: Vec<u8>,
    acked: bool,
    next_send: Instant,
}

/// Both sides' state (one of the halves is used).
#[derive(Debug, Default)]
pub(super) struct Relays {
    offer: Option<Offer>,
    /// Client: lists are taken (we said so in the handshake).
    accept: bool,
    /// Client: the list applied, and whether the caller has not taken it yet.
    applied: Option<(u32, Vec<RelaySpec>)>,
    fresh: bool,
    /// Client: the epoch to acknowledge in the next datagram.
    ack_due: Option<u32>,
    stats: RelaysStats,
}

/// Shortest wait before a RELAYS frame is sent again.
const MIN_RETRY: Duration = Duration::from_millis(100);
/// A list this late for want of room gets a PING of its own.
const FORCE_AFTER: Duration = Duration::from_millis(500);

impl Relays {
    /// Server: whether a list waits for its acknowledgement (the session stays active
    /// meanwhile: a path that failed under it is probed back within detect / 4, and the
    /// list goes again as soon as it is, `keepalive.rs`).
    pub(super) fn pending(&self) -> bool {
        self.offer.as_ref().is_some_and(|o| !o.acked)
    }
}

impl Session {
    /// Server: hands the client `relays` (encoded by `wire::relays::encode`, `count` of
    /// them) under `epoch`. The same epoch again (a rekey) changes nothing.
    pub fn offer_relays(&mut self, epoch: u32, count: u8, relays: &[u8]) {
        if self.relays.offer.as_ref().is_some_and(|o| o.epoch == epoch) {
            return;
        }
        self.relays.offer = Some(Offer {
            epoch,
            count,
            relays: relays.to_vec(),
            acked: false,
            next_send: Instant::ZERO,
        });
    }

    /// Client: lists from the server are taken (the endpoint announced it).
    pub fn accept_relays(&mut self) {
        self.relays.accept = true;
    }

    /// Client: the server's newest list, once, when it changed.
    pub fn take_relays(&mut self) -> Option<Vec<RelaySpec>> {
        let r = &mut self.relays;
        core::mem::take(&mut r.fresh)
            .then(|| r.applied.as_ref().map(|(_, l)| l.clone()))
            .flatten()
    }

    /// The relay list's figures.
    pub fn relays_stats(&self) -> RelaysStats {
        let r = &self.relays;
        match (&r.offer, &r.applied) {
            (Some(o), _) => RelaysStats {
                epoch: o.epoch,
                relays: usize::from(o.count),
                acked: o.acked,
                ..r.stats
            },
            (None, Some((epoch, l))) => RelaysStats {
                epoch: *epoch,
                relays: l.len(),
                ..r.stats
            },
            (None, None) => r.stats,
        }
    }

    /// A RELAYS frame arrived.
    pub(super) fn on_relays(&mut self, f: &RelaysFrame<'_>) {
        if self.side != Side::Client || !self.relays.accept {
            self.counters.rx_malformed += 1;
            return;
        }
        let list = match relays::decode(f) {
            Ok(l) => l,
            Err(_) => {
                self.relays.stats.refused += 1;
                self.counters.rx_malformed += 1;
                return;
            }
        };
        let r = &mut self.relays;
        if r.applied.as_ref().is_none_or(|(e, _)| f.epoch > *e) {
            r.applied = Some((f.epoch, list));
            r.fresh = true;
        }
        r.ack_due = Some(f.epoch);
    }

    /// A RELAYS_ACK arrived: the client applies that epoch.
    pub(super) fn on_relays_ack(&mut self, epoch: u32) {
        if let Some(o) = self.relays.offer.as_mut().filter(|o| o.epoch == epoch) {
            o.acked = true;
        }
    }

    /// Writes what is due into a datagram being built, within `room` bytes: the client's
    /// RELAYS_ACK, the server's RELAYS frame while unacknowledged (again `retry` after the
    /// last one that went). `None` only if the writer failed.
    pub(super) fn write_relays(
        &mut self,
        now: Instant,
        w: &mut FrameWriter<'_>,
        room: usize,
    ) -> Option<()> {
        if let Some(epoch) = self.relays.ack_due {
            if room >= RELAYS_ACK_LEN {
                w.relays_ack(epoch).ok()?;
                self.relays.ack_due = None;
            }
            return Some(());
        }
        let retry = (self.live_rtt_range().1 * 2).max(MIN_RETRY);
        let Some(o) = self.relays.offer.as_mut() else {
            return Some(());
        };
        if o.acked || o.next_send > now || room < RELAYS_HEADER_LEN + o.relays.len() {
            return Some(());
        }
        w.relays(&RelaysFrame {
            epoch: o.epoch,
            count: o.count,
            relays: &o.relays,
        })
        .ok()?;
        o.next_send = now + retry;
        self.relays.stats.sent += 1;
        Some(())
    }

    /// Server: when an unacknowledged list will have waited `FORCE_AFTER` past its time.
    pub(super) fn relays_deadline(&self) -> Option<Instant> {
        let o = self.relays.offer.as_ref().filter(|o| !o.acked)?;
        Some(o.next_send + FORCE_AFTER)
    }

    /// Server: a list that found no room by its deadline gets a PING on the first live
    /// path (one already queued carries it too); its time is now either way, so the
    /// deadline moves on even with no path to send on.
    pub(super) fn relays_timeout(&mut self, now: Instant) {
        if self.relays_deadline().is_none_or(|d| d > now) {
            return;
        }
        if let Some(o) = self.relays.offer.as_mut() {
            o.next_send = now;
        }
        let live = self
            .paths
            .iter_mut()
            .find(|s| s.path.state() != PathState::Down && s.path.available());
        if let Some(s) = live.filter(|s| !s.ping_queued) {
            s.ping_queued = true;
            self.jobs.push_back(Job::Ping { path: s.path.id() });
        }
    }
}
