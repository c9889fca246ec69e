//! Receiver side of a path: counts what arrives, measures packet pairs, and decides when
//! feedback (ACK, PAIR, NACK) is due — immediately on PING or on a gap in `path_seq`, every
//! `ACK_EVERY` eliciting datagrams, else after the path's ACK delay (`ack_delay`: min RTT
//! / 4 within 2–10 ms).
//!
//! A gap is a loss once the path's reordering window has passed (`gaps.rs`, RACK's
//! reo_wnd): zero on a path that delivers in order, as links mostly do, so datagrams
//! numbered between the largest seen and a newer one that arrived are reported at once in
//! a NACK and the sender repairs the data they carried (`session/reinject.rs`) while the
//! reorder buffer still holds the hole; on a path seen to reorder, only after the
//! reordering it showed, so reordering is not repaired as loss.
//!
//! Invariant: counts are cumulative since the path was created, so a lost ACK costs
//! nothing but delay (the next one carries the totals); a NACK is best effort (lost, its
//! holes are left to the reorder buffer's hold and the inner transport).

use super::{Path, ACK_EVERY};
use crate::wire::{AckFrame, NackFrame, PairFrame};

/// Most datagrams one gap may report (a longer run is an outage, which liveness handles).
const MAX_NACK_RUN: u32 = 256;
/// ACKs after the first that repeat a NACK.
const NACK_REPEATS: u8 = 2;
use crate::Instant;

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
        let mut gap = false;
        if let Some((l, _)) = self.rx_largest {
            let ahead = path_seq.wrapping_sub(l) as i32;
            if ahead > 1 && (ahead as u32 - 1) <= MAX_NACK_RUN {
                let nack = &mut self.rx_nack;
                self.gaps
                    .on_gap(now, l.wrapping_add(1), ahead as u32 - 1, |f, c| {
                        note_missing(nack, f, c);
                        gap = true;
                    });
            } else if ahead < 0 {
                self.gaps.on_late(now, path_seq, self.rtt.smoothed());
            }
        }
        if self
            .rx_largest
            .is_none_or(|(l, _)| path_seq.wrapping_sub(l) as i32 > 0)
        {
            self.rx_largest = Some((path_seq, now));
        }
        if !eliciting && !gap {
            return;
        }
        self.unacked_rx += 1;
        if ping || gap || self.unacked_rx >= ACK_EVERY {
            self.ack_deadline = Some(now);
        } else if self.ack_deadline.is_none() {
            self.ack_deadline = Some(now + self.ack_delay());
        }
    }

    /// The reordering window, and the datagrams that arrived reordered inside it and after
    /// being declared lost (`gaps.rs`).
    pub fn reordering(&self) -> (core::time::Duration, u64, u64) {
        let g = &self.gaps;
        (g.window(), g.reordered(), g.spurious())
    }

    /// When the oldest gap the reordering window holds open is due to be declared lost.
    pub fn loss_deadline(&self) -> Option<Instant> {
        self.gaps.deadline()
    }

    /// Declares lost the gaps open for the reordering window: they go in the next NACK,
    /// which goes out at once.
    pub fn declare_overdue(&mut self, now: Instant) {
        let nack = &mut self.rx_nack;
        if self.gaps.declare_due(now, |f, c| note_missing(nack, f, c)) {
            self.ack_deadline = Some(now);
        }
    }

    /// The NACK to send with the next ACK: the pending one, else a repeat of the last one.
    /// Each NACK goes out with `NACK_REPEATS` more ACKs after its own: they travel on the
    /// path that is losing datagrams, and a NACK lost costs its repair (the sender ignores
    /// a repeat, having already taken those packets out).
    pub fn take_nack(&mut self) -> Option<NackFrame> {
        if let Some((first, count)) = self.rx_nack.take() {
            let n = NackFrame {
                path: self.id.0,
                first,
                count,
            };
            self.rx_nack_repeat = Some((n, NACK_REPEATS));
            return Some(n);
        }
        let (n, left) = self.rx_nack_repeat.take()?;
        if left > 1 {
            self.rx_nack_repeat = Some((n, left - 1));
        }
        Some(n)
    }

    /// Whether a NACK (new or repeated) is waiting to be sent.
    pub fn has_nack(&self) -> bool {
        self.rx_nack.is_some() || self.rx_nack_repeat.is_some()
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
        let (largest, at) = self.rx_largest?;
        self.ack_deadline = None;
        self.unacked_rx = 0;
        Some(AckFrame {
            path: self.id.0,
            largest,
            ack_delay_us: now.saturating_since(at).as_micros().min(u32::MAX as u128) as u32,
            recv_count: self.rx_count,
            recv_bytes: self.rx_bytes,
        })
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

/// Adds `count` datagrams from `first` to the pending NACK `nack` (one range: the union with
/// what is pending, which may re-report a datagram that arrived — a harmless duplicate).
fn note_missing(nack: &mut Option<(u32, u16)>, first: u32, count: u32) {
    // Wrapping order: `b` is after `a` if it is less than half the number space ahead.
    let after = |a: u32, b: u32| b.wrapping_sub(a) as i32 > 0;
    let (start, end) = match *nack {
        Some((f, c)) => {
            let (e1, e2) = (f.wrapping_add(u32::from(c)), first.wrapping_add(count));
            (
                if after(f, first) { f } else { first },
                if after(e1, e2) { e2 } else { e1 },
            )
        }
        None => (first, first.wrapping_add(count)),
    };
    let run = end.wrapping_sub(start).min(MAX_NACK_RUN);
    *nack = Some((start, run as u16));
}
