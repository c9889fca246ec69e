//! The daemons' clock: the monotonic clock mapped to the core's `Instant` (µs since the
//! daemon started) and back to tokio deadlines, plus the OS seed of a core's RNG.
//!
//! Invariant: [`Clock::now`] never goes backwards (it reads the monotonic clock); the wall
//! clock is read once, at start, for handshake timestamps.

use multihome_proto::Instant;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Maps the monotonic clock to the core's `Instant` (µs since start).
pub struct Clock {
    start: std::time::Instant,
    tokio_start: tokio::time::Instant,
    /// Wall-clock µs at start (handshake timestamps).
    pub epoch_us: u64,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    /// Starts the clock now.
    pub fn new() -> Self {
        Clock {
            start: std::time::Instant::now(),
            tokio_start: tokio::time::Instant::now(),
            epoch_us: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_micros() as u64)
                .unwrap_or(0),
        }
    }

    /// The core's current time.
    pub fn now(&self) -> Instant {
        Instant::from_micros(self.start.elapsed().as_micros() as u64)
    }

    /// A core deadline as a tokio instant (far future when there is none).
    pub fn deadline(&self, t: Option<Instant>) -> tokio::time::Instant {
        match t {
            Some(t) => self.tokio_start + Duration::from_micros(t.as_micros()),
            None => tokio::time::Instant::now() + Duration::from_secs(3600),
        }
    }
}

/// 32 bytes from the OS RNG: the seed of a core's RNG, which makes handshake ephemeral keys
/// and a predictor's random choices, so it must be unpredictable and never repeat across
/// restarts.
pub fn os_seed() -> anyhow::Result<[u8; 32]> {
    let mut seed = [0u8; 32];
    getrandom::getrandom(&mut seed).map_err(|e| anyhow::anyhow!("reading the OS RNG: {e}"))?;
    Ok(seed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn now_is_monotonic_and_deadlines_map_back() {
        let c = Clock::new();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
        let d = c.deadline(Some(Instant::from_micros(5_000)));
        assert_eq!(d - c.tokio_start, Duration::from_micros(5_000));
        assert!(c.deadline(None) > tokio::time::Instant::now() + Duration::from_secs(3000));
    }

    #[test]
    fn seeds_differ() {
        assert_ne!(os_seed().unwrap(), os_seed().unwrap());
    }
}
