//! `best` repairs what its link loses, end to end in the simulator: one CUBIC upload under
//! `best` over two 60 Mbit/s links (10 and 20 ms), the chosen (faster) one losing 1 % of
//! its frames at random in both directions. The tunnel paces the flow on that link and
//! resends each datagram the link lost (`session/reinject.rs`), so the inner TCP sees
//! (almost) none of those losses and keeps most of the link's rate, where plain TCP on
//! the same link is held to a few Mbit/s, uploads and downloads alike (the server paces
//! the flow it learnt as `best`); on a clean link `best` keeps plain TCP's rate.

use multihome_sim::runner::run_one;
use multihome_sim::sweep::expand;
use multihome_sim::world::RunReport;
use std::path::Path;

fn scenario(policy: &str, loss: f64, tunnel: bool, cc: &str, dir: &str, seeds: &str) -> String {
    let hop = |delay: u32, loss: f64| {
        format!(
            "{{ both = {{ rate = \"60mbit\", delay = \"{delay}ms\", loss = {loss}, \
             queue_bytes = 375000 }} }}"
        )
    };
    format!(
        r#"
name = "best_repair"
duration = "8s"
seeds = [{seeds}]
[tunnel]
policy = "{policy}"
enabled = {tunnel}
[[links]]
hops = [{}]
[[links]]
hops = [{}]
[[flows]]
kind = "bulk"
direction = "{dir}"
bytes = 100000000
cc = "{cc}"
start = "500ms"
"#,
        hop(10, loss),
        hop(20, 0.0)
    )
}

fn run(loss: f64, tunnel: bool, cc: &str, dir: &str) -> RunReport {
    runs_of("best", loss, tunnel, (cc, dir), "1").remove(0)
}

fn runs_of(
    policy: &str,
    loss: f64,
    tunnel: bool,
    (cc, dir): (&str, &str),
    seeds: &str,
) -> Vec<RunReport> {
    let scn = scenario(policy, loss, tunnel, cc, dir, seeds);
    let runs = expand(toml::from_str(&scn).unwrap()).unwrap();
    runs.iter()
        .map(|r| run_one(r, Path::new(".")).unwrap())
        .collect()
}

/// Seeds of the lossy runs. The outcome is bimodal: a repair lost in its turn (1 % of
/// some 330) can outlast the receiver's hold, and the inner TCP then sees a loss event —
/// 50–180 retransmissions in that run instead of 1–4, in one or two seeds of five, at
/// every revision tried. So the bounds on retransmissions and goodput hold for the
/// median run; the repair count holds for every run.
const LOSSY_SEEDS: &str = "1, 2, 3, 4, 5";

/// Checks the lossy runs of `what` (the data's direction `dir`, sent by tunnel side
/// `side`) against plain TCP's `plain` Mbit/s.
fn check_lossy(what: &str, dir: &str, side: usize, plain: f64, runs: &[RunReport]) {
    let mut figs: Vec<(f64, u64, u64)> = Vec::new();
    for r in runs {
        let (g, retx, lost) = figures(r, dir);
        let repaired = r.tunnel_counters.as_ref().unwrap().repaired[side];
        eprintln!(
            "{what}, 1 % loss: {g:.1} Mbit/s ({retx} inner retransmissions, {lost} lost, \
             {repaired} repaired), plain TCP {plain:.1} Mbit/s"
        );
        assert!(lost > 100, "{what}: the link did lose: {lost}");
        assert!(
            repaired * 10 >= lost * 9,
            "{what}: {repaired} repaired for {lost} lost"
        );
        figs.push((g, retx, lost));
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    // What the inner TCP still sees is CoDel's signal and the odd lost repair, not the
    // link's losses.
    let ratio = median(figs.iter().map(|f| f.1 as f64 / f.2 as f64).collect());
    assert!(
        ratio <= 0.2,
        "{what}: median {ratio:.2} inner retransmissions per loss"
    );
    let g = median(figs.iter().map(|f| f.0).collect());
    assert!(
        g >= 40.0,
        "{what}: median {g:.1} Mbit/s through a 1 % lossy 60 Mbit/s link"
    );
    assert!(
        g >= 3.0 * plain,
        "{what}: median {g:.1} vs plain TCP {plain:.1} Mbit/s"
    );
}

/// (Goodput in Mbit/s, inner TCP retransmissions, frames link a lost in the data's
/// direction `dir`.)
fn figures(r: &RunReport, dir: &str) -> (f64, u64, u64) {
    let f = &r.flows[0];
    let retx = f.tcp.as_ref().map_or(0, |t| t.retransmits);
    let lost = r
        .hops
        .iter()
        .filter(|h| h.dir == dir)
        .map(|h| h.dropped_loss)
        .sum();
    (f.goodput_mbit, retx, lost)
}

#[test]
fn a_lossy_link_under_best_is_repaired_and_keeps_its_rate() {
    // Index of the sending side in the tunnel counters: the client uploads, the server
    // downloads.
    for (dir, side) in [("up", 0), ("down", 1)] {
        let (plain, plain_retx, _) = figures(&run(0.01, false, "cubic", dir), dir);
        eprintln!("{dir}: plain TCP {plain:.1} Mbit/s ({plain_retx} retransmissions)");
        let runs = runs_of("best", 0.01, true, ("cubic", dir), LOSSY_SEEDS);
        check_lossy(&format!("best {dir}"), dir, side, plain, &runs);
    }
}

#[test]
fn a_clean_link_under_best_keeps_plain_tcps_rate() {
    for cc in ["cubic", "newreno"] {
        let (plain, _, _) = figures(&run(0.0, false, cc, "up"), "up");
        let (g, retx, _) = figures(&run(0.0, true, cc, "up"), "up");
        eprintln!("clean, {cc}: best {g:.1} Mbit/s ({retx} retransmissions), plain {plain:.1}");
        assert!(
            g >= 0.9 * plain,
            "{cc}: best {g:.1} vs plain TCP {plain:.1} Mbit/s"
        );
    }
}

/// Link policies carry TCP as `best` does (`session/link_queues.rs`): paced on the link
/// their rule picks and repaired there. Each rule here puts the flow on the lossy link 0:
/// `only:0` and `prefer:0` name it, `backup:1` keeps link 1 for when 0 is not up.
#[test]
fn a_lossy_link_under_a_link_policy_is_repaired_and_keeps_its_rate() {
    let (plain, _, _) = figures(&run(0.01, false, "cubic", "up"), "up");
    for (policy, dir, side) in [
        ("only:0", "up", 0),
        ("prefer:0", "up", 0),
        ("backup:1", "up", 0),
        ("prefer:0", "down", 1),
    ] {
        let runs = runs_of(policy, 0.01, true, ("cubic", dir), LOSSY_SEEDS);
        check_lossy(&format!("{policy} {dir}"), dir, side, plain, &runs);
    }
}
