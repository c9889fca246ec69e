//! Store-and-forward: IP packets kept while the session has no live path, sent when one
//! comes back (MobilityFirst's store-and-forward across disconnection, §4.2: a vehicle
//! passing Wi-Fi hotspots is more often out of reach than in it).
//!
//! When the session has no live path — every path `Down` (no feedback for the detection
//! time, or its interface gone) and nothing heard from the peer since — a packet for the
//! peer is held here instead of being sent into the void; so is everything the session
//! had sent since the paths' last feedback (their unacknowledged data and the
//! reinjection queue, all lost with the link) and the paced queues (CoDel would drop
//! their packets for their age). A path is live again when it is not `Down` (an ACK or a handshake
//! proved it) or when an authenticated datagram from the peer arrived on it within the
//! detection time: on the server that is the first datagram from the client's new
//! address, which `admit_path` has just followed. The held packets then go out at once,
//! in order, on that one path, each when its pacer allows and within a window capped at
//! 1.25 × the path's estimated bandwidth-delay product (so no burst overflows the link's
//! queue: `cap_release_windows`), before anything newer of theirs.
//!
//! `only:<link>` packets have a queue of their own, held while that link is not live
//! even if others are; the other packets share one queue.
//!
//! Invariants: held bytes never exceed `SessionConfig::hold_max_bytes` and no packet is
//! held longer than `hold_max_age` (the oldest go first, counted by cause); a packet
//! joins a queue only at its tail and leaves only at its head, and while a queue is not
//! empty every new packet of that queue joins it (so order holds); realtime packets are
//! never held (they would be late).

use super::reinject::Reinjection;
use super::{Job, Session};
use crate::path::{PathId, PathState, PathView};
use crate::policy::{LinkRule, Policy};
use crate::sched::MAX_PATHS;
use crate::wire::DataFlags;
use crate::Instant;
use core::time::Duration;
use std::collections::VecDeque;
use std::sync::Arc;

/// Smallest window a path releasing a hold is capped at (`cap_release_windows`).
const RELEASE_MIN_WINDOW: f64 = 32.0 * 1024.0;

/// What a held packet still needs before it can be sent.
#[derive(Debug, Clone, Copy)]
pub(super) enum Held {
    /// A new packet under its policy: scheduled as if it had just arrived.
    Fresh(Policy),
    /// A packet already numbered and sent once (lost with its path): sent again with its
    /// `data_seq`, unordered, like a reinjection (the receiver drops it if the first copy
    /// did arrive); a link policy's rule goes with it.
    Numbered {
        data_seq: u64,
        flags: DataFlags,
        link: Option<LinkRule>,
    },
}

#[derive(Debug, Clone)]
struct Entry {
    at: Instant,
    held: Held,
    packet: Arc<[u8]>,
}

/// Hold statistics (shown by `status`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HoldStats {
    /// IP packets held now.
    pub packets: u64,
    /// Bytes held now.
    pub bytes: u64,
    /// When the oldest packet held now was held.
    pub oldest_since: Option<Instant>,
    /// Packets dropped because the byte bound was reached (oldest first).
    pub dropped_bytes: u64,
    /// Packets dropped because they were held longer than the age bound.
    pub dropped_age: u64,
    /// Packets released to a path that came back.
    pub released: u64,
}

/// The held packets: one queue for packets any path may carry, one per `only:` link.
#[derive(Debug, Default)]
pub(super) struct Store {
    /// `None`: any path; `Some(l)`: only link `l`.
    queues: Vec<(Option<PathId>, VecDeque<Entry>)>,
    bytes: usize,
    stats: HoldStats,
    /// When the pacer of the path releasing held packets opens next.
    wake: Option<Instant>,
    /// The path the shared queue is being released on: kept while it is live (heard
    /// from: each path remembers that on its own, `PathSlot::heard_while_down`), so a
    /// second path coming back does not overtake what the first one carries, which goes
    /// unordered.
    releasing: Option<PathId>,
}

