//! Traffic sources and sinks: what the applications behind the client and at the origin
//! do. Bulk and web flows run the TCP-like model of `tcp.rs`; CBR flows send UDP at a
//! constant rate with a sequence number and send time inside, so the receiver measures
//! loss, one-way latency and jitter.
//!
//! Each app owns a contiguous range of client-side ports (one connection per port; web
//! flows use two per object: request up, response down), so the world dispatches a packet
//! to its app by (client, client port) alone. Apps emit packets tagged with the side they
//! leave from; the world carries them through the tunnel or the bare link.
//!
//! Invariants: an app's deadline is the minimum of its connections' timers and its own
//! next action; an app never emits a packet before its start time.

use crate::packet::{self, Addrs, Body, Parsed};
use crate::scenario::{Direction, FlowKind, FlowSpec, SizeDist};
use crate::stats::{Histogram, TrafficReport};
use crate::tcp::{TcpConfig, TcpReceiver, TcpSender, TcpStats};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp, Pareto};
use std::time::Duration;

/// Where a packet enters the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client host (behind the tunnel client).
    Client,
    /// The origin server on the Internet (behind the tunnel server).
    Origin,
}

/// Packets emitted by apps: (side, packet).
pub type Emit = Vec<(Side, Vec<u8>)>;

/// Port of the origin service.
pub const ORIGIN_PORT: u16 = 80;
/// Web request size (bytes of payload).
const REQUEST_BYTES: u64 = 300;
/// Reconnections a resuming bulk flow may make (each uses 4 ports: SYN, SYN-ACK, request,
/// response, modelled as 1-byte, 1-byte, request and data transfers).
pub const MAX_RESUMES: u16 = 1000;

struct Conn {
    sender: TcpSender,
    receiver: TcpReceiver,
    /// Side the data leaves from.
    data_side: Side,
    /// Its client address is gone (a drive's new address): it neither sends nor receives.
    dead: bool,
}

impl Conn {
    fn new(cfg: TcpConfig, client: Addrs, dir: Direction, total: u64) -> Conn {
        let (data, side) = match dir {
            Direction::Up => (client, Side::Client),
            Direction::Down => (client.reversed(), Side::Origin),
        };
        Conn {
            sender: TcpSender::new(cfg, data, total),
            receiver: TcpReceiver::new(data.reversed(), total),
            data_side: side,
            dead: false,
        }
    }

    fn ack_side(&self) -> Side {
        match self.data_side {
            Side::Client => Side::Origin,
            Side::Origin => Side::Client,
        }
    }
}

/// Where an app runs: its client, the two inner addresses and its first client port.
#[derive(Debug, Clone, Copy)]
pub struct Placement {
    /// Client index.
    pub client: u32,
    /// The client's inner address.
    pub client_ip: [u8; 4],
    /// The origin's address.
    pub origin_ip: [u8; 4],
    /// First client port of the app's range.
    pub port_base: u16,
}

/// A running flow.
pub struct App {
    spec: FlowSpec,
    /// Client this app belongs to.
    pub client: u32,
    /// First client port.
    pub port_base: u16,
    /// Ports used.
    pub ports: u16,
    client_ip: [u8; 4],
    origin_ip: [u8; 4],
    tcp: TcpConfig,
    conns: Vec<Option<Conn>>,
    rng: ChaCha8Rng,
    next_action: Option<Duration>,
    /// CBR sources stop here, so packets still in flight at the end are not counted lost.
    stop: Duration,
    // Web state.
    object: u32,
    object_started: Duration,
    object_times: Vec<f64>,
    // CBR state.
    cbr_interval: Duration,
    cbr_size: usize,
    cbr_sent: u64,
    cbr_received: u64,
    /// Received after `spec.deadline`.
    cbr_late: u64,
    cbr_bytes: u64,
    cbr_latency: Histogram,
    cbr_jitter: f64,
    cbr_last_transit: Option<f64>,
    cbr_rx_window: Option<(Duration, Duration)>,
    /// Per packet (send time, one-way delay) in µs, when traced (`trace_cbr`).
    cbr_trace: Option<Vec<(u32, u32)>>,
    // Bulk state: size (drawn when `bytes_max` is set), bytes of abandoned connections,
    // reconnections so far, completion.
    bulk_bytes: Option<u64>,
    bulk_got: u64,
    resumes: u16,
    bulk_done: Option<Duration>,
    started_at: Option<Duration>,
}

