//! Clients re-joining a server under a handshake flood (docs/PROTOCOL.md §3.5, "Replies
//! under load"): the scale bench's flood phase, deterministic and in virtual time.
//!
//! The harness models the daemon's loop as the flood makes it run: the server reads its
//! socket once per `TURN` — everything queued since the last read, the flood's burst ahead
//! of the clients' datagrams (a sender that fills the socket first) — and then sends what
//! it owes. The burst owes more cookie replies than the server holds
//! (`MAX_COOKIE_REPLIES`), so which initiations keep theirs decides whether a client
//! that arrives behind the burst ever gets one; and once a client answered the cookie, its
//! response must not be among what is dropped.
//!
//! Real `Client`s and a real `Server` (real keys, real cookies); spoofed initiations with
//! a right mac1 from a key the server does not know. Deterministic for its seeds.

use super::*;
use crate::crypto::cookie::MacKeys;
use crate::crypto::{Initiator, PublicKey, INIT_FLAG_FRESH};
use crate::endpoint::{handshake_retry, MAX_COOKIE_REPLIES};
use crate::wire::outer::NOISE_INIT_LEN;
use crate::wire::{outer, HANDSHAKE_INIT_LEN};

const CLIENTS: usize = 6;
const LINKS: u8 = 2;
/// The server reads its socket once per turn (a daemon busy with a flood).
const TURN: Duration = Duration::from_millis(250);
const DELAY: Duration = Duration::from_millis(10);
/// Spoofed initiations read per turn: twice the cookie replies the server holds (32 768
/// a second).
const FLOOD_PER_TURN: usize = 2 * MAX_COOKIE_REPLIES;
/// Retry periods within which every re-joining client must be up. An attempt takes at
/// most two turns and two round trips (initiation, cookie reply; initiation with mac2,
/// response) = 540 ms, within the first retry wait; it fails only if neither link's
/// copy kept a cookie reply, each kept with probability 1/2: eight failures in a row are
/// a 1-in-65 536 event per client.
const ATTEMPTS: u32 = 8;

/// The longest the client's first `ATTEMPTS` attempts can take: each retry wait
/// (`handshake_retry`) with its most jitter, a quarter more.
fn attempts_bound() -> Duration {
    (0..ATTEMPTS).map(|a| handshake_retry(a) * 5 / 4).sum()
}
const AWAY: Duration = Duration::from_secs(1);

enum Hop {
    ToServer(SocketAddr),
    ToClient(usize, u8),
}

struct Net {
    now: Instant,
    server: Server,
    clients: Vec<Option<Client>>,
    /// Each join binds new ports (as the load generator's fresh sockets).
    joins: Vec<u16>,
    flight: Vec<(Instant, Hop, Vec<u8>)>,
    /// The server's socket: datagrams read at its next turn.
    socket: Vec<(SocketAddr, Vec<u8>)>,
    flood: Vec<(SocketAddr, Vec<u8>)>,
    flooding: bool,
}

fn client_key(i: usize) -> StaticSecret {
    StaticSecret::from_bytes([40 + i as u8; 32])
}

fn server_key() -> StaticSecret {
    StaticSecret::from_bytes([22; 32])
}

/// 1 024 distinct spoofed initiations (sources in 198.18.0.0/15, as `hsflood.py`), cycled.
fn flood_datagrams(server: &PublicKey) -> Vec<(SocketAddr, Vec<u8>)> {
    let stranger = StaticSecret::from_bytes([99; 32]);
    let mut init = Initiator::new(&stranger, server, [9; 32]).unwrap();
    let mut base = vec![0u8; HANDSHAKE_INIT_LEN];
    let ciphers = CipherSet::ALL;
    init.write_init(
        1,
        INIT_FLAG_FRESH,
        ciphers,
        &mut base[8..8 + NOISE_INIT_LEN],
    )
    .unwrap();
    let macs = MacKeys::new(server);
    (0..1024u32)
        .map(|i| {
            let mut m = base.clone();
            outer::emit_init_header(&mut m, 0, i);
            macs.seal(&mut m, None);
            let ip = (0xc612_0000u32 + i * 37).to_be_bytes();
            (SocketAddr::from((ip, 1024 + i as u16)), m)
        })
        .collect()
}

