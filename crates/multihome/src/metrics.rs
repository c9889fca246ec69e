//! Optional Prometheus endpoint: `GET /metrics` in the text exposition format, built from
//! the same status document as `multihome status`: the endpoint's counters, per-link
//! gauges and counters, and the name service's ([`naming`]: the server's resolver, records
//! refused per reason; the client's failovers).

use serde_json::{json, Value};
use std::fmt::Write as _;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Renders the status document as Prometheus metrics.
pub fn render(status: &Value) -> String {
    let mut out = String::new();
    let role = status["role"].as_str().unwrap_or("unknown");
    for (k, v) in status["counters"].as_object().into_iter().flatten() {
        let _ = writeln!(out, "# TYPE multihome_{k}_total counter");
        let _ = writeln!(
            out,
            "multihome_{k}_total{{role=\"{role}\"}} {}",
            v.as_u64().unwrap_or(0)
        );
    }
    naming(&mut out, role, &status["naming"]);
    let gauges = [
        "srtt_ms",
        "min_rtt_ms",
        "loss",
        "delivery_rate_bps",
        "share",
    ];
    let counters = ["tx_bytes", "rx_bytes", "tx_packets", "rx_packets"];
    for s in status["sessions"].as_array().into_iter().flatten() {
        let peer = s["peer"].as_str().unwrap_or("");
        for g in ["packets", "bytes"] {
            let _ = writeln!(
                out,
                "multihome_held_{g}{{role=\"{role}\",peer=\"{peer}\"}} {}",
                s["hold"][g].as_u64().unwrap_or(0)
            );
        }
        for l in s["links"].as_array().into_iter().flatten() {
            let labels = format!(
                "role=\"{role}\",peer=\"{peer}\",link=\"{}\"",
                l["name"].as_str().unwrap_or("")
            );
            let up = u8::from(l["state"] == "up");
            let _ = writeln!(out, "multihome_link_up{{{labels}}} {up}");
            for g in gauges {
                let _ = writeln!(
                    out,
                    "multihome_link_{g}{{{labels}}} {}",
                    l[g].as_f64().unwrap_or(0.0)
                );
            }
            for c in counters {
                let _ = writeln!(
                    out,
                    "multihome_link_{c}_total{{{labels}}} {}",
                    l[c].as_u64().unwrap_or(0)
                );
            }
        }
    }
    out
}

/// The `naming` part: on a server the resolver's requests, refusals by reason (of
/// publishes, and of records found in a shared store), its etcd copy; on a client its
/// failovers and when its record was last published.
fn naming(out: &mut String, role: &str, n: &Value) {
    if !n.is_object() {
        return;
    }
    let mut metric = |name: &str, labels: &str, v: &Value| {
        let _ = writeln!(
            out,
            "multihome_naming_{name}{{role=\"{role}\"{labels}}} {}",
            v.as_u64().unwrap_or(0)
        );
    };
    if role != "server" {
        metric("failovers_total", "", &n["failovers"]);
        metric("refused_total", "", &n["refused"]);
        metric("published_unix_ms", "", &n["published_unix_ms"]);
        return;
    }
    for op in [
        "lookups",
        "publishes",
        "server_lists",
        "not_found",
        "unavailable",
    ] {
        metric(&format!("{op}_total"), "", &n[op]);
    }
    metric("dropped_busy_total", "", &n["dropped_busy"]);
    for field in ["refused", "refused_in_store"] {
        for reason in crate::status::REFUSAL_REASONS {
            let labels = format!(",reason=\"{reason}\"");
            metric(&format!("{field}_total"), &labels, &n[field][reason]);
        }
    }
    let c = &n["cache"];
    if c.is_object() {
        metric("cache_records", "", &c["records"]);
        metric("watch_up", "", &json!(u8::from(c["watch_up"] == true)));
        metric("relists_total", "", &c["relists"]);
        metric("watch_resumes_total", "", &c["resumes"]);
    }
}

/// Answers one HTTP request with the metrics (any path; this endpoint serves one thing).
pub fn reply(mut stream: TcpStream, body: String) {
    tokio::task::spawn_local(async move {
        let mut req = [0u8; 1024];
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(2),
            tokio::io::AsyncReadExt::read(&mut stream, &mut req),
        )
        .await;
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        let _ = stream.write_all(head.as_bytes()).await;
        let _ = stream.write_all(body.as_bytes()).await;
        let _ = stream.shutdown().await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

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
