//! Path tests: a sender `Path` and the receiver's `Path` exchanging datagrams and ACKs
//! over a simulated fixed-delay link.

use super::*;

fn addr() -> SocketAddr {
    "192.0.2.1:7000".parse().unwrap()
}

fn at(ms: u64) -> Instant {
    Instant::from_micros(ms * 1000)
}

/// Sends one 1000-byte datagram every `gap_ms` for `n` rounds over a link with one-way
/// delay `owd_ms`, dropping datagram i when `drop(i)`; feedback is delivered after owd too.
fn run(n: u64, gap_ms: u64, owd_ms: u64, drop: impl Fn(u64) -> bool) -> (Path, Path) {
    run_with(n, gap_ms, |_| owd_ms, owd_ms, drop)
}

/// `run` with a forward one-way delay `fwd_ms(i)` for datagram i (a queue comes and
/// goes) and a fixed reverse one.
fn run_with(
    n: u64,
    gap_ms: u64,
    fwd_ms: impl Fn(u64) -> u64,
    owd_ms: u64,
    drop: impl Fn(u64) -> bool,
) -> (Path, Path) {
    let cfg = PathConfig::from_detect(Duration::from_secs(1));
    let mut tx = Path::new(PathId(0), addr(), at(0), cfg);
    let mut rx = Path::new(PathId(0), addr(), at(0), cfg);
    let mut acks: Vec<(Instant, AckFrame, u32, Nacks)> = vec![];
    let mut arrivals: Vec<(Instant, u32)> = vec![];
    for i in 0..n {
        let now = at(i * gap_ms);
        // deliver everything due by now, in time order
        arrivals.retain(|&(t, seq)| {
            if t <= now {
                rx.on_received(t, rcv(seq, 1000, true));
                false
            } else {
                true
            }
        });
        if rx.loss_deadline().is_some_and(|d| d <= now) {
            rx.declare_overdue(now);
        }
        if let Some(a) = rx.take_ack(now, false) {
            let peer_us = (now.as_micros() as u32).wrapping_sub(a.ack_delay_us);
            let nacks = rx.take_nack();
            acks.push((now + Duration::from_millis(owd_ms), a, peer_us, nacks));
        }
        acks.retain(|(t, a, peer_us, nacks)| {
            if *t <= now {
                // NACKs ride before the ACK in the same datagram.
                for n in nacks {
                    tx.on_nack(n.first, n.count);
                }
                tx.on_ack(*t, a, *peer_us);
                false
            } else {
                true
            }
        });
        let seq = tx.on_sent(now, 1000, SentKind::Data);
        if !drop(i) {
            arrivals.push((now + Duration::from_millis(fwd_ms(i)), seq));
        }
        tx.update_state(now);
    }
    (tx, rx)
}

#[test]
fn rtt_and_rate_are_measured() {
    // 1000 B every 1 ms = 1 MB/s; one-way 10 ms.
    let (tx, rx) = run(3000, 1, 10, |_| false);
    let rtt = tx.rtt().smoothed().as_millis();
    assert!((19..=24).contains(&rtt), "rtt {rtt}");
    let bw = tx.view(Instant::ZERO).bandwidth_bps;
    assert!((0.9e6..1.2e6).contains(&bw), "bw {bw}");
    assert_eq!(tx.state(), PathState::Up);
    assert_eq!(rx.counters().rx_packets, 3000 - 10);
    assert!(tx.view(Instant::ZERO).loss < 0.01);
}

#[test]
fn loss_rate_tracks_drops() {
    let (tx, rx) = run(5000, 1, 5, |i| i % 10 == 3);
    let loss = tx.view(Instant::ZERO).loss;
    assert!((0.07..0.13).contains(&loss), "loss {loss}");
    assert!(rx.reordering().2 >= 490, "declared {:?}", rx.reordering());
}

/// Reordering is not loss, for the rate controller either: datagrams that arrive late
/// (every tenth 3 ms behind, on a path of 5 ms) are neither declared lost nor counted in
/// the loss rate, once the receiver has seen the path reorder.
#[test]
fn late_datagrams_are_not_losses() {
    let (tx, rx) = run_with(5000, 1, |i| if i % 10 == 3 { 8 } else { 5 }, 5, |_| false);
    let (reordered, spurious, declared) = rx.reordering();
    assert!(reordered >= 490, "{:?}", rx.reordering());
    assert!(
        declared <= 2 && spurious == declared,
        "{:?}",
        rx.reordering()
    );
    assert!(
        tx.view(Instant::ZERO).loss < 0.001,
        "loss {}",
        tx.view(Instant::ZERO).loss
    );
    assert_eq!(tx.loss_counters().congestion, 0);
}

