//! The racing gateway's status document (JSON on the control socket): per uplink attempts,
//! wins, chosen, refusals, timeouts, failures, UDP flows and the predictor's state (AvMet's
//! weights and `curbest`, probe ETTs); SYNs held now, waiting for their client, refused.
//!
//! It carries `role`, `counters` and an empty `sessions` list so `multihome status`'s
//! generic printer shows something sensible; `--json` gives everything. [`render`] is the
//! text view `multihome status` prints for a document whose role is `race`.
//!
//! Each uplink also shows its interface's kernel state and byte counters (`state`,
//! `tx_bytes`, `rx_bytes`: what the uplink carried, relayed, NATed or routed), which the
//! dashboard plots ([`snapshot`]).
//!
//! This module only reads the state ([`super::state`]); the event loop owns it and hands
//! the document to the control socket and the dashboard. Invariant: the text view is a pure function of the
//! document and never fails on a missing or mistyped field (shown as `-`), so a newer
//! `status` still reads an older daemon.

use super::state::Shared;
use multihome_runtime::dashboard::{EventKind, LinkSample, Mark, Snapshot};
use serde_json::{json, Value};
use std::fmt::Write as _;

/// The document for the current state.
pub fn document(sh: &Shared) -> Value {
    let st = sh.gw.borrow().status();
    let wins = st.global.wins();
    let uplinks: Vec<Value> = st
        .uplinks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let u = &sh.settings.uplinks[i];
            let ett = st.global.ett()[i];
            let (state, tx, rx) = interface_stats(&u.interface);
            json!({
                "name": u.name,
                "interface": u.interface,
                "state": state,
                "tx_bytes": tx,
                "rx_bytes": rx,
                "address": sh.addrs[i].v4.or(sh.addrs[i].v6).map(|a| a.to_string()),
                "attempts": c.attempts,
                "wins": c.wins,
                "chosen": c.chosen,
                "refusals": c.refusals,
                "timeouts": c.timeouts,
                "failures": c.failures,
                "abandoned": c.abandoned,
                "udp_flows": c.udp_flows,
                "avmet_weight": wins.weights()[i],
                "ett_ms": ett.ett_us().map(|v| v / 1e3),
                "probe_delivery": ett.delivery(),
                "probe_srtt_ms": ett.srtt().as_secs_f64() * 1e3,
                "probe_replies": c.probe_replies,
                "probe_losses": c.probe_losses,
            })
        })
        .collect();
    let (up, down) = sh.relayed.get();
    let hold = sh.hold.borrow();
    let (held, admitted) = hold.counts();
    let counters = json!({
        "races_chosen": st.races.0,
        "races_refused": st.races.1,
        "races_failed": st.races.2,
        "busy_refusals": st.busy_refusals + hold.busy(),
        "syns_held": held,
        "syns_admitted": admitted,
        "unheld_connections": sh.unheld.get(),
        "active": st.active,
        "relaying": sh.relaying.get(),
        "relayed_up_bytes": up,
        "relayed_down_bytes": down,
        "nat_handed": sh.nat.as_ref().map_or(0, |n| n.handed.get()),
    });
    json!({
        "role": "race",
        "mode": match sh.settings.mode {
            super::config::Mode::Proxy => "proxy",
            super::config::Mode::Nat => "nat",
        },
        "predictor": st.predictor,
        "best": sh.settings.uplinks[st.best.index()].name,
        "max_connections": st.max_connections,
        "destinations": st.destinations,
        "avmet": {"alpha": wins.alpha(), "curbest": wins.curbest(), "samples": wins.samples()},
        "uplinks": uplinks,
        "counters": counters,
        "policies": policies(sh, st.predictor),
        "sessions": [],
    })
}

/// The gateway's flow classes, in the shape the tunnel's `policies` has (the dashboard
/// draws both): by default every new TCP connection is raced over every uplink and a UDP
/// flow gets the predictor's best; each DSCP pin sends its connections and flows over one
/// uplink, unraced.
fn policies(sh: &Shared, predictor: &str) -> Value {
    let rules: Vec<Value> = sh
        .settings
        .gateway
        .dscp_pins
        .iter()
        .map(|(dscp, uplink)| {
            json!({
                "name": format!("dscp {dscp}"),
                "dscp": dscp,
                "policy": format!("only:{}", sh.settings.uplinks[uplink.index()].name),
            })
        })
        .collect();
    json!({
        "default": format!("race every uplink, keep the {predictor} pick (UDP: its best)"),
        "rules": rules,
    })
}

