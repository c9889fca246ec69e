//! Seeded synthetic Mahimahi traces, so demos and tests need no outside data.
//!
//! Each kind first draws a per-millisecond rate series, scales it so its mean is exactly the
//! requested mean, then turns it into delivery opportunities with a byte-credit integrator
//! (one timestamp each time 1500 bytes of credit accumulate). Kinds:
//! - `dsl`: constant rate, evenly spaced opportunities.
//! - `wifi`: slow ±15 % variation (AR(1), ~200 ms memory) with fades: about one every 8 s,
//!   lasting 0.2–1.5 s, down to 5–30 % of the rate, with 50 ms ramps.
//! - `lte`: log-normal variation (mean-reverting, ~1 s memory, σ ≈ 0.45 in log space) updated
//!   every 10 ms, and short outages (rate 0) of 50–400 ms, about one every 15 s.
//!
//! Invariants: same (kind, mean, seconds, seed) → byte-identical trace; the result is a valid
//! [`Trace`] whose period is exactly `seconds` and whose mean rate is the requested mean up to
//! the rounding of one opportunity.

use crate::trace::{Trace, OPPORTUNITY_BYTES};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};
use std::str::FromStr;

/// Errors from generating a trace.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TraceGenError {
    /// The kind is not one of dsl, wifi, lte.
    #[error("unknown trace kind {0:?} (expected dsl, wifi or lte)")]
    UnknownKind(String),
    /// Mean rate must be positive and finite, duration at least 1 s.
    #[error("mean rate must be > 0 Mbit/s and duration ≥ 1 s")]
    BadParameters,
    /// So few bytes that not one 1500-byte opportunity fits.
    #[error("mean rate × duration is below one 1500-byte opportunity")]
    TooSmall,
}

/// Which synthetic link to imitate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceKind {
    /// Constant, DSL-like.
    Dsl,
    /// Wi-Fi-like with fades.
    Wifi,
    /// LTE-like with variation and short outages.
    Lte,
}

impl FromStr for TraceKind {
    type Err = TraceGenError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "dsl" => Ok(TraceKind::Dsl),
            "wifi" => Ok(TraceKind::Wifi),
            "lte" => Ok(TraceKind::Lte),
            _ => Err(TraceGenError::UnknownKind(s.to_owned())),
        }
    }
}

/// Generates a looping trace of `seconds` with mean `mean_mbit` Mbit/s.
pub fn generate(
    kind: TraceKind,
    mean_mbit: f64,
    seconds: u32,
    seed: u64,
) -> Result<Trace, TraceGenError> {
    if !(mean_mbit.is_finite() && mean_mbit > 0.0) || seconds == 0 {
        return Err(TraceGenError::BadParameters);
    }
    let total_ms = seconds as usize * 1000;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut shape = match kind {
        TraceKind::Dsl => vec![1.0; total_ms],
        TraceKind::Wifi => wifi_shape(total_ms, &mut rng),
        TraceKind::Lte => lte_shape(total_ms, &mut rng),
    };
    let mean_shape = shape.iter().sum::<f64>() / total_ms as f64;
    let bytes_per_ms = mean_mbit * 1e6 / 8.0 / 1000.0;
    for s in &mut shape {
        *s *= bytes_per_ms / mean_shape;
    }
    integrate(&shape)
}

/// Byte-credit integrator: slot `i` covers (i, i+1] ms and emits timestamp i+1.
fn integrate(bytes_per_ms: &[f64]) -> Result<Trace, TraceGenError> {
    let total = bytes_per_ms.iter().sum::<f64>();
    // Rounded so that the count, and hence the mean rate over the exact period, is as close
    // to the request as whole opportunities allow.
    let want = (total / OPPORTUNITY_BYTES as f64).round() as usize;
    if want == 0 {
        return Err(TraceGenError::TooSmall);
    }
    let opp = OPPORTUNITY_BYTES as f64;
    let mut ms = Vec::with_capacity(want);
    // Start half an opportunity in credit so emission is centred rather than always late.
    let mut credit = opp / 2.0;
    for (i, b) in bytes_per_ms.iter().enumerate() {
        credit += b;
        while credit >= opp && ms.len() < want {
            ms.push(i as u64 + 1);
            credit -= opp;
        }
    }
    while ms.len() < want {
        ms.push(bytes_per_ms.len() as u64);
    }
    // Pin the period to the requested duration (the trace loops on its last timestamp).
    *ms.last_mut().expect("want > 0") = bytes_per_ms.len() as u64;
    Ok(Trace::from_millis(ms).expect("integrator emits sorted timestamps ending after 0"))
}

