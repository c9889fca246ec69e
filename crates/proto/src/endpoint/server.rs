//! The server endpoint: many clients on one UDP socket.
//!
//! A handshake initiation is answered only if its mac1 shows it knows our public key, it
//! passes the flood defence (`guard.rs`: under load a cookie for its source address and a
//! per-source rate), the client's static key is in the peer list and its timestamp is
//! newer than the last one accepted from that key; the first two cost no Diffie-Hellman.
//! Its answers wait in `replies.rs` until `poll_transmit`: responses first, cookie
//! replies sampled fairly when a flood owes more than are held. A data datagram is
//! routed to its session by receiver index; the session follows the client's address on
//! each path (roaming). Packets from the TUN device go to the peer whose `allowed_ips`
//! contain the destination (longest prefix), and decrypted packets are delivered only if
//! their source lies in the sending peer's `allowed_ips` (cryptokey routing, as WireGuard).
//!
//! Per-packet work does not grow with the number of peers (`index.rs`): routes are looked
//! up by prefix, timers are kept in a deadline heap, and `poll_transmit`/`poll_deliver`
//! visit only peers that were handed input or whose deadline came since they last came
//! back empty, in the round-robin order of a full scan. This rests on `Session`'s
//! contract: `poll_timeout` depends on its state only (not on the clock), so it changes
//! only when the session is called, and a session has output only after a call or at a
//! time it announced — exactly how a client's session is driven. A session is thus no
//! longer polled because some other peer's datagram arrived (with many peers that used
//! to cost a call into every session per datagram).

mod guard;
mod handshake;
mod index;
mod replies;
mod shard;

use super::datagram::Datagram;
use super::EndpointCounters;
use crate::crypto::cookie::{mac1_of, MacKeys};
use crate::crypto::{
    CipherSet, CryptoError, PublicKey, Responder, StaticSecret, INIT_FLAG_FRESH, INIT_FLAG_RELAYS,
    RESP_FLAG_NEW_SESSION,
};
use crate::detour::RelaySpec;
use crate::path::PathId;
use crate::policy::Policy;
use crate::session::{Event, Keypair, SealedData, Session, SessionConfig, Side, Transmit};
use crate::wire::outer::NOISE_RESP_LEN;
use crate::wire::{outer, OuterPacket, HANDSHAKE_RESP_LEN};
use crate::Instant;
use guard::{Admit, Guard};
pub use guard::{LOAD_THRESHOLD, MAX_SOURCES, RATE_BURST, RATE_PER_SEC};
use index::{PeerSet, Routes, Timers};
use ipnet::IpNet;
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use replies::Replies;
pub use replies::{MAX_COOKIE_REPLIES, MAX_RESPONSES};
use shard::Handoffs;
pub use shard::{Handoff, Shard, MAX_HANDOFFS, MAX_SHARDS};
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;

/// One allowed client.
#[derive(Debug, Clone)]
pub struct PeerConfig {
    /// Name for status and logs.
    pub name: String,
    /// The client's static public key.
    pub public_key: PublicKey,
    /// Inner addresses routed to this client and accepted from it.
    pub allowed_ips: Vec<IpNet>,
}

/// Server parameters.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Our static key.
    pub local_key: StaticSecret,
    /// Allowed clients.
    pub peers: Vec<PeerConfig>,
    /// Data-plane parameters.
    pub session: SessionConfig,
    /// Policy for downstream flows the client has not used yet.
    pub default_policy: Policy,
    /// Copies of a downstream `redundant` packet: a fixed number instead of the adaptive
    /// choice (the client's `copies` is not carried on the wire, §8.5).
    pub downstream_copies: Option<u8>,
    /// Data ciphers we accept (`CipherSet::hardware()` unless configured).
    pub ciphers: CipherSet,
}

struct Peer {
    cfg: PeerConfig,
    last_timestamp: u64,
    /// Boxed: a configured peer without a session costs a pointer, not a `Session`
    /// (6.6 KB), in every thread's peer table.
    session: Option<Box<Session>>,
    /// Its latest handshake said it takes relay lists (`INIT_FLAG_RELAYS`).
    takes_relays: bool,
}

