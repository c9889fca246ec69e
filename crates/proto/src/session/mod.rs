//! The data plane of one client–server session, identical on both sides.
//!
//! A session owns the paths, the keyring, the session-wide data sequence numbers, the
//! de-duplication window, the reorder buffer, the schedulers of the three policies and the
//! bounded queues between them. The endpoint (client or server) does handshakes and finds
//! the session; then it calls `handle_datagram` for each data datagram routed to it
//! (`recv.rs`, the receive path) and `send_packet` for each IP packet (`schedule.rs`), and
//! pulls datagrams with `poll_transmit` (`transmit.rs`, the send path) and packets with
//! `poll_deliver`.
//!
//! Invariants:
//! - nothing in a datagram changes state before its tag verified and its counter passed the
//!   replay window;
//! - every datagram is sealed under a fresh counter of the current keypair (redundant
//!   copies included — they are separate datagrams);
//! - every queue is bounded: the aggregate queue in bytes (tail drop, counted), the job
//!   queue in entries, the reorder buffer in bytes and entries.

mod delay;
mod fec;
mod hold;
mod holes;
mod keepalive;
mod keyring;
mod link_queues;
mod realtime_rx;
mod recv;
mod reinject;
mod relays;
mod schedule;
mod stated;
mod store;
mod transmit;

pub use keepalive::DEFAULT_KEEPALIVE;
pub use keyring::{Keypair, Keyring, Slot};
pub use recv::SealedData;
pub use relays::RelaysStats;
pub use stated::StatedStats;
pub use store::HoldStats;
pub use transmit::Transmit;

use crate::codel::QueueDrops;
use crate::crypto::SessionId;
use crate::fq_codel::FqCodelQueue;
use crate::header_compress::{Compressor, Decompressor};
use crate::path::{Path, PathConfig, PathId, PathState};
use crate::policy::{FlowTable, Policy};
use crate::reorder::{ReorderBuffer, ReorderStats};
use crate::replay::ReplayWindow;
use crate::sched::split::FlowMeter;
use crate::sched::{BestPath, EarliestArrival, LinkScheduler, Redundant, Scheduler, Weighted};
use crate::Instant;
use core::time::Duration;
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
    /// Store-and-forward (`store.rs`): most bytes held while no path is live.
    pub hold_max_bytes: usize,
    /// Store-and-forward: longest a packet is held.
    pub hold_max_age: Duration,
    /// Kernel fast path for copies (client; PROTOCOL.md §8.3): a `redundant` packet that
    /// needs more than one copy is sealed once, on the first chosen path, and handed to
    /// the driver marked `Transmit::kernel_copies`, which sends it where the kernel copies
    /// it onto every other link (nftables `dup`). Off: one sealed datagram per copy.
    pub kernel_copies: bool,
    /// Probe interval of an idle session's paths (`keepalive.rs`; the server's own probes
    /// wait 2.5 times as long, answering the client's meanwhile). Never shorter than a
    /// quarter of `detect`, the interval while the session carries user data.
    pub keepalive: Duration,
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
            hold_max_bytes: 16 << 20,
            hold_max_age: Duration::from_secs(60),
            kernel_copies: false,
            keepalive: DEFAULT_KEEPALIVE,
        }
    }
}

