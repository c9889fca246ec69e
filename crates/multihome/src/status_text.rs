//! The plain-text view of a status document (`multihome status` without `--json`): the
//! tunnel's sessions, links, store-and-forward, flow classes, relays, name service and
//! latest events, or the racing gateway's per-uplink table.
//!
//! Invariant: the view is a pure function of the document ([`render`]) and never fails on
//! a missing or mistyped field (shown as `-`), so a newer `status` still reads an older
//! daemon.

use serde_json::Value;
use std::fmt::Write as _;

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
    if v["stream"].is_object() {
        let _ = writeln!(o, "{}", stream_line(&v["stream"]));
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

/// Stream mode's counters on one line (docs/STREAM.md).
fn stream_line(s: &Value) -> String {
    let n = |k: &str| s[k].as_u64().unwrap_or(0);
    format!(
        "stream: {} active, {} connected ({} closed, {} reset), {} refused, {} failed, {} over limit; {} up, {} down; {} subflows added",
        n("active"),
        n("connected"),
        n("closed"),
        n("reset"),
        n("refused"),
        n("failed"),
        n("over_limit"),
        bytes_text(n("bytes_up")),
        bytes_text(n("bytes_down")),
        n("subflows"),
    )
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
    use serde_json::json;

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
    fn stream_counters_line() {
        let t = render(
            &json!({"role": "client", "stream": {"active": 2, "connected": 5,
            "closed": 2, "reset": 1, "refused": 1, "bytes_up": 3_000_000, "subflows": 5}}),
        );
        assert!(
            t.contains("stream: 2 active, 5 connected (2 closed, 1 reset), 1 refused, 0 failed"),
            "{t}"
        );
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
