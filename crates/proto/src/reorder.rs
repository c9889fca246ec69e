//! Receiver reorder buffer: releases striped packets in `data_seq` order.
//!
//! Packets flagged `ordered` (the `aggregate` policy) that arrive ahead of a gap are held
//! until the gap fills, or until the gap has lasted `hold` (which the session derives from
//! the measured RTT difference between paths, not a fixed constant), or until the buffer
//! exceeds its byte or entry bound — then the gap is skipped — or until the session
//! learns that the hole was lost (`skip_lost_below`: every active path has delivered
//! something newer, and paths are FIFO). Unordered packets (`best`,
//! `redundant`) pass straight through but still fill their slot so they never block
//! others. A packet older than the in-order point (it lost a race with a skip) is
//! delivered at once rather than dropped: late is better than lost for the inner TCP.
//!
//! Invariants: each packet given to `insert` is released exactly once; memory is bounded
//! by `max_bytes` and `MAX_ENTRIES`; with no skips, ordered packets leave in `data_seq`
//! order. Duplicates are filtered before this buffer (by the replay window on data_seq).

use crate::Instant;
use core::time::Duration;
use std::collections::{BTreeMap, VecDeque};

/// Most entries (held packets plus pass-through markers) kept.
pub const MAX_ENTRIES: usize = 16_384;

/// Reorder metrics (seed 003 §4.3: buffer occupancy and reorder density come from these).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReorderStats {
    /// Ordered packets that had to wait.
    pub held: u64,
    /// Gaps given up on (timeout or bound).
    pub skipped_gaps: u64,
    /// Packets delivered behind the in-order point.
    pub late: u64,
    /// Sum over insertions of the packets held at that moment (÷ inserts = mean occupancy).
    pub occupancy_sum: u64,
    /// Insertions.
    pub inserts: u64,
    /// Largest number of packets held at once.
    pub max_held: u64,
    /// Gaps given up on because their packet was known lost (no waiting).
    pub lost_skips: u64,
    /// Ordered packets that did not arrive right after the highest seen so far.
    pub displaced: u64,
    /// Reorder density (seed 003 §4.3, RFC 5236 style): counts of the displacement
    /// `seq − (highest seen + 1)` of ordered arrivals, clamped to ±16; index 16 = in order.
    pub density: [u64; 33],
}

impl Default for ReorderStats {
    fn default() -> Self {
        ReorderStats {
            held: 0,
            skipped_gaps: 0,
            late: 0,
            occupancy_sum: 0,
            inserts: 0,
            max_held: 0,
            lost_skips: 0,
            displaced: 0,
            density: [0; 33],
        }
    }
}

struct Entry {
    packet: Option<Vec<u8>>,
    arrival: Instant,
}

/// The buffer.
pub struct ReorderBuffer {
    next: Option<u64>,
    entries: BTreeMap<u64, Entry>,
    held_packets: usize,
    held_bytes: usize,
    max_bytes: usize,
    gap_since: Option<Instant>,
    highest: Option<u64>,
    /// The latest gap given up on for lack of time: when, and the `data_seq` range it
    /// jumped over. Only a packet of that range proves the hold too short.
    last_skip: Option<(Instant, core::ops::Range<u64>)>,
    extra: Duration,
    extra_at: Instant,
    stats: ReorderStats,
}

/// A late packet proves the hold too short by its lateness; the hold then gets this many
/// times that lateness on top, which halves every `EXTRA_HALF_LIFE`.
const EXTRA_FACTOR: u32 = 2;
const EXTRA_HALF_LIFE: Duration = Duration::from_secs(10);
const EXTRA_MAX: Duration = Duration::from_millis(300);

impl ReorderBuffer {
    /// A buffer holding at most `max_bytes` of packets.
    pub fn new(max_bytes: usize) -> Self {
        ReorderBuffer {
            next: None,
            entries: BTreeMap::new(),
            held_packets: 0,
            held_bytes: 0,
            max_bytes,
            gap_since: None,
            highest: None,
            last_skip: None,
            extra: Duration::ZERO,
            extra_at: Instant::ZERO,
            stats: ReorderStats::default(),
        }
    }

    /// Metrics so far.
    pub fn stats(&self) -> ReorderStats {
        self.stats
    }

