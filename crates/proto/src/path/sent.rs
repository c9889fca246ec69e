//! Record of recently sent datagrams on one path, indexed by `path_seq`.
//!
//! A ring that grows with the path's window: entry `seq % cap` holds the datagram with
//! that sequence number if it has not been overwritten by a newer one. It starts at
//! `MIN_CAP` slots and doubles (up to `MAX_CAP`) whenever a datagram would overwrite one
//! that is still unacknowledged, so it holds every datagram in flight — all that the path
//! looks up (the newest acknowledged one, and those after it) — and an idle path's ring
//! stays at a few hundred bytes. (A fixed ring of `MAX_CAP` filled as sequence numbers
//! advanced: keepalives alone made it a megabyte per idle path within the hour.)
//! Invariants: lookups check the stored sequence number, so a stale slot is never mistaken
//! for the datagram being asked about; the capacity is a power of two (so `seq % cap` is
//! continuous across the wrap of `u32`) and never shrinks.

use super::rate::RateSnapshot;
use crate::Instant;

/// Slots of a new ring (320 bytes: an idle path has one probe in flight at a time; a busy
/// one doubles its way up within its first round trips).
const MIN_CAP: usize = 4;
/// Most slots: enough for a full window of small datagrams on a fast path (about 1 MB).
const MAX_CAP: usize = 16384;

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
    /// `cap` slots, a power of two.
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
            slots: vec![None; MIN_CAP],
        }
    }

    /// Remembers a datagram; `largest_acked` is the newest datagram acknowledged so far
    /// (those after it are in flight and must not be overwritten while the ring may grow).
    pub fn insert(&mut self, rec: SentRecord, largest_acked: Option<u32>) {
        let in_flight =
            |r: &SentRecord| largest_acked.is_none_or(|l| (r.seq.wrapping_sub(l) as i32) > 0);
        while self.slots.len() < MAX_CAP
            && self.slots[self.index(rec.seq)]
                .as_ref()
                .is_some_and(in_flight)
        {
            self.grow();
        }
        let i = self.index(rec.seq);
        self.slots[i] = Some(rec);
    }

    /// The record of datagram `seq`, if still held.
    pub fn get(&self, seq: u32) -> Option<&SentRecord> {
        self.slots[self.index(seq)]
            .as_ref()
            .filter(|r| r.seq == seq)
    }

    /// Slots now.
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    fn index(&self, seq: u32) -> usize {
        seq as usize & (self.slots.len() - 1)
    }

    /// Doubles the ring. Records held are distinct modulo the old capacity, hence modulo
    /// the new one: each keeps a slot of its own.
    fn grow(&mut self) {
        let cap = self.slots.len() * 2;
        let old = std::mem::replace(&mut self.slots, vec![None; cap]);
        let mask = self.slots.len() - 1;
        for r in old.into_iter().flatten() {
            self.slots[r.seq as usize & mask] = Some(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(seq: u32) -> SentRecord {
        SentRecord {
            seq,
            cum_bytes: u64::from(seq) * 10,
            ..Default::default()
        }
    }

    #[test]
    fn overwritten_slots_are_not_returned() {
        let mut r = SentRing::new();
        r.insert(rec(5), None);
        assert_eq!(r.get(5).unwrap().cum_bytes, 50);
        assert!(r.get(6).is_none());
        // Datagram 5 acknowledged: its slot may be taken.
        r.insert(rec(5 + MIN_CAP as u32), Some(5));
        assert_eq!(r.capacity(), MIN_CAP);
        assert!(r.get(5).is_none());
        assert!(r.get(5 + MIN_CAP as u32).is_some());
        assert!(r.get(6 + MIN_CAP as u32).is_none() && r.get(u32::MAX).is_none());
    }

    /// Every datagram in flight stays retrievable, however many, up to `MAX_CAP`; an idle
    /// path's ring (one keepalive in flight at a time) never grows.
    #[test]
    fn holds_the_window_and_stays_small_when_idle() {
        let mut r = SentRing::new();
        let start = u32::MAX - 1000; // across the wrap of the sequence numbers
        let n = 5000u32;
        for k in 0..n {
            r.insert(rec(start.wrapping_add(k)), Some(start.wrapping_sub(1)));
        }
        assert_eq!(r.capacity(), 8192);
        for k in 0..n {
            assert_eq!(
                r.get(start.wrapping_add(k)).unwrap().seq,
                start.wrapping_add(k)
            );
        }
        let mut idle = SentRing::new();
        for seq in 0..100_000u32 {
            idle.insert(rec(seq), seq.checked_sub(1));
            assert!(idle.get(seq).is_some());
        }
        assert_eq!(idle.capacity(), MIN_CAP);
        // Beyond MAX_CAP in flight the oldest are overwritten, never a panic.
        let mut full = SentRing::new();
        for seq in 0..(MAX_CAP as u32 + 10) {
            full.insert(rec(seq), None);
        }
        assert_eq!(full.capacity(), MAX_CAP);
        assert!(full.get(0).is_none() && full.get(MAX_CAP as u32 + 9).is_some());
    }
}
