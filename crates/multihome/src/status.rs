//! Status: the JSON document served on the control socket (and as `/api/status` by the
//! dashboard: one document, docs/API.md), and the `status` command that fetches it from
//! either and prints it as JSON or as text: the tunnel's sessions, links, flow classes and
//! latest events, or the racing gateway's per-uplink table (its document and text view are
//! `multihome_race::daemon::status`).
//!
//! The text view is `status_text.rs` ([`render`]).

pub use crate::status_text::{render, REFUSAL_REASONS};
use anyhow::{Context, Result};
use multihome_proto::endpoint::{Client, EndpointCounters, Server};
use multihome_proto::path::PathId;
use multihome_proto::policy::{Classifier, Policy};
use multihome_proto::session::Session;
use multihome_runtime::dashboard::{LinkSample, Snapshot};
use serde_json::{json, Value};
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
        "rx_bad_mac1": c.rx_bad_mac1,
        "tx_cookie_replies": c.tx_cookie_replies,
        "rx_cookie_replies": c.rx_cookie_replies,
        "rx_handshake_rate_limited": c.rx_handshake_rate_limited,
        "rx_before_response": c.rx_before_response,
        "handed_off": c.handed_off,
        "handoff_drops": c.handoff_drops,
        "tx_no_route": c.tx_no_route,
        "queue_drops": sc.queue_drops,
        "codel_drops": q.codel,
        "queue_overflow_drops": q.overflow,
        "no_key_drops": sc.no_key_drops,
        "tx_compressed": sc.tx_compressed,
        "rx_decompress_errors": sc.rx_decompress_errors,
        "reinjected": sc.reinjected,
        "repaired": sc.repaired,
        "tail_probes": sc.tail_probes,
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
                "standby": v.standby,
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

/// What the dashboard samples of a server once a second, built without the status
/// document (the same as `dashboard::snapshot` of it, which the driver test checks): at
/// 10 000 sessions the document's JSON values, built and merged every second, were most
/// of the server's heap.
pub fn server_snapshot(s: &Server) -> Snapshot {
    let mut snap = Snapshot::default();
    let (mut unauthenticated, mut replayed) = (0, 0);
    for p in s.peers() {
        let Some(sess) = p.session else { continue };
        let sc = sess.counters();
        unauthenticated += sc.rx_unauthenticated;
        replayed += sc.rx_replayed;
        let links = sess.paths().map(|path| {
            let (c, v) = (path.counters(), path.view(multihome_proto::Instant::ZERO));
            LinkSample {
                session: p.config.name.clone(),
                link: path.id().0.to_string(),
                state: path.state().as_str().to_string(),
                tx_bytes: Some(c.tx_bytes),
                rx_bytes: Some(c.rx_bytes),
                rtt_ms: Some(v.srtt.as_secs_f64() * 1e3),
                loss: Some(v.loss),
            }
        });
        let refused = Some(sess.stated_stats().refused);
        crate::dashboard::push_session(&mut snap, &p.config.name, true, links, refused);
    }
    let mut counters = counters_json(&s.counters(), None);
    counters["rx_unauthenticated"] = unauthenticated.into();
    counters["rx_replayed"] = replayed.into();
    crate::dashboard::push_counter_marks(&mut snap, &counters);
    snap
}

/// The whole server's document from its threads' ([`server_status`] of each shard; the
/// first is the primary's): the sessions of all, counters summed, the relays as the
/// primary hands them out (every thread hands out the same list). With several threads the
/// sessions are listed by peer name: which thread holds a peer follows its key, so their
/// order would otherwise change from one start to the next.
pub fn merge_server_status(docs: Vec<Value>) -> Value {
    let several = docs.len() > 1;
    let mut docs = docs.into_iter();
    let Some(mut all) = docs.next() else {
        return json!({"role": "server", "counters": {}, "sessions": []});
    };
    for d in docs {
        if let (Some(sum), Some(add)) = (all["counters"].as_object_mut(), d["counters"].as_object())
        {
            for (k, v) in add {
                let total = sum.get(k).and_then(Value::as_u64).zip(v.as_u64());
                if let Some((a, b)) = total {
                    sum.insert(k.clone(), json!(a + b));
                }
            }
        }
        if let (Some(s), Some(add)) = (all["sessions"].as_array_mut(), d["sessions"].as_array()) {
            s.extend(add.iter().cloned());
        }
    }
    if let Some(s) = all["sessions"].as_array_mut().filter(|_| several) {
        s.sort_by(|a, b| a["peer"].as_str().cmp(&b["peer"].as_str()));
    }
    all
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

/// Fetches the status document from a control socket.
pub fn fetch(socket: &PathBuf) -> Result<Value> {
    fetch_request(socket, "status")
}

/// Fetches the dashboard's sample of the status document (the `sample` request: sessions
/// and their links, counters; what a once-a-second poller needs).
pub fn fetch_sample(socket: &PathBuf) -> Result<Value> {
    fetch_request(socket, "sample")
}

fn fetch_request(socket: &PathBuf, request: &str) -> Result<Value> {
    let mut s = UnixStream::connect(socket).with_context(|| {
        format!(
            "connecting to {} (is the daemon running? try --socket)",
            socket.display()
        )
    })?;
    s.write_all(format!("{request}\n").as_bytes())?;
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
