//! Tests of the reorder buffer: session order, flow order, bounds.

use super::*;
use proptest::prelude::*;

fn t(ms: u64) -> Instant {
    Instant::from_micros(ms * 1000)
}

#[test]
fn holds_until_gap_fills() {
    let mut b = ReorderBuffer::new(1 << 20);
    let mut out = VecDeque::new();
    b.insert(t(0), 0, vec![0], Order::Session, &mut out);
    b.insert(t(1), 2, vec![2], Order::Session, &mut out);
    b.insert(t(2), 3, vec![3], Order::Session, &mut out);
    assert_eq!(out.len(), 1);
    b.insert(t(3), 1, vec![1], Order::Session, &mut out);
    assert_eq!(out, [vec![0], vec![1], vec![2], vec![3]]);
    assert_eq!(b.held_packets(), 0);
}

#[test]
fn a_flow_s_second_packet_arriving_first_waits_for_the_first() {
    let mut b = ReorderBuffer::new(1 << 20);
    let mut out = VecDeque::new();
    b.insert(t(0), 1, vec![1], Order::After(0), &mut out);
    b.insert(t(0), 2, vec![2], Order::After(1), &mut out);
    assert!(out.is_empty(), "they wait for their predecessor");
    b.insert(t(3), 0, vec![0], Order::FlowFirst, &mut out);
    assert_eq!(out, [vec![0], vec![1], vec![2]]);
    assert_eq!(b.stats().late, 0);
}

#[test]
fn session_ordered_packets_arriving_first_wait_for_the_session_s_first() {
    let mut b = ReorderBuffer::new(1 << 20);
    let mut out = VecDeque::new();
    b.insert(t(0), 2, vec![2], Order::Session, &mut out);
    b.insert(t(1), 1, vec![1], Order::Session, &mut out);
    assert!(out.is_empty());
    b.insert(t(2), 0, vec![0], Order::Session, &mut out);
    assert_eq!(out, [vec![0], vec![1], vec![2]]);
    assert_eq!(b.stats().late, 0);
}

#[test]
fn skips_gap_after_hold() {
    let mut b = ReorderBuffer::new(1 << 20);
    let mut out = VecDeque::new();
    b.insert(t(0), 0, vec![0], Order::Session, &mut out);
    b.insert(t(10), 2, vec![2], Order::Session, &mut out);
    let hold = Duration::from_millis(30);
    assert_eq!(b.deadline(hold), Some(t(40)));
    b.on_timeout(t(39), hold, &mut out);
    assert_eq!(out.len(), 1);
    b.on_timeout(t(40), hold, &mut out);
    assert_eq!(out.len(), 2);
    b.insert(t(41), 1, vec![1], Order::Session, &mut out);
    assert_eq!(out.back(), Some(&vec![1]), "late packet still delivered");
    assert_eq!(b.stats().late, 1);
    // It came 1 ms after the skip: the hold learns 2 ms more, halving every 10 s.
    assert_eq!(b.extra(t(41)), Duration::from_millis(2));
    assert_eq!(b.extra(t(10_041)), Duration::from_millis(1));
}

/// Only a packet the hold gave up on teaches the hold: one given up on as known lost
/// (its repair came after all) does not, however long after an old timeout skip.
#[test]
fn packets_skipped_as_lost_do_not_lengthen_the_hold() {
    let mut b = ReorderBuffer::new(1 << 20);
    let mut out = VecDeque::new();
    let hold = Duration::from_millis(30);
    b.insert(t(0), 0, vec![0], Order::Session, &mut out);
    b.insert(t(10), 2, vec![2], Order::Session, &mut out);
    b.on_timeout(t(40), hold, &mut out);
    // Seconds later, hole 5 is given up as lost; its repair lands after the skip.
    b.insert(t(5_000), 3, vec![3], Order::Session, &mut out);
    b.insert(t(5_000), 4, vec![4], Order::Session, &mut out);
    b.insert(t(5_001), 6, vec![6], Order::Session, &mut out);
    b.skip_lost_below(t(5_002), 6, &mut out);
    b.insert(t(5_040), 5, vec![5], Order::Session, &mut out);
    assert_eq!(b.stats().late, 1);
    assert_eq!(b.extra(t(5_040)), Duration::ZERO);
    // The packet the timeout skipped, arriving 1 ms after it, still teaches 2 ms.
    b.insert(t(5_041), 1, vec![1], Order::Session, &mut out);
    assert_eq!(b.stats().late, 2);
    assert_eq!(out.len(), 7, "every packet released once");
}

