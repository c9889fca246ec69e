//! Receiver side of packet-pair probing (the R-MTP thesis): two datagrams that left the sender
//! back to back (consecutive `path_seq`, same send timestamp) arrive spaced by the time
//! the bottleneck took to serialize the second one, so `len / spacing` is the bottleneck
//! capacity. The spacing is smoothed as R-MTP's period:
//!
//! `P(n+1) = (1 − α)·P(n) + α·(1 + β·rnd)·MeasuredPeriod`, α = 1/8, β = 0.1,
//!
//! where the period is normalised to a 1500-byte datagram and `rnd` is uniform in
//! [−1, 1] — the randomisation the seed adds so that flows sharing a bottleneck do not
//! synchronise. The generator is a seeded xorshift (sans-IO: no global RNG), so runs stay
//! deterministic.
//!
//! Invariants: a pair whose arrivals share a timestamp (a driver that stamps a whole
//! receive batch with one time) is ignored rather than read as infinite capacity; the
//! reported capacity is finite and positive.

use crate::Instant;

const ALPHA: f64 = 1.0 / 8.0;
const BETA: f64 = 0.1;
const REF_LEN: f64 = 1500.0;
/// Datagrams smaller than this make poor pairs (the spacing is mostly noise).
const MIN_PAIR_LEN: usize = 500;

#[derive(Debug, Clone, Copy)]
struct Last {
    seq: u32,
    send_us: u32,
    at: Instant,
}

/// Smoothed packet-pair period of one path.
#[derive(Debug, Clone)]
pub struct PairMeter {
    last: Option<Last>,
    period_s: Option<f64>,
    rng: u64,
    updated: bool,
}

impl PairMeter {
    /// A meter whose randomisation is seeded by `seed` (any value).
    pub fn new(seed: u64) -> Self {
        PairMeter {
            last: None,
            period_s: None,
            rng: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            updated: false,
        }
    }

    fn rnd(&mut self) -> f64 {
        // xorshift64*: uniform in [-1, 1).
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let x = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
        (x as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }

    /// Records a datagram of `len` bytes with `seq` and sender timestamp `send_us`.
    pub fn on_datagram(&mut self, now: Instant, seq: u32, send_us: u32, len: usize) {
        if let Some(l) = self.last {
            let back_to_back = seq == l.seq.wrapping_add(1) && send_us == l.send_us;
            let spacing = now.saturating_since(l.at).as_secs_f64();
            if back_to_back && spacing > 0.0 && len >= MIN_PAIR_LEN {
                let measured = spacing * REF_LEN / len as f64;
                let noisy = measured * (1.0 + BETA * self.rnd());
                self.period_s = Some(match self.period_s {
                    None => measured,
                    Some(p) => (1.0 - ALPHA) * p + ALPHA * noisy,
                });
                self.updated = true;
            }
        }
        self.last = Some(Last {
            seq,
            send_us,
            at: now,
        });
    }

    /// Capacity in bytes/s, if any pair was measured.
    pub fn capacity(&self) -> Option<f64> {
        self.period_s
            .filter(|p| *p > 0.0)
            .map(|p| REF_LEN / p)
            .filter(|c| c.is_finite())
    }

    /// The capacity if it changed since the last call (what to report to the peer).
    pub fn take_report(&mut self) -> Option<f64> {
        if !std::mem::take(&mut self.updated) {
            return None;
        }
        self.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_bottleneck_capacity_within_the_randomisation() {
        // 10 Mbit/s bottleneck: a 1500-byte datagram takes 1.2 ms; pairs sent every 20 ms.
        let mut m = PairMeter::new(7);
        let mut seq = 0u32;
        for i in 0..200u64 {
            let send = (i * 20_000) as u32;
            let arrive = i * 20_000 + 10_000;
            m.on_datagram(Instant::from_micros(arrive), seq, send, 1500);
            m.on_datagram(Instant::from_micros(arrive + 1200), seq + 1, send, 1500);
            seq += 2;
        }
        let c = m.capacity().unwrap();
        assert!((1.25e6 * 0.95..1.25e6 * 1.05).contains(&c), "{c}");
        assert!(m.take_report().is_some());
        assert!(m.take_report().is_none());
    }

    #[test]
    fn batch_timestamps_and_spaced_datagrams_are_not_pairs() {
        let mut m = PairMeter::new(1);
        let t = Instant::from_micros(5_000);
        m.on_datagram(t, 0, 100, 1500);
        m.on_datagram(t, 1, 100, 1500); // same arrival stamp
        m.on_datagram(t + core::time::Duration::from_millis(1), 2, 900, 1500); // not sent together
        assert_eq!(m.capacity(), None);
    }
}
