//! Prometheus metrics of the tunnel (client and server): the text exposition format, built
//! from the same status document as `multihome status`, served on `metrics_listen` (any
//! path) and on the dashboard's `/metrics` by the daemons' one HTTP server
//! (`multihome_runtime::http`), written with the format's helpers of
//! `multihome_runtime::prometheus`. The names, types and labels are listed in docs/API.md.
//! The name service's part ([`naming`]): the server's resolver, records refused per reason;
//! the client's failovers and last publication.
//!
//! Invariants: every family is one contiguous group led by its `# HELP` and `# TYPE`
//! lines; counters end in `_total` and only grow while the daemon runs; label values are
//! escaped as the format requires.

use multihome_runtime::prometheus::{esc, family};
use serde_json::{json, Value};

/// Per-link gauges: (document field, metric suffix, help).
const LINK_GAUGES: [(&str, &str, &str); 5] = [
    (
        "srtt_ms",
        "srtt_ms",
        "Smoothed round-trip time of the link, milliseconds.",
    ),
    (
        "min_rtt_ms",
        "min_rtt_ms",
        "Lowest round-trip time seen on the link, milliseconds.",
    ),
    ("loss", "loss", "Loss rate of the link (0..1)."),
    (
        "delivery_rate_bps",
        "delivery_rate_bps",
        "Delivery rate of the link, bit/s.",
    ),
    (
        "share",
        "share",
        "Share of the session's sent bytes that went over the link (0..1).",
    ),
];

/// Per-link counters: (document field, help).
const LINK_COUNTERS: [(&str, &str); 4] = [
    ("tx_bytes", "Datagram bytes (UDP payload) sent on the link."),
    (
        "rx_bytes",
        "Datagram bytes (UDP payload) received and authenticated on the link.",
    ),
    ("tx_packets", "Datagrams sent on the link."),
    (
        "rx_packets",
        "Datagrams received and authenticated on the link.",
    ),
];

/// Renders the status document as Prometheus metrics.
pub fn render(status: &Value) -> String {
    let mut out = String::new();
    let role = esc(status["role"].as_str().unwrap_or("unknown"));
    for (k, v) in status["counters"].as_object().into_iter().flatten() {
        let value = v.as_u64().unwrap_or(0).to_string();
        let name = format!("multihome_{k}_total");
        let help = format!("Endpoint counter `{k}` (docs/API.md).");
        family(
            &mut out,
            &name,
            "counter",
            &help,
            &[(format!("role=\"{role}\""), value)],
        );
    }
    let sessions: Vec<(String, &Value)> = status["sessions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                format!(
                    "role=\"{role}\",peer=\"{}\"",
                    esc(s["peer"].as_str().unwrap_or(""))
                ),
                s,
            )
        })
        .collect();
    let links: Vec<(String, &Value)> = sessions
        .iter()
        .flat_map(|(sl, s)| {
            s["links"].as_array().into_iter().flatten().map(move |l| {
                (
                    format!("{sl},link=\"{}\"", esc(l["name"].as_str().unwrap_or(""))),
                    l,
                )
            })
        })
        .collect();
    let per = |rows: &[(String, &Value)], f: &dyn Fn(&Value) -> String| -> Vec<(String, String)> {
        rows.iter().map(|(l, v)| (l.clone(), f(v))).collect()
    };
    family(
        &mut out,
        "multihome_session_established",
        "gauge",
        "1 while the session is established.",
        &per(&sessions, &|s| {
            u8::from(s["established"] == true).to_string()
        }),
    );
    for g in ["packets", "bytes"] {
        family(
            &mut out,
            &format!("multihome_held_{g}"),
            "gauge",
            &format!("IP {g} held while no path is live (store-and-forward)."),
            &per(&sessions, &|s| {
                s["hold"][g].as_u64().unwrap_or(0).to_string()
            }),
        );
    }
    family(
        &mut out,
        "multihome_held_age_seconds",
        "gauge",
        "How long the oldest held packet has waited, seconds (0: nothing held).",
        &per(&sessions, &|s| {
            let since = s["hold"]["since_us"].as_u64().unwrap_or(0);
            let age = match status["now_us"].as_u64() {
                Some(now) if since > 0 => now.saturating_sub(since) as f64 / 1e6,
                _ => 0.0,
            };
            age.to_string()
        }),
    );
    family(
        &mut out,
        "multihome_link_up",
        "gauge",
        "1 while the link is up (not suspect or down).",
        &per(&links, &|l| u8::from(l["state"] == "up").to_string()),
    );
    for (field, suffix, help) in LINK_GAUGES {
        family(
            &mut out,
            &format!("multihome_link_{suffix}"),
            "gauge",
            help,
            &per(&links, &|l| l[field].as_f64().unwrap_or(0.0).to_string()),
        );
    }
    for (field, help) in LINK_COUNTERS {
        family(
            &mut out,
            &format!("multihome_link_{field}_total"),
            "counter",
            help,
            &per(&links, &|l| l[field].as_u64().unwrap_or(0).to_string()),
        );
    }
    naming(&mut out, &role, &status["naming"]);
    stream(&mut out, &role, &status["stream"]);
    out
}

