//! Pacing of one path: a token bucket refilled at the path's pacing rate, so datagrams
//! leave at the rate the link can carry instead of in window-sized bursts that would fill
//! its queue (R-MTP's rate-based transmission: one datagram per period P).
//!
//! Every `PAIR_EVERY`-th data datagram is followed by one sent back to back (it may leave
//! before its tokens are there; the bucket goes into debt): the pair's spacing at the
//! receiver measures the bottleneck capacity (R-MTP's packet pairs, "once every 5
//! packets").
//!
//! Invariants: tokens never exceed the burst allowance, so an idle path cannot save up
//! credit for a long burst; a datagram may always go when the bucket is full (a rate
//! that rounds to zero cannot stall a path forever).

use crate::Instant;
use core::time::Duration;

/// A data datagram out of this many is sent as the first of a back-to-back pair.
pub const PAIR_EVERY: u32 = 5;
/// Smallest burst allowance in bytes (two full datagrams plus an ACK).
const MIN_BURST: f64 = 3.0 * 1500.0;
/// The burst allowance is also at least this much time at the pacing rate: drivers run
/// timers with about a millisecond of granularity, and a bucket smaller than that would
/// make them lose rate.
const BURST_TIME: f64 = 0.002;

/// The token bucket.
#[derive(Debug, Clone)]
pub struct Pacer {
    tokens: f64,
    last: Instant,
    data_sent: u32,
    pair_pending: bool,
}

impl Pacer {
    /// A full bucket at `now`.
    pub fn new(now: Instant) -> Self {
        Pacer {
            tokens: MIN_BURST,
            last: now,
            data_sent: 0,
            pair_pending: false,
        }
    }

    fn burst(rate: f64) -> f64 {
        (rate * BURST_TIME).max(MIN_BURST)
    }

    fn refill(&mut self, now: Instant, rate: f64) {
        let dt = now.saturating_since(self.last).as_secs_f64();
        self.last = self.last.max(now);
        self.tokens = (self.tokens + dt * rate).min(Self::burst(rate));
    }

    /// When a datagram of `len` bytes may leave at `rate` bytes/s: an absolute time,
    /// possibly in the past (then it may leave at once).
    pub fn ready_time(&self, rate: f64, len: usize) -> Instant {
        let need = (len as f64).min(Self::burst(rate));
        if self.pair_pending || self.tokens >= need || rate <= 0.0 {
            return self.last;
        }
        self.last + Duration::from_secs_f64((need - self.tokens) / rate)
    }

    /// When a datagram of `len` bytes may leave at `rate` bytes/s (`now` if at once).
    pub fn ready_at(&self, now: Instant, rate: f64, len: usize) -> Instant {
        self.ready_time(rate, len).max(now)
    }

    /// Takes the tokens of a datagram of `len` bytes sent at `now`; `data` datagrams count
    /// towards the packet pairs.
    pub fn on_sent(&mut self, now: Instant, rate: f64, len: usize, data: bool) {
        self.refill(now, rate);
        self.tokens -= len as f64;
        if self.pair_pending && data {
            // Second datagram of a pair: it left at once, right behind the first, but it
            // is paid for (the bucket goes into debt), so pairs do not raise the rate.
            self.pair_pending = false;
            return;
        }
        if data {
            self.data_sent = self.data_sent.wrapping_add(1);
            if self.data_sent.is_multiple_of(PAIR_EVERY) {
                self.pair_pending = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends as fast as the pacer allows for `secs` and returns the achieved rate.
    fn achieved(rate: f64, secs: f64) -> f64 {
        let mut p = Pacer::new(Instant::ZERO);
        let mut now = Instant::ZERO;
        let end = Instant::ZERO + Duration::from_secs_f64(secs);
        let mut bytes = 0.0;
        while now < end {
            let t = p.ready_at(now, rate, 1500);
            now = t;
            p.on_sent(now, rate, 1500, true);
            bytes += 1500.0;
        }
        bytes / secs
    }

    #[test]
    fn paces_at_the_rate_pairs_included() {
        // 10 Mbit/s: pairs leave back to back but are paid for, so the rate holds.
        let r = achieved(1.25e6, 5.0);
        assert!((1.25e6 * 0.98..1.25e6 * 1.02).contains(&r), "{r}");
    }

    #[test]
    fn idle_time_saves_at_most_one_burst() {
        let mut p = Pacer::new(Instant::ZERO);
        let now = Instant::from_micros(10_000_000);
        let mut sent = 0;
        while p.ready_at(now, 1.25e6, 1500) == now && sent < 1000 {
            p.on_sent(now, 1.25e6, 1500, false);
            sent += 1;
        }
        // Burst: max(3 datagrams, 2 ms at 10 Mbit/s = 2500 B) = 4500 B → 3 datagrams.
        assert_eq!(sent, 3);
    }

    #[test]
    fn zero_rate_never_stalls_a_full_bucket() {
        let p = Pacer::new(Instant::ZERO);
        assert_eq!(p.ready_at(Instant::ZERO, 0.0, 1500), Instant::ZERO);
    }
}
