//! The load generator's phases, run in order; each prints one JSON line on stdout when it
//! starts (`{"event":"start","phase":..}`, so a harness can act at that moment: measure
//! the server's memory, start a flood) and one with its figures when it ends.
//!
//! - `up`: every session joins at once; the time until each is up (handshake done), and
//!   handshakes per second over the whole bring-up.
//! - `idle:S`: no traffic for S seconds (keepalives only).
//! - `steady:S`: every session sends `rate_kbit` of numbered packets for S seconds; after a
//!   drain, loss per session (sent minus received at the sink) and, with echo, the
//!   downstream share that came back.
//! - `churn:S`: the same, while `fraction` of the sessions leave (CLOSE) and join again
//!   with the same key after a second, spread over the first half; a leaving session does
//!   not send while away. Reports how many came back up, how long their join took
//!   (`rejoin_p50_s`, `rejoin_max_s`) and, for each that did not, its endpoint's counters
//!   (`not_back`: cookie replies taken, answers to an older attempt, failed messages).
//! - `roam:S`: the same, while `fraction` of the sessions move link 0 to a new socket
//!   (port, or address with `--roam-base`); their packets keep flowing.
//! - `bulk:S`: the sink sends `bulk_mbit` to each of the first `bulk_sessions` sessions;
//!   goodput from the second second on, and `fraction` of the other sessions churn
//!   meanwhile (a legitimate client joining while the server is loaded).
//!
//! Invariant: a phase's counts are differences of per-session counters taken at its start
//! and after its drain, so phases do not contaminate each other.

use super::session::{self, Cmd, Control};
use super::{RunArgs, Shared};
use anyhow::{bail, Result};
use multihome_proto::crypto::StaticSecret;
use serde_json::{json, Value};
use std::rc::Rc;
use std::time::Duration;

/// Seconds after the senders stop before counting what arrived.
const DRAIN: Duration = Duration::from_secs(2);
/// How long a churning session stays away.
const AWAY: Duration = Duration::from_secs(1);

/// One phase.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Phase {
    /// All sessions join.
    Up,
    /// Quiet.
    Idle(f64),
    /// Steady traffic.
    Steady(f64),
    /// Steady traffic with churn.
    Churn(f64),
    /// Steady traffic with roaming.
    Roam(f64),
    /// Bulk download to some sessions (others churn).
    Bulk(f64),
}

impl Phase {
    fn name(&self) -> &'static str {
        match self {
            Phase::Up => "up",
            Phase::Idle(_) => "idle",
            Phase::Steady(_) => "steady",
            Phase::Churn(_) => "churn",
            Phase::Roam(_) => "roam",
            Phase::Bulk(_) => "bulk",
        }
    }
}

/// Parses `up`, `idle:S`, `steady:S`, `churn:S`, `roam:S`, `bulk:S`, each traffic phase
/// optionally `@KBIT` (its rate per session); the rates come back beside the phases.
pub fn parse(specs: &[String]) -> Result<Vec<(Phase, Option<f64>)>> {
    specs
        .iter()
        .map(|s| {
            let (s, rate) = match s.split_once('@') {
                Some((p, r)) => (
                    p,
                    Some(
                        r.parse::<f64>()
                            .map_err(|_| anyhow::anyhow!("phase `{s}`: rate must be a number"))?,
                    ),
                ),
                None => (s.as_str(), None),
            };
            let (name, secs) = s.split_once(':').unwrap_or((s, "10"));
            let secs: f64 = secs
                .parse()
                .map_err(|_| anyhow::anyhow!("phase `{s}`: seconds must be a number"))?;
            let phase = match name {
                "up" => Phase::Up,
                "idle" => Phase::Idle(secs),
                "steady" => Phase::Steady(secs),
                "churn" => Phase::Churn(secs),
                "roam" => Phase::Roam(secs),
                "bulk" => Phase::Bulk(secs),
                _ => bail!("unknown phase `{name}` (up, idle, steady, churn, roam, bulk)"),
            };
            Ok((phase, rate))
        })
        .collect()
}

