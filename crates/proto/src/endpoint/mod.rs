//! Endpoints: the client (handshake initiator, one session over its links) and the server
//! (responder, many sessions on one socket, routing by inner address).
//!
//! They own what is role-specific — handshakes, rekeying, finding the session of a
//! datagram, inner-address routing and anti-spoofing — and delegate the data plane to
//! `Session`. Invariant: a datagram that fails parsing or authentication only increments
//! a counter; it never creates, changes or removes a session.

mod client;
mod datagram;
mod server;

pub use client::{Client, ClientConfig, LinkInfo};
pub use datagram::Datagram;
pub use server::{
    Handoff, PeerConfig, PeerStatus, Server, ServerConfig, Shard, LOAD_THRESHOLD,
    MAX_COOKIE_REPLIES, MAX_HANDOFFS, MAX_RESPONSES, MAX_SHARDS, MAX_SOURCES, RATE_BURST,
    RATE_PER_SEC,
};

use core::time::Duration;

/// Start a new handshake when the current keys are this old (WireGuard's REKEY_AFTER_TIME).
pub const REKEY_AFTER: Duration = Duration::from_secs(120);
/// Retry an unanswered handshake after this long at first (`handshake_retry`).
pub const HANDSHAKE_RETRY: Duration = Duration::from_secs(1);
/// Longest wait before retrying an unanswered handshake.
pub const HANDSHAKE_RETRY_MAX: Duration = Duration::from_secs(4);

/// The wait before retrying a handshake after `unanswered` attempts in a row found the
/// server loaded (a cookie reply came, or the attempt carried a cookie) but drew no
/// response (0: the first initiation, or one that drew nothing and carried no cookie),
/// before its jitter of up to a quarter more: 1, 2, then 4 s. A server that cannot answer
/// every client at once (thousands re-joining after its restart) must not be asked again
/// every second by all of them: its queues would fill with initiations whose initiators
/// have moved on to a newer one, and it would answer none in time. The jitter keeps
/// clients that started together from retrying together.
pub fn handshake_retry(unanswered: u32) -> Duration {
    (HANDSHAKE_RETRY * 2u32.saturating_pow(unanswered.min(8))).min(HANDSHAKE_RETRY_MAX)
}

/// Counters of datagrams refused before reaching a session, and of handshakes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointCounters {
    /// Datagrams whose outer header did not parse (garbage, truncated, unknown type).
    pub rx_garbage: u64,
    /// Data datagrams naming no known receiver index.
    pub rx_unknown_index: u64,
    /// Handshakes from keys not in the peer list (server) — they get no answer.
    pub rx_unknown_peer: u64,
    /// Handshake messages that failed cryptographically.
    pub rx_handshake_failed: u64,
    /// Handshakes refused because the two sides share no data cipher.
    pub rx_no_common_cipher: u64,
    /// Handshake initiations replayed (timestamp not newer than the last one).
    pub rx_handshake_replayed: u64,
    /// Handshakes completed.
    pub handshakes: u64,
    /// Handshake messages whose mac1 was wrong (server: initiations from senders that do
    /// not know its public key; client: responses), dropped before any Diffie-Hellman.
    pub rx_bad_mac1: u64,
    /// Cookie replies sent (server, under load, to initiations without a valid mac2).
    pub tx_cookie_replies: u64,
    /// Cookie replies accepted (client); each is followed by the initiation with mac2.
    pub rx_cookie_replies: u64,
    /// Initiations with a valid cookie refused by the per-source-IP rate limit (server).
    pub rx_handshake_rate_limited: u64,
    /// Data datagrams under the new keys that arrived before the handshake response the
    /// server sent just ahead of them (reordered), held and accepted once it came (client).
    pub rx_before_response: u64,
    /// IP packets from the local side with no session to go to (server: no peer route).
    pub tx_no_route: u64,
    /// Decrypted IP packets whose source is outside the peer's allowed addresses.
    pub rx_spoofed: u64,
    /// Datagrams and device packets passed to the server thread that owns their session
    /// (server with several threads).
    pub handed_off: u64,
    /// Datagrams and device packets for another thread dropped instead (the queue to it
    /// was full); not counted in `handed_off`.
    pub handoff_drops: u64,
}

#[cfg(test)]
mod tests;
