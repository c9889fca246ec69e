//! The racing gateway's Prometheus metrics, served on its dashboard's `/metrics`: built from
//! the same status document as its control socket ([`super::status::document`]). Names,
//! types and labels are listed in docs/API.md.
//!
//! Invariants: what only grows is a counter ending in `_total` (races, refusals, bytes);
//! what is "now" is a gauge (SYNs held, connections active, the predictor's weights and
//! probe figures); every uplink sample carries its `uplink` name.

use multihome_runtime::prometheus::{esc, family, per_row, value};
use serde_json::Value;

/// Gateway-wide counters of the document: (field, help).
const COUNTERS: [(&str, &str); 8] = [
    ("races_chosen", "Connections whose race chose an uplink."),
    ("races_refused", "Connections refused on every uplink."),
    ("races_failed", "Races that failed (timeout, errors)."),
    ("busy_refusals", "Connections refused at max_connections."),
    (
        "unheld_connections",
        "Connections accepted without a held SYN.",
    ),
    (
        "relayed_up_bytes",
        "Bytes relayed from clients (proxy mode).",
    ),
    (
        "relayed_down_bytes",
        "Bytes relayed to clients (proxy mode).",
    ),
    ("nat_handed", "Connections handed to kernel NAT (nat mode)."),
];

/// Gateway-wide gauges of the document: (field, help).
const GAUGES: [(&str, &str); 4] = [
    ("syns_held", "SYNs held while their race runs."),
    (
        "syns_admitted",
        "Races won, waiting for the client's handshake.",
    ),
    ("active", "Connections counted against max_connections."),
    ("relaying", "Connections being relayed now (proxy mode)."),
];

/// Per-uplink counters: (field, help).
const UPLINK_COUNTERS: [(&str, &str); 11] = [
    ("attempts", "Race attempts made over the uplink."),
    ("wins", "Races the uplink answered first."),
    ("chosen", "Connections kept on the uplink."),
    ("refusals", "Attempts refused over the uplink."),
    ("timeouts", "Attempts timed out over the uplink."),
    ("failures", "Attempts failed over the uplink (errors)."),
    ("abandoned", "Attempts abandoned when another uplink won."),
    ("probe_replies", "Probe replies received over the uplink."),
    ("probe_losses", "Probes lost over the uplink."),
    (
        "tx_bytes",
        "Bytes the uplink's interface sent (kernel counter).",
    ),
    (
        "rx_bytes",
        "Bytes the uplink's interface received (kernel counter).",
    ),
];

/// Per-uplink gauges: (field, help).
const UPLINK_GAUGES: [(&str, &str); 5] = [
    ("udp_flows", "UDP flows pinned to the uplink."),
    (
        "avmet_weight",
        "AvMet's weight of the uplink (the largest is the best).",
    ),
    (
        "ett_ms",
        "Expected transmission time from the probes, milliseconds.",
    ),
    ("probe_delivery", "Share of probes answered (0..1)."),
    (
        "probe_srtt_ms",
        "Smoothed probe round-trip time, milliseconds.",
    ),
];

/// Renders the gateway's status document as Prometheus metrics.
pub fn render(doc: &Value) -> String {
    let mut out = String::new();
    let role = "role=\"race\"".to_string();
    let c = &doc["counters"];
    for (field, help) in COUNTERS {
        let name = format!("multihome_race_{field}_total");
        family(
            &mut out,
            &name,
            "counter",
            help,
            &[(role.clone(), value(&c[field]))],
        );
    }
    for (field, help) in GAUGES {
        let name = format!("multihome_race_{field}");
        family(
            &mut out,
            &name,
            "gauge",
            help,
            &[(role.clone(), value(&c[field]))],
        );
    }
    let uplinks: Vec<(String, &Value)> = doc["uplinks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|u| {
            let name = esc(u["name"].as_str().unwrap_or(""));
            (format!("{role},uplink=\"{name}\""), u)
        })
        .collect();
    let up: Vec<(String, String)> = uplinks
        .iter()
        .map(|(l, u)| (l.clone(), u8::from(u["state"] == "up").to_string()))
        .collect();
    family(
        &mut out,
        "multihome_race_uplink_up",
        "gauge",
        "1 while the uplink's interface is up.",
        &up,
    );
    let best: Vec<(String, String)> = uplinks
        .iter()
        .map(|(l, u)| (l.clone(), u8::from(u["name"] == doc["best"]).to_string()))
        .collect();
    family(
        &mut out,
        "multihome_race_uplink_best",
        "gauge",
        "1 for the uplink the predictor ranks best now.",
        &best,
    );
    for (field, help) in UPLINK_COUNTERS {
        let name = format!("multihome_race_uplink_{field}_total");
        per_row(&mut out, &name, "counter", help, &uplinks, field);
    }
    for (field, help) in UPLINK_GAUGES {
        let name = format!("multihome_race_uplink_{field}");
        per_row(&mut out, &name, "gauge", help, &uplinks, field);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gateway_and_uplink_families() {
        let doc = json!({"role": "race", "best": "lte",
            "counters": {"races_chosen": 5, "syns_held": 2, "relayed_down_bytes": 1000},
            "uplinks": [
                {"name": "dsl", "state": "up", "attempts": 5, "wins": 1, "tx_bytes": 70,
                 "avmet_weight": 0.25, "ett_ms": null},
                {"name": "lte", "state": "down", "attempts": 5, "wins": 4,
                 "avmet_weight": 0.75, "ett_ms": 31.5}]});
        let m = render(&doc);
        for line in [
            "multihome_race_races_chosen_total{role=\"race\"} 5",
            "multihome_race_syns_held{role=\"race\"} 2",
            "multihome_race_relayed_down_bytes_total{role=\"race\"} 1000",
            "multihome_race_uplink_up{role=\"race\",uplink=\"dsl\"} 1",
            "multihome_race_uplink_up{role=\"race\",uplink=\"lte\"} 0",
            "multihome_race_uplink_best{role=\"race\",uplink=\"lte\"} 1",
            "multihome_race_uplink_wins_total{role=\"race\",uplink=\"lte\"} 4",
            "multihome_race_uplink_tx_bytes_total{role=\"race\",uplink=\"dsl\"} 70",
            "multihome_race_uplink_avmet_weight{role=\"race\",uplink=\"dsl\"} 0.25",
            "multihome_race_uplink_ett_ms{role=\"race\",uplink=\"lte\"} 31.5",
        ] {
            assert!(m.lines().any(|l| l == line), "{line} missing from\n{m}");
        }
        assert!(!m.contains("ett_ms{role=\"race\",uplink=\"dsl\"}"), "{m}");
    }
}