impl App {
    /// Ports an app of `spec` needs.
    pub fn ports_needed(spec: &FlowSpec) -> u16 {
        match spec.kind {
            FlowKind::Web => (spec.objects.unwrap_or(1) * 2) as u16,
            FlowKind::Bulk if spec.resume => 1 + 4 * MAX_RESUMES,
            _ => 1,
        }
    }

    /// A flow of `spec` placed at `at`; CBR sources stop sending at `stop`.
    pub fn new(spec: FlowSpec, at: Placement, default_mss: u32, seed: u64, stop: Duration) -> App {
        let Placement {
            client,
            client_ip,
            origin_ip,
            port_base,
        } = at;
        use rand::SeedableRng;
        let tcp = TcpConfig {
            cc: spec.cc,
            ..TcpConfig::with_mss(spec.mss.unwrap_or(default_mss))
        };
        let ports = Self::ports_needed(&spec);
        let (cbr_interval, cbr_size) = match spec.kind {
            FlowKind::Cbr | FlowKind::Saturate => {
                let size = spec.packet_bytes.unwrap_or(200);
                let rate = spec
                    .rate
                    .as_deref()
                    .and_then(|r| crate::scenario::parse_rate(r).ok())
                    .map_or(64_000, |b| b.bits_per_sec());
                let ns = (size as u128 * 8 * 1_000_000_000).div_ceil(u128::from(rate));
                (Duration::from_nanos(ns as u64), size)
            }
            _ => (Duration::ZERO, 0),
        };
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        // Extra draws only for flows that ask for them: other scenarios keep their bytes.
        let start = match spec.start_max {
            Some(m) if m > spec.start => rng.gen_range(spec.start..m),
            _ => spec.start,
        };
        let bulk_bytes = match (spec.bytes, spec.bytes_max) {
            (Some(b), Some(m)) if m > b => Some(rng.gen_range(b..=m)),
            (b, _) => b,
        };
        App {
            next_action: Some(start),
            bulk_bytes,
            bulk_got: 0,
            resumes: 0,
            bulk_done: None,
            started_at: None,
            stop,
            spec,
            client,
            port_base,
            ports,
            client_ip,
            origin_ip,
            tcp,
            conns: (0..ports).map(|_| None).collect(),
            rng,
            object: 0,
            object_started: Duration::ZERO,
            object_times: Vec::new(),
            cbr_interval,
            cbr_size,
            cbr_sent: 0,
            cbr_received: 0,
            cbr_late: 0,
            cbr_bytes: 0,
            cbr_latency: Histogram::default(),
            cbr_jitter: 0.0,
            cbr_last_transit: None,
            cbr_rx_window: None,
            cbr_trace: None,
        }
    }

    /// Keeps every CBR packet's send time and delay (`cbr_trace`): for the handoff
    /// windows of a drive (`crate::handoff`). Other kinds have nothing to trace.
    pub fn trace_cbr(&mut self) {
        if matches!(self.spec.kind, FlowKind::Cbr) {
            self.cbr_trace = Some(Vec::new());
        }
    }

    /// Per CBR packet sent: (send time, one-way delay or `handoff::NOT_RECEIVED`), µs.
    pub fn cbr_trace(&self) -> Option<&[(u32, u32)]> {
        self.cbr_trace.as_deref()
    }

    /// The flow's deadline (CBR: what counts as late).
    pub fn cbr_deadline(&self) -> Option<Duration> {
        self.spec.deadline
    }

