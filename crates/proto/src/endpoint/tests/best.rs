//! `best` repairs what its link loses: TCP under `best` leaves the best queue paced on the
//! path `best` picks, numbered and ordered in its flow, and each datagram the link loses
//! is sent again on that path (`session/schedule.rs`, `session/reinject.rs`). The inner
//! flow sees neither the losses nor reordering; the other link carries none of it. Of
//! other protocols, only small packets are repaired.

use super::*;
use crate::path::MAX_ACK_DELAY;
use crate::sched::SMALL_PACKET;

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

/// Sends `count` UDP packets of `size` bytes upstream, one every `gap`, then runs `tail`
/// more; returns when the first was sent.
fn udp_upload(p: &mut Pair, count: u32, gap: Duration, size: usize, tail: Duration) -> Instant {
    let t0 = p.now;
    let build = |up, n| udp_packet(up, n, size);
    p.traffic_of(count, gap, build, (true, false), tail, |_, _| {});
    t0
}

/// Other protocols under `best` are not held back: UDP goes out as it comes, unordered,
/// and what the link loses of its large packets stays lost (QUIC and friends recover on
/// their own; a copy would only confuse that).
#[test]
fn best_sends_large_udp_as_it_comes() {
    let mut lossy = Link::new(10, Some(20.0));
    lossy.loss = 0.02;
    let mut p = Pair::new(vec![lossy], Policy::Best, None, 92);
    p.establish();
    let size = SMALL_PACKET + 900;
    let (count, gap) = paced(size, 2e6, 2.0);
    udp_upload(&mut p, count, gap, size, Duration::from_millis(200));
    let got = assert_intact_unique_as(&p.delivered_up, |n| udp_packet(true, n, size), "udp");
    let c = p.client.session().counters();
    eprintln!(
        "best, UDP: {} of {count} delivered, {} repaired",
        got.len(),
        c.repaired
    );
    assert_eq!(c.repaired, 0, "large UDP was repaired");
    assert!(got.len() < count as usize, "nothing was lost");
    assert_eq!(p.client.session().queue_drops().codel, 0);
}

/// Voice under `best` across a link that drops everything for 300 ms (a full queue
/// during a short gap, as measured on real driving traces): every frame arrives, those
/// dropped repaired once the link's next datagram reveals the hole (`reinject.rs`), no
/// later than the gap, the next frame's gap and two round trips (the NACK's and the
/// repair's way, with the peer's ACK delay).
#[test]
fn best_repairs_the_voice_frames_its_link_drops() {
    const ONE_WAY_MS: u64 = 20;
    const FRAME: Duration = Duration::from_millis(20);
    const VOICE: usize = 160;
    let mut p = Pair::new(
        vec![Link::new(ONE_WAY_MS, Some(20.0))],
        Policy::Best,
        None,
        93,
    );
    p.establish();
    let gap = Duration::from_millis(300);
    let start = p.now + Duration::from_secs(1);
    p.up[0].drop_window = Some((start, start + gap));
    let count = 150;
    let t0 = udp_upload(&mut p, count, FRAME, VOICE, Duration::from_millis(500));
    let got = assert_intact_unique_as(&p.delivered_up, |n| udp_packet(true, n, VOICE), "voice");
    let c = p.client.session().counters();
    let worst = p
        .delivered_up
        .iter()
        .map(|(at, pkt)| at.saturating_since(t0 + FRAME * number(pkt)))
        .max()
        .unwrap_or_default();
    eprintln!(
        "best, voice across a 300-ms drop: {} of {count} delivered, {} repaired, {} dropped, \
         slowest {worst:?}",
        got.len(),
        c.repaired,
        p.up[0].dropped
    );
    assert!(p.up[0].dropped >= 14, "the link dropped too little");
    assert_eq!(got.len(), count as usize, "voice frames lost");
    let bound = gap + FRAME + Duration::from_millis(4 * ONE_WAY_MS) + MAX_ACK_DELAY;
    assert!(worst <= bound, "a frame took {worst:?} (bound {bound:?})");
}
