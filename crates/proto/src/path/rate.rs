//! Delivery-rate sampling and bottleneck-bandwidth estimate (the BBR / draft-cheng
//! delivery-rate idea, as in s2n-quic's `recovery/bandwidth/estimator.rs`).
//!
//! Each sent datagram remembers how many bytes the peer had reported delivered, and when,
//! at the moment it was sent; when its feedback arrives, the bytes delivered since then
//! divided by the time since then is one rate sample. The estimate is the maximum sample
//! over a sliding time window, so a link that degrades loses its old maximum within one
//! window (invariant: a sample older than `window` never counts).

use crate::Instant;
use core::time::Duration;

/// Sliding-window maximum of rate samples in bytes per second, kept as (time, value)
/// entries with strictly decreasing values (monotonic deque), bounded in length.
#[derive(Debug, Clone)]
pub struct WindowedMaxRate {
    window: Duration,
    samples: std::collections::VecDeque<(Instant, f64)>,
}

impl WindowedMaxRate {
    /// A filter over `window`.
    pub fn new(window: Duration) -> Self {
        WindowedMaxRate {
            window,
            samples: std::collections::VecDeque::with_capacity(16),
        }
    }

    /// Changes the window length (it follows the path's RTT).
    pub fn set_window(&mut self, window: Duration) {
        self.window = window;
    }

    /// Adds a sample taken at `now`.
    pub fn update(&mut self, now: Instant, bytes_per_sec: f64) {
        while self
            .samples
            .back()
            .is_some_and(|&(_, v)| v <= bytes_per_sec)
        {
            self.samples.pop_back();
        }
        self.samples.push_back((now, bytes_per_sec));
        self.expire(now);
        if self.samples.len() > 256 {
            self.samples.pop_front();
        }
    }

    /// Drops samples older than the window.
    pub fn expire(&mut self, now: Instant) {
        while self
            .samples
            .front()
            .is_some_and(|&(t, _)| now.saturating_since(t) > self.window && self.samples.len() > 1)
        {
            self.samples.pop_front();
        }
    }

    /// Current maximum (bytes/s), 0 with no samples.
    pub fn get(&self) -> f64 {
        self.samples.front().map_or(0.0, |&(_, v)| v)
    }
}

/// Shortest receive interval (peer clock) a rate sample may span.
pub(super) const MIN_PEER_INTERVAL: Duration = Duration::from_millis(1);

/// `p − p0` of two peer timestamps (µs, low 32 bits) in serial arithmetic; negative
/// (feedback out of order) gives 0.
fn serial_us(p: u32, p0: u32) -> Duration {
    Duration::from_micros((p.wrapping_sub(p0) as i32).max(0) as u64)
}

/// What a sent datagram remembers for rate sampling.
#[derive(Debug, Clone, Copy, Default)]
pub struct RateSnapshot {
    /// Where its sample starts: the delivery reference when it was sent.
    pub from: Reference,
    /// Sent while the path had room but nothing to send: its sample may understate.
    pub app_limited: bool,
    /// The highest rate a sample taken on this datagram may show (bytes/s): the pacing
    /// rate it left at, or the path's packet-pair capacity if higher; infinite if
    /// unbounded, 0 for a datagram that proves no rate (a keepalive).
    pub cap: f32,
}

/// Where rate samples start: the delivery state at some earlier feedback.
#[derive(Debug, Clone, Copy, Default)]
pub struct Reference {
    /// Bytes the peer had reported delivered.
    delivered: u64,
    /// When that report arrived (or, after a restart, when the clock restarted).
    time: Instant,
    /// Send time of the newest datagram covered by that report.
    sent: Instant,
    /// When the peer received that datagram, in its clock (µs, low 32 bits); `None`
    /// after a restart (the delivery clock then runs in our time).
    peer_us: Option<u32>,
}

