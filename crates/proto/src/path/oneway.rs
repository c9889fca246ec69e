//! Forward one-way queueing delay of a path, from the peer's clock in its feedback.
//!
//! Why: the RTT mixes both directions. When the reverse direction of a link is loaded (a
//! bidirectional transfer, or a download while we upload), the ACKs about our data queue
//! behind the peer's data, the RTT rises, and a sender that reads the RTT as "my queue"
//! slows down on a link it is not filling. The R-MTP thesis measures queueing one way for the same
//! reason. Every datagram carries its sender's clock (`send_time_us`), so the datagram
//! that brings an ACK tells when the peer received the acknowledged datagram, in the peer's
//! clock: `send_time_us − ack_delay_us`. Our send time of that datagram is known, so
//! `peer_receive − local_send` is the one-way delay plus an unknown, constant clock offset;
//! its windowed minimum removes the offset, and what is left is the forward queue. While
//! we add nothing to it (no data sent after the sampled datagram), a reading drains one
//! second per second (`queue_at`): an unused path is judged as it is now.
//!
//! Two readings: the smoothed queue (what a datagram sent now should expect to wait: the
//! schedulers' arrival estimate and the rate controller's reading) and the standing queue
//! (the smallest sample of the last one to two rounds, no more than the smoothed one). A
//! cellular link delivers in bursts of transmission opportunities, so each datagram waits
//! for the next burst even on a link far from full; a queue that stands is met by every
//! datagram of a round, as CoDel's standing queue is the minimum sojourn over an
//! interval. The controller drains on the standing queue where the two differ by more
//! than its target (`control.rs`, `drain_reading`).
//!
//! Invariants: clocks are 32-bit microsecond counters that wrap (every 71 min); all
//! arithmetic is relative to the first sample, in wrapping/serial form, so a wrap never
//! shows as a jump. The minimum is kept over a window of `WINDOW` (two buckets) so a slow
//! clock drift between the hosts (tens of ppm) cannot accumulate into a fake queue.

use crate::Instant;
use core::time::Duration;

/// How long a minimum is trusted (drift of 50 ppm over this is 0.5 ms).
const WINDOW: Duration = Duration::from_secs(10);

/// Forward one-way delay statistics of one path.
#[derive(Debug, Clone, Copy, Default)]
pub struct ForwardDelay {
    base: Option<u32>,
    /// Minimum of the current and the previous half-window (offset-relative µs).
    min_cur: Option<(Instant, i64)>,
    min_prev: Option<i64>,
    latest_queue_us: i64,
    /// EWMA (1/8, as the smoothed RTT) of the queue samples, µs.
    smoothed_queue_us: f64,
    /// When the newest sample was taken (our clock).
    sampled_at: Option<Instant>,
    /// Our send time of the newest sampled datagram.
    sampled_sent: Option<Instant>,
    /// Smallest queue sample (µs) of the current round, with when that round began, and
    /// of the round before (the standing queue, module doc).
    round_min: Option<(Instant, i64)>,
    prev_round_min: Option<i64>,
}

impl ForwardDelay {
    /// Records one sample: our datagram sent at `sent` (our clock) reached the peer at
    /// `peer_receive_us` (the peer's clock, low 32 bits); our newest data left at
    /// `last_data_sent`; the standing queue is the minimum over rounds of `round`.
    /// Returns the forward queueing delay this sample shows.
    pub fn on_sample(
        &mut self,
        now: Instant,
        sent: Instant,
        peer_receive_us: u32,
        last_data_sent: Option<Instant>,
        round: Duration,
    ) -> Duration {
        // Average the new sample in from what stood after the idle time, not before it.
        if self.idle(last_data_sent) {
            self.settle(now);
        }
        self.sampled_sent = self.sampled_sent.max(Some(sent));
        let raw = peer_receive_us.wrapping_sub(sent.as_micros() as u32);
        let base = *self.base.get_or_insert(raw);
        let owd = i64::from(raw.wrapping_sub(base) as i32);
        match self.min_cur {
            Some((start, _)) if now.saturating_since(start) >= WINDOW / 2 => {
                // Half-window over: the current bucket becomes the previous one.
                self.min_prev = self.min_cur.map(|(_, m)| m);
                self.min_cur = Some((now, owd));
            }
            Some((start, m)) => self.min_cur = Some((start, m.min(owd))),
            None => self.min_cur = Some((now, owd)),
        }
        let cur = self.min_cur.map_or(owd, |(_, m)| m);
        let min = self.min_prev.map_or(cur, |p| p.min(cur));
        self.latest_queue_us = (owd - min).max(0);
        self.smoothed_queue_us += (self.latest_queue_us as f64 - self.smoothed_queue_us) / 8.0;
        self.on_round_sample(now, round);
        self.sampled_at = Some(now);
        self.queue()
    }

