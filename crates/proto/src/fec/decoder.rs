//! Receiver side of FEC: rebuilds the lost packets of a block from any k of its shards.

use super::{codec, data_shard, packet_of, LEN_PREFIX, MAX_K, MAX_M};
use crate::wire::FecFrame;
use std::collections::{HashMap, VecDeque};

/// Realtime packets remembered for decoding (at 50 packets/s per voice flow, seconds of
/// a few flows).
pub const MAX_RECENT: usize = 1024;
/// Blocks whose parity is remembered.
pub const MAX_BLOCKS: usize = 64;

/// A parity shard that contradicts the bounds, its own entries or its block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed FEC parity shard")]
pub struct BadParity;

/// A packet rebuilt from parity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebuilt {
    /// Its `data_seq`.
    pub seq: u64,
    /// When it was sent, in the sender's clock (µs, low 32 bits) — for lateness.
    pub sent_us: u32,
    /// The block's deadline (ms).
    pub deadline_ms: u16,
    /// The IP packet.
    pub packet: Vec<u8>,
}

#[derive(Debug)]
struct Block {
    first_seq: u64,
    m: usize,
    deadline_ms: u16,
    /// The k data packets' `data_seq` and send time (sender clock, µs).
    seqs: Vec<(u64, u32)>,
    shard_len: usize,
    parity: Vec<Option<Vec<u8>>>,
    done: bool,
}

/// Received realtime packets and parity of recent blocks.
#[derive(Debug, Default)]
pub struct Decoder {
    recent: HashMap<u64, Vec<u8>>,
    order: VecDeque<u64>,
    blocks: VecDeque<Block>,
}

impl Decoder {
    /// A realtime packet arrived (first copy): remembered, and any block it completes is
    /// decoded.
    pub fn on_data(&mut self, seq: u64, packet: &[u8]) -> Vec<Rebuilt> {
        if self.recent.len() >= MAX_RECENT {
            if let Some(old) = self.order.pop_front() {
                self.recent.remove(&old);
            }
        }
        if self.recent.insert(seq, packet.to_vec()).is_none() {
            self.order.push_back(seq);
        }
        let idx = self
            .blocks
            .iter()
            .position(|b| !b.done && b.seqs.iter().any(|&(s, _)| s == seq));
        idx.map(|i| self.try_decode(i)).unwrap_or_default()
    }

    /// A parity shard arrived in a datagram sent at `send_time_us` (sender clock).
    /// Shards that contradict their block or the bounds are ignored (returns `Err`).
    pub fn on_parity(
        &mut self,
        send_time_us: u32,
        f: &FecFrame<'_>,
    ) -> Result<Vec<Rebuilt>, BadParity> {
        let (k, m, index) = (usize::from(f.k), usize::from(f.m), usize::from(f.index));
        if !(1..=MAX_K).contains(&k) || !(1..=MAX_M).contains(&m) || index >= m {
            return Err(BadParity);
        }
        if f.shard.len() <= LEN_PREFIX || f.entries.len() != k * FecFrame::ENTRY_LEN {
            return Err(BadParity);
        }
        let mut seqs = Vec::with_capacity(k);
        for i in 0..k {
            let (delta, ago_ms) = f.entry(i).ok_or(BadParity)?;
            let seq = f.first_seq.checked_add(u64::from(delta)).ok_or(BadParity)?;
            // Entries name distinct packets in increasing order, the first at distance 0.
            if (i == 0 && delta != 0) || seqs.last().is_some_and(|&(s, _)| s >= seq) {
                return Err(BadParity);
            }
            let sent = send_time_us.wrapping_sub(u32::from(ago_ms) * 1000);
            seqs.push((seq, sent));
        }
        let idx = match self.blocks.iter().position(|b| b.first_seq == f.first_seq) {
            Some(i) => {
                let b = &self.blocks[i];
                let same = b.m == m
                    && b.shard_len == f.shard.len()
                    && b.seqs.iter().map(|s| s.0).eq(seqs.iter().map(|s| s.0));
                if !same {
                    return Err(BadParity);
                }
                i
            }
            None => {
                if self.blocks.len() >= MAX_BLOCKS {
                    self.blocks.pop_front();
                }
                self.blocks.push_back(Block {
                    first_seq: f.first_seq,
                    m,
                    deadline_ms: f.deadline_ms,
                    seqs,
                    shard_len: f.shard.len(),
                    parity: vec![None; m],
                    done: false,
                });
                self.blocks.len() - 1
            }
        };
        let b = &mut self.blocks[idx];
        if b.done {
            return Ok(vec![]);
        }
        b.parity[index] = Some(f.shard.to_vec());
        Ok(self.try_decode(idx))
    }

    /// Rebuilds block `i`'s missing packets if it has k shards.
    fn try_decode(&mut self, i: usize) -> Vec<Rebuilt> {
        let b = &self.blocks[i];
        let k = b.seqs.len();
        let have_data = b
            .seqs
            .iter()
            .filter(|(s, _)| self.recent.contains_key(s))
            .count();
        let have_parity = b.parity.iter().filter(|p| p.is_some()).count();
        if have_data == k || have_data + have_parity < k {
            return vec![];
        }
        // A received packet longer than the block's shards cannot be part of it.
        let mut shards: Vec<Option<Vec<u8>>> = Vec::with_capacity(k + b.m);
        for (s, _) in &b.seqs {
            match self.recent.get(s) {
                Some(p) if p.len() + LEN_PREFIX > b.shard_len => return vec![],
                Some(p) => shards.push(Some(data_shard(p, b.shard_len))),
                None => shards.push(None),
            }
        }
        shards.extend(b.parity.iter().cloned());
        let Some(rs) = codec(k, b.m) else {
            return vec![];
        };
        if rs.reconstruct_data(&mut shards).is_err() {
            return vec![];
        }
        let b = &mut self.blocks[i];
        b.done = true;
        let mut out = vec![];
        for (j, &(seq, sent_us)) in b.seqs.iter().enumerate() {
            if self.recent.contains_key(&seq) {
                continue;
            }
            let Some(packet) = shards[j].as_deref().and_then(packet_of) else {
                continue;
            };
            out.push(Rebuilt {
                seq,
                sent_us,
                deadline_ms: b.deadline_ms,
                packet: packet.to_vec(),
            });
        }
        out
    }
}
