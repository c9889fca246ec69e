//! Receiver side of a path: counts what arrives, measures packet pairs, and decides when
//! feedback (ACK, PAIR, NACK) is due — immediately on PING or when a loss is declared,
//! every `ACK_EVERY` eliciting datagrams, else after the path's ACK delay (`ack_delay`: min
//! RTT / 4 within 2–10 ms).
//!
//! A gap in `path_seq` is a loss only once RACK says so (`gaps.rs`, RFC 8985): when the
//! path's reordering window — learned from the reordering it shows — has passed since a
//! later datagram arrived, so reordering is not repaired as loss. Declared datagrams go in
//! the next NACK, at once, and the sender repairs the data they carried
//! (`session/reinject.rs`) while the reorder buffer still holds the hole.
//!
//! Invariant: counts are cumulative since the path was created, so a lost ACK costs
//! nothing but delay (the next one carries the totals); a NACK is best effort (lost, its
//! holes are left to the reorder buffer's hold and the inner transport). Pending NACK
//! ranges are kept apart (`MAX_NACK_RANGES`), so a NACK never names a datagram that
//! arrived — except when more disjoint ranges are pending than fit, the last ones merged.

use super::gaps::Rtts;
use super::{Path, ACK_EVERY};
use crate::wire::{AckFrame, NackFrame, PairFrame};
use crate::Instant;
use arrayvec::ArrayVec;

/// Most datagrams one gap may report (a NACK frame's count). A longer run is an outage,
/// which liveness handles (the path goes `Down`, and what it carried is reinjected or
/// held). Shorter ones are not: a path `Suspect` for less than its `Down` time while no
/// other path is `Up` has nothing reinjected, and a sender keeps sending on it. With
/// runs of over 256 left unreported, a 600-ms blackout of a 16-Mbit/s download's only
/// link lost 1 100 packets (`endpoint::tests::dynamics`); the gap tracker declares the
/// part of a run beyond what it holds missing at once (`gaps.rs`), so its work per gap
/// stays bounded.
const MAX_NACK_RUN: u32 = u16::MAX as u32;
/// ACKs after the first that repeat a NACK.
const NACK_REPEATS: u8 = 2;
/// Disjoint ranges one feedback may name (a NACK frame each, 8 bytes).
pub const MAX_NACK_RANGES: usize = 4;

/// NACK ranges (first `path_seq`, count) waiting to be sent.
pub type NackRanges = ArrayVec<(u32, u16), MAX_NACK_RANGES>;
/// The NACK frames of one feedback.
pub type Nacks = ArrayVec<NackFrame, MAX_NACK_RANGES>;

/// What the receiver learns from one authenticated datagram on a path.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    /// Its per-path sequence number.
    pub path_seq: u32,
    /// The sender's timestamp (low 32 bits of its clock in µs).
    pub send_time_us: u32,
    /// UDP payload bytes.
    pub bytes: usize,
    /// Whether it carried DATA or PING (asks for feedback).
    pub eliciting: bool,
    /// Whether it carried PING (asks for feedback now).
    pub ping: bool,
}

impl Path {
    /// Records an authenticated datagram received on this path. `eliciting` datagrams
    /// (with DATA or PING) schedule an ACK; `ping` asks for it at once.
    pub fn on_received(&mut self, now: Instant, rx: Received) {
        let Received {
            path_seq,
            send_time_us,
            bytes,
            eliciting,
            ping,
        } = rx;
        self.pair.on_datagram(now, path_seq, send_time_us, bytes);
        self.rx_count += 1;
        self.rx_bytes += bytes as u64;
        self.counters.rx_packets += 1;
        self.counters.rx_bytes += bytes as u64;
        let mut declared = false;
        if let Some((l, _)) = self.rx_largest {
            let rtt = self.rtts();
            let nack = &mut self.rx_nack;
            let ahead = path_seq.wrapping_sub(l) as i32;
            if ahead > 1 && (ahead as u32 - 1) <= MAX_NACK_RUN {
                // Only a full `missing` list declares here, to make room.
                let first = l.wrapping_add(1);
                self.gaps.on_gap(now, first, ahead as u32 - 1, rtt, |f, c| {
                    note_missing(nack, f, c);
                    declared = true;
                });
            } else if ahead < 0 {
                self.gaps.on_late(now, path_seq, rtt);
            }
        }
        if self
            .rx_largest
            .is_none_or(|(l, _)| path_seq.wrapping_sub(l) as i32 > 0)
        {
            self.rx_largest = Some((path_seq, now));
        }
        if !eliciting && !declared {
            return;
        }
        self.unacked_rx += 1;
        if ping || declared || self.unacked_rx >= ACK_EVERY {
            self.ack_deadline = Some(now);
        } else if self.ack_deadline.is_none() {
            self.ack_deadline = Some(now + self.ack_delay());
        }
    }