impl Net {
    fn new() -> Net {
        let peers = (0..CLIENTS)
            .map(|i| PeerConfig {
                name: format!("c{i}"),
                public_key: client_key(i).public_key(),
                allowed_ips: vec![format!("10.200.0.{}/32", i + 2).parse().unwrap()],
            })
            .collect();
        let cfg = ServerConfig {
            local_key: server_key(),
            peers,
            session: session_cfg(),
            default_policy: Policy::Best,
            downstream_copies: None,
            ciphers: CipherSet::ALL,
        };
        Net {
            now: Instant::ZERO,
            server: Server::new(cfg, 5),
            clients: (0..CLIENTS).map(|_| None).collect(),
            joins: vec![0; CLIENTS],
            flight: Vec::new(),
            socket: Vec::new(),
            flood: flood_datagrams(&server_key().public_key()),
            flooding: false,
        }
    }

    fn addr(&self, i: usize, link: u8) -> SocketAddr {
        let ip = [10, link + 1, 0, i as u8 + 2];
        SocketAddr::from((ip, 5000 + self.joins[i]))
    }

    /// Client `i` joins with a fresh endpoint (same key, new ports).
    fn join(&mut self, i: usize) {
        self.joins[i] += 1;
        let cfg = ClientConfig {
            local_key: client_key(i),
            server_key: server_key().public_key(),
            session: session_cfg(),
            classifier: Classifier::uniform(Policy::Best),
            epoch_us: 1_700_000_000_000_000,
            ciphers: CipherSet::ALL,
        };
        let mut c = Client::new(cfg, 100 * i as u64 + u64::from(self.joins[i]));
        for l in 0..LINKS {
            c.add_link(self.now, PathId(l), SERVER.parse().unwrap());
        }
        self.clients[i] = Some(c);
    }

    /// Client `i` leaves: CLOSE sent, its endpoint and sockets gone.
    fn leave(&mut self, i: usize) {
        if let Some(c) = self.clients[i].as_mut() {
            c.close();
        }
        self.client_sends(i);
        self.clients[i] = None;
    }

    fn client_sends(&mut self, i: usize) {
        let mut buf = vec![0u8; 2048];
        let mut out = Vec::new();
        if let Some(c) = self.clients[i].as_mut() {
            while let Some(t) = c.poll_transmit(self.now, &mut buf) {
                out.push((t.path.0, buf[..t.len].to_vec()));
            }
            while c.poll_deliver(&mut buf).is_some() {}
            while c.poll_event().is_some() {}
        }
        for (l, m) in out {
            let from = self.addr(i, l);
            self.flight.push((self.now + DELAY, Hop::ToServer(from), m));
        }
    }

    fn server_sends(&mut self) {
        let mut buf = vec![0u8; 2048];
        while let Some(t) = self.server.poll_transmit(self.now, &mut buf) {
            let to = (0..CLIENTS)
                .flat_map(|i| (0..LINKS).map(move |l| (i, l)))
                .find(|&(i, l)| self.clients[i].is_some() && self.addr(i, l) == t.dst);
            if let Some((i, l)) = to {
                let m = buf[..t.len].to_vec();
                self.flight.push((self.now + DELAY, Hop::ToClient(i, l), m));
            }
        }
        while self.server.poll_deliver(&mut buf).is_some() {}
        while self.server.poll_event().is_some() {}
    }

    /// A turn of the server: the flood's burst, then what the clients sent since the last.
    fn server_reads(&mut self) {
        if self.flooding {
            for k in 0..FLOOD_PER_TURN {
                let (from, m) = &self.flood[k % self.flood.len()];
                self.server.handle_datagram(self.now, *from, &mut m.clone());
            }
        }
        for (from, mut m) in std::mem::take(&mut self.socket) {
            self.server.handle_datagram(self.now, from, &mut m);
        }
    }