/// Per-path delivery-rate state.
///
/// The reference advances at most once per `MIN_PEER_INTERVAL` of the peer's clock, so a
/// datagram sent a little after an advance still gets a sample spanning at least that:
/// with per-datagram feedback on a sub-millisecond path, a reference that followed every
/// ACK gave samples of one datagram's spacing, all under the floor and skipped, and a
/// path paced below its link never learnt its rate (a 100 Mbit/s link held at 0.2
/// Mbit/s for 7 s). The reference restarts in our clock (`restart`) only after idle time
/// the pacing does not explain: on such a path every datagram leaves with nothing in
/// flight, and restarting at each made every sample one round trip long, all skipped.
#[derive(Debug, Clone)]
pub struct DeliveryRate {
    delivered: u64,
    newest_acked_sent: Instant,
    reference: Reference,
    max: WindowedMaxRate,
    latest: f64,
    valid: bool,
    /// When the latest sample taken while the path was busy came in (what says the
    /// estimate is current, `busy_age`).
    busy_at: Option<Instant>,
}

impl DeliveryRate {
    /// Fresh state.
    pub fn new(now: Instant) -> Self {
        DeliveryRate {
            delivered: 0,
            newest_acked_sent: now,
            reference: Reference {
                delivered: 0,
                time: now,
                sent: now,
                peer_us: None,
            },
            max: WindowedMaxRate::new(Duration::from_secs(2)),
            latest: 0.0,
            valid: false,
            busy_at: None,
        }
    }

    /// Restarts the delivery clock at `now`, in our time: the path sat idle longer than
    /// its pacing explains, and that idle time must not dilute the next samples.
    pub fn restart(&mut self, now: Instant) {
        self.reference = Reference {
            delivered: self.delivered,
            time: now,
            sent: now,
            peer_us: None,
        };
    }

    /// Snapshot to store with a datagram being sent now; its samples are capped at `cap`
    /// bytes/s.
    pub fn snapshot(&self, app_limited: bool, cap: f64) -> RateSnapshot {
        RateSnapshot {
            from: self.reference,
            app_limited,
            cap: cap as f32,
        }
    }

    /// Replaces the estimate by `bytes_per_sec` (a congestion verdict's decrease): older
    /// maxima are forgotten, new samples raise it again if the path has room.
    pub fn reset_to(&mut self, now: Instant, bytes_per_sec: f64) {
        self.max = WindowedMaxRate::new(self.max.window);
        self.max.update(now, bytes_per_sec);
    }

    /// Feedback: the peer has received `recv_bytes` in total on this path, the newest of
    /// them at `peer_us` in its clock; `acked` is the snapshot of the newest datagram the
    /// feedback covers and when that datagram was sent.
    ///
    /// The sample's interval is the longer of the receive interval and the send interval
    /// (BBR's rule): a rate no higher than the one the data was sent at can be proven by
    /// these bytes. The receive interval is measured in the peer's clock, where the bytes
    /// arrived: measured here, at feedback arrival, it would include how the feedback's
    /// own trip varied — feedback bunched behind the peer's data on a busy reverse
    /// direction (ACK compression) read as a link up to 25 % faster than it is.
    pub fn on_ack(
        &mut self,
        now: Instant,
        recv_bytes: u64,
        peer_us: Option<u32>,
        acked: Option<(RateSnapshot, Instant)>,
    ) {
        if recv_bytes <= self.delivered {
            return;
        }
        self.delivered = recv_bytes;
        if let Some((s, sent)) = acked {
            self.newest_acked_sent = self.newest_acked_sent.max(sent);
            let from = s.from;
            let receive_interval = match (peer_us, from.peer_us) {
                (Some(p), Some(p0)) => serial_us(p, p0),
                _ => now.saturating_since(from.time),
            };
            let elapsed = receive_interval.max(sent.saturating_since(from.sent));
            // Below 1 ms the sample is dominated by how the peer batches its reads and
            // its feedback: skip it (the lagging reference makes later ones longer).
            if elapsed >= MIN_PEER_INTERVAL {
                // No faster than the datagram could prove (its pacing rate, or the
                // pairs' capacity): a burst that a token-bucket link passes at line rate
                // would otherwise read as a link several times faster than it is, and
                // the scheduler would pile everything on it.
                let rate = ((recv_bytes - from.delivered) as f64 / elapsed.as_secs_f64())
                    .min(f64::from(s.cap));
                self.latest = rate;
                // An application-limited sample only counts if it raises the estimate
                // (BBR's rule): a path that was not given enough to do keeps its estimate.
                if !s.app_limited || rate > self.max.get() {
                    self.max.update(now, rate);
                }
                self.valid |= !s.app_limited;
                if !s.app_limited {
                    self.busy_at = Some(now);
                }
            }
        }
        let advance = match (peer_us, self.reference.peer_us) {
            (Some(p), Some(p0)) => serial_us(p, p0) >= MIN_PEER_INTERVAL,
            _ => true,
        };
        if advance {
            self.reference = Reference {
                delivered: recv_bytes,
                time: now,
                sent: self.newest_acked_sent,
                peer_us,
            };
        }
    }

