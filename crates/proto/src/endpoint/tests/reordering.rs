//! Reordering is not loss (RACK, `path/gaps.rs`): a link that reorders within its jitter
//! but loses nothing must not make the tunnel resend; one that also loses resends about
//! what it lost; and the last datagrams of a burst, lost, are repaired by the tail loss
//! probe (`path/tail.rs`) well before the inner TCP's retransmission timer. What the
//! links carry arrives intact, each packet once.

use super::*;

const SIZE: usize = 1200;

/// Two 40 Mbit/s links of 10 and 20 ms whose datagrams overtake each other within
/// `jitter`, each losing `loss` of what it carries; 30 Mbit/s of 1200-byte packets striped
/// upstream for 3 s. Returns the pair and the number of packets sent.
fn striped(jitter: Duration, loss: f64, seed: u64) -> (Pair, u32) {
    let mut links = vec![Link::new(10, Some(40.0)), Link::new(20, Some(40.0))];
    for l in &mut links {
        l.jitter = jitter;
        l.loss = loss;
    }
    let mut p = Pair::new(links, Policy::Aggregate, None, seed);
    for l in &mut p.down {
        l.jitter = jitter;
        l.loss = loss;
    }
    p.establish();
    let count = p.upload_paced(SIZE, 30e6, 3.0);
    (p, count)
}

/// Packets the client sent again: repaired on a NACK, or reinjected from a failing path.
fn resent(p: &Pair) -> u64 {
    let c = p.client.session().counters();
    c.repaired + c.reinjected
}

#[test]
fn a_link_that_reorders_without_loss_causes_no_resend() {
    for (jitter_ms, seed) in [(2, 77), (5, 78), (10, 79)] {
        let (p, count) = striped(Duration::from_millis(jitter_ms), 0.0, seed);
        let got = assert_intact_unique(&p.delivered_up, true, SIZE, "reordering").len();
        let reordered: u64 = p.server_session().paths().map(|x| x.reordering().0).sum();
        let declared: u64 = p.server_session().paths().map(|x| x.reordering().2).sum();
        eprintln!(
            "jitter {jitter_ms} ms: delivered {got} of {count}, resent {}, reordered {reordered}, declared lost {declared}",
            resent(&p)
        );
        assert!(reordered > 500, "the links did reorder: {reordered}");
        assert_eq!(
            got as u32, count,
            "jitter {jitter_ms} ms: every packet arrives"
        );
        // Nothing is lost, so every resend would be spurious. Measured: none (every gap
        // reported at once, as before RACK: 7268 of 9375 at 5 ms).
        assert!(
            resent(&p) <= u64::from(count) / 2000,
            "jitter {jitter_ms} ms: {} of {count} packets resent on links that lose nothing",
            resent(&p)
        );
    }
}

#[test]
fn a_link_that_reorders_and_loses_resends_what_it_lost() {
    for (jitter_ms, seed) in [(0, 80), (5, 81), (10, 82)] {
        let (p, count) = striped(Duration::from_millis(jitter_ms), 0.01, seed);
        let got = assert_intact_unique(&p.delivered_up, true, SIZE, "lossy reordering").len();
        let lost: u64 = p.up.iter().map(|l| l.dropped).sum();
        let spurious: u64 = p.server_session().paths().map(|x| x.reordering().1).sum();
        eprintln!(
            "jitter {jitter_ms} ms, 1 % loss: delivered {got} of {count}, {lost} datagrams lost, resent {}, spurious {spurious}",
            resent(&p)
        );
        assert!(lost > 50, "the links did lose: {lost}");
        // Repairs cover the losses (a repair can be lost too, and its hole then waits
        // for the reorder hold; the inner TCP would see it).
        assert!(
            got as u32 >= count - 3,
            "jitter {jitter_ms} ms: delivered {got} of {count}"
        );
        assert!(
            resent(&p) <= 2 * lost,
            "jitter {jitter_ms} ms: resent {} for {lost} lost",
            resent(&p)
        );
    }
}

/// One 5-ms link (RTT 10 ms): a burst of 50 packets whose last three datagrams are lost.
/// No later datagram reveals them, so without a probe they would wait for the path to be
/// suspected (100 ms at the least) or for the inner TCP's timer (200 ms at the least).
/// The tail loss probe goes after two RTTs; its arrival reveals the gap, which is NACKed
/// and repaired.
#[test]
fn a_lost_tail_is_repaired_after_the_probe() {
    let mut p = Pair::new(vec![Link::new(5, Some(50.0))], Policy::Aggregate, None, 83);
    p.establish();
    let gap = Duration::from_millis(1);
    let start = p.now;
    let last = start + gap * 49;
    p.up[0].drop_window = Some((start + gap * 47, last + Duration::from_micros(1)));
    p.traffic(
        50,
        gap,
        SIZE,
        (true, false),
        Duration::from_secs(1),
        |_, _| {},
    );
    let got = assert_intact_unique(&p.delivered_up, true, SIZE, "tail");
    assert_eq!(got.len(), 50, "every packet arrives");
    let c = p.client.session().counters();
    assert_eq!(p.up[0].dropped, 3);
    assert_eq!(c.repaired, 3, "the tail is repaired");
    assert_eq!(c.reinjected, 0, "before the path is suspected");
    assert!(c.tail_probes >= 1);
    let done = p
        .delivered_up
        .iter()
        .map(|(t, _)| *t)
        .max()
        .expect("delivered");
    let took = done.saturating_since(last);
    eprintln!(
        "tail repaired {took:?} after it was sent, {} probes",
        c.tail_probes
    );
    assert!(
        took <= Duration::from_millis(60),
        "tail repaired after {took:?}"
    );
}