    fn addrs(&self, k: u16) -> Addrs {
        Addrs {
            src: self.client_ip,
            dst: self.origin_ip,
            sport: self.port_base + k,
            dport: ORIGIN_PORT,
        }
    }

    /// Earliest time the app has something to do.
    /// The first connection's sender: window (bytes), smoothed RTT (s), bytes in flight.
    pub fn tcp_probe(&self) -> Option<(f64, f64, u64)> {
        self.conns.iter().flatten().next().map(|c| c.sender.probe())
    }

    /// When this app next acts.
    pub fn deadline(&self) -> Option<Duration> {
        self.conns
            .iter()
            .flatten()
            .filter(|c| !c.dead)
            .filter_map(|c| c.sender.deadline())
            .chain(self.next_action)
            .min()
    }

    fn open(&mut self, k: u16, dir: Direction, total: u64, now: Duration, out: &mut Emit) {
        let mut c = Conn::new(self.tcp, self.addrs(k), dir, total);
        let mut pkts = Vec::new();
        c.sender.send(now, &mut pkts);
        out.extend(pkts.into_iter().map(|p| (c.data_side, p)));
        self.conns[usize::from(k)] = Some(c);
    }

    fn object_size(&mut self) -> u64 {
        let mean = self.spec.object_bytes.unwrap_or(100_000) as f64;
        let x = match self.spec.size_dist {
            SizeDist::Fixed => mean,
            SizeDist::Exp => Exp::new(1.0 / mean).map_or(mean, |d| d.sample(&mut self.rng)),
            SizeDist::Pareto => {
                let a = self.spec.pareto_shape.unwrap_or(1.5);
                let scale = mean * (a - 1.0) / a;
                Pareto::new(scale, a).map_or(mean, |d| d.sample(&mut self.rng))
            }
        };
        (x.round() as u64).max(1)
    }

    /// Timers: start, next CBR packet, next web object, TCP retransmission timeouts.
    pub fn on_timer(&mut self, now: Duration, out: &mut Emit) {
        if self.next_action.is_some_and(|t| t <= now) {
            self.next_action = None;
            self.act(now, out);
        }
        for c in self.conns.iter_mut().flatten().filter(|c| !c.dead) {
            if c.sender.deadline().is_some_and(|d| d <= now) {
                let mut pkts = Vec::new();
                c.sender.on_timeout(now, &mut pkts);
                out.extend(pkts.into_iter().map(|p| (c.data_side, p)));
            }
        }
    }

    fn act(&mut self, now: Duration, out: &mut Emit) {
        match self.spec.kind {
            FlowKind::Bulk => {
                let total = self.bulk_bytes.unwrap_or(u64::MAX);
                self.started_at = Some(now);
                self.open(0, self.spec.direction, total, now, out);
            }
            FlowKind::Web => {
                if self.object < self.spec.objects.unwrap_or(0) {
                    self.object_started = now;
                    let k = (self.object * 2) as u16;
                    self.open(k, Direction::Up, REQUEST_BYTES, now, out);
                }
            }
            FlowKind::Cbr | FlowKind::Saturate => {
                if now >= self.stop {
                    return;
                }
                let mut head = [0u8; 16];
                head[..8].copy_from_slice(&self.cbr_sent.to_be_bytes());
                head[8..].copy_from_slice(&(now.as_nanos() as u64).to_be_bytes());
                let (a, side) = match self.spec.direction {
                    Direction::Up => (self.addrs(0), Side::Client),
                    Direction::Down => (self.addrs(0).reversed(), Side::Origin),
                };
                let len = self.cbr_size.saturating_sub(packet::UDP_HEADERS);
                out.push((side, packet::udp(a, &head, len)));
                if let Some(t) = self.cbr_trace.as_mut() {
                    t.push((now.as_micros() as u32, crate::handoff::NOT_RECEIVED));
                }
                self.cbr_sent += 1;
                self.next_action = Some(now + self.cbr_interval);
            }
        }
    }