#[test]
fn known_lost_holes_are_skipped_at_once() {
    let mut b = ReorderBuffer::new(1 << 20);
    let mut out = VecDeque::new();
    b.insert(t(0), 0, vec![0], Order::Session, &mut out);
    b.insert(t(1), 2, vec![2], Order::Session, &mut out);
    b.insert(t(1), 5, vec![5], Order::Session, &mut out);
    // Hole 1 is lost; 3 and 4 may still come.
    b.skip_lost_below(t(2), 3, &mut out);
    assert_eq!(out, [vec![0], vec![2]]);
    assert_eq!(b.held_packets(), 1);
    b.skip_lost_below(t(2), 6, &mut out);
    assert_eq!(out, [vec![0], vec![2], vec![5]]);
    assert_eq!(b.stats().lost_skips, 2);
    assert_eq!(b.stats().skipped_gaps, 0);
    // Density: 0 in order, 2 is +1, 5 is +2.
    let d = b.stats().density;
    assert_eq!((d[16], d[17], d[18]), (1, 1, 1));
    assert_eq!(b.stats().displaced, 2);
}

#[test]
fn unordered_passes_through_and_fills_slot() {
    let mut b = ReorderBuffer::new(1 << 20);
    let mut out = VecDeque::new();
    b.insert(t(0), 0, vec![0], Order::Session, &mut out);
    b.insert(t(0), 2, vec![2], Order::Session, &mut out);
    b.insert(t(0), 1, vec![1], Order::Unordered, &mut out);
    assert_eq!(out, [vec![0], vec![1], vec![2]]);
}

#[test]
fn byte_bound_forces_release() {
    let mut b = ReorderBuffer::new(100);
    let mut out = VecDeque::new();
    b.insert(t(0), 0, vec![0], Order::Session, &mut out);
    for s in 2..10 {
        b.insert(t(0), s, vec![0; 30], Order::Session, &mut out);
    }
    assert!(b.held_packets() * 30 <= 100);
}

/// A small flow is not held behind another flow's gap: the ping goes at once, the bulk
/// packet after the gap waits for it.
#[test]
fn a_flow_is_not_held_behind_another_flows_gap() {
    let mut b = ReorderBuffer::new(1 << 20);
    let mut out = VecDeque::new();
    b.insert(t(0), 0, vec![0], Order::FlowFirst, &mut out);
    // 1 (bulk, after 0) is on the slow path; 2 is a ping's first packet.
    b.insert(t(1), 2, vec![2], Order::FlowFirst, &mut out);
    b.insert(t(2), 3, vec![3], Order::After(1), &mut out);
    b.insert(t(3), 4, vec![4], Order::After(2), &mut out);
    assert_eq!(out, [vec![0], vec![2], vec![4]]);
    assert_eq!(b.held_packets(), 1);
    b.insert(t(30), 1, vec![1], Order::After(0), &mut out);
    assert_eq!(out, [vec![0], vec![2], vec![4], vec![1], vec![3]]);
    assert_eq!(b.held_packets(), 0);
    assert!(!b.has_gap());
    assert_eq!(b.stats().held, 1);
}

/// Links are followed: a flow's packets released one after another once the first
/// arrives, and a packet of unknown flow still waits for everything before it.
#[test]
fn a_chain_of_held_packets_leaves_in_flow_order() {
    let mut b = ReorderBuffer::new(1 << 20);
    let mut out = VecDeque::new();
    b.insert(t(0), 0, vec![0], Order::FlowFirst, &mut out);
    b.insert(t(1), 5, vec![5], Order::After(3), &mut out);
    b.insert(t(1), 3, vec![3], Order::After(1), &mut out);
    b.insert(t(1), 2, vec![2], Order::Session, &mut out);
    b.insert(t(1), 6, vec![6], Order::Session, &mut out);
    assert_eq!(out, [vec![0]]);
    b.insert(t(2), 1, vec![1], Order::After(0), &mut out);
    // 1, 2, 3 in order; 5 follows 3 though 4 is missing; 6 waits for 4.
    assert_eq!(out, [vec![0], vec![1], vec![2], vec![3], vec![5]]);
    b.insert(t(3), 4, vec![4], Order::FlowFirst, &mut out);
    assert_eq!(out.back(), Some(&vec![6]));
    assert_eq!(b.held_packets(), 0);
}

/// A gap behind released packets only (markers) is timed and passed like any other, so
/// markers do not pile up; passing it counts as no skip, since nobody waited.
#[test]
fn a_gap_behind_markers_alone_is_passed_without_counting() {
    let mut b = ReorderBuffer::new(1 << 20);
    let mut out = VecDeque::new();
    b.insert(t(0), 0, vec![0], Order::FlowFirst, &mut out);
    for s in 2..10 {
        b.insert(t(s), s, vec![0], Order::FlowFirst, &mut out);
    }
    assert_eq!(b.deadline(Duration::from_millis(30)), Some(t(32)));
    b.on_timeout(t(32), Duration::from_millis(30), &mut out);
    assert!(!b.has_gap());
    assert_eq!(b.stats().skipped_gaps, 0);
    // The missing packet is late, not lost: delivered, and it teaches nothing.
    b.insert(t(40), 1, vec![1], Order::After(0), &mut out);
    assert_eq!(b.extra(t(40)), Duration::ZERO);
    assert_eq!(out.len(), 10);
}

