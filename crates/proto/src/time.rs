//! Injected time for the sans-IO core.
//!
//! The core never reads a clock: every entry point takes `now: Instant`, a count of
//! microseconds since an arbitrary origin chosen by the driver (the daemon maps it to
//! `std::time::Instant`, the simulator to its virtual clock). Invariant: callers pass
//! non-decreasing values; the core tolerates equal values and saturates on subtraction.

use core::time::Duration;

/// A point in time, in microseconds since the driver's origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    /// The driver's origin.
    pub const ZERO: Instant = Instant(0);

    /// Builds an instant from microseconds since the origin.
    pub const fn from_micros(us: u64) -> Instant {
        Instant(us)
    }

    /// Microseconds since the origin.
    pub const fn as_micros(self) -> u64 {
        self.0
    }

    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }
}

impl core::ops::Add<Duration> for Instant {
    type Output = Instant;
    /// Rounds up to the next microsecond, so a deadline `t + d` is never earlier than
    /// the moment `d` has fully elapsed (else a timer could fire and find nothing due).
    /// In u64: `d`'s whole seconds are whole microseconds, so only its sub-second nanos
    /// need rounding (this runs for every deadline of every path, per packet).
    fn add(self, d: Duration) -> Instant {
        let us = d
            .as_secs()
            .saturating_mul(1_000_000)
            .saturating_add(u64::from(d.subsec_nanos().div_ceil(1000)));
        Instant(self.0.saturating_add(us))
    }
}

impl core::ops::Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, d: Duration) -> Instant {
        Instant(self.0.saturating_sub(d.as_micros() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The u64 addition rounds and saturates exactly as the u128 formula it replaced.
    #[test]
    fn add_rounds_and_saturates_as_the_u128_formula() {
        let reference = |t: Instant, d: Duration| {
            let us = d.as_nanos().div_ceil(1000).min(u64::MAX as u128) as u64;
            Instant(t.0.saturating_add(us))
        };
        let instants = [0, 1, 999_999, 1 << 40, u64::MAX - 1_000_000, u64::MAX];
        let durations = [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_nanos(999),
            Duration::from_nanos(1_001),
            Duration::from_millis(333) / 7,
            Duration::from_secs(1) - Duration::from_nanos(1),
            Duration::new(12_345, 678_901_234),
            Duration::new(u64::MAX / 1_000_000, 999_999_999),
            Duration::new(u64::MAX / 1_000_000 + 1, 0),
            Duration::MAX,
        ];
        for t in instants.map(Instant::from_micros) {
            for d in durations {
                assert_eq!(t + d, reference(t, d), "{t:?} + {d:?}");
            }
        }
    }

    #[test]
    fn arithmetic_saturates() {
        let t = Instant::from_micros(10);
        assert_eq!((t - Duration::from_micros(20)).as_micros(), 0);
        assert_eq!(t.saturating_since(Instant::from_micros(50)), Duration::ZERO);
        assert_eq!(
            (t + Duration::from_millis(1)).saturating_since(t),
            Duration::from_millis(1)
        );
        assert_eq!((t + Duration::from_nanos(1)).as_micros(), 11);
    }
}
