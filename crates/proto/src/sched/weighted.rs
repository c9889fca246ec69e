//! `weighted`: the baseline striping scheduler — smooth weighted round-robin over the
//! usable paths that have window, weights proportional to the measured bottleneck
//! bandwidth. Kept as the reference the earliest-arrival scheduler is compared against.

use super::{one, preferred, Scheduler, Selection, MAX_PATHS};
use crate::path::PathView;
use crate::Instant;

/// Smooth weighted round-robin (nginx's algorithm) by bandwidth.
#[derive(Debug, Clone)]
pub struct Weighted {
    credit: [f64; 256],
}

impl Default for Weighted {
    fn default() -> Self {
        Self::new()
    }
}

impl Weighted {
    /// A fresh scheduler.
    pub fn new() -> Self {
        Weighted { credit: [0.0; 256] }
    }
}

/// Bandwidth used as weight; paths not yet measured get a nominal 1 Mbit/s so they are
/// tried and measured.
fn weight(p: &PathView) -> f64 {
    if p.bandwidth_bps > 0.0 {
        p.bandwidth_bps
    } else {
        125_000.0
    }
}

impl Scheduler for Weighted {
    fn name(&self) -> &'static str {
        "weighted"
    }

    fn select(&mut self, _now: Instant, paths: &[PathView], len: usize) -> Selection {
        let cands: arrayvec::ArrayVec<&PathView, MAX_PATHS> = preferred(paths).collect();
        if cands.is_empty() {
            return Selection::AllPaths;
        }
        let open: arrayvec::ArrayVec<&PathView, MAX_PATHS> = cands
            .iter()
            .copied()
            .filter(|p| p.has_window(len))
            .collect();
        if open.is_empty() {
            return Selection::Wait;
        }
        let total: f64 = open.iter().map(|p| weight(p)).sum();
        for p in &open {
            self.credit[p.id.0 as usize] += weight(p);
        }
        let chosen = open
            .iter()
            .max_by(|a, b| {
                self.credit[a.id.0 as usize]
                    .total_cmp(&self.credit[b.id.0 as usize])
                    .then(b.id.cmp(&a.id))
            })
            .map(|p| p.id)
            .unwrap_or(open[0].id);
        self.credit[chosen.0 as usize] -= total;
        one(chosen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::PathState;
    use crate::sched::testutil::view;

    #[test]
    fn splits_by_bandwidth() {
        let mut w = Weighted::new();
        let paths = [
            view(0, PathState::Up, 10, 30.0),
            view(1, PathState::Up, 10, 10.0),
        ];
        let mut n = [0usize; 2];
        for _ in 0..400 {
            if let Selection::Paths(p) = w.select(Instant::ZERO, &paths, 1000) {
                n[p[0].0 as usize] += 1;
            }
        }
        assert_eq!(n, [300, 100]);
    }

    #[test]
    fn waits_without_window() {
        let mut w = Weighted::new();
        let mut p = view(0, PathState::Up, 10, 30.0);
        p.inflight_bytes = p.cwnd_bytes;
        assert_eq!(w.select(Instant::ZERO, &[p], 1000), Selection::Wait);
    }
}