    /// A packet for this app arrived at `side`.
    pub fn on_packet(&mut self, now: Duration, side: Side, p: &Parsed<'_>, out: &mut Emit) {
        let port = if side == Side::Client {
            p.dport
        } else {
            p.sport
        };
        let k = port.wrapping_sub(self.port_base);
        match p.body {
            Body::Udp(payload) => self.on_udp(now, payload),
            Body::Tcp { seq, ack, len } => {
                let Some(Some(c)) = self.conns.get_mut(usize::from(k)) else {
                    return;
                };
                if c.dead {
                    return;
                }
                if side == c.data_side {
                    if let Some(a) = ack {
                        let mut pkts = Vec::new();
                        c.sender.on_ack(now, a, &mut pkts);
                        out.extend(pkts.into_iter().map(|p| (c.data_side, p)));
                    }
                } else {
                    let was_done = c.receiver.done_at.is_some();
                    if let Some(a) = c.receiver.on_segment(now, seq, len) {
                        out.push((c.ack_side(), a));
                    }
                    if !was_done && c.receiver.done_at.is_some() {
                        self.on_transfer_done(now, k, out);
                    }
                }
            }
        }
    }

    fn on_transfer_done(&mut self, now: Duration, k: u16, out: &mut Emit) {
        if self.spec.kind == FlowKind::Bulk {
            return self.on_resume_step(now, k, out);
        }
        if self.spec.kind != FlowKind::Web {
            return;
        }
        if k % 2 == 0 {
            // Request arrived at the origin: the response starts.
            let size = self.object_size();
            self.open(k + 1, Direction::Down, size, now, out);
        } else {
            self.object_times
                .push(now.saturating_sub(self.object_started).as_secs_f64());
            self.object += 1;
            let think = self.spec.think.unwrap_or(Duration::ZERO).as_secs_f64();
            let wait = if think > 0.0 {
                Exp::new(1.0 / think).map_or(think, |d| d.sample(&mut self.rng))
            } else {
                0.0
            };
            self.next_action = Some(now + Duration::from_secs_f64(wait));
        }
    }

    /// A transfer of a bulk flow ended: the data (done), or a step of a reconnection
    /// (SYN at the origin, SYN-ACK at the client, the request at the origin).
    fn on_resume_step(&mut self, now: Duration, k: u16, out: &mut Emit) {
        match k % 4 {
            0 => self.bulk_done = Some(now),
            1 => self.open(k + 1, Direction::Down, 1, now, out),
            2 => self.open(k + 1, Direction::Up, REQUEST_BYTES, now, out),
            _ => {
                let total = self.bulk_bytes.unwrap_or(u64::MAX);
                let rest = total.saturating_sub(self.bulk_got).max(1);
                self.open(k + 1, self.spec.direction, rest, now, out);
            }
        }
    }

    /// The client's address changed (a drive without the tunnel): every connection of this
    /// app is dead; a resuming bulk flow reconnects and asks for the rest.
    pub fn on_new_address(&mut self, now: Duration, out: &mut Emit) {
        if self.spec.kind != FlowKind::Bulk || self.bulk_done.is_some() {
            return;
        }
        let mut started = false;
        for (k, c) in self.conns.iter_mut().enumerate() {
            let Some(c) = c.as_mut().filter(|c| !c.dead) else {
                continue;
            };
            started = true;
            c.dead = true;
            if k % 4 == 0 {
                self.bulk_got += c.receiver.delivered();
            }
        }
        if started && self.spec.resume && self.resumes < MAX_RESUMES {
            let base = 1 + 4 * self.resumes;
            self.resumes += 1;
            self.open(base, Direction::Up, 1, now, out);
        }
    }

