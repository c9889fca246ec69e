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
    let cfg = PathConfig::from_detect(Duration::from_secs(1));
    let mut tx = Path::new(PathId(0), addr(), at(0), cfg);
    let mut rx = Path::new(PathId(0), addr(), at(0), cfg);
    let mut acks: Vec<(Instant, AckFrame, u32)> = vec![];
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
        if let Some(a) = rx.take_ack(now, false) {
            let peer_us = (now.as_micros() as u32).wrapping_sub(a.ack_delay_us);
            acks.push((now + Duration::from_millis(owd_ms), a, peer_us));
        }
        acks.retain(|(t, a, peer_us)| {
            if *t <= now {
                tx.on_ack(*t, a, *peer_us);
                false
            } else {
                true
            }
        });
        let seq = tx.on_sent(now, 1000, SentKind::Data);
        if !drop(i) {
            arrivals.push((now + Duration::from_millis(owd_ms), seq));
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
    let (tx, _) = run(5000, 1, 5, |i| i % 10 == 3);
    let loss = tx.view(Instant::ZERO).loss;
    assert!((0.07..0.13).contains(&loss), "loss {loss}");
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
