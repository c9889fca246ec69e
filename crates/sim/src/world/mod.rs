//! The simulated world: the real `multihome_proto` Client(s) and Server, hop chains of linkem
//! pipelines between them, and the applications on both sides — run by one
//! discrete-event loop in virtual time.
//!
//! Each step pops the earliest wake-up (an endpoint timer, a hop releasing a datagram,
//! an app timer), performs it, then *settles*: every endpoint touched is flushed
//! (`poll_transmit` into its links, `poll_deliver` to the apps, `poll_event`) until no
//! endpoint has work left, exactly as the daemon's loop does after each wake-up. Without
//! a tunnel (`tunnel.enabled = false`) apps use link 0 directly — the baseline.
//!
//! Invariants: the run is a pure function of (scenario, seed): one seeded stream feeds
//! every component, ties in time are broken by insertion order, and no wall clock is
//! read. Time never goes backwards. A component that keeps asking to be woken at the
//! same instant (a livelock in the core) stops the run with an error naming it.

mod build;
mod drive;
mod report;
mod trace;

pub use build::{client_addr, inner_ip, SERVER_ADDR};
pub use report::{RunReport, SimCounters};

use crate::events::{EventQueue, NodeId};
use crate::packet;
use crate::scenario::ScenarioError;
use crate::traffic::{App, Emit, Side};
use build::{decode_client_addr, inner_client};
use linkem::Pipeline;
use multihome_proto::endpoint::{Client, Server};
use multihome_proto::path::PathId;
use std::net::SocketAddr;
use std::time::Duration;

/// Errors of building or running a world.
#[derive(Debug, thiserror::Error)]
pub enum WorldError {
    /// The scenario is invalid.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// The world cannot be built as described.
    #[error("build: {0}")]
    Build(String),
    /// A component asked to be woken at the same instant too many times (livelock).
    #[error("livelock: {node} woken {count} times at t = {at:?}")]
    Stuck {
        /// Which component.
        node: String,
        /// When.
        at: Duration,
        /// How often.
        count: u32,
    },
}

/// Bytes of the outer IPv4 + UDP headers a tunnel datagram carries on a link.
pub const OUTER_HEADERS: u64 = 28;
/// Bytes of the Ethernet header every packet is charged on a hop: a hop is linkem's
/// pipeline, whose rates and queue limits count Ethernet frames (lab links are veths),
/// so a scenario's "10mbit" means what the lab's does.
pub const FRAME_HEADER: u64 = 14;
const UP: usize = 0;
const DOWN: usize = 1;
/// Wake-ups of one endpoint at one instant beyond which the run is declared stuck.
const STUCK_AFTER: u32 = 10_000;
/// Datagram buffers kept for reuse (enough for every datagram in flight on a busy world;
/// beyond it buffers are freed as usual).
const POOL_MAX: usize = 4096;
/// Length of a datagram buffer: room for any datagram the core builds (its MTU is below).
const BUF_LEN: usize = 2048;

/// A datagram (tunnel) or bare IP packet (no tunnel) on a link.
///
/// A tunnel datagram is built by the core straight into `bytes` (a pooled buffer of
/// `BUF_LEN`, of which the first `len` bytes are the datagram) and opened in place at the
/// far end: its bytes are never copied on the way.
pub struct Envelope {
    bytes: Vec<u8>,
    len: usize,
    src: SocketAddr,
    /// (sequence in its sender's transmit order, approximate inner packet bytes) of a
    /// data-carrying tunnel datagram (set only when tracing reorder).
    tag: Option<(u64, u32)>,
}

/// Where a hop hands what it releases.
#[derive(Debug, Clone, Copy)]
enum Next {
    Hop(u32),
    Server,
    Client(u32, u8),
    OriginRaw,
    ClientRaw,
}

struct HopNode {
    pipe: Pipeline<Envelope>,
    next: Next,
    /// (client, link, upstream, hop index from the client).
    label: (u32, u8, bool, u8),
    overhead: u64,
}

