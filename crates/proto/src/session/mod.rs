//! The data plane of one client–server session, identical on both sides.
//!
//! A session owns the paths, the keyring, the session-wide data sequence numbers, the
//! de-duplication window, the reorder buffer, the schedulers of the three policies and the
//! bounded queues between them. The endpoint (client or server) does handshakes and finds
//! the session; then it calls `handle_data` for each authenticated-looking datagram and
//! `send_packet` for each IP packet, and pulls datagrams with `poll_transmit`.
//!
//! Invariants:
//! - nothing in a datagram changes state before its tag verified and its counter passed the
//!   replay window;
//! - every datagram is sealed under a fresh counter of the current keypair (redundant
//!   copies included — they are separate datagrams);
//! - every queue is bounded: the aggregate queue in bytes (tail drop, counted), the job
//!   queue in entries, the reorder buffer in bytes and entries.

mod delay;
mod hold;
mod holes;
mod inbound;
mod keyring;
mod reinject;
mod schedule;
mod transmit;

pub use keyring::{Keypair, Keyring, Slot};
pub use transmit::Transmit;

use crate::codel::{CodelQueue, QueueDrops};
use crate::crypto::SessionId;
use crate::header_compress::{Compressor, Decompressor};
use crate::path::{Path, PathConfig, PathId, PathState, Received};
use crate::policy::{FlowTable, Policy};
use crate::reorder::{ReorderBuffer, ReorderStats};
use crate::replay::ReplayWindow;
use crate::sched::split::FlowMeter;
use crate::sched::{BestPath, EarliestArrival, Redundant, Scheduler, Weighted};
use crate::wire::{Frame, FrameReader, InnerHeader, OuterPacket};
use crate::Instant;
use core::time::Duration;
use std::borrow::Cow;
use std::collections::VecDeque;
use std::net::SocketAddr;
use transmit::Job;

/// Which scheduler stripes `aggregate` flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggregateScheduler {
    /// Earliest expected arrival (default).
    Earliest,
    /// Weighted round-robin by bandwidth (baseline).
    Weighted,
}

/// Session parameters.
#[derive(Debug, Clone, Copy)]
pub struct SessionConfig {
    /// Dead-path detection time.
    pub detect: Duration,
    /// How long a recovered path must stay up before `best` moves back to it.
    pub failback_hold: Duration,
    /// Scheduler for `aggregate`.
    pub aggregate: AggregateScheduler,
    /// Bound of the aggregate queue.
    pub queue_max_bytes: usize,
    /// Bound of the reorder buffer.
    pub reorder_max_bytes: usize,
    /// Largest datagram (UDP payload) to send: a full-size TUN packet plus
    /// `wire::OVERHEAD_BYTES`. ACK and PAIR frames are piggybacked only within it.
    pub max_datagram: usize,
    /// Compress inner TCP/IPv4 headers (`header_compress.rs`). Both ends decode either way;
    /// this only decides what we send.
    pub header_compression: bool,
    /// Name each striped packet's flow predecessor, so the peer releases each flow in its
    /// own order (`reorder`); `false` orders every striped packet after all earlier ones,
    /// the baseline this is compared with. Both ends decode either way.
    pub flow_order: bool,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            detect: Duration::from_secs(1),
            failback_hold: Duration::from_secs(3),
            aggregate: AggregateScheduler::Earliest,
            queue_max_bytes: 1 << 20,
            reorder_max_bytes: 4 << 20,
            // A 1500-byte link over IPv6 (40 + 8 bytes of outer headers).
            max_datagram: 1452,
            header_compression: true,
            flow_order: true,
        }
    }
}

/// Something the driver may want to log or show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A path changed liveness.
    PathState(PathId, PathState),
    /// The peer's address on a path changed (roaming / NAT rebinding).
    PathRoamed(PathId, SocketAddr),
    /// The peer closed the session.
    Closed,
}

/// Session-level counters (shown by `status`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionCounters {
    /// IP packets accepted from the local side.
    pub tx_ip_packets: u64,
    /// IP packets delivered to the local side.
    pub rx_ip_packets: u64,
    /// Redundant copies dropped as duplicates.
    pub rx_duplicates: u64,
    /// Datagrams that failed authentication.
    pub rx_unauthenticated: u64,
    /// Authenticated datagrams refused by the replay window.
    pub rx_replayed: u64,
    /// Authenticated datagrams with malformed content.
    pub rx_malformed: u64,
    /// IP packets dropped because the aggregate queue was full.
    pub queue_drops: u64,
    /// IP packets dropped because no keypair was ready.
    pub no_key_drops: u64,
    /// IP packets sent with compressed TCP/IPv4 headers (`header_compress.rs`).
    pub tx_compressed: u64,
    /// Compressed packets that could not be restored (unknown context, failed checksum).
    pub rx_decompress_errors: u64,
    /// Data packets queued again because the path they were on failed (`reinject.rs`).
    pub reinjected: u64,
    /// Ordered data packets sent again because the peer reported their datagram lost.
    pub repaired: u64,
    /// Small striped packets sent in the datagram of the packet before them.
    pub tx_riders: u64,
}

