//! The client's side of the name service, sans-IO: find servers, pick one, publish the
//! client's own record, and find another server when the one in use is lost.
//!
//! Role: the daemon feeds it datagrams from resolvers, the time (Unix µs), attachment
//! changes (links up or down, policy) and "server lost"; it answers with datagrams to send
//! and [`Event`]s (use this server; record published). A resolve round asks every resolver
//! it knows (the configured ones, then those named in server records) for the server
//! records, measures each resolver's round trip, waits [`ResolverConfig::collect_ms`] after
//! the first answer for the others, and picks by `select::pick`. Only records that pass
//! `signed::admit` and whose key is in the trusted set are ever used, so a forged, replayed
//! (lower sequence) or expired record never changes where traffic goes.
//!
//! Invariants: reads no clock and no RNG (request ids count up); at most [`MAX_INFLIGHT`]
//! requests are remembered; the client's own sequence numbers only go up and start from
//! the wall clock, so a restarted client still supersedes its old record.

use crate::message::{Request, Response, Status};
use crate::record::{Body, IdentityBody, Kind, LinkAddr, Record, ServerBody};
use crate::select::{pick, Candidate};
use crate::signed::{admit, supersedes, RefusalCounts, SignedRecord};
use multihome_proto::crypto::{PublicKey, SessionId, StaticSecret};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;

/// Requests remembered while waiting for their answer.
pub const MAX_INFLIGHT: usize = 64;

/// What the resolver is told at start.
#[derive(Debug, Clone)]
pub struct ResolverConfig {
    /// The client's key (its record is named by and signed with it).
    pub key: StaticSecret,
    /// Resolver addresses from the configuration.
    pub bootstrap: Vec<SocketAddr>,
    /// Server keys the client accepts.
    pub trusted: Vec<PublicKey>,
    /// Lease of the client's own record (renewed at half of it).
    pub lease_ms: u64,
    /// Wait after the first answer of a round for the other resolvers.
    pub collect_ms: u64,
    /// Resend when a request went unanswered this long.
    pub retry_ms: u64,
    /// How long a lost server is not picked again.
    pub exclude_ms: u64,
}

/// What the daemon must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Use this server from now on.
    Use {
        /// Its name.
        name: SessionId,
        /// Its key (the Noise static key to handshake with).
        key: PublicKey,
        /// Its tunnel address (the first one its record announces).
        tunnel: SocketAddr,
        /// Every tunnel address its record announces, in its order: a link picks the first
        /// of its own family (an IPv6-only link cannot use an IPv4 address).
        tunnels: Vec<SocketAddr>,
    },
    /// The client's record was stored.
    Published {
        /// Its sequence number.
        seq: u64,
    },
}

/// A snapshot for status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolverStatus {
    /// Server in use.
    pub server: Option<(SessionId, SocketAddr)>,
    /// Trusted live server records known.
    pub servers_known: usize,
    /// When the own record was last stored (Unix ms), and its sequence number.
    pub published: Option<(u64, u64)>,
    /// Servers lost and replaced.
    pub failovers: u64,
    /// Records refused, by reason.
    pub refusals: RefusalCounts,
    /// Records well signed but by keys not trusted.
    pub untrusted: u64,
}

struct Inflight {
    dst: SocketAddr,
    sent_us: u64,
}

struct Round {
    next_send_us: u64,
    first_answer_us: Option<u64>,
}

/// The state machine.
pub struct Resolver {
    cfg: ResolverConfig,
    known: BTreeMap<SessionId, SignedRecord>,
    rtt_us: HashMap<SessionId, u64>,
    current: Option<(SessionId, SocketAddr, SocketAddr)>,
    excluded: Vec<(SessionId, u64)>,
    round: Option<Round>,
    inflight: HashMap<u32, Inflight>,
    next_id: u32,
    out: VecDeque<(SocketAddr, Vec<u8>)>,
    events: VecDeque<Event>,
    attachment: Option<(u8, Vec<LinkAddr>)>,
    seq: u64,
    /// The own record waiting to be acknowledged, and when to try again.
    unacked: Option<(SignedRecord, u64)>,
    renew_at_us: Option<u64>,
    status: ResolverStatus,
}

