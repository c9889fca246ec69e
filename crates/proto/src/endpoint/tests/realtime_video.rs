//! `realtime` with a video call: frames of many packets sent back to back, FEC blocks long
//! enough that parity stays affordable, nothing delivered late; `fec = false` sends none.

use super::realtime::udp_packet;
use super::*;

/// Packets per frame: an I-frame of 62 packets every 30 frames, P-frames of 12 — the
/// realtime-media benchmark's 4 Mbit/s, 30 frames/s call at its mean sizes (1228-byte
/// packets: 1200 bytes of UDP payload).
fn frame_packets(f: u32) -> u32 {
    if f.is_multiple_of(30) {
        62
    } else {
        12
    }
}
const PACKET: usize = 1228;
const FRAMES: u32 = 600;

/// What a video stream got: packets and frames on time, packets late, bytes sent upstream.
#[derive(Debug, Clone, Copy)]
struct Video {
    packets: u32,
    on_time: u32,
    late: u32,
    frames_on_time: u32,
    bytes: usize,
    parity: u64,
}

impl Video {
    fn not_on_time(&self) -> f64 {
        1.0 - f64::from(self.on_time) / f64::from(self.packets)
    }
}

/// `FRAMES` frames at 30/s upstream, each frame's packets back to back, over links of 10
/// and 30 ms one way at 20 Mbit/s losing `loss` (both directions, independently).
fn video(policy: Policy, loss: (f64, f64), seed: u64) -> Video {
    let mut a = Link::new(10, Some(20.0));
    a.loss = loss.0;
    let mut b = Link::new(30, Some(20.0));
    b.loss = loss.1;
    let mut p = Pair::new(vec![a, b], policy, None, seed);
    p.establish();
    // Warm-up: a second of the stream's rate lets both paths' loss be measured.
    p.traffic(
        400,
        Duration::from_micros(2_500),
        PACKET,
        (true, false),
        Duration::from_secs(1),
        |_, _| {},
    );
    p.delivered_up.clear();
    let start = p.now;
    let mut sent_at = vec![];
    let mut frame_of = vec![];
    let mut n = 1_000u32;
    for f in 0..FRAMES {
        p.run_until(start + Duration::from_micros(33_333 * u64::from(f)));
        let now = p.now;
        for _ in 0..frame_packets(f) {
            p.client.handle_tun_packet(now, &udp_packet(n, PACKET));
            sent_at.push(now);
            frame_of.push(f);
            n += 1;
        }
    }
    p.run_until(p.now + Duration::from_secs(1));
    let deadline = Duration::from_millis(150);
    let mut arrived = vec![None; sent_at.len()];
    for (at, pkt) in p
        .delivered_up
        .iter()
        .filter(|(_, pkt)| number(pkt) >= 1_000)
    {
        assert_eq!(pkt, &udp_packet(number(pkt), PACKET), "corrupted packet");
        let i = (number(pkt) - 1_000) as usize;
        assert!(
            arrived[i].replace(*at).is_none(),
            "packet {i} delivered twice"
        );
    }
    let on_time_of =
        |i: usize| arrived[i].is_some_and(|a| a.saturating_since(sent_at[i]) <= deadline);
    let on_time = (0..sent_at.len()).filter(|&i| on_time_of(i)).count() as u32;
    let received = arrived.iter().filter(|a| a.is_some()).count() as u32;
    let mut frame_ok = vec![true; FRAMES as usize];
    for i in (0..sent_at.len()).filter(|&i| !on_time_of(i)) {
        frame_ok[frame_of[i] as usize] = false;
    }
    let frames_on_time = frame_ok.iter().filter(|&&ok| ok).count() as u32;
    let bytes = p
        .sent
        .iter()
        .filter(|s| s.to_server && s.at >= start)
        .map(|s| s.len)
        .sum();
    Video {
        packets: sent_at.len() as u32,
        on_time,
        late: received - on_time,
        frames_on_time,
        bytes,
        parity: p.client.session().counters().fec_parity_sent,
    }
}

/// Issue 17's bar with video: over links losing 2 % and 5 %, realtime + FEC leaves at most
/// p1·p2 + 0.2 % = 0.3 % of the packets not on time for at most 30 % more bytes than one
/// copy (`best`), and delivers nothing after its deadline. Tighter here, 25 %: blocks of 32
/// packets on the 5 % path need 6 shards (18.8 %), each shard ~10 % longer than a data
/// datagram (32 entries of 4 bytes), so ~21 %; 25 % leaves a shard for the loss estimate
/// reading high. Blocks of at most 16 need 4 shards (25 % + 10 %): this stream cost 26.6 %
/// with them here and 31 % in the lab (realtime-media), which is why blocks are 32 long.
/// Seeds 1-7 gave 18.5-21.2 % and 0-0.24 % not on time. Without FEC, no parity is sent
/// and the 5 % loss of the data path shows.
#[test]
fn video_over_lossy_links_parity_stays_affordable() {
    let loss = (0.02, 0.05);
    let best = video(Policy::Best, loss, 61);
    let rt = video(Policy::realtime(Duration::from_millis(150)), loss, 61);
    let bare = Policy::Realtime {
        deadline: Duration::from_millis(150),
        fec: false,
    };
    let no_fec = video(bare, loss, 61);
    let extra = rt.bytes as f64 / best.bytes as f64 - 1.0;
    eprintln!(
        "best {best:?}\nrealtime {rt:?} ({:+.1} % bytes)\nno fec {no_fec:?}",
        extra * 100.0
    );
    assert_eq!(rt.late, 0, "nothing delivered after its deadline");
    assert!(rt.not_on_time() <= loss.0 * loss.1 + 0.002, "{rt:?}");
    assert!(extra <= 0.25, "{:.1} % extra bytes", extra * 100.0);
    assert!(
        rt.frames_on_time > no_fec.frames_on_time,
        "{rt:?} {no_fec:?}"
    );
    assert_eq!(no_fec.parity, 0, "fec = false sends no parity");
    assert!(no_fec.not_on_time() > 0.01, "{no_fec:?}");
}
