//! The client endpoint: one session to one server over every configured link.
//!
//! Handshake: the same initiation datagram goes out on every available link at once, so
//! the session comes up over whichever link works first (duplicates are refused by the
//! server's timestamp check); it is retried until answered, after 1 s with up to a quarter
//! more of jitter, or, while the server is loaded (attempts draw cookie replies, or carry a
//! cookie) but does not respond, after 2, then every 4 s (`handshake_retry`); and it is
//! repeated every `REKEY_AFTER` for fresh keys, or sooner once either side has sealed the
//! cipher's message budget (`Keypair::worn`). If every path has been down for twice the
//! detection time the client re-handshakes too, which recovers from a server restart.
//!
//! Every initiation carries mac1 (it knows the server's key) and, on a link for which it
//! holds a cookie younger than `COOKIE_LIFETIME`, mac2. A cookie reply (the server is under
//! load) is opened with the mac1 of the copy it answers; its cookie is kept for that link
//! and that copy goes out again at once with mac2 (at most `MAX_COOKIE_RESENDS` times), so
//! a loaded server costs a legitimate client one round trip, not a retry period.
//!
//! The server seals data under the new keys right after its response, and the network may
//! deliver such a datagram before the response (reordering within a link, or a faster
//! link). One that names the pending handshake's index is held (`MAX_EARLY`, copied, not
//! trusted) and processed once the response installed the keys (`rx_before_response`),
//! instead of being refused as unauthenticated for keys that were about to exist.

use super::datagram::Datagram;
use super::{handshake_retry, EndpointCounters, REKEY_AFTER};
use crate::crypto::cookie::{Mac16, MacKeys, COOKIE_LIFETIME};
use crate::crypto::{
    CipherSet, CryptoError, Initiator, PublicKey, StaticSecret, INIT_FLAG_FRESH, INIT_FLAG_RELAYS,
    RESP_FLAG_NEW_SESSION,
};
use crate::detour::RelaySpec;
use crate::path::{PathId, PathState};
use crate::policy::Classifier;
use crate::session::{Event, Keypair, Session, SessionConfig, Side, Transmit};
use crate::wire::outer::NOISE_INIT_LEN;
use crate::wire::{outer, OuterPacket, HANDSHAKE_INIT_LEN};
use crate::Instant;
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use std::collections::VecDeque;
use std::net::SocketAddr;

/// Client parameters.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Our static key.
    pub local_key: StaticSecret,
    /// The server's static public key.
    pub server_key: PublicKey,
    /// Data-plane parameters.
    pub session: SessionConfig,
    /// Flow classification rules.
    pub classifier: Classifier,
    /// Wall-clock microseconds at `Instant::ZERO` (for handshake timestamps).
    pub epoch_us: u64,
    /// Data ciphers we offer (`CipherSet::hardware()` unless configured).
    pub ciphers: CipherSet,
}

/// A link as the client knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkInfo {
    /// Path id used on the wire.
    pub id: PathId,
    /// Server address reached over this link.
    pub remote: SocketAddr,
    /// Whether its interface is usable.
    pub available: bool,
    /// Relative cost (`PathConfig::cost`), kept here so a new session keeps it.
    pub cost: u32,
    /// On standby (`PathConfig::standby`), kept here so a new session keeps it.
    pub standby: bool,
}

struct Pending {
    initiator: Initiator,
    sender_index: u32,
    /// When an initiation goes out again if this one is not answered.
    retry_at: Instant,
    /// The server is alive and under load: a cookie reply came for it, or it carried a
    /// cookie (mac2) from one.
    loaded: bool,
    /// The copy sent on each link (its mac1 is what a cookie reply is sealed to), and how
    /// often it was resent after a cookie reply.
    copies: Vec<(PathId, Vec<u8>, u8)>,
}

/// Resends of one initiation copy after cookie replies: one is the normal case, a second
/// covers the server's secret rotating in between; more would let replayed cookie replies
/// make us send.
const MAX_COOKIE_RESENDS: u8 = 2;

/// Most data datagrams held while their handshake's response is awaited (a datagram or
/// two is what a reordering link delivers ahead of it).
const MAX_EARLY: usize = 8;

