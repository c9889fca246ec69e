//! A server split over two shards (threads in the daemon) serving four clients of two
//! links each: the "kernel" here steers data datagrams by receiver index, as the daemon's
//! reuseport filter does (or not at all, to show handoffs alone keep it right), spreads
//! everything else by source address, and queues downstream packets on either shard, as
//! the multi-queue TUN device may. What a user sees must not differ from one server:
//! every packet delivered intact and once, each way.

use super::*;
use ipnet::IpNet;

const CLIENTS: usize = 4;
const LINKS: usize = 2;
/// One-way delay of every link.
const DELAY: Duration = Duration::from_millis(5);

struct World {
    now: Instant,
    clients: Vec<Client>,
    shards: Vec<Server>,
    /// (arrival, to a server?, client, link, source for upstream, bytes)
    flights: Vec<(Instant, bool, usize, u8, SocketAddr, Vec<u8>)>,
    /// Steer data datagrams by index (the daemon's filter) or by source (none).
    steer: bool,
    up: Vec<Vec<u8>>,
    down: Vec<Vec<Vec<u8>>>,
}

fn client_addr(c: usize, l: usize) -> SocketAddr {
    format!("10.0.{c}.{}:5000", l + 2).parse().unwrap()
}

/// Client `c`'s inner address is 10.200.0.(c + 2).
fn inner(c: usize) -> [u8; 4] {
    [10, 200, 0, c as u8 + 2]
}

/// `packet`, between client `c`'s inner address and 10.50.0.1.
fn packet_of(c: usize, up: bool, n: u32) -> Vec<u8> {
    let mut p = packet(up, n, 400);
    let at = if up { 12 } else { 16 };
    p[at..at + 4].copy_from_slice(&inner(c));
    p[10..12].fill(0);
    let sum = Sum16BitWords::new().add_slice(&p[..20]).ones_complement();
    p[10..12].copy_from_slice(&sum.to_ne_bytes());
    p
}

impl World {
    fn new(steer: bool) -> World {
        let server_key = StaticSecret::from_bytes([22; 32]);
        let keys: Vec<StaticSecret> = (0..CLIENTS)
            .map(|c| StaticSecret::from_bytes([40 + c as u8; 32]))
            .collect();
        let cfg = ServerConfig {
            local_key: server_key.clone(),
            peers: (0..CLIENTS)
                .map(|c| PeerConfig {
                    name: format!("c{c}"),
                    public_key: keys[c].public_key(),
                    allowed_ips: vec![IpNet::from(IpAddr::from(inner(c)))],
                })
                .collect(),
            session: session_cfg(),
            default_policy: Policy::Aggregate,
            downstream_copies: None,
            ciphers: CipherSet::ALL,
        };
        let shards = (0..2)
            .map(|i| {
                let mut s = Server::new(cfg.clone(), 7 + i);
                s.set_shard(Shard::new(i as u16, 2).unwrap());
                s
            })
            .collect();
        let clients = (0..CLIENTS)
            .map(|c| {
                let mut client = Client::new(
                    ClientConfig {
                        local_key: keys[c].clone(),
                        server_key: server_key.public_key(),
                        session: session_cfg(),
                        classifier: Classifier::uniform(Policy::Aggregate),
                        epoch_us: 1_700_000_000_000_000,
                        ciphers: CipherSet::ALL,
                    },
                    100 + c as u64,
                );
                for l in 0..LINKS {
                    client.add_link(Instant::ZERO, PathId(l as u8), SERVER.parse().unwrap());
                }
                client
            })
            .collect();
        World {
            now: Instant::ZERO,
            clients,
            shards,
            flights: Vec::new(),
            steer,
            up: Vec::new(),
            down: vec![Vec::new(); CLIENTS],
        }
    }