/// The relays handed to clients (docs/PROTOCOL.md §15.7), encoded once.
struct Handed {
    /// +1 per change; every client that takes lists gets the newest.
    epoch: u32,
    list: Vec<RelaySpec>,
    count: u8,
    encoded: Vec<u8>,
}

/// A peer's state for `status`.
pub struct PeerStatus<'a> {
    /// Its configuration.
    pub config: &'a PeerConfig,
    /// Its session, if one is established.
    pub session: Option<&'a Session>,
}

/// The server.
pub struct Server {
    cfg: ServerConfig,
    peers: Vec<Peer>,
    by_index: HashMap<u32, usize>,
    by_key: HashMap<PublicKey, usize>,
    routes: Routes,
    /// Behind a `RefCell` because `poll_timeout` takes `&self` and is where deadlines of
    /// peers called since the last look are recomputed (once per peer per wake-up).
    timers: RefCell<Timers>,
    /// Peers that may have a datagram to send, and a packet to deliver.
    tx_ready: PeerSet,
    rx_ready: PeerSet,
    /// Scratch list of peers whose deadline has come.
    due: Vec<usize>,
    rng: ChaCha20Rng,
    /// Handshake responses and cookie replies owed (`replies.rs`).
    replies: Replies,
    counters: EndpointCounters,
    next_tx_peer: usize,
    next_rx_peer: usize,
    events: VecDeque<(usize, Event)>,
    relays: Handed,
    guard: Guard,
    /// Which sessions are this thread's (`shard.rs`), and what it owes the others.
    shard: Shard,
    handoffs: Handoffs,
}

impl Server {
    /// A server for `cfg` with a deterministic RNG (simulation and tests only: handshake
    /// ephemeral keys come from it, so a guessable seed breaks their secrecy).
    pub fn new(cfg: ServerConfig, seed: u64) -> Self {
        let mut s = [0u8; 32];
        s[..8].copy_from_slice(&seed.to_le_bytes());
        Self::with_rng_seed(cfg, s)
    }

    /// A server whose RNG is seeded with 32 bytes from the OS (what the daemon does).
    pub fn with_rng_seed(cfg: ServerConfig, seed: [u8; 32]) -> Self {
        let peers: Vec<Peer> = cfg
            .peers
            .iter()
            .map(|p| Peer {
                cfg: p.clone(),
                last_timestamp: 0,
                session: None,
                takes_relays: false,
            })
            .collect();
        let by_key = key_index(&cfg.peers);
        let guard = Guard::new(&cfg.local_key.public_key());
        Server {
            guard,
            routes: Routes::new(&cfg.peers),
            timers: RefCell::new(Timers::new(peers.len())),
            tx_ready: PeerSet::new(peers.len()),
            rx_ready: PeerSet::new(peers.len()),
            due: Vec::new(),
            by_key,
            cfg,
            peers,
            by_index: HashMap::new(),
            rng: ChaCha20Rng::from_seed(seed),
            replies: Replies::default(),
            counters: EndpointCounters::default(),
            next_tx_peer: 0,
            next_rx_peer: 0,
            events: VecDeque::new(),
            // Even an empty list is handed out: it retires what a client got from before.
            relays: Handed {
                epoch: 1,
                list: Vec::new(),
                count: 0,
                encoded: Vec::new(),
            },
            shard: Shard::ALONE,
            handoffs: Handoffs::default(),
        }
    }

    /// Makes this server one of several threads (`shard.rs`): it keeps only the sessions
    /// of its peers and hands the rest over ([`Server::poll_handoff`]). Set before any
    /// input.
    pub fn set_shard(&mut self, shard: Shard) {
        self.shard = shard;
    }

    /// This server's shard.
    pub fn shard(&self) -> Shard {
        self.shard
    }

    /// The next input owed to another shard.
    pub fn poll_handoff(&mut self) -> Option<Handoff> {
        self.handoffs.pop()
    }