/// The client.
pub struct Client {
    cfg: ClientConfig,
    session: Session,
    links: Vec<LinkInfo>,
    rng: ChaCha20Rng,
    pending: Option<Pending>,
    /// Initiations in a row that found the server loaded (`Pending::loaded`) but drew no
    /// response (`handshake_retry`): 0 once one is answered, or once one neither drew a
    /// cookie reply nor carried a cookie.
    unanswered: u32,
    fresh: bool,
    /// Relay lists from the server are taken (`accept_relays`).
    relays: bool,
    established: bool,
    handshake_out: VecDeque<(PathId, SocketAddr, Vec<u8>)>,
    counters: EndpointCounters,
    all_down_since: Option<Instant>,
    /// mac1 keys of messages to the server (and the seal of its cookie replies).
    server_macs: MacKeys,
    /// mac1 keys of messages to us (the server's responses).
    own_macs: MacKeys,
    /// The latest cookie per link (the server sees each link's own source address).
    cookies: Vec<(PathId, Mac16, Instant)>,
    /// Sender index of the latest completed handshake: a cookie reply to one of its other
    /// copies can arrive after the response (a slower link) and is no one's fault.
    done_index: Option<u32>,
    /// Data datagrams naming the pending handshake's index, arrived before its response
    /// (`MAX_EARLY`), with their source: processed once the keys are installed.
    early: Vec<(SocketAddr, Vec<u8>)>,
}

impl Client {
    /// A client with a deterministic RNG (simulation and tests only: handshake ephemeral
    /// keys come from it, so a guessable seed breaks their secrecy).
    pub fn new(cfg: ClientConfig, seed: u64) -> Self {
        let mut s = [0u8; 32];
        s[..8].copy_from_slice(&seed.to_le_bytes());
        Self::with_rng_seed(cfg, s)
    }

    /// A client whose RNG is seeded with 32 bytes from the OS (what the daemon does). It
    /// handshakes as soon as it has a link and `handle_timeout` runs.
    pub fn with_rng_seed(cfg: ClientConfig, seed: [u8; 32]) -> Self {
        let id = cfg.local_key.public_key().session_id();
        let mut session = Session::new(id, cfg.session, Side::Client);
        // The downlink is the receiver's business: the server applies our rules to it.
        session.state_policy(&cfg.classifier);
        let server_macs = MacKeys::new(&cfg.server_key);
        let own_macs = MacKeys::new(&cfg.local_key.public_key());
        Client {
            server_macs,
            own_macs,
            cookies: Vec::new(),
            done_index: None,
            early: Vec::new(),
            cfg,
            session,
            links: Vec::new(),
            rng: ChaCha20Rng::from_seed(seed),
            pending: None,
            unanswered: 0,
            fresh: true,
            relays: false,
            established: false,
            handshake_out: VecDeque::new(),
            counters: EndpointCounters::default(),
            all_down_since: None,
        }
    }

    /// Adds a link, or updates it.
    pub fn add_link(&mut self, now: Instant, id: PathId, remote: SocketAddr) {
        match self.links.iter_mut().find(|l| l.id == id) {
            Some(l) => l.remote = remote,
            None => self.links.push(LinkInfo {
                id,
                remote,
                available: true,
                cost: 1,
                standby: false,
            }),
        }
        // An existing path is re-pointed (a detour path id used again for another relay).
        self.session.ensure_path(now, id, remote).set_remote(remote);
        self.session.set_path_available(now, id, true);
    }

    /// Sets a link's relative cost (default 1; `PathConfig::cost`): `redundant` copies
    /// and realtime FEC parity go on the cheapest links that meet their loss targets.
    pub fn set_link_cost(&mut self, id: PathId, cost: u32) {
        if let Some(l) = self.links.iter_mut().find(|l| l.id == id) {
            l.cost = cost;
        }
        self.session.set_path_cost(id, cost);
    }

    /// Puts a link's path on standby or takes it off (`PathConfig::standby`): the detour
    /// manager's answer to a detour that shares the link's bottleneck and loses less.
    pub fn set_link_standby(&mut self, id: PathId, standby: bool) {
        if let Some(l) = self.links.iter_mut().find(|l| l.id == id) {
            l.standby = standby;
        }
        self.session.set_path_standby(id, standby);
    }

