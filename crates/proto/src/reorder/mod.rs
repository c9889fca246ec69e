//! Receiver reorder buffer: releases striped packets in order — each after the packet its
//! flow sent before it, or (for a packet whose flow is unknown) after every packet sent
//! before it.
//!
//! Packets flagged `ordered` (the `aggregate` policy) that arrive ahead of what they wait
//! for are held until it arrives, or until the gap at the in-order point has lasted `hold`
//! (which the session derives from the measured RTT difference between paths, not a fixed
//! constant), or until the buffer exceeds its byte or entry bound — then the gap is
//! skipped — or until the session learns that the hole was lost (`skip_lost_below`: every
//! active path has delivered something newer, and paths are FIFO).
//!
//! Why per flow: TCP only needs its own segments in order. Held in session order, a ping
//! or a web request sent on the fast path right after a bulk flow's packets went out on a
//! slower one waited for those packets — the whole delay difference between the paths
//! (tens of milliseconds) added to every small flow that shares a session with a striped
//! one. The sender names each packet's flow predecessor (`wire::OrderMode`); a packet whose
//! predecessor was released (or is behind the in-order point) goes at once, and leaves a
//! marker in its slot so the in-order point can pass it.
//!
//! Unordered packets (`best`, `redundant`, reinjected copies) pass straight through but
//! still fill their slot so they never block others. A packet older than the in-order
//! point (it lost a race with a skip) is delivered at once rather than dropped: late is
//! better than lost for the inner TCP.
//!
//! Invariants: each packet given to `insert` is released exactly once; memory is bounded
//! by `max_bytes` and `MAX_ENTRIES`; with no skips, each flow's packets leave in the order
//! their flow sent them, and session-ordered packets after every packet sent before them.
//! Duplicates are filtered before this buffer (by the replay window on data_seq).

use crate::wire::{DataFlags, OrderMode};
use crate::Instant;
use core::time::Duration;
use std::collections::{BTreeMap, VecDeque};

/// What a packet waits for before it may be released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Nothing, and it is not counted as reordering (`best`, `redundant`, reinjected
    /// copies).
    Unordered,
    /// Every packet sent before it (its flow is unknown to the sender).
    Session,
    /// Nothing: the first packet of its flow.
    FlowFirst,
    /// The packet with this `data_seq`, the previous one of its flow.
    After(u64),
}

impl Order {
    /// The order a DATA frame asks for. A predecessor that cannot be (a gap of zero, or
    /// reaching below sequence number 0) falls back to the session order: slower, never
    /// out of order.
    pub fn of(flags: DataFlags, data_seq: u64, pred_gap: u16) -> Order {
        if !flags.ordered() {
            return Order::Unordered;
        }
        match flags.order_mode() {
            OrderMode::Session => Order::Session,
            OrderMode::FlowFirst => Order::FlowFirst,
            OrderMode::FlowGap | OrderMode::FlowPrev => data_seq
                .checked_sub(u64::from(pred_gap))
                .filter(|_| pred_gap > 0)
                .map_or(Order::Session, Order::After),
        }
    }
}

/// Most entries (held packets, markers of released ones, and held packets' links to their
/// predecessors) kept.
pub const MAX_ENTRIES: usize = 16_384;

/// Reorder metrics (the MobilityFirst multihoming thesis §4.3: buffer occupancy and reorder density come from these).
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
    /// Reorder density (the MobilityFirst multihoming thesis §4.3, RFC 5236 style): counts of the displacement
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

/// A slot ahead of the in-order point: a held packet, or the marker of one released
/// already (`packet: None`).
struct Entry {
    packet: Option<Vec<u8>>,
    arrival: Instant,
}

