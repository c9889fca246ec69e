//! Mobility: store-and-forward across a total outage (`session/store.rs`), during which the
//! client's addresses change (a vehicle leaving one hotspot and reaching the next), and
//! the hold's bounds.

use super::*;
use crate::path::PathState;

const SIZE: usize = 1000;
const GAP: Duration = Duration::from_millis(4);

/// First event matching `want` at or after `after`.
fn first_after(
    events: &[(Instant, Event)],
    after: Instant,
    want: impl Fn(&Event) -> bool,
) -> Instant {
    events
        .iter()
        .find(|(t, e)| *t >= after && want(e))
        .unwrap_or_else(|| panic!("no such event after {after:?}"))
        .0
}

fn first_delivery_after(d: &Delivered, after: Instant) -> Instant {
    d.iter()
        .find(|(t, _)| *t >= after)
        .unwrap_or_else(|| panic!("nothing delivered after {after:?}"))
        .0
}

/// A stream of 1000-byte TCP packets each way every 4 ms (2 Mbit/s) over two links (RTT
/// 20 and 60 ms, 20 Mbit/s) under `aggregate` (the bulk policy, delivered in order). Both links are cut for 30 s; halfway through,
/// the client's address on both changes. What the session held arrives, intact and once,
/// and moves within one round trip of the path's return (see the measured caveats below).
#[test]
fn a_stream_survives_a_total_outage_and_an_address_change() {
    let mut p = Pair::new(
        vec![Link::new(10, Some(20.0)), Link::new(30, Some(20.0))],
        Policy::Aggregate,
        None,
        61,
    );
    p.establish();
    let t0 = p.now;
    let cut = t0 + Duration::from_secs(3);
    let moved = cut + Duration::from_secs(15);
    let heal = cut + Duration::from_secs(30);
    let count = (Duration::from_secs(38).as_millis() / GAP.as_millis()) as u32;
    let mut max_held = 0;
    p.traffic(
        count,
        GAP,
        SIZE,
        (true, true),
        Duration::from_secs(3),
        |p, _| {
            if p.now >= cut && p.now < heal && !p.up[0].blackhole {
                p.set_blackhole(0, true);
                p.set_blackhole(1, true);
            }
            if p.now >= moved && p.client_addrs[0].port() == 5000 {
                p.client_addrs[0] = "10.0.7.2:6000".parse().unwrap();
                p.client_addrs[1] = "10.0.8.2:6001".parse().unwrap();
            }
            if p.now >= heal && p.up[0].blackhole {
                p.set_blackhole(0, false);
                p.set_blackhole(1, false);
            }
            max_held = max_held.max(p.client.session().counters().held_bytes);
        },
    );
    // Measured (both directions alike): 9487 of 9500 delivered, intact, once. The 13
    // missing were sent 256–304 ms after the cut, while every path was `Suspect` and
    // before the hold began: CoDel dropped them from the aggregate queue (its standing
    // queue there is the outage, not congestion). 3–4 arrive out of order during the
    // release: repairs of datagrams the 100 ms drop-tail lost while both paths were paced
    // at their pre-outage estimates, landing after the reorder hold gave up on them.
    let all_down = first_after(&p.client_events, cut, |e| {
        matches!(e, Event::PathState(PathId(1), PathState::Down))
    });
    for (d, up) in [(&p.delivered_up, true), (&p.delivered_down, false)] {
        let got = assert_intact_unique(d, up, SIZE, "outage");
        let lost: Vec<u32> = (0..count)
            .filter(|n| got.binary_search(n).is_err())
            .collect();
        let sent_at = |n: u32| t0 + GAP * n;
        assert!(lost.len() <= 16, "up={up}: lost {lost:?}");
        assert!(
            lost.iter()
                .all(|&n| sent_at(n) >= cut && sent_at(n) < all_down),
            "up={up}: lost outside the suspect phase: {lost:?}"
        );
        let late: Vec<_> = d
            .windows(2)
            .filter(|w| number(&w[0].1) > number(&w[1].1))
            .map(|w| w[1].0)
            .collect();
        assert!(late.len() <= 8, "up={up}: {} out of order", late.len());
        assert!(
            late.iter().all(|&t| t >= heal),
            "up={up}: out of order before the heal"
        );
    }
    // Upstream: the client's path is proven by the first ACK after the heal; the first
    // held packet leaves then and crosses the link (10 or 30 ms one way).
    let up_again = first_after(&p.client_events, heal, |e| {
        matches!(e, Event::PathState(_, PathState::Up))
    });
    let first_up = first_delivery_after(&p.delivered_up, heal);
    // Downstream: the server releases on the first authenticated datagram from the
    // client's new address, which it follows (PathRoamed).
    let heard = first_after(&p.server_events, heal, |e| {
        matches!(e, Event::PathRoamed(..))
    });
    let first_down = first_delivery_after(&p.delivered_down, heal);
    eprintln!(
        "heal -> path up {:?}, first up delivery {:?} (+{:?}); heard {:?}, first down delivery {:?} (+{:?}); max held {} B",
        up_again.saturating_since(heal),
        first_up.saturating_since(heal),
        first_up.saturating_since(up_again),
        heard.saturating_since(heal),
        first_down.saturating_since(heal),
        first_down.saturating_since(heard),
        max_held,
    );
    let rtt = Duration::from_millis(60);
    assert!(
        first_up.saturating_since(up_again) <= rtt,
        "upstream resumed late"
    );
    assert!(
        first_down.saturating_since(heard) <= rtt,
        "downstream resumed late"
    );
    let c = p.client.session().counters();
    assert_eq!((c.held_packets, c.held_bytes), (0, 0));
    assert_eq!((c.hold_dropped_bytes, c.hold_dropped_age), (0, 0));
    assert!(c.hold_released > 0 && p.server_session().counters().hold_released > 0);
    assert!(max_held > 0);
}

