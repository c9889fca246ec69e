//! Relative one-way delay of each path, as seen by the receiver — what the reorder buffer
//! must wait for.
//!
//! Every datagram carries the sender's clock (`send_time_us`, low 32 bits). Arrival time
//! minus send time is the one-way delay plus an unknown clock offset; the offset is the
//! same for every path of a session, so the *difference* between paths is exact. That
//! difference, including the queueing each path has right now, is how long a packet sent
//! at the same moment lags on the slower path — the hold time a reorder buffer needs
//! (instead of a fixed constant or an RTT, which also counts the reverse direction).
//!
//! Invariant: values are unwrapped against one session-wide base, so comparing paths is
//! valid across the 32-bit wrap (about 71 minutes).

use crate::path::PathId;
use crate::Instant;
use core::time::Duration;

const PATHS: usize = crate::sched::MAX_PATHS;

#[derive(Debug, Clone, Copy)]
struct Stat {
    mean_us: f64,
    dev_us: f64,
    /// Recent peak: follows a rise at once, decays by `PEAK_DECAY` per second.
    peak_us: f64,
    /// Recent floor: follows a fall at once, rises by `PEAK_DECAY` per second.
    floor_us: f64,
    last: Instant,
}

/// How fast a delay peak is forgotten (µs per second): a 20 ms queue spike still counts
/// for half of it 200 ms later, and is gone after 400 ms.
const PEAK_DECAY: f64 = 50_000.0;

/// Per-path smoothed relative one-way delay.
#[derive(Debug, Clone, Default)]
pub struct DelayTracker {
    base: Option<u32>,
    paths: [Option<Stat>; PATHS],
}

impl DelayTracker {
    /// Records a datagram on `path` sent at `send_time_us` (sender clock) arriving `now`.
    pub fn on_datagram(&mut self, now: Instant, path: PathId, send_time_us: u32) {
        let Some(slot) = self.paths.get_mut(usize::from(path.0)) else {
            return;
        };
        let raw = (now.as_micros() as u32).wrapping_sub(send_time_us);
        let base = *self.base.get_or_insert(raw);
        let v = f64::from(raw.wrapping_sub(base) as i32);
        *slot = Some(match *slot {
            None => Stat {
                mean_us: v,
                dev_us: 0.0,
                peak_us: v,
                floor_us: v,
                last: now,
            },
            Some(s) => {
                let dt = now.saturating_since(s.last).as_secs_f64();
                Stat {
                    mean_us: s.mean_us + (v - s.mean_us) / 8.0,
                    dev_us: s.dev_us + ((v - s.mean_us).abs() - s.dev_us) / 4.0,
                    peak_us: v.max(s.peak_us - dt * PEAK_DECAY),
                    floor_us: v.min(s.floor_us + dt * PEAK_DECAY),
                    last: now,
                }
            }
        });
    }

    /// How long the slowest recently active path lags the fastest: from the lowest recent
    /// floor to the highest of `max(mean + 2·dev, recent peak)` over paths heard from
    /// within `recent` of `now`. Extremes, not means: a gap lasts from the moment a packet
    /// on the fast path arrived (perhaps when its queue had just drained) until the
    /// missing one arrives on the slow path (perhaps when its queue peaks); a hold that
    /// gives up earlier turns the gap into a loss for the inner TCP. Real losses do not
    /// wait for the hold: the session skips holes known lost (`holes.rs`).
    pub fn spread(&self, now: Instant, recent: Duration) -> Duration {
        let active = self
            .paths
            .iter()
            .flatten()
            .filter(|s| now.saturating_since(s.last) <= recent);
        let (mut lo, mut hi) = (f64::MAX, f64::MIN);
        for s in active {
            let dt = now.saturating_since(s.last).as_secs_f64();
            lo = lo.min((s.floor_us + dt * PEAK_DECAY).min(s.mean_us));
            hi = hi
                .max(s.mean_us + 2.0 * s.dev_us)
                .max(s.peak_us - dt * PEAK_DECAY);
        }
        if hi < lo {
            return Duration::ZERO;
        }
        Duration::from_micros((hi - lo).max(0.0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_the_one_way_lag_whatever_the_clock_offset() {
        let mut d = DelayTracker::default();
        // Sender clock is 4_000_000_000 µs ahead (wraps u32); path 0 takes 10 ms, path 1 40 ms.
        let offset: u64 = 4_000_000_000;
        for i in 0..100u64 {
            let sent = i * 1000;
            let s = (sent + offset) as u32;
            d.on_datagram(Instant::from_micros(sent + 10_000), PathId(0), s);
            d.on_datagram(Instant::from_micros(sent + 40_000), PathId(1), s);
        }
        let spread = d.spread(Instant::from_micros(140_000), Duration::from_secs(1));
        assert!(
            (29_000..=31_000).contains(&(spread.as_micros() as u64)),
            "{spread:?}"
        );
    }

    #[test]
    fn idle_paths_do_not_count() {
        let mut d = DelayTracker::default();
        d.on_datagram(Instant::from_micros(0), PathId(1), 0);
        d.on_datagram(Instant::from_micros(5_000_000), PathId(0), 4_990_000);
        assert_eq!(
            d.spread(Instant::from_micros(5_000_000), Duration::from_secs(1)),
            Duration::ZERO
        );
    }
}
