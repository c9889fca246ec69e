//! Tests of the receiver's RACK (`gaps.rs`): FIFO holes repaired at once, reordering
//! learned from what arrives late, spurious declarations widening the window, the decay,
//! and, as properties, that nothing is declared twice or after it arrived.

use super::*;
use proptest::prelude::*;

fn ms(v: u64) -> Instant {
    Instant::from_micros(v * 1000)
}

fn us(v: u64) -> Instant {
    Instant::from_micros(v)
}

const RTT: Rtts = Rtts {
    min: Duration::from_millis(20),
    smoothed: Duration::from_millis(24),
    var: Duration::ZERO,
};

/// A receiver of one path: what `receiver.rs` does with the window, plus a record of
/// every declaration.
#[derive(Default)]
struct Rx {
    w: GapWindow,
    largest: Option<u32>,
    arrived: std::collections::HashSet<u32>,
    declared: Vec<u32>,
}

impl Rx {
    fn arrive(&mut self, now: Instant, seq: u32) {
        self.tick(now);
        self.arrived.insert(seq);
        let d = &mut self.declared;
        match self.largest {
            None => self.largest = Some(seq),
            Some(l) if seq > l + 1 => {
                self.w
                    .on_gap(now, l + 1, seq - l - 1, RTT, |f, c| d.extend(f..f + c));
                self.largest = Some(seq);
            }
            Some(l) if seq == l + 1 => self.largest = Some(seq),
            Some(_) => self.w.on_late(now, seq, RTT),
        }
    }

    /// Runs the timer up to `now`, at each deadline as the session would.
    fn tick(&mut self, now: Instant) {
        while let Some(t) = self.w.deadline(RTT).filter(|&t| t <= now) {
            let d = &mut self.declared;
            self.w
                .declare_due(t.max(now), RTT, |f, c| d.extend(f..f + c));
        }
    }
}

#[test]
fn a_hole_on_a_fifo_path_waits_a_quarter_of_the_min_rtt() {
    let mut rx = Rx::default();
    rx.arrive(ms(0), 0);
    rx.arrive(ms(10), 2);
    assert_eq!(rx.w.deadline(RTT), Some(ms(15)));
    rx.tick(ms(14));
    assert!(rx.declared.is_empty());
    rx.tick(ms(15));
    assert_eq!(rx.declared, vec![1]);
    assert_eq!(rx.w.lost(), 1);
}

#[test]
fn the_lateness_seen_sets_the_window() {
    let mut rx = Rx::default();
    rx.arrive(ms(0), 0);
    rx.arrive(ms(1), 2);
    rx.arrive(us(1_500), 3);
    rx.arrive(ms(4), 1); // 3 ms late, inside its hole
    assert_eq!(rx.w.reordered(), 1);
    assert!(rx.declared.is_empty());
    // Window: max(min_rtt/4 = 5 ms, 3 ms · 9/8).
    assert_eq!(rx.w.window(RTT), Duration::from_millis(5));
    // Holes past the window are declared, however many datagrams passed them.
    for s in 5..10 {
        rx.arrive(ms(10), s);
    }
    assert!(rx.declared.is_empty());
    rx.tick(ms(15));
    assert_eq!(rx.declared, vec![4]);
    // A hole filled 4.8 ms late stays within the window, and widens it to 5.4 ms.
    rx.arrive(ms(20), 11);
    rx.arrive(us(24_800), 10);
    assert_eq!(rx.w.reordered(), 2);
    assert_eq!(rx.w.window(RTT), Duration::from_micros(5_400));
    assert_eq!(rx.declared, vec![4]);
}

