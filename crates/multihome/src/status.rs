//! Status: the JSON document served on the control socket, and the `status` command that
//! fetches it and prints it as JSON or as text: the tunnel's sessions and links, or the
//! racing gateway's per-uplink table (its document is built in `race/status.rs`).
//!
//! Invariant: the text view is a pure function of the document ([`render`]) and never
//! fails on a missing or mistyped field (shown as `-`), so a newer `status` still reads an
//! older daemon.

use anyhow::{Context, Result};
use multihome_proto::endpoint::{Client, EndpointCounters, Server};
use multihome_proto::path::PathId;
use multihome_proto::session::Session;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

fn counters_json(c: &EndpointCounters, s: Option<&Session>) -> Value {
    let sc = s.map(|s| s.counters()).unwrap_or_default();
    let q = s.map(|s| s.queue_drops()).unwrap_or_default();
    json!({
        "rx_garbage": c.rx_garbage,
        "rx_unknown_index": c.rx_unknown_index,
        "rx_unknown_peer": c.rx_unknown_peer,
        "rx_handshake_failed": c.rx_handshake_failed,
        "rx_handshake_replayed": c.rx_handshake_replayed,
        "rx_no_common_cipher": c.rx_no_common_cipher,
        "rx_unauthenticated": sc.rx_unauthenticated,
        "rx_replayed": sc.rx_replayed,
        "rx_malformed": sc.rx_malformed,
        "rx_duplicates": sc.rx_duplicates,
        "rx_spoofed": c.rx_spoofed,
        "handshakes": c.handshakes,
        "tx_no_route": c.tx_no_route,
        "queue_drops": sc.queue_drops,
        "codel_drops": q.codel,
        "queue_overflow_drops": q.overflow,
        "no_key_drops": sc.no_key_drops,
        "tx_compressed": sc.tx_compressed,
        "rx_decompress_errors": sc.rx_decompress_errors,
        "reinjected": sc.reinjected,
        "repaired": sc.repaired,
        "tx_riders": sc.tx_riders,
    })
}

/// One session's paths.
pub fn session_json(s: &Session, name_of: &dyn Fn(PathId) -> String) -> Value {
    let total: u64 = s.paths().map(|p| p.counters().tx_bytes).sum();
    let links: Vec<Value> = s
        .paths()
        .map(|p| {
            // The view's time only matters for the pacer's ready time, not shown here.
            let v = p.view(multihome_proto::Instant::ZERO);
            let c = p.counters();
            let l = p.loss_counters();
            json!({
                "id": p.id().0,
                "name": name_of(p.id()),
                "state": p.state().as_str(),
                "remote": p.remote().to_string(),
                "srtt_ms": v.srtt.as_secs_f64() * 1e3,
                "min_rtt_ms": v.min_rtt.as_secs_f64() * 1e3,
                "fwd_queue_ms": v.fwd_queue.as_secs_f64() * 1e3,
                "loss": v.loss,
                "error_loss": v.error_loss,
                "delivery_rate_bps": v.bandwidth_bps * 8.0,
                "inflight_bytes": v.inflight_bytes,
                "cwnd_bytes": v.cwnd_bytes,
                "pacing_rate_bps": v.pacing_bps * 8.0,
                "pair_capacity_bps": p.capacity().map(|c| c * 8.0),
                "rate_mode": if p.in_startup() { "startup" } else { "probe" },
                "congestion_losses": l.congestion,
                "error_losses": l.error,
                "tx_bytes": c.tx_bytes,
                "rx_bytes": c.rx_bytes,
                "tx_packets": c.tx_packets,
                "rx_packets": c.rx_packets,
                "share": if total > 0 { c.tx_bytes as f64 / total as f64 } else { 0.0 },
            })
        })
        .collect();
    let r = s.reorder_stats();
    let sc = s.counters();
    json!({
        "session_id": s.id().to_string(),
        "cipher": s.keys.current.as_ref().map(|k| k.seal.suite().name()),
        "tx_ip_packets": sc.tx_ip_packets,
        "rx_ip_packets": sc.rx_ip_packets,
        "reorder": {"held": r.held, "skipped_gaps": r.skipped_gaps, "late": r.late,
                    "mean_occupancy": if r.inserts > 0 { r.occupancy_sum as f64 / r.inserts as f64 } else { 0.0 },
                    "max_held": r.max_held, "inserts": r.inserts,
                    "occupancy_sum": r.occupancy_sum, "lost_skips": r.lost_skips,
                    "displaced": r.displaced, "density": r.density.to_vec()},
        "links": links,
    })
}