    /// What late arrivals taught: extra hold on top of the session's estimate. It is
    /// `EXTRA_FACTOR` times the worst recent lateness, halving every 10 s.
    pub fn extra(&self, now: Instant) -> Duration {
        // Nothing learnt yet (the usual case): skip the power function.
        if self.extra.is_zero() {
            return Duration::ZERO;
        }
        let age = now.saturating_since(self.extra_at).as_secs_f64();
        self.extra
            .mul_f64(0.5f64.powf(age / EXTRA_HALF_LIFE.as_secs_f64()))
    }

    /// Whether packets are held behind a gap.
    pub fn has_gap(&self) -> bool {
        self.gap_since.is_some()
    }

    /// Packets currently held.
    pub fn held_packets(&self) -> usize {
        self.held_packets
    }

    /// Takes a packet; everything that becomes releasable is appended to `out`.
    pub fn insert(
        &mut self,
        now: Instant,
        seq: u64,
        packet: Vec<u8>,
        ordered: bool,
        out: &mut VecDeque<Vec<u8>>,
    ) {
        self.stats.inserts += 1;
        self.stats.occupancy_sum += self.held_packets as u64;
        if ordered {
            let expected = self.highest.map_or(seq, |h| h + 1);
            let d = (seq as i128 - expected as i128).clamp(-16, 16);
            self.stats.density[(d + 16) as usize] += 1;
            self.stats.displaced += u64::from(d != 0);
        }
        self.highest = Some(self.highest.map_or(seq, |h| h.max(seq)));
        let next = *self.next.get_or_insert(seq);
        if seq < next {
            if ordered {
                self.stats.late += 1;
                // The hold gave up on this packet too early: learn by how much. A packet
                // given up on as known lost (`skip_lost_below`) teaches the hold nothing:
                // the hold did not decide it, and measuring its lateness from an older
                // timeout skip pinned the hold at its 300-ms cap for seconds.
                if let Some((t, _)) = self.last_skip.as_ref().filter(|(_, r)| r.contains(&seq)) {
                    let lateness = now.saturating_since(*t) * EXTRA_FACTOR;
                    self.extra = self.extra(now).max(lateness).min(EXTRA_MAX);
                    self.extra_at = now;
                }
            }
            out.push_back(packet);
            return;
        }
        if seq == next || !ordered {
            out.push_back(packet);
            if seq == next {
                self.next = Some(seq + 1);
                self.drain(now, out);
            } else {
                self.entries.insert(
                    seq,
                    Entry {
                        packet: None,
                        arrival: now,
                    },
                );
            }
        } else {
            self.held_bytes += packet.len();
            self.held_packets += 1;
            self.stats.held += 1;
            self.stats.max_held = self.stats.max_held.max(self.held_packets as u64);
            self.entries.insert(
                seq,
                Entry {
                    packet: Some(packet),
                    arrival: now,
                },
            );
            self.gap_since.get_or_insert(now);
        }
        while self.held_bytes > self.max_bytes || self.entries.len() > MAX_ENTRIES {
            self.skip_gap(now, out);
        }
    }

    /// Releases what waited `hold` or longer behind a gap.
    pub fn on_timeout(&mut self, now: Instant, hold: Duration, out: &mut VecDeque<Vec<u8>>) {
        while self
            .gap_since
            .is_some_and(|t| now.saturating_since(t) >= hold)
        {
            self.skip_gap(now, out);
        }
    }

    /// Gives up at once on every gap below `bound`: the session knows those packets were
    /// lost (every active path has delivered a newer one). Held packets behind them go.
    pub fn skip_lost_below(&mut self, now: Instant, bound: u64, out: &mut VecDeque<Vec<u8>>) {
        while let Some(n) = self.next {
            if n >= bound || self.gap_since.is_none() {
                break;
            }
            let Some((&first, _)) = self.entries.first_key_value() else {
                break;
            };
            self.stats.lost_skips += 1;
            self.next = Some(first.min(bound).max(n + 1));
            self.drain(now, out);
        }
    }

    /// How long the current gap has been open, if one is.
    pub fn gap_age(&self, now: Instant) -> Option<Duration> {
        self.gap_since.map(|t| now.saturating_since(t))
    }