    /// Keeps the minimum of the newest sample's round and of the round before; a round
    /// older than that (a path unsampled for a while) is forgotten.
    fn on_round_sample(&mut self, now: Instant, round: Duration) {
        let q = self.latest_queue_us;
        match self.round_min {
            Some((start, m)) if now.saturating_since(start) < round => {
                self.round_min = Some((start, m.min(q)));
            }
            Some((start, m)) => {
                self.prev_round_min = (now.saturating_since(start) < round * 2).then_some(m);
                self.round_min = Some((now, q));
            }
            None => self.round_min = Some((now, q)),
        }
    }

    /// The standing queue at `now` (module doc): the smallest sample of the last one to two
    /// rounds, never above the smoothed reading `queue_at` gives.
    pub fn standing_at(&self, now: Instant, last_data_sent: Option<Instant>) -> Duration {
        let smoothed = self.queue_at(now, last_data_sent);
        let Some((_, m)) = self.round_min else {
            return smoothed;
        };
        let m = self.prev_round_min.map_or(m, |p| p.min(m));
        smoothed.min(Duration::from_micros(m.max(0) as u64))
    }

    /// Whether nothing of ours was added to the queue the newest sample read: no data left
    /// after the sampled datagram (`last_data_sent`: when our newest data left).
    fn idle(&self, last_data_sent: Option<Instant>) -> bool {
        match (last_data_sent, self.sampled_sent) {
            (None, _) => true,
            (Some(data), Some(sampled)) => data <= sampled,
            (Some(_), None) => false,
        }
    }

    /// The forward queue at `now`. While idle (see `idle`), the smoothed reading drains one
    /// second per second, as a queue does at the link's rate when nothing is added to it.
    /// Kept as taken, a reading went stale on a path the scheduler had stopped using:
    /// 30 ms on an idle 50 Mbit/s link, decaying only by keepalive samples, kept it unused
    /// for seconds (the lab's `aggregate-bbr` test).
    pub fn queue_at(&self, now: Instant, last_data_sent: Option<Instant>) -> Duration {
        if !self.idle(last_data_sent) {
            return self.smoothed();
        }
        let since = self
            .sampled_at
            .map_or(Duration::ZERO, |t| now.saturating_since(t));
        self.smoothed().saturating_sub(since)
    }

    /// Data leaves now; our previous data left at `last_data_sent`. If the path was idle,
    /// what drained is committed: this datagram adds to what is left, and from here on
    /// the reading stays until a sample says more.
    pub fn on_data_sent(&mut self, now: Instant, last_data_sent: Option<Instant>) {
        if self.idle(last_data_sent) {
            self.settle(now);
        }
    }

    /// Commits the drained reading at `now` (call only while idle).
    fn settle(&mut self, now: Instant) {
        if self.sampled_at.is_some() {
            self.smoothed_queue_us = self.queue_at(now, None).as_micros() as f64;
            self.sampled_at = Some(now);
        }
    }

    /// Forgets the queue readings (the clock offset's minimum is kept): they describe a
    /// time that is over (a path back from an outage, whose datagrams waited it out).
    pub fn forget_queue(&mut self) {
        self.latest_queue_us = 0;
        self.smoothed_queue_us = 0.0;
        self.round_min = None;
        self.prev_round_min = None;
    }

    /// Smoothed forward queueing delay.
    pub fn smoothed(&self) -> Duration {
        Duration::from_micros(self.smoothed_queue_us as u64)
    }