impl Resolver {
    /// Starts: the first resolve round goes out at `now` (every `now` here is Unix time in µs).
    pub fn new(cfg: ResolverConfig, now: u64) -> Resolver {
        let mut r = Resolver {
            cfg,
            known: BTreeMap::new(),
            rtt_us: HashMap::new(),
            current: None,
            excluded: Vec::new(),
            round: None,
            inflight: HashMap::new(),
            next_id: 1,
            out: VecDeque::new(),
            events: VecDeque::new(),
            attachment: None,
            seq: 0,
            unacked: None,
            renew_at_us: None,
            status: ResolverStatus::default(),
        };
        r.resolve(now);
        r
    }

    /// Starts a resolve round (unless one runs).
    pub fn resolve(&mut self, now: u64) {
        if self.round.is_none() {
            self.round = Some(Round {
                next_send_us: now,
                first_answer_us: None,
            });
            self.handle_timeout(now);
        }
    }

    /// The server in use stopped answering: never pick it again for `exclude_ms`.
    pub fn server_lost(&mut self, now: u64) {
        if let Some((name, _, _)) = self.current.take() {
            self.excluded.push((name, now + self.cfg.exclude_ms * 1000));
            self.status.failovers += 1;
            self.status.server = None;
        }
        self.resolve(now);
    }

    /// The client's links or policy changed: publish (if it differs from the last).
    pub fn set_attachment(&mut self, now: u64, policy: u8, links: Vec<LinkAddr>) {
        let new = Some((policy, links));
        if new != self.attachment {
            self.attachment = new;
            self.publish(now);
        }
    }

    fn publish(&mut self, now: u64) {
        let (Some((policy, links)), Some((server, _, _))) = (&self.attachment, self.current) else {
            return;
        };
        self.seq = (self.seq + 1).max(now / 1000);
        let rec = Record {
            key: self.cfg.key.public_key(),
            seq: self.seq,
            expires_ms: now / 1000 + self.cfg.lease_ms,
            body: Body::Identity(IdentityBody {
                server: Some(server),
                policy: *policy,
                links: links.clone(),
            }),
        };
        match SignedRecord::sign(rec, &self.cfg.key) {
            Ok(s) => {
                self.unacked = Some((s, now));
                self.renew_at_us = Some(now + self.cfg.lease_ms * 1000 / 2);
                self.send_publish(now);
            }
            Err(e) => tracing::warn!("own record not encodable: {e:?}"),
        }
    }

    fn send_publish(&mut self, now: u64) {
        let Some((s, _)) = &self.unacked else { return };
        let Some((_, _, resolver)) = self.current else {
            return;
        };
        let bytes = s.bytes().to_vec();
        self.unacked.as_mut().expect("checked").1 = now + self.cfg.retry_ms * 1000;
        self.send(now, resolver, Request::Publish(bytes));
    }