/// The client's status document.
pub fn client_status(c: &Client, names: &[String]) -> Value {
    let name_of = |id: PathId| {
        names
            .get(id.0 as usize)
            .cloned()
            .unwrap_or_else(|| id.0.to_string())
    };
    let mut session = session_json(c.session(), &name_of);
    session["peer"] = json!("server");
    session["established"] = json!(c.is_established());
    json!({
        "role": "client",
        "counters": counters_json(&c.counters(), Some(c.session())),
        "sessions": [session],
    })
}

/// The server's status document.
pub fn server_status(s: &Server) -> Value {
    let mut counters = counters_json(&s.counters(), None);
    let mut sessions = Vec::new();
    for p in s.peers() {
        let Some(sess) = p.session else { continue };
        for (k, v) in counters_json(&EndpointCounters::default(), Some(sess))
            .as_object()
            .into_iter()
            .flatten()
        {
            if let (Some(a), Some(b)) = (counters[k].as_u64(), v.as_u64()) {
                counters[k] = json!(a + b);
            }
        }
        let mut j = session_json(sess, &|id| id.0.to_string());
        j["peer"] = json!(p.config.name);
        j["established"] = json!(true);
        sessions.push(j);
    }
    json!({"role": "server", "counters": counters, "sessions": sessions})
}

