//! Record of recently sent datagrams on one path, indexed by `path_seq`.
//!
//! A fixed-size ring (bounded memory whatever the traffic): entry `seq % CAP` holds the
//! datagram with that sequence number if it has not been overwritten by a newer one. The
//! ring's memory is reserved up front but written only as sequence numbers reach it: a
//! megabyte per path cleared at creation cost more than the traffic of a short-lived or
//! idle path (and every path of every simulated session).
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
    /// Slots up to the highest index written so far (at most `CAP`); those beyond are
    /// empty, as if held as `None`.
    slots: Vec<Option<SentRecord>>,
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
            slots: Vec::with_capacity(CAP),
        }
    }

    /// Remembers a datagram.
    pub fn insert(&mut self, rec: SentRecord) {
        let i = rec.seq as usize % CAP;
        if i >= self.slots.len() {
            self.slots.resize(i + 1, None);
        }
        self.slots[i] = Some(rec);
    }

    /// The record of datagram `seq`, if still held.
    pub fn get(&self, seq: u32) -> Option<&SentRecord> {
        self.slots
            .get(seq as usize % CAP)?
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
        // Slots never written (here past 5) read as empty, whatever is asked.
        assert!(r.get(6 + CAP as u32).is_none() && r.get(u32::MAX).is_none());
    }
}
