//! One CUBIC download under `aggregate` over two links whose rates change during the flow
//! (Mahimahi rate traces written here), sampled every `WINDOW` of simulated time: what the
//! user sees (bytes delivered to the inner TCP's receiver per window, bytes each link
//! carried) across the change.
//!
//! - A rate drop: the faster link falls to a tenth of its rate for 2 s; the flow never
//!   delivers less than the other link alone would.
//! - A link that stops paying: the second link falls to 1/20 of the first's rate (and it
//!   is much later); the flow falls back to the first link, keeps that link's goodput, and
//!   stripes again once the second link recovers (`sched/split.rs`).
//!
//! Bounds are derived from the link parameters: a link of rate R carries at most
//! R · MSS / frame of TCP payload through the tunnel (the header ceiling), which is what
//! the flow on that link alone would deliver at best.

use multihome_proto::wire::OVERHEAD_BYTES;
use multihome_sim::packet::TCP_HEADERS;
use multihome_sim::scenario::DEFAULT_TUN_MTU;
use multihome_sim::sweep::expand;
use multihome_sim::world::{World, FRAME_HEADER, OUTER_HEADERS};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Sampling window. Long enough to span many round trips of the inner TCP (its RTT is the
/// links' 20–240 ms plus the reorder hold and the ingress queue's few ms, so 500 ms is ≥ 2
/// RTTs even on the late link and ~10 on the fast one): a window then measures a rate, not
/// where a burst of acknowledgements happened to fall. Short enough that a stall of a few
/// hundred milliseconds at the change shows (it takes a sizeable part of one window).
const WINDOW: Duration = Duration::from_millis(500);

/// Share of a link's rate the inner TCP's payload can be: MSS over the frame that carries
/// it (inner IP + TCP headers, the tunnel's overhead, outer IP/UDP, Ethernet).
fn ceiling() -> f64 {
    let mss = (DEFAULT_TUN_MTU - TCP_HEADERS) as f64;
    let frame = (DEFAULT_TUN_MTU + OVERHEAD_BYTES) as f64 + (OUTER_HEADERS + FRAME_HEADER) as f64;
    mss / frame
}

/// Writes a Mahimahi trace of `segments` (duration in ms, rate in Mbit/s) to the test's
/// scratch directory and returns its file name. One opportunity carries 1500 bytes, so a
/// rate of r Mbit/s is r/12 opportunities per millisecond, accumulated so the long-run
/// rate is exact. The trace is longer than the run: it never loops.
fn write_trace(name: &str, segments: &[(u64, f64)]) -> String {
    let mut text = String::new();
    let (mut t, mut credit) = (0u64, 0.0f64);
    for &(ms, mbit) in segments {
        for _ in 0..ms {
            t += 1;
            credit += mbit / 12.0;
            while credit >= 1.0 {
                credit -= 1.0;
                text += &format!("{t}\n");
            }
        }
    }
    let file = format!("{name}.trace");
    // Tests run in parallel and write the same trace: each writes its own file and
    // renames it into place (atomic), so none reads another's half-written file.
    let tmp = scratch().join(format!("{file}.{:?}", std::thread::current().id()));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, scratch().join(&file)).unwrap();
    file
}

fn scratch() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("changing_links");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A two-link download scenario: each link is (rate, one-way delay in ms); a rate is
/// `"20mbit"` or `"trace:FILE"`.
fn scenario(secs: u32, links: [(&str, u32); 2]) -> String {
    let hop = |(rate, delay): (&str, u32)| {
        format!("{{ both = {{ rate = \"{rate}\", delay = \"{delay}ms\", queue_bytes = 300000 }} }}")
    };
    format!(
        r#"
name = "changing_links"
duration = "{secs}s"
seeds = [1]
[tunnel]
policy = "aggregate"
[[links]]
hops = [{}]
[[links]]
hops = [{}]
[[flows]]
kind = "bulk"
direction = "down"
cc = "cubic"
start = "500ms"
"#,
        hop(links[0]),
        hop(links[1])
    )
}

/// What one window saw: its end (s), goodput delivered to the receiving app (Mbit/s), and
/// bytes each link carried downstream.
#[derive(Debug)]
struct Window {
    end: f64,
    goodput: f64,
    link_bytes: [u64; 2],
}

