//! Aggregation when links change: a link that degrades loses its share within a bounded
//! time, and random loss on one link is not read as congestion (R-MTP's loss
//! discrimination), so that link keeps its rate.

use super::*;

const SIZE: usize = 1200;

/// Bytes of datagrams sent upstream on `path` in `[from, to)`.
fn sent_bytes(p: &Pair, path: u8, from: Instant, to: Instant) -> f64 {
    p.sent
        .iter()
        .filter(|s| s.to_server && s.path == path && s.at >= from && s.at < to)
        .map(|s| s.len as f64)
        .sum()
}

/// 30 + 10 Mbit/s (10 / 30 ms one way), 30 Mbit/s offered; at 4 s link 0 falls to
/// 5 Mbit/s. Within 1.5 s its share of what is sent must be near its new rate's share
/// (5 of 15 Mbit/s = 1/3, allowed up to 0.45), and what it carries near 5 Mbit/s.
///
/// Bound: the window (2 BDPs of the old rate) stops link 0 at once from taking more than
/// it delivers; the queue it left raises its RTT, which the scheduler reads as a later
/// arrival within a few RTT samples; the old maximum of the bandwidth filter expires
/// within its window (10 smoothed RTTs, at least 1 s). 1.5 s covers all three.
/// Measured (release and debug): share 0.958 before, 0.334 after, link 0 at 5.00 Mbit/s.
#[test]
fn degraded_link_loses_its_share() {
    let mut p = Pair::new(
        vec![Link::new(10, Some(30.0)), Link::new(30, Some(10.0))],
        Policy::Aggregate,
        None,
        61,
    );
    p.establish();
    let t0 = p.now;
    let secs = if cfg!(debug_assertions) { 7.0 } else { 10.0 };
    let (count, gap) = paced(SIZE, 30e6, secs);
    let degrade_at = t0 + Duration::from_secs(4);
    let mut degraded = false;
    p.traffic(count, gap, SIZE, (true, false), Duration::ZERO, |p, _| {
        if !degraded && p.now >= degrade_at {
            p.up[0].rate_bps = Some(5e6);
            degraded = true;
        }
    });
    let before = (
        sent_bytes(&p, 0, t0 + Duration::from_secs(2), degrade_at),
        sent_bytes(&p, 1, t0 + Duration::from_secs(2), degrade_at),
    );
    let share_before = before.0 / (before.0 + before.1);
    let (from, to) = (
        degrade_at + Duration::from_millis(1500),
        degrade_at + Duration::from_millis(2500),
    );
    let after = (sent_bytes(&p, 0, from, to), sent_bytes(&p, 1, from, to));
    let share_after = after.0 / (after.0 + after.1);
    let rate0_after = after.0 * 8.0 / 1.0;
    eprintln!(
        "degrade: share before {share_before:.3}, after {share_after:.3}, link 0 after {:.2} Mbit/s",
        rate0_after / 1e6
    );
    assert!(share_before > 0.6, "share before {share_before:.3}");
    assert!(share_after < 0.45, "share after {share_after:.3}");
    assert!(
        rate0_after < 5e6 * 1.3,
        "link 0 still sent {:.1} Mbit/s",
        rate0_after / 1e6
    );
    // Nothing lost to the change: every packet arrives intact (the aggregate queue may
    // drop the excess offered load, but never corrupts or duplicates).
    assert_intact_unique(&p.delivered_up, true, SIZE, "degrade");
}

/// Link 0 (20 Mbit/s) loses 2 % of datagrams at random, link 1 (20 Mbit/s) none; 30
/// Mbit/s offered. The losses must be judged transmission errors: link 0 keeps a
/// bandwidth estimate near its rate and is not backed off (no congestion verdict, or
/// nearly none), and it still carries a fair part of the load. Measured (8 s, release):
/// 168 losses judged errors, 10 congestion, estimate 19.99 Mbit/s, share 0.366.
/// Two 20 Mbit/s links of 10 ms one way, link 0 losing 2 % at random, under `aggregate`.
fn lossy_pair(seed: u64) -> Pair {
    let mut lossy = Link::new(10, Some(20.0));
    lossy.loss = 0.02;
    let mut p = Pair::new(
        vec![lossy, Link::new(10, Some(20.0))],
        Policy::Aggregate,
        None,
        seed,
    );
    p.establish();
    p
}

#[test]
fn random_loss_is_not_congestion() {
    let mut p = lossy_pair(62);
    let t0 = p.now;
    let secs = if cfg!(debug_assertions) { 4.0 } else { 8.0 };
    let (count, gap) = paced(SIZE, 30e6, secs);
    p.traffic(count, gap, SIZE, (true, false), Duration::ZERO, |_, _| {});
    let path0 = p
        .client
        .session()
        .paths()
        .find(|x| x.id() == PathId(0))
        .expect("path 0");
    let l = path0.loss_counters();
    let v = path0.view(p.now);
    eprintln!(
        "random loss: {l:?}, estimate {:.2} Mbit/s, loss {:.4}",
        v.bandwidth_bps * 8e-6,
        v.loss
    );
    assert!(l.error >= 5, "losses judged errors: {l:?}");
    assert!(
        l.congestion * 10 <= l.error,
        "random loss taken for congestion: {l:?}"
    );
    // Payload rate of a 20 Mbit/s link is ~19 Mbit/s of datagrams at most.
    assert!(
        v.bandwidth_bps * 8.0 >= 15e6,
        "estimate fell to {:.1} Mbit/s",
        v.bandwidth_bps * 8.0 / 1e6
    );
    let end = t0 + Duration::from_secs_f64(secs);
    let share0 = sent_bytes(&p, 0, t0 + Duration::from_secs(1), end)
        / (sent_bytes(&p, 0, t0 + Duration::from_secs(1), end)
            + sent_bytes(&p, 1, t0 + Duration::from_secs(1), end));
    eprintln!("random loss: share of the lossy link {share0:.3}");
    assert!(share0 > 0.25, "lossy link's share {share0:.3}");
}

