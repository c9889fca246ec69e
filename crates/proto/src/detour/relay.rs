//! The relay's side of the protocol: authenticates requests, keeps the bounded table of
//! detours with their expiry, and writes the answers. Sans-IO: the daemon installs what an
//! [`Admitted`] request asks (an nftables element, a tunnel socket), then calls
//! [`DetourRelay::answer`] with the outcome; it removes what [`DetourRelay::poll_expired`]
//! returns.
//!
//! Invariants:
//! - Nothing answers, and no state changes, unless the request's Noise message 1 verified,
//!   its static key is on the list and its timestamp is above the last one accepted from
//!   that key; everything else only increments a counter.
//! - The table never holds more than `max_per_client` detours of one client, nor more than
//!   `max_total` in all, nor two detours on one port.
//! - A detour is identified by (client key, observed source, server, mode): asking again
//!   renews it (same port, new expiry); it is removed at its expiry, on release, or when
//!   its installation failed.

use super::wire::{
    emit_answer_payload, emit_header, parse_header, parse_request_payload, Answer, Mode, Request,
    Status, ANSWER_LEN, HEADER_LEN, PROLOGUE, REQUEST_PAYLOAD_LEN, TYPE_ANSWER, TYPE_REQUEST,
};
use crate::crypto::noise::builder_with_prologue;
use crate::crypto::{PublicKey, StaticSecret};
use crate::Instant;
use ipnet::IpNet;
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use snow::HandshakeState;
use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Which modes a relay offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModeSet {
    /// Kernel NAT detours (UDP tunnel paths and TCP subflows).
    pub nat: bool,
    /// Userspace tunnel detours.
    pub tunnel: bool,
}

impl ModeSet {
    /// Whether `m` is offered.
    pub fn contains(self, m: Mode) -> bool {
        match m {
            Mode::Nat | Mode::NatTcp => self.nat,
            Mode::Tunnel => self.tunnel,
        }
    }
}

/// The relay's settings.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// The relay's static key.
    pub local_key: StaticSecret,
    /// Allowed clients' public keys (an index into this list names a client).
    pub clients: Vec<PublicKey>,
    /// Modes offered.
    pub modes: ModeSet,
    /// Relay ports handed out, inclusive.
    pub ports: (u16, u16),
    /// Life of a detour from its last request.
    pub lifetime: Duration,
    /// Detours per client.
    pub max_per_client: usize,
    /// Detours in all.
    pub max_total: usize,
    /// Requests verified per second at most (each costs four X25519 operations); the rest
    /// are dropped unread. Also the burst.
    pub max_requests_per_s: u32,
    /// If not empty, servers must be inside one of these prefixes.
    pub allowed_destinations: Vec<IpNet>,
}

impl RelayConfig {
    /// Defaults: both modes, ports 40000–40999, 300 s, 16 per client, 1024 in all,
    /// 2000 requests/s, any public destination.
    pub fn new(local_key: StaticSecret, clients: Vec<PublicKey>) -> Self {
        RelayConfig {
            local_key,
            clients,
            modes: ModeSet {
                nat: true,
                tunnel: true,
            },
            ports: (40000, 40999),
            lifetime: Duration::from_secs(300),
            max_per_client: 16,
            max_total: 1024,
            max_requests_per_s: 2000,
            allowed_destinations: Vec::new(),
        }
    }
}

/// One detour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Entry {
    /// The relay port the client sends to.
    pub port: u16,
    /// The client (index into `RelayConfig::clients`).
    pub client: usize,
    /// The client's source as the relay saw it (the only source forwarded).
    pub source: SocketAddr,
    /// Where the datagrams go.
    pub server: SocketAddr,
    /// NAT or tunnel.
    pub mode: Mode,
    /// When it is removed unless renewed.
    pub expires: Instant,
}

/// What the daemon must do before answering an admitted request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing (a refusal).
    None,
    /// Install this new detour.
    Install(Entry),
    /// Extend this detour's life to its new `expires`.
    Renew(Entry),
    /// Remove this detour (released by its client; already out of the table).
    Remove(Entry),
}

