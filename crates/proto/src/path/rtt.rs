//! Round-trip time estimation (RFC 6298 / RFC 9002 §5): smoothed RTT, variation, minimum.
//!
//! Invariant: `smoothed` and `min` are only meaningful after the first sample; before it
//! `smoothed()` returns the configured initial value so timers have something sane.

use core::time::Duration;

/// RTT statistics of one path.
#[derive(Debug, Clone, Copy)]
pub struct RttEstimator {
    smoothed: Option<Duration>,
    var: Duration,
    min: Option<Duration>,
    latest: Duration,
    initial: Duration,
    /// The next sample replaces the smoothed value and variation (`restart`).
    restarted: bool,
}

impl RttEstimator {
    /// A fresh estimator answering `initial` until the first sample.
    pub fn new(initial: Duration) -> Self {
        RttEstimator {
            smoothed: None,
            var: initial / 2,
            min: None,
            latest: initial,
            initial,
            restarted: false,
        }
    }

    /// Adds one sample (already corrected for the peer's ack delay).
    pub fn on_sample(&mut self, rtt: Duration) {
        self.latest = rtt;
        self.min = Some(self.min.map_or(rtt, |m| m.min(rtt)));
        match self.smoothed {
            _ if self.restarted => {
                self.restarted = false;
                self.smoothed = Some(rtt);
                self.var = rtt / 2;
            }
            None => {
                self.smoothed = Some(rtt);
                self.var = rtt / 2;
            }
            Some(s) => {
                let diff = s.abs_diff(rtt);
                self.var = (self.var * 3 + diff) / 4;
                self.smoothed = Some((s * 7 + rtt) / 8);
            }
        }
    }

    /// Starts the smoothed value and variation afresh at the next sample (the minimum is
    /// kept): those so far describe a time that is over (a path back from an outage).
    pub fn restart(&mut self) {
        self.restarted = true;
    }

    /// Smoothed RTT (the initial value before any sample).
    pub fn smoothed(&self) -> Duration {
        self.smoothed.unwrap_or(self.initial)
    }

    /// Whether at least one sample was taken.
    pub fn has_sample(&self) -> bool {
        self.smoothed.is_some()
    }

    /// Mean deviation.
    pub fn var(&self) -> Duration {
        self.var
    }

    /// Minimum RTT seen (smoothed value before any sample).
    pub fn min(&self) -> Duration {
        self.min.unwrap_or(self.initial)
    }

    /// The most recent sample.
    pub fn latest(&self) -> Duration {
        self.latest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converges_and_tracks_min() {
        let mut r = RttEstimator::new(Duration::from_millis(100));
        assert_eq!(r.smoothed(), Duration::from_millis(100));
        for _ in 0..50 {
            r.on_sample(Duration::from_millis(20));
        }
        r.on_sample(Duration::from_millis(10));
        assert_eq!(r.min(), Duration::from_millis(10));
        let s = r.smoothed().as_micros();
        assert!((18_000..=20_000).contains(&s), "{s}");
    }
}
