//! Status: the JSON document served on the control socket, and the `status` command that
//! fetches it and prints it as JSON or as text: the tunnel's sessions and links, or the
//! racing gateway's per-uplink table (its document and text view are
//! `multihome_race::daemon::status`).
//!
//! Invariant: the text view is a pure function of the document ([`render`]) and never
//! fails on a missing or mistyped field (shown as `-`), so a newer `status` still reads an
//! older daemon.

use anyhow::{Context, Result};
use multihome_proto::endpoint::{Client, EndpointCounters, Server};
use multihome_proto::path::PathId;
use multihome_proto::policy::Policy;
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
        "hold_dropped_bytes": sc.hold_dropped_bytes,
        "hold_dropped_age": sc.hold_dropped_age,
        "hold_released": sc.hold_released,
        "rt_dropped_late": sc.rt_dropped_late,
        "rt_rx_late": sc.rt_rx_late,
        "fec_parity_sent": sc.fec_parity_sent,
        "fec_recovered": sc.fec_recovered,
        "fec_late": sc.fec_late,
        "tx_kernel_copies": sc.tx_kernel_copies,
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
            let reo = p.reordering();
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
                "reorder_window_ms": p.reorder_window().as_secs_f64() * 1e3,
                "rx_reordered": reo.0,
                "rx_spurious_losses": reo.1,
                "rx_declared_lost": reo.2,
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
        // Store-and-forward (PROTOCOL.md §16): what is held now; `since_us` is the core's
        // clock when the oldest was held (0: nothing held), so its age is the clock now
        // minus it.
        "hold": {"packets": sc.held_packets, "bytes": sc.held_bytes,
                 "since_us": sc.held_since.map_or(0, |t| t.as_micros()),
                 "dropped_bytes": sc.hold_dropped_bytes, "dropped_age": sc.hold_dropped_age,
                 "released": sc.hold_released,
                 // Per queue: the shared one (`any`) and one per `only:` link.
                 "queues": s.hold_queues().into_iter().map(|(k, n, b)| json!({
                     "link": k.map_or_else(|| "any".to_string(), name_of),
                     "packets": n, "bytes": b})).collect::<Vec<_>>()},
        "stated": stated_json(s, name_of),
        "links": links,
    })
}

/// A policy as written in config (`only:lte`), with its argument where it has one.
fn policy_text(p: Policy, name_of: &dyn Fn(PathId) -> String) -> String {
    match p {
        Policy::Link(r) => format!("{}:{}", r.name(), name_of(r.link())),
        Policy::Redundant { copies: Some(k) } => format!("redundant({k})"),
        Policy::Realtime { deadline, .. } => format!("realtime({} ms)", deadline.as_millis()),
        p => p.name().to_string(),
    }
}

/// The stated downlink policy (PROTOCOL.md §8.5): on the client what it states and
/// whether the server acknowledged it; on the server the statement in force.
fn stated_json(s: &Session, name_of: &dyn Fn(PathId) -> String) -> Value {
    let st = s.stated_stats();
    let mut v = json!({"epoch": st.epoch, "rules": st.rules, "acked": st.acked,
                       "sent": st.sent, "refused": st.refused});
    if let Some((_, c)) = s.stated_policy() {
        v["default"] = json!(policy_text(c.default, name_of));
        v["rule_list"] = c
            .rules
            .iter()
            .map(|r| {
                json!({"protocol": r.protocol, "ports": r.ports, "dscp": r.dscp,
                       "policy": policy_text(r.policy, name_of)})
            })
            .collect();
    }
    v
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

/// The client's resolved server and its own record's last publication.
fn naming_line(n: &Value) -> String {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let published = match n["published_unix_ms"].as_u64() {
        Some(t) => format!(
            "{:.1} s ago (seq {})",
            now_ms.saturating_sub(t) as f64 / 1000.0,
            n["published_seq"]
        ),
        None => "never".into(),
    };
    format!(
        "naming: server {} at {}, record published {published}, failovers {}, refused {}",
        n["server"].as_str().unwrap_or("-"),
        n["server_address"].as_str().unwrap_or("-"),
        n["failovers"],
        n["refused"]
    )
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
        return multihome_race::daemon::status::render(v);
    }
    if v["role"] == "mptcp-detours" {
        return crate::daemon::mptcp::render(v);
    }
    let mut out = String::new();
    let o = &mut out;
    // Writing to a String cannot fail.
    let _ = writeln!(o, "role: {}", v["role"].as_str().unwrap_or("?"));
    if v["naming"].is_object() {
        let _ = writeln!(o, "{}", naming_line(&v["naming"]));
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
        // The race view is not used for the tunnel, nor the tunnel's for a race (the race
        // view's own tests are beside it, in multihome_race::daemon::status).
        assert!(!text.contains("uplink"));
        let race = render(&json!({"role": "race", "sessions": []}));
        assert!(race.starts_with("role: race  predictor: ?"), "{race}");
        assert!(!race.contains("session"), "{race}");
    }
}
