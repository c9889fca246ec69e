//! The client's detour path manager: which (link × relay) detours the tunnel uses, decided
//! sans-IO; the daemon only carries out its [`Action`]s and sends its datagrams.
//!
//! Every (link × relay) pair is a *candidate*. The manager asks each relay (one
//! [`DetourClient`] per relay) for detours from the link's own socket: a [`Transmit`] names
//! the link whose socket must send it, because the relay forwards the source it sees. An
//! answered request becomes a tunnel path of its own ([`Action::AddPath`]: a `PathId` beyond
//! the links, remote = relay address:port, sent from the link's socket); at most
//! `detours` (N) are in use at once.
//!
//! Choice by RTT. A candidate's estimate is first the request/answer round trip (a lower
//! bound: the path adds the relay–server leg), then, once it has carried a path, that
//! path's minimum RTT. Candidates never measured are probed together (a probe is a real
//! request: the detour exists at the relay until released); `probe_window` after a probe
//! round the best N answered ones become paths and the others are released. A waiting
//! candidate whose estimate is clearly lower (20 % and 2 ms, as `best`'s failback) than the
//! worst path's replaces it once that path has been in use for `min_hold`; estimates of
//! waiting candidates are refreshed every `reprobe`. An optimistic request RTT that the
//! path then disproves is replaced by the path's own, so swaps settle.
//!
//! Lifecycle. A detour is renewed at half its lifetime. It is retired ([`Action::RemovePath`])
//! when its path has been Down for `dead_after`, when a renewal gets no ok answer (the relay
//! stopped answering or forgot it), when its link goes down, or when it adds nothing: while
//! both it and the direct path over the same link are busy for `useless_after`, their
//! delivery rates together stay below (1 + `useless_gain`) × what one of them carries
//! alone — the detour then shares the direct path's bottleneck (the access link), so it
//! only splits the same capacity (a lossy direct path beside a cleaner detour is judged
//! sooner, by a 2-s trial standby of the direct path that measures the detour alone); if
//! the detour loses clearly less, the direct path goes on standby instead ([`Action::Standby`], `manager_shared.rs`). A retired candidate waits
//! `backoff` (`useless_backoff` when useless) before it is tried again; another candidate
//! takes its place. [`DetourManager::release_all`] releases every detour (shutdown).
//!
//! Relays come from the client's config and from the server's list
//! ([`DetourManager::set_server_relays`]); a relay the server stops listing leaves
//! gracefully (`manager_relays.rs`).
//!
//! Invariants: at most `detours` candidates hold a path; a slot `PathId` is held by one
//! candidate at a time, and slots are in `first_slot .. MAX_PATHS`; deterministic (time is
//! injected, randomness is the seed); re-evaluation happens at every `handle_timeout`, at
//! most `TICK` apart while anything is configured.

use super::client::{ClientConfig, ClientEvent, DetourClient, RequestId};
pub use super::manager_types::*;
use super::wire::{Request, Status};
use crate::path::PathId;
use crate::Instant;
use relays::Origin;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

#[path = "manager_relays.rs"]
mod relays;
#[path = "manager_shared.rs"]
mod shared;