#[test]
fn a_spurious_declaration_grows_the_window_once_per_round() {
    let mut rx = Rx::default();
    rx.arrive(ms(0), 0);
    rx.arrive(ms(1), 2);
    rx.tick(ms(6));
    assert_eq!(rx.declared, vec![1]);
    rx.arrive(ms(7), 1); // it was only late, by 6 ms: spurious
    assert_eq!(rx.w.spurious(), 1);
    assert_eq!(rx.w.window(RTT), Duration::from_millis(10), "2 · min_rtt/4");
    // Another spurious one in the same round does not grow it again.
    rx.arrive(ms(8), 4);
    rx.tick(ms(18));
    assert_eq!(rx.declared, vec![1, 3]);
    rx.arrive(ms(19), 3);
    assert_eq!(rx.w.spurious(), 2);
    assert_eq!(
        rx.w.window(RTT),
        Duration::from_micros(12_375),
        "lateness 11 ms · 9/8"
    );
    // A round later it does: 3 · 5 ms; a lateness of 50 ms is capped at twice the
    // retransmission timeout (srtt + 4 rttvar), the multiple at the timeout itself.
    rx.arrive(ms(30), 6);
    rx.tick(ms(50));
    rx.arrive(ms(80), 5);
    assert_eq!(rx.w.window(RTT), Duration::from_millis(48), "2 · srtt");
    assert_eq!(rx.w.mult, 3);
    let quiet = GapWindow {
        mult: 20,
        ..GapWindow::default()
    };
    assert_eq!(quiet.window(RTT), Duration::from_millis(24), "mult capped");
    let wide = Rtts {
        var: Duration::from_millis(5),
        ..RTT
    };
    assert_eq!(
        rx.w.window(wide),
        Duration::from_micros(56_250),
        "50 ms · 9/8"
    );
}

#[test]
fn the_window_falls_back_after_clean_episodes() {
    let mut rx = Rx::default();
    rx.arrive(ms(0), 0);
    rx.arrive(ms(1), 2);
    rx.arrive(ms(9), 1); // declared at 6 ms, arrived 8 ms late: spurious
    assert_eq!(rx.w.window(RTT), Duration::from_millis(10), "2 · min_rtt/4");
    // Losses a round apart, none spurious, no reordering.
    let mut seq = 3;
    let mut t = 100;
    let mut episodes = |rx: &mut Rx, n| {
        for _ in 0..n {
            rx.arrive(ms(t), seq + 1);
            rx.tick(ms(t + 30));
            seq += 2;
            t += 100;
        }
    };
    // The first closes the spurious episode; PERSIST more and `mult` falls back, keeping
    // the lateness seen since the start (8 ms).
    episodes(&mut rx, PERSIST + 1);
    assert_eq!(rx.w.window(RTT), Duration::from_millis(9));
    // PERSIST more without reordering: back to the base window.
    episodes(&mut rx, PERSIST);
    assert_eq!(rx.w.window(RTT), Duration::from_millis(5));
    assert_eq!(rx.w.spurious(), 1);
    assert_eq!(rx.w.lost(), 2 * u64::from(PERSIST) + 2);
}

#[test]
fn holes_are_bounded_and_the_oldest_goes_first() {
    let mut rx = Rx::default();
    rx.arrive(ms(0), 0);
    rx.arrive(ms(0), 5); // missing 1..5
    rx.arrive(ms(1), 3);
    rx.w.on_gap(ms(2), 10, MAX_MISSING as u32, RTT, |f, c| {
        rx.declared.extend(f..f + c)
    });
    assert_eq!(rx.declared, vec![1, 2, 4]);
    assert_eq!(rx.w.missing.len(), MAX_MISSING);
}

/// A gap longer than the holes held (an outage) is declared at once but for the last
/// `MAX_MISSING`, as one run after the older holes, in one step whatever its length.
#[test]
fn a_gap_longer_than_the_holes_held_is_declared_at_once_but_its_tail() {
    let mut rx = Rx::default();
    rx.arrive(ms(0), 0);
    rx.arrive(ms(0), 3); // missing 1, 2
    let mut runs = Vec::new();
    let first = 10;
    rx.w.on_gap(ms(1), first, 50_000, RTT, |f, c| runs.push((f, c)));
    let bulk = 50_000 - MAX_MISSING as u32;
    assert_eq!(runs, vec![(1, 2), (first, bulk)]);
    assert_eq!(rx.w.lost(), u64::from(bulk) + 2);
    assert_eq!(rx.w.missing.len(), MAX_MISSING);
    assert_eq!(rx.w.missing.front().map(|m| m.seq), Some(first + bulk));
}