    fn send(&mut self, now: u64, dst: SocketAddr, req: Request) {
        if self.inflight.len() >= MAX_INFLIGHT {
            // The oldest request is the least likely to be answered.
            if let Some(&k) = self
                .inflight
                .iter()
                .min_by_key(|(_, f)| f.sent_us)
                .map(|(k, _)| k)
            {
                self.inflight.remove(&k);
            }
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.inflight.insert(id, Inflight { dst, sent_us: now });
        self.out.push_back((dst, req.encode(id)));
    }

    /// Every resolver known: configured ones, then those of live trusted server records.
    fn resolvers(&self) -> Vec<SocketAddr> {
        let mut v = self.cfg.bootstrap.clone();
        for s in self.known.values() {
            if let Body::Server(b) = &s.record().body {
                if !v.contains(&b.resolver) {
                    v.push(b.resolver);
                }
            }
        }
        v
    }

    /// A datagram from `from` at `now`.
    pub fn handle_datagram(&mut self, now: u64, from: SocketAddr, bytes: &[u8]) {
        let Some(resp) = Response::parse(bytes) else {
            return;
        };
        match self.inflight.get(&resp.id) {
            Some(f) if f.dst == from => {}
            _ => return,
        }
        let f = self.inflight.remove(&resp.id).expect("checked");
        match resp.op {
            2 => self.on_servers(now, f, &resp),
            3 => self.on_published(now, &resp),
            _ => {}
        }
    }

    fn on_servers(&mut self, now: u64, f: Inflight, resp: &Response) {
        if resp.status != Status::Ok {
            return;
        }
        for bytes in &resp.records {
            let s = match admit(bytes, now / 1000) {
                Ok(s) if s.kind() == Kind::Server => s,
                Ok(_) => continue,
                Err(e) => {
                    self.status.refusals.count(e);
                    continue;
                }
            };
            if !self.cfg.trusted.contains(&s.record().key) {
                self.status.untrusted += 1;
                continue;
            }
            let old = self.known.get(&s.name()).map(|o| o.record());
            if supersedes(s.record(), old).is_ok() {
                self.known.insert(s.name(), s);
            } else if old.is_some_and(|o| o.seq > s.record().seq) {
                self.status.refusals.count(crate::signed::Refusal::Stale);
            }
        }
        // Round trip of the responder, if it is a server we know.
        self.rtt_us
            .insert(resp.responder, now.saturating_sub(f.sent_us));
        if let Some(r) = &mut self.round {
            r.first_answer_us.get_or_insert(now);
        }
    }

    fn on_published(&mut self, now: u64, resp: &Response) {
        match resp.status {
            Status::Ok => {
                if let Some((s, _)) = self.unacked.take() {
                    let seq = s.record().seq;
                    self.status.published = Some((now / 1000, seq));
                    self.events.push_back(Event::Published { seq });
                }
            }
            Status::Refused(code) => tracing::warn!(code, "own record refused"),
            _ => {}
        }
    }

    /// Runs due work: resends, the end of a round, renewals.
    pub fn handle_timeout(&mut self, now: u64) {
        self.excluded.retain(|(_, until)| *until > now);
        self.known.retain(|_, s| s.record().expires_ms > now / 1000);
        self.inflight
            .retain(|_, f| now < f.sent_us + 4 * self.cfg.retry_ms * 1000);
        if let Some(r) = &self.round {
            if r.first_answer_us
                .is_some_and(|t| now >= t + self.cfg.collect_ms * 1000)
            {
                self.choose(now);
            } else if now >= r.next_send_us {
                for dst in self.resolvers() {
                    self.send(now, dst, Request::Servers);
                }
                let next = now + self.cfg.retry_ms * 1000;
                self.round.as_mut().expect("checked").next_send_us = next;
            }
        }
        if self.unacked.as_ref().is_some_and(|(_, t)| now >= *t) {
            self.send_publish(now);
        }
        if self.renew_at_us.is_some_and(|t| now >= t) {
            self.publish(now);
        }
    }

    fn choose(&mut self, now: u64) {
        let cands: Vec<Candidate> = self
            .known
            .iter()
            .filter_map(|(name, s)| match &s.record().body {
                Body::Server(b) => Some(Candidate {
                    name: *name,
                    body: b.clone(),
                    rtt_us: self.rtt_us.get(name).copied(),
                }),
                Body::Identity(_) => None,
            })
            .collect();
        let excluded: Vec<SessionId> = self.excluded.iter().map(|(n, _)| *n).collect();
        let Some(c) = pick(&cands, &excluded) else {
            // Nothing usable yet: keep asking.
            if let Some(r) = &mut self.round {
                r.first_answer_us = None;
            }
            return;
        };
        let (name, body) = (c.name, c.body.clone());
        self.round = None;
        self.rtt_us.clear();
        self.use_server(now, name, &body);
    }

    fn use_server(&mut self, now: u64, name: SessionId, body: &ServerBody) {
        let tunnel = body.tunnel[0];
        let changed = self.current.map(|c| c.0) != Some(name);
        self.current = Some((name, tunnel, body.resolver));
        self.status.server = Some((name, tunnel));
        if changed {
            let key = self.known[&name].record().key;
            let tunnels = body.tunnel.clone();
            self.events.push_back(Event::Use {
                name,
                key,
                tunnel,
                tunnels,
            });
            self.publish(now);
        }
    }

    /// The next deadline (Unix µs).
    pub fn poll_timeout(&self) -> Option<u64> {
        let round = self.round.as_ref().map(|r| match r.first_answer_us {
            Some(t) => (t + self.cfg.collect_ms * 1000).min(r.next_send_us),
            None => r.next_send_us,
        });
        [round, self.unacked.as_ref().map(|u| u.1), self.renew_at_us]
            .into_iter()
            .flatten()
            .min()
    }

    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<(SocketAddr, Vec<u8>)> {
        self.out.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Status snapshot.
    pub fn status(&self) -> ResolverStatus {
        ResolverStatus {
            servers_known: self.known.len(),
            ..self.status.clone()
        }
    }
}

#[cfg(test)]
#[path = "resolver_tests.rs"]
mod tests;
