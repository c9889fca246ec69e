//! Optional Prometheus endpoint: `GET /metrics` in the text exposition format, built from
//! the same status document as `multihome status`.

use serde_json::Value;
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
        // How long the oldest held packet has waited (0: nothing held).
        let since = s["hold"]["since_us"].as_u64().unwrap_or(0);
        let age = match status["now_us"].as_u64() {
            Some(now) if since > 0 => now.saturating_sub(since) as f64 / 1e6,
            _ => 0.0,
        };
        let _ = writeln!(
            out,
            "multihome_held_age_seconds{{role=\"{role}\",peer=\"{peer}\"}} {age}"
        );
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