    fn on_udp(&mut self, now: Duration, payload: &[u8]) {
        let Some(sent) = payload.get(8..16) else {
            return;
        };
        let sent = u64::from_be_bytes(sent.try_into().expect("8 bytes"));
        let transit = now.as_nanos() as f64 - sent as f64;
        let seq = payload[..8]
            .try_into()
            .map(u64::from_be_bytes)
            .expect("8 bytes");
        if let Some(e) = self
            .cbr_trace
            .as_mut()
            .and_then(|t| t.get_mut(seq as usize))
        {
            if e.1 == crate::handoff::NOT_RECEIVED {
                e.1 = (now.as_micros() as u64).saturating_sub(sent / 1000) as u32;
            }
        }
        self.cbr_received += 1;
        if self
            .spec
            .deadline
            .is_some_and(|d| transit > d.as_nanos() as f64)
        {
            self.cbr_late += 1;
        }
        let first = self.cbr_rx_window.map_or(now, |(a, _)| a);
        self.cbr_rx_window = Some((first, now));
        self.cbr_bytes += (payload.len() + packet::UDP_HEADERS) as u64;
        self.cbr_latency
            .add(Duration::from_nanos(transit.max(0.0) as u64));
        // RFC 3550 interarrival jitter.
        if let Some(last) = self.cbr_last_transit {
            self.cbr_jitter += ((transit - last).abs() - self.cbr_jitter) / 16.0;
        }
        self.cbr_last_transit = Some(transit);
    }

    /// What the flow achieved by `end`.
    pub fn report(&self, index: usize, end: Duration) -> TrafficReport {
        let start = self.spec.start;
        let span = end.saturating_sub(start).as_secs_f64().max(1e-9);
        let mut r = TrafficReport {
            name: if self.spec.name.is_empty() {
                format!("flow{index}")
            } else {
                self.spec.name.clone()
            },
            kind: self.spec.kind,
            direction: self.spec.direction,
            client: self.client,
            ..Default::default()
        };
        let mut tcp = TcpStats::default();
        let bulk = self.spec.kind == FlowKind::Bulk;
        for (k, c) in self.conns.iter().enumerate() {
            let Some(c) = c else { continue };
            tcp.retransmits += c.sender.stats.retransmits;
            tcp.fast_retransmits += c.sender.stats.fast_retransmits;
            tcp.timeouts += c.sender.stats.timeouts;
            tcp.segments += c.sender.stats.segments;
            if !bulk || k % 4 == 0 {
                r.bytes_delivered += c.receiver.delivered();
            }
        }
        match self.spec.kind {
            FlowKind::Bulk => {
                // Measured from the flow's own start (drawn when `start_max` is set).
                let start = self.started_at.unwrap_or(start);
                r.completion_s = self
                    .bulk_done
                    .map(|t| t.saturating_sub(start).as_secs_f64());
                r.reconnects = self.spec.resume.then_some(u32::from(self.resumes));
                let busy = r.completion_s.unwrap_or(span).max(1e-9);
                r.goodput_mbit = r.bytes_delivered as f64 * 8.0 / busy / 1e6;
                r.tcp = Some(tcp);
            }
            FlowKind::Web => {
                r.goodput_mbit = r.bytes_delivered as f64 * 8.0 / span / 1e6;
                r.objects_done = Some(self.object_times.len() as u32);
                r.object_s = crate::stats::summary(&self.object_times);
                r.tcp = Some(tcp);
            }
            FlowKind::Cbr | FlowKind::Saturate => {
                // Rate over the receiving window (first to last arrival): the source stops
                // at `stop` but a backlogged tunnel queue drains after it.
                let window = self
                    .cbr_rx_window
                    .map_or(0.0, |(a, b)| b.saturating_sub(a).as_secs_f64());
                r.bytes_delivered = self.cbr_bytes;
                r.goodput_mbit = self.cbr_bytes as f64 * 8.0 / window.max(1e-9) / 1e6;
                r.sent = Some(self.cbr_sent);
                r.received = Some(self.cbr_received);
                r.late = self.spec.deadline.map(|_| self.cbr_late);
                let lost = self.cbr_sent.saturating_sub(self.cbr_received);
                r.loss = Some(lost as f64 / self.cbr_sent.max(1) as f64);
                r.latency_ms = self.cbr_latency.summary_ms();
                r.jitter_ms = Some(self.cbr_jitter / 1e6);
            }
        }
        r
    }
}