#[test]
fn a_repeated_nack_counts_once() {
    let cfg = PathConfig::from_detect(Duration::from_secs(1));
    let mut p = Path::new(PathId(0), addr(), at(0), cfg);
    for i in 0..100 {
        p.on_sent(at(i), 1000, SentKind::Data);
    }
    p.on_nack(10, 3);
    p.on_nack(10, 3);
    p.on_nack(11, 5); // overlaps: 13..16 are new
    p.on_nack(200, 1); // never sent
    assert_eq!(p.nacked, 6);
}

/// A forward queue we stop adding to drains one second per second: the scheduler sees an
/// unused path as it is now, not as it was when last measured (a 30 ms reading kept an
/// idle 50 Mbit/s link unused for seconds). Once we send on it again, the reading stays
/// where it was until feedback says more.
#[test]
fn an_unused_path_forgets_its_queue_at_the_drain_rate() {
    // 10 ms one way, then 30 ms of queue on every datagram from the 100th on.
    let (mut tx, _) = run_with(400, 1, |i| if i < 100 { 10 } else { 40 }, 10, |_| false);
    // The last datagram left at 399 ms; its ACK and the ones before it are still due.
    let last = at(399);
    let q = tx.view(last).fwd_queue;
    assert!(q >= Duration::from_millis(25), "{q:?}");
    // Still sending (data left after every sampled datagram): no drain assumed.
    assert_eq!(tx.view(at(420)).fwd_queue, q);
    // The last datagram (399, sent at 399 ms, 30 ms queued) is acknowledged with nothing
    // new sent: the path is idle from here. The peer's clock equals ours in `run_with`.
    let idle_from = at(449);
    let ack = AckFrame {
        path: 0,
        largest: 399,
        ack_delay_us: 0,
        recv_count: 400,
        recv_bytes: 400 * 1000,
    };
    tx.on_ack(idle_from, &ack, 439_000);
    let q = tx.view(idle_from).fwd_queue;
    assert!(q >= Duration::from_millis(25), "{q:?}");
    assert_eq!(
        tx.view(idle_from + Duration::from_millis(10)).fwd_queue,
        q - Duration::from_millis(10)
    );
    assert_eq!(
        tx.view(idle_from + Duration::from_millis(100)).fwd_queue,
        Duration::ZERO
    );
    // Sending again commits what is left; it no longer drains by itself.
    let resume = idle_from + Duration::from_millis(20);
    tx.on_sent(resume, 1000, SentKind::Data);
    let left = q - Duration::from_millis(20);
    assert_eq!(tx.view(resume).fwd_queue, left);
    assert_eq!(tx.view(resume + Duration::from_millis(50)).fwd_queue, left);
}

#[test]
fn blackhole_goes_down_within_detection_time() {
    // Everything after t = 1000 ms is lost; the path must be Down by 1000 + 1000 ms + gap.
    let cfg = PathConfig::from_detect(Duration::from_secs(1));
    let (mut tx, _) = run(1000, 1, 5, |_| false);
    assert_eq!(tx.state(), PathState::Up);
    let mut down_at = None;
    for ms in 1000..3000 {
        let now = at(ms);
        tx.on_sent(now, 100, SentKind::Data);
        if tx.update_state(now) == Some(PathState::Down) {
            down_at = Some(ms);
            break;
        }
    }
    let d = down_at.expect("path never went down");
    assert!(
        d <= 1000 + cfg.detect.as_millis() as u64 + 10,
        "down at {d}"
    );
    assert!(
        d >= 1000 + cfg.detect.as_millis() as u64 - 10,
        "down too early at {d}"
    );
}

#[test]
fn unavailable_path_is_down_at_once() {
    let cfg = PathConfig::from_detect(Duration::from_secs(1));
    let mut p = Path::new(PathId(1), addr(), at(0), cfg);
    p.confirm(at(0));
    assert_eq!(p.state(), PathState::Up);
    p.set_available(at(1), false);
    assert_eq!(p.state(), PathState::Down);
    assert!(!p.view(Instant::ZERO).usable());
}

#[test]
fn stale_or_bogus_acks_are_ignored() {
    let cfg = PathConfig::from_detect(Duration::from_secs(1));
    let mut p = Path::new(PathId(0), addr(), at(0), cfg);
    let bogus = AckFrame {
        path: 0,
        largest: 50,
        ack_delay_us: 0,
        recv_count: 1,
        recv_bytes: 100,
    };
    p.on_ack(at(5), &bogus, 0);
    assert_eq!(
        p.state(),
        PathState::Down,
        "ack for unsent data must not prove the path"
    );
    assert!(!p.rtt().has_sample());
}