    /// When the current gap will be given up on.
    pub fn deadline(&self, hold: Duration) -> Option<Instant> {
        self.gap_since.map(|t| t + hold)
    }

    /// Releases everything held, in order (session teardown).
    pub fn flush(&mut self, out: &mut VecDeque<Vec<u8>>) {
        for (_, e) in std::mem::take(&mut self.entries) {
            if let Some(p) = e.packet {
                out.push_back(p);
            }
        }
        self.held_bytes = 0;
        self.held_packets = 0;
        self.gap_since = None;
    }

    /// Gives up on the gap at the in-order point: jump to the first entry and drain.
    fn skip_gap(&mut self, now: Instant, out: &mut VecDeque<Vec<u8>>) {
        let Some((&first, _)) = self.entries.first_key_value() else {
            self.gap_since = None;
            return;
        };
        self.stats.skipped_gaps += 1;
        let from = self.next.unwrap_or(first);
        self.last_skip = Some((now, from..first));
        self.next = Some(first);
        self.drain(now, out);
    }

    /// Releases consecutive entries from the in-order point; updates the gap clock.
    fn drain(&mut self, now: Instant, out: &mut VecDeque<Vec<u8>>) {
        let mut next = self.next.unwrap_or(0);
        while let Some(e) = self.entries.remove(&next) {
            if let Some(p) = e.packet {
                self.held_bytes -= p.len();
                self.held_packets -= 1;
                out.push_back(p);
            }
            next += 1;
        }
        self.next = Some(next);
        // The new gap (if any) is timed from when its first waiting packet arrived, but
        // never from earlier than now minus nothing: a fresh gap starts its clock now at
        // the latest.
        self.gap_since = self
            .entries
            .values()
            .find(|e| e.packet.is_some())
            .map(|e| e.arrival.min(now));
        if self.gap_since.is_none() {
            // Only pass-through markers remain ahead: they block nothing.
            self.entries.retain(|_, e| e.packet.is_some());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(ms: u64) -> Instant {
        Instant::from_micros(ms * 1000)
    }

    #[test]
    fn holds_until_gap_fills() {
        let mut b = ReorderBuffer::new(1 << 20);
        let mut out = VecDeque::new();
        b.insert(t(0), 0, vec![0], true, &mut out);
        b.insert(t(1), 2, vec![2], true, &mut out);
        b.insert(t(2), 3, vec![3], true, &mut out);
        assert_eq!(out.len(), 1);
        b.insert(t(3), 1, vec![1], true, &mut out);
        assert_eq!(out, [vec![0], vec![1], vec![2], vec![3]]);
        assert_eq!(b.held_packets(), 0);
    }

    #[test]
    fn skips_gap_after_hold() {
        let mut b = ReorderBuffer::new(1 << 20);
        let mut out = VecDeque::new();
        b.insert(t(0), 0, vec![0], true, &mut out);
        b.insert(t(10), 2, vec![2], true, &mut out);
        let hold = Duration::from_millis(30);
        assert_eq!(b.deadline(hold), Some(t(40)));
        b.on_timeout(t(39), hold, &mut out);
        assert_eq!(out.len(), 1);
        b.on_timeout(t(40), hold, &mut out);
        assert_eq!(out.len(), 2);
        b.insert(t(41), 1, vec![1], true, &mut out);
        assert_eq!(out.back(), Some(&vec![1]), "late packet still delivered");
        assert_eq!(b.stats().late, 1);
        // It came 1 ms after the skip: the hold learns 2 ms more, halving every 10 s.
        assert_eq!(b.extra(t(41)), Duration::from_millis(2));
        assert_eq!(b.extra(t(10_041)), Duration::from_millis(1));
    }

    /// Only a packet the hold gave up on teaches the hold: one given up on as known lost
    /// (its repair came after all) does not, however long after an old timeout skip.
    #[test]
    fn packets_skipped_as_lost_do_not_lengthen_the_hold() {
        let mut b = ReorderBuffer::new(1 << 20);
        let mut out = VecDeque::new();
        let hold = Duration::from_millis(30);
        b.insert(t(0), 0, vec![0], true, &mut out);
        b.insert(t(10), 2, vec![2], true, &mut out);
        b.on_timeout(t(40), hold, &mut out);
        // Seconds later, hole 5 is given up as lost; its repair lands after the skip.
        b.insert(t(5_000), 3, vec![3], true, &mut out);
        b.insert(t(5_000), 4, vec![4], true, &mut out);
        b.insert(t(5_001), 6, vec![6], true, &mut out);
        b.skip_lost_below(t(5_002), 6, &mut out);
        b.insert(t(5_040), 5, vec![5], true, &mut out);
        assert_eq!(b.stats().late, 1);
        assert_eq!(b.extra(t(5_040)), Duration::ZERO);
        // The packet the timeout skipped, arriving 1 ms after it, still teaches 2 ms.
        b.insert(t(5_041), 1, vec![1], true, &mut out);
        assert_eq!(b.stats().late, 2);
        assert_eq!(out.len(), 7, "every packet released once");
    }

    #[test]
    fn known_lost_holes_are_skipped_at_once() {
        let mut b = ReorderBuffer::new(1 << 20);
        let mut out = VecDeque::new();
        b.insert(t(0), 0, vec![0], true, &mut out);
        b.insert(t(1), 2, vec![2], true, &mut out);
        b.insert(t(1), 5, vec![5], true, &mut out);
        // Hole 1 is lost; 3 and 4 may still come.
        b.skip_lost_below(t(2), 3, &mut out);
        assert_eq!(out, [vec![0], vec![2]]);
        assert_eq!(b.held_packets(), 1);
        b.skip_lost_below(t(2), 6, &mut out);
        assert_eq!(out, [vec![0], vec![2], vec![5]]);
        assert_eq!(b.stats().lost_skips, 2);
        assert_eq!(b.stats().skipped_gaps, 0);
        // Density: 0 in order, 2 is +1, 5 is +2.
        let d = b.stats().density;
        assert_eq!((d[16], d[17], d[18]), (1, 1, 1));
        assert_eq!(b.stats().displaced, 2);
    }

    #[test]
    fn unordered_passes_through_and_fills_slot() {
        let mut b = ReorderBuffer::new(1 << 20);
        let mut out = VecDeque::new();
        b.insert(t(0), 0, vec![0], true, &mut out);
        b.insert(t(0), 2, vec![2], true, &mut out);
        b.insert(t(0), 1, vec![1], false, &mut out);
        assert_eq!(out, [vec![0], vec![1], vec![2]]);
    }

    #[test]
    fn byte_bound_forces_release() {
        let mut b = ReorderBuffer::new(100);
        let mut out = VecDeque::new();
        b.insert(t(0), 0, vec![0], true, &mut out);
        for s in 2..10 {
            b.insert(t(0), s, vec![0; 30], true, &mut out);
        }
        assert!(b.held_packets() * 30 <= 100);
    }

    proptest! {
        /// Against a model: every packet comes out exactly once; with an unbounded hold
        /// and no overflow, the ordered packets come out sorted.
        #[test]
        fn releases_each_once_in_order(perm in Just((0u64..300).collect::<Vec<_>>()).prop_shuffle(),
                                       unordered in proptest::collection::vec(any::<bool>(), 300)) {
            let mut b = ReorderBuffer::new(1 << 30);
            let mut out = VecDeque::new();
            // Start from seq 0 so nothing is "late".
            b.insert(t(0), 0, 0u64.to_be_bytes().to_vec(), true, &mut out);
            for (i, &s) in perm.iter().filter(|&&s| s != 0).enumerate() {
                b.insert(t(i as u64), s, s.to_be_bytes().to_vec(), !unordered[s as usize], &mut out);
            }
            b.flush(&mut out);
            let got: Vec<u64> = out.iter().map(|p| u64::from_be_bytes(p[..].try_into().unwrap())).collect();
            let mut sorted = got.clone();
            sorted.sort();
            prop_assert_eq!(&sorted, &(0..300).collect::<Vec<_>>());
            let ordered: Vec<u64> = got.iter().copied().filter(|&s| s == 0 || !unordered[s as usize]).collect();
            let mut o2 = ordered.clone();
            o2.sort();
            prop_assert_eq!(ordered, o2);
            prop_assert_eq!(b.stats().skipped_gaps, 0);
        }
    }
}
