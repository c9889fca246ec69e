//! How often a session probes its paths when nothing else proves them: fast while it
//! carries user data, slow while it is idle.
//!
//! Liveness needs feedback (`path/liveness.rs`): a path is `Suspect`, then `Down`, when its
//! oldest unacknowledged eliciting datagram waited too long. Data elicits ACKs, so a path
//! carrying data needs no probe; a path carrying none gets a PING when nothing eliciting
//! was sent on it for a while. How long that while is depends on the session:
//!
//! - **Active** — user data (or FEC parity) sent or received within
//!   `SessionConfig::keepalive` (a new session's first datagram counts: it is busy
//!   finding its paths, and RTT samples from its first seconds serve the first flows;
//!   without them a bulk flow starting 0.5 s into a session over jittery links lost a
//!   sixth of its goodput in the simulator's reordering test), or a policy statement or relay list of ours still
//!   unacknowledged (they ride in the datagrams that go anyway, `stated.rs`, `relays.rs`,
//!   and a path that failed under them is probed back soon), or packets held while no path
//!   is live (`store.rs`: they leave as soon as a probe finds a path back):
//!   `probe_interval` = detect / 4
//!   on both sides, as always. Every path a failover could move to stays proven within a
//!   quarter of the detection time, and a path that dies under data is Suspect after
//!   `suspect_after` and Down after `detect`, unchanged.
//! - **Idle** — the client probes each path every `keepalive` (default 5 s: NAT bindings
//!   for UDP last 30 s and more for most middleboxes, RFC 9000 §10.1.2, and a dead path is
//!   noticed within `keepalive + detect`). The server answers such a PING with a PING of
//!   its own (the ACK rides in it) when its own probe of the path is at least half due, and
//!   probes on its own only after 2.5 × `keepalive` without one (the client's probes stopped
//!   coming). Per path and keepalive interval that is 3 datagrams (PING, ACK + PING, ACK)
//!   instead of 4 × 4 per second. As in WireGuard, where the NATed side sends the
//!   persistent keepalive and the other side stays silent; unlike it, each path is still
//!   proven both ways, since the server picks downlink paths by their liveness.
//! - **Waking** — the first user data after idleness makes the session active, and every
//!   path whose last probe is older than `probe_interval` is due at once (`Path::
//!   probe_deadline`): within one round trip each path is proven again, or on its way to
//!   `Suspect`. The data itself elicits an ACK, so on a path that died while the session
//!   was idle it turns the path `Suspect` after `suspect_after` (≤ detect) and is
//!   reinjected on the others (`reinject.rs`): what a path dying under data costs anyway.
//! - **Fresh keys** — until something is sealed under the current keypair, every path's
//!   probe is due: the server starts sealing under a rekeyed pair only once a datagram
//!   under it arrives, and waiting an idle keepalive for one would leave the old pair in
//!   use for seconds.
//!
//! Invariant: nothing here reads a clock; `poll_timeout` reports exactly the deadlines that
//! `handle_timeout` acts on.

use super::{find_slot, PathSlot, Session, Side};
use crate::path::{Keepalive, PathId};
use crate::Instant;
use core::time::Duration;

use super::transmit::Job;

/// The server's own idle probe waits this many keepalive intervals (in halves): the
/// client's probes, answered, normally prove the path first.
const SERVER_IDLE_HALVES: u32 = 5;

impl Session {
    /// Traffic the session does not carry depends on its paths' liveness (stream mode's
    /// MPTCP subflows, steered by it): probe the paths as for user data, until
    /// `keepalive` after the last such call.
    pub fn keep_active(&mut self, now: Instant) {
        self.note_data(now);
    }

    /// User data (or parity) was sent or received: the session is active.
    pub(super) fn note_data(&mut self, now: Instant) {
        self.last_data = Some(self.last_data.map_or(now, |t| t.max(now)));
    }

    /// The probe schedule of this session's paths.
    pub(super) fn keepalive(&self) -> Keepalive {
        let interval = match self.side {
            Side::Client => self.cfg.keepalive,
            Side::Server => self.cfg.keepalive * SERVER_IDLE_HALVES / 2,
        };
        let idle_at = if self.stated.pending() || self.relays.pending() || !self.store.is_empty() {
            None
        } else {
            Some(
                self.last_data
                    .map_or(Instant::ZERO, |t| t + self.cfg.keepalive),
            )
        };
        Keepalive {
            idle_at,
            idle_interval: interval,
        }
    }

    /// Whether the session is idle at `now`.
    pub(super) fn idle(&self, now: Instant) -> bool {
        self.keepalive().idle_at.is_some_and(|i| i <= now)
    }

    /// When a keepalive PING is due on the path in `slot`, if one can be sent.
    pub(super) fn probe_due(&self, slot: &PathSlot, k: Keepalive) -> Option<Instant> {
        let kp = self.keys.current.as_ref()?;
        if slot.ping_queued {
            return None;
        }
        let due = slot.path.probe_deadline(k)?;
        // Nothing sealed under these keys yet: prove them now (see the module doc).
        Some(if kp.seal.counter() == 0 {
            Instant::ZERO
        } else {
            due
        })
    }

    /// Server, idle: a PING arrived on `id`; answer it with a PING of ours (the ACK due
    /// rides in it) if our own probe of the path is at least half due, so one exchange
    /// proves the path both ways.
    pub(super) fn answer_probe(&mut self, now: Instant, id: PathId) {
        if self.side != Side::Server || self.keys.current.is_none() || !self.idle(now) {
            return;
        }
        let half = self.cfg.keepalive / 2;
        let Some(s) = find_slot(&mut self.paths, id) else {
            return;
        };
        let recent = s
            .path
            .last_sent()
            .is_some_and(|t| now.saturating_since(t) < half);
        if s.ping_queued || !s.path.available() || recent {
            return;
        }
        s.ping_queued = true;
        self.jobs.push_back(Job::Ping { path: id });
    }
}

/// Default of `SessionConfig::keepalive`.
pub const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::SessionId;
    use crate::session::SessionConfig;

    fn session(side: Side) -> Session {
        Session::new(SessionId([0; 16]), SessionConfig::default(), side)
    }

    fn at(ms: u64) -> Instant {
        Instant::from_micros(ms * 1000)
    }

    #[test]
    fn data_keeps_a_session_active_for_one_keepalive() {
        let mut s = session(Side::Client);
        // Never carried data: idle from the start.
        assert!(s.idle(at(0)));
        s.note_data(at(1_000));
        assert!(!s.idle(at(5_999)));
        assert!(s.idle(at(6_000)));
        // An older timestamp does not move it back.
        s.note_data(at(500));
        assert_eq!(s.keepalive().idle_at, Some(at(6_000)));
        assert_eq!(s.keepalive().idle_interval, DEFAULT_KEEPALIVE);
    }

    #[test]
    fn the_server_probes_on_its_own_only_after_two_and_a_half_keepalives() {
        let s = session(Side::Server);
        assert_eq!(s.keepalive().idle_interval, DEFAULT_KEEPALIVE * 5 / 2);
    }

    #[test]
    fn an_unacknowledged_statement_keeps_the_session_active() {
        let mut s = session(Side::Client);
        assert!(s.state_policy(&crate::policy::Classifier::uniform(
            crate::policy::Policy::Aggregate
        )));
        assert_eq!(s.keepalive().idle_at, None);
        assert!(!s.idle(at(100_000)));
    }
}
