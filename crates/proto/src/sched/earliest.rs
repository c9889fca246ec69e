//! `earliest`: send each packet on the path where it is expected to *arrive* first,
//! given what is already in flight there and the path's rate — the out-of-order striping
//! of seed 003 §3.5 (ECF / OSIA in the literature). Because arrival order follows send
//! order across paths, the receiver sees packets nearly in order.
//!
//! Expected arrival on path p for a packet of `len` bytes:
//! `(queued_p + len) / bandwidth_p + min_rtt_p / 2`, where `queued_p` is what is in
//! flight beyond one bandwidth-delay product (bytes within the BDP are on the wire or
//! their feedback is on its way back, and do not delay a new packet). Only paths with window are
//! candidates (the backpressure of seed 003: a path takes data only while its pending
//! data is below its limit); with none, the packet waits.

use super::{one, preferred, Scheduler, Selection};
use crate::path::PathView;
use crate::Instant;

/// The earliest-arrival scheduler.
#[derive(Debug, Clone, Default)]
pub struct EarliestArrival;

impl EarliestArrival {
    /// A new scheduler (stateless).
    pub fn new() -> Self {
        EarliestArrival
    }
}

/// Expected one-way arrival delay in seconds of `len` more bytes on `p`.
pub fn expected_arrival(p: &PathView, len: usize) -> f64 {
    let rate = if p.bandwidth_bps > 0.0 {
        p.bandwidth_bps
    } else {
        // Unmeasured: assume the window drains in one RTT.
        p.cwnd_bytes as f64 / p.srtt.as_secs_f64().max(1e-3)
    };
    let bdp = rate * p.min_rtt.as_secs_f64();
    let queued = (p.inflight_bytes as f64 - bdp).max(0.0);
    (queued + len as f64) / rate + p.min_rtt.as_secs_f64() / 2.0
}

impl Scheduler for EarliestArrival {
    fn name(&self) -> &'static str {
        "earliest"
    }

    fn select(&mut self, _now: Instant, paths: &[PathView], len: usize) -> Selection {
        let mut any = false;
        let best = preferred(paths)
            .inspect(|_| any = true)
            .filter(|p| p.has_window(len))
            .min_by(|a, b| {
                expected_arrival(a, len)
                    .total_cmp(&expected_arrival(b, len))
                    .then(a.id.cmp(&b.id))
            });
        match best {
            Some(p) => one(p.id),
            None if any => Selection::Wait,
            None => Selection::AllPaths,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::PathState;
    use crate::sched::testutil::view;

    #[test]
    fn prefers_short_queue_then_fast_path() {
        let mut s = EarliestArrival::new();
        let mut fast = view(0, PathState::Up, 20, 50.0);
        let slow = view(1, PathState::Up, 80, 20.0);
        assert_eq!(s.select(Instant::ZERO, &[fast, slow], 1500), one(fast.id));
        // Fast: 50 Mbit/s, 20 ms RTT → BDP 125 kB. 325 kB in flight = 200 kB queued = 32 ms;
        // the idle slow path delivers at 40 ms one-way; fast at 10 + 32 = 42 ms → slow wins.
        fast.inflight_bytes = 325_000;
        assert_eq!(s.select(Instant::ZERO, &[fast, slow], 1500), one(slow.id));
    }
}