/// A link the manager may detour.
#[derive(Debug, Clone)]
struct Link {
    id: PathId,
    name: String,
    server: SocketAddr,
    up: bool,
    /// Direct path's delivery rate while busy with no busy detour beside it (bytes/s).
    alone_rate: f64,
    /// Since when the direct path has been busy with no busy detour beside it.
    alone_since: Option<Instant>,
    /// Since when the direct path has been busy.
    busy: shared::BusySpan,
    /// The direct path's bytes delivered.
    meter: shared::DeliveryMeter,
    /// The direct path is on standby for this detour (`manager_shared.rs`).
    standby: Option<shared::Standby>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    /// Nothing asked (estimate may be known from before).
    Idle,
    /// Request sent; the answer makes it `Held` (probe) or `Active` (`activate`).
    Asking {
        req: RequestId,
        sent: Instant,
        activate: bool,
    },
    /// The relay holds a detour; not a path yet.
    Held {
        port: u16,
        lifetime: Duration,
        granted: Instant,
    },
    /// A path.
    Active(Active),
    /// Not tried before `until`.
    Backoff { until: Instant },
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Active {
    slot: PathId,
    port: u16,
    lifetime: Duration,
    granted: Instant,
    since: Instant,
    renew: Option<RequestId>,
    down_since: Option<Instant>,
    /// Since when the detour has been busy.
    busy: shared::BusySpan,
    /// What the detour carried alone in a trial, bytes/s (0: unknown; `manager_shared.rs`).
    alone_rate: f64,
}

#[derive(Debug, Clone)]
struct Candidate {
    link: usize,
    relay: usize,
    state: State,
    /// RTT estimate: request round trip, then the path's min RTT.
    rtt: Option<Duration>,
    rtt_from_path: bool,
    probed_at: Option<Instant>,
    /// The detour's bytes delivered while it is a path (kept out of `Active`, which is
    /// copied often).
    meter: shared::DeliveryMeter,
}

impl Candidate {
    /// Link `link` × relay `relay`, nothing asked or known yet.
    fn new(link: usize, relay: usize) -> Self {
        Candidate {
            link,
            relay,
            state: State::Idle,
            rtt: None,
            rtt_from_path: false,
            probed_at: None,
            meter: shared::DeliveryMeter::default(),
        }
    }
}

/// The path manager (see the module docs).
pub struct DetourManager {
    cfg: ManagerConfig,
    relays: Vec<RelaySpec>,
    /// Per relay (as `relays`): where it came from, whether it is leaving.
    origins: Vec<Origin>,
    clients: Vec<DetourClient>,
    links: Vec<Link>,
    cands: Vec<Candidate>,
    /// (relay, request) → candidate.
    asks: HashMap<(usize, RequestId), usize>,
    /// Requests of no candidate (releases): their answers are ignored.
    out: VecDeque<Transmit>,
    /// Request id → link socket, for requests still being retried.
    route: HashMap<(usize, RequestId), PathId>,
    actions: VecDeque<Action>,
    counters: ManagerCounters,
    last_tick: Option<Instant>,
    /// Seeds the relays' request clients (one derived per relay added).
    seed: [u8; 32],
    spawned: u32,
}

impl DetourManager {
    /// A manager for `relays`; links are added with [`DetourManager::add_link`].
    pub fn new(cfg: ManagerConfig, relays: Vec<RelaySpec>, seed: [u8; 32]) -> Self {
        let mut m = DetourManager {
            cfg,
            relays: Vec::new(),
            origins: Vec::new(),
            clients: Vec::new(),
            links: Vec::new(),
            cands: Vec::new(),
            asks: HashMap::new(),
            out: VecDeque::new(),
            route: HashMap::new(),
            actions: VecDeque::new(),
            counters: ManagerCounters::default(),
            last_tick: None,
            seed,
            spawned: 0,
        };
        for r in relays {
            m.push_relay(r, RelaySource::Config);
        }
        m
    }

    /// A request client for relay `key`, seeded afresh.
    fn new_client(&mut self, key: crate::crypto::PublicKey) -> DetourClient {
        let mut s = self.seed;
        s[31] ^= self.spawned as u8;
        s[30] ^= 0x5a;
        s[29] ^= (self.spawned >> 8) as u8;
        self.spawned += 1;
        let cfg = &self.cfg;
        DetourClient::new(
            ClientConfig::new(cfg.local_key.clone(), key, cfg.wall_origin_us),
            s,
        )
    }

    fn request(&mut self, now: Instant, c: usize, release: bool) -> Option<RequestId> {
        let (li, ri) = (self.cands[c].link, self.cands[c].relay);
        let rq = Request {
            server: self.links[li].server,
            mode: self.relays[ri].mode,
            release,
        };
        let id = self.clients[ri].request(now, rq).ok()?;
        self.route.insert((ri, id), self.links[li].id);
        self.collect_transmits(ri);
        Some(id)
    }

    fn collect_transmits(&mut self, ri: usize) {
        while let Some((id, data)) = self.clients[ri].poll_transmit_for() {
            if let Some(&link) = self.route.get(&(ri, id)) {
                let dst = self.relays[ri].address;
                self.out.push_back(Transmit { link, dst, data });
            }
        }
    }

    /// A datagram that arrived on link `link`'s socket from `from`; true if it was a relay
    /// answer (the caller then drops it).
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        _link: PathId,
        from: SocketAddr,
        data: &[u8],
    ) -> bool {
        if data.first() != Some(&super::wire::TYPE_ANSWER) {
            return false;
        }
        let Some(ri) = self.relays.iter().position(|r| r.address == from) else {
            return false;
        };
        self.clients[ri].handle_datagram(now, data);
        self.drain_events(now, ri);
        self.decide(now);
        true
    }

    fn drain_events(&mut self, now: Instant, ri: usize) {
        while let Some(ev) = self.clients[ri].poll_event() {
            let (id, answer) = match ev {
                ClientEvent::Answered { id, answer, .. } => (id, Some(answer)),
                ClientEvent::TimedOut { id, .. } => (id, None),
            };
            self.route.remove(&(ri, id));
            if let Some(c) = self.asks.remove(&(ri, id)) {
                let ok = answer
                    .filter(|a| a.status == Status::Ok)
                    .map(|a| (a.relay_port, Duration::from_secs(a.lifetime_s.into())));
                self.on_answer(now, c, id, ok);
            }
        }
    }