/// Which end of the session this is: what the receive path may do on the peer's word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client: its paths are its links, which the endpoint adds.
    Client,
    /// The server: a path appears when the client first uses it and follows the client's
    /// address (roaming); downstream flows take the policy the client's packets carry.
    Server,
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
    /// Tail loss probes sent (PINGs on a path whose last data went unacknowledged for a
    /// probe timeout, `path/tail.rs`).
    pub tail_probes: u64,
    /// Small striped packets sent in the datagram of the packet before them.
    pub tx_riders: u64,
    /// IP packets dropped because the caller's delivery buffer was too small for them.
    pub rx_oversize: u64,
    /// Realtime packets dropped at the sender: no path delivers them before their
    /// deadline (`sched/realtime.rs`). Never sent late.
    pub rt_dropped_late: u64,
    /// Realtime packets received after their deadline (judged by `realtime_rx.rs`), not
    /// delivered: none reaches the application late.
    pub rt_rx_late: u64,
    /// Datagrams sealed once for the kernel to copy onto the other links
    /// (`SessionConfig::kernel_copies`).
    pub tx_kernel_copies: u64,
    /// FEC parity shards sent (`session/fec.rs`).
    pub fec_parity_sent: u64,
    /// Realtime packets rebuilt from parity and delivered in time.
    pub fec_recovered: u64,
    /// Realtime packets rebuilt after their deadline (not delivered).
    pub fec_late: u64,
    /// IP packets held now while no path is live (`store.rs`).
    pub held_packets: u64,
    /// Bytes held now.
    pub held_bytes: u64,
    /// When the oldest packet held now was held (its age is `now` minus this).
    pub held_since: Option<Instant>,
    /// Held packets dropped because the byte bound was reached (oldest first).
    pub hold_dropped_bytes: u64,
    /// Held packets dropped because they were held longer than the age bound.
    pub hold_dropped_age: u64,
    /// Held packets sent when a path came back.
    pub hold_released: u64,
}

/// One session.
pub struct Session {
    id: SessionId,
    cfg: SessionConfig,
    side: Side,
    /// Keypairs.
    pub keys: Keyring,
    paths: Vec<PathSlot>,
    next_data_seq: u64,
    dedupe: ReplayWindow,
    reorder: ReorderBuffer,
    deliver: VecDeque<Vec<u8>>,
    /// Buffers of delivered packets, reused for the next payloads (`recv.rs`).
    spare: Vec<Vec<u8>>,
    jobs: VecDeque<Job>,
    agg_queue: FqCodelQueue,
    /// TCP under `best`, paced on the path `best` picks (`schedule.rs`).
    best_queue: FqCodelQueue,
    /// TCP under link policies, one queue per rule (`link_queues.rs`).
    link_queues: link_queues::LinkQueues,
    best: BestPath,
    redundant: Redundant,
    /// Link policies (`sched/link.rs`).
    link_sched: LinkScheduler,
    aggregate: Box<dyn Scheduler>,
    flows: FlowTable,
    flow_meter: FlowMeter,
    pace_wake: Option<Instant>,
    holes: holes::HoleTracker,
    events: VecDeque<Event>,
    counters: SessionCounters,
    last_rx: Option<Instant>,
    /// When user data was last sent or received (`keepalive.rs`).
    last_data: Option<Instant>,
    delay: delay::DelayTracker,
    compressor: Compressor,
    decompressor: Decompressor,
    /// Packets riding in the datagram being built (`transmit.rs`), reused.
    riders: Vec<schedule::Striped>,
    /// Data of failed paths waiting to be sent again (`reinject.rs`).
    reinject: VecDeque<reinject::Reinjection>,
    /// The schedulers' path views, rebuilt per packet in this reused buffer.
    view_buf: Vec<crate::path::PathView>,
    /// How late realtime packets arrive (`realtime_rx.rs`).
    rt_rx: realtime_rx::Lateness,
    /// The open FEC block of realtime packets sent (`fec.rs`).
    fec_tx: crate::fec::Encoder,
    /// Realtime packets and parity received, for rebuilding.
    fec_rx: crate::fec::Decoder,
    /// Packets held while no path is live (`store.rs`).
    store: store::Store,
    /// The client's stated downlink policy (`stated.rs`).
    stated: stated::Stated,
    /// The relays the server hands the client (`relays.rs`).
    relays: relays::Relays,
}

struct PathSlot {
    path: Path,
    ping_queued: bool,
    /// When an authenticated datagram last came on the path while it was `Down`: the
    /// peer is reachable there again (`store.rs`). One per path, so two paths coming back
    /// one after the other are both live.
    heard_while_down: Option<Instant>,
    /// Data packets sent on the path and not yet acknowledged.
    in_flight: reinject::InFlight,
}

const MAX_JOBS: usize = 4096;

fn find_slot(paths: &mut [PathSlot], id: PathId) -> Option<&mut PathSlot> {
    paths.iter_mut().find(|s| s.path.id() == id)
}