impl Store {
    fn queue_mut(&mut self, key: Option<PathId>) -> &mut VecDeque<Entry> {
        let i = match self.queues.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                self.queues.push((key, VecDeque::new()));
                self.queues.len() - 1
            }
        };
        &mut self.queues[i].1
    }

    fn has(&self, key: Option<PathId>) -> bool {
        self.queues.iter().any(|(k, q)| *k == key && !q.is_empty())
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0 && self.queues.iter().all(|(_, q)| q.is_empty())
    }

    fn push(&mut self, key: Option<PathId>, e: Entry, max_bytes: usize) {
        let len = e.packet.len();
        while self.bytes + len > max_bytes && self.pop_oldest() {
            self.stats.dropped_bytes += 1;
        }
        if self.bytes + len > max_bytes {
            self.stats.dropped_bytes += 1;
            return;
        }
        self.bytes += len;
        self.queue_mut(key).push_back(e);
    }

    /// The queue whose head is oldest.
    fn oldest(&self) -> Option<usize> {
        self.queues
            .iter()
            .enumerate()
            .filter_map(|(i, (_, q))| q.front().map(|e| (e.at, i)))
            .min()
            .map(|(_, i)| i)
    }

    fn pop_oldest(&mut self) -> bool {
        let Some(i) = self.oldest() else {
            return false;
        };
        self.pop(i).is_some()
    }

    fn pop(&mut self, i: usize) -> Option<Entry> {
        let e = self.queues[i].1.pop_front()?;
        self.bytes -= e.packet.len();
        Some(e)
    }

    /// When the oldest held packet reaches the age bound.
    fn expiry(&self, max_age: Duration) -> Option<Instant> {
        let i = self.oldest()?;
        self.queues[i].1.front().map(|e| e.at + max_age)
    }

    /// Drops what was held for `max_age` or longer.
    fn expire(&mut self, now: Instant, max_age: Duration) {
        while let Some(i) = self.oldest() {
            let old = self.queues[i]
                .1
                .front()
                .is_some_and(|e| now.saturating_since(e.at) >= max_age);
            if !old {
                break;
            }
            self.pop(i);
            self.stats.dropped_age += 1;
        }
    }

    /// Everything held, as new packets (for a new session after the server restarted:
    /// its numbering starts over).
    fn into_fresh(mut self) -> Store {
        for (_, q) in &mut self.queues {
            for e in q.iter_mut() {
                if let Held::Numbered { flags, link, .. } = e.held {
                    let code = Policy::from_code(flags.policy_code());
                    e.held = Held::Fresh(link.map_or(code, Policy::Link));
                }
            }
        }
        self.wake = None;
        self.releasing = None;
        self
    }
}

/// The queue a packet of `policy` is held in.
fn key_of(policy: Policy) -> Option<PathId> {
    link_key(policy.link_rule())
}

/// The queue of a packet under link rule `link`: its own for `only:`, else the shared one.
fn link_key(link: Option<LinkRule>) -> Option<PathId> {
    match link {
        Some(LinkRule::Only(l)) => Some(l),
        _ => None,
    }
}

impl Session {
    /// Hold statistics.
    pub fn hold_stats(&self) -> HoldStats {
        let s = &self.store;
        HoldStats {
            packets: s.queues.iter().map(|(_, q)| q.len() as u64).sum(),
            bytes: s.bytes as u64,
            oldest_since: s.oldest().and_then(|i| s.queues[i].1.front().map(|e| e.at)),
            ..s.stats
        }
    }

    /// What each hold queue holds now: `(None, …)` the shared one, `(Some(l), …)` the one of
    /// `only:` link `l`; packets and bytes.
    pub fn hold_queues(&self) -> Vec<(Option<PathId>, u64, u64)> {
        self.store
            .queues
            .iter()
            .map(|(k, q)| {
                let bytes = q.iter().map(|e| e.packet.len() as u64).sum();
                (*k, q.len() as u64, bytes)
            })
            .collect()
    }

    /// Whether path `id` may carry data: not `Down`, or heard from within the
    /// detection time.
    fn is_live(&self, now: Instant, id: PathId) -> bool {
        let heard = |t: Instant| now.saturating_since(t) < self.cfg.detect;
        self.paths
            .iter()
            .find(|s| s.path.id() == id)
            .is_some_and(|s| {
                s.path.available()
                    && (s.path.state() != PathState::Down || s.heard_while_down.is_some_and(heard))
            })
    }