    /// One millisecond: arrivals, timers, sends; a server read every `TURN`.
    fn step(&mut self) {
        self.now = self.now + Duration::from_millis(1);
        let now = self.now;
        let (due, later) = std::mem::take(&mut self.flight)
            .into_iter()
            .partition(|f| f.0 <= now);
        self.flight = later;
        for (_, hop, mut m) in due {
            match hop {
                Hop::ToServer(from) => self.socket.push((from, m)),
                Hop::ToClient(i, l) => {
                    if let Some(c) = self.clients[i].as_mut() {
                        c.handle_datagram(now, PathId(l), SERVER.parse().unwrap(), &mut m);
                    }
                }
            }
        }
        for i in 0..CLIENTS {
            if let Some(c) = self.clients[i].as_mut() {
                if c.poll_timeout().is_some_and(|t| t <= now) {
                    c.handle_timeout(now);
                }
            }
            self.client_sends(i);
        }
        if now.as_micros().is_multiple_of(TURN.as_micros() as u64) {
            self.server_reads();
        }
        if self.server.poll_timeout().is_some_and(|t| t <= now) {
            self.server.handle_timeout(now);
        }
        self.server_sends();
    }

    fn established(&self, i: usize) -> bool {
        self.clients[i].as_ref().is_some_and(Client::is_established)
    }
}

/// Six clients up, then a flood of 32 768 spoofed initiations a second that reaches the
/// server in bursts ahead of everything else; each client leaves (CLOSE) and re-joins with
/// the same key and new ports, one every 400 ms. Every one is up again within the waits of
/// `ATTEMPTS` attempts, on the server too; nobody was rate-limited; the flood cost no
/// Diffie-Hellman after its first second.
#[test]
fn rejoining_clients_get_through_a_burst_flood() {
    let mut n = Net::new();
    for i in 0..CLIENTS {
        n.join(i);
    }
    let at = |ms: u64| Instant::from_micros(ms * 1000);
    while n.now < at(2000) {
        n.step();
    }
    assert!((0..CLIENTS).all(|i| n.established(i)), "all up before");
    n.flooding = true;
    let leave_at = |i: usize| at(2500 + 400 * i as u64);
    let (mut joined, mut up) = (vec![None; CLIENTS], vec![None; CLIENTS]);
    let end = leave_at(CLIENTS - 1) + AWAY + attempts_bound() + TURN;
    while n.now < end {
        n.step();
        for i in 0..CLIENTS {
            if n.now == leave_at(i) {
                n.leave(i);
            } else if n.now == leave_at(i) + AWAY {
                n.join(i);
                joined[i] = Some(n.now);
            } else if joined[i].is_some() && up[i].is_none() && n.established(i) {
                up[i] = Some(n.now);
            }
        }
    }
    assert!(
        n.server.under_load(n.now),
        "the flood kept the server loaded"
    );
    let took: Vec<Option<Duration>> = (0..CLIENTS)
        .map(|i| Some(up[i]?.saturating_since(joined[i]?)))
        .collect();
    let bound = attempts_bound();
    assert!(
        took.iter().all(|t| t.is_some_and(|t| t <= bound)),
        "re-join times {took:?}, bound {bound:?}; server {:?}",
        n.server.counters()
    );
    assert!(
        n.server.peers().all(|p| p.session.is_some()),
        "every peer has a session on the server"
    );
    let c = n.server.counters();
    assert_eq!(c.rx_handshake_rate_limited, 0, "{c:?}");
    let dh = c.rx_unknown_peer + c.rx_handshake_failed;
    assert!(dh <= u64::from(LOAD_THRESHOLD) + 1, "{c:?}");
    assert!(c.tx_cookie_replies > 0);
}
