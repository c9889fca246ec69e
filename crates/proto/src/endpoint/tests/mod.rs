//! End-to-end tests of the core: a real `Client` and `Server` driven over simulated links
//! (delay, rate, random loss, blackholes, address changes) in virtual time — quinn's
//! `Pair` idea. The tests assert what a user sees: packets delivered intact, no
//! duplicates, failover times, counters of refused input; their bounds are derived from
//! the protocol parameters (`SessionConfig`, `HANDSHAKE_RETRY`, `REKEY_AFTER`).
//!
//! This file is the harness; the tests are grouped by theme in the submodules.
//! Invariants of the harness: it is fully deterministic for a given seed (one seeded RNG,
//! a time-ordered heap with a sequence tie-break), and it never alters a datagram.

mod basic;
mod best;
mod dynamics;
mod failover;
mod flood;
mod flood_rejoin;
mod hostile;
mod inner_v6;
mod keepalive;
mod lifecycle;
mod links;
mod mobility;
mod realtime;
mod realtime_video;
mod redundant;
mod relays;
mod reload;
mod reordering;
mod shards;
mod stated;
mod throughput;

use super::*;
use crate::crypto::{CipherSet, StaticSecret};
use crate::path::PathId;
use crate::policy::{Classifier, Policy};
use crate::session::{Event, SessionConfig};
use crate::Instant;
use core::time::Duration;
use etherparse::checksum::Sum16BitWords;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

const SERVER: &str = "10.9.9.9:7000";
/// Path id the harness uses for datagrams injected by an attacker (no link involved).
const INJECTED: u8 = u8::MAX;
/// Datagrams at least this long carry an IP packet (tests use packets of ≥ 200 bytes;
/// handshakes are 148/93 bytes, cookie replies 64, ACK/PING-only datagrams under 80).
const DATA_MIN_LEN: usize = 200;

#[derive(Clone, Copy)]
struct Link {
    delay: Duration,
    rate_bps: Option<f64>,
    loss: f64,
    /// Drops everything sent on the link and everything still in flight on it.
    blackhole: bool,
    /// Extra delay, uniform in `[0, jitter)` per datagram: datagrams overtake each other
    /// (a link that reorders, as Wi-Fi and load-balanced routes do).
    jitter: Duration,
    /// Drops the datagrams sent within `[from, to)` (not those already in flight).
    drop_window: Option<(Instant, Instant)>,
    /// Datagrams the link dropped (loss, blackhole, drop window, full queue).
    dropped: u64,
    busy_until: Instant,
}

impl Link {
    fn new(delay_ms: u64, mbit: Option<f64>) -> Self {
        Link {
            delay: Duration::from_millis(delay_ms),
            rate_bps: mbit.map(|m| m * 1e6),
            loss: 0.0,
            blackhole: false,
            jitter: Duration::ZERO,
            drop_window: None,
            dropped: 0,
            busy_until: Instant::ZERO,
        }
    }
}

/// SocketAddr is not Ord; the heap needs an ordered stand-in (IPv4 only in these tests).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct AddrKey(u32, u16);

fn key(a: SocketAddr) -> AddrKey {
    match a.ip() {
        IpAddr::V4(v) => AddrKey(u32::from(v), a.port()),
        IpAddr::V6(_) => panic!("the harness models IPv4 links only"),
    }
}

fn unkey(k: AddrKey) -> SocketAddr {
    SocketAddr::new(Ipv4Addr::from(k.0).into(), k.1)
}

/// A datagram in flight: arrival, tie-break, towards the server, path, address (the
/// source for upstream datagrams, the destination for downstream ones), bytes.
type Flight = (Instant, u64, bool, u8, AddrKey, Vec<u8>);

/// One datagram handed to a link (before loss), for assertions on who sent what when.
#[derive(Debug, Clone, Copy)]
struct Sent {
    at: Instant,
    to_server: bool,
    path: u8,
    len: usize,
}

/// IP packets handed to one side's TUN device, with the time.
type Delivered = Vec<(Instant, Vec<u8>)>;

