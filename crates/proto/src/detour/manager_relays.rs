//! The path manager's candidate set as it changes at run time — links added and going up
//! or down; the client's configured relays plus the list the server hands out
//! (docs/PROTOCOL.md §15.7), and relays leaving when the server stops listing them — and
//! what `status` shows of relays and candidates.
//!
//! Merge ([`DetourManager::set_server_relays`]): configured relays first; a server relay
//! with the name or the address of a configured one is skipped (configured win); server
//! relays are taken in list order while configured plus server relays stay within
//! `MAX_HANDED_RELAYS` (8). A server relay listed again unchanged keeps its candidates,
//! estimates and paths; a new or changed one (same name or address, other key or mode)
//! starts with fresh candidates on every link.
//!
//! Leaving: a relay the newest list lacks is not asked again; its held detours are
//! released at once and its probes when answered; its paths no longer count towards N, so
//! other candidates are chosen in their place, and each of its paths is retired (removed,
//! then released at the relay) once N others are active, once no other candidate could
//! take its place, or `leave_after` after the list dropped it. A relay that has left (no
//! candidate holding anything, no request of its own in flight) is forgotten.
//!
//! Invariants: names and addresses are distinct across the relays held (answers are
//! matched by address, paths named by relay); at most 2 × `MAX_HANDED_RELAYS` relays are
//! held — past that, leaving relays are dropped at once (paths retired, releases sent).

use super::{active, Candidate, DetourManager, Link, State};
use super::{CandidateStatus, RelayListing, RelaySource, RelaySpec};
use crate::path::PathId;
use crate::wire::relays::MAX_HANDED_RELAYS;
use crate::Instant;
use std::net::SocketAddr;
use std::time::Duration;

/// Where a relay came from and whether it is leaving (since when).
#[derive(Debug, Clone, Copy)]
pub(super) struct Origin {
    source: RelaySource,
    leaving: Option<Instant>,
}

impl DetourManager {
    /// Adds a link (path `id`, the server's address over it); its candidates start idle.
    pub fn add_link(&mut self, id: PathId, name: &str, server: SocketAddr) {
        let li = self.links.len();
        self.links.push(Link {
            id,
            name: name.to_string(),
            server,
            up: true,
            alone_rate: 0.0,
            alone_since: None,
            meter: super::shared::DeliveryMeter::default(),
            busy: Default::default(),
            standby: None,
        });
        for ri in 0..self.relays.len() {
            self.cands.push(Candidate::new(li, ri));
        }
    }

    /// The link's interface went up or down; a down link's detours are retired at once.
    pub fn set_link_up(&mut self, now: Instant, id: PathId, up: bool) {
        let Some(li) = self.links.iter().position(|l| l.id == id) else {
            return;
        };
        self.links[li].up = up;
        if !up {
            for c in 0..self.cands.len() {
                if self.cands[c].link == li {
                    self.retire(now, c, Duration::ZERO);
                }
            }
        }
    }

    /// The server's newest list of relays (see the module docs for the merge).
    pub fn set_server_relays(&mut self, now: Instant, list: Vec<RelaySpec>) {
        let configured = self.count_source(RelaySource::Config);
        let mut keep: Vec<RelaySpec> = Vec::new();
        for r in list {
            let clash = |x: &RelaySpec| x.name == r.name || x.address == r.address;
            let by_config = (0..self.relays.len()).any(|ri| {
                self.origins[ri].source == RelaySource::Config && clash(&self.relays[ri])
            });
            if by_config || keep.iter().any(clash) {
                continue;
            }
            if configured + keep.len() >= MAX_HANDED_RELAYS {
                break;
            }
            keep.push(r);
        }
        for ri in 0..self.relays.len() {
            if self.origins[ri].source != RelaySource::Server {
                continue;
            }
            if let Some(k) = keep.iter().position(|r| *r == self.relays[ri]) {
                keep.remove(k);
                self.origins[ri].leaving = None;
            } else if self.origins[ri].leaving.is_none() {
                self.start_leaving(now, ri);
            }
        }
        for r in keep {
            // Only leaving relays can clash now: they go at once, the new one starts over.
            while let Some(ri) = (0..self.relays.len())
                .find(|&ri| self.relays[ri].name == r.name || self.relays[ri].address == r.address)
            {
                self.drop_relay(now, ri);
            }
            self.push_relay(r, RelaySource::Server);
        }
        while self.relays.len() > 2 * MAX_HANDED_RELAYS {
            let Some(ri) = (0..self.relays.len()).find(|&ri| self.leaving(ri)) else {
                break;
            };
            self.drop_relay(now, ri);
        }
    }

    fn count_source(&self, source: RelaySource) -> usize {
        self.origins.iter().filter(|o| o.source == source).count()
    }

    /// Whether relay `ri` is leaving.
    pub(super) fn leaving(&self, ri: usize) -> bool {
        self.origins[ri].leaving.is_some()
    }

