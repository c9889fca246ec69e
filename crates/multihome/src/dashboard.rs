//! What the dashboard reads from the tunnel's status document (client and server alike):
//! each session's links, whether each session is established, and the counters whose
//! increases are events — handshakes (new keys) and refusals. The dashboard itself is
//! `multihome_runtime::dashboard`.

use multihome_runtime::dashboard::{EventKind, LinkSample, Mark, Snapshot};
use serde_json::Value;

/// Endpoint counters that count refused input, with the words an event uses.
const REFUSALS: [(&str, &str); 8] = [
    ("rx_unknown_peer", "handshake from an unknown key refused"),
    ("rx_handshake_failed", "handshake failed"),
    ("rx_handshake_replayed", "replayed handshake refused"),
    (
        "rx_no_common_cipher",
        "handshake without a common cipher refused",
    ),
    ("rx_unauthenticated", "unauthenticated datagrams dropped"),
    ("rx_replayed", "replayed datagrams dropped"),
    (
        "rx_spoofed",
        "datagrams from a spoofed inner address dropped",
    ),
    (
        "rx_unknown_index",
        "datagrams for an unknown session dropped",
    ),
];

fn mark(kind: EventKind, label: impl Into<String>, v: &Value) -> Option<Mark> {
    Some(Mark {
        kind,
        label: label.into(),
        count: v.as_u64()?,
    })
}

/// The snapshot of a client's or server's status document.
pub fn snapshot(doc: &Value) -> Snapshot {
    let mut snap = Snapshot::default();
    for s in doc["sessions"].as_array().into_iter().flatten() {
        let peer = s["peer"].as_str().unwrap_or("?").to_string();
        snap.sessions
            .push((peer.clone(), s["established"].as_bool().unwrap_or(false)));
        for l in s["links"].as_array().into_iter().flatten() {
            snap.links.push(LinkSample {
                session: peer.clone(),
                link: l["name"].as_str().unwrap_or("?").to_string(),
                state: l["state"].as_str().unwrap_or("down").to_string(),
                tx_bytes: l["tx_bytes"].as_u64(),
                rx_bytes: l["rx_bytes"].as_u64(),
                rtt_ms: l["srtt_ms"].as_f64(),
                loss: l["loss"].as_f64(),
            });
        }
        let refused = format!("policy statement of {peer} refused");
        snap.marks
            .extend(mark(EventKind::Refusal, refused, &s["stated"]["refused"]));
    }
    let c = &doc["counters"];
    snap.marks
        .extend(mark(EventKind::Rekey, "handshake", &c["handshakes"]));
    for (k, label) in REFUSALS {
        snap.marks.extend(mark(EventKind::Refusal, label, &c[k]));
    }
    let n = &doc["naming"];
    snap.marks.extend(mark(
        EventKind::Failover,
        "server failover (naming)",
        &n["failovers"],
    ));
    snap.marks.extend(mark(
        EventKind::Refusal,
        "naming answers refused",
        &n["refused"],
    ));
    snap
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_links_sessions_and_marks() {
        let doc = json!({"role": "client", "counters": {"handshakes": 2, "rx_unknown_peer": 0},
            "sessions": [{"peer": "server", "established": true, "stated": {"refused": 1},
                "links": [{"name": "dsl", "state": "up", "srtt_ms": 21.5, "loss": 0.01,
                           "tx_bytes": 10, "rx_bytes": 20}]}]});
        let s = snapshot(&doc);
        assert_eq!(s.sessions, [("server".to_string(), true)]);
        assert_eq!(
            s.links,
            [LinkSample {
                session: "server".into(),
                link: "dsl".into(),
                state: "up".into(),
                tx_bytes: Some(10),
                rx_bytes: Some(20),
                rtt_ms: Some(21.5),
                loss: Some(0.01),
            }]
        );
        let marks: Vec<(&str, u64)> = s
            .marks
            .iter()
            .map(|m| (m.label.as_str(), m.count))
            .collect();
        assert_eq!(
            marks,
            [
                ("policy statement of server refused", 1),
                ("handshake", 2),
                ("handshake from an unknown key refused", 0)
            ]
        );
    }
}
