//! Status: the JSON document served on the control socket (and as `/api/status` by the
//! dashboard: one document, docs/API.md), and the `status` command that fetches it from
//! either and prints it as JSON or as text: the tunnel's sessions, links, flow classes and
//! latest events, or the racing gateway's per-uplink table (its document and text view are
//! `multihome_race::daemon::status`).
//!
//! Invariant: the text view is a pure function of the document ([`render`]) and never
//! fails on a missing or mistyped field (shown as `-`), so a newer `status` still reads an
//! older daemon.

use anyhow::{Context, Result};
use multihome_proto::endpoint::{Client, EndpointCounters, Server};
use multihome_proto::path::PathId;
use multihome_proto::policy::{Classifier, Policy};
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
                "reorder_window_ms": reo.0.as_secs_f64() * 1e3,
                "rx_reordered": reo.1,
                "rx_spurious_losses": reo.2,
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
        // clock when the oldest was held (0: nothing held), so its age is the document's
        // `now_us` (the daemon's clock when it answered) minus it; the bounds in force.
        "hold": {"packets": sc.held_packets, "bytes": sc.held_bytes,
                 "since_us": sc.held_since.map_or(0, |t| t.as_micros()),
                 "dropped_bytes": sc.hold_dropped_bytes, "dropped_age": sc.hold_dropped_age,
                 "released": sc.hold_released,
                 "max_bytes": s.config().hold_max_bytes,
                 "max_s": s.config().hold_max_age.as_secs(),
                 // Per queue: the shared one (`any`) and one per `only:` link.
                 "queues": s.hold_queues().into_iter().map(|(k, n, b)| json!({
                     "link": k.map_or_else(|| "any".to_string(), name_of),
                     "packets": n, "bytes": b})).collect::<Vec<_>>()},
        "stated": stated_json(s, name_of),
        "relay_list": relay_list_json(s),
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