/// A predecessor that cannot be falls back to the session order.
#[test]
fn impossible_predecessors_mean_session_order() {
    use crate::wire::{DataFlags, OrderMode};
    let flags = DataFlags::new(2, true);
    assert_eq!(Order::of(flags, 7, 0), Order::Session);
    let gap = flags.with_order(OrderMode::FlowGap);
    assert_eq!(Order::of(gap, 7, 3), Order::After(4));
    assert_eq!(Order::of(gap, 7, 8), Order::Session);
    assert_eq!(Order::of(gap, 7, 0), Order::Session);
    assert_eq!(
        Order::of(flags.with_order(OrderMode::FlowPrev), 0, 1),
        Order::Session
    );
    assert_eq!(
        Order::of(
            DataFlags::new(2, false).with_order(OrderMode::FlowGap),
            7,
            3
        ),
        Order::Unordered
    );
}

proptest! {
    /// Against a model: every packet comes out exactly once; with an unbounded hold
    /// and no overflow, the ordered packets come out sorted.
    #[test]
    fn releases_each_once_in_order(perm in Just((0u64..300).collect::<Vec<_>>()).prop_shuffle(),
                                   unordered in proptest::collection::vec(any::<bool>(), 300)) {
        let mut b = ReorderBuffer::new(1 << 30);
        let mut out = VecDeque::new();
        // Start from seq 0 so nothing is "late".
        b.insert(t(0), 0, 0u64.to_be_bytes().to_vec(), Order::Session, &mut out);
        for (i, &s) in perm.iter().filter(|&&s| s != 0).enumerate() {
            let order = if unordered[s as usize] { Order::Unordered } else { Order::Session };
            b.insert(t(i as u64), s, s.to_be_bytes().to_vec(), order, &mut out);
        }
        b.flush(&mut out);
        let got: Vec<u64> = out.iter().map(|p| u64::from_be_bytes(p[..].try_into().unwrap())).collect();
        let mut sorted = got.clone();
        sorted.sort();
        prop_assert_eq!(&sorted, &(0..300).collect::<Vec<_>>());
        let ordered: Vec<u64> = got.iter().copied().filter(|&s| s == 0 || !unordered[s as usize]).collect();
        let mut o2 = ordered.clone();
        o2.sort();
        prop_assert_eq!(ordered, o2);
        prop_assert_eq!(b.stats().skipped_gaps, 0);
    }

    /// Against a model of the sender: each packet names its flow's previous one (or is
    /// of unknown flow, or unordered). Whatever the arrival order, with an unbounded hold
    /// every packet comes out once, each flow in its order, and a session-ordered packet
    /// after every packet sent before it.
    #[test]
    fn flows_leave_in_their_order(perm in Just((1u64..300).collect::<Vec<_>>()).prop_shuffle(),
                                  kinds in proptest::collection::vec(0u8..6, 300)) {
        // kinds: 0..=3 a flow, 4 unknown flow (session order), 5 unordered.
        let mut last: [Option<u64>; 4] = [None; 4];
        let mut orders = vec![Order::FlowFirst];
        for s in 1..300u64 {
            let k = kinds[s as usize];
            orders.push(match k {
                0..=3 => {
                    let o = last[k as usize].map_or(Order::FlowFirst, Order::After);
                    last[k as usize] = Some(s);
                    o
                }
                4 => Order::Session,
                _ => Order::Unordered,
            });
        }
        let mut b = ReorderBuffer::new(1 << 30);
        let mut out = VecDeque::new();
        b.insert(t(0), 0, 0u64.to_be_bytes().to_vec(), orders[0], &mut out);
        for (i, &s) in perm.iter().enumerate() {
            b.insert(t(i as u64), s, s.to_be_bytes().to_vec(), orders[s as usize], &mut out);
        }
        // Every gap filled: nothing may still be held.
        prop_assert_eq!(b.held_packets(), 0);
        let got: Vec<u64> = out.iter().map(|p| u64::from_be_bytes(p[..].try_into().unwrap())).collect();
        let mut sorted = got.clone();
        sorted.sort();
        prop_assert_eq!(&sorted, &(0..300).collect::<Vec<_>>());
        let pos: std::collections::HashMap<u64, usize> = got.iter().enumerate().map(|(i, &s)| (s, i)).collect();
        for s in 1..300u64 {
            match orders[s as usize] {
                Order::After(p) => prop_assert!(pos[&p] < pos[&s], "{} before its predecessor {}", s, p),
                Order::Session => prop_assert!((0..s).all(|e| pos[&e] < pos[&s]), "{} before an earlier packet", s),
                _ => {}
            }
        }
        prop_assert_eq!(b.stats().skipped_gaps, 0);
    }
}