#[test]
fn ack_only_datagrams_are_not_acknowledged_nor_timed() {
    let cfg = PathConfig::from_detect(Duration::from_secs(1));
    let mut p = Path::new(PathId(0), addr(), at(0), cfg);
    p.on_received(at(0), rcv(0, 60, false));
    assert!(
        p.take_ack(at(10), true).is_none(),
        "an ACK-only datagram elicits nothing"
    );
    p.confirm(at(0));
    p.on_sent(at(0), 60, SentKind::AckOnly);
    assert_eq!(
        p.update_state(at(5000)),
        None,
        "unanswered ACK-only datagrams are no sign of death"
    );
}

fn rcv(path_seq: u32, bytes: usize, eliciting: bool) -> Received {
    Received {
        path_seq,
        send_time_us: 0,
        bytes,
        eliciting,
        ping: false,
    }
}

/// Feeds a path whenever its pacer opens for 1 s over a link of `link_mbit` with one-way
/// delay `owd_us` after a first estimate below 1 Mbit/s; the peer acknowledges at once
/// (`immediate`, feedback riding on a busy reverse direction) or with its ACK delay.
/// Returns the bandwidth estimate at the end, Mbit/s.
fn estimate_after_feeding(owd_us: u64, link_mbit: f64, immediate: bool) -> f64 {
    let cfg = PathConfig::from_detect(Duration::from_secs(1));
    let us = Instant::from_micros;
    let mut tx = Path::new(PathId(0), addr(), us(0), cfg);
    let mut rx = Path::new(PathId(0), addr(), us(0), cfg);
    let owd = owd_us;
    let link_bps = link_mbit * 1e6 / 8.0;
    // A first data datagram, acknowledged after 1.5 ms more than the round trip: an
    // estimate under 1 Mbit/s.
    let seq = tx.on_sent(us(0), 100, SentKind::Data);
    rx.on_received(us(owd), rcv(seq, 100, true));
    let a = rx.take_ack(us(owd + 1_500), true).expect("ack due");
    tx.on_ack(
        us(2 * owd + 1_500),
        &a,
        ((owd + 1_500) as u32).wrapping_sub(a.ack_delay_us),
    );
    let first = tx.view(us(2 * owd + 1_600)).bandwidth_bps * 8.0;
    assert!(first < 1e6, "first estimate {first}");
    tx.on_pair_report((link_mbit * 1000.0) as u32);
    let mut link_free = 0u64; // when the bottleneck is next idle (µs)
    let mut arrivals: std::collections::VecDeque<(u64, u32)> = Default::default();
    let mut acks: std::collections::VecDeque<(u64, AckFrame, u32)> = Default::default();
    let start = 2 * owd + 2_000;
    let mut t = start;
    while t < start + 1_000_000 {
        while arrivals.front().is_some_and(|a| a.0 <= t) {
            let (at, seq) = arrivals.pop_front().unwrap();
            rx.on_received(us(at), rcv(seq, 1400, true));
        }
        if let Some(a) = rx.take_ack(us(t), immediate) {
            let peer_us = (t as u32).wrapping_sub(a.ack_delay_us);
            acks.push_back((t + owd, a, peer_us));
        }
        while acks.front().is_some_and(|a| a.0 <= t) {
            let (at, a, peer_us) = acks.pop_front().unwrap();
            tx.on_ack(us(at), &a, peer_us);
        }
        let v = tx.view(us(t));
        if v.may_send(us(t), 1400) {
            let seq = tx.on_sent(us(t), 1400, SentKind::Data);
            link_free = link_free.max(t) + (1400.0 / link_bps * 1e6) as u64;
            arrivals.push_back((link_free + owd, seq));
        }
        tx.update_state(us(t));
        t += 10;
    }
    tx.view(us(t)).bandwidth_bps * 8e-6
}

/// A path with a low first estimate, fed whenever its pacer opens, finds its link's rate
/// within a second: on a sub-millisecond path whose feedback rides at once on a busy
/// reverse direction (a 100 Mbit/s link once stayed at 0.2 Mbit/s for 7 s in the lab),
/// and on a 50 ms path with the peer's ACK delay.
#[test]
fn a_path_with_a_low_first_estimate_finds_its_rate() {
    let short = estimate_after_feeding(50, 100.0, true);
    assert!(
        short > 80.0,
        "short path: {short:.2} Mbit/s after 1 s of being fed"
    );
    let long = estimate_after_feeding(25_000, 10.0, false);
    assert!(
        long > 8.0,
        "long path: {long:.2} Mbit/s after 1 s of being fed"
    );
}

