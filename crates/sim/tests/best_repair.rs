//! `best` repairs what its link loses, end to end in the simulator: one CUBIC upload under
//! `best` over two 60 Mbit/s links (10 and 20 ms), the chosen (faster) one losing 1 % of
//! its frames at random in both directions. The tunnel paces the flow on that link and
//! resends each datagram the link lost (`session/reinject.rs`), so the inner TCP sees
//! (almost) none of those losses and keeps most of the link's rate, where plain TCP on
//! the same link is held to a few Mbit/s; on a clean link `best` keeps plain TCP's rate.

use multihome_sim::runner::run_one;
use multihome_sim::sweep::expand;
use multihome_sim::world::RunReport;
use std::path::Path;

fn scenario(loss: f64, tunnel: bool, cc: &str) -> String {
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
seeds = [1]
[tunnel]
policy = "best"
enabled = {tunnel}
[[links]]
hops = [{}]
[[links]]
hops = [{}]
[[flows]]
kind = "bulk"
direction = "up"
bytes = 100000000
cc = "{cc}"
start = "500ms"
"#,
        hop(10, loss),
        hop(20, 0.0)
    )
}

fn run(loss: f64, tunnel: bool, cc: &str) -> RunReport {
    let runs = expand(toml::from_str(&scenario(loss, tunnel, cc)).unwrap()).unwrap();
    run_one(&runs[0], Path::new(".")).unwrap()
}

/// (Goodput in Mbit/s, inner TCP retransmissions, frames link a lost upstream.)
fn figures(r: &RunReport) -> (f64, u64, u64) {
    let f = &r.flows[0];
    let retx = f.tcp.as_ref().map_or(0, |t| t.retransmits);
    let lost = r
        .hops
        .iter()
        .filter(|h| h.dir == "up")
        .map(|h| h.dropped_loss)
        .sum();
    (f.goodput_mbit, retx, lost)
}

#[test]
fn a_lossy_link_under_best_is_repaired_and_keeps_its_rate() {
    let (plain, plain_retx, _) = figures(&run(0.01, false, "cubic"));
    let r = run(0.01, true, "cubic");
    let (g, retx, lost) = figures(&r);
    let tc = r.tunnel_counters.as_ref().unwrap();
    eprintln!(
        "1 % loss: best {g:.1} Mbit/s ({retx} inner retransmissions, {lost} lost, {} repaired, \
         {} queue drops, {} holes skipped), plain TCP {plain:.1} Mbit/s ({plain_retx} \
         retransmissions)",
        tc.repaired[0], tc.queue_drops[0], tc.reorder[1].skipped_gaps
    );
    assert!(lost > 100, "the link did lose: {lost}");
    assert!(
        tc.repaired[0] * 10 >= lost * 9,
        "{} repaired for {lost} lost",
        tc.repaired[0]
    );
    // What the inner TCP still sees is CoDel's signal and the odd lost repair, not the link's losses.
    assert!(
        retx * 5 <= lost,
        "{retx} inner retransmissions for {lost} lost"
    );
    assert!(
        g >= 40.0,
        "best through a 1 % lossy 60 Mbit/s link: {g:.1} Mbit/s"
    );
    assert!(
        g >= 3.0 * plain,
        "best {g:.1} vs plain TCP {plain:.1} Mbit/s"
    );
}

#[test]
fn a_clean_link_under_best_keeps_plain_tcps_rate() {
    for cc in ["cubic", "newreno"] {
        let (plain, _, _) = figures(&run(0.0, false, cc));
        let (g, retx, _) = figures(&run(0.0, true, cc));
        eprintln!("clean, {cc}: best {g:.1} Mbit/s ({retx} retransmissions), plain {plain:.1}");
        assert!(
            g >= 0.9 * plain,
            "{cc}: best {g:.1} vs plain TCP {plain:.1} Mbit/s"
        );
    }
}