    fn on_answer(&mut self, now: Instant, c: usize, id: RequestId, ok: Option<(u16, Duration)>) {
        match (self.cands[c].state, ok) {
            (
                State::Asking {
                    req,
                    sent,
                    activate,
                },
                Some((port, lifetime)),
            ) if req == id => {
                if !self.cands[c].rtt_from_path {
                    self.cands[c].rtt = Some(now.saturating_since(sent));
                }
                self.cands[c].state = State::Held {
                    port,
                    lifetime,
                    granted: now,
                };
                if activate {
                    self.activate(now, c);
                }
            }
            (State::Asking { req, .. }, None) if req == id => {
                self.counters.refused += 1;
                self.cands[c].state = State::Backoff {
                    until: now + self.cfg.backoff,
                };
            }
            (State::Active(mut a), Some((port, lifetime))) if a.renew == Some(id) => {
                a.renew = None;
                a.granted = now;
                a.lifetime = lifetime;
                if port != a.port {
                    a.port = port;
                    self.actions.push_back(self.add_action(c, a.slot, port));
                }
                self.cands[c].state = State::Active(a);
            }
            (State::Active(a), None) if a.renew == Some(id) => {
                self.counters.retired_relay += 1;
                self.retire(now, c, self.cfg.backoff);
            }
            // A late grant for a candidate that has moved on (link down, backoff): the
            // relay holds a detour nobody uses, so give it back.
            (State::Idle | State::Backoff { .. }, Some(_)) => {
                self.request(now, c, true);
            }
            _ => {}
        }
    }

    fn add_action(&self, c: usize, path: PathId, port: u16) -> Action {
        let (l, r) = (
            &self.links[self.cands[c].link],
            &self.relays[self.cands[c].relay],
        );
        Action::AddPath {
            path,
            link: l.id,
            remote: SocketAddr::new(r.address.ip(), port),
            name: format!("{} via {}", l.name, r.name),
        }
    }

    /// Makes held candidate `c` a path, if a slot is free.
    fn activate(&mut self, now: Instant, c: usize) {
        let State::Held {
            port,
            lifetime,
            granted,
        } = self.cands[c].state
        else {
            return;
        };
        let Some(slot) = self.free_slot() else {
            return;
        };
        self.cands[c].meter = shared::DeliveryMeter::default();
        self.cands[c].state = State::Active(Active {
            slot,
            port,
            lifetime,
            granted,
            since: now,
            renew: None,
            down_since: None,
            busy: shared::BusySpan::default(),
            alone_rate: 0.0,
        });
        self.counters.added += 1;
        self.actions.push_back(self.add_action(c, slot, port));
    }

    fn free_slot(&self) -> Option<PathId> {
        (self.cfg.first_slot..crate::sched::MAX_PATHS as u8)
            .map(PathId)
            .find(|&p| {
                !self
                    .cands
                    .iter()
                    .any(|c| active(c).is_some_and(|a| a.slot == p))
            })
    }

    /// Ends whatever candidate `c` holds: a path is removed, a detour released; then it
    /// waits `backoff` (idle at once if zero).
    fn retire(&mut self, now: Instant, c: usize, backoff: Duration) {
        match self.cands[c].state {
            State::Active(a) => {
                self.actions.push_back(Action::RemovePath { path: a.slot });
                self.request(now, c, true);
            }
            State::Held { .. } => {
                self.request(now, c, true);
            }
            _ => {}
        }
        self.cands[c].state = if backoff.is_zero() {
            State::Idle
        } else {
            State::Backoff {
                until: now + backoff,
            }
        };
    }

    /// Runs retries, renewals, retirements and the choice of paths.
    pub fn handle_timeout(&mut self, now: Instant) {
        for ri in 0..self.clients.len() {
            self.clients[ri].handle_timeout(now);
            self.collect_transmits(ri);
            self.drain_events(now, ri);
        }
        for c in 0..self.cands.len() {
            match self.cands[c].state {
                State::Backoff { until } if until <= now => self.cands[c].state = State::Idle,
                State::Active(a) => self.upkeep(now, c, a),
                _ => {}
            }
        }
        self.decide(now);
        self.forget_left();
        self.last_tick = Some(now);
    }

    /// Renewal and death of active candidate `c`.
    fn upkeep(&mut self, now: Instant, c: usize, mut a: Active) {
        if a.down_since
            .is_some_and(|t| now.saturating_since(t) >= self.cfg.dead_after)
        {
            self.counters.retired_dead += 1;
            self.retire(now, c, self.cfg.backoff);
            return;
        }
        if a.renew.is_none() && now >= a.granted + a.lifetime / 2 {
            a.renew = self.request(now, c, false);
            if let Some(id) = a.renew {
                self.asks.insert((self.cands[c].relay, id), c);
            }
            self.cands[c].state = State::Active(a);
        }
    }