    /// A datagram another shard of this server handed over ([`Handoff::Datagram`]): an
    /// initiation is not screened again, the shard that read it did.
    pub fn handle_handed_datagram(&mut self, now: Instant, from: SocketAddr, buf: &mut [u8]) {
        self.dispatch(now, from, buf, false);
    }

    /// The thread a handoff went to could not take it (its inbox was full): counted as
    /// dropped, not as handed off.
    pub fn handoff_dropped(&mut self) {
        self.counters.handed_off = self.counters.handed_off.saturating_sub(1);
        self.counters.handoff_drops += 1;
    }

    /// Queues `h` for another shard, counted.
    fn hand_off(&mut self, h: Handoff) {
        match self.handoffs.push(h) {
            true => self.counters.handed_off += 1,
            false => self.counters.handoff_drops += 1,
        }
    }

    /// Replaces the peer list (a configuration reload). A peer whose key is listed again
    /// keeps its session, keys and handshake timestamp — its connections go on — under its
    /// new name and `allowed_ips`; a peer whose key is gone loses its session at once (its
    /// datagrams count as `rx_unknown_index`, its prefixes have no route); a new key may
    /// handshake from now on. Per-packet state is rebuilt for the new numbering: routes,
    /// key and receiver-index lookups, deadlines (all recomputed at the next
    /// `poll_timeout`) and the ready sets (every session polled once more).
    pub fn set_peers(&mut self, peers: Vec<PeerConfig>) {
        let mut old: Vec<Option<Peer>> = std::mem::take(&mut self.peers)
            .into_iter()
            .map(Some)
            .collect();
        let mut renumber = vec![None; old.len()];
        for cfg in &peers {
            let kept = self.by_key.get(&cfg.public_key).and_then(|&i| {
                let p = old[i].take()?;
                renumber[i] = Some(self.peers.len());
                Some(p)
            });
            self.peers.push(match kept {
                Some(p) => Peer {
                    cfg: cfg.clone(),
                    ..p
                },
                None => Peer {
                    cfg: cfg.clone(),
                    last_timestamp: 0,
                    session: None,
                    takes_relays: false,
                },
            });
        }
        let n = self.peers.len();
        self.by_index.retain(|_, pi| match renumber[*pi] {
            Some(new) => {
                *pi = new;
                true
            }
            None => false,
        });
        self.events.retain_mut(|(pi, _)| match renumber[*pi] {
            Some(new) => {
                *pi = new;
                true
            }
            None => false,
        });
        self.by_key = key_index(&peers);
        self.routes = Routes::new(&peers);
        self.cfg.peers = peers;
        let mut timers = Timers::new(n);
        (self.tx_ready, self.rx_ready) = (PeerSet::new(n), PeerSet::new(n));
        for i in 0..n {
            timers.touch(i);
            self.tx_ready.insert(i);
            self.rx_ready.insert(i);
        }
        self.timers = RefCell::new(timers);
        (self.next_tx_peer, self.next_rx_peer) = (0, 0);
    }

    /// Replaces the policy of downstream flows the client has not used yet (a reload).
    pub fn set_default_policy(&mut self, policy: Policy) {
        self.cfg.default_policy = policy;
    }

    /// Hands `list` to every client that takes relay lists, now and at its next handshakes
    /// (a new epoch). False, and nothing changes, if it cannot be handed out
    /// (`wire::relays::encode`: at most 8 relays, distinct names and addresses, ...).
    pub fn set_relays(&mut self, list: &[RelaySpec]) -> bool {
        let Some((count, encoded)) = crate::wire::relays::encode(list) else {
            return false;
        };
        self.relays = Handed {
            epoch: self.relays.epoch.wrapping_add(1).max(1),
            list: list.to_vec(),
            count,
            encoded,
        };
        for pi in 0..self.peers.len() {
            let p = &mut self.peers[pi];
            if let Some(s) = p.session.as_deref_mut().filter(|_| p.takes_relays) {
                s.offer_relays(self.relays.epoch, count, &self.relays.encoded);
                self.touched(pi);
            }
        }
        true
    }