/// The kernel's view of an interface: `up` or `down` (`operstate`; `unknown`, as tunnels
/// without carrier report it, counts as up) and its byte counters.
fn interface_stats(ifname: &str) -> (&'static str, Option<u64>, Option<u64>) {
    let dir = std::path::Path::new("/sys/class/net").join(ifname);
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    let num = |f: &str| read(f).and_then(|s| s.trim().parse().ok());
    let state = match read("operstate").as_deref().map(str::trim) {
        None | Some("down" | "lowerlayerdown" | "notpresent") => "down",
        Some(_) => "up",
    };
    (
        state,
        num("statistics/tx_bytes"),
        num("statistics/rx_bytes"),
    )
}

/// What the dashboard reads from a race document: each uplink as a link (interface
/// counters; RTT and loss from the probes, when they run) and the refusals as events.
pub fn snapshot(doc: &Value) -> Snapshot {
    let mut snap = Snapshot::default();
    for u in doc["uplinks"].as_array().into_iter().flatten() {
        let name = u["name"].as_str().unwrap_or("?").to_string();
        let probed = u["probe_replies"].as_u64().unwrap_or(0) > 0;
        snap.links.push(LinkSample {
            session: "uplinks".into(),
            link: name.clone(),
            state: u["state"].as_str().unwrap_or("down").to_string(),
            tx_bytes: u["tx_bytes"].as_u64(),
            rx_bytes: u["rx_bytes"].as_u64(),
            rtt_ms: u["probe_srtt_ms"].as_f64().filter(|_| probed),
            loss: u["probe_delivery"].as_f64().map(|d| 1.0 - d),
        });
        if let Some(n) = u["refusals"].as_u64() {
            let label = format!("connections refused over {name}");
            snap.marks.push(Mark {
                kind: EventKind::Refusal,
                label,
                count: n,
            });
        }
    }
    let c = &doc["counters"];
    for (k, label) in [
        ("races_refused", "races refused on every uplink"),
        ("busy_refusals", "connections refused: gateway busy"),
    ] {
        if let Some(n) = c[k].as_u64() {
            snap.marks.push(Mark {
                kind: EventKind::Refusal,
                label: label.into(),
                count: n,
            });
        }
    }
    snap
}

/// The text view of a race document: predictor, one row per uplink with its race counters
/// and AvMet weight, probe figures when probes ran, then the gateway's counters.
pub fn render(v: &Value) -> String {
    let mut out = String::new();
    header(&mut out, v);
    let uplinks: Vec<&Value> = v["uplinks"].as_array().into_iter().flatten().collect();
    uplink_table(&mut out, &uplinks);
    probe_table(&mut out, &uplinks);
    counter_lines(&mut out, &v["counters"]);
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

/// A string field, or `?` when absent.
fn name(v: &Value) -> String {
    v.as_str().unwrap_or("?").to_string()
}

// Writing to a String cannot fail: the `fmt::Result`s below are ignored.

/// The role line, AvMet's state and the count of per-destination predictors.
fn header(o: &mut String, v: &Value) {
    let c = &v["counters"];
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
}

/// One row per uplink: its race counters and AvMet weight.
fn uplink_table(o: &mut String, uplinks: &[&Value]) {
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
    for u in uplinks {
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
}

/// The probes' figures per uplink. Probes run only with probe_target set: no table of
/// zeros otherwise.
fn probe_table(o: &mut String, uplinks: &[&Value]) {
    let probed = |u: &&Value| {
        u["probe_replies"].as_u64().unwrap_or(0) + u["probe_losses"].as_u64().unwrap_or(0) > 0
    };
    if !uplinks.iter().any(probed) {
        return;
    }
    let _ = writeln!(
        o,
        "  {:<10} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "probes", "replies", "losses", "delivery", "srtt_ms", "ett_ms",
    );
    for u in uplinks {
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

/// The gateway's counters: races, held SYNs, bytes relayed.
fn counter_lines(o: &mut String, c: &Value) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A document as [`document`] builds it: two uplinks, AvMet, probes on.
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
}