struct Pair {
    now: Instant,
    client: Client,
    server: Server,
    server_cfg: ServerConfig,
    up: Vec<Link>,
    down: Vec<Link>,
    client_addrs: Vec<SocketAddr>,
    heap: BinaryHeap<Reverse<Flight>>,
    seq: u64,
    rng: ChaCha8Rng,
    delivered_up: Delivered,
    delivered_down: Delivered,
    client_events: Vec<(Instant, Event)>,
    server_events: Vec<(Instant, Event)>,
    sent: Vec<Sent>,
    /// Upstream datagrams as sent, kept only when `capture_up` is set (garbage test).
    captured_up: Vec<(Instant, Vec<u8>)>,
    capture_up: bool,
    /// Downstream datagrams that arrived for an address the client no longer has.
    misaddressed: Vec<(Instant, usize)>,
}

fn keys() -> (StaticSecret, StaticSecret) {
    (
        StaticSecret::from_bytes([11; 32]),
        StaticSecret::from_bytes([22; 32]),
    )
}

fn session_cfg() -> SessionConfig {
    SessionConfig::default()
}

impl Pair {
    /// Both sides accept both data ciphers (so they use AES-256-GCM).
    fn new(links: Vec<Link>, policy: Policy, client_key: Option<StaticSecret>, seed: u64) -> Pair {
        Pair::with_ciphers(
            links,
            policy,
            client_key,
            seed,
            (CipherSet::ALL, CipherSet::ALL),
        )
    }

    /// The client offers `ciphers.0`, the server accepts `ciphers.1`.
    fn with_ciphers(
        links: Vec<Link>,
        policy: Policy,
        client_key: Option<StaticSecret>,
        seed: u64,
        ciphers: (CipherSet, CipherSet),
    ) -> Pair {
        Pair::build(links, policy, client_key, seed, ciphers, session_cfg())
    }

    /// Both sides use session parameters `session`.
    fn with_session(links: Vec<Link>, policy: Policy, seed: u64, session: SessionConfig) -> Pair {
        let all = (CipherSet::ALL, CipherSet::ALL);
        Pair::build(links, policy, None, seed, all, session)
    }

    fn build(
        links: Vec<Link>,
        policy: Policy,
        client_key: Option<StaticSecret>,
        seed: u64,
        ciphers: (CipherSet, CipherSet),
        session: SessionConfig,
    ) -> Pair {
        let (ck, sk) = keys();
        let server_cfg = ServerConfig {
            local_key: sk.clone(),
            peers: vec![PeerConfig {
                name: "home".into(),
                public_key: ck.public_key(),
                allowed_ips: vec!["10.200.0.2/32".parse().unwrap()],
            }],
            session,
            default_policy: policy,
            downstream_copies: None,
            ciphers: ciphers.1,
        };
        let server = Server::new(server_cfg.clone(), seed);
        let client = Client::new(
            ClientConfig {
                local_key: client_key.unwrap_or(ck),
                server_key: sk.public_key(),
                session,
                classifier: Classifier::uniform(policy),
                epoch_us: 1_700_000_000_000_000,
                ciphers: ciphers.0,
            },
            seed + 1,
        );
        let n = links.len();
        let mut p = Pair {
            now: Instant::ZERO,
            client,
            server,
            server_cfg,
            up: links.clone(),
            down: links,
            client_addrs: (0..n)
                .map(|i| format!("10.0.{i}.2:5000").parse().unwrap())
                .collect(),
            heap: BinaryHeap::new(),
            seq: 0,
            rng: ChaCha8Rng::seed_from_u64(seed),
            delivered_up: vec![],
            delivered_down: vec![],
            client_events: vec![],
            server_events: vec![],
            sent: vec![],
            captured_up: vec![],
            capture_up: false,
            misaddressed: vec![],
        };
        for i in 0..n {
            p.client
                .add_link(Instant::ZERO, PathId(i as u8), SERVER.parse().unwrap());
        }
        p
    }

    fn at(ms: u64) -> Instant {
        Instant::from_micros(ms * 1000)
    }

    /// Replaces the server by a fresh process with the same configuration (a restart:
    /// all session state lost, datagrams already in flight reach the new one).
    fn restart_server(&mut self, seed: u64) {
        self.server = Server::new(self.server_cfg.clone(), seed);
    }

    /// Blackholes (or restores) link `i` in both directions.
    fn set_blackhole(&mut self, i: usize, on: bool) {
        self.up[i].blackhole = on;
        self.down[i].blackhole = on;
    }