    /// Whether `p` is `Up`, or no live path is.
    fn path_is_up_or_only(&self, now: Instant, p: PathId) -> bool {
        let up = |id: PathId| {
            self.paths
                .iter()
                .any(|s| s.path.id() == id && s.path.state() == PathState::Up)
        };
        up(p)
            || !self
                .paths
                .iter()
                .any(|s| self.is_live(now, s.path.id()) && up(s.path.id()))
    }

    /// Whether any path is live.
    pub(super) fn any_live(&self, now: Instant) -> bool {
        self.has_release_path(now, None)
    }

    /// Whether queue `key` has a release path (`release_path(now, key).is_some()`): for
    /// `only:` its link is live, else any path is (every candidate `release_path` weighs
    /// is live). Asked for every packet the tunnel sends, so it skips the choice: at
    /// 1 Gbit/s the ranking of live paths was 8 % of the client's CPU.
    fn has_release_path(&self, now: Instant, key: Option<PathId>) -> bool {
        match key {
            Some(l) => self.is_live(now, l),
            None => self.paths.iter().any(|s| self.is_live(now, s.path.id())),
        }
    }

    /// The path held packets of queue `key` leave on: the link itself for `only:`; else
    /// the live path with the lowest minimum RTT, `Up` ones first.
    fn release_path(&self, now: Instant, key: Option<PathId>) -> Option<PathId> {
        if let Some(l) = key {
            return self.is_live(now, l).then_some(l);
        }
        // The path already releasing while it is live: a copy sent on another path could
        // overtake the ones before it, which go unordered. Else the one `best` uses, else
        // the fastest live one.
        if let Some(p) = self.store.releasing.filter(|&p| self.is_live(now, p)) {
            return Some(p);
        }
        let sticky = self
            .best
            .current()
            .filter(|&p| self.is_live(now, p) && self.path_is_up_or_only(now, p));
        if sticky.is_some() {
            return sticky;
        }
        self.paths
            .iter()
            .filter(|s| self.is_live(now, s.path.id()))
            .min_by_key(|s| (s.path.state() != PathState::Up, s.path.rtt().min()))
            .map(|s| s.path.id())
    }

    /// Whether a packet under `policy` must be held: its queue is not empty (order), or
    /// no path that may carry it is live.
    pub(super) fn must_hold(&self, now: Instant, policy: Policy) -> bool {
        if matches!(policy, Policy::Realtime { .. }) {
            return false;
        }
        let key = key_of(policy);
        let unpaced = policy == Policy::Aggregate && !self.any_usable();
        self.store.has(key) || unpaced || !self.has_release_path(now, key)
    }

    /// Holds a new packet.
    pub(super) fn hold(&mut self, now: Instant, policy: Policy, packet: Arc<[u8]>) {
        let e = Entry {
            at: now,
            held: Held::Fresh(policy),
            packet,
        };
        self.store.push(key_of(policy), e, self.cfg.hold_max_bytes);
    }

    /// An authenticated datagram arrived on path `id`: if it is `Down`, the peer is
    /// reachable there again (its address is already followed).
    pub(super) fn heard_on(&mut self, now: Instant, id: PathId) {
        if let Some(s) = self
            .paths
            .iter_mut()
            .find(|s| s.path.id() == id && s.path.state() == PathState::Down)
        {
            s.heard_while_down = Some(now);
        }
    }

    /// The last live path died: what it had sent since its last feedback is lost, and
    /// what waits to be sent would be sent into the void. All of it is held, oldest first.
    pub(super) fn hold_everything(&mut self, now: Instant) {
        let mut sent: Vec<Reinjection> = Vec::new();
        for s in &mut self.paths {
            sent.extend(s.in_flight.drain());
        }
        sent.extend(self.reinject.drain(..));
        self.hold_sent(now, sent);
        while let Some(packet) = self.best_queue.take() {
            self.hold(now, Policy::Best, packet);
        }
        for (rule, packet) in self.link_queues.drain_where(|_| true) {
            self.hold(now, Policy::Link(rule), packet);
        }
        while let Some(packet) = self.agg_queue.take() {
            self.hold(now, Policy::Aggregate, packet);
        }
    }