/// One 10-ms link whose datagrams overtake each other within 4 ms, carrying 19 Mbit/s
/// upstream; now and then the link drops what is sent in half a packet gap. Each lost
/// packet must still reach the server about one RTT plus the reordering window after it
/// would have: the window learned from the jitter holds a hole back for the reordering,
/// not for the inner TCP's timer. Measured against the path's own window at the end.
#[test]
fn a_loss_on_a_reordering_link_is_repaired_within_an_rtt_and_the_window() {
    const DELAY_MS: u64 = 10;
    let jitter = Duration::from_millis(4);
    let mut link = Link::new(DELAY_MS, Some(40.0));
    link.jitter = jitter;
    let mut p = Pair::new(vec![link], Policy::Aggregate, None, 84);
    p.down[0].jitter = jitter;
    p.establish();
    let gap = Duration::from_micros(500);
    let mut handed = Vec::new();
    p.traffic(
        6000,
        gap,
        SIZE,
        (true, false),
        Duration::from_secs(1),
        |p, n| {
            handed.push(p.now);
            // Past the start-up (the window has seen the jitter): a drop every 250 ms.
            if n >= 2000 && n % 500 == 0 {
                p.up[0].drop_window = Some((p.now, p.now + gap / 2));
            }
        },
    );
    let got = assert_intact_unique(&p.delivered_up, true, SIZE, "lossy jitter");
    assert_eq!(got.len(), 6000, "every packet arrives");
    let c = p.client.session().counters();
    let dropped = p.up[0].dropped;
    assert!(dropped >= 6, "the link did drop: {dropped}");
    assert!(
        c.repaired + c.reinjected <= 2 * dropped,
        "resent {} for {dropped} dropped",
        c.repaired + c.reinjected
    );
    let path = p.server_session().paths().next().expect("a path");
    let window = path.reorder_window();
    // The slowest packet: a repaired one. Beyond its one-way delay it waited for a later
    // datagram to arrive, the window, the NACK's trip back and the repair's trip: one RTT
    // and the window, plus the jitter on each of the three trips.
    let slowest = p
        .delivered_up
        .iter()
        .map(|(t, pkt)| t.saturating_since(handed[number(pkt) as usize]))
        .max()
        .expect("delivered");
    let one_way = Duration::from_millis(DELAY_MS);
    let bound = one_way + one_way * 2 + window + jitter * 3 + Duration::from_millis(3);
    eprintln!(
        "{dropped} dropped, {} repaired, window {window:?}, slowest delivery {slowest:?} (bound {bound:?})",
        c.repaired
    );
    assert!(
        window < Duration::from_millis(12),
        "the window follows the 4-ms jitter: {window:?}"
    );
    assert!(slowest <= bound, "slowest delivery {slowest:?} > {bound:?}");
}

/// The server seals its first datagram under the new keys right after its handshake
/// response; on a link that reorders, that datagram overtakes the response in about half
/// the runs (as measured over these seeds). It used to reach the session before the keys
/// existed and be counted as unauthenticated — one per such run in clean conditions. The
/// client now holds it (it names the pending handshake's index) and processes it once the
/// response is in: no refusal, and the datagram is not lost.
#[test]
fn datagram_ahead_of_the_handshake_response_is_not_refused() {
    let mut ahead_runs = 0;
    for seed in 1..21 {
        let mut links = vec![Link::new(10, Some(100.0)), Link::new(12, Some(50.0))];
        for l in &mut links {
            l.jitter = Duration::from_millis(2);
        }
        let mut p = Pair::new(links, Policy::Aggregate, None, seed);
        p.run_until(Pair::at(3_000));
        assert!(p.client.is_established());
        let c = p.client.session().counters();
        assert_eq!(c.rx_unauthenticated, 0, "seed {seed}");
        if p.client.counters().rx_before_response > 0 {
            ahead_runs += 1;
        }
    }
    // The reordering happened (else the test would prove nothing): 10 of 20 when written.
    assert!((5..=15).contains(&ahead_runs), "{ahead_runs} of 20 runs");
}