/// The receiver holds an ACK for a quarter of the path's minimum RTT, within 2–10 ms, and
/// for the floor before it has a sample; the sender's window covers twice that.
#[test]
fn ack_delay_is_a_quarter_rtt_within_bounds() {
    let ms = Duration::from_millis;
    assert_eq!(ack_delay(None), MIN_ACK_DELAY);
    assert_eq!(ack_delay(Some(ms(2))), MIN_ACK_DELAY);
    assert_eq!(ack_delay(Some(ms(20))), ms(5));
    assert_eq!(ack_delay(Some(ms(300))), MAX_ACK_DELAY);
}

#[test]
fn a_path_slowed_by_its_queue_is_not_down_at_the_detection_time() {
    // 700 ms of queue on the way out (a cellular link under load): the oldest datagram in
    // flight is always ~0.7 s old. Stopping feedback 0.4 s after the last send leaves it
    // unacknowledged for ~1.1 s: more than the 1 s detection time, yet well within what
    // this path's own RTT makes normal; it is Suspect (traffic moves), not Down. With no
    // feedback for 3 RTTs it is Down.
    let (mut tx, _) = run_with(500, 10, |_| 700, 10, |_| false);
    assert!(
        tx.rtt().smoothed() > Duration::from_millis(650),
        "{:?}",
        tx.rtt()
    );
    tx.update_state(at(5400));
    assert_eq!(tx.state(), PathState::Suspect);
    tx.update_state(at(7500));
    assert_eq!(tx.state(), PathState::Down);
}

#[test]
fn a_path_back_from_an_outage_stays_up_for_its_detection_time() {
    // A link with a 50-ms RTT goes out for 10 s and resumes: the first ACK covers a
    // keepalive from early in the outage, held in the link's queue; the later ones were
    // dropped and are never acknowledged. The ACK proves the path; it must not go Down
    // again at once because of what the outage swallowed.
    let mut p = probed_path_50ms();
    let seqs = probe_through_outage(&mut p, 1000, 11_000);
    p.on_ack(at(11_000), &ack_of(seqs[1]), 0);
    assert_eq!(p.state(), PathState::Up);
    assert_eq!(p.update_state(at(11_001)), None, "no flap on return");
    assert_eq!(
        p.view(at(11_001)).inflight_bytes,
        0,
        "the outage's probes written off"
    );
    // The ACK of the next queued keepalive trickles in: still no flap.
    p.on_ack(at(11_005), &ack_of(seqs[2]), 0);
    assert_eq!(p.update_state(at(11_006)), None, "no flap on a later ACK");
    assert_eq!(p.state(), PathState::Up);
    // Only queued datagrams delivered so far: on probation, shown on standby.
    assert!(p.view(at(11_006)).standby, "not proven to deliver now");
    // A datagram sent after the return that is never acknowledged still brings it down,
    // after the detection time its (now long) RTT allows: at most four detection times.
    p.on_sent(at(11_010), 60, SentKind::Probe);
    let down = (11_010..20_000)
        .find(|&ms| p.update_state(at(ms)) == Some(PathState::Down))
        .expect("never down again");
    assert!((12_010..=15_010).contains(&down), "down again at {down}");
}

#[test]
fn a_returning_path_is_on_standby_until_it_delivers_what_was_sent_since() {
    let mut p = probed_path_50ms();
    let old = p.on_sent(at(1000), 60, SentKind::Probe);
    for ms in (1250..5000).step_by(250) {
        p.on_sent(at(ms), 60, SentKind::Probe);
        p.update_state(at(ms));
    }
    assert_eq!(p.state(), PathState::Down);
    // The outage's first keepalive, delivered at last: Up, but on standby.
    p.on_ack(at(5000), &ack_of(old), 0);
    assert_eq!(p.state(), PathState::Up);
    assert!(p.view(at(5000)).standby);
    // A probe sent after the return is acknowledged: the path delivers now.
    let probe = p.on_sent(at(5100), 60, SentKind::Probe);
    p.on_ack(at(5400), &ack_of(probe), 0);
    assert!(!p.view(at(5400)).standby);
    // A short outage whose last probe is acknowledged within the path's round trip: no
    // probation at all.
    let mut ms = 5500;
    while p.state() != PathState::Down {
        p.on_sent(at(ms), 60, SentKind::Probe);
        p.update_state(at(ms));
        ms += 250;
        assert!(ms < 20_000, "never down");
    }
    let recent = p.on_sent(at(ms), 60, SentKind::Probe);
    p.on_ack(at(ms + 60), &ack_of(recent), 0);
    assert_eq!(p.state(), PathState::Up);
    assert!(!p.view(at(ms + 60)).standby, "fresh proof: no probation");
}