    /// Lets the estimate forget samples older than `window` (call on timers too).
    pub fn set_window(&mut self, now: Instant, window: Duration) {
        self.max.set_window(window);
        self.max.expire(now);
    }

    /// Whether a sample was taken while the path was busy (not application-limited).
    pub fn valid(&self) -> bool {
        self.valid
    }

    /// How long ago the latest sample taken while the path was busy came in (`None`:
    /// never): an estimate nothing has refreshed for long says what the path carried
    /// then, not now (a path left unused keeps its last estimate, `WindowedMaxRate`).
    pub fn busy_age(&self, now: Instant) -> Option<Duration> {
        self.busy_at.map(|t| now.saturating_since(t))
    }

    /// Bottleneck bandwidth estimate, bytes per second.
    pub fn bandwidth(&self) -> f64 {
        self.max.get()
    }

    /// The most recent sample, bytes per second.
    pub fn latest(&self) -> f64 {
        self.latest
    }

    /// Total bytes the peer reported delivered on this path.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn steady_rate_is_measured() {
        let mut d = DeliveryRate::new(Instant::ZERO);
        // 1 MB/s: every 10 ms, 10 kB more delivered; each ack covers a packet sent 20 ms ago.
        let mut snaps = std::collections::VecDeque::new();
        for i in 0..200u64 {
            let now = Instant::from_micros(i * 10_000);
            snaps.push_back(d.snapshot(false, f64::INFINITY));
            let acked = if snaps.len() > 2 {
                snaps.pop_front()
            } else {
                None
            };
            d.on_ack(now, i * 10_000, None, acked.map(|a| (a, now)));
        }
        let bw = d.bandwidth();
        assert!((0.95e6..1.05e6).contains(&bw), "{bw}");
    }

    #[test]
    fn bunched_feedback_is_timed_by_the_peer_clock() {
        let ms = |m: u64| Instant::from_micros(m * 1000);
        let mut d = DeliveryRate::new(Instant::ZERO);
        let first = d.snapshot(false, f64::INFINITY);
        d.on_ack(ms(100), 100_000, Some(50_000), Some((first, ms(99))));
        let snap = d.snapshot(false, f64::INFINITY);
        // 10 kB more arrived at the peer over 10 ms of its clock; the feedback reached us
        // 1 ms after the previous one (it queued behind the peer's data), and the data
        // had left 1 ms apart (sent at a probing gain): the peer's clock tells the truth.
        d.on_ack(ms(101), 110_000, Some(60_000), Some((snap, ms(100))));
        assert!((d.latest() - 1e6).abs() < 1.0, "{}", d.latest());
        // Without the peer's time the same feedback reads ten times too fast.
        let mut old = DeliveryRate::new(Instant::ZERO);
        let first = old.snapshot(false, f64::INFINITY);
        old.on_ack(ms(100), 100_000, None, Some((first, ms(99))));
        let snap = old.snapshot(false, f64::INFINITY);
        old.on_ack(ms(101), 110_000, None, Some((snap, ms(100))));
        assert!(old.latest() > 9e6, "{}", old.latest());
    }

    proptest! {
        /// The windowed max equals the brute-force max over the samples inside the window.
        #[test]
        fn windowed_max_matches_model(samples in proptest::collection::vec((1u64..50_000, 0.0f64..1e9), 1..100)) {
            let mut f = WindowedMaxRate::new(Duration::from_millis(100));
            let mut t = 0u64;
            let mut all = vec![];
            for (dt, v) in samples {
                t += dt;
                let now = Instant::from_micros(t);
                f.update(now, v);
                all.push((t, v));
                let newest = all.last().unwrap().0;
                let model = all.iter()
                    .filter(|(ts, _)| newest - ts <= 100_000)
                    .map(|&(_, v)| v)
                    .fold(f64::MIN, f64::max);
                prop_assert!((f.get() - model).abs() < 1e-6, "{} vs {}", f.get(), model);
            }
        }
    }
}