    /// What the reordering window is made of: this side's RTTs of the path.
    fn rtts(&self) -> Rtts {
        Rtts {
            min: self.rtt.min(),
            smoothed: self.rtt.smoothed(),
            var: self.rtt.var(),
        }
    }

    /// The reordering window (`gaps.rs`).
    pub fn reorder_window(&self) -> core::time::Duration {
        self.gaps.window(self.rtts())
    }

    /// The datagrams that arrived late inside their hole, that arrived after being
    /// declared lost, and that were declared lost.
    pub fn reordering(&self) -> (u64, u64, u64) {
        let g = &self.gaps;
        (g.reordered(), g.spurious(), g.lost())
    }

    /// When the oldest missing datagram is due to be declared lost.
    pub fn loss_deadline(&self) -> Option<Instant> {
        self.gaps.deadline(self.rtts())
    }

    /// Declares lost the missing datagrams whose window passed: they go in the next NACK,
    /// which goes out at once.
    pub fn declare_overdue(&mut self, now: Instant) {
        let rtt = self.rtts();
        let nack = &mut self.rx_nack;
        if self
            .gaps
            .declare_due(now, rtt, |f, c| note_missing(nack, f, c))
        {
            self.ack_deadline = Some(now);
        }
    }

    /// The NACKs to send with the next ACK: the pending ones, else a repeat of the last.
    /// Each goes out with `NACK_REPEATS` more ACKs after its own: they travel on the path
    /// that is losing datagrams, and a NACK lost costs its repair (the sender ignores a
    /// repeat, having already taken those packets out).
    pub fn take_nack(&mut self) -> Nacks {
        if !self.rx_nack.is_empty() {
            let id = self.id.0;
            let n: Nacks = self
                .rx_nack
                .drain(..)
                .map(|(first, count)| NackFrame {
                    path: id,
                    first,
                    count,
                })
                .collect();
            self.rx_nack_repeat = Some((n.clone(), NACK_REPEATS));
            return n;
        }
        let Some((n, left)) = self.rx_nack_repeat.take() else {
            return Nacks::new();
        };
        if left > 1 {
            self.rx_nack_repeat = Some((n.clone(), left - 1));
        }
        n
    }

    /// The NACKs last sent, while their repeats last: copies for datagrams on the other
    /// paths (`session/transmit.rs`). A path that loses datagrams in bursts loses the ACKs
    /// that carry its NACKs in the same bursts, repeats included (Gilbert-Elliott loss,
    /// bursts of 3: a third of the repeats after a lost NACK are lost too), and each NACK
    /// lost leaves its hole to the reorder buffer's give-up; another path's loss is
    /// independent of this one's.
    pub fn nack_echo(&self) -> &[NackFrame] {
        self.rx_nack_repeat
            .as_ref()
            .map_or(&[], |(n, _)| n.as_slice())
    }

    /// NACK frames (new or repeated) waiting to be sent.
    pub fn nack_count(&self) -> usize {
        if self.rx_nack.is_empty() {
            self.rx_nack_repeat.as_ref().map_or(0, |(n, _)| n.len())
        } else {
            self.rx_nack.len()
        }
    }

    /// When an ACK for this path is due.
    pub fn ack_deadline(&self) -> Option<Instant> {
        self.ack_deadline
    }

