//! Aggregation: striping over two rate-limited links of unequal speed and delay must use
//! both in proportion to their rates and deliver nearly in order.

use super::*;

/// How long the load is offered. Sealing and opening ~40 000 datagrams of 1250 bytes
/// dominates this test, and unoptimized ChaCha20-Poly1305 makes a 10 s run take ~40 s of
/// CPU in a debug build; debug builds therefore run 3 s (the rate estimates settle within
/// the first second), optimized ones (`cargo test --release`) the full 10 s.
const DURATION: Duration = Duration::from_secs(if cfg!(debug_assertions) { 3 } else { 10 });

/// Links of 30 and 10 Mbit/s with 10 and 30 ms one-way delay; 45 Mbit/s of 1200-byte
/// packets offered upstream under `aggregate`.
#[test]
fn aggregate_splits_by_rate_and_fills_both_links() {
    const SIZE: usize = 1200;
    const OFFERED_BPS: f64 = 45e6;
    const CAPACITY_BPS: f64 = 40e6;
    let mut p = Pair::new(
        vec![Link::new(10, Some(30.0)), Link::new(30, Some(10.0))],
        Policy::Aggregate,
        None,
        51,
    );
    p.establish();
    let t0 = p.now;
    let gap = Duration::from_secs_f64(SIZE as f64 * 8.0 / OFFERED_BPS);
    let count = (DURATION.as_secs_f64() / gap.as_secs_f64()) as u32;
    p.traffic(count, gap, SIZE, (true, false), Duration::ZERO, |_, _| {});
    let end = t0 + DURATION;

    let got = assert_intact_unique(&p.delivered_up, true, SIZE, "aggregate");
    let in_time = p.delivered_up.iter().filter(|(t, _)| *t <= end).count();
    let goodput = (in_time * SIZE * 8) as f64 / DURATION.as_secs_f64();
    // Measured: 38.0 Mbit/s = 95.0 % over 10 s, 37.3 Mbit/s = 93.2 % over 3 s. The
    // ceiling is ~96 %: 52–78 bytes of header, tag and piggybacked ACK per 1200-byte
    // packet. The excess offered load is dropped at the sender's aggregate queue.
    assert!(
        goodput >= 0.85 * CAPACITY_BPS,
        "goodput {:.1} Mbit/s",
        goodput / 1e6
    );

    // Shares of what the server received per path (one packet per datagram; ACK-only
    // datagrams are too few to matter).
    let rx: Vec<u64> = p
        .server_session()
        .paths()
        .map(|x| x.counters().rx_bytes)
        .collect();
    let share0 = rx[0] as f64 / (rx[0] + rx[1]) as f64;
    // Measured: 75.1 % / 24.9 % over 10 s, 75.4 % / 24.6 % over 3 s.
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
    let late_frac = late as f64 / got.len() as f64;
    // Measured: 17 of 39 715 (0.04 %) over 10 s, 17 of 11 683 (0.15 %) over 3 s, all
    // within the first 0.14 s, before the one-way delay estimates that set the hold settle.
    assert!(late_frac <= 0.01, "{late} of {} out of order", got.len());
}