/// One session.
pub struct Session {
    id: SessionId,
    cfg: SessionConfig,
    /// Keypairs.
    pub keys: Keyring,
    paths: Vec<PathSlot>,
    next_data_seq: u64,
    dedupe: ReplayWindow,
    reorder: ReorderBuffer,
    deliver: VecDeque<Vec<u8>>,
    jobs: VecDeque<Job>,
    agg_queue: CodelQueue,
    best: BestPath,
    redundant: Redundant,
    aggregate: Box<dyn Scheduler>,
    flows: FlowTable,
    flow_meter: FlowMeter,
    pace_wake: Option<Instant>,
    holes: holes::HoleTracker,
    events: VecDeque<Event>,
    counters: SessionCounters,
    last_rx: Option<Instant>,
    delay: delay::DelayTracker,
    compressor: Compressor,
    decompressor: Decompressor,
    /// Packets riding in the datagram being built (`transmit.rs`), reused.
    riders: Vec<schedule::Striped>,
    /// Data of failed paths waiting to be sent again (`reinject.rs`).
    reinject: VecDeque<reinject::Reinjection>,
    /// The schedulers' path views, rebuilt per packet in this reused buffer.
    view_buf: Vec<crate::path::PathView>,
}

struct PathSlot {
    path: Path,
    ping_queued: bool,
    /// Data packets sent on the path and not yet acknowledged.
    in_flight: reinject::InFlight,
}

const MAX_JOBS: usize = 4096;

fn find_slot(paths: &mut [PathSlot], id: PathId) -> Option<&mut PathSlot> {
    paths.iter_mut().find(|s| s.path.id() == id)
}

impl Session {
    /// A session without keys or paths yet.
    pub fn new(id: SessionId, cfg: SessionConfig) -> Self {
        let aggregate: Box<dyn Scheduler> = match cfg.aggregate {
            AggregateScheduler::Earliest => Box::new(EarliestArrival::new()),
            AggregateScheduler::Weighted => Box::new(Weighted::new()),
        };
        Session {
            id,
            cfg,
            keys: Keyring::default(),
            paths: Vec::new(),
            next_data_seq: 0,
            dedupe: ReplayWindow::new(),
            reorder: ReorderBuffer::new(cfg.reorder_max_bytes),
            deliver: VecDeque::new(),
            jobs: VecDeque::new(),
            agg_queue: CodelQueue::new(cfg.queue_max_bytes),
            best: BestPath::new(cfg.failback_hold),
            redundant: Redundant::new(None),
            aggregate,
            flows: FlowTable::new(4096, Duration::from_secs(120)),
            flow_meter: FlowMeter::new(),
            pace_wake: None,
            holes: holes::HoleTracker::default(),
            events: VecDeque::new(),
            counters: SessionCounters::default(),
            last_rx: None,
            delay: delay::DelayTracker::default(),
            compressor: Compressor::default(),
            decompressor: Decompressor::default(),
            riders: Vec::new(),
            reinject: VecDeque::new(),
            view_buf: Vec::with_capacity(crate::sched::MAX_PATHS),
        }
    }

    /// The session identity.
    pub fn id(&self) -> SessionId {
        self.id
    }

    /// Counters.
    pub fn counters(&self) -> SessionCounters {
        self.counters
    }

    /// Bytes waiting in the aggregate ingress queue.
    pub fn queued_bytes(&self) -> usize {
        self.agg_queue.bytes()
    }

    /// Drops in the aggregate ingress queue.
    pub fn queue_drops(&self) -> QueueDrops {
        self.agg_queue.drops()
    }

    /// Reorder metrics.
    pub fn reorder_stats(&self) -> ReorderStats {
        self.reorder.stats()
    }

    /// When the last authenticated datagram arrived.
    pub fn last_rx(&self) -> Option<Instant> {
        self.last_rx
    }