impl HopNode {
    fn new(pipe: Pipeline<Envelope>, next: Next, label: (u32, u8, bool, u8), tunnel: bool) -> Self {
        HopNode {
            pipe,
            next,
            label,
            overhead: FRAME_HEADER + if tunnel { OUTER_HEADERS } else { 0 },
        }
    }
}

struct ClientNode {
    ep: Option<Client>,
    /// (first up hop, first down hop) per link.
    links: Vec<(u32, u32)>,
    next_tag: [u64; 2],
    /// (data sequence, bytes) in arrival order at the receiver, per direction.
    arrivals: [Vec<(u64, u32)>; 2],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    Server,
    Client(u32),
    Hop(u32),
    App(u32),
    /// The scenario's drive (`drive.rs`), if any.
    Drive,
}

impl Node {
    fn count(clients: usize, hops: usize, apps: usize) -> usize {
        1 + clients + hops + apps + 1
    }
}

/// One simulated run.
pub struct World {
    q: EventQueue,
    end: Duration,
    n_clients: u32,
    n_hops: u32,
    server: Option<Server>,
    clients: Vec<ClientNode>,
    hops: Vec<HopNode>,
    apps: Vec<App>,
    /// Per client: (first port, ports, app) of each of its apps.
    ports: Vec<Vec<(u16, u16, u32)>>,
    trace: bool,
    server_dirty: bool,
    dirty: Vec<u32>,
    client_dirty: Vec<bool>,
    /// Datagram buffers of `BUF_LEN` bytes, reused: the core builds each datagram into
    /// one (a malloc/free pair and a copy per datagram otherwise).
    pool: Vec<Vec<u8>>,
    /// Where the endpoints copy each delivered IP packet (`poll_deliver`), reused.
    deliver_buf: Vec<u8>,
    /// The apps' output list, kept between events for its allocation.
    emit_buf: Emit,
    /// Per endpoint node (server, clients): (instant, wake-ups at it), for the livelock guard.
    last_fire: Vec<(Duration, u32)>,
    counters: SimCounters,
    drive: Option<drive::DriveState>,
    /// When `MH_SIM_TRACE` next prints.
    next_trace: Duration,
}

fn pi(d: Duration) -> multihome_proto::Instant {
    multihome_proto::Instant::from_micros(d.as_micros() as u64)
}

fn du(i: multihome_proto::Instant) -> Duration {
    Duration::from_micros(i.as_micros())
}

impl World {
    fn node_id(&self, n: Node) -> NodeId {
        let (c, h) = (self.n_clients, self.n_hops);
        match n {
            Node::Server => 0,
            Node::Client(i) => 1 + i,
            Node::Hop(i) => 1 + c + i,
            Node::App(i) => 1 + c + h + i,
            Node::Drive => 1 + c + h + self.apps.len() as u32,
        }
    }

    fn node(&self, id: NodeId) -> Node {
        let (c, h) = (self.n_clients, self.n_hops);
        match id {
            0 => Node::Server,
            i if i <= c => Node::Client(i - 1),
            i if i <= c + h => Node::Hop(i - 1 - c),
            i if i <= c + h + self.apps.len() as u32 => Node::App(i - 1 - c - h),
            _ => Node::Drive,
        }
    }

    /// Current simulated time.
    pub fn now(&self) -> Duration {
        self.q.now()
    }

    /// Runs to the end of the scenario.
    pub fn run(&mut self) -> Result<(), WorldError> {
        self.run_until(self.end)
    }