/// A verified request waiting for its answer.
pub struct Admitted {
    hs: HandshakeState,
    from: SocketAddr,
    request_id: u32,
    /// The client (index into `RelayConfig::clients`).
    pub client: usize,
    /// What it asked.
    pub request: Request,
    /// What to do before answering.
    pub action: Action,
    status: Status,
}

impl Admitted {
    /// The status the answer will carry if the action succeeds.
    pub fn status(&self) -> Status {
        self.status
    }

    /// Where the answer goes.
    pub fn from(&self) -> SocketAddr {
        self.from
    }
}

/// Counters of the relay side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayCounters {
    /// Datagrams received on the request socket.
    pub rx_datagrams: u64,
    /// Not a relay request (length, type, version, reserved bytes).
    pub rx_malformed: u64,
    /// Dropped unread over `max_requests_per_s`.
    pub rx_rate_limited: u64,
    /// Noise message 1 did not verify (wrong relay key, forged, corrupted, bad payload).
    pub rx_unauthenticated: u64,
    /// Verified, but from a key not on the list.
    pub rx_unknown_client: u64,
    /// Timestamp not above the last accepted one of that key.
    pub rx_replayed: u64,
    /// Answers sent.
    pub answers: u64,
    /// Detours created.
    pub installed: u64,
    /// Detours renewed.
    pub renewed: u64,
    /// Detours released by their clients.
    pub released: u64,
    /// Detours expired.
    pub expired: u64,
    /// Refused: mode not offered.
    pub refused_mode: u64,
    /// Refused: client at its limit.
    pub refused_client_limit: u64,
    /// Refused: relay full.
    pub refused_full: u64,
    /// Refused: destination not allowed.
    pub refused_destination: u64,
    /// Installation failed.
    pub failed: u64,
}

type FlowKey = (usize, SocketAddr, SocketAddr, Mode);

/// The relay's side of the protocol.
pub struct DetourRelay {
    cfg: RelayConfig,
    by_key: HashMap<PublicKey, usize>,
    last_ts: Vec<u64>,
    per_client: Vec<usize>,
    entries: HashMap<u16, Entry>,
    by_flow: HashMap<FlowKey, u16>,
    expiry: BTreeSet<(Instant, u16)>,
    rng: ChaCha20Rng,
    tokens: f64,
    tokens_at: Instant,
    counters: RelayCounters,
}