/// The buffer.
pub struct ReorderBuffer {
    next: Option<u64>,
    entries: BTreeMap<u64, Entry>,
    /// Held packets by the predecessor they wait for: `pred → seq`. Entries whose packet
    /// left another way (in order, or by a skip) are dropped once the in-order point
    /// passes their key.
    waiters: BTreeMap<u64, u64>,
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
            waiters: BTreeMap::new(),
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
        order: Order,
        out: &mut VecDeque<Vec<u8>>,
    ) {
        self.record_arrival(seq, order);
        // The in-order point starts at the session's first `data_seq` (0), not at the first
        // arrival: taken as in order itself, a packet that overtook those before it was
        // released ahead of them, and they came "late" — the inner TCP's first window,
        // reordered by a link's jitter, read as duplicate ACKs, a window halved before the
        // flow had started. Should the first numbers never come (a peer that kept its
        // numbering across a new session), the gap is given up after one hold.
        let next = *self.next.get_or_insert(0);
        if seq < next {
            if order != Order::Unordered {
                self.on_late(now, seq);
            }
            out.push_back(packet);
            return;
        }
        let free = seq == next
            || match order {
                Order::Unordered | Order::FlowFirst => true,
                Order::Session => false,
                Order::After(pred) => self.released(pred),
            };
        if !free {
            self.hold(now, seq, packet, order);
        } else if seq == next {
            out.push_back(packet);
            self.next = Some(seq + 1);
            self.drain(now, out);
        } else {
            out.push_back(packet);
            // A marker, so the in-order point passes this slot; it also times the gap
            // before it, which bounds how long markers stay.
            self.entries.insert(
                seq,
                Entry {
                    packet: None,
                    arrival: now,
                },
            );
            self.gap_since.get_or_insert(now);
            self.wake(seq, out);
        }
        while self.held_bytes > self.max_bytes
            || self.entries.len() + self.waiters.len() > MAX_ENTRIES
        {
            self.skip_gap(now, out);
        }
    }

    /// Metrics of an arrival (occupancy, reorder density) and the highest `seq` seen.
    fn record_arrival(&mut self, seq: u64, order: Order) {
        self.stats.inserts += 1;
        self.stats.occupancy_sum += self.held_packets as u64;
        if order != Order::Unordered {
            let expected = self.highest.map_or(seq, |h| h + 1);
            let d = (seq as i128 - expected as i128).clamp(-16, 16);
            self.stats.density[(d + 16) as usize] += 1;
            self.stats.displaced += u64::from(d != 0);
        }
        self.highest = Some(self.highest.map_or(seq, |h| h.max(seq)));
    }

    /// An ordered packet arrived behind the in-order point: counted late.
    fn on_late(&mut self, now: Instant, seq: u64) {
        self.stats.late += 1;
        // The hold gave up on this packet too early: learn by how much. A packet given up
        // on as known lost (`skip_lost_below`) teaches the hold nothing: the hold did not
        // decide it, and measuring its lateness from an older timeout skip pinned the hold
        // at its 300-ms cap for seconds.
        if let Some((t, _)) = self.last_skip.as_ref().filter(|(_, r)| r.contains(&seq)) {
            let lateness = now.saturating_since(*t) * EXTRA_FACTOR;
            self.extra = self.extra(now).max(lateness).min(EXTRA_MAX);
            self.extra_at = now;
        }
    }

    /// Keeps a packet until what it waits for has left (or the hold gives up).
    fn hold(&mut self, now: Instant, seq: u64, packet: Vec<u8>, order: Order) {
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
        if let Order::After(pred) = order {
            self.waiters.insert(pred, seq);
        }
        self.gap_since.get_or_insert(now);
    }

    /// Whether packet `seq` has left: behind the in-order point, or a marker ahead of it.
    fn released(&self, seq: u64) -> bool {
        self.next.is_some_and(|n| seq < n)
            || self.entries.get(&seq).is_some_and(|e| e.packet.is_none())
    }

    /// `seq` was just released: release the packet of its flow that waited for it, and
    /// the one that waited for that, and so on.
    fn wake(&mut self, seq: u64, out: &mut VecDeque<Vec<u8>>) {
        if let Some(waiting) = self.waiters.remove(&seq) {
            self.release_chain(waiting, out);
        }
    }

    /// Releases held packet `seq` (if it still is) and then its flow's successors that
    /// waited for it. A link whose packet left another way is followed all the same: that
    /// packet is released too.
    fn release_chain(&mut self, mut seq: u64, out: &mut VecDeque<Vec<u8>>) {
        loop {
            if let Some(p) = self.entries.get_mut(&seq).and_then(|e| e.packet.take()) {
                self.held_bytes -= p.len();
                self.held_packets -= 1;
                out.push_back(p);
            }
            match self.waiters.remove(&seq) {
                Some(waiting) => seq = waiting,
                None => return,
            }
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
        self.waiters.clear();
        self.held_bytes = 0;
        self.held_packets = 0;
        self.gap_since = None;
    }

    /// Gives up on the gap at the in-order point: jump to the first entry and drain. Only
    /// a skip that released held packets counts (and may teach the hold, `insert`): one
    /// over markers alone kept nobody waiting.
    fn skip_gap(&mut self, now: Instant, out: &mut VecDeque<Vec<u8>>) {
        let Some((&first, _)) = self.entries.first_key_value() else {
            // Nothing ahead: whatever links remain belong to packets that left already.
            self.waiters.clear();
            self.gap_since = None;
            return;
        };
        let held = self.held_packets;
        let from = self.next.unwrap_or(first);
        self.next = Some(first);
        self.drain(now, out);
        if self.held_packets < held {
            self.stats.skipped_gaps += 1;
            self.last_skip = Some((now, from..first));
        }
    }

    /// Releases consecutive entries from the in-order point, then every held packet whose
    /// predecessor the in-order point has passed; updates the gap clock.
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
        while let Some(entry) = self.waiters.first_entry() {
            if *entry.key() >= next {
                break;
            }
            let waiting = entry.remove();
            self.release_chain(waiting, out);
        }
        // The gap (if any) is timed from the first arrival behind it, held or released,
        // and never from later than now.
        self.gap_since = self.entries.values().next().map(|e| e.arrival.min(now));
    }
}

#[cfg(test)]
mod tests;