    /// Runs every event up to `t` (at most the end of the scenario), so a caller can read
    /// the world between steps (`report`: bytes delivered so far, per-path counters) —
    /// what tests of behaviour over time sample. Stepping does not change the run: events
    /// are the same whether it runs in one go or in steps.
    pub fn run_until(&mut self, t: Duration) -> Result<(), WorldError> {
        // MH_SIM_TRACE=1: a line every 0.5 s; MH_SIM_TRACE=0.1: every 0.1 s.
        let trace_every = std::env::var("MH_SIM_TRACE").ok().map(|v| {
            let s: f64 = v.parse().unwrap_or(0.5);
            Duration::from_secs_f64(if s > 0.0 && s < 1.0 { s } else { 0.5 })
        });
        while let Some((now, id)) = self.q.pop(t.min(self.end)) {
            if let Some(every) = trace_every.filter(|_| now >= self.next_trace) {
                self.next_trace = now + every;
                self.trace_paths(now);
            }
            let node = self.node(id);
            match node {
                Node::Server => {
                    self.guard(id, now, node)?;
                    if let Some(s) = self.server.as_mut() {
                        s.handle_timeout(pi(now));
                    }
                    self.server_dirty = true;
                }
                Node::Client(c) => {
                    self.guard(id, now, node)?;
                    if let Some(ep) = self.clients[c as usize].ep.as_mut() {
                        ep.handle_timeout(pi(now));
                    }
                    self.mark(c);
                }
                Node::Hop(h) => self.on_hop(h),
                Node::App(a) => {
                    let mut out = std::mem::take(&mut self.emit_buf);
                    self.apps[a as usize].on_timer(now, &mut out);
                    self.emit(a, out);
                    self.rearm_app(a);
                }
                Node::Drive => self.on_drive(),
            }
            self.settle();
        }
        Ok(())
    }

    fn guard(&mut self, id: NodeId, now: Duration, node: Node) -> Result<(), WorldError> {
        let e = &mut self.last_fire[id as usize];
        if e.0 == now {
            e.1 += 1;
            if e.1 > STUCK_AFTER {
                return Err(WorldError::Stuck {
                    node: format!("{node:?}"),
                    at: now,
                    count: e.1,
                });
            }
        } else {
            *e = (now, 1);
        }
        Ok(())
    }

    fn mark(&mut self, c: u32) {
        if !self.client_dirty[c as usize] {
            self.client_dirty[c as usize] = true;
            self.dirty.push(c);
        }
    }

    fn settle(&mut self) {
        loop {
            if self.server_dirty {
                self.server_dirty = false;
                self.flush_server();
            } else if let Some(c) = self.dirty.pop() {
                self.client_dirty[c as usize] = false;
                self.flush_client(c);
            } else {
                return;
            }
        }
    }

    fn rearm_app(&mut self, a: u32) {
        let t = self.apps[a as usize].deadline();
        let id = self.node_id(Node::App(a));
        self.q.arm(id, t);
    }

    fn rearm_hop(&mut self, h: u32) {
        let t = self.hops[h as usize].pipe.next_wakeup();
        let id = self.node_id(Node::Hop(h));
        self.q.arm(id, t);
    }

    fn enqueue(&mut self, h: u32, env: Envelope) {
        let now = self.now();
        let hop = &mut self.hops[h as usize];
        let bytes = env.len as u64 + hop.overhead;
        hop.pipe.enqueue(now, env, bytes);
        self.counters.hop_packets += 1;
        self.rearm_hop(h);
    }

    fn on_hop(&mut self, h: u32) {
        let now = self.now();
        while let Some(env) = self.hops[h as usize].pipe.poll_dequeue(now) {
            let next = self.hops[h as usize].next;
            self.forward(next, env);
        }
        self.rearm_hop(h);
    }

    fn record_arrival(&mut self, c: u32, dir: usize, tag: Option<(u64, u32)>) {
        if let Some(t) = tag {
            self.clients[c as usize].arrivals[dir].push(t);
        }
    }

    fn forward(&mut self, next: Next, mut env: Envelope) {
        let now = pi(self.now());
        match next {
            Next::Hop(n) => self.enqueue(n, env),
            Next::Server => {
                if let Some((c, _)) = decode_client_addr(env.src) {
                    self.record_arrival(c, UP, env.tag);
                }
                if let Some(s) = self.server.as_mut() {
                    s.handle_datagram(now, env.src, &mut env.bytes[..env.len]);
                    self.server_dirty = true;
                }
                self.recycle(env.bytes);
            }
            Next::Client(c, l) => {
                self.record_arrival(c, DOWN, env.tag);
                if let Some(ep) = self.clients[c as usize].ep.as_mut() {
                    ep.handle_datagram(now, PathId(l), env.src, &mut env.bytes[..env.len]);
                    self.mark(c);
                }
                self.recycle(env.bytes);
            }
            Next::OriginRaw => self.deliver(Side::Origin, &env.bytes[..env.len]),
            Next::ClientRaw => self.deliver(Side::Client, &env.bytes[..env.len]),
        }
    }