impl Window {
    /// Share of the window's downstream bytes on link 1.
    fn share1(&self) -> f64 {
        self.link_bytes[1] as f64 / (self.link_bytes[0] + self.link_bytes[1]).max(1) as f64
    }
}

/// Runs `text` and reads the world after every window.
fn run_windows(text: &str) -> Vec<Window> {
    let runs = expand(toml::from_str(text).unwrap()).unwrap();
    let run = &runs[0];
    let mut w = World::new(&run.scenario, run.seed, &scratch()).unwrap();
    let mut out = Vec::new();
    let (mut delivered, mut link_bytes) = (0u64, [0u64; 2]);
    let mut t = Duration::ZERO;
    while t < run.scenario.duration {
        t += WINDOW;
        w.run_until(t).unwrap();
        let r = w.report("changing_links", Default::default(), run.seed);
        let d = r.flows[0].bytes_delivered;
        let now: Vec<u64> = r.paths.iter().map(|p| p.down_bytes).collect();
        out.push(Window {
            end: t.as_secs_f64(),
            goodput: (d - delivered) as f64 * 8.0 / WINDOW.as_secs_f64() / 1e6,
            link_bytes: [now[0] - link_bytes[0], now[1] - link_bytes[1]],
        });
        delivered = d;
        link_bytes = [now[0], now[1]];
    }
    for x in &out {
        eprintln!(
            "t={:5.1}s goodput {:6.2} Mbit/s  link0 {:7} B  link1 {:7} B  share1 {:.3}",
            x.end,
            x.goodput,
            x.link_bytes[0],
            x.link_bytes[1],
            x.share1()
        );
    }
    out
}

/// Windows ending in (from, to], seconds.
fn between(ws: &[Window], from: f64, to: f64) -> impl Iterator<Item = &Window> {
    ws.iter()
        .filter(move |w| w.end > from + 1e-9 && w.end <= to + 1e-9)
}

/// Not met yet (measured: 12.3 Mbit/s in the window after the drop, then ≥ 21.3): what
/// was in flight on the slowed link when it slowed (~150 kB, 300 ms at 4 Mbit/s) waits in
/// its queue, the receiver's reorder buffer holds link 1's packets behind it, and the
/// inner TCP's window is spent meanwhile. Resending the slowed link's oldest data on the
/// other link (MPTCP's opportunistic retransmission) would be the fix, given a trigger
/// that jitter does not set off (docs/AGGREGATION.md §5). (Before the rate
/// estimate's window was counted in minimum RTTs, the slowed link kept its 39 Mbit/s
/// maximum for 600 ms and was given a second queue's worth: 11.5 Mbit/s in the next
/// window too.)
#[test]
#[ignore = "known gap: a rate drop with a window in flight stalls the flow below the other link"]
fn a_rate_drop_on_the_faster_link_never_delivers_less_than_the_other_link_alone() {
    // Link 0: 40 Mbit/s, 4 Mbit/s from 5 s to 7 s. Link 1: 20 Mbit/s throughout, later.
    let fast = write_trace("drop", &[(5_000, 40.0), (2_000, 4.0), (20_000, 40.0)]);
    let text = scenario(10, [(&format!("trace:{fast}"), 10), ("20mbit", 20)]);
    let ws = run_windows(&text);
    // Link 1 alone carries at most 20 Mbit/s × the header ceiling (18.1 Mbit/s of TCP
    // payload). The slack of 0.9: CUBIC's sawtooth under the ingress queue's CoDel drops
    // keeps even one link a few per cent below its ceiling, and a 500 ms window holds a
    // whole number of the inner TCP's bursts.
    let alone = 20.0 * ceiling();
    let bound = 0.9 * alone;
    // From a second before the drop (the flow is past its start-up by then) to two
    // seconds after the recovery: the drop itself, the window in flight on the slowed
    // link draining at a tenth of its rate, and the return.
    let across: Vec<&Window> = between(&ws, 4.0, 9.0).collect();
    let worst = across
        .iter()
        .min_by(|a, b| a.goodput.total_cmp(&b.goodput))
        .unwrap();
    assert!(
        worst.goodput >= bound,
        "window ending at {:.1} s delivered {:.2} Mbit/s, below 0.9 × the other link alone \
         ({alone:.2})",
        worst.end,
        worst.goodput
    );
}