#[test]
fn numbering_wraps() {
    let mut w = GapWindow::default();
    let mut d = Vec::new();
    w.on_gap(ms(0), u32::MAX - 1, 4, RTT, |f, c| d.push((f, c)));
    w.on_late(ms(1), 0, RTT);
    assert_eq!(w.reordered(), 1);
    w.declare_due(ms(100), RTT, |f, c| d.push((f, c)));
    assert_eq!(d, vec![(u32::MAX - 1, 2), (1, 1)]);
}

/// Datagrams sent every `gap_us` on a path of 10 ms whose delay varies by up to `jitter_ms`
/// (so they overtake each other), none lost: how many are declared lost.
fn spurious_on_jittery_path(jitter_ms: u64, gap_us: u64, n: u32, seed: u64) -> (usize, u64) {
    // SplitMix64: a fixed, dependency-free random sequence.
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut arrivals: Vec<(u64, u32)> = (0..n)
        .map(|s| {
            let j = next() % (jitter_ms * 1000 + 1);
            (u64::from(s) * gap_us + 10_000 + j, s)
        })
        .collect();
    arrivals.sort();
    let mut rx = Rx::default();
    for (t, s) in arrivals {
        rx.arrive(us(t), s);
    }
    (rx.declared.len(), rx.w.reordered())
}

#[test]
fn a_path_that_reorders_within_its_jitter_is_soon_declared_nothing() {
    for jitter in [2, 5, 10] {
        // 5000 datagrams/s (60 Mbit/s of full-size datagrams) for 2 s.
        let (declared, reordered) = spurious_on_jittery_path(jitter, 200, 10_000, jitter);
        eprintln!("jitter {jitter} ms: {declared} declared, {reordered} reordered");
        assert!(reordered > 1000, "the path did reorder");
        // Learning costs a handful: the first hole (DupThresh), then while the window grows.
        assert!(
            declared <= 5,
            "jitter {jitter} ms: {declared} of 10000 declared"
        );
    }
}

/// The number of the first datagram to arrive.
fn events_first(delays: &[(u64, bool)]) -> u32 {
    delays
        .iter()
        .enumerate()
        .filter(|(_, (_, lost))| !lost)
        .map(|(i, (d, _))| (i as u64 * 300 + d, i as u32))
        .min()
        .map_or(0, |(_, s)| s)
}

proptest! {
    /// Whatever the arrival order and losses: a datagram is declared at most once, never
    /// after it arrived, and every one that never arrives is declared once time passes.
    #[test]
    fn declarations_are_sound_and_complete(
        delays in proptest::collection::vec((0u64..30_000, proptest::bool::weighted(0.05)), 1..400),
    ) {
        let mut events: Vec<(u64, u32)> = delays
            .iter()
            .enumerate()
            .filter(|(_, (_, lost))| !lost)
            .map(|(i, (d, _))| (i as u64 * 300 + d, i as u32))
            .collect();
        events.sort();
        let mut rx = Rx::default();
        let mut seen = std::collections::HashSet::new();
        let mut at_declaration = Vec::new();
        for (t, s) in events {
            let before = rx.declared.len();
            rx.arrive(us(t), s);
            // Those declared at this call, before `s` was recorded as arrived, were missing.
            for d in &rx.declared[before..] {
                if *d != s {
                    at_declaration.push(seen.contains(d));
                }
            }
            seen.insert(s);
        }
        rx.tick(ms(1_000_000));
        let mut sorted = rx.declared.clone();
        sorted.sort();
        sorted.dedup();
        prop_assert_eq!(sorted.len(), rx.declared.len(), "declared twice");
        prop_assert!(at_declaration.iter().all(|a| !a), "declared after arriving");
        // Numbering is known from the first arrival on.
        let first = events_first(&delays);
        let largest = rx.largest.unwrap_or(0);
        for s in first..largest {
            if !rx.arrived.contains(&s) {
                prop_assert!(rx.declared.contains(&s), "{} never arrived, never declared", s);
            }
        }
    }
}