/// Stream mode's counters (docs/STREAM.md): `multihome_stream_<name>_total`, and the
/// connections relayed now as a gauge.
fn stream(out: &mut String, role: &str, s: &Value) {
    if !s.is_object() {
        return;
    }
    let sample = |k: &str| {
        vec![(
            format!("role=\"{role}\""),
            s[k].as_u64().unwrap_or(0).to_string(),
        )]
    };
    family(
        out,
        "multihome_stream_active",
        "gauge",
        "Stream-mode connections being relayed.",
        &sample("active"),
    );
    for (k, help) in [
        (
            "connected",
            "Stream-mode connections whose destination answered.",
        ),
        ("closed", "Stream-mode connections that ended cleanly."),
        ("reset", "Stream-mode connections that ended with a reset."),
        (
            "refused",
            "Destinations that refused, were unreachable or did not answer.",
        ),
        (
            "failed",
            "Stream-mode connections that failed before an answer.",
        ),
        (
            "over_limit",
            "Stream-mode connections refused at max_connections.",
        ),
        (
            "bytes_up",
            "Stream-mode bytes from the LAN towards destinations.",
        ),
        (
            "bytes_down",
            "Stream-mode bytes from destinations to the LAN.",
        ),
        (
            "subflows",
            "MPTCP subflows the client added beyond the first.",
        ),
        (
            "subflows_closed",
            "MPTCP subflows the client closed, their link no longer Up in the tunnel.",
        ),
        (
            "subflows_reopened",
            "MPTCP subflows the client opened on a link back Up.",
        ),
        (
            "addrs_removed",
            "REMOVE_ADDRs sent for a closed subflow's address, so the server closes its end.",
        ),
    ] {
        family(
            out,
            &format!("multihome_stream_{k}_total"),
            "counter",
            help,
            &sample(k),
        );
    }
}

