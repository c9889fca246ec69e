//! The client's side of the relay protocol: asks one relay for detours and reads its
//! authenticated answers. Sans-IO: the driver sends what `poll_transmit` returns to the
//! relay's request address *from the socket whose path is to be detoured* (the relay takes
//! the detour's source from that datagram's UDP header), feeds back datagrams whose first
//! byte is `TYPE_ANSWER`, and calls `handle_timeout` at `poll_timeout`.
//!
//! Each attempt is a fresh Noise IK handshake with a fresh id and timestamp: a lost request
//! or answer is retried `attempts` times `retry` apart, then reported as `TimedOut`. The
//! relay treats a repeated request for the same (source, server, mode) as a renewal, so a
//! retry after a lost answer is harmless, and renewing a detour is sending the same
//! request again before `lifetime_s` runs out.

use super::wire::{
    emit_header, emit_request_payload, parse_answer_payload, parse_header, Answer, DetourError,
    Request, ANSWER_PAYLOAD_LEN, HEADER_LEN, PROLOGUE, REQUEST_LEN, TYPE_ANSWER,
};
use crate::crypto::noise::builder_with_prologue;
use crate::crypto::{PublicKey, StaticSecret};
use crate::Instant;
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use snow::HandshakeState;
use std::collections::VecDeque;
use std::time::Duration;

/// At most this many requests wait for answers at once.
pub const MAX_PENDING: usize = 16;

/// A request's identity for the caller (stable across its retries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

/// Settings of one client–relay association.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Our static key (the one the relay lists).
    pub local_key: StaticSecret,
    /// The relay's static public key.
    pub relay_key: PublicKey,
    /// Wall-clock microseconds at `Instant::ZERO`, for the request timestamps (the relay
    /// refuses a timestamp not above the last one it accepted from this key).
    pub wall_origin_us: u64,
    /// Time between attempts.
    pub retry: Duration,
    /// Attempts before giving up.
    pub attempts: u32,
}

impl ClientConfig {
    /// Defaults: 1 s between 4 attempts.
    pub fn new(local_key: StaticSecret, relay_key: PublicKey, wall_origin_us: u64) -> Self {
        ClientConfig {
            local_key,
            relay_key,
            wall_origin_us,
            retry: Duration::from_secs(1),
            attempts: 4,
        }
    }
}

/// What happened to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientEvent {
    /// The relay answered (any status; `Status::Ok` means the detour exists).
    Answered {
        /// The request.
        id: RequestId,
        /// What was asked.
        request: Request,
        /// The authenticated answer.
        answer: Answer,
    },
    /// No valid answer after every attempt.
    TimedOut {
        /// The request.
        id: RequestId,
        /// What was asked.
        request: Request,
    },
}

struct Pending {
    id: RequestId,
    request: Request,
    wire_id: u32,
    hs: HandshakeState,
    deadline: Instant,
    attempts_left: u32,
}

/// Counters of the client side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientCounters {
    /// Request datagrams produced (attempts).
    pub tx_requests: u64,
    /// Valid answers.
    pub rx_answers: u64,
    /// Answer-typed datagrams that matched no pending request or failed authentication.
    pub rx_invalid: u64,
}

/// The client's side of the relay protocol with one relay.
pub struct DetourClient {
    cfg: ClientConfig,
    rng: ChaCha20Rng,
    next_id: u64,
    last_ts: u64,
    pending: Vec<Pending>,
    out: VecDeque<(RequestId, Vec<u8>)>,
    events: VecDeque<ClientEvent>,
    counters: ClientCounters,
}

impl DetourClient {
    /// A client; `seed` feeds the ephemeral keys and request ids.
    pub fn new(cfg: ClientConfig, seed: [u8; 32]) -> Self {
        DetourClient {
            cfg,
            rng: ChaCha20Rng::from_seed(seed),
            next_id: 0,
            last_ts: 0,
            pending: Vec::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            counters: ClientCounters::default(),
        }
    }

    /// Asks the relay for `request` (create or renew a detour, or release one). The first
    /// datagram is ready in `poll_transmit` at once.
    pub fn request(&mut self, now: Instant, request: Request) -> Result<RequestId, DetourError> {
        if self.pending.len() >= MAX_PENDING {
            return Err(DetourError::TooManyPending);
        }
        let id = RequestId(self.next_id);
        self.next_id += 1;
        let attempt = self.attempt(now, id, request)?;
        self.pending.push(Pending {
            id,
            request,
            wire_id: attempt.0,
            hs: attempt.1,
            deadline: now + self.cfg.retry,
            attempts_left: self.cfg.attempts.saturating_sub(1),
        });
        Ok(id)
    }