    /// Path `id` went `Down`: if no path is live any more, everything is held; else its
    /// unacknowledged `only:` data (which no other link may carry) is.
    pub(super) fn on_path_down(&mut self, now: Instant, id: PathId) {
        if !self.any_live(now) {
            self.hold_everything(now);
            return;
        }
        let Some(slot) = self.paths.iter_mut().find(|s| s.path.id() == id) else {
            return;
        };
        let mut only = slot.in_flight.take_only();
        // Its `only:` repairs waiting to leave, and its `only:` queue, wait for it too:
        // no other link may carry them, and they would hold up the others' data.
        let of_link = |l: Option<LinkRule>| l == Some(LinkRule::Only(id));
        let (mine, others): (VecDeque<_>, VecDeque<_>) =
            self.reinject.drain(..).partition(|r| of_link(r.link));
        self.reinject = others;
        only.extend(mine);
        self.hold_sent(now, only);
        for (rule, packet) in self.link_queues.drain_where(|r| of_link(Some(r))) {
            self.hold(now, Policy::Link(rule), packet);
        }
    }

    /// Holds packets already sent (lost with their path), ordered by `data_seq`, each in
    /// its queue.
    fn hold_sent(&mut self, now: Instant, mut sent: Vec<Reinjection>) {
        sent.sort_by_key(|r| r.data_seq);
        sent.dedup_by_key(|r| r.data_seq);
        let max = self.cfg.hold_max_bytes;
        for r in sent {
            let e = Entry {
                at: now,
                held: Held::Numbered {
                    data_seq: r.data_seq,
                    flags: r.flags,
                    link: r.link,
                },
                packet: r.packet,
            };
            self.store.push(link_key(r.link), e, max);
        }
    }

    /// Sends held packets on the paths that came back, each when its path's pacer
    /// allows; returns whether it queued a job.
    pub(super) fn release_held(&mut self, now: Instant) -> bool {
        self.store.wake = None;
        let mut queued = false;
        for i in 0..self.store.queues.len() {
            queued |= self.release_queue(now, i);
        }
        queued
    }

    /// Releases the head of queue `i` if its path may send it now: an aggregate packet
    /// moves to the aggregate queue when it is empty (it stripes and paces it); any other
    /// packet becomes a job on the queue's release path once its pacer is open. Returns
    /// whether a job was queued.
    fn release_queue(&mut self, now: Instant, i: usize) -> bool {
        let key = self.store.queues[i].0;
        let Some(path) = self.release_path(now, key) else {
            return false;
        };
        if key.is_none() {
            self.store.releasing = Some(path);
        }
        loop {
            let Some((held, len)) = self.store.queues[i]
                .1
                .front()
                .map(|e| (e.held, e.packet.len()))
            else {
                if key.is_none() {
                    self.store.releasing = None;
                }
                return false;
            };
            let striped = matches!(held, Held::Fresh(Policy::Aggregate));
            if striped && self.any_usable() {
                // One at a time, when the queue is empty: the scheduler takes it as soon as
                // a path's window and pacer allow, so CoDel never sees held packets wait
                // (their time in the store is not a standing queue to signal).
                if !self.agg_queue.is_empty() {
                    return false;
                }
                if let Some(e) = self.store.pop(i) {
                    self.store.stats.released += 1;
                    self.agg_queue.push(now, e.packet);
                }
                continue;
            }
            if !self.path_may_send(now, path, len) {
                return false;
            }
            let Some(e) = self.store.pop(i) else {
                return false;
            };
            self.store.stats.released += 1;
            match e.held {
                Held::Fresh(Policy::Aggregate) => self.stripe_on(now, e.packet, path),
                Held::Fresh(policy) => self.send_now(now, e.packet, policy, Some(path)),
                Held::Numbered {
                    data_seq,
                    flags,
                    link,
                } => self.jobs.push_back(Job::Data {
                    path,
                    seq: data_seq,
                    flags: DataFlags::new(flags.policy_code(), false),
                    pred_gap: 0,
                    deadline_ms: 0,
                    // A held packet goes out once, on the path that came back.
                    kernel_copies: false,
                    packet: e.packet,
                    link,
                }),
            }
            return true;
        }
    }

