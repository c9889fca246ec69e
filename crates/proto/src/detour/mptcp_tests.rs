//! The kernel-MPTCP detour manager against real `DetourRelay`s in virtual time, with a
//! stand-in for the kernel's path manager (subflows join after a delay unless told not
//! to): which connections get subflows, N, the local port, renewal, relay death and
//! replacement, failures, release, and the socket lifecycle.

use super::*;
use crate::crypto::StaticSecret;
use crate::Instant;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

const STEP: Duration = Duration::from_millis(10);
const LOCAL_IP: &str = "198.51.100.2";
const SERVER: &str = "203.0.113.2:5201";

fn relay_key(i: usize) -> StaticSecret {
    StaticSecret::from_bytes([80 + i as u8; 32])
}

fn client_key() -> StaticSecret {
    StaticSecret::from_bytes([7; 32])
}

fn relay_addr(r: usize) -> SocketAddr {
    format!("192.0.2.{}:51900", 1 + r).parse().unwrap()
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// What the kernel does with a created subflow.
#[derive(Clone, Copy, PartialEq)]
enum Join {
    Ok,
    Never,
}

struct Sim {
    m: MptcpManager,
    relays: Vec<DetourRelay>,
    alive: Vec<bool>,
    /// One-way delay to each relay.
    delay: Vec<Duration>,
    now: Instant,
    /// Answers on their way: (arrival, detour, data).
    wire: Vec<(Instant, DetourId, Vec<u8>)>,
    /// Open detour sockets.
    sockets: BTreeMap<DetourId, SocketAddr>,
    next_port: u16,
    /// A NAT between client and relays rewrites source ports by this much.
    nat_shift: u16,
    /// Kernel subflows: (token, local, remote) → joined.
    subflows: BTreeMap<(u32, SocketAddr, SocketAddr), bool>,
    joins: Vec<(Instant, u32, SocketAddr, SocketAddr)>,
    join: Join,
    local_ids: BTreeMap<u32, BTreeSet<u8>>,
    opens: u64,
    closes: u64,
    destroyed: Vec<(u32, SocketAddr, SocketAddr)>,
}

impl Sim {
    fn new(delays_ms: &[u64], n: usize, f: impl FnOnce(&mut MptcpConfig)) -> Sim {
        let specs = (0..delays_ms.len())
            .map(|r| RelaySpec {
                name: format!("r{r}"),
                address: relay_addr(r),
                key: relay_key(r).public_key(),
                mode: Mode::Nat,
            })
            .collect();
        let mut cfg = MptcpConfig::new(client_key(), 1_700_000_000_000_000);
        cfg.detours = n;
        f(&mut cfg);
        let relays = (0..delays_ms.len())
            .map(|r| {
                let mut rc = RelayConfig::new(relay_key(r), vec![client_key().public_key()]);
                rc.lifetime = Duration::from_secs(20);
                DetourRelay::new(rc, [r as u8; 32])
            })
            .collect();
        Sim {
            m: MptcpManager::new(cfg, specs, [9; 32]),
            alive: vec![true; delays_ms.len()],
            relays,
            delay: delays_ms
                .iter()
                .map(|&d| Duration::from_millis(d))
                .collect(),
            now: Instant::from_micros(1_000),
            wire: Vec::new(),
            sockets: BTreeMap::new(),
            next_port: 30000,
            nat_shift: 0,
            subflows: BTreeMap::new(),
            joins: Vec::new(),
            join: Join::Ok,
            local_ids: BTreeMap::new(),
            opens: 0,
            closes: 0,
            destroyed: Vec::new(),
        }
    }

    fn establish(&mut self, token: u32, server: &str) {
        let local = SocketAddr::new(LOCAL_IP.parse().unwrap(), 40000 + token as u16);
        self.m
            .connection_established(self.now, token, local, sa(server), false);
        self.drain();
    }

    fn run(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            self.now = self.now + STEP;
            self.tick();
        }
    }

    fn tick(&mut self) {
        let now = self.now;
        let due: Vec<_> = self.wire.iter().filter(|w| w.0 <= now).cloned().collect();
        self.wire.retain(|w| w.0 > now);
        for (_, id, data) in due {
            if self.sockets.contains_key(&id) {
                self.m.handle_datagram(now, id, &data);
            }
        }
        let joins: Vec<_> = self.joins.iter().filter(|j| j.0 <= now).cloned().collect();
        self.joins.retain(|j| j.0 > now);
        for (_, token, local, remote) in joins {
            if let Some(up) = self.subflows.get_mut(&(token, local, remote)) {
                *up = true;
                self.m.subflow_established(token, local, remote);
            }
        }
        if self.m.poll_timeout().is_some_and(|t| t <= now) {
            self.m.handle_timeout(now);
        }
        self.drain();
    }

    /// Carries out the manager's actions as the daemon and the kernel would.
    fn drain(&mut self) {
        while let Some(a) = self.m.poll_action() {
            match a {
                MptcpAction::Open { id, ip } => self.open(id, ip),
                MptcpAction::Send { id, dst, data } => self.send(id, dst, &data),
                MptcpAction::Close { id } => {
                    assert!(
                        self.sockets.remove(&id).is_some(),
                        "close of unknown {id:?}"
                    );
                    self.closes += 1;
                }
                MptcpAction::CreateSubflow {
                    id,
                    token,
                    local_id,
                    local,
                    remote,
                } => {
                    assert_eq!(
                        self.sockets.get(&id),
                        Some(&local),
                        "subflow from the socket"
                    );
                    let fresh = self.local_ids.entry(token).or_default().insert(local_id);
                    assert!(fresh, "local id {local_id} reused in {token}");
                    self.subflows.insert((token, local, remote), false);
                    if self.join == Join::Ok {
                        let r = (0..self.relays.len())
                            .find(|&r| relay_addr(r).ip() == remote.ip())
                            .unwrap();
                        let at = self.now + self.delay[r] * 2;
                        self.joins.push((at, token, local, remote));
                    }
                }
                MptcpAction::DestroySubflow {
                    token,
                    local,
                    remote,
                } => {
                    self.subflows.remove(&(token, local, remote));
                    self.destroyed.push((token, local, remote));
                }
            }
        }
    }

    fn open(&mut self, id: DetourId, ip: IpAddr) {
        self.opens += 1;
        self.next_port += 1;
        let local = SocketAddr::new(ip, self.next_port);
        self.sockets.insert(id, local);
        self.m.opened(self.now, id, Ok(local));
    }

    fn send(&mut self, id: DetourId, dst: SocketAddr, data: &[u8]) {
        let mut from = *self.sockets.get(&id).expect("send from an open socket");
        from.set_port(from.port() + self.nat_shift);
        let r = (0..self.relays.len())
            .find(|&r| relay_addr(r) == dst)
            .unwrap();
        if !self.alive[r] {
            return;
        }
        let at = self.now + self.delay[r];
        if let Some(adm) = self.relays[r].handle_datagram(at, from, data) {
            let mut out = [0u8; ANSWER_LEN];
            let n = self.relays[r].answer(adm, true, &mut out).unwrap();
            self.wire.push((at + self.delay[r], id, out[..n].to_vec()));
        }
    }

    fn up(&self, token: u32) -> Vec<SocketAddr> {
        self.subflows
            .iter()
            .filter(|((t, _, _), up)| *t == token && **up)
            .map(|((_, _, r), _)| *r)
            .collect()
    }

    fn relay_of(&self, remote: SocketAddr) -> usize {
        (0..self.relays.len())
            .find(|&r| relay_addr(r).ip() == remote.ip())
            .unwrap()
    }
}