/// Link 0: 20 Mbit/s, 10 ms. Link 1: 20 Mbit/s but 60 ms later (it pays for a bulk flow:
/// §4.3.3's threshold is 0.06 s × 2.5 MB/s × 2 = 300 kB), at 1 Mbit/s from 4 s to 10 s —
/// then striping would add 1/20 of the rate at 60 ms of reorder delay (the threshold,
/// 3.2 MB, is above what the flow sends in `split::HORIZON`).
fn stop_paying() -> Vec<Window> {
    let slow = write_trace("stall", &[(4_000, 20.0), (6_000, 1.0), (20_000, 20.0)]);
    run_windows(&scenario(
        24,
        [("20mbit", 10), (&format!("trace:{slow}"), 70)],
    ))
}

/// Share of the bytes of windows ending in (from, to] that link 1 carried.
fn share1(ws: &[Window], from: f64, to: f64) -> f64 {
    let on1: u64 = between(ws, from, to).map(|w| w.link_bytes[1]).sum();
    let all: u64 = between(ws, from, to)
        .map(|w| w.link_bytes[0] + w.link_bytes[1])
        .sum();
    on1 as f64 / all.max(1) as f64
}

#[test]
fn a_link_that_stops_paying_is_left() {
    let ws = stop_paying();
    let alone = 20.0 * ceiling();
    // Before (once the inner TCP's window covers both links): both links carry the flow.
    let before = share1(&ws, 3.0, 4.0);
    assert!(before > 0.25, "link 1 carries {before:.3} before it slows");
    // While link 1 does not pay, from 2 s after it slowed (what it had queued when it
    // slowed, ~1 s of its new rate, is the rate-drop case above) to its recovery: only
    // the copies that measure it again on link 1, and the goodput of link 0 alone (same
    // slack as above). Measured: 0.45 % of the bytes, 16.9–19.3 Mbit/s per window;
    // before the split rule had its horizon, 7.2 % (more than link 1's rate: its old
    // 18 Mbit/s estimate kept it paced far above 1 Mbit/s, and its queue overflowed) and
    // 18.1 Mbit/s.
    let during = share1(&ws, 6.0, 10.0);
    assert!(
        during < 0.01,
        "link 1 carried {:.1} % of the bytes while it did not pay",
        during * 100.0
    );
    for w in between(&ws, 6.0, 10.0) {
        assert!(
            w.goodput >= 0.9 * alone,
            "window ending at {:.1} s: {:.2} Mbit/s, below 0.9 × link 0 alone ({alone:.2})",
            w.end,
            w.goodput
        );
    }
}

/// Link 1 is measured again with copies of the flow's packets sent as packet pairs
/// (`split::remeasured`) and taken back once its pair capacity says it pays: 1.5 s
/// after it recovers. The inner CUBIC then needs seconds to grow its window over a path
/// 60 ms later (as at the flow's start), so a fair share is judged from 6 s after the
/// recovery. Measured: 5 % of the bytes in the window ending at 11.5 s, 14 % at 12.5 s,
/// 40 % over 16–24 s (45 % before it slowed).
#[test]
fn a_link_left_is_taken_back_when_it_recovers() {
    let ws = stop_paying();
    let after = share1(&ws, 16.0, 24.0);
    assert!(after > 0.3, "link 1 carries {after:.3} after it recovered");
}

/// Not met yet (measured: 8.4–16.6 Mbit/s per window from 11.5 to 17 s, link 0 alone
/// 18.1): when link 1 is taken back, the reorder wait behind it adds 60 ms to the inner
/// TCP's round trip at once, while its window, sized for link 0 alone, grows into the
/// new path only at CUBIC's congestion-avoidance pace.
#[test]
#[ignore = "known gap: taking a later link back costs the inner TCP seconds of window growth"]
fn taking_a_link_back_never_delivers_less_than_the_other_link_alone() {
    let ws = stop_paying();
    let alone = 20.0 * ceiling();
    for w in between(&ws, 10.0, 24.0) {
        assert!(
            w.goodput >= 0.9 * alone,
            "window ending at {:.1} s: {:.2} Mbit/s, below 0.9 × link 0 alone ({alone:.2})",
            w.end,
            w.goodput
        );
    }
}
