//! Prometheus metrics of the tunnel (client and server): the text exposition format, built
//! from the same status document as `multihome status`, served on `metrics_listen` (any
//! path) and on the dashboard's `/metrics` by the daemons' one HTTP server
//! (`multihome_runtime::http`). The names, types and labels are listed in docs/API.md.
//!
//! Invariants: every family is one contiguous group led by its `# HELP` and `# TYPE`
//! lines; counters end in `_total` and only grow while the daemon runs; label values are
//! escaped as the format requires.

use serde_json::Value;
use std::fmt::Write as _;

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

/// A label value with `\`, `"` and newlines escaped.
fn esc(s: &str) -> String {
    s.replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Writes one family: its HELP and TYPE lines, then every sample.
fn family(out: &mut String, name: &str, kind: &str, help: &str, samples: &[(String, String)]) {
    if samples.is_empty() {
        return;
    }
    // Writing to a String cannot fail.
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, value) in samples {
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
}

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
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
}