#[test]
fn established_connection_gets_n_subflows_through_nat_tcp_detours() {
    let mut s = Sim::new(&[20, 5, 10], 2, |_| {});
    s.establish(1, SERVER);
    s.run(Duration::from_millis(300));
    let up = s.up(1);
    assert_eq!(up.len(), 2, "{:?}", s.m.detours());
    // Nothing measured yet: config order.
    let relays: BTreeSet<usize> = up.iter().map(|r| s.relay_of(*r)).collect();
    assert_eq!(relays, BTreeSet::from([0, 1]));
    for (token, local, remote) in s.subflows.keys() {
        let r = s.relay_of(*remote);
        let e = s.relays[r]
            .entry(remote.port())
            .expect("the relay holds the entry");
        // The relay forwards exactly this subflow's source to the server, as TCP.
        assert_eq!(
            (e.mode, e.source, e.server),
            (Mode::NatTcp, *local, sa(SERVER))
        );
        assert_eq!(
            (*token, local.ip()),
            (1, LOCAL_IP.parse::<IpAddr>().unwrap())
        );
    }
    // The next connection prefers the faster of the measured relays first.
    s.establish(2, SERVER);
    s.run(Duration::from_millis(300));
    let first = s.m.detours().into_iter().find(|d| d.token == 2).unwrap();
    assert_eq!(first.relay, "r1");
    assert_eq!(s.up(2).len(), 2);
    let c = s.m.counters();
    assert_eq!(
        (c.subflows_created, c.subflows_joined, c.failures),
        (4, 4, 0)
    );
}