    /// Marks a link's interface usable or not (netlink up/down, address gone).
    pub fn set_link_available(&mut self, now: Instant, id: PathId, available: bool) {
        if let Some(l) = self.links.iter_mut().find(|l| l.id == id) {
            l.available = available;
        }
        self.session.set_path_available(now, id, available);
    }

    /// Replaces the flow classification rules (a configuration reload): packets read from
    /// now on are classified by them, and they are stated to the server under a new epoch
    /// (`session/stated.rs`), which then applies them to the downlink. Nothing else of the
    /// session changes. False (and nothing replaced) if they cannot be stated (more than
    /// `MAX_STATED_RULES` rules; the config refuses that).
    pub fn set_classifier(&mut self, classifier: Classifier) -> bool {
        if !self.session.state_policy(&classifier) {
            return false;
        }
        self.cfg.classifier = classifier;
        true
    }

    /// Takes the relay lists the server hands out (docs/PROTOCOL.md §15.7): every
    /// handshake from now on says so, and the session applies them (`take_server_relays`).
    pub fn accept_relays(&mut self) {
        self.relays = true;
        self.session.accept_relays();
    }

    /// The server's newest relay list, once, when it changed (see `accept_relays`).
    pub fn take_server_relays(&mut self) -> Option<Vec<RelaySpec>> {
        self.session.take_relays()
    }

    /// Links.
    pub fn links(&self) -> &[LinkInfo] {
        &self.links
    }

    /// Keeps the paths probed as while data flows (`Session::keep_active`): traffic
    /// outside the tunnel (stream mode) is steered by their liveness.
    pub fn keep_active(&mut self, now: Instant) {
        self.session.keep_active(now);
    }

    /// Whether keys are established.
    pub fn is_established(&self) -> bool {
        self.established
    }

    /// The session (for status).
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The session, mutable (tests that set up states traffic cannot reach quickly).
    #[cfg(test)]
    pub(crate) fn session_mut(&mut self) -> &mut Session {
        &mut self.session
    }

    /// Refusal counters.
    pub fn counters(&self) -> EndpointCounters {
        self.counters
    }

    /// An IP packet read from the TUN device.
    pub fn handle_tun_packet(&mut self, now: Instant, packet: &[u8]) {
        let policy = self.cfg.classifier.classify(packet);
        self.session.send_packet(now, packet, policy);
    }

