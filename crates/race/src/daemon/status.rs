//! The racing gateway's status document (JSON on the control socket): per uplink attempts,
//! wins, chosen, refusals, timeouts, failures, UDP flows and the predictor's state (AvMet's
//! weights and `curbest`, probe ETTs); SYNs held now, waiting for their client, refused.
//!
//! It carries `role`, `counters` and an empty `sessions` list so `multihome status`'s
//! generic printer shows something sensible; `--json` gives everything.

use super::state::Shared;
use serde_json::{json, Value};

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
            json!({
                "name": u.name,
                "interface": u.interface,
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
    });
    json!({
        "role": "race",
        "predictor": st.predictor,
        "best": sh.settings.uplinks[st.best.index()].name,
        "max_connections": st.max_connections,
        "destinations": st.destinations,
        "avmet": {"alpha": wins.alpha(), "curbest": wins.curbest(), "samples": wins.samples()},
        "uplinks": uplinks,
        "counters": counters,
        "sessions": [],
    })
}