/// The flow classes as configured (the client's `[policy]`): each rule and the default.
pub fn policies_json(c: &Classifier, name_of: &dyn Fn(PathId) -> String) -> Value {
    let rules: Vec<Value> = c
        .rules
        .iter()
        .map(|r| {
            json!({"name": r.name, "protocol": r.protocol, "ports": r.ports, "dscp": r.dscp,
                   "policy": policy_text(r.policy, name_of)})
        })
        .collect();
    json!({"default": policy_text(c.default, name_of), "rules": rules})
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

/// The relay list the server hands out (PROTOCOL.md §15.7): on the server the epoch
/// offered and whether the client acknowledged it, on the client the epoch applied.
fn relay_list_json(s: &Session) -> Value {
    let r = s.relays_stats();
    json!({"epoch": r.epoch, "relays": r.relays, "acked": r.acked, "sent": r.sent,
           "refused": r.refused})
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
    let (epoch, list) = s.relays();
    let relays: Vec<Value> = list
        .iter()
        .map(|r| json!({"name": r.name, "address": r.address.to_string(), "mode": r.mode.name()}))
        .collect();
    json!({"role": "server", "counters": counters, "sessions": sessions,
           "relays": {"epoch": epoch, "list": relays}})
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

/// Reasons a record is refused, in the order status and metrics show them.
pub const REFUSAL_REASONS: [&str; 7] = [
    "unsigned",
    "bad_signature",
    "stale",
    "oversized",
    "expired",
    "malformed",
    "lease_too_long",
];

/// Refusals by reason, the non-zero ones: `3 (bad_signature 2, stale 1)`.
fn refusals_text(r: &Value) -> String {
    let reasons: Vec<String> = REFUSAL_REASONS
        .iter()
        .filter_map(|k| {
            let n = r[*k].as_u64().unwrap_or(0);
            (n > 0).then(|| format!("{k} {n}"))
        })
        .collect();
    let total = r["total"].as_u64().unwrap_or(0);
    if reasons.is_empty() {
        total.to_string()
    } else {
        format!("{total} ({})", reasons.join(", "))
    }
}

/// The server's resolver: requests answered, records refused by reason, the etcd copy.
fn resolver_lines(n: &Value) -> String {
    let mut out = format!(
        "naming: resolver on {} store, lookups {} (not found {}), publishes {}, server lists {}, unavailable {}, dropped {}\n  refused {}; refused in store {}",
        n["store"].as_str().unwrap_or("-"),
        n["lookups"],
        n["not_found"],
        n["publishes"],
        n["server_lists"],
        n["unavailable"],
        n["dropped_busy"],
        refusals_text(&n["refused"]),
        refusals_text(&n["refused_in_store"]),
    );
    let c = &n["cache"];
    if c.is_object() {
        let _ = write!(
            out,
            "\n  cache {} records at revision {}, watch {}, relists {}, resumes {}",
            c["records"],
            c["revision"],
            if c["watch_up"] == true { "up" } else { "down" },
            c["relists"],
            c["resumes"]
        );
    }
    out
}

/// The control socket `status` and `reload` use without `--socket`: the client's if it
/// exists, else the server's.
pub fn default_socket() -> PathBuf {
    let c = PathBuf::from(crate::config::client_default_socket());
    if c.exists() {
        c
    } else {
        PathBuf::from(crate::config::server_default_socket())
    }
}

/// The relays: on the client those it may detour through, with where each came from
/// (`config` or `server`, `leaving` once the server stopped listing it); on the server
/// those it hands out. None when there are none.
fn relays_line(v: &Value) -> Option<String> {
    let (list, label) = match v["role"].as_str() {
        Some("server") => (v["relays"]["list"].as_array()?, "relays handed out"),
        _ => (v["detours"]["relays"].as_array()?, "relays"),
    };
    if list.is_empty() {
        return None;
    }
    let items: Vec<String> = list
        .iter()
        .map(|r| {
            let mut from: Vec<&str> = r["source"].as_str().into_iter().collect();
            if r["leaving"] == true {
                from.push("leaving");
            }
            let from = if from.is_empty() {
                String::new()
            } else {
                format!(" ({})", from.join(", "))
            };
            format!(
                "{} {} {}{from}",
                r["name"].as_str().unwrap_or("?"),
                r["address"].as_str().unwrap_or("?"),
                r["mode"].as_str().unwrap_or("?")
            )
        })
        .collect();
    Some(format!("{label}: {}", items.join(", ")))
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

/// Fetches the status document from a dashboard's `/api/status`; `url` is
/// `[http://]HOST:PORT[/PREFIX/]`, as the dashboard's address in a browser.
pub fn fetch_url(url: &str) -> Result<Value> {
    use std::net::ToSocketAddrs;
    let rest = url.strip_prefix("http://").unwrap_or(url);
    let (host, prefix) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    let addr = host
        .to_socket_addrs()
        .with_context(|| format!("`{url}`: not HOST:PORT (https is not served)"))?
        .next()
        .with_context(|| format!("`{host}` has no address"))?;
    let path = format!("{prefix}/api/status");
    let timeout = std::time::Duration::from_secs(5);
    let (code, body) = multihome_runtime::http::get(addr, &path, timeout)?;
    anyhow::ensure!(code == 200, "{url}{path} answered HTTP {code}");
    serde_json::from_slice(&body).context("the dashboard's answer is not JSON")
}

/// `multihome status`: from the control socket, or from a dashboard at `url`.
pub fn query(socket: Option<PathBuf>, url: Option<&str>, as_json: bool) -> Result<()> {
    let v = match url {
        Some(u) => fetch_url(u)?,
        None => fetch(&socket.unwrap_or_else(default_socket))?,
    };
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
        let line = if v["role"] == "server" {
            resolver_lines(&v["naming"])
        } else {
            naming_line(&v["naming"])
        };
        let _ = writeln!(o, "{line}");
    }
    if let Some(line) = relays_line(v) {
        let _ = writeln!(o, "{line}");
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
            link_line(o, l);
        }
        if s["hold"].is_object() {
            let _ = writeln!(o, "{}", hold_line(&s["hold"], v["now_us"].as_u64()));
        }
    }
    if v["policies"].is_object() {
        let _ = writeln!(o, "{}", policies_line(&v["policies"]));
    }
    let _ = writeln!(o, "counters: {}", v["counters"]);
    events_lines(o, &v["events"]);
    out
}

/// The configured flow classes on one line: `policies: voip (udp 5060) realtime(150 ms);
/// default aggregate`.
fn policies_line(p: &Value) -> String {
    let mut parts: Vec<String> = p["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            format!(
                "{} {}",
                r["name"].as_str().unwrap_or("?"),
                r["policy"].as_str().unwrap_or("?")
            )
        })
        .collect();
    parts.push(format!("default {}", p["default"].as_str().unwrap_or("?")));
    format!("policies: {}", parts.join("; "))
}

