//! Aggregation: striping over two rate-limited links of unequal speed and delay must use
//! both in proportion to their rates and deliver nearly in order.

use super::*;

/// Links of 30 and 10 Mbit/s with 10 and 30 ms one-way delay; 45 Mbit/s of 1200-byte
/// packets offered upstream for 10 s under `aggregate`.
#[test]
fn aggregate_splits_by_rate_and_fills_both_links() {
    const SIZE: usize = 1200;
    const OFFERED_BPS: f64 = 45e6;
    const CAPACITY_BPS: f64 = 40e6;
    let duration = Duration::from_secs(10);
    let mut p = Pair::new(
        vec![Link::new(10, Some(30.0)), Link::new(30, Some(10.0))],
        Policy::Aggregate,
        None,
        51,
    );
    p.establish();
    let t0 = p.now;
    let gap = Duration::from_secs_f64(SIZE as f64 * 8.0 / OFFERED_BPS);
    let count = (duration.as_secs_f64() / gap.as_secs_f64()) as u32;
    p.traffic(count, gap, SIZE, (true, false), Duration::ZERO, |_, _| {});
    let end = t0 + duration;

    let got = assert_intact_unique(&p.delivered_up, true, SIZE, "aggregate");
    let in_time = p.delivered_up.iter().filter(|(t, _)| *t <= end).count();
    let goodput = (in_time * SIZE * 8) as f64 / duration.as_secs_f64();
    // Measured: 37.4 Mbit/s = 93.6 % (the ceiling is ~96 %: 52–78 bytes of header, tag
    // and piggybacked ACK per 1200-byte packet, plus the first RTTs of ramp-up).
    assert!(
        goodput >= 0.85 * CAPACITY_BPS,
        "goodput {:.1} Mbit/s",
        goodput / 1e6
    );

    // Shares of what the server received per path (each datagram carries one packet;
    // ACK-only datagrams are too few to matter).
    let rx: Vec<u64> = p
        .server_session()
        .paths()
        .map(|x| x.counters().rx_bytes)
        .collect();
    let share0 = rx[0] as f64 / (rx[0] + rx[1]) as f64;
    // Measured: 75.2 % / 24.8 %.
    assert!(
        (share0 - 0.75).abs() <= 0.10,
        "share of path 0: {share0:.3}"
    );

    // Order: a packet is out of order if a higher number was delivered before it.
    let mut max = None;
    let late = numbers(&p.delivered_up)
        .into_iter()
        .filter(|&n| {
            let out = max.is_some_and(|m| n < m);
            max = max.max(Some(n));
            out
        })
        .count();
    let dropped = count as usize - got.len();
    let stats = p.server_session().reorder_stats();
    eprintln!(
        "aggregate: goodput {:.2} Mbit/s, share0 {share0:.3}, late {late}, dropped {dropped}, queue_drops {}, reorder {stats:?}",
        goodput / 1e6,
        p.client.session().counters().queue_drops,
    );
    for x in p.server_session().paths() {
        eprintln!(
            "DIAG server path {:?} srtt {:?} var {:?} sampled {} tx {:?} state {:?}",
            x.id(),
            x.rtt().smoothed(),
            x.rtt().var(),
            x.rtt().has_sample(),
            x.counters(),
            x.state()
        );
    }
    for x in p.client.session().paths() {
        eprintln!(
            "DIAG client path {:?} srtt {:?} var {:?} sampled {} tx {:?}",
            x.id(),
            x.rtt().smoothed(),
            x.rtt().var(),
            x.rtt().has_sample(),
            x.counters()
        );
    }
    eprintln!("DIAG hold {:?}", p.server_session().reorder_hold(p.now));
    let late_frac = late as f64 / got.len() as f64;
    // Measured: 0.0 %; the reorder buffer releases in order unless it gives up on a gap.
    assert!(late_frac <= 0.01, "{late} of {} out of order", got.len());
}
