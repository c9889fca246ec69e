//! The sender's side of loss detection on one path: the tail loss probe (RFC 8985 §7), the
//! peer's NACKs counted once as the path's losses, and how long acknowledged data stays
//! within reach of a NACK.
//!
//! The receiver declares a datagram lost only when a later one on the same path arrives
//! (`gaps.rs`). The last datagrams of a burst have no later one: lost, they would wait for
//! the inner TCP's retransmission timer (200 ms at least, doubling), or for the path to be
//! suspected. So when data is outstanding and neither an ACK nor new data came for a probe
//! timeout (PTO: two smoothed RTTs plus the peer's ACK delay, §7.2), the path sends a PING:
//! it elicits an ACK at once, and its own arrival reveals the lost tail to the receiver,
//! whose NACK then repairs it. A PING rather than §7.3's retransmission of the last
//! segment: a probe that finds nothing lost costs no resend (the tail was merely slow),
//! and the repair takes the same NACK path as every other loss. One probe per tail: the
//! next is armed by the next ACK or new data.
//!
//! Invariant: no probe before the path has an RTT sample or while it is `Down`.

use super::{Path, PathState, MAX_ACK_DELAY};
use crate::Instant;
use core::time::Duration;

impl Path {
    /// The probe timeout (§7.2): two smoothed RTTs plus the peer's ACK delay.
    fn pto(&self) -> Duration {
        self.rtt.smoothed() * 2 + self.ack_delay()
    }

    /// Whether a data datagram was sent after the largest one acknowledged.
    fn data_outstanding(&self) -> bool {
        match (self.last_data_seq, self.largest_acked) {
            (Some(d), Some(l)) => d.wrapping_sub(l) as i32 > 0,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }

    /// What the probe timer runs from: the last data sent or ACK received.
    fn tail_reference(&self) -> Option<Instant> {
        match (self.last_data_sent, self.last_ack_at) {
            (Some(d), Some(a)) => Some(d.max(a)),
            (d, a) => d.or(a),
        }
    }

    /// When a tail loss probe is due, if one is armed.
    pub fn tail_probe_deadline(&self) -> Option<Instant> {
        if self.state == PathState::Down || !self.available || !self.rtt.has_sample() {
            return None;
        }
        if !self.data_outstanding() {
            return None;
        }
        let from = self.tail_reference()?;
        (self.tail_probed != Some(from)).then(|| from + self.pto())
    }

    /// A tail loss probe is being sent: none again until an ACK or new data.
    pub fn on_tail_probe(&mut self) {
        self.tail_probed = self.tail_reference();
    }

    /// The peer declared datagrams `first .. first + count` lost (a NACK). The receiver
    /// declares in `path_seq` order, so only what lies beyond the highest already named
    /// counts: a NACK is repeated with the next ACKs, and must count once.
    pub fn on_nack(&mut self, first: u32, count: u16) {
        let end = first.wrapping_add(u32::from(count));
        if end.wrapping_sub(self.next_seq) as i32 > 0 {
            return; // Names datagrams never sent: ignore.
        }
        let from = match self.nacked_upto {
            Some(u) if u.wrapping_sub(first) as i32 > 0 => u,
            _ => first,
        };
        let new = end.wrapping_sub(from) as i32;
        if new > 0 {
            self.nacked += new as u64;
            self.nacked_upto = Some(end);
        }
    }

    /// How long data an ACK covered stays within reach of a NACK: the peer may hold a
    /// hole back for its reordering window, at most twice its retransmission timeout of
    /// the path (`gaps.rs`; its estimate is about ours), and the NACK then crosses back as
    /// late as the path's delay varies: three times `srtt + 4 · rttvar`, plus the ACK
    /// delay. Kept as `Arc`s, covered packets cost no copy; with less (a quarter of the
    /// smoothed RTT more than it), a path whose delay varied by ±10 ms lost repairs to
    /// NACKs that came after it.
    pub fn repair_grace(&self) -> Duration {
        (self.rtt.smoothed() + self.rtt.var() * 4) * 3 + MAX_ACK_DELAY
    }
}
