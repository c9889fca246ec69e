//! The receive side of a session: one sealed data datagram in, IP packets out.
//!
//! The endpoint has parsed the outer header once (`endpoint::Datagram`) and found this
//! session by the receiver index; what it hands over is a `SealedData`. From there, in
//! order: the keypair of the index, the replay window's look, AEAD open in place, the
//! replay window's mark; then the inner header, the path (created or followed only on the
//! server side), each frame (data, feedback, control); then each IP packet's
//! de-duplication, flow-policy learning, the reorder buffer, and hole skipping; packets
//! leave through `poll_deliver` into the caller's buffer.
//!
//! Invariants:
//! - nothing in a datagram changes state before its tag verified and its counter passed
//!   the replay window;
//! - a packet is counted and handed to the reorder buffer at most once per `data_seq`
//!   (redundant copies and replays stop at the de-duplication window);
//! - a payload is copied once, after de-duplication, into a recycled buffer (`spare`), so
//!   steady traffic allocates nothing per packet.

use super::{find_slot, Event, Session, Side, Slot};
use crate::path::{PathId, PathState, Received};
use crate::policy::{parse_flow, LinkRule, Policy};
use crate::reorder::Order;
use crate::wire::{
    AckFrame, DataFlags, DataFrame, Frame, FrameReader, InnerHeader, DATA_HEADER_LEN,
};
use crate::Instant;
use core::time::Duration;
use std::borrow::Cow;
use std::net::SocketAddr;

/// Most delivery buffers kept for reuse: a receive batch's worth (the daemon reads up to 32
/// datagrams per call), so a batch released at once reuses all of them next time.
const MAX_SPARE: usize = 32;
/// A session that received nothing for this long gives its spare buffers back.
const SPARE_IDLE: Duration = Duration::from_secs(1);

/// A data datagram whose outer header the endpoint has parsed, on its way to the session
/// its receiver index names. The fields are as the datagram says: not yet authenticated.
pub struct SealedData<'a> {
    /// The receiver index (which keypair should open it).
    pub receiver_index: u32,
    /// The AEAD nonce counter.
    pub counter: u64,
    /// The path (link) the sender put it on.
    pub path: PathId,
    /// The whole datagram, opened in place.
    pub datagram: &'a mut [u8],
}

/// What the receive path needs of one DATA (or DEFINE, or compressed) frame.
#[derive(Debug, Clone, Copy)]
struct Meta {
    data_seq: u64,
    flags: DataFlags,
    pred_gap: u16,
    deadline_ms: u16,
    /// Arrival − `send_time_us` of its datagram (`realtime_rx.rs`).
    raw_delay: u32,
}

impl Meta {
    fn of(d: &DataFrame<'_>, raw_delay: u32) -> Meta {
        Meta {
            data_seq: d.data_seq,
            flags: d.flags,
            pred_gap: d.pred_gap,
            deadline_ms: d.deadline_ms,
            raw_delay,
        }
    }
}

/// What the frames of one datagram asked of the path it came on.
#[derive(Default)]
struct FrameSummary {
    /// A PING asked for an acknowledgement now.
    ping: bool,
    /// Something in it must be acknowledged (data or a ping).
    eliciting: bool,
    /// It carried user data or parity: the session is active (`keepalive.rs`).
    data: bool,
    /// It carried feedback for one of our paths.
    acked: bool,
}

