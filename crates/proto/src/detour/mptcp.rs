//! Detours for kernel MPTCP: which connections get subflows through which relays, decided
//! sans-IO (Brennan's path manager, "adds up to N additional subflows", with the kernel's
//! userspace path manager in place of a kernel patch). The daemon feeds the kernel's
//! path-manager events in and carries out [`MptcpAction`]s; it never decides.
//!
//! A *detour* is one subflow of one connection through one relay. When a client-side
//! connection to a target is established, up to `detours` (N) relays are chosen: alive
//! ones (not resting after a death), not yet failed `max_failures` times for this
//! connection, of the connection's address family, lowest request round trip first
//! (unmeasured ones after measured ones, then config order). For each, the daemon binds a
//! UDP socket to the connection's local address ([`MptcpAction::Open`]); the manager asks
//! the relay from that socket for a `NatTcp` detour (the relay installs TCP DNAT + SNAT for
//! exactly that source address and port → the server); on an ok answer whose observed
//! source is the socket's own, the daemon creates the subflow from that same address *and
//! port* to relay:port ([`MptcpAction::CreateSubflow`]). TCP and UDP ports are separate
//! spaces, so the TCP subflow can bind the port its request came from.
//!
//! Lifecycle. A subflow not established within `join_timeout`, one the kernel reports
//! closed, one the kernel refused to create, and a refused request are *failures*: the
//! detour ends (its relay entry released) and another relay — or the same one, below
//! `max_failures` for this connection — takes its place. Each relay with detours is
//! checked every `check_interval` by renewing one of them, and every detour is renewed at
//! half its lifetime. A create or renewal that goes unanswered means the relay is dead: all
//! its subflows are destroyed ([`MptcpAction::DestroySubflow`]), it rests for `backoff`,
//! and the connections get other relays if there are any. A renewal answered with another
//! port (the relay restarted and lost the entry) ends that detour. A closed connection's
//! detours are released. [`MptcpManager::release_all`] destroys and releases everything.
//!
//! The conversation with the relays (requests, answers, checks, a relay's death) is in
//! `mptcp/asks.rs`.
//!
//! Invariants: a connection has at most N live (not releasing) detours and at most one per
//! relay; local address ids are never reused within a connection (the kernel keeps an id
//! bound to its address and port after a subflow closes); every `Open` is followed by
//! exactly one `Close`; deterministic (time injected, randomness from the seed).

mod asks;

