//! What the dashboard reads from the tunnel's status document (client and server alike):
//! each session's links, whether each session is established, and the counters whose
//! increases are events — handshakes (new keys) and refusals. The dashboard itself is
//! `multihome_runtime::dashboard`. The server builds its snapshot without the document
//! ([`push_session`], [`push_counter_marks`]; `crate::status::server_snapshot`): at
//! thousands of sessions, a JSON document a second was most of its idle heap.

use multihome_runtime::dashboard::{EventKind, LinkSample, Mark, Snapshot};
use serde_json::{json, Value};

/// Endpoint counters that count refused input, with the words an event uses.
const REFUSALS: [(&str, &str); 10] = [
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
    ("rx_bad_mac1", "handshakes without a valid mac1 dropped"),
    (
        "rx_handshake_rate_limited",
        "handshakes over the per-source rate dropped",
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
        let peer = s["peer"].as_str().unwrap_or("?");
        let links = s["links"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|l| LinkSample {
                session: peer.to_string(),
                link: l["name"].as_str().unwrap_or("?").to_string(),
                state: l["state"].as_str().unwrap_or("down").to_string(),
                tx_bytes: l["tx_bytes"].as_u64(),
                rx_bytes: l["rx_bytes"].as_u64(),
                rtt_ms: l["srtt_ms"].as_f64(),
                loss: l["loss"].as_f64(),
            });
        let established = s["established"].as_bool().unwrap_or(false);
        push_session(
            &mut snap,
            peer,
            established,
            links,
            s["stated"]["refused"].as_u64(),
        );
    }
    push_counter_marks(&mut snap, &doc["counters"]);
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

/// Adds one session: its links and the count of its refused policy statements (a mark).
/// A role that samples without building its status document (the server) calls this.
pub fn push_session(
    snap: &mut Snapshot,
    peer: &str,
    established: bool,
    links: impl IntoIterator<Item = LinkSample>,
    refused: Option<u64>,
) {
    snap.sessions.push((peer.to_string(), established));
    snap.links.extend(links);
    if let Some(count) = refused {
        snap.marks.push(Mark {
            kind: EventKind::Refusal,
            label: format!("policy statement of {peer} refused"),
            count,
        });
    }
}

/// Adds the marks read from an endpoint's `counters` object (handshakes, refusals).
pub fn push_counter_marks(snap: &mut Snapshot, counters: &Value) {
    snap.marks
        .extend(mark(EventKind::Rekey, "handshake", &counters["handshakes"]));
    for (k, label) in REFUSALS {
        snap.marks
            .extend(mark(EventKind::Refusal, label, &counters[k]));
    }
}

/// Several threads' snapshots as one: sessions and links of all, listed by session
/// (which thread holds a peer follows its key, so the order would change between starts),
/// the counts of marks with the same kind and label summed.
pub fn merge(parts: Vec<Snapshot>) -> Snapshot {
    if parts.len() <= 1 {
        return parts.into_iter().next().unwrap_or_default();
    }
    let mut all = Snapshot::default();
    let mut at: std::collections::HashMap<(EventKind, String), usize> = Default::default();
    for p in parts {
        all.sessions.extend(p.sessions);
        all.links.extend(p.links);
        for m in p.marks {
            match at.entry((m.kind, m.label.clone())) {
                std::collections::hash_map::Entry::Occupied(e) => {
                    all.marks[*e.get()].count += m.count
                }
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(all.marks.len());
                    all.marks.push(m);
                }
            }
        }
    }
    all.sessions.sort_by(|a, b| a.0.cmp(&b.0));
    // Stable: a session's links keep their order.
    all.links.sort_by(|a, b| a.session.cmp(&b.session));
    all
}

/// The snapshot as JSON (the control socket's `sample` request: the resolver counts the
/// sessions in it).
pub fn snapshot_json(snap: &Snapshot) -> Value {
    let mut links = snap.links.iter().peekable();
    let sessions: Vec<Value> = snap
        .sessions
        .iter()
        .map(|(peer, established)| {
            let mut mine = Vec::new();
            while let Some(l) = links.next_if(|l| &l.session == peer) {
                mine.push(
                    json!({"name": l.link, "state": l.state, "tx_bytes": l.tx_bytes,
                    "rx_bytes": l.rx_bytes, "srtt_ms": l.rtt_ms, "loss": l.loss}),
                );
            }
            json!({"peer": peer, "established": established, "links": mine})
        })
        .collect();
    let marks: Vec<Value> = snap
        .marks
        .iter()
        .map(|m| json!({"kind": m.kind.as_str(), "label": m.label, "count": m.count}))
        .collect();
    json!({"sessions": sessions, "marks": marks})
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn thread_snapshot(peers: &[&str], handshakes: u64) -> Snapshot {
        let mut snap = Snapshot::default();
        for p in peers {
            let links = (0..2).map(|l| LinkSample {
                session: p.to_string(),
                link: l.to_string(),
                state: "up".into(),
                tx_bytes: Some(1),
                rx_bytes: Some(2),
                rtt_ms: Some(3.0),
                loss: Some(0.0),
            });
            push_session(&mut snap, p, true, links, Some(0));
        }
        push_counter_marks(&mut snap, &json!({"handshakes": handshakes}));
        snap
    }

    /// Two threads' samples read as one server's: every session once, by name, with its
    /// own links; the handshakes of both counted; the JSON the resolver reads has them all.
    #[test]
    fn threads_samples_merge_into_one_servers() {
        let merged = merge(vec![
            thread_snapshot(&["c", "a"], 3),
            thread_snapshot(&["b"], 4),
        ]);
        let names: Vec<&str> = merged.sessions.iter().map(|s| s.0.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        let links: Vec<String> = merged
            .links
            .iter()
            .map(|l| format!("{}/{}", l.session, l.link))
            .collect();
        assert_eq!(links, ["a/0", "a/1", "b/0", "b/1", "c/0", "c/1"]);
        let handshakes: Vec<u64> = merged
            .marks
            .iter()
            .filter(|m| m.label == "handshake")
            .map(|m| m.count)
            .collect();
        assert_eq!(handshakes, [7]);
        let json = snapshot_json(&merged);
        assert_eq!(json["sessions"].as_array().unwrap().len(), 3);
        assert_eq!(snapshot(&json).links, merged.links);
        assert_eq!(
            merge(vec![thread_snapshot(&["z", "y"], 1)]).sessions[0].0,
            "z"
        );
    }
}
