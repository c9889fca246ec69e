//! Which reorder-buffer holes are known to be lost, so the buffer gives up on them at once
//! instead of after its hold time.
//!
//! Data sequence numbers are taken in send order and every path delivers in order (our
//! links are FIFO: linkem reorders only when asked, real links rarely). So once every
//! path that is carrying data has delivered a packet numbered above a hole, the hole's
//! packet — whichever path it took — was lost: waiting longer only delays the inner TCP's
//! loss recovery. Every live path counts with the highest number it has delivered, however
//! old: a path that has been idle keeps the bound low (its next packet may be the hole,
//! sent long after the numbers above it — the hold time covers that case), and a live path
//! that never carried data disables the inference. Dead paths are left out: they deliver
//! nothing more.
//!
//! Invariant: the bound only grows while the set of active paths stays the same.

use crate::path::PathId;
use crate::sched::MAX_PATHS;

#[derive(Debug, Clone, Copy)]
struct Seen {
    highest: Option<u64>,
}

/// Highest data sequence number seen per path.
#[derive(Debug, Clone, Default)]
pub struct HoleTracker {
    paths: [Option<Seen>; MAX_PATHS],
}

impl HoleTracker {
    /// An authenticated datagram arrived on `path`, carrying DATA `seq` if any.
    pub fn on_datagram(&mut self, path: PathId, seq: Option<u64>) {
        let Some(slot) = self.paths.get_mut(usize::from(path.0)) else {
            return;
        };
        let s = slot.get_or_insert(Seen { highest: None });
        if let Some(q) = seq {
            s.highest = Some(s.highest.map_or(q, |h| h.max(q)));
        }
    }

    /// Every hole below the returned number is lost: the lowest "highest delivered" over
    /// the paths `alive` says are live — none if one of them never carried data.
    pub fn lost_below(&self, alive: impl Fn(PathId) -> bool) -> Option<u64> {
        let mut bound: Option<u64> = None;
        for (i, s) in self.paths.iter().enumerate() {
            let Some(s) = s else { continue };
            if !alive(PathId(i as u8)) {
                continue;
            }
            let h = s.highest?;
            bound = Some(bound.map_or(h, |b| b.min(h)));
        }
        bound
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bound_is_the_slowest_live_path() {
        let mut h = HoleTracker::default();
        h.on_datagram(PathId(0), Some(10));
        h.on_datagram(PathId(1), Some(7));
        h.on_datagram(PathId(0), Some(12));
        assert_eq!(h.lost_below(|_| true), Some(7));
        // Path 1 is dead: only path 0 counts.
        assert_eq!(h.lost_below(|p| p != PathId(1)), Some(12));
        // A live path that never carried data (keepalives only): no inference.
        h.on_datagram(PathId(2), None);
        assert_eq!(h.lost_below(|_| true), None);
    }
}