    /// Adds relay `r` with an idle candidate on every link.
    pub(super) fn push_relay(&mut self, r: RelaySpec, source: RelaySource) {
        let ri = self.relays.len();
        let client = self.new_client(r.key);
        self.relays.push(r);
        self.clients.push(client);
        self.origins.push(Origin {
            source,
            leaving: None,
        });
        for li in 0..self.links.len() {
            self.cands.push(Candidate::new(li, ri));
        }
    }

    /// Relay `ri` is no longer listed: held detours are released now, a request meant to
    /// become a path will not (its grant is released), paths stay until `retire_left`.
    fn start_leaving(&mut self, now: Instant, ri: usize) {
        self.origins[ri].leaving = Some(now);
        for c in 0..self.cands.len() {
            if self.cands[c].relay != ri {
                continue;
            }
            match &mut self.cands[c].state {
                State::Held { .. } => {}
                State::Asking { activate, .. } => {
                    *activate = false;
                    continue;
                }
                _ => continue,
            }
            self.retire(now, c, Duration::ZERO);
        }
    }

    /// Retires the paths of leaving relays that others replaced, that nothing can replace,
    /// or that had their `leave_after` (called by `decide` once its choice is made).
    pub(super) fn retire_left(&mut self, now: Instant) {
        for c in 0..self.cands.len() {
            let Some(since) = self.origins[self.cands[c].relay].leaving else {
                continue;
            };
            if active(&self.cands[c]).is_none() {
                continue;
            }
            let staying = |k: &Candidate| !self.leaving(k.relay);
            let others = self
                .cands
                .iter()
                .filter(|k| staying(k) && active(k).is_some());
            let replaced = others.count() >= self.cfg.detours;
            let asking = self
                .cands
                .iter()
                .any(|k| matches!(k.state, State::Asking { .. }) && !self.leaving(k.relay));
            let hopeless = !asking && self.best_waiting().is_none();
            if replaced || hopeless || now.saturating_since(since) >= self.cfg.leave_after {
                self.retire(now, c, Duration::ZERO);
            }
        }
    }

    /// Forgets leaving relays that hold nothing any more and await no answer.
    pub(super) fn forget_left(&mut self) {
        let busy = |m: &Self, ri: usize| {
            m.clients[ri].pending() > 0
                || m.cands.iter().any(|c| {
                    c.relay == ri && !matches!(c.state, State::Idle | State::Backoff { .. })
                })
        };
        let mut ri = 0;
        while ri < self.relays.len() {
            if self.leaving(ri) && !busy(self, ri) {
                self.remove_relay(ri);
            } else {
                ri += 1;
            }
        }
    }

    /// Retires every candidate of relay `ri` (paths removed, detours released) and forgets
    /// it; answers to its releases are no longer awaited (the relay expires what a lost
    /// release leaves).
    fn drop_relay(&mut self, now: Instant, ri: usize) {
        for c in 0..self.cands.len() {
            if self.cands[c].relay == ri {
                self.retire(now, c, Duration::ZERO);
            }
        }
        self.remove_relay(ri);
    }

    /// Removes relay `ri`, its candidates and its requests, renumbering the rest.
    fn remove_relay(&mut self, ri: usize) {
        let mut new_index = Vec::with_capacity(self.cands.len());
        let mut next = 0;
        for c in &self.cands {
            new_index.push((c.relay != ri).then_some(next));
            next += usize::from(c.relay != ri);
        }
        self.cands.retain(|c| c.relay != ri);
        for c in &mut self.cands {
            c.relay -= usize::from(c.relay > ri);
        }
        let renumber = |r: usize| r - usize::from(r > ri);
        self.asks = std::mem::take(&mut self.asks)
            .into_iter()
            .filter(|((r, _), _)| *r != ri)
            .filter_map(|((r, id), c)| Some(((renumber(r), id), new_index[c]?)))
            .collect();
        self.route = std::mem::take(&mut self.route)
            .into_iter()
            .filter(|((r, _), _)| *r != ri)
            .map(|((r, id), link)| ((renumber(r), id), link))
            .collect();
        self.relays.remove(ri);
        self.clients.remove(ri);
        self.origins.remove(ri);
    }

    /// Every relay held, for status.
    pub fn relays(&self) -> Vec<RelayListing> {
        (0..self.relays.len())
            .map(|ri| RelayListing {
                spec: self.relays[ri].clone(),
                source: self.origins[ri].source,
                leaving: self.leaving(ri),
            })
            .collect()
    }

    /// Every candidate, for status.
    pub fn status(&self) -> Vec<CandidateStatus> {
        self.cands
            .iter()
            .map(|c| {
                let (state, path, port) = match c.state {
                    State::Idle => ("idle", None, None),
                    State::Asking { .. } => ("asking", None, None),
                    State::Held { port, .. } => ("held", None, Some(port)),
                    State::Active(a) => ("active", Some(a.slot), Some(a.port)),
                    State::Backoff { .. } => ("backoff", None, None),
                };
                CandidateStatus {
                    link: self.links[c.link].name.clone(),
                    relay: self.relays[c.relay].name.clone(),
                    source: self.origins[c.relay].source,
                    state,
                    path,
                    rtt: c.rtt,
                    rtt_from_path: c.rtt_from_path,
                    relay_port: port,
                }
            })
            .collect()
    }
}