/// One link, 1000-byte packets upstream every 10 ms, cut for 10 s: the hold keeps at most
/// `hold_max_bytes` (or packets at most `hold_max_age` old) and drops the oldest first,
/// counted by cause; what it kept is delivered in order after the heal.
#[test]
fn the_hold_is_bounded_and_drops_oldest_first() {
    for (max_bytes, max_age, seed) in [
        (200_000, Duration::from_secs(60), 62),
        (16 << 20, Duration::from_secs(3), 63),
    ] {
        let cfg = SessionConfig {
            hold_max_bytes: max_bytes,
            hold_max_age: max_age,
            ..session_cfg()
        };
        let mut p = Pair::with_session(vec![Link::new(10, None)], Policy::Best, seed, cfg);
        p.establish();
        let cut = p.now + Duration::from_secs(2);
        let heal = cut + Duration::from_secs(10);
        let count = 1400;
        let mut worst = (0, Duration::ZERO);
        p.traffic(
            count,
            Duration::from_millis(10),
            SIZE,
            (true, false),
            Duration::from_secs(2),
            |p, _| {
                if p.now >= cut && p.now < heal && !p.up[0].blackhole {
                    p.set_blackhole(0, true);
                }
                if p.now >= heal && p.up[0].blackhole {
                    p.set_blackhole(0, false);
                }
                let c = p.client.session().counters();
                let age = c
                    .held_since
                    .map_or(Duration::ZERO, |t| p.now.saturating_since(t));
                worst = (worst.0.max(c.held_bytes), worst.1.max(age));
            },
        );
        let c = p.client.session().counters();
        let got = numbers(&p.delivered_up);
        assert_intact_unique(&p.delivered_up, true, SIZE, "bounded");
        assert!(got.windows(2).all(|w| w[0] < w[1]), "out of order");
        // What is missing is one run: the oldest held packets.
        let lost: Vec<u32> = (0..count)
            .filter(|n| got.binary_search(n).is_err())
            .collect();
        assert!(!lost.is_empty());
        assert_eq!(
            lost.len() as u32,
            lost[lost.len() - 1] - lost[0] + 1,
            "not one run"
        );
        eprintln!(
            "bound {max_bytes} B / {max_age:?}: worst held {} B, oldest {:?}; lost {} (#{}..#{}); dropped bytes {} age {}",
            worst.0, worst.1, lost.len(), lost[0], lost[lost.len() - 1], c.hold_dropped_bytes, c.hold_dropped_age
        );
        assert!(worst.0 <= max_bytes as u64);
        assert!(worst.1 <= max_age);
        if max_bytes < 1 << 20 {
            // Packets in flight at the cut may have arrived, their ACK lost: held and
            // dropped all the same.
            assert!(c.hold_dropped_bytes >= lost.len() as u64);
            assert!(c.hold_dropped_bytes <= lost.len() as u64 + 5);
            assert_eq!(c.hold_dropped_age, 0);
        } else {
            assert!(c.hold_dropped_age >= lost.len() as u64);
            assert!(c.hold_dropped_age <= lost.len() as u64 + 5);
            assert_eq!(c.hold_dropped_bytes, 0);
        }
    }
}

/// Every interface gone (a car between hotspots: no carrier, no address) for 130 s, past
/// the dead session's re-handshake (2 x detect) and the rekey (`REKEY_AFTER`, 120 s). No
/// handshake can go out, so their timers must not stay due: a timer in the past that
/// `handle_timeout` cannot clear woke the daemon in a loop for the whole gap (the harness
/// stops at 100 000 wake-ups at one instant; the simulator stopped on both as livelocks).
/// When the interface is back, the path is Up again within a few round trips (20 ms).
#[test]
fn no_busy_timer_while_every_interface_is_gone() {
    let mut p = Pair::new(vec![Link::new(10, Some(20.0))], Policy::Best, None, 62);
    p.establish();
    let gone = p.now;
    p.client.set_link_available(gone, PathId(0), false);
    p.run_until(gone + Duration::from_secs(130));
    let t = p.client.poll_timeout();
    assert!(
        t.is_none_or(|t| t > p.now),
        "timer due with nothing to do: {t:?} at {:?}",
        p.now
    );
    let back = p.now;
    p.client.set_link_available(back, PathId(0), true);
    p.run_until(back + Duration::from_millis(200));
    let state = p.client.session().paths().next().map(|s| s.state());
    assert_eq!(
        state,
        Some(PathState::Up),
        "path not Up 200 ms after its interface returned"
    );
}