    /// A datagram received on link `link` from `from`.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        link: PathId,
        from: SocketAddr,
        buf: &mut [u8],
    ) {
        match Datagram::parse(buf) {
            Ok(Datagram::Resp(p)) => self.handle_response(now, link, &p),
            Ok(Datagram::Data(d)) => {
                let ahead = self
                    .pending
                    .as_ref()
                    .is_some_and(|h| h.sender_index == d.receiver_index);
                if ahead && self.early.len() < MAX_EARLY {
                    self.early.push((from, d.datagram.to_vec()));
                } else {
                    self.session.handle_datagram(now, from, d);
                }
            }
            Ok(Datagram::CookieReply(p)) => self.handle_cookie_reply(now, &p),
            Ok(Datagram::Init(_)) | Err(_) => self.counters.rx_garbage += 1,
        }
    }

    /// A cookie reply: kept for the link of the copy it answers, which goes out again at
    /// once with mac2.
    fn handle_cookie_reply(&mut self, now: Instant, p: &OuterPacket<&mut [u8]>) {
        let path = PathId(p.path());
        let found = self
            .pending
            .as_mut()
            .filter(|h| h.sender_index == p.index())
            .and_then(|h| {
                let copy = h.copies.iter_mut().find(|c| c.0 == path)?;
                Some((&mut h.loaded, copy))
            });
        let Some((loaded, copy)) = found else {
            if self.done_index != Some(p.index()) {
                self.counters.rx_unknown_index += 1;
            }
            return;
        };
        let (nonce, sealed) = p.cookie_reply();
        let mac1 = crate::crypto::cookie::mac1_of(&copy.1);
        let Some(cookie) = self.server_macs.open_cookie(&mac1, &nonce, &sealed) else {
            self.counters.rx_handshake_failed += 1;
            return;
        };
        self.counters.rx_cookie_replies += 1;
        *loaded = true;
        self.cookies.retain(|c| c.0 != path);
        self.cookies.push((path, cookie, now));
        if copy.2 >= MAX_COOKIE_RESENDS {
            return;
        }
        copy.2 += 1;
        self.server_macs.seal(&mut copy.1, Some(&cookie));
        let msg = copy.1.clone();
        if let Some(l) = self.links.iter().find(|l| l.id == path && l.available) {
            self.handshake_out.push_back((path, l.remote, msg));
        }
    }

    /// The cookie of link `path`, if it is fresh enough to use.
    fn cookie(&self, now: Instant, path: PathId) -> Option<&Mac16> {
        self.cookies
            .iter()
            .find(|c| c.0 == path && now.saturating_since(c.2) < COOKIE_LIFETIME)
            .map(|c| &c.1)
    }

    fn handle_response(&mut self, now: Instant, link: PathId, p: &OuterPacket<&mut [u8]>) {
        if !self.own_macs.mac1_ok(p.bytes()) {
            self.counters.rx_bad_mac1 += 1;
            return;
        }
        let matches = self
            .pending
            .as_ref()
            .is_some_and(|h| h.sender_index == p.resp_receiver_index());
        if !matches {
            self.counters.rx_unknown_index += 1;
            return;
        }
        let Some(h) = self.pending.take() else {
            return;
        };
        match h.initiator.read_resp(p.noise()) {
            Ok((keys, flags)) => {
                if flags & RESP_FLAG_NEW_SESSION != 0 && self.established {
                    // The server started over (restart, or it lost our session): its
                    // sequence numbers restart at zero, so ours must too.
                    self.reset_session(now);
                }
                self.done_index = Some(h.sender_index);
                self.unanswered = 0;
                let kp = Keypair::new(h.sender_index, p.index(), keys, now);
                self.session.keys.install_current(kp);
                self.session.confirm_path(now, link);
                self.process_early(now);
                self.established = true;
                self.fresh = false;
                self.all_down_since = None;
                self.counters.handshakes += 1;
            }
            Err(CryptoError::NoCommonCipher) => self.counters.rx_no_common_cipher += 1,
            Err(_) => {
                // The initiator is consumed by a failed read; a new handshake follows.
                self.counters.rx_handshake_failed += 1;
            }
        }
    }

    /// The datagrams that came ahead of the response, now that its keys are installed:
    /// each is authenticated as any other (a forged one is counted unauthenticated).
    fn process_early(&mut self, now: Instant) {
        for (from, mut d) in std::mem::take(&mut self.early) {
            if let Ok(Datagram::Data(d)) = Datagram::parse(&mut d) {
                if self.session.handle_datagram(now, from, d) {
                    self.counters.rx_before_response += 1;
                }
            }
        }
    }

    fn reset_session(&mut self, now: Instant) {
        let id = self.cfg.local_key.public_key().session_id();
        // What the old session held goes out over the new one (renumbered).
        let mut old = std::mem::replace(
            &mut self.session,
            Session::new(id, self.cfg.session, Side::Client),
        );
        self.session.adopt_held(&mut old);
        self.session.state_policy(&self.cfg.classifier);
        if self.relays {
            self.session.accept_relays();
        }
        for l in &self.links {
            self.session.ensure_path(now, l.id, l.remote);
            self.session.set_path_available(now, l.id, l.available);
            self.session.set_path_cost(l.id, l.cost);
            self.session.set_path_standby(l.id, l.standby);
        }
    }

    fn start_handshake(&mut self, now: Instant) {
        // Held datagrams named the handshake this one replaces: its keys will never come.
        self.early.clear();
        let mut seed = [0u8; 32];
        self.rng.fill_bytes(&mut seed);
        let Ok(mut initiator) = Initiator::new(&self.cfg.local_key, &self.cfg.server_key, seed)
        else {
            return;
        };
        let sender_index = self.rng.next_u32();
        let mut msg = vec![0u8; HANDSHAKE_INIT_LEN];
        let ts = self.cfg.epoch_us + now.as_micros();
        let flags = if self.fresh { INIT_FLAG_FRESH } else { 0 }
            | if self.relays { INIT_FLAG_RELAYS } else { 0 };
        if initiator
            .write_init(ts, flags, self.cfg.ciphers, &mut msg[8..8 + NOISE_INIT_LEN])
            .is_err()
        {
            return;
        }
        let mut copies = Vec::new();
        // A cookie still held means the server was loaded within `COOKIE_LIFETIME`: an
        // initiation that carries it and goes unanswered is one the loaded server could
        // not take, though no cookie reply will come for it.
        let mut loaded = false;
        for l in self.links.iter().filter(|l| l.available) {
            loaded |= self.cookie(now, l.id).is_some();
            let mut m = msg.clone();
            outer::emit_init_header(&mut m, l.id.0, sender_index);
            self.server_macs.seal(&mut m, self.cookie(now, l.id));
            self.handshake_out.push_back((l.id, l.remote, m.clone()));
            copies.push((l.id, m, 0));
        }
        // Wait longer only while the server shows it is loaded (a cookie reply, or a cookie
        // from one carried) and still does not answer: an initiation that drew nothing and
        // carried no cookie (a lost datagram, a server down, a flood's cookie replies
        // sampled out) is retried after the first wait.
        self.unanswered = match self.pending.as_ref() {
            Some(p) if p.loaded => self.unanswered.saturating_add(1),
            _ => 0,
        };
        let wait = handshake_retry(self.unanswered);
        let jitter = wait.mul_f64(f64::from(self.rng.next_u32()) / f64::from(u32::MAX) / 4.0);
        self.pending = Some(Pending {
            initiator,
            sender_index,
            retry_at: now + wait + jitter,
            loaded,
            copies,
        });
    }

    fn handshake_due(&self, now: Instant) -> bool {
        if !self.links.iter().any(|l| l.available) {
            return false;
        }
        if let Some(p) = &self.pending {
            return now >= p.retry_at;
        }
        let old_keys = self
            .session
            .keys
            .current
            .as_ref()
            .is_none_or(|k| now.saturating_since(k.created) >= REKEY_AFTER || k.worn());
        let dead = self
            .all_down_since
            .is_some_and(|t| now.saturating_since(t) >= self.cfg.session.detect * 2);
        old_keys || dead
    }

    /// Earliest time `handle_timeout` has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        // With no interface usable no handshake can go out (`handshake_due`): its timers
        // (retry, rekey, the dead session's re-handshake) would stay in the past and wake
        // the caller in a loop until an interface is back (which the caller reports).
        if !self.links.iter().any(|l| l.available) {
            return self.session.poll_timeout();
        }
        let hs = match &self.pending {
            Some(p) => Some(p.retry_at),
            None => Some(
                self.session
                    .keys
                    .current
                    .as_ref()
                    .map_or(Instant::ZERO, |k| k.created + REKEY_AFTER),
            ),
        };
        // While a handshake is pending its retry is the only handshake timer (`handshake_due`).
        let dead = self
            .all_down_since
            .filter(|_| self.pending.is_none())
            .map(|t| t + self.cfg.session.detect * 2);
        [hs, dead, self.session.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Runs timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.session.handle_timeout(now);
        let all_down =
            self.established && self.session.paths().all(|p| p.state() == PathState::Down);
        if !all_down {
            self.all_down_since = None;
        } else if self.all_down_since.is_none() {
            self.all_down_since = Some(now);
        }
        if self.handshake_due(now) {
            self.start_handshake(now);
            if self.all_down_since.is_some() {
                self.all_down_since = Some(now);
            }
        }
    }

    /// Next datagram to send, and on which link.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if let Some((path, dst, m)) = self.handshake_out.pop_front() {
            let n = m.len().min(buf.len());
            buf[..n].copy_from_slice(&m[..n]);
            return Some(Transmit {
                path,
                dst,
                len: n,
                kernel_copies: false,
            });
        }
        self.session.poll_transmit(now, buf)
    }

    /// Copies the next IP packet for the TUN device into `buf`; returns its length.
    pub fn poll_deliver(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.session.poll_deliver(buf)
    }

    /// Next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.session.poll_event()
    }

    /// Sends CLOSE on every path (drain `poll_transmit` afterwards).
    pub fn close(&mut self) {
        self.session.close();
    }
}
