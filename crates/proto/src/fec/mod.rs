//! Forward error correction for `realtime` flows: Reed-Solomon parity over small blocks
//! of realtime packets, so a packet lost on a path is rebuilt at the receiver before its
//! deadline instead of being sent again (no time for that) or sent twice up front.
//!
//! - A block collects up to `MAX_K` realtime packets in send order; it closes when full,
//!   when its parity frame would no longer fit a datagram, or when its oldest packet has
//!   waited as long as the deadline allows: the parity must still reach the receiver in
//!   time to rebuild that packet (`Encoder`, the session decides the time).
//! - The number of parity shards m follows the measured loss (`parity_count`): the
//!   smallest m for which the expected fraction of the block's packets left unrecoverable
//!   is at most the target, each data packet counted with the loss of the path it took;
//!   none on clean paths. Up to 32 packets a block: a video call sends 10-60 packets a
//!   frame, and the parity a block needs grows slower than the block (5 % loss: 4 shards
//!   for 16 packets, 6 for 32), so long blocks are what keeps video's parity affordable.
//! - Shards: each data packet becomes `len u16 | packet | zeros` up to the block's
//!   longest packet + 2 bytes (unequal lengths are padded, the real length is inside the
//!   shard); parity shards have that length. The codec is `reed-solomon-erasure` (GF(2^8),
//!   Backblaze's construction): any k of the k + m shards rebuild the k data shards.
//! - Receiver (`Decoder`): keeps the last realtime packets received and the parity shards
//!   of recent blocks; as soon as a block has k shards and misses data, rebuilds the
//!   missing packets. Fewer than k shards: nothing is rebuilt. A rebuilt packet goes
//!   through the session's de-duplication like any copy.
//!
//! Invariants: bounded memory (`MAX_RECENT` packets, `MAX_BLOCKS` blocks); nothing from
//! the wire is trusted (k, m, index, lengths and entries are checked; a shard that
//! disagrees with its block is ignored); a block is decoded at most once.

mod decoder;
mod encoder;

pub use decoder::{BadParity, Decoder, Rebuilt};
pub use encoder::{Encoder, ParityBlock, Pending};

use reed_solomon_erasure::galois_8::ReedSolomon;

/// Most data packets per block.
pub const MAX_K: usize = 32;
/// Most parity shards per block.
pub const MAX_M: usize = 8;
/// Residual loss the parity aims for: expected fraction of a block's packets that stay
/// lost after decoding (the brief's bound is p1·p2 + 0.2 %; half of 0.2 % leaves room).
pub const TARGET_RESIDUAL: f64 = 0.001;

/// Bytes of the length prefix inside a shard.
pub const LEN_PREFIX: usize = 2;

/// The data shard of `packet` in a block whose shards are `shard_len` bytes.
pub fn data_shard(packet: &[u8], shard_len: usize) -> Vec<u8> {
    let mut s = vec![0u8; shard_len];
    let n = packet.len().min(shard_len.saturating_sub(LEN_PREFIX));
    s[..LEN_PREFIX].copy_from_slice(&(n as u16).to_be_bytes());
    s[LEN_PREFIX..LEN_PREFIX + n].copy_from_slice(&packet[..n]);
    s
}

/// The packet inside a data shard (`None` if its length prefix does not fit the shard).
pub fn packet_of(shard: &[u8]) -> Option<&[u8]> {
    let n = usize::from(u16::from_be_bytes([*shard.first()?, *shard.get(1)?]));
    shard.get(LEN_PREFIX..LEN_PREFIX + n)
}

/// A codec for k data and m parity shards (`None` outside the bounds).
fn codec(k: usize, m: usize) -> Option<ReedSolomon> {
    if !(1..=MAX_K).contains(&k) || !(1..=MAX_M).contains(&m) {
        return None;
    }
    ReedSolomon::new(k, m).ok()
}

/// The least m in 0..=`MAX_M` such that, with the block's data packets each lost with
/// its own probability (`p_data`, one per packet: the loss of the path it took) and m
/// parity shards each lost with `p_parity` (all independently), the expected fraction of
/// data packets not rebuilt is at most `target`; `MAX_M` if none is.
pub fn parity_count(p_data: &[f64], p_parity: f64, target: f64) -> usize {
    let k = p_data.len();
    let pp = p_parity.clamp(0.0, 1.0);
    if k == 0 || p_data.iter().all(|&p| p <= 0.0) {
        return 0;
    }
    let data = lost_count(p_data);
    (0..=MAX_M)
        .find(|&m| {
            let parity = binomial(m, pp);
            // j data lost and l parity lost: unrecoverable when j + l > m, and then the
            // j lost data packets stay lost.
            let mut lost = 0.0;
            for (j, pj) in data.iter().enumerate().skip(1) {
                for (l, pl) in parity.iter().enumerate() {
                    if j + l > m {
                        lost += pj * pl * j as f64;
                    }
                }
            }
            lost / k as f64 <= target
        })
        .unwrap_or(MAX_M)
}

/// P(exactly j of the packets lost) for j in 0..=n, packet i lost with `p[i]`
/// independently (the Poisson-binomial distribution, one packet at a time).
fn lost_count(p: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; p.len() + 1];
    out[0] = 1.0;
    for (i, &pi) in p.iter().enumerate() {
        let pi = pi.clamp(0.0, 1.0);
        for j in (0..=i + 1).rev() {
            let stay = out[j] * (1.0 - pi);
            let moved = if j > 0 { out[j - 1] * pi } else { 0.0 };
            out[j] = stay + moved;
        }
    }
    out
}

/// P(exactly i of n lost) for i in 0..=n.
fn binomial(n: usize, p: f64) -> Vec<f64> {
    let mut out = vec![0.0; n + 1];
    let mut c = 1.0f64; // C(n, i)
    for (i, o) in out.iter_mut().enumerate() {
        if i > 0 {
            c = c * (n + 1 - i) as f64 / i as f64;
        }
        *o = c * p.powi(i as i32) * (1.0 - p).powi((n - i) as i32);
    }
    out
}

#[cfg(test)]
mod tests;
