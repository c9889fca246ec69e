//! Schedulers: which path(s) carry the next packet of a flow.
//!
//! A scheduler sees only a narrow, copyable view of each path (`PathView`), never the
//! session, so it can be swapped, unit-tested and simulated on its own. Invariant: a
//! selection only names paths present in the view; `Wait` is returned only by schedulers
//! that respect windows (aggregate), meaning "keep the packet queued until feedback opens a
//! window"; `AllPaths` is the last resort when no path is believed usable.

mod best;
mod earliest;
pub mod link;
pub mod realtime;
mod redundant;
pub mod split;
mod weighted;

pub use best::BestPath;
pub use earliest::{expected_delivery, EarliestArrival};
pub use link::LinkScheduler;
pub use redundant::Redundant;
pub use redundant::{SMALL_PACKET, TARGET_RESIDUAL};
pub use weighted::Weighted;

use crate::path::{PathId, PathState, PathView};
use crate::Instant;
use arrayvec::ArrayVec;

/// Most paths a session can have.
pub const MAX_PATHS: usize = 16;

/// A set of paths.
pub type PathSet = ArrayVec<PathId, MAX_PATHS>;

/// A scheduler's answer for one packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// Send one copy on each of these paths.
    Paths(PathSet),
    /// Every path is out of window or paced: keep the packet queued.
    Wait,
    /// No path is believed usable: send on every path (one may work; none is known to).
    AllPaths,
}

/// Chooses paths for packets of one flow class.
pub trait Scheduler: Send {
    /// Short name for status and benchmarks.
    fn name(&self) -> &'static str;
    /// Picks the path(s) for a packet of `len` bytes.
    fn select(&mut self, now: Instant, paths: &[PathView], len: usize) -> Selection;
}

/// Paths usable for data, best tier first: `Up` paths; else `Up` ones on standby; else
/// `Suspect` ones; else `Suspect` ones on standby. Never a `Down` path.
pub fn preferred(paths: &[PathView]) -> impl Iterator<Item = &PathView> {
    let best = paths.iter().filter_map(tier).min();
    paths
        .iter()
        .filter(move |p| best.is_some() && tier(p) == best)
}

/// A path's rank for `preferred` (lower is better; `None`: not usable).
fn tier(p: &PathView) -> Option<u8> {
    let state = match p.state {
        PathState::Up => 0,
        PathState::Suspect => 2,
        PathState::Down => return None,
    };
    Some(state + u8::from(p.standby))
}

/// A single-path selection.
pub fn one(id: PathId) -> Selection {
    let mut s = PathSet::new();
    s.push(id);
    Selection::Paths(s)
}

#[cfg(test)]
pub(crate) mod testutil {
    use super::*;
    use core::time::Duration;

    /// A path view with the given id, state, RTT (ms) and bandwidth (Mbit/s).
    pub fn view(id: u8, state: PathState, rtt_ms: u64, mbit: f64) -> PathView {
        PathView {
            id: PathId(id),
            state,
            srtt: Duration::from_millis(rtt_ms),
            min_rtt: Duration::from_millis(rtt_ms),
            measured: true,
            bandwidth_bps: mbit * 1e6 / 8.0,
            inflight_bytes: 0,
            cwnd_bytes: 1 << 20,
            loss: 0.0,
            error_loss: 0.0,
            up_since: Some(Instant::ZERO),
            pacing_bps: mbit * 1e6 / 8.0,
            ready_at: Instant::ZERO,
            bw_valid: true,
            capacity_bps: 0.0,
            bw_age: Duration::ZERO,
            fwd_queue: Duration::ZERO,
            cost: 1,
            standby: false,
        }
    }
}