use super::client::{ClientConfig, DetourClient, RequestId};
pub use super::manager_types::RelaySpec;
pub use super::mptcp_types::*;
use crate::Instant;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for the daemon's `opened`.
    Opening,
    /// The create request is out.
    Asking { sent: Instant },
    /// SUBFLOW_CREATE issued; waiting for SUB_ESTABLISHED.
    Joining { port: u16, since: Instant },
    /// The subflow carries the connection.
    Up { port: u16 },
    /// The release is out; the socket closes when it resolves.
    Releasing,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Opening => "opening",
            State::Asking { .. } => "asking",
            State::Joining { .. } => "joining",
            State::Up { .. } => "up",
            State::Releasing => "releasing",
        }
    }

    fn port(self) -> Option<u16> {
        match self {
            State::Joining { port, .. } | State::Up { port } => Some(port),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
struct Detour {
    token: u32,
    server: SocketAddr,
    relay: usize,
    local_id: u8,
    local: Option<SocketAddr>,
    state: State,
    /// When the entry must be renewed (half its lifetime after the last ok answer).
    renew_at: Instant,
    renewing: bool,
}

#[derive(Debug, Clone)]
struct Conn {
    local: SocketAddr,
    remote: SocketAddr,
    /// Next local address id (never reused; 0 is the first subflow's).
    next_id: u16,
    failures: Vec<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ask {
    Create,
    Renew,
    Release,
}

struct Relay {
    spec: RelaySpec,
    client: DetourClient,
    rtt: Option<Duration>,
    rest_until: Option<Instant>,
    next_check: Option<Instant>,
}

/// The kernel-MPTCP detour manager (see the module docs).
pub struct MptcpManager {
    cfg: MptcpConfig,
    relays: Vec<Relay>,
    conns: BTreeMap<u32, Conn>,
    detours: BTreeMap<DetourId, Detour>,
    asks: HashMap<(usize, RequestId), (DetourId, Ask)>,
    next_id: u64,
    actions: VecDeque<MptcpAction>,
    counters: MptcpCounters,
}

impl MptcpManager {
    /// A manager for `relays` (their `mode` is ignored: subflows need `NatTcp`).
    pub fn new(cfg: MptcpConfig, relays: Vec<RelaySpec>, seed: [u8; 32]) -> Self {
        let relays = relays
            .into_iter()
            .enumerate()
            .map(|(i, spec)| {
                let mut s = seed;
                s[31] ^= i as u8;
                s[29] ^= 0xa5;
                let cc = ClientConfig::new(cfg.local_key.clone(), spec.key, cfg.wall_origin_us);
                Relay {
                    spec,
                    client: DetourClient::new(cc, s),
                    rtt: None,
                    rest_until: None,
                    next_check: None,
                }
            })
            .collect();
        MptcpManager {
            cfg,
            relays,
            conns: BTreeMap::new(),
            detours: BTreeMap::new(),
            asks: HashMap::new(),
            next_id: 0,
            actions: VecDeque::new(),
            counters: MptcpCounters::default(),
        }
    }

    /// A connection is fully established (`MPTCP_EVENT_ESTABLISHED`).
    pub fn connection_established(
        &mut self,
        now: Instant,
        token: u32,
        local: SocketAddr,
        remote: SocketAddr,
        server_side: bool,
    ) {
        if server_side || self.conns.contains_key(&token) {
            return;
        }
        self.counters.connections += 1;
        let to_relay = self
            .relays
            .iter()
            .any(|r| r.spec.address.ip() == remote.ip());
        let targeted =
            self.cfg.targets.is_empty() || self.cfg.targets.iter().any(|t| t.matches(remote));
        if to_relay || !targeted || self.conns.len() >= self.cfg.max_connections {
            return;
        }
        self.counters.connections_served += 1;
        let conn = Conn {
            local,
            remote,
            next_id: 1,
            failures: vec![0; self.relays.len()],
        };
        self.conns.insert(token, conn);
        self.fill(now);
    }

    /// A connection ended (`MPTCP_EVENT_CLOSED`): its detours are released.
    pub fn connection_closed(&mut self, now: Instant, token: u32) {
        if self.conns.remove(&token).is_none() {
            return;
        }
        for id in self.ids(|d| d.token == token) {
            // The kernel closed the subflows with the connection.
            self.end(now, id, false, true);
        }
    }

    /// A subflow joined (`MPTCP_EVENT_SUB_ESTABLISHED`).
    pub fn subflow_established(&mut self, token: u32, local: SocketAddr, remote: SocketAddr) {
        let Some(id) = self.find(token, local, remote) else {
            return;
        };
        let d = self.detours.get_mut(&id).expect("found");
        if let State::Joining { port, .. } = d.state {
            d.state = State::Up { port };
            self.counters.subflows_joined += 1;
        }
    }

    /// A subflow closed (`MPTCP_EVENT_SUB_CLOSED`): a detour's is a failure.
    pub fn subflow_closed(
        &mut self,
        now: Instant,
        token: u32,
        local: SocketAddr,
        remote: SocketAddr,
    ) {
        if let Some(id) = self.find(token, local, remote) {
            self.counters.subflows_closed += 1;
            self.fail(now, id, false, true);
        }
    }

    /// The daemon bound detour `id`'s socket (`Ok(its address)`) or could not.
    pub fn opened(&mut self, now: Instant, id: DetourId, bound: Result<SocketAddr, ()>) {
        let Some(d) = self.detours.get_mut(&id) else {
            return;
        };
        if d.state != State::Opening {
            return;
        }
        let Ok(local) = bound else {
            self.fail(now, id, false, false);
            return;
        };
        d.local = Some(local);
        d.state = State::Asking { sent: now };
        if !self.ask(now, id, Ask::Create) {
            self.fail(now, id, false, false);
        }
    }

    /// The kernel refused `CreateSubflow` for detour `id`.
    pub fn create_failed(&mut self, now: Instant, id: DetourId) {
        if let Some(d) = self.detours.get_mut(&id) {
            if let State::Joining { .. } = d.state {
                // Never created: nothing to destroy, but the relay holds the entry.
                d.state = State::Asking { sent: now };
                self.fail(now, id, false, true);
            }
        }
    }

    /// A datagram on detour `id`'s socket (a relay's answer, first byte `TYPE_ANSWER`).
    pub fn handle_datagram(&mut self, now: Instant, id: DetourId, data: &[u8]) {
        let Some(ri) = self.detours.get(&id).map(|d| d.relay) else {
            return;
        };
        if self.relays[ri].client.handle_datagram(now, data) {
            self.process(now, ri);
        }
    }

    /// Retries, renewals, relay checks, join deadlines and the end of relays' rest.
    pub fn handle_timeout(&mut self, now: Instant) {
        for ri in 0..self.relays.len() {
            self.relays[ri].client.handle_timeout(now);
            self.flush(ri);
            self.process(now, ri);
        }
        let late = self.ids(|d| {
            matches!(d.state, State::Joining { since, .. } if since + self.cfg.join_timeout <= now)
        });
        for id in late {
            self.fail(now, id, true, true);
        }
        for id in self.ids(|d| d.state.port().is_some() && !d.renewing && d.renew_at <= now) {
            self.renew(now, id);
        }
        self.check_relays(now);
        let mut rested = false;
        for r in &mut self.relays {
            if r.rest_until.is_some_and(|t| t <= now) {
                r.rest_until = None;
                rested = true;
            }
        }
        if rested {
            self.fill(now);
        }
    }

    /// When `handle_timeout` is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let relays = self.relays.iter().flat_map(|r| {
            [r.client.poll_timeout(), r.next_check, r.rest_until]
                .into_iter()
                .flatten()
        });
        let detours = self.detours.values().filter_map(|d| match d.state {
            State::Joining { since, .. } => Some(since + self.cfg.join_timeout),
            State::Up { .. } if !d.renewing => Some(d.renew_at),
            _ => None,
        });
        relays.chain(detours).min()
    }

    /// The next thing the daemon must do.
    pub fn poll_action(&mut self) -> Option<MptcpAction> {
        self.actions.pop_front()
    }

    /// Destroys every detour subflow and releases every relay entry (shutdown). The daemon
    /// then runs until [`MptcpManager::is_idle`] or a short deadline, so releases go out.
    pub fn release_all(&mut self, now: Instant) {
        self.conns.clear();
        for id in self.ids(|d| d.state != State::Releasing) {
            self.end(now, id, true, true);
        }
    }

    /// No detour left (every socket closed).
    pub fn is_idle(&self) -> bool {
        self.detours.is_empty()
    }

    /// The detours, in id order.
    pub fn detours(&self) -> Vec<DetourStatus> {
        self.detours
            .values()
            .map(|d| DetourStatus {
                token: d.token,
                server: d.server,
                relay: self.relays[d.relay].spec.name.clone(),
                state: d.state.name(),
                local: d.local,
                relay_port: d.state.port(),
            })
            .collect()
    }

    /// The relays.
    pub fn relays(&self, now: Instant) -> Vec<RelayStatus> {
        self.relays
            .iter()
            .map(|r| RelayStatus {
                name: r.spec.name.clone(),
                address: r.spec.address,
                rtt: r.rtt,
                resting_for: r.rest_until.map(|t| t.saturating_since(now)),
            })
            .collect()
    }

    /// Connections served now.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Counters.
    pub fn counters(&self) -> MptcpCounters {
        self.counters
    }

    fn ids(&self, pred: impl Fn(&Detour) -> bool) -> Vec<DetourId> {
        self.detours
            .iter()
            .filter(|(_, d)| pred(d))
            .map(|(id, _)| *id)
            .collect()
    }

    /// The detour whose subflow is `local` → `remote` of `token`.
    fn find(&self, token: u32, local: SocketAddr, remote: SocketAddr) -> Option<DetourId> {
        self.detours.iter().find_map(|(id, d)| {
            let port = d.state.port()?;
            let relay = SocketAddr::new(self.relays[d.relay].spec.address.ip(), port);
            (d.token == token && d.local == Some(local) && remote == relay).then_some(*id)
        })
    }

    /// Starts detours for every served connection below N.
    fn fill(&mut self, now: Instant) {
        let tokens: Vec<u32> = self.conns.keys().copied().collect();
        for token in tokens {
            let used: Vec<usize> = self
                .detours
                .values()
                .filter(|d| d.token == token && d.state != State::Releasing)
                .map(|d| d.relay)
                .collect();
            let need = self.cfg.detours.saturating_sub(used.len());
            for ri in self.ranked(now, token, &used).into_iter().take(need) {
                self.start(token, ri);
            }
        }
    }

    /// Relays usable for `token` now, best first.
    fn ranked(&self, now: Instant, token: u32, used: &[usize]) -> Vec<usize> {
        let c = &self.conns[&token];
        let mut v: Vec<usize> = (0..self.relays.len())
            .filter(|&ri| {
                let r = &self.relays[ri];
                !used.contains(&ri)
                    && r.rest_until.is_none_or(|t| t <= now)
                    && c.failures[ri] < self.cfg.max_failures
                    && r.spec.address.is_ipv4() == c.local.is_ipv4()
            })
            .collect();
        v.sort_by_key(|&ri| (self.relays[ri].rtt.unwrap_or(Duration::MAX), ri));
        v
    }

    fn start(&mut self, token: u32, ri: usize) {
        let c = self.conns.get_mut(&token).expect("served connection");
        let Ok(local_id) = u8::try_from(c.next_id) else {
            return; // 255 ids used in this connection: no more detours for it
        };
        c.next_id += 1;
        let id = DetourId(self.next_id);
        self.next_id += 1;
        self.detours.insert(
            id,
            Detour {
                token,
                server: c.remote,
                relay: ri,
                local_id,
                local: None,
                state: State::Opening,
                renew_at: Instant::ZERO,
                renewing: false,
            },
        );
        self.counters.detours_started += 1;
        self.actions.push_back(MptcpAction::Open {
            id,
            ip: c.local.ip(),
        });
    }

    /// A failed detour: counted against its (connection, relay), ended, replaced.
    fn fail(&mut self, now: Instant, id: DetourId, destroy: bool, release: bool) {
        let Some(d) = self.detours.get(&id) else {
            return;
        };
        self.counters.failures += 1;
        if let Some(c) = self.conns.get_mut(&d.token) {
            c.failures[d.relay] += 1;
        }
        self.end(now, id, destroy, release);
        self.fill(now);
    }

    /// Ends detour `id`: destroys its subflow (if `destroy` and it has one), releases its
    /// relay entry (if `release` and it may hold one), closes its socket.
    fn end(&mut self, now: Instant, id: DetourId, destroy: bool, release: bool) {
        let Some(d) = self.detours.get(&id) else {
            return;
        };
        if let (true, Some(port), Some(local)) = (destroy, d.state.port(), d.local) {
            let remote = SocketAddr::new(self.relays[d.relay].spec.address.ip(), port);
            self.counters.subflows_removed += 1;
            self.actions.push_back(MptcpAction::DestroySubflow {
                token: d.token,
                local,
                remote,
            });
        }
        let holds = matches!(
            d.state,
            State::Asking { .. } | State::Joining { .. } | State::Up { .. }
        );
        if release && holds && self.ask(now, id, Ask::Release) {
            self.detours.get_mut(&id).expect("exists").state = State::Releasing;
        } else {
            self.close(id);
        }
    }

    fn close(&mut self, id: DetourId) {
        if self.detours.remove(&id).is_some() {
            self.actions.push_back(MptcpAction::Close { id });
        }
    }
}