fn wifi_shape(total_ms: usize, rng: &mut ChaCha8Rng) -> Vec<f64> {
    let noise = Normal::new(0.0, 0.15 * (1.0 - 0.995f64.powi(2)).sqrt()).expect("finite σ");
    let mut x = 0.0f64;
    let mut shape: Vec<f64> = (0..total_ms)
        .map(|_| {
            // AR(1) with coefficient 0.995 per ms: ~200 ms memory, stationary σ 0.15.
            x = 0.995 * x + noise.sample(rng);
            (1.0 + x).max(0.05)
        })
        .collect();
    let mut t = 0usize;
    loop {
        t += (rng.gen::<f64>().max(1e-9).ln() * -8000.0) as usize;
        if t >= total_ms {
            break;
        }
        let len = rng.gen_range(200..1500usize);
        let depth = rng.gen_range(0.05..0.3);
        let ramp = 50usize;
        for (j, s) in shape.iter_mut().skip(t).take(len).enumerate() {
            // Linear ramp into and out of the fade, like a walk behind an obstacle.
            let edge = j.min(len - 1 - j).min(ramp) as f64 / ramp as f64;
            *s *= 1.0 - (1.0 - depth) * edge;
        }
        t += len;
    }
    shape
}

fn lte_shape(total_ms: usize, rng: &mut ChaCha8Rng) -> Vec<f64> {
    // Ornstein-Uhlenbeck on log-rate, stepped every 10 ms with a 1 s time constant.
    let a: f64 = (-0.01f64).exp();
    let sigma = 0.45;
    let noise = Normal::new(0.0, sigma * (1.0 - a * a).sqrt()).expect("finite σ");
    let mut y = 0.0f64;
    let mut shape = Vec::with_capacity(total_ms);
    for i in 0..total_ms {
        if i % 10 == 0 {
            y = a * y + noise.sample(rng);
        }
        shape.push(y.exp());
    }
    let mut t = 0usize;
    loop {
        t += (rng.gen::<f64>().max(1e-9).ln() * -15000.0) as usize;
        if t >= total_ms {
            break;
        }
        let len = rng.gen_range(50..400usize);
        for s in shape.iter_mut().skip(t).take(len) {
            *s = 0.0;
        }
        t += len;
    }
    shape
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mean rate, in Mbit/s, of each `window_ms` slice of one period.
    fn windowed_mbit(t: &Trace, window_ms: u64) -> Vec<f64> {
        let period = t.period().as_millis() as u64;
        let mut counts = vec![0u64; period.div_ceil(window_ms) as usize];
        for &m in t.millis() {
            let w = (m.saturating_sub(1) / window_ms) as usize;
            let last = counts.len() - 1;
            counts[w.min(last)] += 1;
        }
        counts
            .iter()
            .map(|&c| c as f64 * 1500.0 * 8.0 / (window_ms as f64 / 1000.0) / 1e6)
            .collect()
    }

    #[test]
    fn every_kind_hits_the_mean_and_period() {
        for kind in [TraceKind::Dsl, TraceKind::Wifi, TraceKind::Lte] {
            for mean in [2.0, 20.0, 100.0] {
                let t = generate(kind, mean, 60, 1).unwrap();
                assert_eq!(t.period().as_secs(), 60);
                let got = t.mean_bits_per_sec() / 1e6;
                assert!((got - mean).abs() / mean < 0.001, "{kind:?} {mean}: {got}");
            }
        }
    }

    #[test]
    fn deterministic_per_seed() {
        let a = generate(TraceKind::Lte, 20.0, 30, 9).unwrap();
        assert_eq!(a, generate(TraceKind::Lte, 20.0, 30, 9).unwrap());
        assert_ne!(a, generate(TraceKind::Lte, 20.0, 30, 10).unwrap());
    }

    #[test]
    fn dsl_is_flat() {
        let w = windowed_mbit(&generate(TraceKind::Dsl, 20.0, 10, 1).unwrap(), 100);
        assert!(w.iter().all(|r| (r - 20.0).abs() < 1.0), "{w:?}");
    }

    #[test]
    fn wifi_has_fades_and_lte_has_outages() {
        let wifi = windowed_mbit(&generate(TraceKind::Wifi, 20.0, 120, 2).unwrap(), 100);
        let faded = wifi.iter().filter(|&&r| r < 0.4 * 20.0).count();
        assert!(faded >= 3, "wifi fades: {faded} windows below 40 %");
        let lte = windowed_mbit(&generate(TraceKind::Lte, 20.0, 120, 2).unwrap(), 50);
        let dead = lte.iter().filter(|&&r| r == 0.0).count();
        assert!(dead >= 2, "lte outages: {dead} dead 50 ms windows");
        let hi = lte.iter().filter(|&&r| r > 1.5 * 20.0).count();
        assert!(hi >= 10, "lte variation: {hi} windows above 150 %");
    }

    #[test]
    fn rejects_nonsense() {
        assert_eq!(
            generate(TraceKind::Dsl, 0.0, 10, 1),
            Err(TraceGenError::BadParameters)
        );
        assert_eq!(
            generate(TraceKind::Dsl, 1.0, 0, 1),
            Err(TraceGenError::BadParameters)
        );
        assert_eq!(
            generate(TraceKind::Dsl, 0.0001, 1, 1),
            Err(TraceGenError::TooSmall)
        );
        assert!("umts".parse::<TraceKind>().is_err());
    }
}
