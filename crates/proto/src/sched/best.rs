//! `best`: one path at a time — the lowest-RTT healthy one — with hysteresis.
//!
//! Paths are ranked by their *minimum* RTT, not the smoothed one: the smoothed RTT of
//! the path in use grows with the queue our own traffic builds on it, and ranking by it
//! would make the choice flap between links as each one fills up in turn.
//!
//! Failover: when the current path goes `Down` (no feedback within the detection time),
//! traffic moves at once to the best remaining path. Failback / improvement: another path
//! replaces a working current one only if it is clearly better (RTT at least 20 % and 2 ms
//! lower) and has been `Up` without interruption for `hold` — so a path that just came
//! back must prove itself first, and two similar paths do not flap.

use super::{one, preferred, Scheduler, Selection};
use crate::path::{PathId, PathState, PathView};
use crate::Instant;
use core::time::Duration;

/// The `best` scheduler.
#[derive(Debug, Clone)]
pub struct BestPath {
    current: Option<PathId>,
    hold: Duration,
}

impl BestPath {
    /// A scheduler that fails back only after a path has been up for `hold`.
    pub fn new(hold: Duration) -> Self {
        BestPath {
            current: None,
            hold,
        }
    }

    /// The path in use.
    pub fn current(&self) -> Option<PathId> {
        self.current
    }
}

fn clearly_better(cand: &PathView, cur: &PathView) -> bool {
    let c = cand.min_rtt.as_micros() as f64;
    let k = cur.min_rtt.as_micros() as f64;
    c < k * 0.8 && k - c > 2000.0
}

impl Scheduler for BestPath {
    fn name(&self) -> &'static str {
        "best"
    }

    fn select(&mut self, now: Instant, paths: &[PathView], _len: usize) -> Selection {
        let best = preferred(paths).min_by_key(|p| (p.min_rtt, p.id));
        let Some(best) = best else {
            return Selection::AllPaths;
        };
        let cur = self
            .current
            .and_then(|id| paths.iter().find(|p| p.id == id))
            .filter(|p| p.state != PathState::Down);
        let chosen = match cur {
            None => best.id,
            Some(c) if c.id == best.id => c.id,
            Some(c) => {
                let proven = best
                    .up_since
                    .is_some_and(|t| now.saturating_since(t) >= self.hold);
                // A path on standby is as good as unhealthy while another is `Up`.
                let c_healthy = c.state == PathState::Up && (!c.standby || best.standby);
                if (proven && clearly_better(best, c))
                    || (!c_healthy && best.state == PathState::Up)
                {
                    best.id
                } else {
                    c.id
                }
            }
        };
        self.current = Some(chosen);
        one(chosen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::testutil::view;

    fn pick(s: &mut BestPath, now_ms: u64, paths: &[PathView]) -> u8 {
        match s.select(Instant::from_micros(now_ms * 1000), paths, 1000) {
            Selection::Paths(p) => p[0].0,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn fails_over_and_back_with_hold() {
        let mut s = BestPath::new(Duration::from_secs(3));
        let mut a = view(0, PathState::Up, 10, 10.0);
        let b = view(1, PathState::Up, 30, 10.0);
        assert_eq!(pick(&mut s, 0, &[a, b]), 0);
        a.state = PathState::Down;
        a.up_since = None;
        assert_eq!(
            pick(&mut s, 100, &[a, b]),
            1,
            "fail over when current is down"
        );
        a.state = PathState::Up;
        a.up_since = Some(Instant::from_micros(1_000_000));
        assert_eq!(pick(&mut s, 2000, &[a, b]), 1, "not yet proven");
        assert_eq!(pick(&mut s, 4100, &[a, b]), 0, "fail back after hold");
    }

    #[test]
    fn no_flap_between_similar_paths() {
        let mut s = BestPath::new(Duration::ZERO);
        let a = view(0, PathState::Up, 20, 10.0);
        let b = view(1, PathState::Up, 19, 10.0);
        let first = pick(&mut s, 0, &[a, b]);
        let c = view(0, PathState::Up, 18, 10.0);
        assert_eq!(pick(&mut s, 10, &[c, b]), first);
    }

    /// The current path put on standby is left at once for an `Up` one, and taken back
    /// when it comes off standby (after the hold, as any failback).
    #[test]
    fn leaves_a_path_put_on_standby() {
        let mut s = BestPath::new(Duration::from_secs(3));
        let mut direct = view(0, PathState::Up, 10, 10.0);
        let detour = view(1, PathState::Up, 30, 10.0);
        assert_eq!(pick(&mut s, 0, &[direct, detour]), 0);
        direct.standby = true;
        assert_eq!(pick(&mut s, 100, &[direct, detour]), 1);
        direct.standby = false;
        assert_eq!(pick(&mut s, 4000, &[direct, detour]), 0);
    }

    #[test]
    fn all_down_means_all_paths() {
        let mut s = BestPath::new(Duration::ZERO);
        let a = view(0, PathState::Down, 20, 10.0);
        assert_eq!(s.select(Instant::ZERO, &[a], 10), Selection::AllPaths);
    }
}