    /// Delivers `bytes` to the server at `at` from `from`, bypassing every link.
    fn inject(&mut self, at: Instant, from: SocketAddr, bytes: Vec<u8>) {
        self.seq += 1;
        self.heap
            .push(Reverse((at, self.seq, true, INJECTED, key(from), bytes)));
    }

    fn send(&mut self, to_server: bool, path: u8, addr: SocketAddr, bytes: Vec<u8>) {
        let now = self.now;
        self.sent.push(Sent {
            at: now,
            to_server,
            path,
            len: bytes.len(),
        });
        if to_server && self.capture_up {
            self.captured_up.push((now, bytes.clone()));
        }
        let link = if to_server {
            &mut self.up[path as usize]
        } else {
            &mut self.down[path as usize]
        };
        let roll = (self.rng.next_u32() as f64) / (u32::MAX as f64);
        let windowed = link.drop_window.is_some_and(|(a, b)| a <= now && now < b);
        if link.blackhole || roll < link.loss || windowed {
            link.dropped += 1;
            return;
        }
        let depart = match link.rate_bps {
            Some(r) => {
                let start = link.busy_until.max(now);
                if start.saturating_since(now) > Duration::from_millis(100) {
                    link.dropped += 1;
                    return; // drop-tail: 100 ms of queue
                }
                let t = start + Duration::from_secs_f64(bytes.len() as f64 * 8.0 / r);
                link.busy_until = t;
                t
            }
            None => now,
        };
        // Drawn only on jittery links, so the other tests' random sequence is unchanged.
        let jitter = if link.jitter.is_zero() {
            Duration::ZERO
        } else {
            link.jitter
                .mul_f64(f64::from(self.rng.next_u32()) / (f64::from(u32::MAX) + 1.0))
        };
        self.seq += 1;
        self.heap.push(Reverse((
            depart + link.delay + jitter,
            self.seq,
            to_server,
            path,
            key(addr),
            bytes,
        )));
    }

    fn flush(&mut self) {
        let mut buf = vec![0u8; 2048];
        while let Some(t) = self.client.poll_transmit(self.now, &mut buf) {
            let from = self.client_addrs[t.path.0 as usize];
            if t.kernel_copies {
                // The kernel fast path (nftables `dup`): the same datagram on every other
                // link, from that link's address.
                for j in (0..self.up.len()).filter(|&j| j != usize::from(t.path.0)) {
                    let addr = self.client_addrs[j];
                    self.send(true, j as u8, addr, buf[..t.len].to_vec());
                }
            }
            self.send(true, t.path.0, from, buf[..t.len].to_vec());
        }
        while let Some(t) = self.server.poll_transmit(self.now, &mut buf) {
            self.send(false, t.path.0, t.dst, buf[..t.len].to_vec());
        }
        while let Some(n) = self.client.poll_deliver(&mut buf) {
            self.delivered_down.push((self.now, buf[..n].to_vec()));
        }
        while let Some(n) = self.server.poll_deliver(&mut buf) {
            self.delivered_up.push((self.now, buf[..n].to_vec()));
        }
        while let Some(e) = self.client.poll_event() {
            self.client_events.push((self.now, e));
        }
        while let Some((_, e)) = self.server.poll_event() {
            self.server_events.push((self.now, e));
        }
    }

    fn arrive(&mut self, to_server: bool, path: u8, addr: AddrKey, mut bytes: Vec<u8>) {
        if path != INJECTED {
            let link = if to_server {
                &self.up[path as usize]
            } else {
                &self.down[path as usize]
            };
            if link.blackhole {
                return;
            }
        }
        if to_server {
            self.server
                .handle_datagram(self.now, unkey(addr), &mut bytes);
        } else if unkey(addr) != self.client_addrs[path as usize] {
            self.misaddressed.push((self.now, bytes.len()));
        } else {
            let from: SocketAddr = SERVER.parse().unwrap();
            self.client
                .handle_datagram(self.now, PathId(path), from, &mut bytes);
        }
    }