/// Fetches the status document from a control socket.
pub fn fetch(socket: &PathBuf) -> Result<Value> {
    let mut s = UnixStream::connect(socket).with_context(|| {
        format!(
            "connecting to {} (is the daemon running? try --socket)",
            socket.display()
        )
    })?;
    s.write_all(b"status\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    serde_json::from_str(&text).context("the daemon's reply is not JSON")
}

/// `multihome status`.
pub fn query(socket: Option<PathBuf>, as_json: bool) -> Result<()> {
    let socket = socket.unwrap_or_else(|| {
        let c = PathBuf::from(crate::config::client_default_socket());
        if c.exists() {
            c
        } else {
            PathBuf::from(crate::config::server_default_socket())
        }
    });
    let v = fetch(&socket)?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    print!("{}", render(&v));
    Ok(())
}

/// The plain-text view of a status document: the racing gateway's per-uplink table for
/// role `race`, else the tunnel's sessions and links. Fields missing from the document
/// (an older daemon) show as `-` or 0, never an error.
pub fn render(v: &Value) -> String {
    if v["role"] == "race" {
        return render_race(v);
    }
    let mut out = String::new();
    let o = &mut out;
    // Writing to a String cannot fail.
    let _ = writeln!(o, "role: {}", v["role"].as_str().unwrap_or("?"));
    for s in v["sessions"].as_array().into_iter().flatten() {
        let _ = writeln!(
            o,
            "session {} peer {} established {} cipher {}",
            s["session_id"],
            s["peer"],
            s["established"],
            s["cipher"].as_str().unwrap_or("-")
        );
        let _ = writeln!(
            o,
            "  {:<10} {:<8} {:>9} {:>9} {:>7} {:>12} {:>12} {:>12} {:>6}",
            "link",
            "state",
            "srtt_ms",
            "min_ms",
            "loss%",
            "rate_Mbit/s",
            "tx_bytes",
            "rx_bytes",
            "share"
        );
        for l in s["links"].as_array().into_iter().flatten() {
            let _ = writeln!(
                o,
                "  {:<10} {:<8} {:>9.2} {:>9.2} {:>7.2} {:>12.2} {:>12} {:>12} {:>5.0}%",
                l["name"].as_str().unwrap_or("?"),
                l["state"].as_str().unwrap_or("?"),
                l["srtt_ms"].as_f64().unwrap_or(0.0),
                l["min_rtt_ms"].as_f64().unwrap_or(0.0),
                l["loss"].as_f64().unwrap_or(0.0) * 100.0,
                l["delivery_rate_bps"].as_f64().unwrap_or(0.0) / 1e6,
                l["tx_bytes"],
                l["rx_bytes"],
                l["share"].as_f64().unwrap_or(0.0) * 100.0
            );
        }
    }
    let _ = writeln!(o, "counters: {}", v["counters"]);
    out
}

/// An integer field, or `-` when absent.
fn int(v: &Value) -> String {
    v.as_u64().map_or_else(|| "-".into(), |n| n.to_string())
}

/// A number with `prec` decimals, or `-` when absent or null (e.g. no probe reply yet).
fn dec(v: &Value, prec: usize) -> String {
    v.as_f64()
        .map_or_else(|| "-".into(), |x| format!("{x:.prec$}"))
}

/// The racing gateway (`multihome race`): predictor, one row per uplink with its race
/// counters and AvMet weight, probe figures when probes ran, then the gateway's counters.
fn render_race(v: &Value) -> String {
    let mut out = String::new();
    let o = &mut out;
    let c = &v["counters"];
    let name = |x: &Value| x.as_str().unwrap_or("?").to_string();
    let _ = writeln!(
        o,
        "role: race  predictor: {}  best: {}  connections: {} of {} ({} relaying)",
        name(&v["predictor"]),
        name(&v["best"]),
        int(&c["active"]),
        int(&v["max_connections"]),
        int(&c["relaying"]),
    );
    let a = &v["avmet"];
    let curbest = match a["curbest"].as_f64() {
        Some(x) => format!("curbest {x:.3}"),
        None => "curbest - (defined for two uplinks; see weight)".into(),
    };
    let _ = writeln!(
        o,
        "avmet: {curbest}  alpha {}  samples {}",
        dec(&a["alpha"], 4),
        int(&a["samples"]),
    );
    if v["destinations"].as_u64().unwrap_or(0) > 0 {
        let _ = writeln!(
            o,
            "destinations with their own predictor: {}",
            int(&v["destinations"])
        );
    }
    let uplinks: Vec<&Value> = v["uplinks"].as_array().into_iter().flatten().collect();
    let _ = writeln!(
        o,
        "  {:<10} {:<10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "uplink",
        "interface",
        "attempts",
        "wins",
        "chosen",
        "refusals",
        "timeouts",
        "failures",
        "abandoned",
        "udp_flows",
        "weight",
    );
    for u in &uplinks {
        let _ = writeln!(
            o,
            "  {:<10} {:<10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7}",
            name(&u["name"]),
            name(&u["interface"]),
            int(&u["attempts"]),
            int(&u["wins"]),
            int(&u["chosen"]),
            int(&u["refusals"]),
            int(&u["timeouts"]),
            int(&u["failures"]),
            int(&u["abandoned"]),
            int(&u["udp_flows"]),
            dec(&u["avmet_weight"], 3),
        );
    }
    // Probes run only with probe_target set: no table of zeros otherwise.
    let probed = |u: &&Value| {
        u["probe_replies"].as_u64().unwrap_or(0) + u["probe_losses"].as_u64().unwrap_or(0) > 0
    };
    if uplinks.iter().any(probed) {
        let _ = writeln!(
            o,
            "  {:<10} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "probes", "replies", "losses", "delivery", "srtt_ms", "ett_ms",
        );
        for u in &uplinks {
            let _ = writeln!(
                o,
                "  {:<10} {:>9} {:>9} {:>9} {:>9} {:>9}",
                name(&u["name"]),
                int(&u["probe_replies"]),
                int(&u["probe_losses"]),
                dec(&u["probe_delivery"], 3),
                dec(&u["probe_srtt_ms"], 2),
                dec(&u["ett_ms"], 2),
            );
        }
    }
    let _ = writeln!(
        o,
        "races: {} chosen, {} refused on every uplink, {} failed; {} refused at max_connections",
        int(&c["races_chosen"]),
        int(&c["races_refused"]),
        int(&c["races_failed"]),
        int(&c["busy_refusals"]),
    );
    let _ = writeln!(
        o,
        "SYNs: {} held (racing), {} admitted (waiting for the client); {} connections raced unheld",
        int(&c["syns_held"]),
        int(&c["syns_admitted"]),
        int(&c["unheld_connections"]),
    );
    let _ = writeln!(
        o,
        "relayed bytes: {} up, {} down",
        int(&c["relayed_up_bytes"]),
        int(&c["relayed_down_bytes"]),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A document as `race::status::document` builds it: two uplinks, AvMet, probes on.
    fn race_doc() -> Value {
        json!({
            "role": "race", "predictor": "avmet", "best": "dsl", "max_connections": 512,
            "destinations": 0,
            "avmet": {"alpha": 0.99, "curbest": 0.1274, "samples": 812},
            "uplinks": [
                {"name": "dsl", "interface": "eth1", "address": "192.168.1.2",
                 "attempts": 812, "wins": 709, "chosen": 709, "refusals": 0, "timeouts": 2,
                 "failures": 0, "abandoned": 103, "udp_flows": 12, "avmet_weight": 0.8726,
                 "ett_ms": 21.304, "probe_delivery": 1.0, "probe_srtt_ms": 20.1,
                 "probe_replies": 120, "probe_losses": 0},
                {"name": "lte", "interface": "wwan0", "address": null,
                 "attempts": 812, "wins": 103, "chosen": 103, "refusals": 1, "timeouts": 0,
                 "failures": 3, "abandoned": 706, "udp_flows": 3, "avmet_weight": 0.1274,
                 "ett_ms": null, "probe_delivery": 0.0, "probe_srtt_ms": 0.0,
                 "probe_replies": 0, "probe_losses": 4}
            ],
            "counters": {"races_chosen": 810, "races_refused": 1, "races_failed": 1,
                         "busy_refusals": 0, "syns_held": 2, "syns_admitted": 1,
                         "unheld_connections": 0, "active": 3, "relaying": 1,
                         "relayed_up_bytes": 1200000, "relayed_down_bytes": 250300000},
            "sessions": []
        })
    }

    #[test]
    fn race_table_from_a_document() {
        let want = "\
role: race  predictor: avmet  best: dsl  connections: 3 of 512 (1 relaying)
avmet: curbest 0.127  alpha 0.9900  samples 812
  uplink     interface   attempts      wins    chosen  refusals  timeouts  failures abandoned udp_flows  weight
  dsl        eth1             812       709       709         0         2         0       103        12   0.873
  lte        wwan0            812       103       103         1         0         3       706         3   0.127
  probes       replies    losses  delivery   srtt_ms    ett_ms
  dsl              120         0     1.000     20.10     21.30
  lte                0         4     0.000      0.00         -
races: 810 chosen, 1 refused on every uplink, 1 failed; 0 refused at max_connections
SYNs: 2 held (racing), 1 admitted (waiting for the client); 0 connections raced unheld
relayed bytes: 1200000 up, 250300000 down
";
        assert_eq!(render(&race_doc()), want);
    }

    #[test]
    fn race_table_without_probes_curbest_or_fields() {
        let mut v = race_doc();
        v["avmet"]["curbest"] = Value::Null; // three uplinks: no single curbest
        v["destinations"] = json!(7);
        for u in v["uplinks"].as_array_mut().unwrap() {
            u["probe_replies"] = json!(0);
            u["probe_losses"] = json!(0);
        }
        // A field an older daemon did not send.
        v["uplinks"][1].as_object_mut().unwrap().remove("udp_flows");
        let text = render(&v);
        assert!(
            text.contains("curbest - (defined for two uplinks; see weight)"),
            "{text}"
        );
        assert!(
            text.contains("destinations with their own predictor: 7"),
            "{text}"
        );
        assert!(
            !text.contains("probes"),
            "probe table without probes:\n{text}"
        );
        let lte = text.lines().find(|l| l.starts_with("  lte")).unwrap();
        let cols: Vec<&str> = lte.split_whitespace().collect();
        assert_eq!(cols[9], "-", "missing udp_flows: {lte}");
        assert_eq!(cols.len(), 11, "{lte}");
    }

    #[test]
    fn tunnel_table_from_a_document() {
        let v = json!({
            "role": "client",
            "counters": {"handshakes": 1},
            "sessions": [{"session_id": "3fa2c19b0d44e871", "peer": "server",
                "established": true,
                "links": [{"name": "dsl", "state": "up", "srtt_ms": 21.4, "min_rtt_ms": 19.8,
                           "loss": 0.01, "delivery_rate_bps": 4.1e7, "tx_bytes": 900000,
                           "rx_bytes": 1500000, "share": 0.75}]}]
        });
        let text = render(&v);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "role: client");
        assert_eq!(
            lines[1], "session \"3fa2c19b0d44e871\" peer \"server\" established true cipher -",
            "a document without `cipher` (an older daemon) shows -"
        );
        let dsl: Vec<&str> = lines[3].split_whitespace().collect();
        assert_eq!(
            dsl,
            ["dsl", "up", "21.40", "19.80", "1.00", "41.00", "900000", "1500000", "75%"]
        );
        assert_eq!(lines[4], "counters: {\"handshakes\":1}");
        // The race view is not used for the tunnel, nor the tunnel's for a race.
        assert!(!text.contains("uplink"));
        assert!(!render(&race_doc()).contains("session"));
    }
}