    /// An inner packet reached the apps on `side`.
    fn deliver(&mut self, side: Side, pkt: &[u8]) {
        let now = self.now();
        let Some(p) = packet::parse(pkt) else {
            self.counters.unroutable += 1;
            return;
        };
        let (ip, port) = match side {
            Side::Client => (p.dst, p.dport),
            Side::Origin => (p.src, p.sport),
        };
        let app = inner_client(ip)
            .and_then(|c| self.ports.get(c as usize))
            .and_then(|apps| {
                apps.iter()
                    .find(|&&(first, n, _)| port.wrapping_sub(first) < n)
            });
        let Some(&(_, _, a)) = app else {
            self.counters.unroutable += 1;
            return;
        };
        let mut out = std::mem::take(&mut self.emit_buf);
        self.apps[a as usize].on_packet(now, side, &p, &mut out);
        self.emit(a, out);
        self.rearm_app(a);
    }

    fn emit(&mut self, a: u32, mut out: Emit) {
        let c = self.apps[a as usize].client;
        for (side, pkt) in out.drain(..) {
            self.inject(c, side, pkt);
        }
        self.emit_buf = out;
    }

    /// An app of client `c` sends `pkt` from `side`.
    fn inject(&mut self, c: u32, side: Side, pkt: Vec<u8>) {
        /// What remains to do once the borrow of the endpoint ends.
        enum Then {
            Client,
            Server,
            Raw(u32, Vec<u8>),
        }
        let now = pi(self.now());
        self.counters.inner_packets += 1;
        let node = &mut self.clients[c as usize];
        let then = match (side, node.ep.as_mut(), self.server.as_mut()) {
            (Side::Client, Some(ep), _) => {
                ep.handle_tun_packet(now, &pkt);
                Then::Client
            }
            (Side::Origin, _, Some(s)) => {
                s.handle_tun_packet(now, &pkt);
                Then::Server
            }
            (Side::Client, None, _) => Then::Raw(node.links[0].0, pkt),
            (Side::Origin, _, None) => Then::Raw(node.links[0].1, pkt),
        };
        match then {
            Then::Client => self.mark(c),
            Then::Server => self.server_dirty = true,
            Then::Raw(hop, bytes) => self.enqueue_raw(hop, bytes),
        }
    }

    fn enqueue_raw(&mut self, hop: u32, bytes: Vec<u8>) {
        let env = Envelope {
            len: bytes.len(),
            bytes,
            src: SocketAddr::V4(SERVER_ADDR),
            tag: None,
        };
        self.enqueue(hop, env);
    }

    /// Tag of a datagram about to leave, if it carries data and tracing is on.
    ///
    /// The core numbers single-copy data in the order it builds datagrams (the aggregate
    /// queue is FIFO and numbers at dequeue), so the k-th data datagram a sender emits
    /// carries its k-th `data_seq`: the tag is that k (cross-checked against the core's
    /// own reorder statistics in tests/scenarios.rs). Not valid for redundant copies, nor
    /// for a direction carrying header-compressed pure TCP ACKs (64-byte datagrams, below
    /// the bound): trace the data direction of TCP flows.
    fn tag(&mut self, c: u32, dir: usize, bytes: &[u8]) -> Option<(u64, u32)> {
        // Data datagrams start with type 3; with at least one DATA frame (12 bytes + a
        // UDP or TCP packet of 28 or more: 80 in all) they are longer than any datagram
        // of only ACK/PING/CLOSE (67), and than one that also carries an empty stated
        // policy or its acknowledgement (76, `wire::stated`).
        if !self.trace || bytes.first() != Some(&3) || bytes.len() <= 76 {
            return None;
        }
        let n = &mut self.clients[c as usize].next_tag[dir];
        *n += 1;
        // Inner packet size: the datagram minus its fixed overhead (a piggybacked ACK, when
        // present, adds 26 bytes the receiver cannot see from outside: ≤ 2 % error).
        let len = bytes
            .len()
            .saturating_sub(multihome_proto::wire::OVERHEAD_BYTES) as u32;
        Some((*n - 1, len))
    }

