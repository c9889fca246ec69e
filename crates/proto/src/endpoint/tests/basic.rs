//! Delivery under each policy, redundancy under random loss, and determinism of the whole
//! pair for a given seed.

use super::*;
use crate::path::PathState;

/// Establishes, then sends `count` packets each way, one every `gap_ms`; runs 2 s more.
fn stream(pair: &mut Pair, count: u32, gap_ms: u64, size: usize) {
    pair.establish();
    pair.traffic(
        count,
        Duration::from_millis(gap_ms),
        size,
        (true, true),
        Duration::from_secs(2),
        |_, _| {},
    );
}

#[test]
fn handshake_and_delivery_both_ways() {
    for policy in [
        Policy::Best,
        Policy::Aggregate,
        Policy::Redundant { copies: None },
    ] {
        let mut p = Pair::new(
            vec![Link::new(10, None), Link::new(30, None)],
            policy,
            None,
            1,
        );
        stream(&mut p, 1000, 2, 800);
        assert_eq!(
            numbers(&p.delivered_up),
            (0..1000).collect::<Vec<_>>(),
            "{policy:?} up"
        );
        let down = assert_intact_unique(&p.delivered_down, false, 800, "down");
        assert_eq!(down, (0..1000).collect::<Vec<_>>(), "{policy:?} down");
        assert_intact_unique(&p.delivered_up, true, 800, "up");
        let links = p
            .client
            .session()
            .paths()
            .filter(|x| x.state() == PathState::Up)
            .count();
        assert_eq!(links, 2, "{policy:?}: both paths up");
    }
}

#[test]
fn redundant_masks_random_loss_without_duplicates() {
    let mut a = Link::new(10, None);
    a.loss = 0.2;
    let mut b = Link::new(25, None);
    b.loss = 0.2;
    let mut p = Pair::new(vec![a, b], Policy::Redundant { copies: None }, None, 7);
    stream(&mut p, 2000, 20, 200);
    let got = assert_intact_unique(&p.delivered_up, true, 200, "up");
    // One copy per link would leave 0.2 × 0.2 = 4 % lost; the adaptive extra copies
    // bring the expectation to 0.16 %: the bound is the 1 %.
    let loss = 1.0 - got.len() as f64 / 2000.0;
    assert!(loss <= 0.01, "loss {loss}");
    assert!(p.server_session().counters().rx_duplicates > 1000);
}

/// One lossy, rate-limited aggregate run; returns what each side delivered, with times.
fn lossy_run(seed: u64) -> (Delivered, Delivered) {
    let mut a = Link::new(10, Some(20.0));
    a.loss = 0.05;
    let mut b = Link::new(25, Some(5.0));
    b.loss = 0.05;
    let mut p = Pair::new(vec![a, b], Policy::Aggregate, None, seed);
    stream(&mut p, 600, 2, 1000);
    (p.delivered_up, p.delivered_down)
}

/// Everything the core decides (handshake randomness, schedulers, timers) depends only
/// on the seeds and the inputs, so the simulator and regression tests can replay a run.
#[test]
fn same_seed_same_run() {
    let first = lossy_run(3);
    let again = lossy_run(3);
    assert!(first.0.len() > 500 && first.1.len() > 500, "run too lossy");
    assert!(first == again, "same seed, different deliveries or times");
    // The comparison can fail: another seed loses other packets.
    assert!(lossy_run(4) != first, "different seeds gave identical runs");
}

/// A burst of small striped packets (an inner TCP acknowledging a run the reorder buffer
/// released at once) leaves in a few datagrams, each carrying many of them, and every
/// packet arrives intact, once, in order: 60 acknowledgement-sized packets handed to the
/// client within the same instant.
#[test]
fn a_burst_of_small_striped_packets_shares_datagrams() {
    const SIZE: usize = 64;
    const BURST: u32 = 60;
    let mut p = Pair::new(
        vec![Link::new(5, Some(10.0)), Link::new(20, Some(10.0))],
        Policy::Aggregate,
        None,
        3,
    );
    p.establish();
    let sent_before = p.sent.len();
    let now = p.now;
    for n in 0..BURST {
        p.client.handle_tun_packet(now, &packet(true, n, SIZE));
    }
    p.run_until(now + Duration::from_secs(1));
    let data_datagrams = p.sent[sent_before..]
        .iter()
        // ACK- and PING-only datagrams are under 80 bytes; one packet alone makes ~100.
        .filter(|s| s.to_server && s.len >= 80)
        .count();
    assert_eq!(
        numbers(&p.delivered_up),
        (0..BURST).collect::<Vec<_>>(),
        "all delivered, in order"
    );
    assert_intact_unique(&p.delivered_up, true, SIZE, "up");
    // 76 bytes of frame each: 18 fit in a datagram (one alone would make 60 datagrams).
    assert!(
        data_datagrams <= 5,
        "{data_datagrams} datagrams for {BURST} small packets"
    );
    assert!(p.client.session().counters().tx_riders >= u64::from(BURST) - 6);
}

/// A small flow that shares a session with a striped bulk flow is not held behind the
/// bulk packets still crossing the slower path: each flow is released in its own order.
/// A ping every 28 ms rides the 5-ms path (the split rule keeps small flows on the
/// primary) while a 14 Mbit/s TCP flow is striped over 5-ms and 40-ms paths of 10 Mbit/s.
/// Held in session order, each ping waited for the bulk packets sent just before it on
/// the 40-ms path: 35 ms more. The bound is halfway between the two paths' delays.
#[test]
fn a_small_flow_is_not_held_behind_a_striped_one() {
    const BULK: usize = 1200;
    const PING: usize = 40;
    let mut p = Pair::new(
        vec![Link::new(5, Some(10.0)), Link::new(40, Some(10.0))],
        Policy::Aggregate,
        None,
        5,
    );
    p.establish();
    let mut pings = Vec::new();
    p.traffic(
        3000,
        Duration::from_micros(700),
        BULK,
        (true, false),
        Duration::from_secs(1),
        |pair, n| {
            if n % 40 == 20 {
                // Another flow: UDP (under 52 bytes) from another port; no checksum to fix.
                let mut ping = packet(true, 100_000 + n, PING);
                ping[20..22].copy_from_slice(&7000u16.to_be_bytes());
                pair.client.handle_tun_packet(pair.now, &ping);
                pings.push((100_000 + n, pair.now));
            }
        },
    );
    let (bulk, small): (Vec<_>, Vec<_>) = p
        .delivered_up
        .iter()
        .cloned()
        .partition(|(_, pkt)| pkt.len() == BULK);
    assert_eq!(
        numbers(&bulk),
        (0..3000).collect::<Vec<_>>(),
        "the bulk flow arrives whole and in order"
    );
    assert_intact_unique(&bulk, true, BULK, "bulk");
    let slow_path_datagrams = p.sent.iter().filter(|s| s.to_server && s.path == 1).count();
    assert!(
        slow_path_datagrams > 500,
        "the bulk flow must be striped: {slow_path_datagrams} datagrams on the 40-ms path"
    );
    assert_eq!(small.len(), pings.len(), "every ping delivered");
    let mut delays: Vec<Duration> = small
        .iter()
        .map(|(at, pkt)| {
            let sent = pings.iter().find(|(n, _)| *n == number(pkt)).unwrap().1;
            at.saturating_since(sent)
        })
        .collect();
    delays.sort();
    let median = delays[delays.len() / 2];
    assert!(
        median < Duration::from_micros(22_500),
        "median ping delay {median:?}: held behind the slow path"
    );
}