impl DetourRelay {
    /// A relay with an empty table; `seed` feeds ephemeral keys and port choice.
    pub fn new(cfg: RelayConfig, seed: [u8; 32]) -> Self {
        let by_key = cfg
            .clients
            .iter()
            .enumerate()
            .map(|(i, k)| (*k, i))
            .collect();
        let n = cfg.clients.len();
        DetourRelay {
            tokens: f64::from(cfg.max_requests_per_s),
            cfg,
            by_key,
            last_ts: vec![0; n],
            per_client: vec![0; n],
            entries: HashMap::new(),
            by_flow: HashMap::new(),
            expiry: BTreeSet::new(),
            rng: ChaCha20Rng::from_seed(seed),
            tokens_at: Instant::ZERO,
            counters: RelayCounters::default(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &RelayConfig {
        &self.cfg
    }

    /// A datagram from `from` on the request socket. `Some` only for a verified request of
    /// a listed client with a fresh timestamp: the daemon performs its `action` and then
    /// calls [`DetourRelay::answer`]. Everything else is counted and dropped.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        data: &[u8],
    ) -> Option<Admitted> {
        self.counters.rx_datagrams += 1;
        let h = match parse_header(data) {
            Ok(h) if h.kind == TYPE_REQUEST => h,
            _ => {
                self.counters.rx_malformed += 1;
                return None;
            }
        };
        if !self.take_token(now) {
            self.counters.rx_rate_limited += 1;
            return None;
        }
        let mut seed = [0u8; 32];
        self.rng.fill_bytes(&mut seed);
        let Some((hs, key, ts, request)) = self.read_request(seed, h.request_id, data) else {
            self.counters.rx_unauthenticated += 1;
            return None;
        };
        let Some(&client) = self.by_key.get(&key) else {
            self.counters.rx_unknown_client += 1;
            return None;
        };
        if ts <= self.last_ts[client] {
            self.counters.rx_replayed += 1;
            return None;
        }
        self.last_ts[client] = ts;
        let (status, action) = self.decide(now, client, from, &request);
        Some(Admitted {
            hs,
            from,
            request_id: h.request_id,
            client,
            request,
            action,
            status,
        })
    }

    fn read_request(
        &self,
        seed: [u8; 32],
        header_id: u32,
        data: &[u8],
    ) -> Option<(HandshakeState, PublicKey, u64, Request)> {
        let mut hs = builder_with_prologue(seed, PROLOGUE)
            .local_private_key(self.cfg.local_key.as_bytes())
            .build_responder()
            .ok()?;
        let mut payload = [0u8; 64];
        let n = hs.read_message(&data[HEADER_LEN..], &mut payload).ok()?;
        if n != REQUEST_PAYLOAD_LEN {
            return None;
        }
        let (ts, id, request) = parse_request_payload(&payload[..n]).ok()?;
        if id != header_id {
            return None;
        }
        let key = PublicKey(hs.get_remote_static()?.try_into().ok()?);
        Some((hs, key, ts, request))
    }

    fn take_token(&mut self, now: Instant) -> bool {
        let rate = f64::from(self.cfg.max_requests_per_s);
        let dt = now.saturating_since(self.tokens_at).as_secs_f64();
        self.tokens_at = now;
        self.tokens = (self.tokens + dt * rate).min(rate);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    fn decide(
        &mut self,
        now: Instant,
        client: usize,
        from: SocketAddr,
        req: &Request,
    ) -> (Status, Action) {
        let key = (client, from, req.server, req.mode);
        if req.release {
            return match self.by_flow.get(&key).copied() {
                Some(port) => {
                    let e = self.remove(port).expect("by_flow and entries agree");
                    self.counters.released += 1;
                    (Status::Released, Action::Remove(e))
                }
                None => (Status::NotFound, Action::None),
            };
        }
        if !self.cfg.modes.contains(req.mode) {
            self.counters.refused_mode += 1;
            return (Status::ModeNotOffered, Action::None);
        }
        if !self.destination_allowed(from, req) {
            self.counters.refused_destination += 1;
            return (Status::DestinationRefused, Action::None);
        }
        let expires = now + self.cfg.lifetime;
        if let Some(&port) = self.by_flow.get(&key) {
            let e = self
                .entries
                .get_mut(&port)
                .expect("by_flow and entries agree");
            self.expiry.remove(&(e.expires, port));
            e.expires = expires;
            self.expiry.insert((expires, port));
            self.counters.renewed += 1;
            return (Status::Ok, Action::Renew(*e));
        }
        if self.per_client[client] >= self.cfg.max_per_client {
            self.counters.refused_client_limit += 1;
            return (Status::ClientLimit, Action::None);
        }
        let Some(port) = self.free_port() else {
            self.counters.refused_full += 1;
            return (Status::RelayFull, Action::None);
        };
        let e = Entry {
            port,
            client,
            source: from,
            server: req.server,
            mode: req.mode,
            expires,
        };
        self.entries.insert(port, e);
        self.by_flow.insert(key, port);
        self.expiry.insert((expires, port));
        self.per_client[client] += 1;
        self.counters.installed += 1;
        (Status::Ok, Action::Install(e))
    }

    fn destination_allowed(&self, from: SocketAddr, req: &Request) -> bool {
        let ip = req.server.ip();
        let bad_class = match ip {
            IpAddr::V4(a) => {
                a.is_unspecified()
                    || a.is_loopback()
                    || a.is_multicast()
                    || a.is_broadcast()
                    || a.is_link_local()
            }
            IpAddr::V6(a) => {
                a.is_unspecified()
                    || a.is_loopback()
                    || a.is_multicast()
                    || a.to_ipv4_mapped().is_some()
                    || (a.segments()[0] & 0xffc0) == 0xfe80
            }
        };
        // NAT rewrites addresses within one family.
        let family_ok = req.mode == Mode::Tunnel || from.is_ipv4() == req.server.is_ipv4();
        let listed = self.cfg.allowed_destinations.is_empty()
            || self
                .cfg
                .allowed_destinations
                .iter()
                .any(|n| n.contains(&ip));
        !bad_class && family_ok && listed && req.server.port() != 0
    }

    fn free_port(&mut self) -> Option<u16> {
        if self.entries.len() >= self.cfg.max_total {
            return None;
        }
        let (lo, hi) = self.cfg.ports;
        let span = u32::from(hi.checked_sub(lo)?) + 1;
        let start = self.rng.next_u32() % span;
        (0..span)
            .map(|i| lo + ((start + i) % span) as u16)
            .find(|p| !self.entries.contains_key(p))
    }

    fn remove(&mut self, port: u16) -> Option<Entry> {
        let e = self.entries.remove(&port)?;
        self.by_flow.remove(&(e.client, e.source, e.server, e.mode));
        self.expiry.remove(&(e.expires, port));
        self.per_client[e.client] -= 1;
        Some(e)
    }

    /// Writes the answer to `adm` into `out` (at least `ANSWER_LEN` bytes) and returns its
    /// length. `installed` says whether the daemon performed the action; if not, a new
    /// detour is taken out of the table again and the client hears `Failed`.
    pub fn answer(&mut self, adm: Admitted, installed: bool, out: &mut [u8]) -> Option<usize> {
        let mut status = adm.status;
        let mut port = 0;
        match adm.action {
            Action::Install(e) | Action::Renew(e) if installed => port = e.port,
            Action::Install(e) => {
                self.remove(e.port);
                self.counters.installed -= 1;
                self.counters.failed += 1;
                status = Status::Failed;
            }
            Action::Renew(_) => {
                self.counters.failed += 1;
                status = Status::Failed;
            }
            Action::Remove(_) | Action::None => {}
        }
        let answer = Answer {
            request_id: adm.request_id,
            status,
            mode: adm.request.mode,
            relay_port: port,
            lifetime_s: if port != 0 {
                self.cfg.lifetime.as_secs().min(u64::from(u32::MAX)) as u32
            } else {
                0
            },
            observed: adm.from,
        };
        let mut hs = adm.hs;
        let out = out.get_mut(..ANSWER_LEN)?;
        emit_header(out, TYPE_ANSWER, adm.request_id);
        hs.write_message(&emit_answer_payload(&answer), &mut out[HEADER_LEN..])
            .ok()?;
        self.counters.answers += 1;
        Some(ANSWER_LEN)
    }

    /// Removes and returns the next detour whose life ended at or before `now`.
    pub fn poll_expired(&mut self, now: Instant) -> Option<Entry> {
        let &(at, port) = self.expiry.first()?;
        if at > now {
            return None;
        }
        self.counters.expired += 1;
        self.remove(port)
    }

    /// The earliest expiry.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.expiry.first().map(|&(at, _)| at)
    }

    /// Removes and returns every detour (the relay is stopping).
    pub fn drain(&mut self) -> Vec<Entry> {
        let ports: Vec<u16> = self.entries.keys().copied().collect();
        ports.into_iter().filter_map(|p| self.remove(p)).collect()
    }

    /// The detour on `port`.
    pub fn entry(&self, port: u16) -> Option<&Entry> {
        self.entries.get(&port)
    }

    /// Every detour, in no particular order.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values()
    }

    /// Detours of `client`.
    pub fn client_entries(&self, client: usize) -> usize {
        self.per_client.get(client).copied().unwrap_or(0)
    }

    /// Number of detours.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True with no detour.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Counters.
    pub fn counters(&self) -> RelayCounters {
        self.counters
    }
}

/// Reads only the header: is this datagram a relay request (for a socket shared with
/// other traffic)?
pub fn is_request(data: &[u8]) -> bool {
    matches!(parse_header(data), Ok(h) if h.kind == TYPE_REQUEST)
}