/// The `naming` part: on a server the resolver's requests, refusals by reason (of
/// publishes, and of records found in a shared store), its etcd copy; on a client its
/// failovers and when its record was last published.
fn naming(out: &mut String, role: &str, n: &Value) {
    if !n.is_object() {
        return;
    }
    let one = |out: &mut String, name: &str, kind: &str, help: &str, v: &Value| {
        let sample = (
            format!("role=\"{role}\""),
            v.as_u64().unwrap_or(0).to_string(),
        );
        family(
            out,
            &format!("multihome_naming_{name}"),
            kind,
            help,
            &[sample],
        );
    };
    if role != "server" {
        one(
            out,
            "failovers_total",
            "counter",
            "Times the client moved to another server.",
            &n["failovers"],
        );
        one(
            out,
            "refused_total",
            "counter",
            "Server records the client refused.",
            &n["refused"],
        );
        one(
            out,
            "published_unix_ms",
            "gauge",
            "When the client's record was last published (Unix ms).",
            &n["published_unix_ms"],
        );
        return;
    }
    for op in [
        "lookups",
        "publishes",
        "server_lists",
        "not_found",
        "unavailable",
        "dropped_busy",
    ] {
        one(
            out,
            &format!("{op}_total"),
            "counter",
            &format!("Resolver requests: {op}."),
            &n[op],
        );
    }
    for (field, help) in [
        ("refused", "Records refused by the resolver, by reason."),
        (
            "refused_in_store",
            "Records found in the shared store and refused, by reason.",
        ),
    ] {
        let samples: Vec<(String, String)> = crate::status::REFUSAL_REASONS
            .iter()
            .map(|r| {
                let v = n[field][*r].as_u64().unwrap_or(0);
                (format!("role=\"{role}\",reason=\"{r}\""), v.to_string())
            })
            .collect();
        family(
            out,
            &format!("multihome_naming_{field}_total"),
            "counter",
            help,
            &samples,
        );
    }
    let c = &n["cache"];
    if c.is_object() {
        one(
            out,
            "cache_records",
            "gauge",
            "Records in the resolver's watched copy.",
            &c["records"],
        );
        let up = json!(u8::from(c["watch_up"] == true));
        one(
            out,
            "watch_up",
            "gauge",
            "1 while the etcd watch runs.",
            &up,
        );
        one(
            out,
            "relists_total",
            "counter",
            "Full re-reads of the store (compaction).",
            &c["relists"],
        );
        one(
            out,
            "watch_resumes_total",
            "counter",
            "Watches resumed after a loss.",
            &c["resumes"],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_grouped_and_typed() {
        let doc = json!({"role": "server", "counters": {"handshakes": 3},
            "sessions": [{"peer": "ho\"me", "established": true, "hold": {"packets": 0, "bytes": 0},
                "links": [
                    {"name": "0", "state": "up", "srtt_ms": 12.5, "tx_bytes": 1000},
                    {"name": "1", "state": "down", "srtt_ms": 40.0, "tx_bytes": 7}]}]});
        let text = render(&doc);
        let mut seen: Vec<String> = Vec::new();
        let mut typed = String::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert!(!seen.iter().any(|s| s == name), "{name} typed twice");
                assert_eq!(kind == "counter", name.ends_with("_total"), "{line}");
                seen.push(name.to_string());
                typed = name.to_string();
            } else if !line.starts_with('#') {
                let name = line.split('{').next().unwrap();
                assert_eq!(name, typed, "sample outside its family's group");
            }
        }
        assert!(text.contains("multihome_handshakes_total{role=\"server\"} 3\n"));
        assert!(text.contains(
            "multihome_link_tx_bytes_total{role=\"server\",peer=\"ho\\\"me\",link=\"1\"} 7\n"
        ));
        assert!(
            text.contains("multihome_link_up{role=\"server\",peer=\"ho\\\"me\",link=\"1\"} 0\n")
        );
        assert!(text.contains(
            "multihome_link_srtt_ms{role=\"server\",peer=\"ho\\\"me\",link=\"0\"} 12.5\n"
        ));
        assert!(
            text.contains("multihome_session_established{role=\"server\",peer=\"ho\\\"me\"} 1\n")
        );
    }

    #[test]
    fn stream_metrics() {
        let t = render(&json!({"role": "client", "stream": {"active": 3, "refused": 2}}));
        assert!(
            t.contains("multihome_stream_active{role=\"client\"} 3"),
            "{t}"
        );
        assert!(
            t.contains("multihome_stream_refused_total{role=\"client\"} 2"),
            "{t}"
        );
        assert!(
            t.contains("# TYPE multihome_stream_bytes_up_total counter"),
            "{t}"
        );
        assert!(!render(&json!({"role": "client"})).contains("multihome_stream"));
    }

    #[test]
    fn naming_metrics_per_reason() {
        let v = json!({
            "role": "server",
            "naming": {"lookups": 9, "publishes": 4,
                "refused": {"total": 3, "bad_signature": 2, "oversized": 1},
                "refused_in_store": {"total": 1, "stale": 1},
                "cache": {"records": 40, "watch_up": true, "relists": 1, "resumes": 0}}
        });
        let m = render(&v);
        for line in [
            "multihome_naming_lookups_total{role=\"server\"} 9",
            "multihome_naming_refused_total{role=\"server\",reason=\"bad_signature\"} 2",
            "multihome_naming_refused_total{role=\"server\",reason=\"oversized\"} 1",
            "multihome_naming_refused_total{role=\"server\",reason=\"unsigned\"} 0",
            "multihome_naming_refused_in_store_total{role=\"server\",reason=\"stale\"} 1",
            "multihome_naming_cache_records{role=\"server\"} 40",
            "multihome_naming_watch_up{role=\"server\"} 1",
        ] {
            assert!(m.lines().any(|l| l == line), "{line} missing from\n{m}");
        }
        let c = render(&json!({"role": "client", "naming": {"failovers": 2}}));
        assert!(
            c.contains("multihome_naming_failovers_total{role=\"client\"} 2"),
            "{c}"
        );
    }
}
