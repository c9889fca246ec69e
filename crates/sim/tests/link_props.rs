//! Property tests of the link model the simulator's hops run (linkem's sans-IO pipeline):
//! a link never delivers faster than its rate — constant or trace-driven — and
//! Gilbert-Elliott loss converges to its stationary loss rate.

use linkem::loss::{GilbertElliott, LossSpec};
use linkem::rate::RateModel;
use linkem::{DirectionParams, Pipeline, Trace};
use proptest::prelude::*;
use std::sync::Arc;
use std::time::Duration;

/// Drives a pipeline with frames (arrival gap µs, size) and returns (release time, size)
/// of every delivered frame, in order.
fn drive(params: DirectionParams, frames: &[(u64, u64)], seed: u64) -> Vec<(Duration, u64)> {
    let mut p: Pipeline<u64> = Pipeline::new(params, seed, 0);
    let mut out = Vec::new();
    let mut t = Duration::ZERO;
    let mut pending = frames.iter();
    let mut next = pending.next();
    loop {
        let arrival = next.map(|&(gap, _)| t + Duration::from_micros(gap));
        let wake = p.next_wakeup();
        let step = match (arrival, wake) {
            (Some(a), Some(w)) => a.min(w),
            (Some(a), None) => a,
            (None, Some(w)) => w,
            (None, None) => break,
        };
        t = step;
        while let Some(size) = p.poll_dequeue(t) {
            out.push((t, size));
        }
        if arrival == Some(t) {
            let &(_, size) = next.expect("arrival implies a frame");
            p.enqueue(t, size, size);
            next = pending.next();
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Consecutive deliveries are at least one serialisation time apart.
    #[test]
    fn constant_rate_is_never_exceeded(
        kbit in 100u64..100_000,
        frames in proptest::collection::vec((0u64..3000, 40u64..1500), 1..300),
        delay_ms in 0u64..50,
    ) {
        let mut params = DirectionParams {
            rate: RateModel::Constant(format!("{kbit}kbit").parse().unwrap()),
            ..Default::default()
        };
        params.delay.delay = Duration::from_millis(delay_ms);
        params.queue.packets = None;
        let out = drive(params, &frames, 1);
        prop_assert_eq!(out.len(), frames.len());
        for w in out.windows(2) {
            let need = Duration::from_nanos((w[1].1 * 8 * 1_000_000_000).div_ceil(kbit * 1000));
            prop_assert!(w[1].0 - w[0].0 >= need, "{:?} then {:?} at {} kbit", w[0], w[1], kbit);
        }
    }

    /// By any time t, a trace link has delivered at most 1500 bytes per opportunity up to t.
    #[test]
    fn trace_rate_is_never_exceeded(
        ms in proptest::collection::vec(0u64..40, 1..60),
        frames in proptest::collection::vec((0u64..2000, 40u64..1500), 1..200),
    ) {
        let mut stamps: Vec<u64> = ms.iter().scan(0, |acc, d| { *acc += d; Some(*acc) }).collect();
        let last = *stamps.last().unwrap();
        if last == 0 { stamps.push(1); }
        let trace = Arc::new(Trace::from_millis(stamps).unwrap());
        let mut params = DirectionParams { rate: RateModel::Trace(trace.clone()), ..Default::default() };
        params.queue.packets = None;
        let out = drive(params, &frames, 2);
        let mut delivered = 0u64;
        for (t, size) in out {
            delivered += size;
            let opportunities = trace.first_after(t);
            prop_assert!(delivered <= opportunities * 1500,
                "{delivered} bytes by {t:?} with {opportunities} opportunities");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Gilbert-Elliott loss (loss 1 in Bad, 0 in Good) tends to p / (p + r).
    #[test]
    fn gilbert_elliott_long_run_loss(p in 0.001f64..0.2, r in 0.05f64..0.9) {
        const N: u64 = 100_000;
        let ge = GilbertElliott { p, r, loss_bad: 1.0, loss_good: 0.0 };
        let mut params = DirectionParams { loss: Some(LossSpec::GilbertElliott(ge)), ..Default::default() };
        params.queue.packets = None;
        let mut pipe: Pipeline<u64> = Pipeline::new(params, 3, 0);
        let mut lost = 0u64;
        for i in 0..N {
            let v = pipe.enqueue(Duration::from_micros(i), i, 100);
            lost += u64::from(v == linkem::Verdict::DroppedLoss);
        }
        let pi = p / (p + r);
        // Standard error of a two-state Markov chain's mean: (1 + λ)/(1 − λ) inflation, λ = 1 − p − r.
        let lambda = 1.0 - p - r;
        let sigma = (pi * (1.0 - pi) / N as f64 * (1.0 + lambda) / (1.0 - lambda)).sqrt();
        let got = lost as f64 / N as f64;
        prop_assert!((got - pi).abs() <= 5.0 * sigma + 1e-4, "p {p} r {r}: {got} vs {pi} (σ {sigma})");
    }
}