impl Session {
    /// A session without keys or paths yet.
    pub fn new(id: SessionId, cfg: SessionConfig, side: Side) -> Self {
        let aggregate: Box<dyn Scheduler> = match cfg.aggregate {
            AggregateScheduler::Earliest => Box::new(EarliestArrival::new()),
            AggregateScheduler::Weighted => Box::new(Weighted::new()),
        };
        Session {
            id,
            cfg,
            side,
            keys: Keyring::default(),
            paths: Vec::new(),
            next_data_seq: 0,
            dedupe: ReplayWindow::new(),
            reorder: ReorderBuffer::new(cfg.reorder_max_bytes),
            deliver: VecDeque::new(),
            spare: Vec::new(),
            jobs: VecDeque::new(),
            agg_queue: FqCodelQueue::new(cfg.queue_max_bytes),
            best_queue: FqCodelQueue::new(cfg.queue_max_bytes),
            link_queues: link_queues::LinkQueues::default(),
            best: BestPath::new(cfg.failback_hold),
            redundant: Redundant::new(None),
            link_sched: LinkScheduler::new(cfg.failback_hold),
            aggregate,
            flows: FlowTable::new(4096, Duration::from_secs(120)),
            flow_meter: FlowMeter::new(),
            pace_wake: None,
            holes: holes::HoleTracker::default(),
            events: VecDeque::new(),
            counters: SessionCounters::default(),
            last_rx: None,
            last_data: None,
            delay: delay::DelayTracker::default(),
            compressor: Compressor::default(),
            decompressor: Decompressor::default(),
            riders: Vec::new(),
            reinject: VecDeque::new(),
            // Grows to the number of paths at the first packet scheduled (2.3 KB for all
            // `MAX_PATHS` held by every session, idle ones too, otherwise).
            view_buf: Vec::new(),
            rt_rx: realtime_rx::Lateness::default(),
            fec_tx: crate::fec::Encoder::default(),
            fec_rx: crate::fec::Decoder::default(),
            store: store::Store::default(),
            stated: stated::Stated::default(),
            relays: relays::Relays::default(),
        }
    }

    /// The session identity.
    pub fn id(&self) -> SessionId {
        self.id
    }

    /// The configuration it was made with (bounds shown by `status`).
    pub fn config(&self) -> &SessionConfig {
        &self.cfg
    }

    /// Counters (the hold's gauges as of now).
    pub fn counters(&self) -> SessionCounters {
        let h = self.hold_stats();
        SessionCounters {
            held_packets: h.packets,
            held_bytes: h.bytes,
            held_since: h.oldest_since,
            hold_dropped_bytes: h.dropped_bytes,
            hold_dropped_age: h.dropped_age,
            hold_released: h.released,
            ..self.counters
        }
    }

    /// Bytes waiting in the ingress queues (`aggregate`, and TCP under `best` and link
    /// policies).
    pub fn queued_bytes(&self) -> usize {
        self.agg_queue.bytes() + self.best_queue.bytes() + self.link_queues.bytes()
    }

    /// Drops in the ingress queues (`aggregate`, and TCP under `best` and link policies).
    pub fn queue_drops(&self) -> QueueDrops {
        let (a, b, l) = (
            self.agg_queue.drops(),
            self.best_queue.drops(),
            self.link_queues.drops(),
        );
        QueueDrops {
            codel: a.codel + b.codel + l.codel,
            overflow: a.overflow + b.overflow + l.overflow,
        }
    }