/// Same links with 2 % random loss on link 0, 30 Mbit/s offered upstream: the receiver
/// reports each lost datagram in a NACK and the sender repairs the ordered packet it
/// carried (`session/reinject.rs`), within the reorder hold. Without repair about 0.7 % of
/// the packets (link 0 carries about a third of them) would reach the inner flow as holes;
/// with it, a packet is lost only if its repair (or the NACK) is lost too, ~2 % of 2 %.
/// Measured (release): 3 of 18 750 lost, 144 repaired, 2 holes given up (without repair:
/// 135 lost, 122 holes given up).
#[test]
fn random_loss_is_repaired() {
    let mut p = lossy_pair(63);
    let secs = if cfg!(debug_assertions) { 3.0 } else { 6.0 };
    let count = p.upload_paced(SIZE, 30e6, secs);
    let got = assert_intact_unique(&p.delivered_up, true, SIZE, "repair");
    let lost = count as usize - got.len();
    let repaired = p.client.session().counters().repaired;
    let skipped = p.server_session().reorder_stats().skipped_gaps;
    eprintln!("repair: {lost} of {count} lost, {repaired} repaired, {skipped} holes given up");
    assert!(
        repaired as f64 >= count as f64 * 0.004,
        "repaired only {repaired}"
    );
    assert!(
        (lost as f64) < count as f64 * 0.001,
        "{lost} of {count} lost despite repair"
    );
}

/// A path whose feedback direction loses too: link 0 loses 2 % upstream and 30 %
/// downstream, where its ACKs and NACKs travel. A NACK and both its repeats all lost (2.7 %
/// of NACKs) left its hole to the reorder buffer's give-up, and the inner flow got the
/// packets behind it out of order; copies of each path's recent NACKs ride on the other
/// paths' datagrams (`Path::nack_echo`), whose loss is independent. Measured (release,
/// seeds 64/65/66): 1/4/1 of 18 750 lost and 2/6/3 holes given up (a repair lost in its
/// turn, as with no feedback loss); without the copies 9/7/10 lost, 11/7/10 given up.
#[test]
fn a_nack_lost_on_its_own_path_arrives_on_another() {
    let mut p = lossy_pair(64);
    p.down[0].loss = 0.3;
    let secs = if cfg!(debug_assertions) { 3.0 } else { 6.0 };
    let count = p.upload_paced(SIZE, 30e6, secs);
    let got = assert_intact_unique(&p.delivered_up, true, SIZE, "nack echo");
    let lost = count as usize - got.len();
    let repaired = p.client.session().counters().repaired;
    let skipped = p.server_session().reorder_stats().skipped_gaps;
    eprintln!("nack echo: {lost} of {count} lost, {repaired} repaired, {skipped} holes given up");
    assert!(
        repaired as f64 >= count as f64 * 0.004,
        "repaired only {repaired}"
    );
    assert!(skipped <= 5, "{skipped} holes given up: NACKs lost");
    assert!(
        lost * 5_000 <= count as usize,
        "{lost} of {count} lost despite repair"
    );
}

/// The only link (100 ms RTT) drops everything the server sends for 600 ms, shorter than
/// the detection time, while a download goes at 16 Mbit/s (1000-byte TCP packets every
/// 0.5 ms). The server keeps sending on its one path, `Suspect` or not: some 1 100
/// datagrams lost in a row, one gap in the path's numbering. The path never goes
/// `Down`, so nothing is held, and with no other path nothing is reinjected: the gap's
/// NACK must get every one of them sent again. (Runs of over 256 were left unreported, as
/// an outage for liveness to handle.)
#[test]
fn a_blackout_shorter_than_detection_loses_nothing() {
    const PKT: usize = 1000;
    let mut p = Pair::new(vec![Link::new(50, None)], Policy::Aggregate, None, 21);
    p.establish();
    let start = p.now + Duration::from_secs(2);
    let blackout = Duration::from_millis(600);
    p.down[0].drop_window = Some((start, start + blackout));
    let count = 8_000;
    p.traffic(
        count,
        Duration::from_micros(500),
        PKT,
        (false, true),
        Duration::from_secs(2),
        |_, _| {},
    );
    let dropped = p.down[0].dropped;
    let got = assert_intact_unique(&p.delivered_down, false, PKT, "download");
    assert!(dropped > 256, "the link dropped a long run: {dropped}");
    // All but what the ingress CoDel dropped while the queue stood through the blackout
    // (the inner TCP's congestion signal, which a TCP resends). Measured: 8 CoDel drops,
    // 1 094 repaired of 1 096 dropped; without the long runs reported, 1 100 lost.
    let codel = p.server_session().queue_drops().codel;
    assert_eq!(
        got.len() as u64,
        u64::from(count) - codel,
        "every packet delivered but {codel} CoDel drops ({dropped} dropped on the link)"
    );
}
