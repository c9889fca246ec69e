//! Tests of the frame codec: fixtures, round trips, hostile input.

use super::*;
use crate::wire::REALTIME_CODE;
use proptest::prelude::*;

#[test]
fn fixture_bytes() {
    let mut b = [0u8; 64];
    let mut w = FrameWriter::new(&mut b);
    w.inner_header(InnerHeader {
        path_seq: 1,
        send_time_us: 2,
    })
    .unwrap();
    w.data(&DataFrame {
        data_seq: 3,
        flags: DataFlags::new(2, true),
        pred_gap: 0,
        deadline_ms: 0,
        payload: &[0xaa, 0xbb],
    })
    .unwrap();
    w.ping().unwrap();
    let n = w.len();
    assert_eq!(
        &b[..n],
        &[0, 0, 0, 1, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0, 3, 5, 0, 2, 0xaa, 0xbb, 3]
    );
    let (h, rest) = InnerHeader::parse(&b[..n]).unwrap();
    assert_eq!(h.path_seq, 1);
    let frames: Vec<_> = FrameReader::new(rest).collect::<Result<_, _>>().unwrap();
    assert_eq!(frames.len(), 2);
    match frames[0] {
        Frame::Data(d) => {
            assert_eq!(d.payload, &[0xaa, 0xbb]);
            assert!(d.flags.ordered());
            assert_eq!(d.flags.policy_code(), 2);
        }
        _ => panic!("expected data"),
    }
}

/// A realtime packet (policy code 3) carries its deadline after the flags.
#[test]
fn realtime_deadline_fixture() {
    let flags = DataFlags::new(REALTIME_CODE, false);
    assert_eq!((flags.realtime(), flags.extra_len()), (true, 2));
    let f = DataFrame {
        data_seq: 3,
        flags,
        pred_gap: 0,
        deadline_ms: 150,
        payload: &[0xaa],
    };
    let mut b = [0u8; 32];
    let mut w = FrameWriter::new(&mut b);
    w.data(&f).unwrap();
    let n = w.len();
    assert_eq!(n, DataFrame::header_len(flags) + 1);
    assert_eq!(
        &b[..n],
        &[1, 0, 0, 0, 0, 0, 0, 0, 3, 0x06, 0, 150, 0, 1, 0xaa]
    );
    assert_eq!(
        FrameReader::new(&b[..n]).collect::<Vec<_>>(),
        vec![Ok(Frame::Data(f))]
    );
    // Cut inside the deadline: an error, never a panic.
    let r: Vec<_> = FrameReader::new(&b[..11]).collect();
    assert!(matches!(r[0], Err(WireError::Truncated { .. })));
}

/// A flow-ordered packet carries its predecessor's distance after the flags, only when
/// it is neither the flow's first packet nor the session's previous one.
#[test]
fn pred_gap_fixture() {
    let flags = DataFlags::new(2, true);
    let (gap, g) = flags.with_pred_gap(Some(0x0102));
    assert_eq!(
        (gap.order_mode(), gap.extra_len(), g),
        (OrderMode::FlowGap, 2, 0x0102)
    );
    let (prev, g) = flags.with_pred_gap(Some(1));
    assert_eq!(
        (prev.order_mode(), prev.extra_len(), g),
        (OrderMode::FlowPrev, 0, 1)
    );
    let (first, _) = flags.with_pred_gap(None);
    assert_eq!(first.order_mode(), OrderMode::FlowFirst);
    let (far, _) = flags.with_pred_gap(Some(70_000));
    assert_eq!(far.order_mode(), OrderMode::Session);
    assert_eq!((far.ordered(), far.policy_code()), (true, 2));
    let mut b = [0u8; 32];
    let mut w = FrameWriter::new(&mut b);
    let f = DataFrame {
        data_seq: 3,
        flags: gap,
        pred_gap: 0x0102,
        deadline_ms: 0,
        payload: &[0xaa],
    };
    w.data(&f).unwrap();
    let n = w.len();
    assert_eq!(
        &b[..n],
        &[1, 0, 0, 0, 0, 0, 0, 0, 3, 0x15, 1, 2, 0, 1, 0xaa]
    );
    let frames: Vec<_> = FrameReader::new(&b[..n]).collect();
    assert_eq!(frames, vec![Ok(Frame::Data(f))]);
    // Cut inside the gap: an error, never a panic.
    let r: Vec<_> = FrameReader::new(&b[..11]).collect();
    assert!(matches!(r[0], Err(WireError::Truncated { .. })));
}

