//! Sender side of FEC: collects realtime packets into blocks and computes their parity.

use super::{codec, data_shard, LEN_PREFIX, MAX_K};
use crate::path::PathId;
use crate::wire::FecFrame;
use crate::Instant;
use std::sync::Arc;

/// A realtime packet in the open block.
#[derive(Debug, Clone)]
pub struct Pending {
    /// Its `data_seq`.
    pub seq: u64,
    /// When it was sent.
    pub sent: Instant,
    /// The path it went on.
    pub path: PathId,
    /// The IP packet (shared with the job that sent it: no copy).
    pub packet: Arc<[u8]>,
}

/// A closed block's parity, shared by the m datagrams that carry its shards.
#[derive(Debug)]
pub struct ParityBlock {
    /// `data_seq` of the first packet.
    pub first_seq: u64,
    /// Deadline of the block (ms).
    pub deadline_ms: u16,
    /// Per data packet: distance from `first_seq` and when it was sent.
    pub entries: Vec<(u16, Instant)>,
    /// The m parity shards.
    pub parity: Vec<Vec<u8>>,
}

impl ParityBlock {
    /// The FEC frame's entries as of `now` (`seq_delta u16 | ago_ms u16` each).
    pub fn entries_at(&self, now: Instant) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * FecFrame::ENTRY_LEN);
        for &(delta, sent) in &self.entries {
            let ago = u16::try_from(now.saturating_since(sent).as_millis()).unwrap_or(u16::MAX);
            out.extend_from_slice(&delta.to_be_bytes());
            out.extend_from_slice(&ago.to_be_bytes());
        }
        out
    }

    /// Bytes of the FEC frame of one shard.
    pub fn frame_len(&self) -> usize {
        FecFrame::len(self.entries.len(), self.parity.first().map_or(0, Vec::len))
    }
}

/// The open block of a session's realtime packets.
#[derive(Debug, Default)]
pub struct Encoder {
    block: Vec<Pending>,
    /// When the block must close (its oldest packet's parity would come too late after).
    close_at: Option<Instant>,
    deadline_ms: u16,
}

impl Encoder {
    /// Whether `packet` (of `deadline_ms`) can join the open block without its parity
    /// frame exceeding `max_frame` bytes, the block `MAX_K` packets, or `seq` going
    /// beyond 16 bits of distance from the first.
    pub fn fits(&self, seq: u64, len: usize, deadline_ms: u16, max_frame: usize) -> bool {
        let Some(first) = self.block.first() else {
            return FecFrame::len(1, len + LEN_PREFIX) <= max_frame;
        };
        let shard = self.shard_len().max(len + LEN_PREFIX);
        self.block.len() < MAX_K
            && deadline_ms == self.deadline_ms
            && seq - first.seq <= u64::from(u16::MAX)
            && FecFrame::len(self.block.len() + 1, shard) <= max_frame
    }

    /// Adds a packet; the block must close by `close_by` at the latest.
    pub fn add(&mut self, p: Pending, deadline_ms: u16, close_by: Instant) {
        if self.block.is_empty() {
            self.deadline_ms = deadline_ms;
        }
        self.close_at = Some(self.close_at.map_or(close_by, |t| t.min(close_by)));
        self.block.push(p);
    }

    /// Packets in the open block.
    pub fn pending(&self) -> &[Pending] {
        &self.block
    }

    /// Whether the block is full.
    pub fn full(&self) -> bool {
        self.block.len() >= MAX_K
    }

    /// The open block's deadline (ms).
    pub fn deadline_ms(&self) -> u16 {
        self.deadline_ms
    }

    /// When the open block must close.
    pub fn deadline(&self) -> Option<Instant> {
        self.close_at
    }

    fn shard_len(&self) -> usize {
        self.block
            .iter()
            .map(|p| p.packet.len() + LEN_PREFIX)
            .max()
            .unwrap_or(0)
    }

    /// Closes the open block with `m` parity shards (none if `m` is 0 or the block is
    /// empty: the block is forgotten).
    pub fn close(&mut self, m: usize) -> Option<ParityBlock> {
        self.close_at = None;
        let block = std::mem::take(&mut self.block);
        let first = block.first()?.seq;
        let k = block.len();
        let rs = codec(k, m)?;
        let shard_len = block
            .iter()
            .map(|p| p.packet.len() + LEN_PREFIX)
            .max()
            .unwrap_or(0);
        let data: Vec<Vec<u8>> = block
            .iter()
            .map(|p| data_shard(&p.packet, shard_len))
            .collect();
        let mut parity = vec![vec![0u8; shard_len]; m];
        rs.encode_sep(&data, &mut parity).ok()?;
        Some(ParityBlock {
            first_seq: first,
            deadline_ms: self.deadline_ms,
            entries: block
                .iter()
                .map(|p| ((p.seq - first) as u16, p.sent))
                .collect(),
            parity,
        })
    }
}
