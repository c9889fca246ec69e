//! FEC: any k of n shards rebuild the block byte for byte; fewer rebuild nothing.

use super::*;
use crate::path::PathId;
use crate::wire::FecFrame;
use crate::Instant;
use proptest::prelude::*;
use std::sync::Arc;

/// Encodes `packets` (data_seq from `first`, every other number) with m parity shards.
fn encode(first: u64, packets: &[Vec<u8>], m: usize) -> ParityBlock {
    let mut e = Encoder::default();
    for (i, p) in packets.iter().enumerate() {
        let pending = Pending {
            seq: first + 2 * i as u64,
            sent: Instant::from_micros(20_000 * i as u64),
            path: PathId(0),
            packet: Arc::from(p.as_slice()),
        };
        assert!(e.fits(pending.seq, p.len(), 150, 1400));
        e.add(pending, 150, Instant::from_micros(1_000_000));
    }
    e.close(m).expect("parity")
}

fn frame_of<'a>(b: &'a ParityBlock, entries: &'a [u8], index: usize) -> FecFrame<'a> {
    FecFrame {
        first_seq: b.first_seq,
        k: b.entries.len() as u8,
        m: b.parity.len() as u8,
        index: index as u8,
        deadline_ms: b.deadline_ms,
        entries,
        shard: &b.parity[index],
    }
}

proptest! {
    /// Shards 0..k are the data packets, k..k+m the parity; `take` picks which arrive
    /// and `order` shuffles them.
    #[test]
    fn any_k_of_n_rebuild_the_block(
        packets in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..300), 1..=MAX_K),
        m in 1usize..=4,
        take in proptest::collection::vec(any::<bool>(), MAX_K + 4),
        order in any::<u64>(),
        first in 0u64..1_000_000,
    ) {
        let k = packets.len();
        let block = encode(first, &packets, m);
        let now = Instant::from_micros(400_000);
        let entries = block.entries_at(now);
        let mut arriving: Vec<usize> = (0..k + m).filter(|&i| take[i]).collect();
        // A deterministic shuffle from `order`.
        let mut x = order | 1;
        for i in (1..arriving.len()).rev() {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            arriving.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let mut d = Decoder::default();
        let mut got: Vec<(u64, Vec<u8>)> = vec![];
        let mut rebuilt = vec![];
        for &i in &arriving {
            if i < k {
                let seq = first + 2 * i as u64;
                // Already rebuilt: the session's de-duplication drops the original.
                if rebuilt.iter().any(|r: &Rebuilt| r.seq == seq) {
                    continue;
                }
                got.push((seq, packets[i].clone()));
                rebuilt.extend(d.on_data(seq, &packets[i]));
            } else {
                let f = frame_of(&block, &entries, i - k);
                rebuilt.extend(d.on_parity(400_000, &f).unwrap());
            }
        }
        // A rebuilt packet is one that had not arrived (yet).
        for r in &rebuilt {
            prop_assert!(!got.iter().any(|g| g.0 == r.seq));
        }
        if arriving.len() >= k {
            for r in &rebuilt {
                // Sent 20 ms apart: the entries give each packet's own send time back.
                let i = ((r.seq - first) / 2) as usize;
                prop_assert_eq!(r.sent_us, (20_000 * i) as u32);
                prop_assert_eq!(r.deadline_ms, 150);
            }
            got.extend(rebuilt.into_iter().map(|r| (r.seq, r.packet)));
            got.sort();
            let want: Vec<_> = packets.iter().enumerate().map(|(i, p)| (first + 2 * i as u64, p.clone())).collect();
            prop_assert_eq!(got, want);
        } else {
            prop_assert!(rebuilt.is_empty(), "nothing invented from fewer than k shards");
        }
    }

    /// Whatever a FEC frame says, the decoder neither panics nor rebuilds from it alone
    /// more than it names.
    #[test]
    fn hostile_parity_is_harmless(
        first_seq: u64, k: u8, m: u8, index: u8,
        entries in proptest::collection::vec(any::<u8>(), 0..80),
        shard in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut d = Decoder::default();
        let f = FecFrame { first_seq, k, m, index, deadline_ms: 1, entries: &entries, shard: &shard };
        if let Ok(r) = d.on_parity(0, &f) {
            prop_assert!(r.len() <= usize::from(k));
        }
    }
}

#[test]
fn parity_follows_loss() {
    let t = TARGET_RESIDUAL;
    assert_eq!(parity_count(&[0.0; 6], 0.0, t), 0);
    let m1 = parity_count(&[0.01; 6], 0.01, t);
    let m5 = parity_count(&[0.05; 6], 0.05, t);
    assert!(m1 >= 1 && m5 > m1, "{m1} {m5}");
    assert_eq!(parity_count(&[0.99; 6], 0.99, t), MAX_M);
}

/// Parity grows slower than the block: at 5 % loss (parity on a 2 % path) 16 packets need
/// 4 shards (25 %) and 32 packets 6 (19 %) — the binomial sums of `parity_count`, checked
/// by hand: 16 packets with 3 shards leave 0.22 % unrecoverable, with 4 0.04 %; 32 packets
/// with 5 shards 0.12 %, with 6 0.03 % (target 0.1 %).
#[test]
fn long_blocks_need_relatively_less_parity() {
    let t = TARGET_RESIDUAL;
    assert_eq!(parity_count(&[0.05; 16], 0.02, t), 4);
    assert_eq!(parity_count(&[0.05; 32], 0.02, t), 6);
    // A block takes 32 video packets of 1228 bytes (1200 bytes of UDP payload): its parity
    // frame, 14 + 32 × 4 + 2 + 1230 = 1374 bytes, fits a 1400-byte room; the 33rd opens a
    // new block.
    let mut e = Encoder::default();
    for seq in 0..32u64 {
        assert!(e.fits(seq, 1228, 150, 1400), "packet {seq}");
        let pending = Pending {
            seq,
            sent: Instant::ZERO,
            path: PathId(0),
            packet: Arc::from(vec![0u8; 1228]),
        };
        e.add(pending, 150, Instant::from_micros(100_000));
    }
    assert!(e.full() && !e.fits(32, 1228, 150, 1400));
}

/// Each packet counts with its own path's loss: a block half on a clean path needs less
/// parity than one wholly on the lossy path, and more than one wholly on the clean path.
#[test]
fn parity_counts_each_packet_at_its_paths_loss() {
    let t = TARGET_RESIDUAL;
    let mixed: Vec<f64> = (0..32)
        .map(|i| if i % 2 == 0 { 0.05 } else { 0.0 })
        .collect();
    let lossy = parity_count(&[0.05; 32], 0.02, t);
    let half = parity_count(&mixed, 0.02, t);
    assert!(half < lossy && half > 0, "{half} {lossy}");
    // The distribution of lost packets matches the binomial when all losses are equal.
    let pb = lost_count(&[0.05; 16]);
    let b = binomial(16, 0.05);
    assert!(pb.iter().zip(&b).all(|(x, y)| (x - y).abs() < 1e-12));
}

#[test]
fn shards_carry_the_real_length() {
    let s = data_shard(&[1, 2, 3], 8);
    assert_eq!(s, vec![0, 3, 1, 2, 3, 0, 0, 0]);
    assert_eq!(packet_of(&s), Some(&[1u8, 2, 3][..]));
    assert_eq!(packet_of(&[0, 9, 1]), None);
}
