//! The manager's conversation with the relays: requests (create, renew, release) sent from
//! a detour's socket, their answers and give-ups, the periodic relay checks, and what a dead
//! relay means for its subflows. Decisions about connections are in `mptcp.rs`.

use super::{Ask, Detour, DetourId, MptcpAction, MptcpManager, State};
use crate::detour::client::ClientEvent;
use crate::detour::wire::{Answer, Mode, Request, Status};
use crate::Instant;
use std::net::SocketAddr;
use std::time::Duration;

/// Request round trips at or above the client's retry interval may include a retry.
const RTT_SAMPLE_MAX: Duration = Duration::from_secs(1);

impl MptcpManager {
    /// Sends a request of kind `ask` for detour `id` from its socket; false if the relay's
    /// client has too many requests waiting.
    pub(super) fn ask(&mut self, now: Instant, id: DetourId, ask: Ask) -> bool {
        let d = &self.detours[&id];
        let ri = d.relay;
        let rq = Request {
            server: d.server,
            mode: Mode::NatTcp,
            release: ask == Ask::Release,
        };
        let Ok(req) = self.relays[ri].client.request(now, rq) else {
            return false;
        };
        self.asks.insert((ri, req), (id, ask));
        self.flush(ri);
        true
    }

    pub(super) fn flush(&mut self, ri: usize) {
        while let Some((req, data)) = self.relays[ri].client.poll_transmit_for() {
            if let Some(&(id, _)) = self.asks.get(&(ri, req)) {
                let dst = self.relays[ri].spec.address;
                self.actions.push_back(MptcpAction::Send { id, dst, data });
            }
        }
    }

    /// Handles relay `ri`'s answers and give-ups.
    pub(super) fn process(&mut self, now: Instant, ri: usize) {
        while let Some(ev) = self.relays[ri].client.poll_event() {
            let (req, answer) = match ev {
                ClientEvent::Answered { id, answer, .. } => (id, Some(answer)),
                ClientEvent::TimedOut { id, .. } => (id, None),
            };
            let Some((id, ask)) = self.asks.remove(&(ri, req)) else {
                continue;
            };
            if !self.detours.contains_key(&id) {
                continue;
            }
            match (ask, answer) {
                (Ask::Release, _) => self.close(id),
                (_, None) => self.relay_dead(now, ri),
                (Ask::Create, Some(a)) => self.created(now, id, a),
                (Ask::Renew, Some(a)) => self.renewed(now, id, a),
            }
        }
    }

    fn created(&mut self, now: Instant, id: DetourId, a: Answer) {
        let d = &self.detours[&id];
        let State::Asking { sent } = d.state else {
            return; // ended meanwhile; its release removes the entry
        };
        let (ri, token, local_id) = (d.relay, d.token, d.local_id);
        let local = d.local.expect("asking detours are bound");
        if a.status != Status::Ok {
            self.counters.refused += 1;
            self.fail(now, id, false, false);
            return;
        }
        if a.observed != local {
            self.counters.nat_in_path += 1;
            self.fail(now, id, false, true);
            return;
        }
        let rtt = now.saturating_since(sent);
        let r = &mut self.relays[ri];
        if rtt < RTT_SAMPLE_MAX {
            r.rtt = Some(rtt);
        }
        r.next_check.get_or_insert(now + self.cfg.check_interval);
        let remote = SocketAddr::new(r.spec.address.ip(), a.relay_port);
        let d = self.detours.get_mut(&id).expect("checked");
        d.state = State::Joining {
            port: a.relay_port,
            since: now,
        };
        d.renew_at = now + Duration::from_secs(u64::from(a.lifetime_s)) / 2;
        self.counters.subflows_created += 1;
        self.actions.push_back(MptcpAction::CreateSubflow {
            id,
            token,
            local_id,
            local,
            remote,
        });
    }

    fn renewed(&mut self, now: Instant, id: DetourId, a: Answer) {
        let d = self.detours.get_mut(&id).expect("checked");
        d.renewing = false;
        let Some(port) = d.state.port() else {
            return;
        };
        if a.status == Status::Ok && a.relay_port == port {
            d.renew_at = now + Duration::from_secs(u64::from(a.lifetime_s)) / 2;
            return;
        }
        // Refused, or a new entry on another port: the relay lost ours, so the subflow
        // forwards nothing any more.
        self.counters.refused += 1;
        self.fail(now, id, true, a.status == Status::Ok);
    }

    pub(super) fn renew(&mut self, now: Instant, id: DetourId) {
        if self.ask(now, id, Ask::Renew) {
            self.detours.get_mut(&id).expect("exists").renewing = true;
        }
    }

    /// Renews one detour of each relay whose check is due (its oldest renewal first).
    pub(super) fn check_relays(&mut self, now: Instant) {
        for ri in 0..self.relays.len() {
            if self.relays[ri].next_check.is_none_or(|t| t > now) {
                continue;
            }
            let mine: Vec<(&DetourId, &Detour)> = self
                .detours
                .iter()
                .filter(|(_, d)| d.relay == ri && d.state.port().is_some())
                .collect();
            if mine.is_empty() {
                self.relays[ri].next_check = None;
                continue;
            }
            let pending = mine.iter().any(|(_, d)| d.renewing);
            let oldest = mine
                .iter()
                .min_by_key(|(_, d)| d.renew_at)
                .map(|(id, _)| **id);
            self.relays[ri].next_check = Some(now + self.cfg.check_interval);
            if let (false, Some(id)) = (pending, oldest) {
                self.renew(now, id);
            }
        }
    }

    /// Relay `ri` left a request unanswered: its subflows go, it rests, others step in.
    fn relay_dead(&mut self, now: Instant, ri: usize) {
        self.counters.relays_dead += 1;
        let r = &mut self.relays[ri];
        r.rest_until = Some(now + self.cfg.backoff);
        r.next_check = None;
        for id in self.ids(|d| d.relay == ri) {
            // A dead relay answers no release.
            self.end(now, id, true, false);
        }
        self.fill(now);
    }
}
