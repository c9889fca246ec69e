//! `best` repairs what its link loses: TCP under `best` leaves the best queue paced on the
//! path `best` picks, numbered and ordered in its flow, and each datagram the link loses
//! is sent again on that path (`session/schedule.rs`, `session/reinject.rs`). The inner
//! flow sees neither the losses nor reordering; the other link carries none of it.

use super::*;

const SIZE: usize = 1200;

/// Link 0 (20 Mbit/s, 10 ms one way) loses 1 % of datagrams at random, link 1 (20 Mbit/s,
/// 30 ms) none; 12 Mbit/s of TCP upstream under `best`, which picks link 0. Every packet
/// must arrive intact and in order (one lost is tolerated per ten thousand: a repair lost
/// in its turn, 1 % of 1 %), and link 1 must carry no data. Before repair, each of the
/// ~1 % lost reached the inner flow.
#[test]
fn best_repairs_what_its_link_loses_on_the_same_link() {
    let mut lossy = Link::new(10, Some(20.0));
    lossy.loss = 0.01;
    let mut p = Pair::new(
        vec![lossy, Link::new(30, Some(20.0))],
        Policy::Best,
        None,
        91,
    );
    p.establish();
    let t0 = p.now;
    let secs = if cfg!(debug_assertions) { 3.0 } else { 6.0 };
    let count = p.upload_paced(SIZE, 12e6, secs);
    let got = assert_intact_unique(&p.delivered_up, true, SIZE, "best repair");
    let lost = count as usize - got.len();
    let c = p.client.session().counters();
    let skipped = p.server_session().reorder_stats().skipped_gaps;
    let data_on_1 = p
        .sent
        .iter()
        .filter(|s| s.to_server && s.path == 1 && s.at >= t0 && s.len >= DATA_MIN_LEN)
        .count();
    let order = numbers(&p.delivered_up);
    let out_of_order = order.windows(2).filter(|w| w[1] < w[0]).count();
    eprintln!(
        "best, 1 % loss: {lost} of {count} lost, {} repaired, {skipped} holes given up, \
         {out_of_order} out of order, {data_on_1} data datagrams on link 1",
        c.repaired
    );
    assert!(
        c.repaired as f64 >= count as f64 * 0.005,
        "repaired only {}",
        c.repaired
    );
    assert!(
        lost * 10_000 <= count as usize,
        "{lost} of {count} lost despite repair"
    );
    assert_eq!(out_of_order, 0, "the inner flow saw reordering");
    assert_eq!(data_on_1, 0, "best put data on the other link");
}

/// Other protocols under `best` are not held back: UDP goes out as it comes, unordered,
/// and what the link loses stays lost (QUIC and friends recover on their own).
#[test]
fn best_sends_udp_as_it_comes() {
    let mut lossy = Link::new(10, Some(20.0));
    lossy.loss = 0.02;
    let mut p = Pair::new(vec![lossy], Policy::Best, None, 92);
    p.establish();
    // 40-byte packets are UDP (`packet`).
    let (count, gap) = paced(40, 1e6, 2.0);
    p.traffic(
        count,
        gap,
        40,
        (true, false),
        Duration::from_millis(200),
        |_, _| {},
    );
    let got = assert_intact_unique(&p.delivered_up, true, 40, "best udp");
    let c = p.client.session().counters();
    eprintln!(
        "best, UDP: {} of {count} delivered, {} repaired",
        got.len(),
        c.repaired
    );
    assert_eq!(c.repaired, 0, "UDP was repaired");
    assert!(got.len() < count as usize, "nothing was lost");
    assert_eq!(p.client.session().queue_drops().codel, 0);
}