    /// The shard the "kernel" gives an upstream datagram.
    fn kernel_shard(&self, from: SocketAddr, bytes: &[u8]) -> usize {
        if self.steer && bytes.len() >= 8 && bytes[0] == 3 {
            return u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]) as usize % 2;
        }
        let IpAddr::V4(ip) = from.ip() else {
            unreachable!()
        };
        (u32::from(ip) as usize + usize::from(from.port())) % 2
    }

    /// Everything each side has to send, deliver and hand over now.
    fn flush(&mut self) {
        let mut buf = vec![0u8; 2048];
        let at = self.now + DELAY;
        for (c, client) in self.clients.iter_mut().enumerate() {
            while let Some(t) = client.poll_transmit(self.now, &mut buf) {
                let from = client_addr(c, t.path.0 as usize);
                let bytes = buf[..t.len].to_vec();
                self.flights.push((at, true, c, t.path.0, from, bytes));
            }
            while let Some(n) = client.poll_deliver(&mut buf) {
                self.down[c].push(buf[..n].to_vec());
            }
        }
        for i in 0..self.shards.len() {
            while let Some(h) = self.shards[i].poll_handoff() {
                let to = usize::from(h.to());
                match h {
                    Handoff::Datagram {
                        from, mut bytes, ..
                    } => self.shards[to].handle_handed_datagram(self.now, from, &mut bytes),
                    Handoff::Packet { bytes, .. } => {
                        self.shards[to].handle_tun_packet(self.now, &bytes)
                    }
                }
            }
        }
        for s in &mut self.shards {
            while let Some(t) = s.poll_transmit(self.now, &mut buf) {
                let c = (0..CLIENTS)
                    .find(|&c| (0..LINKS).any(|l| client_addr(c, l) == t.dst))
                    .expect("sent to a client's address");
                let bytes = buf[..t.len].to_vec();
                self.flights.push((at, false, c, t.path.0, t.dst, bytes));
            }
            while let Some(n) = s.poll_deliver(&mut buf) {
                self.up.push(buf[..n].to_vec());
            }
        }
    }

    /// Runs in 1 ms steps until `until`.
    fn run_until(&mut self, until: Instant) {
        while self.now < until {
            self.flush();
            self.now = self.now + Duration::from_millis(1);
            let (due, later) = std::mem::take(&mut self.flights)
                .into_iter()
                .partition(|f| f.0 <= self.now);
            self.flights = later;
            for (_, to_server, c, path, addr, mut bytes) in due {
                if to_server {
                    let s = self.kernel_shard(addr, &bytes);
                    self.shards[s].handle_datagram(self.now, addr, &mut bytes);
                } else {
                    let from = SERVER.parse().unwrap();
                    self.clients[c].handle_datagram(self.now, PathId(path), from, &mut bytes);
                }
            }
            for client in &mut self.clients {
                if client.poll_timeout().is_some_and(|t| t <= self.now) {
                    client.handle_timeout(self.now);
                }
            }
            for s in &mut self.shards {
                if s.poll_timeout().is_some_and(|t| t <= self.now) {
                    s.handle_timeout(self.now);
                }
            }
        }
    }
}

fn sessions_on(s: &Server) -> Vec<String> {
    s.peers()
        .filter(|p| p.session.is_some())
        .map(|p| p.config.name.clone())
        .collect()
}

fn every_packet_once_each_way(steer: bool) -> World {
    let mut w = World::new(steer);
    w.run_until(Pair::at(2_000));
    assert!(w.clients.iter().all(Client::is_established));
    let mut expect_up = Vec::new();
    for n in 0..200u32 {
        for c in 0..CLIENTS {
            let up = packet_of(c, true, n);
            w.clients[c].handle_tun_packet(w.now, &up);
            expect_up.push(up);
            // The device queues a downstream packet on either thread.
            let shard = (n as usize + c) % 2;
            let now = w.now;
            w.shards[shard].handle_tun_packet(now, &packet_of(c, false, n));
        }
        let t = w.now + Duration::from_millis(2);
        w.run_until(t);
    }
    let t = w.now + Duration::from_secs(1);
    w.run_until(t);
    let mut got = w.up.clone();
    got.sort();
    expect_up.sort();
    assert_eq!(got, expect_up, "upstream: every packet once, intact");
    for c in 0..CLIENTS {
        let want: Vec<Vec<u8>> = (0..200).map(|n| packet_of(c, false, n)).collect();
        let mut got = w.down[c].clone();
        got.sort_by_key(|p| number(p));
        assert_eq!(got, want, "downstream to client {c}");
    }
    // Each session lives on one shard only: the one its key names.
    let on: Vec<Vec<String>> = w.shards.iter().map(sessions_on).collect();
    assert_eq!(on[0].len() + on[1].len(), CLIENTS, "{on:?}");
    for (i, names) in on.iter().enumerate() {
        for name in names {
            let p = w.shards[i]
                .peers()
                .find(|p| &p.config.name == name)
                .unwrap();
            assert!(w.shards[i].shard().owns_key(&p.config.public_key));
        }
    }
    w
}

#[test]
fn a_sharded_server_delivers_every_packet_once_each_way() {
    let w = every_packet_once_each_way(true);
    let handed: u64 = w.shards.iter().map(|s| s.counters().handed_off).sum();
    // Initiations and the downstream packets queued on the other shard only: with the
    // filter, no data datagram is handed over (800 packets, half on the wrong shard).
    assert!((400..600).contains(&handed), "handed off {handed}");
    assert!(w.shards.iter().all(|s| s.counters().rx_unknown_index == 0));
}

#[test]
fn without_steering_handoffs_alone_keep_every_session_whole() {
    let w = every_packet_once_each_way(false);
    let handed: u64 = w.shards.iter().map(|s| s.counters().handed_off).sum();
    assert!(handed > 600, "handed off {handed}");
    assert!(w.shards.iter().all(|s| s.counters().handoff_drops == 0));
}