fn emit(v: Value) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

/// Runs the phases, then stops every session.
pub async fn run(
    sh: Rc<Shared>,
    keys: Vec<StaticSecret>,
    ctls: Vec<Rc<Control>>,
    phases: Vec<(Phase, Option<f64>)>,
    a: &RunArgs,
) -> Result<()> {
    tokio::task::spawn_local(progress(sh.clone()));
    let t0 = sh.clock.now();
    for (i, ctl) in ctls.iter().enumerate() {
        let task = session::run(sh.clone(), i, keys[i].clone(), ctl.clone());
        tokio::task::spawn_local(task);
    }
    for (k, (p, rate)) in phases.iter().enumerate() {
        let kbit = rate.unwrap_or(a.rate_kbit);
        sh.send_gap.set(super::send_gap(a.packet_bytes, kbit));
        emit(json!({"event": "start", "phase": p.name(), "index": k}));
        let mut v = match *p {
            Phase::Up => up(&sh, t0, a.up_timeout).await,
            Phase::Idle(s) => {
                tokio::time::sleep(Duration::from_secs_f64(s)).await;
                json!({"seconds": s, "up": up_count(&sh)})
            }
            _ => traffic(&sh, &ctls, *p, a.fraction).await,
        };
        v["event"] = "phase".into();
        v["phase"] = p.name().into();
        v["index"] = k.into();
        if !matches!(p, Phase::Up | Phase::Idle(_) | Phase::Bulk(_)) {
            v["rate_kbit"] = kbit.into();
        }
        emit(v);
    }
    for c in &ctls {
        c.send(Cmd::Stop);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    emit(json!({
        "event": "summary",
        "sessions": sh.plan.sessions,
        "errors": sh.errors(),
        "sink_send_errors": sh.sink.send_errors.load(std::sync::atomic::Ordering::Relaxed),
        "send_errors": sh.counters.borrow().iter().map(|c| c.send_errors).sum::<u64>(),
    }));
    Ok(())
}

fn up_count(sh: &Shared) -> usize {
    sh.counters
        .borrow()
        .iter()
        .filter(|c| c.up_at.is_some())
        .count()
}

/// Waits until every session is up (or `timeout` s); times from `t0`.
async fn up(sh: &Shared, t0: multihome_proto::Instant, timeout: f64) -> Value {
    let n = sh.plan.sessions;
    let deadline = t0 + Duration::from_secs_f64(timeout);
    while up_count(sh) < n && sh.clock.now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let c = sh.counters.borrow();
    let mut times: Vec<f64> = c
        .iter()
        .filter_map(|c| Some(c.up_at?.saturating_since(t0).as_secs_f64()))
        .collect();
    times.sort_by(f64::total_cmp);
    let q = |p: f64| {
        times
            .get(((times.len() as f64 - 1.0) * p).round() as usize)
            .copied()
    };
    let all = q(1.0);
    json!({
        "sessions": n, "up": times.len(),
        "all_up_s": if times.len() == n { all } else { None },
        "p50_s": q(0.5), "p99_s": q(0.99), "max_s": all,
        "handshakes_per_s": all.map(|t| times.len() as f64 / t.max(1e-3)),
    })
}

/// Per-session counters at one moment.
#[derive(Clone, Copy, Default)]
struct Snap {
    sent: u64,
    received: u64,
    echoed: u64,
    bulk_bytes: u64,
    ups: u32,
    roams: u32,
    /// Handshakes of the current join's endpoint (rekeys, re-handshakes after all paths
    /// went down).
    handshakes: u64,
}

fn snap(sh: &Shared) -> Vec<Snap> {
    let (c, s) = (sh.counters.borrow(), sh.sink.counts());
    c.iter()
        .zip(s.iter())
        .map(|(c, s)| Snap {
            sent: c.sent,
            received: s.received,
            echoed: c.echoed,
            bulk_bytes: c.bulk_bytes,
            ups: c.ups,
            roams: c.roams,
            handshakes: c.client.handshakes,
        })
        .collect()
}

/// The sessions a churn or roam acts on: `fraction` of those from `first` on, spread.
fn chosen(n: usize, first: usize, fraction: f64) -> Vec<usize> {
    let pool = n.saturating_sub(first);
    let m = ((pool as f64 * fraction).round() as usize).min(pool);
    (0..m).map(|k| first + k * pool / m.max(1)).collect()
}

/// Gives `cmd` to each of `who`, evenly over `over`.
async fn command_spread(ctls: Vec<Rc<Control>>, who: Vec<usize>, cmd: Cmd, over: Duration) {
    let step = over / who.len().max(1) as u32;
    for i in who {
        ctls[i].send(cmd);
        tokio::time::sleep(step).await;
    }
}

/// A phase with traffic: steady, churn, roam or bulk.
async fn traffic(sh: &Shared, ctls: &[Rc<Control>], p: Phase, fraction: f64) -> Value {
    let (secs, n) = match p {
        Phase::Steady(s) | Phase::Churn(s) | Phase::Roam(s) | Phase::Bulk(s) => {
            (s, sh.plan.sessions)
        }
        _ => return json!({}),
    };
    let bulk = matches!(p, Phase::Bulk(_));
    let first = if bulk {
        sh.plan.bulk_sessions.min(n)
    } else {
        0
    };
    let who = match p {
        Phase::Churn(_) | Phase::Roam(_) | Phase::Bulk(_) => chosen(n, first, fraction),
        _ => Vec::new(),
    };
    let cmd = if matches!(p, Phase::Roam(_)) {
        Cmd::Roam
    } else {
        Cmd::Leave(AWAY)
    };
    let before = snap(sh);
    sh.sending.set(!bulk);
    sh.sink.set_bulk(bulk);
    let half = Duration::from_secs_f64(secs / 2.0);
    tokio::task::spawn_local(command_spread(ctls.to_vec(), who.clone(), cmd, half));
    // Bulk goodput is taken from the second second on (the first fills the queues).
    let warm = Duration::from_secs_f64(secs.min(1.0));
    tokio::time::sleep(warm).await;
    let (b0, t1) = (snap(sh), sh.clock.now());
    tokio::time::sleep(Duration::from_secs_f64(secs) - warm).await;
    let (b1, t2) = (snap(sh), sh.clock.now());
    sh.sending.set(false);
    sh.sink.set_bulk(false);
    tokio::time::sleep(DRAIN).await;
    let after = snap(sh);
    let mut v = loss_report(&before, &after, &who);
    if !sh.plan.echo {
        v["echoed"] = Value::Null;
        v["echo_loss_pct"] = Value::Null;
    }
    v["seconds"] = secs.into();
    v["acted_on"] = who.len().into();
    let back = |i: usize| {
        (after[i].ups > before[i].ups || after[i].roams > before[i].roams)
            && sh.counters.borrow()[i].up_at.is_some()
    };
    v["back_up"] = who.iter().filter(|&&i| back(i)).count().into();
    // Sessions left alone that handshook again: every path went down for twice the
    // detection time (or a rekey came due), in service or not.
    v["others_rehandshook"] = (0..n)
        .filter(|i| !who.contains(i) && after[*i].handshakes > before[*i].handshakes)
        .count()
        .into();
    v["up_at_end"] = up_count(sh).into();
    if !matches!(p, Phase::Roam(_)) {
        rejoin_report(&mut v, sh, &who, back);
    }
    if bulk {
        let bytes: u64 = (0..first)
            .map(|i| b1[i].bulk_bytes - b0[i].bulk_bytes)
            .sum();
        let dt = t2.saturating_since(t1).as_secs_f64().max(1e-3);
        v["bulk_sessions"] = first.into();
        v["bulk_goodput_mbit"] = (bytes as f64 * 8.0 / dt / 1e6).into();
        v["bulk_offered_mbit"] =
            (first as f64 * sh.plan.bulk_bytes as f64 * 8.0 / sh.plan.bulk_gap.as_secs_f64() / 1e6)
                .into();
    }
    v
}

/// How long the re-joins took (join to up, of those back), and what the endpoint of each
/// session that did not come back saw: cookie replies taken, answers to an older attempt
/// (`rx_unknown_index`), handshake messages that failed.
fn rejoin_report(v: &mut Value, sh: &Shared, who: &[usize], back: impl Fn(usize) -> bool) {
    let c = sh.counters.borrow();
    let now = sh.clock.now();
    let mut took: Vec<f64> = who
        .iter()
        .filter(|&&i| back(i))
        .filter_map(|&i| Some(c[i].up_at?.saturating_since(c[i].joined_at?).as_secs_f64()))
        .collect();
    took.sort_by(f64::total_cmp);
    v["rejoin_p50_s"] = took.get(took.len() / 2).copied().into();
    v["rejoin_max_s"] = took.last().copied().into();
    let missing: Vec<Value> = who
        .iter()
        .filter(|&&i| !back(i))
        .map(|&i| {
            let e = &c[i].client;
            json!({
                "session": i,
                "joined_s_ago": c[i].joined_at.map(|t| now.saturating_since(t).as_secs_f64()),
                "rx_cookie_replies": e.rx_cookie_replies,
                "rx_unknown_index": e.rx_unknown_index,
                "rx_handshake_failed": e.rx_handshake_failed,
                "send_errors": c[i].send_errors,
            })
        })
        .collect();
    v["not_back"] = missing.into();
}

/// Loss figures between two snapshots; `acted` (churned/roamed) also reported apart.
fn loss_report(before: &[Snap], after: &[Snap], acted: &[usize]) -> Value {
    let (mut sent, mut received, mut echoed) = (0u64, 0u64, 0u64);
    let (mut lossy, mut worst) = (0usize, 0.0f64);
    let (mut acted_sent, mut acted_lost) = (0u64, 0u64);
    for (i, (b, a)) in before.iter().zip(after).enumerate() {
        let s = a.sent - b.sent;
        let r = (a.received - b.received).min(s);
        sent += s;
        received += r;
        echoed += a.echoed - b.echoed;
        if r < s {
            lossy += 1;
            worst = worst.max((s - r) as f64 / s as f64 * 100.0);
        }
        if acted.contains(&i) {
            acted_sent += s;
            acted_lost += s - r;
        }
    }
    let pct = |lost: u64, of: u64| {
        if of == 0 {
            0.0
        } else {
            lost as f64 / of as f64 * 100.0
        }
    };
    json!({
        "sent": sent, "received": received, "loss_pct": pct(sent - received, sent),
        "sessions_with_loss": lossy, "worst_session_loss_pct": worst,
        "echoed": echoed, "echo_loss_pct": pct(received.saturating_sub(echoed), received),
        "acted_sent": acted_sent, "acted_loss_pct": pct(acted_lost, acted_sent),
    })
}

/// Prints a progress line on stderr every two seconds.
async fn progress(sh: Rc<Shared>) {
    let t0 = sh.clock.now();
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let s = snap(&sh);
        let sum = |f: fn(&Snap) -> u64| s.iter().map(f).sum::<u64>();
        eprintln!(
            "loadgen {:6.1}s: up {}/{} sent {} received {} echoed {} bulk {:.1} MB",
            sh.clock.now().saturating_since(t0).as_secs_f64(),
            up_count(&sh),
            s.len(),
            sum(|x| x.sent),
            sum(|x| x.received),
            sum(|x| x.echoed),
            sum(|x| x.bulk_bytes) as f64 / 1e6,
        );
    }
}