    /// Runs until `until`, processing arrivals and timers in time order.
    fn run_until(&mut self, until: Instant) {
        let mut spins = 0u32;
        let mut last = self.now;
        loop {
            spins = if self.now == last { spins + 1 } else { 0 };
            last = self.now;
            assert!(
                spins < 100_000,
                "time stuck at {:?}: client timeout {:?}, server timeout {:?}",
                self.now,
                self.client.poll_timeout(),
                self.server.poll_timeout()
            );
            self.flush();
            let next_arrival = self.heap.peek().map(|Reverse(f)| f.0);
            let next = [
                next_arrival,
                self.client.poll_timeout(),
                self.server.poll_timeout(),
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(until)
            .max(self.now);
            if next > until {
                self.now = until;
                return;
            }
            self.now = next;
            while self.heap.peek().is_some_and(|Reverse(f)| f.0 <= self.now) {
                let Reverse((_, _, to_server, path, addr, bytes)) = self.heap.pop().unwrap();
                self.arrive(to_server, path, addr, bytes);
            }
            if self.client.poll_timeout().is_some_and(|t| t <= self.now) {
                self.client.handle_timeout(self.now);
            }
            if self.server.poll_timeout().is_some_and(|t| t <= self.now) {
                self.server.handle_timeout(self.now);
            }
        }
    }

    /// Runs until the client has keys (checking every 100 ms from 0.5 s, at most 10 s).
    fn establish(&mut self) {
        let mut t = Pair::at(500);
        while !self.client.is_established() && t < Pair::at(10_000) {
            self.run_until(t);
            t = t + Duration::from_millis(100);
        }
        assert!(self.client.is_established(), "handshake did not complete");
    }

    /// From now, sends packets `0..count` of `size` bytes (`packet`: upstream and/or
    /// downstream), one every `gap`, calling `each(pair, n)` just before packet `n`; then
    /// runs `tail` more. Returns the time packet `count` would have been sent.
    fn traffic(
        &mut self,
        count: u32,
        gap: Duration,
        size: usize,
        dirs: (bool, bool),
        tail: Duration,
        each: impl FnMut(&mut Pair, u32),
    ) -> Instant {
        self.traffic_of(count, gap, |up, n| packet(up, n, size), dirs, tail, each)
    }

    /// As `traffic`, packet `n` of direction `up` built by `build(up, n)`.
    fn traffic_of(
        &mut self,
        count: u32,
        gap: Duration,
        build: impl Fn(bool, u32) -> Vec<u8>,
        (up, down): (bool, bool),
        tail: Duration,
        mut each: impl FnMut(&mut Pair, u32),
    ) -> Instant {
        let mut t = self.now;
        for n in 0..count {
            self.run_until(t);
            each(self, n);
            let now = self.now;
            if up {
                self.client.handle_tun_packet(now, &build(true, n));
            }
            if down {
                self.server.handle_tun_packet(now, &build(false, n));
            }
            t = t + gap;
        }
        self.run_until(t + tail);
        t
    }

    /// Uploads packets of `size` bytes at `bits_per_s` for `secs`, then runs one second
    /// more for the last to arrive; returns how many were sent.
    fn upload_paced(&mut self, size: usize, bits_per_s: f64, secs: f64) -> u32 {
        let (count, gap) = paced(size, bits_per_s, secs);
        self.traffic(
            count,
            gap,
            size,
            (true, false),
            Duration::from_secs(1),
            |_, _| {},
        );
        count
    }

    /// The server's session for the one peer.
    fn server_session(&self) -> &crate::session::Session {
        self.server
            .peers()
            .next()
            .and_then(|p| p.session)
            .expect("server has a session")
    }
}

/// An IPv4 packet carrying `n` (client 10.200.0.2 <-> origin 10.50.0.1): TCP with the
/// timestamp option and valid checksums from 52 bytes on (so the header compression of
/// `header_compress.rs` is exercised by every test and must restore it byte for byte),
/// UDP below.
/// Packets of `size` bytes at `bits_per_s` for `secs`: how many, and the gap between them.
fn paced(size: usize, bits_per_s: f64, secs: f64) -> (u32, Duration) {
    let gap = Duration::from_secs_f64(size as f64 * 8.0 / bits_per_s);
    ((secs / gap.as_secs_f64()) as u32, gap)
}

fn packet(up: bool, n: u32, size: usize) -> Vec<u8> {
    ip_packet(up, n, size, size.max(32) >= 52)
}

/// A UDP packet of `size` bytes (≥ 32) carrying `n`, as `packet` builds below 52 bytes.
fn udp_packet(up: bool, n: u32, size: usize) -> Vec<u8> {
    ip_packet(up, n, size, false)
}

/// `packet`'s body: TCP (from 52 bytes) or UDP as `tcp` says.
fn ip_packet(up: bool, n: u32, size: usize, tcp: bool) -> Vec<u8> {
    let mut p = vec![0u8; size.max(32)];
    let len = p.len() as u16;
    p[0] = 0x45;
    p[2..4].copy_from_slice(&len.to_be_bytes());
    p[4..6].copy_from_slice(&(n as u16).to_be_bytes());
    p[6] = 0x40;
    p[8] = 64;
    p[9] = if tcp { 6 } else { 17 };
    let (a, b) = ([10, 200, 0, 2], [10, 50, 0, 1]);
    let (src, dst) = if up { (a, b) } else { (b, a) };
    p[12..16].copy_from_slice(&src);
    p[16..20].copy_from_slice(&dst);
    p[20..22].copy_from_slice(&4000u16.to_be_bytes());
    p[22..24].copy_from_slice(&5004u16.to_be_bytes());
    p[28..32].copy_from_slice(&n.to_be_bytes());
    let body = if tcp { 52 } else { 32 };
    if tcp {
        p[24..28].copy_from_slice(&n.wrapping_mul(1448).to_be_bytes());
        p[32] = 0x80;
        p[33] = 0x18;
        p[34..36].copy_from_slice(&502u16.to_be_bytes());
        p[40..44].copy_from_slice(&[1, 1, 8, 10]);
        p[44..48].copy_from_slice(&n.wrapping_add(7).to_be_bytes());
        p[48..52].copy_from_slice(&n.to_be_bytes());
    }
    // Fill the rest with a pattern depending on n, so a corrupted or mixed-up payload
    // cannot pass for the right one.
    for (i, b) in p[body..].iter_mut().enumerate() {
        *b = (n as usize).wrapping_mul(31).wrapping_add(i) as u8;
    }
    // etherparse sums 16-bit words in native order: native bytes are the field's bytes.
    let ip_sum = Sum16BitWords::new().add_slice(&p[..20]).ones_complement();
    p[10..12].copy_from_slice(&ip_sum.to_ne_bytes());
    if tcp {
        let tcp_sum = Sum16BitWords::new()
            .add_slice(&p[12..20])
            .add_2bytes([0, 6])
            .add_2bytes(((p.len() - 20) as u16).to_be_bytes())
            .add_slice(&p[20..])
            .ones_complement();
        p[36..38].copy_from_slice(&tcp_sum.to_ne_bytes());
    }
    p
}

fn number(p: &[u8]) -> u32 {
    u32::from_be_bytes(p[28..32].try_into().unwrap())
}

fn numbers(d: &[(Instant, Vec<u8>)]) -> Vec<u32> {
    d.iter().map(|(_, p)| number(p)).collect()
}

/// Asserts every delivered packet is byte-identical to the one sent with its number and
/// none was delivered twice; returns the sorted numbers delivered.
fn assert_intact_unique(d: &[(Instant, Vec<u8>)], up: bool, size: usize, what: &str) -> Vec<u32> {
    assert_intact_unique_as(d, |n| packet(up, n, size), what)
}

/// As `assert_intact_unique`, each packet `n` compared with `expected(n)`.
fn assert_intact_unique_as(
    d: &[(Instant, Vec<u8>)],
    expected: impl Fn(u32) -> Vec<u8>,
    what: &str,
) -> Vec<u32> {
    for (_, p) in d {
        assert_eq!(p, &expected(number(p)), "{what}: corrupted packet");
    }
    let mut got = numbers(d);
    got.sort_unstable();
    let before = got.len();
    got.dedup();
    assert_eq!(got.len(), before, "{what}: duplicates delivered");
    got
}

/// Longest time between consecutive deliveries.
fn longest_gap(d: &[(Instant, Vec<u8>)]) -> Duration {
    d.windows(2)
        .map(|w| w[1].0.saturating_since(w[0].0))
        .max()
        .unwrap_or_default()
}
