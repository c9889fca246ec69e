//! Record of recently sent datagrams on one path, indexed by `path_seq`.
//!
//! A fixed-size ring (bounded memory whatever the traffic): entry `seq % CAP` holds the
//! datagram with that sequence number if it has not been overwritten by a newer one.
//! Invariant: lookups check the stored sequence number, so a stale slot is never mistaken
//! for the datagram being asked about.

use super::rate::RateSnapshot;
use crate::Instant;

/// Ring capacity: enough for a full window of small datagrams on a fast path.
const CAP: usize = 16384;

/// What is remembered about one sent datagram.
#[derive(Debug, Clone, Copy, Default)]
pub struct SentRecord {
    /// Its per-path sequence number.
    pub seq: u32,
    /// When it was sent.
    pub time: Instant,
    /// Bytes sent on the path up to and including this datagram.
    pub cum_bytes: u64,
    /// Delivery-rate snapshot at send time.
    pub rate: RateSnapshot,
    /// Whether it asks for feedback (DATA or PING); ACK-only datagrams do not.
    pub eliciting: bool,
}

/// The ring.
#[derive(Debug, Clone)]
pub struct SentRing {
    slots: Box<[Option<SentRecord>]>,
}

impl Default for SentRing {
    fn default() -> Self {
        Self::new()
    }
}

impl SentRing {
    /// An empty ring.
    pub fn new() -> Self {
        SentRing {
            slots: vec![None; CAP].into_boxed_slice(),
        }
    }

    /// Remembers a datagram.
    pub fn insert(&mut self, rec: SentRecord) {
        self.slots[rec.seq as usize % CAP] = Some(rec);
    }

    /// The record of datagram `seq`, if still held.
    pub fn get(&self, seq: u32) -> Option<&SentRecord> {
        self.slots[seq as usize % CAP]
            .as_ref()
            .filter(|r| r.seq == seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overwritten_slots_are_not_returned() {
        let mut r = SentRing::new();
        r.insert(SentRecord {
            seq: 5,
            cum_bytes: 10,
            ..Default::default()
        });
        assert_eq!(r.get(5).unwrap().cum_bytes, 10);
        assert!(r.get(6).is_none());
        r.insert(SentRecord {
            seq: 5 + CAP as u32,
            ..Default::default()
        });
        assert!(r.get(5).is_none());
        assert!(r.get(5 + CAP as u32).is_some());
    }
}