#[test]
fn only_outgoing_connections_to_targets_are_served() {
    let mut s = Sim::new(&[5], 2, |c| {
        c.targets = vec![Target {
            net: "203.0.113.0/24".parse().unwrap(),
            port: Some(5201),
        }];
        c.max_connections = 2;
    });
    let local = sa("198.51.100.2:40000");
    s.m.connection_established(s.now, 1, local, sa(SERVER), true); // accepted here
    s.establish(2, "203.0.113.9:80"); // another port
    s.establish(3, "198.18.0.1:5201"); // another prefix
    s.establish(4, "192.0.2.1:5201"); // a relay itself
    assert_eq!(s.opens, 0);
    s.establish(5, SERVER);
    s.establish(6, "203.0.113.7:5201");
    s.establish(7, "203.0.113.8:5201"); // over max_connections
    s.run(Duration::from_millis(100));
    // One relay: one detour per served connection (N = 2 needs two relays).
    assert_eq!(s.opens, 2);
    assert_eq!((s.up(5).len(), s.up(6).len(), s.up(7).len()), (1, 1, 0));
    let c = s.m.counters();
    assert_eq!((c.connections, c.connections_served), (6, 2));
}

#[test]
fn renewals_keep_the_entries_past_their_lifetime() {
    let mut s = Sim::new(&[5, 5], 2, |_| {});
    s.establish(1, SERVER);
    // Lifetime 20 s: without renewal the relay would drop the entries at 20 s.
    s.run(Duration::from_secs(65));
    for r in 0..2 {
        assert!(
            s.relays[r].poll_expired(s.now).is_none(),
            "relay {r} expired an entry that was renewed"
        );
        assert_eq!(s.relays[r].len(), 1);
        assert!(
            s.relays[r].counters().renewed >= 3,
            "{:?}",
            s.relays[r].counters()
        );
    }
    assert_eq!(s.up(1).len(), 2);
    assert_eq!(s.m.counters().failures, 0);
}

#[test]
fn a_dead_relay_loses_its_subflows_and_another_relay_steps_in() {
    let mut s = Sim::new(&[5, 5, 5], 2, |_| {});
    s.establish(1, SERVER);
    s.run(Duration::from_millis(200));
    assert_eq!(s.up(1).len(), 2);
    s.alive[0] = false;
    // Noticed within check_interval (5 s) + 4 attempts 1 s apart.
    s.run(Duration::from_secs(10));
    assert_eq!(s.destroyed.len(), 1, "{:?}", s.destroyed);
    assert_eq!(s.relay_of(s.destroyed[0].2), 0);
    let relays: BTreeSet<usize> = s.up(1).iter().map(|r| s.relay_of(*r)).collect();
    assert_eq!(relays, BTreeSet::from([1, 2]));
    assert_eq!(s.m.counters().relays_dead, 1);
    let rest = s.m.relays(s.now)[0].resting_for.expect("resting");
    assert!(rest <= Duration::from_secs(30));
    // The relay comes back: after its rest a new connection may use it again.
    s.alive[0] = true;
    s.run(Duration::from_secs(31));
    s.establish(2, SERVER);
    s.run(Duration::from_millis(200));
    assert_eq!(s.up(2).len(), 2);
}