    /// Probes, chooses, swaps and releases (see the module docs).
    fn decide(&mut self, now: Instant) {
        for c in 0..self.cands.len() {
            let due = self.cands[c]
                .probed_at
                .is_none_or(|t| now.saturating_since(t) >= self.cfg.reprobe);
            let k = &self.cands[c];
            if k.state == State::Idle && due && self.links[k.link].up && !self.leaving(k.relay) {
                self.ask(now, c, false);
            }
        }
        let waiting = self.cands.iter().any(|c| {
            matches!(c.state, State::Asking { sent, activate: false, .. }
                if now.saturating_since(sent) < self.cfg.probe_window)
        });
        if waiting {
            return;
        }
        while self.in_use() < self.cfg.detours {
            let Some(c) = self.best_waiting() else { break };
            match self.cands[c].state {
                State::Held { .. } => self.activate(now, c),
                _ => self.ask(now, c, true),
            }
            if !matches!(self.cands[c].state, State::Active(_) | State::Asking { .. }) {
                break; // no slot, or the request could not be queued
            }
        }
        self.maybe_swap(now);
        self.retire_left(now);
        for c in 0..self.cands.len() {
            if matches!(self.cands[c].state, State::Held { .. }) {
                self.retire(now, c, Duration::ZERO);
            }
        }
    }

    fn ask(&mut self, now: Instant, c: usize, activate: bool) {
        if let Some(req) = self.request(now, c, false) {
            self.asks.insert((self.cands[c].relay, req), c);
            self.cands[c].state = State::Asking {
                req,
                sent: now,
                activate,
            };
            self.cands[c].probed_at = Some(now);
        }
    }

    /// Candidates holding or asking for a path.
    fn in_use(&self) -> usize {
        // Paths through a leaving relay are on their way out: others take their place.
        let using = |c: &Candidate| {
            matches!(
                c.state,
                State::Active(_) | State::Asking { activate: true, .. }
            ) && !self.leaving(c.relay)
        };
        self.cands.iter().filter(|c| using(c)).count()
    }

    /// The waiting candidate (held, or idle with a known estimate) with the lowest RTT.
    fn best_waiting(&self) -> Option<usize> {
        (0..self.cands.len())
            .filter(|&c| {
                let k = &self.cands[c];
                self.links[k.link].up
                    && !self.leaving(k.relay)
                    && k.rtt.is_some()
                    && matches!(k.state, State::Held { .. } | State::Idle)
            })
            .min_by_key(|&c| (self.cands[c].rtt, c))
    }

    /// Replaces the worst path by a clearly better waiting candidate.
    fn maybe_swap(&mut self, now: Instant) {
        let Some(b) = self.best_waiting() else { return };
        let worst = (0..self.cands.len())
            .filter(|&c| active(&self.cands[c]).is_some() && !self.leaving(self.cands[c].relay))
            .max_by_key(|&c| (self.cands[c].rtt, c));
        let Some(w) = worst else { return };
        let (Some(rb), Some(rw)) = (self.cands[b].rtt, self.cands[w].rtt) else {
            return;
        };
        let held = active(&self.cands[w])
            .is_some_and(|a| now.saturating_since(a.since) >= self.cfg.min_hold);
        let better =
            rb.as_secs_f64() < rw.as_secs_f64() * 0.8 && rb + Duration::from_millis(2) < rw;
        if self.in_use() >= self.cfg.detours && held && better {
            self.counters.swapped += 1;
            self.retire(now, w, Duration::ZERO);
            self.cands[w].probed_at = Some(now); // keep its path-measured estimate for now
            match self.cands[b].state {
                State::Held { .. } => self.activate(now, b),
                _ => self.ask(now, b, true),
            }
        }
    }

    /// Releases every detour and forgets every path (shutdown: send the transmits, then
    /// stop; relays expire what a lost release leaves).
    pub fn release_all(&mut self, now: Instant) {
        for c in 0..self.cands.len() {
            self.retire(now, c, Duration::ZERO);
        }
        for li in 0..self.links.len() {
            self.upkeep_standby(now, li);
        }
    }

    /// The next request datagram.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }

    /// The next action for the daemon.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When `handle_timeout` wants to run next (None without relays or links).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.cands.is_empty() {
            return None;
        }
        let tick = self.last_tick.map_or(Instant::ZERO, |t| t + TICK);
        self.clients
            .iter()
            .filter_map(|c| c.poll_timeout())
            .chain([tick])
            .min()
    }

    /// Counters.
    pub fn counters(&self) -> ManagerCounters {
        self.counters
    }
}

fn active(c: &Candidate) -> Option<Active> {
    match c.state {
        State::Active(a) => Some(a),
        _ => None,
    }
}
