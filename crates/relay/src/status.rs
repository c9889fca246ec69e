//! The relay's status document, as its control socket and its dashboard's `/api/status`
//! answer it (`multihome status --socket …` prints it): detours by mode, the request
//! counters, tunnel forwarding and detours per client; and what the dashboard reads from it
//! ([`snapshot`]). Read-only: it is built from the relay's state on each request.

use super::Relay;
use multihome_proto::detour::{Entry, Mode, RelayCounters};
use multihome_runtime::dashboard::{EventKind, LinkSample, Mark, Snapshot};
use serde::Serialize;
use std::net::SocketAddr;

/// The status document of the control socket.
#[derive(Debug, Serialize)]
pub(super) struct Status<'a> {
    role: &'static str,
    name: &'a str,
    listen: SocketAddr,
    detours: usize,
    nat_detours: usize,
    nat_tcp_detours: usize,
    tunnel_detours: usize,
    counters: CountersDoc,
    tunnel_forwarded_datagrams: u64,
    tunnel_forwarded_bytes: u64,
    tunnel_dropped: u64,
    clients: Vec<ClientDoc<'a>>,
}

#[derive(Debug, Serialize)]
struct ClientDoc<'a> {
    name: &'a str,
    detours: usize,
    /// Each detour installed for the client now: its paths through this relay.
    entries: Vec<EntryDoc>,
}

/// One installed detour as the dashboard lists it under its client.
#[derive(Debug, Serialize)]
struct EntryDoc {
    mode: &'static str,
    /// The relay port the client sends to.
    port: u16,
    /// The client's source as the relay sees it (the only one forwarded).
    source: SocketAddr,
    /// Where its datagrams go.
    server: SocketAddr,
    /// Seconds until it expires unless renewed.
    expires_in_s: f64,
}

#[derive(Debug, Serialize)]
struct CountersDoc {
    rx_datagrams: u64,
    rx_malformed: u64,
    rx_rate_limited: u64,
    rx_unauthenticated: u64,
    rx_unknown_client: u64,
    rx_replayed: u64,
    answers: u64,
    installed: u64,
    renewed: u64,
    released: u64,
    expired: u64,
    refused_mode: u64,
    refused_client_limit: u64,
    refused_full: u64,
    refused_destination: u64,
    failed: u64,
}

impl From<RelayCounters> for CountersDoc {
    fn from(c: RelayCounters) -> Self {
        CountersDoc {
            rx_datagrams: c.rx_datagrams,
            rx_malformed: c.rx_malformed,
            rx_rate_limited: c.rx_rate_limited,
            rx_unauthenticated: c.rx_unauthenticated,
            rx_unknown_client: c.rx_unknown_client,
            rx_replayed: c.rx_replayed,
            answers: c.answers,
            installed: c.installed,
            renewed: c.renewed,
            released: c.released,
            expired: c.expired,
            refused_mode: c.refused_mode,
            refused_client_limit: c.refused_client_limit,
            refused_full: c.refused_full,
            refused_destination: c.refused_destination,
            failed: c.failed,
        }
    }
}

impl Relay {
    /// The status document.
    pub(super) fn status(&self) -> serde_json::Value {
        let now = self.clock.now();
        let entries: Vec<&Entry> = self.core.entries().collect();
        let nat_n = entries.iter().filter(|e| e.mode != Mode::Tunnel).count();
        let tcp_n = entries.iter().filter(|e| e.mode == Mode::NatTcp).count();
        let doc = Status {
            role: "relay",
            name: &self.s.name,
            listen: self.s.listen,
            detours: entries.len(),
            nat_detours: nat_n,
            nat_tcp_detours: tcp_n,
            tunnel_detours: entries.len() - nat_n,
            counters: self.core.counters().into(),
            tunnel_forwarded_datagrams: self.stats.datagrams.get(),
            tunnel_forwarded_bytes: self.stats.bytes.get(),
            tunnel_dropped: self.stats.dropped.get(),
            clients: self
                .s
                .clients
                .iter()
                .enumerate()
                .map(|(i, c)| ClientDoc {
                    name: &c.name,
                    detours: self.core.client_entries(i),
                    entries: entries
                        .iter()
                        .filter(|e| e.client == i)
                        .map(|e| EntryDoc {
                            mode: e.mode.name(),
                            port: e.port,
                            source: e.source,
                            server: e.server,
                            expires_in_s: e.expires.saturating_since(now).as_secs_f64(),
                        })
                        .collect(),
                })
                .collect(),
        };
        serde_json::to_value(&doc).unwrap_or_default()
    }
}

/// Counters whose increases are events: (field, kind, words).
const MARKS: [(&str, EventKind, &str); 10] = [
    ("installed", EventKind::Session, "detours installed"),
    ("expired", EventKind::Session, "detours expired"),
    (
        "refused_mode",
        EventKind::Refusal,
        "requests refused: mode not offered",
    ),
    (
        "refused_client_limit",
        EventKind::Refusal,
        "requests refused: client at its limit",
    ),
    (
        "refused_full",
        EventKind::Refusal,
        "requests refused: table full",
    ),
    (
        "refused_destination",
        EventKind::Refusal,
        "requests refused: destination not allowed",
    ),
    (
        "rx_unknown_client",
        EventKind::Refusal,
        "requests from unknown clients",
    ),
    (
        "rx_unauthenticated",
        EventKind::Refusal,
        "unauthenticated requests",
    ),
    ("rx_replayed", EventKind::Refusal, "replayed requests"),
    (
        "rx_rate_limited",
        EventKind::Refusal,
        "requests over the rate limit",
    ),
];

/// What the dashboard reads from the relay's document: the userspace tunnel forwarding as
/// one link (its bytes, both directions together, as sent) and the counters above.
pub fn snapshot(doc: &serde_json::Value) -> Snapshot {
    let mut snap = Snapshot::default();
    snap.links.push(LinkSample {
        session: doc["name"].as_str().unwrap_or("relay").to_string(),
        link: "tunnel detours".into(),
        state: "up".into(),
        tx_bytes: doc["tunnel_forwarded_bytes"].as_u64(),
        rx_bytes: None,
        rtt_ms: None,
        loss: None,
    });
    for (k, kind, label) in MARKS {
        if let Some(n) = doc["counters"][k].as_u64() {
            snap.marks.push(Mark {
                kind,
                label: label.into(),
                count: n,
            });
        }
    }
    snap
}
