//! The relay's Prometheus metrics, served on its dashboard's `/metrics`: built from the same
//! status document as its control socket and `/api/status` ([`super::status`]), so the two
//! never disagree. Names, types and labels are listed in docs/API.md.
//!
//! Invariants: every counter of the document's `counters` becomes
//! `multihome_relay_<counter>_total`; detours now are gauges (per mode, per client);
//! the userspace tunnel forwarding is counted in datagrams and bytes.

use multihome_runtime::prometheus::{esc, family, per_row, value};
use serde_json::Value;

/// Renders the relay's status document as Prometheus metrics.
pub fn render(doc: &Value) -> String {
    let mut out = String::new();
    let relay = format!("relay=\"{}\"", esc(doc["name"].as_str().unwrap_or("")));
    for (k, v) in doc["counters"].as_object().into_iter().flatten() {
        family(
            &mut out,
            &format!("multihome_relay_{k}_total"),
            "counter",
            &format!("Relay counter `{k}` (docs/API.md)."),
            &[(relay.clone(), value(v))],
        );
    }
    let modes: Vec<(String, String)> = [
        ("nat", &doc["nat_detours"]),
        ("tunnel", &doc["tunnel_detours"]),
    ]
    .into_iter()
    .map(|(m, v)| (format!("{relay},mode=\"{m}\""), value(v)))
    .collect();
    family(
        &mut out,
        "multihome_relay_detours",
        "gauge",
        "Detours installed now, by mode (nat includes nat-tcp).",
        &modes,
    );
    for (field, help) in [
        (
            "tunnel_forwarded_datagrams",
            "Datagrams forwarded in userspace for tunnel detours.",
        ),
        (
            "tunnel_forwarded_bytes",
            "Bytes (UDP payload) forwarded in userspace for tunnel detours.",
        ),
        (
            "tunnel_dropped",
            "Datagrams of tunnel detours dropped (foreign source, truncated, send errors).",
        ),
    ] {
        family(
            &mut out,
            &format!("multihome_relay_{field}_total"),
            "counter",
            help,
            &[(relay.clone(), value(&doc[field]))],
        );
    }
    let clients: Vec<(String, &Value)> = doc["clients"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let name = esc(c["name"].as_str().unwrap_or(""));
            (format!("{relay},client=\"{name}\""), c)
        })
        .collect();
    per_row(
        &mut out,
        "multihome_relay_client_detours",
        "gauge",
        "Detours installed now for each configured client.",
        &clients,
        "detours",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn counters_detours_and_clients() {
        let doc = json!({"role": "relay", "name": "r1", "nat_detours": 2, "tunnel_detours": 1,
            "tunnel_forwarded_datagrams": 10, "tunnel_forwarded_bytes": 12000,
            "tunnel_dropped": 0, "counters": {"installed": 3, "refused_full": 1},
            "clients": [{"name": "home", "detours": 2}, {"name": "of\"fice", "detours": 1}]});
        let m = render(&doc);
        for line in [
            "multihome_relay_installed_total{relay=\"r1\"} 3",
            "multihome_relay_refused_full_total{relay=\"r1\"} 1",
            "multihome_relay_detours{relay=\"r1\",mode=\"nat\"} 2",
            "multihome_relay_detours{relay=\"r1\",mode=\"tunnel\"} 1",
            "multihome_relay_tunnel_forwarded_bytes_total{relay=\"r1\"} 12000",
            "multihome_relay_client_detours{relay=\"r1\",client=\"home\"} 2",
            "multihome_relay_client_detours{relay=\"r1\",client=\"of\\\"fice\"} 1",
        ] {
            assert!(m.lines().any(|l| l == line), "{line} missing from\n{m}");
        }
        assert_eq!(m.matches("# TYPE multihome_relay_detours gauge").count(), 1);
    }
}