    /// The relays handed out and their epoch.
    pub fn relays(&self) -> (u32, &[RelaySpec]) {
        (self.relays.epoch, &self.relays.list)
    }

    /// Refusal counters.
    pub fn counters(&self) -> EndpointCounters {
        self.counters
    }

    /// Replaces the load threshold of the flood defence (initiations with a valid mac1
    /// per second, default `LOAD_THRESHOLD`; tests and benchmarks).
    pub fn set_load_threshold(&mut self, per_sec: u32) {
        self.guard.set_threshold(per_sec);
    }

    /// Whether the server is under handshake load at `now` (initiations need a cookie).
    pub fn under_load(&self, now: Instant) -> bool {
        self.guard.under_load(now)
    }

    /// Peers and their sessions.
    pub fn peers(&self) -> impl Iterator<Item = PeerStatus<'_>> {
        self.peers.iter().map(|p| PeerStatus {
            config: &p.cfg,
            session: p.session.as_deref(),
        })
    }

    /// The first peer's session, mutable (tests that set up states traffic cannot reach
    /// quickly).
    #[cfg(test)]
    pub(crate) fn first_session_mut(&mut self) -> Option<&mut Session> {
        self.peers
            .first_mut()
            .and_then(|p| p.session.as_deref_mut())
    }

    /// A datagram received from `from`.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, buf: &mut [u8]) {
        self.dispatch(now, from, buf, true);
    }

    /// Routes a datagram by type; an initiation is screened by the flood defence first
    /// when `screen` (not when another shard already did).
    fn dispatch(&mut self, now: Instant, from: SocketAddr, buf: &mut [u8], screen: bool) {
        match Datagram::parse(buf) {
            Ok(Datagram::Init(p)) if screen => self.handle_init(now, from, &p),
            Ok(Datagram::Init(p)) => self.answer_init(now, from, &p),
            Ok(Datagram::Data(d)) => self.route_data(now, from, d),
            Ok(Datagram::Resp(_) | Datagram::CookieReply(_)) | Err(_) => {
                self.counters.rx_garbage += 1
            }
        }
    }

    /// A data datagram goes to the session of its receiver index. An index this shard
    /// does not know may be another shard's (the kernel's filter steers by index, so that
    /// is rare): the datagram, still sealed, is handed to its owner.
    fn route_data(&mut self, now: Instant, from: SocketAddr, d: SealedData<'_>) {
        let Some(&pi) = self.by_index.get(&d.receiver_index) else {
            let to = self.shard.owner_of_index(d.receiver_index);
            if to == self.shard.index() {
                self.counters.rx_unknown_index += 1;
            } else {
                let bytes = d.datagram.to_vec();
                self.hand_off(Handoff::Datagram { to, from, bytes });
            }
            return;
        };
        if let Some(s) = self.peers[pi].session.as_deref_mut() {
            s.handle_datagram(now, from, d);
            while let Some(e) = s.poll_event() {
                self.events.push_back((pi, e));
            }
            self.touched(pi);
        }
    }

    /// Peer `pi` was called: its deadline may have moved and it may have output.
    fn touched(&mut self, pi: usize) {
        self.timers.get_mut().touch(pi);
        self.tx_ready.insert(pi);
        self.rx_ready.insert(pi);
    }

    /// An IP packet read from the TUN device.
    pub fn handle_tun_packet(&mut self, now: Instant, packet: &[u8]) {
        let Some(dst) = crate::policy::parse_flow(packet).map(|(k, _)| k.dst) else {
            self.counters.tx_no_route += 1;
            return;
        };
        let Some(pi) = self.routes.lookup(dst) else {
            self.counters.tx_no_route += 1;
            return;
        };
        if !self.shard.owns_key(&self.peers[pi].cfg.public_key) {
            let to = self.shard.owner_of_key(&self.peers[pi].cfg.public_key);
            let bytes = packet.to_vec();
            return self.hand_off(Handoff::Packet { to, bytes });
        }
        let default = self.cfg.default_policy;
        match self.peers[pi].session.as_deref_mut() {
            Some(s) => {
                let policy = match s.downlink_policy(packet, default) {
                    Policy::Redundant { copies: None } => Policy::Redundant {
                        copies: self.cfg.downstream_copies,
                    },
                    p => p,
                };
                s.send_packet(now, packet, policy);
                self.timers.get_mut().touch(pi);
                self.tx_ready.insert(pi);
            }
            None => self.counters.tx_no_route += 1,
        }
    }

    /// Earliest time `handle_timeout` has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t = self.timers.borrow_mut();
        t.refresh(|i| {
            self.peers[i]
                .session
                .as_deref()
                .and_then(Session::poll_timeout)
        });
        t.first()
    }

    /// Runs timers: those of the sessions whose deadline has come, in peer order (a
    /// session's `handle_timeout` before its deadline would do nothing).
    pub fn handle_timeout(&mut self, now: Instant) {
        let peers = &self.peers;
        let t = self.timers.get_mut();
        t.refresh(|i| peers[i].session.as_deref().and_then(Session::poll_timeout));
        let mut due = std::mem::take(&mut self.due);
        t.due(now, &mut due);
        due.sort_unstable();
        for &pi in &due {
            if let Some(s) = self.peers[pi].session.as_deref_mut() {
                s.handle_timeout(now);
                while let Some(e) = s.poll_event() {
                    self.events.push_back((pi, e));
                }
            }
            self.touched(pi);
        }
        due.clear();
        self.due = due;
    }

    /// Next datagram to send.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let sent = &mut self.counters.tx_cookie_replies;
        if let Some(t) = self
            .replies
            .pop(now, &mut self.rng, &mut self.guard, buf, sent)
        {
            return Some(t);
        }
        // A session may also send because time passed (its pacer allows it): those whose
        // deadline has come are candidates without new input.
        let mut due = std::mem::take(&mut self.due);
        self.timers.get_mut().due(now, &mut due);
        for i in due.drain(..) {
            self.tx_ready.insert(i);
        }
        self.due = due;
        // Round-robin over sessions so one busy client cannot starve the others.
        let n = self.peers.len();
        while let Some(i) = self.tx_ready.next_from(self.next_tx_peer) {
            self.timers.get_mut().touch(i);
            if let Some(t) = self.peers[i]
                .session
                .as_mut()
                .and_then(|s| s.poll_transmit(now, buf))
            {
                self.next_tx_peer = (i + 1) % n;
                return Some(t);
            }
            self.tx_ready.remove(i);
        }
        None
    }

    /// Copies the next IP packet for the TUN device into `buf` and returns its length
    /// (sources checked against `allowed_ips`).
    pub fn poll_deliver(&mut self, buf: &mut [u8]) -> Option<usize> {
        let n = self.peers.len();
        while let Some(i) = self.rx_ready.next_from(self.next_rx_peer) {
            let peer = &mut self.peers[i];
            if let Some(s) = peer.session.as_deref_mut() {
                while let Some(len) = s.poll_deliver(buf) {
                    let src_ok = crate::policy::parse_flow(&buf[..len]).is_some_and(|(k, _)| {
                        peer.cfg.allowed_ips.iter().any(|n| n.contains(&k.src))
                    });
                    if src_ok {
                        self.next_rx_peer = (i + 1) % n;
                        return Some(len);
                    }
                    self.counters.rx_spoofed += 1;
                }
            }
            self.rx_ready.remove(i);
        }
        None
    }

    /// Next event, with the name of the peer it concerns.
    pub fn poll_event(&mut self) -> Option<(&str, Event)> {
        let (pi, e) = self.events.pop_front()?;
        Some((self.peers[pi].cfg.name.as_str(), e))
    }
}

/// Key to peer: the first peer listed with a key is the one a handshake finds (as a scan
/// would).
fn key_index(peers: &[PeerConfig]) -> HashMap<PublicKey, usize> {
    let mut by_key = HashMap::new();
    for (i, p) in peers.iter().enumerate() {
        by_key.entry(p.public_key).or_insert(i);
    }
    by_key
}