    /// While held packets are being released, caps each path's window in `views` at
    /// 1.25 × its estimated bandwidth-delay product (at least 32 KiB, the smallest
    /// window), so a hold ramps up as probing does: a path still in startup paces at
    /// twice its estimate, which after an outage is stale (the client may be on another
    /// network), and fed a whole hold at that pace a 60 ms link with 100 ms of drop-tail
    /// queue lost 15 datagrams a direction, whose repairs landed after the receiver's
    /// reorder buffer had given up on them (3–10 packets out of order). The cap keeps
    /// the queue a hold builds within a quarter of a round trip.
    pub(super) fn cap_release_windows(&self, views: &mut [PathView]) {
        if self.store.releasing.is_none() {
            return;
        }
        for v in views {
            let bdp = v.bandwidth_bps * v.min_rtt.as_secs_f64();
            let cap = (1.25 * bdp).max(RELEASE_MIN_WINDOW) as u64;
            v.cwnd_bytes = v.cwnd_bytes.min(cap);
        }
    }

    /// Whether some path is proven (not `Down`): the aggregate scheduler has a path to
    /// pace on.
    fn any_usable(&self) -> bool {
        self.paths
            .iter()
            .any(|s| s.path.available() && s.path.state() != PathState::Down)
    }

    /// An aggregate packet sent on `path` alone, numbered and ordered in its flow as if
    /// it had left the aggregate queue (no path is proven yet: the scheduler would
    /// copy it onto every path, unpaced).
    fn stripe_on(&mut self, now: Instant, packet: Arc<[u8]>, path: PathId) {
        let flow = crate::policy::parse_flow(&packet).map(|(k, _)| k);
        let s = super::schedule::number_striped(
            packet,
            &mut self.flow_meter,
            &mut self.next_data_seq,
            now,
            (flow, Policy::Aggregate),
            true,
            self.cfg.flow_order,
        );
        let sel = crate::sched::one(path);
        self.push_data_jobs(sel, s.seq, (s.flags, s.pred_gap), (0, None), s.packet);
    }

    /// Whether `path`'s pacer (and window, once the path is proven) lets `len` bytes go
    /// now; if only the pacer is closed, the store wakes when it opens.
    fn path_may_send(&mut self, now: Instant, path: PathId, len: usize) -> bool {
        let Some(mut v) = self
            .paths
            .iter()
            .take(MAX_PATHS)
            .find(|s| s.path.id() == path)
            .map(|s| s.path.view(now))
        else {
            return false;
        };
        self.cap_release_windows(core::slice::from_mut(&mut v));
        if v.ready_at > now {
            let w = self.store.wake.map_or(v.ready_at, |w| w.min(v.ready_at));
            self.store.wake = Some(w);
            return false;
        }
        // A path still `Down` (heard from, not yet acknowledged) has stale bytes in flight.
        v.state == PathState::Down || v.has_window(len)
    }

    /// Deadlines of the store: the next pacer opening for a release, the next expiry.
    pub(super) fn store_deadline(&self) -> Option<Instant> {
        if self.store.is_empty() {
            return None;
        }
        let exp = self.store.expiry(self.cfg.hold_max_age);
        [self.store.wake, exp].into_iter().flatten().min()
    }

    /// Drops what was held too long.
    pub(super) fn expire_held(&mut self, now: Instant) {
        self.store.expire(now, self.cfg.hold_max_age);
        if self.store.is_empty() {
            self.store.wake = None;
        }
    }

    /// Takes over what `old` held, renumbered (the client's session is replaced after a
    /// server restart; its held packets go out over the new one).
    pub(crate) fn adopt_held(&mut self, old: &mut Session) {
        self.store = std::mem::take(&mut old.store).into_fresh();
    }
}