#[test]
fn a_closed_subflow_is_released_and_retried_up_to_max_failures() {
    let mut s = Sim::new(&[5], 1, |_| {});
    s.establish(1, SERVER);
    s.run(Duration::from_millis(100));
    for round in 0..2 {
        let up = s.up(1);
        assert_eq!(up.len(), 1, "round {round}");
        let key = *s.subflows.keys().next().unwrap();
        s.subflows.remove(&key);
        s.m.subflow_closed(s.now, key.0, key.1, key.2);
        s.drain();
        s.run(Duration::from_millis(100));
        // Released at the relay (the retry, if any, has a new entry on a new port).
        assert!(s.relays[0]
            .entry(key.2.port())
            .is_none_or(|e| e.source != key.1));
    }
    // Two failures with the only relay: the connection stays without a detour.
    assert!(s.up(1).is_empty());
    assert_eq!(s.relays[0].len(), 0);
    assert_eq!(s.opens, s.closes);
    assert_eq!(s.m.counters().failures, 2);
}

#[test]
fn a_subflow_that_never_joins_is_destroyed() {
    let mut s = Sim::new(&[5], 1, |c| c.max_failures = 1);
    s.join = Join::Never;
    s.establish(1, SERVER);
    s.run(Duration::from_secs(6));
    assert_eq!(s.destroyed.len(), 1);
    assert!(s.subflows.is_empty());
    assert_eq!(s.relays[0].len(), 0, "released");
    assert_eq!(s.opens, s.closes);
}

#[test]
fn a_nat_before_the_relay_makes_the_detour_unusable() {
    let mut s = Sim::new(&[5], 1, |c| c.max_failures = 1);
    s.nat_shift = 7;
    s.establish(1, SERVER);
    s.run(Duration::from_millis(200));
    assert!(s.subflows.is_empty());
    assert_eq!(s.m.counters().nat_in_path, 1);
    assert_eq!(s.relays[0].len(), 0, "released");
}

#[test]
fn closing_the_connection_or_the_daemon_releases_everything() {
    let mut s = Sim::new(&[5, 8], 2, |_| {});
    s.establish(1, SERVER);
    s.establish(2, SERVER);
    s.run(Duration::from_millis(200));
    assert_eq!(s.relays[0].len() + s.relays[1].len(), 4);
    s.m.connection_closed(s.now, 1);
    s.drain();
    s.run(Duration::from_millis(200));
    assert_eq!(s.relays[0].len() + s.relays[1].len(), 2);
    // The kernel closed connection 1's subflows itself: nothing destroyed.
    assert!(s.destroyed.is_empty());
    s.m.release_all(s.now);
    s.drain();
    s.run(Duration::from_millis(200));
    assert_eq!(s.destroyed.len(), 2);
    assert_eq!(s.relays[0].len() + s.relays[1].len(), 0);
    assert!(s.m.is_idle());
    assert_eq!(s.opens, s.closes);
}

#[test]
fn decisions_are_deterministic() {
    let trace = || {
        let mut s = Sim::new(&[5, 9, 3], 2, |_| {});
        s.establish(1, SERVER);
        s.run(Duration::from_secs(1));
        s.alive[1] = false;
        s.establish(2, SERVER);
        s.run(Duration::from_secs(12));
        (s.m.detours(), s.m.counters(), s.destroyed)
    };
    assert_eq!(trace(), trace());
}
