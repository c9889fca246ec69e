//! Receiver side of `realtime`: was a packet late?
//!
//! A realtime DATA frame carries its deadline (`deadline_ms`, PROTOCOL.md §4.3) and its
//! datagram the sender's clock (`send_time_us`). The clocks are not synchronised, so the
//! one-way delay is estimated as in `delay.rs`, from differences: `raw = arrival −
//! send_time_us` is the one-way delay plus a constant offset; its minimum over recent
//! datagrams of every path (two 5-s buckets, so clock drift cannot accumulate) is the
//! fastest path's base delay plus the same offset; and that base delay is taken as half
//! the lowest minimum RTT of the paths. So
//!
//! `owd ≈ (raw − min raw) + min over paths of min_rtt / 2`,
//!
//! and a packet is late when `owd > deadline`. The sender stamps `send_time_us` when it
//! seals the datagram, and schedules a realtime packet as it arrives from the TUN, so the
//! time it waited in the tunnel before sealing is nil. Error: the asymmetry of the fastest
//! path (its forward delay is taken as half its RTT), and a minimum that all paths exceed
//! for 10 s (a standing queue on every path) makes lateness read low.

use crate::Instant;
use core::time::Duration;

/// Length of one bucket of the windowed minimum.
const BUCKET: Duration = Duration::from_secs(5);

/// Windowed minimum of `arrival − send_time_us` over every datagram of the session.
#[derive(Debug, Clone, Default)]
pub struct Lateness {
    /// Minimum of the current bucket, minimum of the previous one (serial arithmetic).
    cur: Option<u32>,
    prev: Option<u32>,
    bucket_start: Instant,
}

/// The lower of two raw delays in 32-bit serial arithmetic.
fn serial_min(a: u32, b: u32) -> u32 {
    if (a.wrapping_sub(b) as i32) < 0 {
        a
    } else {
        b
    }
}

impl Lateness {
    /// Records a datagram sent at `send_time_us` (peer clock) arriving `now`; returns its
    /// raw delay.
    pub fn on_datagram(&mut self, now: Instant, send_time_us: u32) -> u32 {
        let raw = (now.as_micros() as u32).wrapping_sub(send_time_us);
        if now.saturating_since(self.bucket_start) >= BUCKET {
            self.prev = self.cur.take();
            self.bucket_start = now;
        }
        self.cur = Some(self.cur.map_or(raw, |m| serial_min(m, raw)));
        raw
    }

    /// Estimated one-way delay of a datagram with raw delay `raw`, given the base delay of
    /// the fastest path (`min_owd`).
    pub fn one_way(&self, raw: u32, min_owd: Duration) -> Duration {
        let min = match (self.cur, self.prev) {
            (Some(a), Some(b)) => serial_min(a, b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => raw,
        };
        let above = u64::try_from(raw.wrapping_sub(min) as i32).unwrap_or(0);
        min_owd + Duration::from_micros(above)
    }

    /// Whether a packet with raw delay `raw` and `deadline_ms` arrived late.
    pub fn is_late(&self, raw: u32, min_owd: Duration, deadline_ms: u16) -> bool {
        self.is_later_than(raw, min_owd, Duration::from_millis(u64::from(deadline_ms)))
    }

    /// Whether a packet with raw delay `raw` is past `limit` (a deadline less a guard).
    pub fn is_later_than(&self, raw: u32, min_owd: Duration, limit: Duration) -> bool {
        self.one_way(raw, min_owd) > limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lateness_from_differences() {
        let mut l = Lateness::default();
        // Clock offset of 1 000 000 µs; fastest path 20 ms one-way.
        let off = 1_000_000u32;
        let at = |ms: u64| Instant::from_micros(ms * 1000);
        let sent = |ms: u64| (ms * 1000) as u32 + off;
        l.on_datagram(at(20), sent(0));
        let raw = l.on_datagram(at(150), sent(10)); // 140 ms one-way
        let base = Duration::from_millis(20);
        assert_eq!(l.one_way(raw, base), Duration::from_millis(140));
        assert!(!l.is_late(raw, base, 150));
        assert!(l.is_late(raw, base, 100));
        // The minimum forgets after two buckets: a lasting rise becomes the new base.
        l.on_datagram(at(6_000), sent(5_900));
        let raw = l.on_datagram(at(12_000), sent(11_900));
        assert_eq!(l.one_way(raw, base), Duration::from_millis(20));
    }
}
