//! One CUBIC upload under `aggregate` over three links (30 Mbit/s 5 ms, 20 Mbit/s 20 ms,
//! 10 Mbit/s 60 ms one way) where the fastest loses in bursts: Gilbert-Elliott, 4 % chance
//! per frame of entering the bad state and 33 % of leaving it (bursts of 3 frames on
//! average), every frame lost while bad: 10.8 % mean loss.
//!
//! - Losses of the data direction alone are repaired below the inner TCP: the flow keeps
//!   most of the three links' rate.
//! - With the feedback direction losing too (a lossy Wi-Fi loses both ways), the flow
//!   falls far below what the two clean links carry alone: a known gap. Measured (seeds
//!   1-4): 11.1 / 8.4 / 10.8 / 13.4 Mbit/s, against 7.2-9.0 before NACKs were copied on
//!   the other paths (`Path::nack_echo`). What is left: holes the reorder buffer still gives
//!   up on (3-15 a run), and the lossy link turning `Suspect` when a burst takes its ACKs
//!   for 100 ms, whose reinjection the inner TCP sees as a loss event (50-200
//!   retransmissions); after each, CUBIC regrows from a small window for seconds.
//!
//! Bounds use the header ceiling: a link of rate R carries at most R · MSS / frame of TCP
//! payload through the tunnel.

use multihome_proto::wire::OVERHEAD_BYTES;
use multihome_sim::packet::TCP_HEADERS;
use multihome_sim::runner::run_one;
use multihome_sim::scenario::DEFAULT_TUN_MTU;
use multihome_sim::sweep::expand;
use multihome_sim::world::{RunReport, FRAME_HEADER, OUTER_HEADERS};
use std::path::Path;

/// Share of a link's rate the inner TCP's payload can be (see `changing_links.rs`).
fn ceiling() -> f64 {
    let mss = (DEFAULT_TUN_MTU - TCP_HEADERS) as f64;
    let frame = (DEFAULT_TUN_MTU + OVERHEAD_BYTES) as f64 + (OUTER_HEADERS + FRAME_HEADER) as f64;
    mss / frame
}

/// The three links, link 0 losing in bursts in direction `dir` (`up`, `down` or both).
fn scenario(dirs: &[&str], seed: u64) -> String {
    let ge = "loss = { p = 0.04, r = 0.33, loss_bad = 1.0, loss_good = 0.0 }";
    let lossy: String = dirs.iter().map(|d| format!(", {d} = {{ {ge} }}")).collect();
    format!(
        r#"
name = "bursty_loss"
duration = "20s"
seeds = [{seed}]
[tunnel]
policy = "aggregate"
[[links]]
hops = [{{ both = {{ rate = "30mbit", delay = "5ms", queue_bytes = 187500 }}{lossy} }}]
[[links]]
hops = [{{ both = {{ rate = "20mbit", delay = "20ms", queue_bytes = 125000 }} }}]
[[links]]
hops = [{{ both = {{ rate = "10mbit", delay = "60ms", queue_bytes = 62500 }} }}]
[[flows]]
kind = "bulk"
direction = "up"
cc = "cubic"
start = "500ms"
"#
    )
}

fn run(dirs: &[&str], seed: u64) -> RunReport {
    let runs = expand(toml::from_str(&scenario(dirs, seed)).unwrap()).unwrap();
    run_one(&runs[0], Path::new(".")).unwrap()
}

/// (Goodput in Mbit/s, inner TCP retransmissions, frames link 0 lost upstream.)
fn figures(r: &RunReport) -> (f64, u64, u64) {
    let f = &r.flows[0];
    let retx = f.tcp.as_ref().map_or(0, |t| t.retransmits);
    let lost = r
        .hops
        .iter()
        .filter(|h| h.dir == "up" && h.link == 0)
        .map(|h| h.dropped_loss)
        .sum();
    (f.goodput_mbit, retx, lost)
}

/// Measured: 40.7 Mbit/s (0.74 of the three links' ceiling), 4 349 of 4 371 lost frames
/// repaired; 878 inner retransmissions, most of them one loss event (a hole given up).
#[test]
fn bursty_losses_of_the_data_direction_are_repaired() {
    let r = run(&["up"], 1);
    let (g, retx, lost) = figures(&r);
    let repaired = r.tunnel_counters.as_ref().unwrap().repaired[0];
    eprintln!(
        "bursty up: {g:.1} Mbit/s, {retx} inner retransmissions, {lost} lost, {repaired} repaired"
    );
    assert!(lost > 1000, "the link did lose in bursts: {lost}");
    assert!(
        repaired * 10 >= lost * 9,
        "{repaired} repaired for {lost} lost"
    );
    // The three links' ceiling less the lossy link's 10.8 % (resent) and the run's start
    // (CUBIC's slow start takes about 2 s of the 19.5), with room for one loss event.
    let bound = 0.65 * 60.0 * ceiling();
    assert!(g >= bound, "{g:.1} Mbit/s, below {bound:.1}");
}

#[test]
#[ignore = "known gap: a link losing in bursts both ways drags the flow below the clean links"]
fn a_link_losing_in_bursts_both_ways_never_drags_the_flow_below_the_clean_links() {
    // Issue 19's bar: at least 0.9 of what the two clean links carry.
    let bound = 0.9 * 30.0 * ceiling();
    for seed in 1..=4 {
        let (g, retx, _) = figures(&run(&["up", "down"], seed));
        eprintln!("bursty both ways, seed {seed}: {g:.1} Mbit/s, {retx} inner retransmissions");
        assert!(g >= bound, "seed {seed}: {g:.1} Mbit/s, below {bound:.1}");
    }
}