impl Session {
    /// Processes a data datagram routed to this session. Returns false if it was refused
    /// (unknown keypair, replayed, or failed authentication; counted).
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, d: SealedData<'_>) -> bool {
        let len = d.datagram.len();
        let (aad, sealed) = d.datagram.split_at_mut(DATA_HEADER_LEN);
        let Some((slot, kp)) = self.keys.find(d.receiver_index) else {
            self.counters.rx_unauthenticated += 1;
            return false;
        };
        if !kp.replay.would_accept(d.counter) {
            self.counters.rx_replayed += 1;
            return false;
        }
        let Ok(plain_len) = kp.open.open(d.counter, aad, sealed) else {
            self.counters.rx_unauthenticated += 1;
            return false;
        };
        if !kp.replay.check_and_set(d.counter) {
            self.counters.rx_replayed += 1;
            return false;
        }
        if slot == Slot::Next {
            self.keys.promote_next();
        }
        self.last_rx = Some(now);
        self.on_plaintext(now, from, d.path, &sealed[..plain_len], len);
        true
    }

    /// An authenticated datagram's plaintext: inner header, path, frames, path feedback.
    fn on_plaintext(
        &mut self,
        now: Instant,
        from: SocketAddr,
        path_id: PathId,
        plain: &[u8],
        datagram_len: usize,
    ) {
        let Ok((hdr, frames)) = InnerHeader::parse(plain) else {
            self.counters.rx_malformed += 1;
            return;
        };
        if !self.admit_path(now, path_id, from) {
            self.counters.rx_malformed += 1;
            return;
        }
        // The peer reaches us there again: held packets may leave on it (`store.rs`).
        self.heard_on(now, path_id);
        self.delay.on_datagram(now, path_id, hdr.send_time_us);
        let raw_delay = self.rt_rx.on_datagram(now, hdr.send_time_us);
        self.holes.on_datagram(path_id, None);
        let mut summary = FrameSummary::default();
        for frame in FrameReader::new(frames) {
            let Ok(frame) = frame else {
                self.counters.rx_malformed += 1;
                break;
            };
            self.on_frame(now, (path_id, raw_delay), &hdr, frame, &mut summary);
        }
        if summary.acked {
            self.on_feedback();
        }
        if let Some(s) = self.slot_mut(path_id) {
            s.path.on_received(
                now,
                Received {
                    path_seq: hdr.path_seq,
                    send_time_us: hdr.send_time_us,
                    bytes: datagram_len,
                    eliciting: summary.eliciting,
                    ping: summary.ping,
                },
            );
        }
        if summary.data || self.last_data.is_none() {
            self.note_data(now);
        } else if summary.ping {
            self.answer_probe(now, path_id);
        }
    }

    /// Whether a datagram on `path_id` has a path to land on. The client's paths are its
    /// links, which the endpoint adds; the server creates a path when the client first uses
    /// it and follows the client to a new address (roaming, NAT rebinding).
    fn admit_path(&mut self, now: Instant, path_id: PathId, from: SocketAddr) -> bool {
        let server = self.side == Side::Server;
        if self.slot_mut(path_id).is_none() {
            // Path ids are link indices (< MAX_PATHS); more would overflow the schedulers'
            // fixed path sets, so an authenticated peer cannot make us hold more.
            if !server || usize::from(path_id.0) >= crate::sched::MAX_PATHS {
                return false;
            }
            self.ensure_path(now, path_id, from);
        } else if server && !self.is_other_paths_remote(path_id, from) {
            let moved = self
                .slot_mut(path_id)
                .is_some_and(|s| s.path.set_remote(from));
            if moved {
                self.events.push_back(Event::PathRoamed(path_id, from));
            }
        }
        true
    }

    /// Whether `from` is where another path of the session talks from: a datagram of
    /// `path_id` from there is a copy the client's kernel made onto that path's link (the
    /// fast path, §8.3), not a move of `path_id`, whose remote stays.
    fn is_other_paths_remote(&self, path_id: PathId, from: SocketAddr) -> bool {
        self.paths
            .iter()
            .any(|s| s.path.id() != path_id && s.path.remote() == from)
    }

    /// One frame of an authenticated datagram that came on `path_id`.
    fn on_frame(
        &mut self,
        now: Instant,
        (path_id, raw_delay): (PathId, u32),
        hdr: &InnerHeader,
        frame: Frame<'_>,
        summary: &mut FrameSummary,
    ) {
        match frame {
            Frame::Data(d) => {
                summary.eliciting = true;
                summary.data = true;
                let meta = Meta::of(&d, raw_delay);
                self.accept_data(now, path_id, meta, Cow::Borrowed(d.payload));
            }
            Frame::DataDefine(ctx, d) => {
                summary.eliciting = true;
                summary.data = true;
                // A defining packet travels whole and also sets its context up.
                self.decompressor.define(ctx, d.payload);
                let meta = Meta::of(&d, raw_delay);
                self.accept_data(now, path_id, meta, Cow::Borrowed(d.payload));
            }
            Frame::DataCompressed(c) => {
                summary.eliciting = true;
                summary.data = true;
                let mut packet = self.spare.pop().unwrap_or_default();
                match self
                    .decompressor
                    .decompress_into(c.ctx, c.body, &mut packet)
                {
                    Ok(()) => {
                        let meta = Meta {
                            data_seq: c.data_seq,
                            flags: c.flags,
                            pred_gap: c.pred_gap,
                            deadline_ms: c.deadline_ms,
                            raw_delay,
                        };
                        self.accept_data(now, path_id, meta, Cow::Owned(packet));
                    }
                    Err(_) => {
                        self.counters.rx_decompress_errors += 1;
                        self.recycle(packet);
                    }
                }
            }
            Frame::Ack(a) => summary.acked |= self.on_ack(now, hdr, &a),
            Frame::Ping => {
                summary.ping = true;
                summary.eliciting = true;
            }
            Frame::Close => self.events.push_back(Event::Closed),
            Frame::Nack(n) => self.on_nack(n),
            Frame::Fec(f) => {
                summary.eliciting = true;
                summary.data = true;
                self.on_parity(now, hdr, &f);
            }
            Frame::Pair(p) => {
                if let Some(s) = find_slot(&mut self.paths, PathId(p.path)) {
                    s.path.on_pair_report(p.capacity_kbps);
                }
            }
            // Neither asks for a path ACK: each rides in a datagram that goes anyway
            // (`stated.rs`), and the answer to a statement rides in the next one back.
            Frame::Policy(f) => self.on_policy(&f),
            Frame::PolicyAck(epoch) => self.on_policy_ack(epoch),
            // Likewise the relay list and its acknowledgement (`relays.rs`).
            Frame::Relays(f) => self.on_relays(&f),
            Frame::RelaysAck(epoch) => self.on_relays_ack(epoch),
        }
    }

    /// Feedback for one of our paths. Returns whether the path was known.
    fn on_ack(&mut self, now: Instant, hdr: &InnerHeader, a: &AckFrame) -> bool {
        let Some(s) = find_slot(&mut self.paths, PathId(a.path)) else {
            return false;
        };
        let before = s.path.state();
        let was_sure = s.path.delivers_for_sure();
        // The peer received the acknowledged datagram ack_delay before it sealed this
        // one: its clock, for one-way delay and rates.
        let peer_receive = hdr.send_time_us.wrapping_sub(a.ack_delay_us);
        s.path.on_ack(now, a, peer_receive);
        s.in_flight.on_ack(now, a.largest, s.path.repair_grace());
        let sure = s.path.delivers_for_sure();
        if s.path.state() != before {
            let st = s.path.state();
            self.events.push_back(Event::PathState(PathId(a.path), st));
        }
        if sure && !was_sure {
            self.on_path_sure(PathId(a.path));
        }
        true
    }

    /// RTTs only change with feedback: CoDel's interval and ramp-up follow them here.
    /// The best queue ramps only while the path `best` uses does: the others carry none of
    /// its data and stay in startup for good.
    fn on_feedback(&mut self) {
        let interval = self.codel_interval();
        let ramping = |id: Option<PathId>| {
            self.paths.iter().any(|s| {
                s.path.state() != PathState::Down
                    && s.path.in_startup()
                    && id.is_none_or(|id| s.path.id() == id)
            })
        };
        let (all, best) = (ramping(None), ramping(self.best.current()));
        // The target follows the round trip of the paths the queue's flows cross: the
        // fastest that carries data for `aggregate` (a flow's base RTT; the slowest path's
        // would let a 120-ms path hold 60 ms of queue). The best queue keeps RFC 8289's
        // 5 ms: with half its path's RTT the simulator's 1 %-lossy link showed the inner
        // TCP 116 retransmissions instead of 2 (`sim/tests/best_repair.rs`), not yet
        // understood, so not taken.
        let fastest = self.fastest_carrying_rtt();
        self.agg_queue.set_interval(interval, fastest);
        self.agg_queue.set_ramping(all);
        self.best_queue.set_interval(interval, Duration::ZERO);
        self.best_queue.set_ramping(best);
        // A link rule's queue ramps with the path its data goes on: its link, or for
        // `backup:` the one chosen among the others (the link until one is chosen).
        let other = self.link_sched.current_other();
        self.link_queues.set_interval(interval, |rule| match rule {
            LinkRule::Only(l) | LinkRule::Prefer(l) => ramping(Some(l)),
            LinkRule::Backup(l) => ramping(Some(other.unwrap_or(l))),
        });
    }

    /// One IP packet the peer sent: de-duplication, policy learning, the reorder buffer,
    /// and skipping holes known lost. The payload comes borrowed (from the datagram) or
    /// owned (restored from a compressed frame).
    fn accept_data(&mut self, now: Instant, path_id: PathId, meta: Meta, payload: Cow<'_, [u8]>) {
        let Meta {
            data_seq,
            flags,
            pred_gap,
            deadline_ms,
            raw_delay,
        } = meta;
        if !self.dedupe.check_and_set(data_seq) {
            self.counters.rx_duplicates += 1;
            if let Cow::Owned(p) = payload {
                self.recycle(p);
            }
            return;
        }
        // Only the server schedules return traffic by the peer's policy.
        if self.side == Side::Server {
            if let Some((key, _)) = parse_flow(&payload) {
                let policy = Policy::from_data(flags.policy_code(), deadline_ms);
                self.flows.learn(now, key, policy);
            }
        }
        // A realtime packet past its deadline is of no use to the application (a jitter
        // buffer would discard it): it is counted and not delivered, so none ever reaches
        // the application late. It still joins its FEC block below.
        let late = flags.realtime() && self.rt_rx.is_late(raw_delay, self.min_owd(), deadline_ms);
        if late {
            self.counters.rt_rx_late += 1;
        } else {
            self.counters.rx_ip_packets += 1;
        }
        self.holes.on_datagram(path_id, Some(data_seq));
        let packet = match payload {
            Cow::Owned(p) => p,
            Cow::Borrowed(b) => {
                let mut p = self.spare.pop().unwrap_or_default();
                p.clear();
                p.extend_from_slice(b);
                p
            }
        };
        if flags.realtime() {
            // Kept for its FEC block; the block's packets it lets us rebuild go out too.
            self.remember_realtime(now, data_seq, &packet);
        }
        if late {
            self.recycle(packet);
            return;
        }
        let order = Order::of(flags, data_seq, pred_gap);
        self.reorder
            .insert(now, data_seq, packet, order, &mut self.deliver);
        self.skip_known_lost(now);
    }

    /// Base one-way delay of the fastest path: half the lowest minimum RTT of the paths
    /// that have one (`realtime_rx.rs`).
    pub(super) fn min_owd(&self) -> Duration {
        self.paths
            .iter()
            .filter(|s| s.path.rtt().has_sample())
            .map(|s| s.path.rtt().min())
            .min()
            .map_or(Duration::ZERO, |r| r / 2)
    }

    /// Only a gap can be known lost; most packets arrive with none open. A lost ordered
    /// packet is being repaired (`reinject.rs`): give up on it only once a repair had its
    /// time.
    fn skip_known_lost(&mut self, now: Instant) {
        let repair_had_its_time = self
            .reorder
            .gap_age(now)
            .is_some_and(|age| age >= self.repair_wait(now));
        if !repair_had_its_time {
            return;
        }
        let paths = &self.paths;
        let alive = |id| {
            paths
                .iter()
                .any(|s| s.path.id() == id && s.path.state() != PathState::Down)
        };
        if let Some(bound) = self.holes.lost_below(alive) {
            self.reorder.skip_lost_below(now, bound, &mut self.deliver);
        }
    }

    /// Copies the next IP packet for the local side into `buf` and returns its length. A
    /// packet longer than `buf` is dropped and counted (`rx_oversize`).
    pub fn poll_deliver(&mut self, buf: &mut [u8]) -> Option<usize> {
        loop {
            let packet = self.deliver.pop_front()?;
            let n = packet.len();
            let fits = match buf.get_mut(..n) {
                Some(out) => {
                    out.copy_from_slice(&packet);
                    true
                }
                None => false,
            };
            self.recycle(packet);
            if fits {
                return Some(n);
            }
            self.counters.rx_oversize += 1;
        }
    }

    /// Keeps a delivered packet's buffer for the next payload, within `MAX_SPARE`.
    fn recycle(&mut self, packet: Vec<u8>) {
        if self.spare.len() < MAX_SPARE {
            self.spare.push(packet);
        }
    }

    /// Gives the spare buffers back once the session is idle (`SPARE_IDLE`), so thousands
    /// of idle sessions hold none.
    pub(super) fn release_idle_buffers(&mut self, now: Instant) {
        let idle = self
            .last_rx
            .is_none_or(|t| now.saturating_since(t) >= SPARE_IDLE);
        if idle && !self.spare.is_empty() && self.deliver.is_empty() {
            self.spare = Vec::new();
        }
    }
}
