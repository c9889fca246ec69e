//! `redundant`: every packet on k paths at once; the receiver keeps the first copy
//! (SMesh). The k lowest-RTT usable paths are used, so the copy most likely to
//! arrive first always goes out; with fewer usable paths than k, all usable ones.
//!
//! Adaptive extra copies: if the measured loss of the chosen paths leaves a residual loss
//! (the product of their loss rates, copies assumed independent) above `TARGET_RESIDUAL`,
//! more copies are added round-robin over the same paths, up to `MAX_COPIES`. Two links
//! losing 20 % each give 4 % residual with one copy per link; four copies give 0.16 %.

use super::{preferred, PathSet, Scheduler, Selection};
use crate::path::{PathState, PathView};
use crate::Instant;

/// Residual loss the adaptive copies aim for.
pub const TARGET_RESIDUAL: f64 = 0.002;
/// Most copies of one packet.
pub const MAX_COPIES: usize = 4;

/// The `redundant` scheduler.
#[derive(Debug, Clone)]
pub struct Redundant {
    copies: usize,
}

impl Redundant {
    /// Sends `copies` copies (`None` = on every path).
    pub fn new(copies: Option<usize>) -> Self {
        Redundant {
            copies: copies.unwrap_or(usize::MAX).max(1),
        }
    }
}

impl Scheduler for Redundant {
    fn name(&self) -> &'static str {
        "redundant"
    }

    fn select(&mut self, _now: Instant, paths: &[PathView], _len: usize) -> Selection {
        // Suspect paths count too: redundancy exists exactly for when a path is in doubt.
        let mut usable: Vec<&PathView> = paths
            .iter()
            .filter(|p| p.state != PathState::Down)
            .collect();
        if usable.is_empty() {
            usable = preferred(paths).collect();
        }
        if usable.is_empty() {
            return Selection::AllPaths;
        }
        usable.sort_by_key(|p| (p.state != PathState::Up, p.srtt, p.id));
        let chosen: Vec<&PathView> = usable.iter().take(self.copies).copied().collect();
        let mut set: PathSet = chosen.iter().map(|p| p.id).collect();
        let loss = |p: &PathView| p.loss.clamp(0.0, 1.0);
        let mut residual: f64 = chosen.iter().map(|p| loss(p)).product();
        let mut i = 0;
        while residual > TARGET_RESIDUAL && set.len() < MAX_COPIES.max(chosen.len()) {
            let p = chosen[i % chosen.len()];
            if loss(p) >= 0.9 {
                break; // a path this lossy adds nothing
            }
            set.push(p.id);
            residual *= loss(p);
            i += 1;
        }
        Selection::Paths(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::PathId;
    use crate::sched::testutil::view;

    #[test]
    fn picks_k_best() {
        let mut r = Redundant::new(Some(2));
        let paths = [
            view(0, PathState::Up, 50, 1.0),
            view(1, PathState::Up, 10, 1.0),
            view(2, PathState::Suspect, 5, 1.0),
            view(3, PathState::Down, 1, 1.0),
        ];
        match r.select(Instant::ZERO, &paths, 100) {
            Selection::Paths(p) => assert_eq!(p.as_slice(), &[PathId(1), PathId(0)]),
            o => panic!("{o:?}"),
        }
        let mut lossy = paths;
        lossy[0].loss = 0.2;
        lossy[1].loss = 0.2;
        match Redundant::new(Some(2)).select(Instant::ZERO, &lossy, 100) {
            Selection::Paths(p) => assert_eq!(p.len(), MAX_COPIES, "extra copies under loss"),
            o => panic!("{o:?}"),
        }
        let mut all = Redundant::new(None);
        match all.select(Instant::ZERO, &paths, 100) {
            Selection::Paths(p) => assert_eq!(p.len(), 3),
            o => panic!("{o:?}"),
        }
    }
}