#[test]
fn nack_fixture() {
    let mut b = [0u8; 16];
    let mut w = FrameWriter::new(&mut b);
    let n = NackFrame {
        path: 2,
        first: 0x0102_0304,
        count: 5,
    };
    w.nack(&n).unwrap();
    let len = w.len();
    assert_eq!(&b[..len], &[8, 2, 1, 2, 3, 4, 0, 5]);
    let frames: Vec<_> = FrameReader::new(&b[..len]).collect();
    assert_eq!(frames, vec![Ok(Frame::Nack(n))]);
    // Truncated: an error, never a panic or a read past the end.
    let r: Vec<_> = FrameReader::new(&b[..len - 1]).collect();
    assert!(matches!(r[0], Err(WireError::Truncated { .. })));
}

#[test]
fn truncated_data_is_error() {
    let b = [1u8, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 10, 1, 2];
    let r: Vec<_> = FrameReader::new(&b).collect();
    assert!(matches!(r[0], Err(WireError::Truncated { .. })));
    assert_eq!(r.len(), 1);
}

fn arb_ack() -> impl Strategy<Value = AckFrame> {
    (
        any::<u8>(),
        any::<u32>(),
        any::<u32>(),
        any::<u64>(),
        any::<u64>(),
    )
        .prop_map(
            |(path, largest, ack_delay_us, recv_count, recv_bytes)| AckFrame {
                path,
                largest,
                ack_delay_us,
                recv_count,
                recv_bytes,
            },
        )
}

proptest! {
    #[test]
    fn round_trip(seq: u64, flags: u8, gap: u16, deadline: u16, payload in proptest::collection::vec(any::<u8>(), 0..200),
                  acks in proptest::collection::vec(arb_ack(), 0..4), ping: bool,
                  pair in proptest::option::of((any::<u8>(), any::<u32>()))) {
        let mut b = vec![0u8; 2048];
        let mut w = FrameWriter::new(&mut b);
        for a in &acks { w.ack(a).unwrap(); }
        let pair = pair.map(|(path, capacity_kbps)| PairFrame { path, capacity_kbps });
        if let Some(p) = &pair { w.pair(p).unwrap(); }
        let flags = DataFlags(flags);
        // What the reader reports: the gap only where the order mode names one.
        let pred_gap = match flags.order_mode() {
            OrderMode::FlowGap => gap,
            OrderMode::FlowPrev => 1,
            _ => 0,
        };
        // And the deadline only for a realtime packet.
        let deadline_ms = if flags.realtime() { deadline } else { 0 };
        w.data(&DataFrame { data_seq: seq, flags, pred_gap, deadline_ms, payload: &payload }).unwrap();
        if ping { w.ping().unwrap(); }
        let n = w.len();
        let frames: Vec<_> = FrameReader::new(&b[..n]).collect::<Result<_, _>>().unwrap();
        let np = usize::from(pair.is_some());
        prop_assert_eq!(frames.len(), acks.len() + np + 1 + usize::from(ping));
        for (f, a) in frames.iter().zip(&acks) { prop_assert_eq!(*f, Frame::Ack(*a)); }
        if let Some(p) = pair { prop_assert_eq!(frames[acks.len()], Frame::Pair(p)); }
        prop_assert_eq!(frames[acks.len() + np], Frame::Data(DataFrame { data_seq: seq, flags, pred_gap, deadline_ms, payload: &payload }));
    }

    /// FEC frames round-trip, and a cut anywhere is an error, never a panic.
    #[test]
    fn fec_round_trip(first_seq: u64, m: u8, index: u8, deadline_ms: u16,
                      entries in proptest::collection::vec(any::<u8>(), 0..16),
                      shard in proptest::collection::vec(any::<u8>(), 0..300), cut in 0usize..400) {
        let k = (entries.len() / FecFrame::ENTRY_LEN) as u8;
        let entries = &entries[..usize::from(k) * FecFrame::ENTRY_LEN];
        let f = FecFrame { first_seq, k, m, index, deadline_ms, entries, shard: &shard };
        let mut b = vec![0u8; 512];
        let mut w = FrameWriter::new(&mut b);
        w.fec(&f).unwrap();
        let n = w.len();
        prop_assert_eq!(n, FecFrame::len(usize::from(k), shard.len()));
        let frames: Vec<_> = FrameReader::new(&b[..n]).collect();
        prop_assert_eq!(frames, vec![Ok(Frame::Fec(f))]);
        for (i, e) in entries.chunks(4).enumerate() {
            prop_assert_eq!(f.entry(i), Some((u16::from_be_bytes([e[0], e[1]]), u16::from_be_bytes([e[2], e[3]]))));
        }
        prop_assert_eq!(f.entry(usize::from(k)), None);
        if cut < n {
            let r: Vec<_> = FrameReader::new(&b[..cut]).collect();
            prop_assert!(r.iter().all(|x| x.is_err()) || r.is_empty());
        }
    }

    #[test]
    fn reader_never_panics(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        for f in FrameReader::new(&data) { let _ = f; }
        let _ = InnerHeader::parse(&data);
    }
}
