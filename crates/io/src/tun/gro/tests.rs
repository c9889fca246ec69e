//! Tests of [`GroBatch`]: hand-built segment sequences that must or must not merge, and
//! properties checked against `split_gso` and an independent 16-bit checksum.

use super::*;
use crate::tun::split_gso;
use proptest::prelude::*;

const ACK: u8 = 0x10;
const PSH: u8 = 0x08;
const FIN: u8 = 0x01;
const ECE: u8 = 0x40;

/// Reference one's-complement checksum over 16-bit words, deliberately naive (the crate's
/// `sum` works on 64-bit words and must not check itself).
fn ref_fold(parts: &[&[u8]]) -> u16 {
    let data: Vec<u8> = parts.concat();
    let mut acc: u64 = 0;
    for w in data.chunks(2) {
        acc += u64::from(w[0]) << 8 | u64::from(*w.get(1).unwrap_or(&0));
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// Everything the headers of one flow's segments share.
#[derive(Clone, Debug)]
struct Flow {
    v6: bool,
    sport: u16,
    tos: u8,
    ttl: u8,
    df: bool,
    ack: u32,
    window: u16,
    /// TCP options, a multiple of 4 bytes.
    options: Vec<u8>,
}

fn flow(v6: bool) -> Flow {
    Flow {
        v6,
        sport: 40000,
        tos: 0,
        ttl: 64,
        df: true,
        ack: 0x1234_5678,
        window: 502,
        // NOP NOP timestamps, as Linux sends them.
        options: vec![1, 1, 8, 10, 0, 0, 0x10, 0, 0, 0, 0x20, 0],
    }
}

/// A TCP segment of `f` with valid IP and TCP checksums.
fn segment(f: &Flow, seq: u32, id: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut tcp = vec![0u8; 20];
    tcp[0..2].copy_from_slice(&f.sport.to_be_bytes());
    tcp[2..4].copy_from_slice(&443u16.to_be_bytes());
    tcp[4..8].copy_from_slice(&seq.to_be_bytes());
    tcp[8..12].copy_from_slice(&f.ack.to_be_bytes());
    tcp[12] = (((20 + f.options.len()) / 4) as u8) << 4;
    tcp[13] = flags;
    tcp[14..16].copy_from_slice(&f.window.to_be_bytes());
    tcp.extend_from_slice(&f.options);
    tcp.extend_from_slice(payload);
    let tlen = (tcp.len() as u16).to_be_bytes();
    let mut ip = if f.v6 {
        let mut ip = vec![
            0x60 | f.tos >> 4,
            f.tos << 4,
            0x0a,
            0xbc,
            tlen[0],
            tlen[1],
            6,
            f.ttl,
        ];
        ip.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        ip.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        ip
    } else {
        let total = ((20 + tcp.len()) as u16).to_be_bytes();
        let mut ip = vec![0x45, f.tos, total[0], total[1], (id >> 8) as u8, id as u8];
        ip.extend_from_slice(&[if f.df { 0x40 } else { 0 }, 0, f.ttl, 6, 0, 0]);
        ip.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        let c = !ref_fold(&[&ip]);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        ip
    };
    let addrs = if f.v6 { &ip[8..40] } else { &ip[12..20] };
    let c = !ref_fold(&[addrs, &[0, 6], &tlen, &tcp]);
    tcp[16..18].copy_from_slice(&c.to_be_bytes());
    ip.extend(tcp);
    ip
}

/// Consecutive segments of `f` with the given payload sizes, PSH on the last if asked.
fn stream(f: &Flow, seq0: u32, id0: u16, sizes: &[usize], psh_last: bool) -> Vec<Vec<u8>> {
    let mut seq = seq0;
    let mut out = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let payload: Vec<u8> = (0..n)
            .map(|j| (j * 31 + i * 7 + seq as usize) as u8)
            .collect();
        let psh = if psh_last && i + 1 == sizes.len() {
            PSH
        } else {
            0
        };
        out.push(segment(
            f,
            seq,
            id0.wrapping_add(i as u16),
            ACK | psh,
            &payload,
        ));
        seq = seq.wrapping_add(n as u32);
    }
    out
}

fn coalesce(batch: &mut GroBatch, pkts: &[Vec<u8>]) -> Vec<Vec<u8>> {
    for p in pkts {
        batch.push(p).expect("batch has room");
    }
    let mut frames = Vec::new();
    batch.flush(|f| frames.push(f.to_vec()));
    assert!(batch.is_empty());
    frames
}

fn run(pkts: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let frames = coalesce(&mut GroBatch::new(), pkts);
    frames.iter().for_each(|f| check_frame(f));
    frames
}

fn split(frames: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for f in frames {
        split_gso(f, &mut Vec::new(), |p| out.push(p.to_vec())).expect("valid frame");
    }
    out
}

fn ne16(b: &[u8]) -> usize {
    usize::from(u16::from_ne_bytes([b[0], b[1]]))
}

/// Checks a frame independently of `split_gso`: a zero header, or a GSO header whose fields
/// match the packet, with correct IP length, IPv4 header checksum and pseudo-header sum.
fn check_frame(frame: &[u8]) {
    let (h, p) = frame.split_at(VNET_HDR_LEN);
    if h == [0; VNET_HDR_LEN] {
        return;
    }
    let v6 = p[0] >> 4 == 6;
    let l4 = if v6 { 40 } else { 20 };
    assert_eq!(h[0], 1, "NEEDS_CSUM");
    assert_eq!(h[1], if v6 { 4 } else { 1 }, "gso_type");
    let hdr_len = l4 + usize::from(p[l4 + 12] >> 4) * 4;
    assert_eq!(ne16(&h[2..]), hdr_len, "hdr_len");
    let gso_size = ne16(&h[4..]);
    assert!(gso_size > 0 && p.len() - hdr_len > gso_size, "gso_size");
    assert_eq!(
        (ne16(&h[6..]), ne16(&h[8..])),
        (l4, 16),
        "csum_start/offset"
    );
    assert!(p.len() <= 65535);
    let tlen = ((p.len() - l4) as u16).to_be_bytes();
    if v6 {
        assert_eq!(usize::from(u16::from_be_bytes([p[4], p[5]])), p.len() - 40);
    } else {
        assert_eq!(usize::from(u16::from_be_bytes([p[2], p[3]])), p.len());
        assert_eq!(ref_fold(&[&p[..20]]), 0xffff, "IPv4 header checksum");
    }
    let addrs = if v6 { &p[8..40] } else { &p[12..20] };
    let pseudo = ref_fold(&[addrs, &[0, 6], &tlen]);
    assert_eq!(
        p[l4 + 16..l4 + 18],
        pseudo.to_be_bytes(),
        "partial checksum"
    );
}

fn is_gso(frame: &[u8]) -> bool {
    frame[1] != 0
}

#[test]
fn tcpv4_stream_merges_into_one_frame_and_splits_back() {
    let pkts = stream(
        &flow(false),
        7,
        100,
        &[1000, 1000, 1000, 1000, 1000, 300],
        true,
    );
    let frames = run(&pkts);
    assert_eq!(frames.len(), 1);
    let f = &frames[0];
    assert_eq!(&f[..2], &[1, 1]);
    assert_eq!((ne16(&f[2..]), ne16(&f[4..])), (20 + 32, 1000));
    assert_eq!(f.len(), VNET_HDR_LEN + 52 + 5300);
    assert_eq!(
        f[VNET_HDR_LEN + 20 + 13],
        ACK | PSH,
        "PSH of the last segment kept"
    );
    assert_eq!(split(&frames), pkts);
}

#[test]
fn tcpv6_stream_merges_into_one_frame_and_splits_back() {
    let mut f6 = flow(true);
    f6.tos = 0x28;
    let pkts = stream(&f6, u32::MAX - 1500, 0, &[1200, 1200, 1200], false);
    let frames = run(&pkts);
    assert_eq!(frames.len(), 1);
    assert_eq!(&frames[0][..2], &[1, 4]);
    assert_eq!(split(&frames), pkts);
}

/// Runs `pkts`, expects frames of the given segment counts, and a byte-exact round trip.
fn expect_frames(pkts: &[Vec<u8>], segs: &[usize]) {
    let frames = run(pkts);
    let mut got = Vec::new();
    for f in &frames {
        let n = split(std::slice::from_ref(f)).len();
        assert_eq!(is_gso(f), n > 1, "single packets go with a zero header");
        got.push(n);
    }
    assert_eq!(got, segs);
    assert_eq!(split(&frames), pkts);
}

#[test]
fn sequence_gap_ends_the_frame() {
    let f = flow(false);
    let mut pkts = stream(&f, 0, 0, &[500, 500], false);
    pkts.extend(stream(&f, 1001, 2, &[500, 500], false));
    expect_frames(&pkts, &[2, 2]);
}

#[test]
fn flags_other_than_ack_and_final_psh_are_not_merged() {
    let f = flow(false);
    let mut pkts = stream(&f, 0, 0, &[500, 500], true); // PSH closes the frame
    pkts.extend(stream(&f, 1000, 2, &[500], false));
    pkts.push(segment(&f, 1500, 3, ACK | FIN, &[1; 500]));
    pkts.push(segment(&f, 2000, 4, ACK | ECE, &[2; 500]));
    pkts.push(segment(&f, 2500, 5, ACK | ECE, &[2; 500]));
    expect_frames(&pkts, &[2, 1, 1, 1, 1]);
}

#[test]
fn header_mismatches_are_not_merged() {
    type Tweak = fn(&mut Flow);
    let tweaks: [(&str, Tweak); 7] = [
        ("TTL", |f| f.ttl -= 1),
        ("TOS", |f| f.tos = 0x01), // an ECN mark
        ("DF", |f| f.df = false),
        ("ACK number", |f| f.ack += 1),
        ("window", |f| f.window += 1),
        ("timestamp", |f| f.options[7] ^= 1),
        ("option kind", |f| {
            f.options = vec![1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
        }),
    ];
    for v6 in [false, true] {
        for (what, tweak) in tweaks {
            let a = flow(v6);
            let mut b = a.clone();
            tweak(&mut b);
            if v6 && what == "DF" {
                continue;
            }
            let mut pkts = stream(&a, 0, 0, &[100, 100], false);
            pkts.extend(stream(&b, 200, 2, &[100, 100], false));
            let frames = run(&pkts);
            assert_eq!(
                frames.len(),
                2,
                "{what} mismatch (v6 {v6}) must split frames"
            );
            assert_eq!(split(&frames), pkts, "{what}");
        }
    }
}

#[test]
fn ipv4_ids_must_increment_or_be_fixed_with_df() {
    let mut f = flow(false);
    let mk = |f: &Flow, ids: [u16; 3]| -> Vec<Vec<u8>> {
        let seq = |i: u32| i * 100;
        (0..3)
            .map(|i| segment(f, seq(i), ids[i as usize], ACK, &[i as u8; 100]))
            .collect()
    };
    expect_frames(&mk(&f, [9, 11, 12]), &[1, 2]);
    expect_frames(&mk(&f, [9, 10, 10]), &[2, 1]);
    // DF with a fixed ID merges; splitting renumbers the IDs but keeps everything else.
    let pkts = mk(&f, [7, 7, 7]);
    let frames = run(&pkts);
    assert_eq!(frames.len(), 1);
    for (i, (got, want)) in split(&frames).iter().zip(&pkts).enumerate() {
        assert_eq!(u16::from_be_bytes([got[4], got[5]]), 7 + i as u16);
        assert_eq!(
            (&got[..4], &got[6..10], &got[12..]),
            (&want[..4], &want[6..10], &want[12..])
        );
    }
    f.df = false;
    expect_frames(&mk(&f, [7, 7, 7]), &[1, 1, 1]);
}

#[test]
fn segment_sizes_follow_the_first_and_only_the_last_is_smaller() {
    let f = flow(false);
    expect_frames(&stream(&f, 0, 0, &[500, 600, 500], false), &[1, 2]);
    expect_frames(&stream(&f, 0, 0, &[500, 400, 500], false), &[2, 1]);
}

#[test]
fn frames_stop_at_64_kib() {
    let pkts = stream(&flow(false), 0, 0, &[1400; 50], false);
    let frames = run(&pkts);
    assert_eq!(frames.len(), 2);
    assert!(frames.iter().all(|f| f.len() - VNET_HDR_LEN <= 65535));
    assert_eq!(split(&frames), pkts);
}

#[test]
fn corrupted_segments_travel_alone() {
    let f = flow(false);
    let mut pkts = stream(&f, 0, 0, &[300; 4], false);
    let last = pkts[2].len() - 1;
    pkts[2][last] ^= 0x55; // payload changed, checksum not
    expect_frames(&pkts, &[2, 1, 1]);
    let mut pkts = stream(&f, 0, 0, &[300; 3], false);
    pkts[0][10] ^= 1; // bad IPv4 header checksum on the frame's first segment
    expect_frames(&pkts, &[1, 2]);
}

#[test]
fn flows_merge_separately_and_keep_their_order() {
    let a = flow(false);
    let mut b = flow(false);
    b.sport = 40001;
    let sa = stream(&a, 0, 0, &[200; 3], false);
    let sb = stream(&b, 0, 50, &[200; 2], false);
    let pkts = vec![
        sa[0].clone(),
        sb[0].clone(),
        sa[1].clone(),
        sb[1].clone(),
        sa[2].clone(),
    ];
    let frames = run(&pkts);
    assert_eq!(frames.len(), 2);
    assert_eq!(
        split(&frames[..1]),
        [sa[0].clone(), sa[1].clone(), sa[2].clone()]
    );
    assert_eq!(split(&frames[1..]), sb);
    // A pure ACK of the flow in between: later data must not overtake it.
    let ack = segment(&a, 200, 1, ACK, &[]);
    let pkts = vec![sa[0].clone(), ack.clone(), sa[1].clone(), sa[2].clone()];
    expect_frames(&pkts, &[1, 1, 2]);
}

#[test]
fn other_packets_pass_through_unchanged() {
    let junk: Vec<Vec<u8>> = vec![
        vec![],
        vec![0x45],
        vec![
            0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0,
        ],
        vec![0x60; 39],
        vec![0x46; 60], // IPv4 with options, protocol 0x46
        vec![0xff; 70_000],
    ];
    let frames = run(&junk);
    assert_eq!(frames.len(), junk.len());
    for (f, p) in frames.iter().zip(&junk) {
        assert_eq!(&f[..VNET_HDR_LEN], &[0; VNET_HDR_LEN]);
        assert_eq!(&f[VNET_HDR_LEN..], &p[..]);
    }
}

#[test]
fn a_full_batch_refuses_new_frames_but_still_merges() {
    let mut batch = GroBatch::with_capacity(2);
    let f = flow(false);
    let s = stream(&f, 0, 0, &[100; 3], false);
    batch.push(&s[0]).unwrap();
    batch.push(&[0x45, 0]).unwrap();
    assert_eq!(batch.push(&[0x45, 1]), Err(GroError::Full { capacity: 2 }));
    // The junk packet is the flow-less newest frame; the flow's frame still grows.
    batch.push(&s[1]).unwrap();
    assert_eq!(batch.len(), 2);
    let mut frames = Vec::new();
    batch.flush(|fr| frames.push(fr.to_vec()));
    assert_eq!(split(&frames[..1]), s[..2]);
    batch.push(&s[2]).unwrap(); // room again after flush; buffers are reused
    assert_eq!(batch.len(), 1);
}

/// A random valid stream: mss, count (within 64 KiB), last size, PSH, options, v4/v6.
fn any_stream() -> impl Strategy<Value = (Flow, Vec<Vec<u8>>)> {
    (
        any::<bool>(),
        1usize..=1460,
        0usize..=1459,
        any::<(u32, u16, u32, u16, bool, bool)>(),
        prop_oneof![Just(0usize), Just(12), Just(40)],
        1usize..=60,
    )
        .prop_map(
            |(v6, mss, last, (seq, id, ack, window, psh, df), opt, want)| {
                let mut f = flow(v6);
                (f.ack, f.window, f.df) = (ack, window, df || v6);
                f.options = (0..opt).map(|i| (i as u8).wrapping_mul(37) | 1).collect();
                f.options.iter_mut().step_by(2).for_each(|b| *b = 1); // NOPs: valid options
                let hdr = if v6 { 40 } else { 20 } + 20 + opt;
                let max = ((65535 - hdr) / mss).max(2);
                let mut sizes = vec![mss; want.clamp(2, max)];
                *sizes.last_mut().unwrap() = (last % mss) + 1;
                if sizes.iter().sum::<usize>() + hdr > 65535 {
                    sizes.pop();
                }
                let pkts = stream(&f, seq, id, &sizes, psh);
                (f, pkts)
            },
        )
        .prop_filter("two segments", |(_, p)| p.len() >= 2)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn valid_streams_merge_into_one_frame_that_splits_back_exactly((_f, pkts) in any_stream()) {
        let frames = run(&pkts);
        prop_assert_eq!(frames.len(), 1);
        prop_assert!(is_gso(&frames[0]));
        prop_assert_eq!(split(&frames), pkts);
    }

    /// Interleaved flows with random damage (dropped, repeated, corrupted, re-flagged or
    /// re-TTLed segments) and a tiny capacity: whatever merges, each flow's packets come back
    /// byte for byte and in order, and nothing is lost or invented.
    #[test]
    fn damaged_interleavings_round_trip_per_flow(
        streams in prop::collection::vec(any_stream(), 1..=3),
        order in prop::collection::vec(any::<prop::sample::Index>(), 200),
        damage in prop::collection::vec((0u8..6, any::<(prop::sample::Index, prop::sample::Index)>()), 0..8),
        capacity in 1usize..=8,
    ) {
        let mut queues: Vec<Vec<Vec<u8>>> = streams.into_iter().enumerate().map(|(i, (mut f, _))| {
            f.sport = 1000 + i as u16;
            stream(&f, 1, 1, &[700, 700, 700, 700, 300], false)
        }).collect();
        for (kind, (qi, pi)) in damage {
            let n = queues.len();
            let q = &mut queues[qi.index(n)];
            if q.is_empty() {
                continue;
            }
            let i = pi.index(q.len());
            let v6 = q[i][0] >> 4 == 6;
            let l4 = if v6 { 40 } else { 20 };
            let p = &mut q[i];
            match kind {
                0 => { q.remove(i); }
                1 => { let p = p.clone(); q.insert(i, p); }
                2 => { let n = p.len(); p[n - 1] ^= 0x80; }
                3 => p[l4 + 13] |= PSH, // the TCP checksum is now wrong too
                4 if v6 => p[7] -= 1,
                4 => {
                    p[8] -= 1;
                    p[10..12].fill(0);
                    let c = !ref_fold(&[&p[..20]]);
                    p[10..12].copy_from_slice(&c.to_be_bytes());
                }
                _ => {}
            }
        }
        let mut input = Vec::new();
        let mut next = vec![0; queues.len()];
        for pick in order {
            let q = pick.index(queues.len());
            if let Some(p) = queues[q].get(next[q]) { input.push(p.clone()); next[q] += 1; }
        }
        let mut batch = GroBatch::with_capacity(capacity);
        let mut frames = Vec::new();
        for p in &input {
            if batch.push(p).is_err() {
                batch.flush(|f| frames.push(f.to_vec()));
                batch.push(p).unwrap();
            }
        }
        batch.flush(|f| frames.push(f.to_vec()));
        frames.iter().for_each(|f| check_frame(f));
        let out = split(&frames);
        prop_assert_eq!(out.len(), input.len());
        let port = |p: &Vec<u8>| { let l4 = if p[0] >> 4 == 6 { 40 } else { 20 }; p[l4..l4 + 2].to_vec() };
        for q in 0..queues.len() {
            let sport = (1000 + q as u16).to_be_bytes().to_vec();
            let want: Vec<_> = input.iter().filter(|p| port(p) == sport).collect();
            let got: Vec<_> = out.iter().filter(|p| port(p) == sport).collect();
            prop_assert_eq!(got, want);
        }
    }

    /// The 64-bit-word checksum equals the naive 16-bit one on any data and split point.
    #[test]
    fn wide_sum_matches_reference(data in prop::collection::vec(any::<u8>(), 0..200), cut in 0usize..200) {
        let cut = cut.min(data.len()) & !1; // sums chain at even offsets
        let ours = fold(sum(sum(0, &data[..cut]), &data[cut..]));
        prop_assert_eq!(ours, ref_fold(&[&data]));
    }
}