    /// Builds the ACK frame if one is due (or `force`), and marks it sent.
    pub fn take_ack(&mut self, now: Instant, force: bool) -> Option<AckFrame> {
        let due = self.ack_deadline.is_some_and(|d| d <= now);
        if !(due || force && self.ack_deadline.is_some()) {
            return None;
        }
        let ack = self.ack_frame(now)?;
        self.ack_deadline = None;
        self.unacked_rx = 0;
        Some(ack)
    }

    /// The ACK frame of what arrived so far (`None` before anything did).
    fn ack_frame(&self, now: Instant) -> Option<AckFrame> {
        let (largest, at) = self.rx_largest?;
        Some(AckFrame {
            path: self.id.0,
            largest,
            ack_delay_us: now.saturating_since(at).as_micros().min(u32::MAX as u128) as u32,
            recv_count: self.rx_count,
            recv_bytes: self.rx_bytes,
        })
    }

    /// This path's ACK frame to carry on another path (`session/transmit.rs`, feedback
    /// that crosses), if a datagram arrived on it since the last crossing copy; the ACK
    /// due on the path itself is left as it is.
    pub fn crossing_ack(&mut self, now: Instant) -> Option<AckFrame> {
        if self.rx_crossed == self.rx_count {
            return None;
        }
        let ack = self.ack_frame(now)?;
        self.rx_crossed = self.rx_count;
        Some(ack)
    }

    /// The packet-pair capacity to report to the peer, if it changed since the last report.
    pub fn take_pair_report(&mut self) -> Option<PairFrame> {
        let c = self.pair.take_report()?;
        Some(PairFrame {
            path: self.id.0,
            capacity_kbps: (c * 8.0 / 1000.0).round().clamp(1.0, f64::from(u32::MAX)) as u32,
        })
    }
}

/// Adds `count` datagrams from `first` to the pending NACK ranges: merged with a range it
/// touches or overlaps, else a range of its own; with every slot taken, merged with the
/// last one (the union may name datagrams that arrived: harmless duplicates).
fn note_missing(nack: &mut NackRanges, first: u32, count: u32) {
    // Wrapping order: `b` is after `a` if it is less than half the number space ahead.
    let after = |a: u32, b: u32| b.wrapping_sub(a) as i32 > 0;
    let end = first.wrapping_add(count);
    let touches = |&(f, c): &(u32, u16)| {
        let e = f.wrapping_add(u32::from(c));
        !after(e, first) && !after(end, f)
    };
    let slot = match nack.iter().position(touches) {
        Some(i) => i,
        None if !nack.is_full() => {
            nack.push((first, count.min(MAX_NACK_RUN) as u16));
            return;
        }
        None => nack.len() - 1,
    };
    let (f, c) = nack[slot];
    let e1 = f.wrapping_add(u32::from(c));
    let start = if after(f, first) { f } else { first };
    let stop = if after(e1, end) { end } else { e1 };
    nack[slot] = (start, stop.wrapping_sub(start).min(MAX_NACK_RUN) as u16);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disjoint_ranges_stay_apart_and_touching_ones_merge() {
        let mut n = NackRanges::new();
        note_missing(&mut n, 10, 2);
        note_missing(&mut n, 20, 1);
        note_missing(&mut n, 12, 1); // touches 10..12
        note_missing(&mut n, 19, 1); // touches 20
        assert_eq!(n.as_slice(), &[(10, 3), (19, 2)]);
        note_missing(&mut n, 30, 1);
        note_missing(&mut n, 40, 1);
        note_missing(&mut n, 50, 1); // no slot left: merged with the last
        assert_eq!(n.as_slice(), &[(10, 3), (19, 2), (30, 1), (40, 11)]);
    }

    #[test]
    fn ranges_merge_across_the_wrap() {
        let mut n = NackRanges::new();
        note_missing(&mut n, u32::MAX, 1);
        note_missing(&mut n, 0, 2);
        assert_eq!(n.as_slice(), &[(u32::MAX, 3)]);
    }
}