    /// Paths, in creation order.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.paths.iter().map(|s| &s.path)
    }

    fn slot_mut(&mut self, id: PathId) -> Option<&mut PathSlot> {
        find_slot(&mut self.paths, id)
    }

    /// Adds a path if it does not exist yet (an existing one is left as it is).
    pub fn ensure_path(&mut self, now: Instant, id: PathId, remote: SocketAddr) -> &mut Path {
        let cfg = PathConfig::from_detect(self.cfg.detect);
        let idx = match self.paths.iter().position(|s| s.path.id() == id) {
            Some(i) => i,
            None => {
                self.paths.push(PathSlot {
                    path: Path::new(id, remote, now, cfg),
                    ping_queued: false,
                    in_flight: reinject::InFlight::default(),
                });
                self.paths.len() - 1
            }
        };
        &mut self.paths[idx].path
    }

    /// Marks the local side of a path (un)available (interface down/up).
    pub fn set_path_available(&mut self, now: Instant, id: PathId, available: bool) {
        if let Some(s) = find_slot(&mut self.paths, id) {
            let before = s.path.state();
            s.path.set_available(now, available);
            let after = s.path.state();
            if after != before {
                self.events.push_back(Event::PathState(id, after));
                self.on_path_failing(id, after);
            }
        }
    }

    /// Forgets a path entirely.
    pub fn remove_path(&mut self, id: PathId) {
        self.paths.retain(|s| s.path.id() != id);
        self.jobs.retain(|j| j.path() != id);
    }

    /// Proves a path (a handshake message arrived on it).
    pub fn confirm_path(&mut self, now: Instant, id: PathId) {
        if let Some(s) = find_slot(&mut self.paths, id) {
            let before = s.path.state();
            s.path.confirm(now);
            if s.path.state() != before {
                self.events.push_back(Event::PathState(id, s.path.state()));
            }
        }
    }

    /// The policy for a packet going to the peer, as learned from the peer's flows.
    pub fn learned_policy(&self, packet: &[u8]) -> Option<Policy> {
        self.flows.lookup(packet)
    }

    /// Processes a data datagram whose receiver index matched this session.
    /// `datagram` is decrypted in place. Returns false if it was refused.
    pub fn handle_data(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &mut [u8],
        create_paths: bool,
    ) -> bool {
        let Ok(pkt) = OuterPacket::new_checked(&mut *datagram) else {
            self.counters.rx_malformed += 1;
            return false;
        };
        let (index, counter, path_id) = (pkt.index(), pkt.counter(), PathId(pkt.path()));
        let len = datagram.len();
        let (aad, sealed) = datagram.split_at_mut(crate::wire::DATA_HEADER_LEN);
        let Some((slot, kp)) = self.keys.find(index) else {
            self.counters.rx_unauthenticated += 1;
            return false;
        };
        if !kp.replay.would_accept(counter) {
            self.counters.rx_replayed += 1;
            return false;
        }
        let Ok(plain_len) = kp.open.open(counter, aad, sealed) else {
            self.counters.rx_unauthenticated += 1;
            return false;
        };
        if !kp.replay.check_and_set(counter) {
            self.counters.rx_replayed += 1;
            return false;
        }
        if slot == Slot::Next {
            self.keys.promote_next();
        }
        self.last_rx = Some(now);
        self.process_plaintext(now, from, path_id, &sealed[..plain_len], len, create_paths);
        true
    }

    fn process_plaintext(
        &mut self,
        now: Instant,
        from: SocketAddr,
        path_id: PathId,
        plain: &[u8],
        datagram_len: usize,
        create_paths: bool,
    ) {
        let Ok((hdr, frames)) = InnerHeader::parse(plain) else {
            self.counters.rx_malformed += 1;
            return;
        };
        if self.slot_mut(path_id).is_none() {
            // Path ids are link indices (< MAX_PATHS); more would overflow the schedulers'
            // fixed path sets, so an authenticated peer cannot make us hold more.
            if !create_paths || usize::from(path_id.0) >= crate::sched::MAX_PATHS {
                self.counters.rx_malformed += 1;
                return;
            }
            self.ensure_path(now, path_id, from);
        } else if create_paths {
            // Server side: follow the client to its new address (roaming).
            let moved = self
                .slot_mut(path_id)
                .is_some_and(|s| s.path.set_remote(from));
            if moved {
                self.events.push_back(Event::PathRoamed(path_id, from));
            }
        }
        self.delay.on_datagram(now, path_id, hdr.send_time_us);
        self.holes.on_datagram(path_id, None);
        let mut ping = false;
        let mut eliciting = false;
        let mut acked = false;
        for frame in FrameReader::new(frames) {
            match frame {
                Ok(Frame::Data(d) | Frame::DataDefine(_, d)) => {
                    eliciting = true;
                    // A defining packet travels whole and also sets its context up.
                    if let Ok(Frame::DataDefine(ctx, _)) = frame {
                        self.decompressor.define(ctx, d.payload);
                    }
                    self.accept_data(
                        now,
                        create_paths,
                        path_id,
                        (d.data_seq, d.flags, d.pred_gap),
                        Cow::Borrowed(d.payload),
                    );
                }
                Ok(Frame::DataCompressed(c)) => {
                    eliciting = true;
                    match self.decompressor.decompress(c.ctx, c.body) {
                        Ok(p) => self.accept_data(
                            now,
                            create_paths,
                            path_id,
                            (c.data_seq, c.flags, c.pred_gap),
                            Cow::Owned(p),
                        ),
                        Err(_) => self.counters.rx_decompress_errors += 1,
                    }
                }
                Ok(Frame::Ack(a)) => {
                    if let Some(s) = find_slot(&mut self.paths, PathId(a.path)) {
                        let before = s.path.state();
                        // The peer received the acknowledged datagram ack_delay before
                        // it sealed this one: its clock, for one-way delay and rates.
                        let peer_receive = hdr.send_time_us.wrapping_sub(a.ack_delay_us);
                        s.path.on_ack(now, &a, peer_receive);
                        s.in_flight.on_ack(a.largest);
                        if s.path.state() != before {
                            let st = s.path.state();
                            self.events.push_back(Event::PathState(PathId(a.path), st));
                        }
                        acked = true;
                    }
                }
                Ok(Frame::Ping) => {
                    ping = true;
                    eliciting = true;
                }
                Ok(Frame::Close) => self.events.push_back(Event::Closed),
                Ok(Frame::Nack(n)) => self.on_nack(n),
                Ok(Frame::Pair(p)) => {
                    if let Some(s) = find_slot(&mut self.paths, PathId(p.path)) {
                        s.path.on_pair_report(p.capacity_kbps);
                    }
                }
                Err(_) => {
                    self.counters.rx_malformed += 1;
                    break;
                }
            }
        }
        if acked {
            // RTTs only change with feedback: CoDel's interval follows them here.
            self.agg_queue.set_interval(self.codel_interval());
            let ramping = self
                .paths
                .iter()
                .any(|s| s.path.state() != PathState::Down && s.path.in_startup());
            self.agg_queue.set_ramping(ramping);
        }
        if let Some(s) = self.slot_mut(path_id) {
            s.path.on_received(
                now,
                Received {
                    path_seq: hdr.path_seq,
                    send_time_us: hdr.send_time_us,
                    bytes: datagram_len,
                    eliciting,
                    ping,
                },
            );
        }
    }

    /// Next IP packet for the local side.
    pub fn poll_deliver(&mut self) -> Option<Vec<u8>> {
        self.deliver.pop_front()
    }

    /// Next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Earliest time `handle_timeout` has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut take = |x: Option<Instant>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t| t.min(x)));
            }
        };
        for s in &self.paths {
            take(s.path.ack_deadline());
            take(s.path.state_deadline());
            if !s.ping_queued && self.keys.current.is_some() {
                take(s.path.probe_deadline());
            }
        }
        // The hold only matters behind a gap, and computing it is not free (this runs
        // after every wake-up of the driver).
        if self.reorder.has_gap() {
            take(
                self.reorder
                    .deadline(self.reorder_hold(self.last_rx.unwrap_or_default())),
            );
        }
        take(self.pacing_deadline());
        t
    }

    /// Runs timers: liveness, ACKs, keepalive probes, reorder give-ups.
    pub fn handle_timeout(&mut self, now: Instant) {
        let keyed = self.keys.current.is_some();
        for i in 0..self.paths.len() {
            let s = &mut self.paths[i];
            if let Some(st) = s.path.update_state(now) {
                let id = s.path.id();
                self.events.push_back(Event::PathState(id, st));
                self.on_path_failing(id, st);
            }
            let s = &mut self.paths[i];
            if s.path.ack_deadline().is_some_and(|d| d <= now) {
                self.jobs.push_back(Job::Ack { path: s.path.id() });
            }
            if keyed && !s.ping_queued && s.path.probe_deadline().is_some_and(|d| d <= now) {
                s.ping_queued = true;
                self.jobs.push_back(Job::Ping { path: s.path.id() });
            }
        }
        if self.reorder.has_gap() {
            let hold = self.reorder_hold(self.last_rx.unwrap_or_default());
            self.reorder.on_timeout(now, hold, &mut self.deliver);
        }
        self.keys.expire_previous(now, Duration::from_secs(30));
    }

    /// Queues a CLOSE on every path (the driver then drains `poll_transmit`).
    pub fn close(&mut self) {
        for s in &self.paths {
            self.jobs.push_back(Job::Close { path: s.path.id() });
        }
    }
}

#[cfg(test)]
mod tests;