#[test]
fn a_path_back_from_an_outage_measures_afresh() {
    // The link's queue held the outage's keepalives for seconds: their RTTs and queue
    // say nothing of the path now. The first datagram sent after the return sets the
    // RTT alone, and the rate starts up again.
    let mut p = probed_path_50ms();
    let seqs = probe_through_outage(&mut p, 1000, 5000);
    p.on_ack(at(5000), &ack_of(seqs[0]), 0);
    assert_eq!(p.state(), PathState::Up);
    assert!(p.in_startup(), "the rate starts up again");
    // Another of the outage's keepalives trickles in 3.5 s late: no sample.
    p.on_ack(at(5010), &ack_of(seqs[2]), 0);
    let probe = p.on_sent(at(5100), 60, SentKind::Probe);
    p.on_ack(at(5160), &ack_of(probe), 0);
    assert_eq!(p.rtt().smoothed(), Duration::from_millis(60));
    assert_eq!(p.view(at(5160)).fwd_queue, Duration::ZERO);
}

#[test]
fn a_suspect_path_is_cleared_only_by_an_ack_on_time() {
    // A 50-ms path whose link stops and then trickles out its queue: the datagrams sent
    // at 1.0 s wait; the path turns Suspect. The ACK of one of them 0.8 s later (a
    // delivery of the trickle) says the link delivered it at last, not that it delivers
    // now: the path stays Suspect, and data stays off it. The ACK of a probe that came
    // back within the path's usual time clears the suspicion.
    let mut p = probed_path_50ms();
    let queued: Vec<u32> = (0..4)
        .map(|i| p.on_sent(at(1000 + 10 * i), 1200, SentKind::Data))
        .collect();
    let suspect = (1000..2000)
        .find(|&ms| p.update_state(at(ms)) == Some(PathState::Suspect))
        .expect("never suspect");
    assert!(suspect <= 1300, "suspect at {suspect}");
    p.on_ack(at(1800), &ack_of(queued[0]), 0);
    assert_eq!(p.state(), PathState::Suspect, "a late ACK cleared it");
    let probe = p.on_sent(at(1800), 60, SentKind::Probe);
    p.on_ack(at(1850), &ack_of(probe), 0);
    assert_eq!(p.state(), PathState::Up);
    // Wrongly suspected, merely slow for a moment: what was sent shortly before the
    // suspicion comes back within the usual time, and the path is Up at once.
    p.on_sent(at(3000), 1200, SentKind::Data);
    let last = p.on_sent(at(3080), 1200, SentKind::Data);
    let suspect = (3080..4000)
        .find(|&ms| p.update_state(at(ms)) == Some(PathState::Suspect))
        .expect("never suspect");
    p.on_ack(at(suspect + 10), &ack_of(last), 0);
    assert_eq!(p.state(), PathState::Up, "suspect at {suspect}");
}

/// A probe's ACK, as the peer sends it.
fn ack_of(largest: u32) -> AckFrame {
    AckFrame {
        path: 0,
        largest,
        ack_delay_us: 0,
        recv_count: 1,
        recv_bytes: 60,
    }
}

/// Keepalives every 250 ms from `from` to `to` ms that no ACK answers (the link is out):
/// returns their `path_seq`s, the path `Down` by then.
fn probe_through_outage(p: &mut Path, from: u64, to: u64) -> Vec<u32> {
    let mut seqs = vec![];
    for ms in (from..to).step_by(250) {
        seqs.push(p.on_sent(at(ms), 60, SentKind::Probe));
        p.update_state(at(ms));
    }
    assert_eq!(p.state(), PathState::Down);
    seqs
}

/// A path with a 50-ms RTT learned from 20 probes, the last acknowledged at 1 s.
fn probed_path_50ms() -> Path {
    let cfg = PathConfig::from_detect(Duration::from_secs(1));
    let mut p = Path::new(PathId(0), addr(), at(0), cfg);
    p.confirm(at(0));
    for ms in (0..1000).step_by(50) {
        let seq = p.on_sent(at(ms), 60, SentKind::Probe);
        p.on_ack(at(ms + 50), &ack_of(seq), 0);
    }
    p
}