    /// The newest forward queueing delay (zero before any sample).
    pub fn queue(&self) -> Duration {
        Duration::from_micros(self.latest_queue_us as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ROUND: Duration = Duration::from_millis(50);

    fn at(ms: u64) -> Instant {
        Instant::from_micros(ms * 1000)
    }

    #[test]
    fn queue_is_delay_above_the_minimum_whatever_the_clock_offset() {
        let mut f = ForwardDelay::default();
        // Peer clock 3 000 s ahead; base one-way delay 10 ms.
        let offset = 3_000_000_000u64;
        let peer = |sent_ms: u64, owd_ms: u64| ((sent_ms + owd_ms) * 1000 + offset) as u32;
        assert_eq!(
            f.on_sample(at(10), at(0), peer(0, 10), None, ROUND),
            Duration::ZERO
        );
        assert_eq!(
            f.on_sample(at(30), at(5), peer(5, 25), None, ROUND),
            Duration::from_millis(15)
        );
        assert_eq!(
            f.on_sample(at(40), at(20), peer(20, 10), None, ROUND),
            Duration::ZERO
        );
    }

    #[test]
    fn a_bursty_link_has_no_standing_queue_and_a_full_one_has() {
        let mut f = ForwardDelay::default();
        let sample = |f: &mut ForwardDelay, ms: u64, queue_ms: u64| {
            let peer = (ms * 1000 + queue_ms * 1000) as u32;
            f.on_sample(at(ms), at(ms), peer, Some(at(ms)), ROUND);
        };
        // Delivered in bursts: every other datagram waits 40 ms for the next one.
        for i in 0..60 {
            sample(&mut f, i * 5, if i % 2 == 0 { 0 } else { 40 });
        }
        let now = at(300);
        assert!(f.queue_at(now, Some(now)) > Duration::from_millis(15));
        assert_eq!(f.standing_at(now, Some(now)), Duration::ZERO);
        // Full: every datagram of the last two rounds waited 30 ms or more.
        for i in 60..120 {
            sample(&mut f, i * 5, 30 + i % 3 * 10);
        }
        let now = at(600);
        assert!(f.standing_at(now, Some(now)) >= Duration::from_millis(30));
        assert!(f.standing_at(now, Some(now)) <= f.queue_at(now, Some(now)));
    }

    #[test]
    fn a_drifting_clock_is_forgotten_after_the_window() {
        let mut f = ForwardDelay::default();
        f.on_sample(at(0), at(0), 5_000, None, ROUND);
        // The peer's clock runs 2 ms later after a long time: the old minimum expires.
        let mut q = Duration::ZERO;
        for s in 1..=30u64 {
            q = f.on_sample(
                at(s * 1000),
                at(s * 1000),
                (s * 1_000_000 + 7_000) as u32,
                None,
                ROUND,
            );
        }
        assert_eq!(q, Duration::ZERO);
    }

    #[test]
    fn an_idle_queue_drains_one_second_per_second() {
        let mut f = ForwardDelay::default();
        f.on_sample(at(0), at(0), 0, Some(at(0)), ROUND);
        // Eight samples 30 ms above the minimum: the EWMA reads most of it.
        for i in 1..=16 {
            f.on_sample(at(i), at(i), 30_000 + i as u32 * 1000, Some(at(i)), ROUND);
        }
        let q = f.smoothed();
        let last = Some(at(16));
        assert!(q > Duration::from_millis(25), "{q:?}");
        assert_eq!(f.queue_at(at(16), last), q);
        assert_eq!(f.queue_at(at(26), last), q - Duration::from_millis(10));
        assert_eq!(f.queue_at(at(100), last), Duration::ZERO);
        // Sending again keeps what is left; it no longer drains by itself.
        f.on_data_sent(at(26), last);
        assert_eq!(f.smoothed(), q - Duration::from_millis(10));
        assert_eq!(f.queue_at(at(40), Some(at(26))), f.smoothed());
    }

    proptest! {
        /// Wrapping clocks never produce a spurious queue: a constant one-way delay reads
        /// as zero queue wherever the two 32-bit clocks start.
        #[test]
        fn constant_delay_reads_zero(offset in any::<u32>(), start in any::<u32>(), n in 1usize..200) {
            let mut f = ForwardDelay::default();
            for i in 0..n as u64 {
                let sent = Instant::from_micros(u64::from(start) + i * 20_000);
                let peer = (sent.as_micros() as u32).wrapping_add(offset);
                prop_assert_eq!(f.on_sample(sent, sent, peer, Some(sent), ROUND), Duration::ZERO);
            }
        }
    }
}