    /// Builds one request datagram (queued for `poll_transmit`): its wire id and handshake.
    fn attempt(
        &mut self,
        now: Instant,
        id: RequestId,
        request: Request,
    ) -> Result<(u32, HandshakeState), DetourError> {
        let mut seed = [0u8; 32];
        self.rng.fill_bytes(&mut seed);
        let mut hs = builder_with_prologue(seed, PROLOGUE)
            .local_private_key(self.cfg.local_key.as_bytes())
            .remote_public_key(&self.cfg.relay_key.0)
            .build_initiator()
            .map_err(|_| DetourError::Handshake)?;
        let ts = (self.cfg.wall_origin_us + now.as_micros()).max(self.last_ts + 1);
        self.last_ts = ts;
        let wire_id = self.rng.next_u32();
        let mut msg = vec![0u8; REQUEST_LEN];
        emit_header(&mut msg, super::wire::TYPE_REQUEST, wire_id);
        let payload = emit_request_payload(ts, wire_id, &request);
        let n = hs
            .write_message(&payload, &mut msg[HEADER_LEN..])
            .map_err(|_| DetourError::Handshake)?;
        debug_assert_eq!(HEADER_LEN + n, REQUEST_LEN);
        self.out.push_back((id, msg));
        self.counters.tx_requests += 1;
        Ok((wire_id, hs))
    }

    /// The next request datagram to send to the relay.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.out.pop_front().map(|(_, m)| m)
    }

    /// The next request datagram with the request it belongs to (a caller that sends
    /// different requests from different sockets needs to know which).
    pub fn poll_transmit_for(&mut self) -> Option<(RequestId, Vec<u8>)> {
        self.out.pop_front()
    }

    /// A datagram from the relay. Returns true if it was a valid answer to a pending
    /// request (then an `Answered` event is ready); anything else is dropped and counted.
    pub fn handle_datagram(&mut self, _now: Instant, data: &[u8]) -> bool {
        let ok = self.read_answer(data).is_some();
        if !ok {
            self.counters.rx_invalid += 1;
        }
        ok
    }

    fn read_answer(&mut self, data: &[u8]) -> Option<()> {
        let h = parse_header(data).ok()?;
        if h.kind != TYPE_ANSWER {
            return None;
        }
        let i = self
            .pending
            .iter()
            .position(|p| p.wire_id == h.request_id)?;
        let mut payload = [0u8; 64];
        // A failed read leaves the handshake unusable: only a forged answer can fail, and
        // the request is then retried with a fresh handshake at its deadline.
        let n = self.pending[i]
            .hs
            .read_message(&data[HEADER_LEN..], &mut payload)
            .ok()?;
        if n != ANSWER_PAYLOAD_LEN || !self.pending[i].hs.is_handshake_finished() {
            return None;
        }
        let answer = parse_answer_payload(&payload[..n]).ok()?;
        if answer.request_id != h.request_id || answer.mode != self.pending[i].request.mode {
            return None;
        }
        let p = self.pending.swap_remove(i);
        self.counters.rx_answers += 1;
        self.events.push_back(ClientEvent::Answered {
            id: p.id,
            request: p.request,
            answer,
        });
        Some(())
    }

    /// Retries or gives up the requests whose deadline passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.pending.len() {
            if self.pending[i].deadline > now {
                i += 1;
                continue;
            }
            if self.pending[i].attempts_left == 0 {
                let p = self.pending.swap_remove(i);
                self.events.push_back(ClientEvent::TimedOut {
                    id: p.id,
                    request: p.request,
                });
                continue;
            }
            let (id, request) = (self.pending[i].id, self.pending[i].request);
            match self.attempt(now, id, request) {
                Ok((wire_id, hs)) => {
                    let p = &mut self.pending[i];
                    p.wire_id = wire_id;
                    p.hs = hs;
                    p.deadline = now + self.cfg.retry;
                    p.attempts_left -= 1;
                }
                Err(_) => p_drop(&mut self.pending, i),
            }
            i += 1;
        }
    }

    /// The earliest retry deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.pending.iter().map(|p| p.deadline).min()
    }

    /// The next answer or give-up.
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    /// Requests waiting for an answer.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Counters.
    pub fn counters(&self) -> ClientCounters {
        self.counters
    }
}

/// A handshake that cannot even be built again is not retried: its deadline is pushed to
/// the last attempt so it times out normally.
fn p_drop(pending: &mut [Pending], i: usize) {
    pending[i].attempts_left = 0;
}