    /// The paced ingress queue `q` (none for a link rule without a queue yet).
    fn paced_queue(&mut self, q: schedule::Queue) -> Option<&mut FqCodelQueue> {
        match q {
            schedule::Queue::Best => Some(&mut self.best_queue),
            schedule::Queue::Aggregate => Some(&mut self.agg_queue),
            schedule::Queue::Link(rule) => self.link_queues.get_mut(rule),
        }
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
                    heard_while_down: None,
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
                self.on_path_state(now, id, after);
            }
        }
    }

    /// Sets a path's relative cost (`PathConfig::cost`): redundancy and FEC parity prefer
    /// cheap paths.
    pub fn set_path_cost(&mut self, id: PathId, cost: u32) {
        if let Some(s) = find_slot(&mut self.paths, id) {
            s.path.set_cost(cost);
        }
    }

    /// Puts a path on standby or takes it off (`PathConfig::standby`).
    pub fn set_path_standby(&mut self, id: PathId, standby: bool) {
        if let Some(s) = find_slot(&mut self.paths, id) {
            s.path.set_standby(standby);
        }
    }

    /// Forgets a path entirely.
    pub fn remove_path(&mut self, id: PathId) {
        self.paths.retain(|s| s.path.id() != id);
        self.jobs.retain(|j| j.path() != id);
    }

    /// Follows the peer to `remote` on path `id` (an authenticated handshake came from
    /// there); returns whether the address changed.
    pub fn follow_path(&mut self, id: PathId, remote: SocketAddr) -> bool {
        find_slot(&mut self.paths, id).is_some_and(|s| s.path.set_remote(remote))
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
        let keepalive = self.keepalive();
        for s in &self.paths {
            take(s.path.ack_deadline());
            take(s.path.loss_deadline());
            take(s.path.state_deadline());
            if !s.ping_queued && self.keys.current.is_some() && s.in_flight.tail_repairable() {
                take(s.path.tail_probe_deadline());
            }
            take(self.probe_due(s, keepalive));
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
        take(self.fec_tx.deadline());
        take(self.store_deadline());
        take(self.relays_deadline());
        t
    }

    /// Runs timers: liveness, ACKs, keepalive probes, reorder give-ups.
    pub fn handle_timeout(&mut self, now: Instant) {
        let keyed = self.keys.current.is_some();
        let keepalive = self.keepalive();
        for i in 0..self.paths.len() {
            let s = &mut self.paths[i];
            if let Some(st) = s.path.update_state(now) {
                let id = s.path.id();
                self.events.push_back(Event::PathState(id, st));
                self.on_path_state(now, id, st);
            }
            let probe = self.probe_due(&self.paths[i], keepalive);
            let s = &mut self.paths[i];
            if s.path.loss_deadline().is_some_and(|d| d <= now) {
                s.path.declare_overdue(now);
            }
            if s.path.ack_deadline().is_some_and(|d| d <= now) {
                let (id, crossing) = (s.path.id(), transmit::crosses(&s.path));
                self.jobs.push_back(Job::Ack { path: id });
                if crossing {
                    self.queue_crossing_acks(id);
                }
            }
            let s = &mut self.paths[i];
            if probe.is_some_and(|d| d <= now) {
                s.ping_queued = true;
                self.jobs.push_back(Job::Ping { path: s.path.id() });
            }
            // A tail loss probe (`path/tail.rs`) is a PING too, sent only for data a NACK
            // would repair.
            let tail = s.in_flight.tail_repairable();
            if keyed
                && !s.ping_queued
                && tail
                && s.path.tail_probe_deadline().is_some_and(|d| d <= now)
            {
                s.ping_queued = true;
                s.path.on_tail_probe();
                self.counters.tail_probes += 1;
                self.jobs.push_back(Job::Ping { path: s.path.id() });
            }
        }
        if self.reorder.has_gap() {
            let hold = self.reorder_hold(self.last_rx.unwrap_or_default());
            self.reorder.on_timeout(now, hold, &mut self.deliver);
        }
        if self.fec_tx.deadline().is_some_and(|d| d <= now) {
            self.close_fec_block(now);
        }
        self.keys.expire_previous(now, Duration::from_secs(30));
        self.release_idle_buffers(now);
        self.expire_held(now);
        self.relays_timeout(now);
    }

    /// After path `id` changed to `state`: a failing path's data is reinjected on the
    /// others (`reinject.rs`); if no path is live any more, everything is held, else the
    /// path's `only:` data (`store.rs`).
    fn on_path_state(&mut self, now: Instant, id: PathId, state: PathState) {
        self.on_path_failing(id, state);
        if state == PathState::Down {
            self.on_path_down(now, id);
        }
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