/// Events shown by the text view: the latest few (the JSON has all the daemon keeps).
const EVENTS_SHOWN: usize = 5;

/// The latest events, each with its age.
fn events_lines(o: &mut String, events: &Value) {
    let Some(list) = events.as_array().filter(|l| !l.is_empty()) else {
        return;
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let shown = list.len().min(EVENTS_SHOWN);
    let _ = writeln!(o, "events (latest {shown} of {}):", list.len());
    for e in &list[list.len() - shown..] {
        let age = now_ms.saturating_sub(e["unix_ms"].as_u64().unwrap_or(now_ms));
        let _ = writeln!(
            o,
            "  {:>8.1} s ago  {:<9} {}",
            age as f64 / 1e3,
            e["kind"].as_str().unwrap_or("?"),
            e["text"].as_str().unwrap_or("")
        );
    }
}

/// One link's row of the table.
fn link_line(o: &mut String, l: &Value) {
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

/// Bytes as a person reads them: B, kB, MB (powers of 1000).
fn bytes_text(b: u64) -> String {
    match b {
        0..1_000 => format!("{b} B"),
        1_000..1_000_000 => format!("{:.1} kB", b as f64 / 1e3),
        _ => format!("{:.1} MB", b as f64 / 1e6),
    }
}

/// Store-and-forward in one line: what is held now and for how long (`now_us` minus the
/// oldest's `since_us`; unknown from a daemon that does not send its clock), what the
/// bounds dropped, what was released, and the per-queue split when a queue is not the
/// shared one.
fn hold_line(h: &Value, now_us: Option<u64>) -> String {
    let n = |k: &str| h[k].as_u64().unwrap_or(0);
    let held = if n("packets") == 0 {
        "nothing held".to_string()
    } else {
        let age = match (now_us, n("since_us")) {
            (Some(now), since) if since > 0 => {
                format!("{:.1} s", now.saturating_sub(since) as f64 / 1e6)
            }
            _ => "-".into(),
        };
        format!(
            "{} packets ({}) held for {age}",
            n("packets"),
            bytes_text(n("bytes"))
        )
    };
    let limits = match (h["max_bytes"].as_u64(), h["max_s"].as_u64()) {
        (Some(b), Some(s)) => format!(" (limits {} MiB, {s} s)", b >> 20),
        _ => String::new(),
    };
    let mut line = format!(
        "  hold: {held}{limits}; dropped {} oldest at the byte limit, {} past the age limit; released {}",
        n("dropped_bytes"),
        n("dropped_age"),
        n("released")
    );
    let queues: Vec<String> = h["queues"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|q| q["packets"].as_u64().unwrap_or(0) > 0)
        .map(|q| {
            let link = match q["link"].as_str().unwrap_or("?") {
                "any" => "any".to_string(),
                l => format!("only:{l}"),
            };
            format!(
                "{link} {} ({})",
                q["packets"],
                bytes_text(q["bytes"].as_u64().unwrap_or(0))
            )
        })
        .collect();
    if queues.len() > 1 || queues.iter().any(|q| q.starts_with("only:")) {
        let _ = write!(line, "; queues: {}", queues.join(", "));
    }
    line
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
        assert_eq!(
            lines[4], "counters: {\"handshakes\":1}",
            "no hold line from a daemon without `hold`"
        );
        // The race view is not used for the tunnel, nor the tunnel's for a race (the race
        // view's own tests are beside it, in multihome_race::daemon::status).
        assert!(!text.contains("uplink"));
        let mut with_relays = v.clone();
        with_relays["detours"] = json!({"relays": [
            {"name": "rly", "address": "10.0.80.2:51900", "mode": "nat", "source": "server",
             "leaving": false},
            {"name": "fra", "address": "192.0.2.50:51900", "mode": "tunnel", "source": "config",
             "leaving": true}]});
        let text = render(&with_relays);
        assert_eq!(
            text.lines().nth(1),
            Some(
                "relays: rly 10.0.80.2:51900 nat (server), \
                 fra 192.0.2.50:51900 tunnel (config, leaving)"
            ),
            "{text}"
        );
        let server = json!({"role": "server", "sessions": [], "relays": {"epoch": 2, "list": [
            {"name": "rly", "address": "10.0.80.2:51900", "mode": "nat"}]}});
        assert!(render(&server).contains("\nrelays handed out: rly 10.0.80.2:51900 nat\n"));
        let race = render(&json!({"role": "race", "sessions": []}));
        assert!(race.starts_with("role: race  predictor: ?"), "{race}");
        assert!(!race.contains("session"), "{race}");
    }

    #[test]
    fn policies_and_latest_events() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let events: Vec<Value> = (0..7)
            .map(|i| json!({"unix_ms": now - 7000 + i * 1000, "kind": "link", "text": format!("e{i}")}))
            .collect();
        let v = json!({"role": "client", "counters": {}, "sessions": [],
            "policies": {"default": "aggregate",
                         "rules": [{"name": "voip", "policy": "realtime(150 ms)"}]},
            "events": events});
        let text = render(&v);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[1],
            "policies: voip realtime(150 ms); default aggregate"
        );
        assert_eq!(lines[3], "events (latest 5 of 7):");
        // The oldest shown is e2, about 5 s old; the newest e6, about 1 s.
        let e2: Vec<&str> = lines[4].split_whitespace().collect();
        assert_eq!(e2[1..], ["s", "ago", "link", "e2"]);
        let age: f64 = e2[0].parse().unwrap();
        assert!((4.9..6.0).contains(&age), "{age}");
        assert!(lines[8].ends_with("link      e6"), "{}", lines[8]);
        assert_eq!(lines.len(), 9);
        // A document without events (an older daemon) prints none.
        assert!(!render(&json!({"role": "server"})).contains("events"));
    }

    #[test]
    fn server_resolver_view() {
        let v = json!({
            "role": "server", "counters": {}, "sessions": [],
            "naming": {"store": "etcd", "lookups": 12, "not_found": 2, "publishes": 5,
                "server_lists": 1, "unavailable": 0, "dropped_busy": 0,
                "refused": {"total": 3, "bad_signature": 2, "stale": 1, "unsigned": 0},
                "refused_in_store": {"total": 0},
                "cache": {"records": 40, "revision": 77, "watch_up": true, "relists": 1,
                          "resumes": 2}}
        });
        let text = render(&v);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[1],
            "naming: resolver on etcd store, lookups 12 (not found 2), publishes 5, server lists 1, unavailable 0, dropped 0"
        );
        assert_eq!(
            lines[2],
            "  refused 3 (bad_signature 2, stale 1); refused in store 0"
        );
        assert_eq!(
            lines[3],
            "  cache 40 records at revision 77, watch up, relists 1, resumes 2"
        );
        // The client's line is another one.
        let c = render(&json!({"role": "client", "naming": {"server": "ab", "failovers": 0}}));
        assert!(
            c.contains("naming: server ab at -, record published never"),
            "{c}"
        );
    }

    /// The hold in plain text: what is held, for how long (the daemon's clock minus the
    /// oldest's), the bounds and what they dropped, per queue when an `only:` queue holds.
    #[test]
    fn hold_line_says_what_is_held_for_how_long_and_what_was_dropped() {
        let hold = json!({"packets": 1200, "bytes": 1_700_000, "since_us": 5_000_000,
            "dropped_bytes": 56, "dropped_age": 0, "released": 789,
            "max_bytes": 16u64 << 20, "max_s": 60,
            "queues": [{"link": "any", "packets": 1197, "bytes": 1_695_000},
                       {"link": "wifi", "packets": 3, "bytes": 5000}]});
        let v = json!({"role": "server", "now_us": 17_300_000u64, "counters": {},
            "sessions": [{"session_id": "1", "peer": "home", "established": true,
                          "links": [], "hold": hold}]});
        let text = render(&v);
        let line = text
            .lines()
            .find(|l| l.starts_with("  hold:"))
            .expect(&text);
        assert_eq!(
            line,
            "  hold: 1200 packets (1.7 MB) held for 12.3 s (limits 16 MiB, 60 s); dropped 56 \
             oldest at the byte limit, 0 past the age limit; released 789; queues: any 1197 \
             (1.7 MB), only:wifi 3 (5.0 kB)"
        );
        let empty = json!({"packets": 0, "bytes": 0, "since_us": 0, "dropped_bytes": 0,
            "dropped_age": 2, "released": 0, "queues": []});
        assert_eq!(
            hold_line(&empty, None),
            "  hold: nothing held; dropped 0 oldest at the byte limit, 2 past the age limit; \
             released 0",
            "an older daemon: no limits, no clock"
        );
    }
}