    fn flush_client(&mut self, c: u32) {
        let now = self.now();
        loop {
            let mut work = false;
            loop {
                let Some(ep) = self.clients[c as usize].ep.as_mut() else {
                    return;
                };
                let mut bytes = self.pool.pop().unwrap_or_else(|| vec![0; BUF_LEN]);
                let Some(t) = ep.poll_transmit(pi(now), &mut bytes) else {
                    self.pool.push(bytes);
                    break;
                };
                work = true;
                self.counters.datagrams += 1;
                let hop = self.clients[c as usize].links[usize::from(t.path.0)].0;
                let src = self.src_addr(c, t.path.0);
                self.send_datagram(c, UP, hop, src, bytes, t.len);
            }
            let mut buf = std::mem::take(&mut self.deliver_buf);
            while let Some(n) = self.clients[c as usize]
                .ep
                .as_mut()
                .and_then(|ep| ep.poll_deliver(&mut buf))
            {
                work = true;
                self.deliver(Side::Client, &buf[..n]);
            }
            self.deliver_buf = buf;
            let ep = self.clients[c as usize].ep.as_mut().expect("checked above");
            while ep.poll_event().is_some() {}
            if !work {
                break;
            }
        }
        let t = self.clients[c as usize]
            .ep
            .as_ref()
            .and_then(|ep| ep.poll_timeout())
            .map(du);
        let id = self.node_id(Node::Client(c));
        self.q.arm(id, t);
    }

    fn flush_server(&mut self) {
        let now = self.now();
        loop {
            let mut work = false;
            loop {
                let Some(s) = self.server.as_mut() else {
                    return;
                };
                let mut bytes = self.pool.pop().unwrap_or_else(|| vec![0; BUF_LEN]);
                let Some(t) = s.poll_transmit(pi(now), &mut bytes) else {
                    self.pool.push(bytes);
                    break;
                };
                work = true;
                self.counters.datagrams += 1;
                let Some((c, l)) = decode_client_addr(t.dst).filter(|&(c, l)| {
                    c < self.n_clients
                        && usize::from(l) < self.links_of(c)
                        && self.addr_current(t.dst, l)
                }) else {
                    self.counters.unroutable += 1;
                    self.recycle(bytes);
                    continue;
                };
                let hop = self.clients[c as usize].links[usize::from(l)].1;
                self.send_datagram(c, DOWN, hop, SocketAddr::V4(SERVER_ADDR), bytes, t.len);
            }
            let mut buf = std::mem::take(&mut self.deliver_buf);
            while let Some(n) = self.server.as_mut().and_then(|s| s.poll_deliver(&mut buf)) {
                work = true;
                self.deliver(Side::Origin, &buf[..n]);
            }
            self.deliver_buf = buf;
            let s = self.server.as_mut().expect("checked above");
            while s.poll_event().is_some() {}
            if !work {
                break;
            }
        }
        let t = self.server.as_ref().and_then(|s| s.poll_timeout()).map(du);
        self.q.arm(0, t);
    }

    /// Puts a datagram the core built (the first `len` bytes of `bytes`) of client `c`'s
    /// session, direction `dir`, on hop `hop`.
    fn send_datagram(
        &mut self,
        c: u32,
        dir: usize,
        hop: u32,
        src: SocketAddr,
        bytes: Vec<u8>,
        len: usize,
    ) {
        let tag = self.tag(c, dir, &bytes[..len]);
        let env = Envelope {
            bytes,
            len,
            src,
            tag,
        };
        self.enqueue(hop, env);
    }

    /// Keeps a datagram buffer for the next datagram (bare packets of the no-tunnel
    /// baseline, allocated by the apps at their own size, are simply freed).
    fn recycle(&mut self, v: Vec<u8>) {
        if self.pool.len() < POOL_MAX && v.len() == BUF_LEN {
            self.pool.push(v);
        }
    }

    fn links_of(&self, c: u32) -> usize {
        self.clients[c as usize].links.len()
    }
}
