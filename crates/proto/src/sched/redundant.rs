//! `redundant`: a packet on one or more paths at once; the receiver keeps the first copy
//! (SMesh, *On Redundant Multipath Operating System Support for Wireless Mesh Networks*).
//!
//! Two modes:
//!
//! - **Fixed** (`copies = k` in a rule): one copy on each of the k lowest-RTT usable paths
//!   (Up first, Suspect included), all of them with fewer; no adaptivity. A user who wants
//!   duplication whatever the measurements say gets exactly that.
//! - **Adaptive** (no `copies`: the default, and what the server uses for a learned
//!   `redundant` flow): redundancy that pays for itself. The first copy goes on the
//!   primary — the lowest-RTT Up path (Suspect if none is Up). Its expected loss is its
//!   measured loss, raised to `DOUBT_LOSS` while any usable path is Suspect (a failover
//!   is in doubt: the path we left may come back, the one we moved to is unproven). While
//!   the residual loss (product of the chosen copies' losses, copies independent) exceeds
//!   `TARGET_RESIDUAL`, one copy is added on the other path that buys the most loss
//!   reduction per unit of `cost` (the smallest `cost / −ln(loss)`, a Suspect path counting
//!   `DOUBT_LOSS`; ties: lower RTT). With every path used and the residual still above the
//!   target, extra copies go round-robin on the chosen Up paths whose loss is random
//!   (0 < loss < 90 %), up to `MAX_COPIES`. Clean paths, no doubt: one copy. A copy
//!   beyond the primary goes only on a path with room for it now (window, and a pacer
//!   that lets it go): copies are a bonus, never a backlog. Redundant packets are not
//!   queued; a bulk flow's window follows its fastest copy, so unlimited copies on a
//!   slower link overflowed that link's queue — on real driving traces a link drowned
//!   so stayed Down for 14.7 s after it had recovered, and a download stalled 12 s with
//!   both links up.
//!
//!   **Small packets** (up to `SMALL_PACKET` bytes: voice frames, TCP and QUIC
//!   acknowledgements, handshakes) get a second copy on the best-priced other path even on
//!   clean links, room or not. A clean record does not predict the loss that matters on
//!   wireless links, a sudden outage: on real driving traces adaptive copies lost 2–26
//!   voice packets per minute, each in flight on the one link that went silent. The copy
//!   costs a few bytes, and voice is what users put under `redundant`.
//!
//! Invariant: the selection names only non-Down paths of the view (or is `AllPaths` when
//! there are none), always includes the primary, and has at most `max(MAX_COPIES, k)`
//! entries; in adaptive mode every entry but the primary has room for the packet.

use super::{preferred, PathSet, Scheduler, Selection};
use crate::path::{PathState, PathView};
use crate::Instant;

/// Residual loss the adaptive copies aim for.
pub const TARGET_RESIDUAL: f64 = 0.002;
/// Most copies of one packet in adaptive mode.
pub const MAX_COPIES: usize = 4;
/// Loss assumed of a Suspect path, and of the primary while any path is Suspect.
pub const DOUBT_LOSS: f64 = 0.5;
/// Packets up to this size (bytes) always get a second copy (module doc): G.711 and Opus
/// voice frames with their headers, pure acknowledgements, handshakes.
pub const SMALL_PACKET: usize = 300;
/// Loss counted for a path measured clean, so `−ln(loss)` stays finite.
const FLOOR_LOSS: f64 = 1e-6;

/// The `redundant` scheduler.
#[derive(Debug, Clone)]
pub struct Redundant {
    /// `Some(k)`: exactly k copies (fixed); `None`: adaptive.
    copies: Option<usize>,
}

impl Redundant {
    /// `Some(k)`: k copies on the k lowest-RTT paths, fixed; `None`: adaptive (module doc).
    pub fn new(copies: Option<usize>) -> Self {
        Redundant {
            copies: copies.map(|k| k.max(1)),
        }
    }
}

/// The loss a copy on `p` is expected to suffer.
fn expected_loss(p: &PathView) -> f64 {
    if p.state == PathState::Suspect {
        DOUBT_LOSS
    } else {
        p.loss.clamp(0.0, 1.0)
    }
}

/// Cost of a copy on `p` per unit of log-loss it removes (smaller is a better buy).
fn price(p: &PathView) -> f64 {
    let gain = -expected_loss(p).max(FLOOR_LOSS).ln();
    f64::from(p.cost.max(1)) / gain.max(1e-9)
}

impl Scheduler for Redundant {
    fn name(&self) -> &'static str {
        "redundant"
    }

    fn select(&mut self, now: Instant, paths: &[PathView], len: usize) -> Selection {
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
        match self.copies {
            Some(k) => Selection::Paths(usable.iter().take(k).map(|p| p.id).collect()),
            None if len <= SMALL_PACKET => Selection::Paths(adaptive(&usable, 2, |_| true)),
            None => Selection::Paths(adaptive(&usable, 1, |p| p.may_send(now, len))),
        }
    }
}

/// The adaptive choice over `usable` (sorted: Up first, then RTT; non-empty): at least
/// `min_copies` where paths allow, and copies beyond the primary only on paths `room`
/// accepts.
fn adaptive(usable: &[&PathView], min_copies: usize, room: impl Fn(&PathView) -> bool) -> PathSet {
    let primary = usable[0];
    let doubt = usable.iter().any(|p| p.state == PathState::Suspect);
    let mut residual = expected_loss(primary);
    if doubt {
        residual = residual.max(DOUBT_LOSS);
    }
    let mut set = PathSet::new();
    set.push(primary.id);
    let mut others: Vec<&PathView> = usable[1..].iter().copied().filter(|p| room(p)).collect();
    let loaded = others.len() + 1 < usable.len();
    others.sort_by(|a, b| price(a).total_cmp(&price(b)).then(a.srtt.cmp(&b.srtt)));
    for p in others {
        if (residual <= TARGET_RESIDUAL && set.len() >= min_copies) || set.is_full() {
            return set;
        }
        set.push(p.id);
        residual *= expected_loss(p);
    }
    // Every path carries a copy and random loss still exceeds the target: more copies on
    // the paths whose losses are random (a second copy there is lost independently). Not
    // while a path had no room: repeats would load the links further.
    if loaded {
        return set;
    }
    let repeatable: Vec<&PathView> = usable
        .iter()
        .filter(|p| p.state == PathState::Up && set.contains(&p.id))
        .filter(|p| p.loss > 0.0 && p.loss < 0.9 && room(p))
        .copied()
        .collect();
    let mut i = 0;
    while residual > TARGET_RESIDUAL && set.len() < MAX_COPIES && !repeatable.is_empty() {
        let p = repeatable[i % repeatable.len()];
        set.push(p.id);
        residual *= p.loss;
        i += 1;
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::testutil::view;

    fn pick(r: &mut Redundant, paths: &[PathView]) -> Vec<u8> {
        pick_len(r, paths, 1200)
    }

    fn pick_len(r: &mut Redundant, paths: &[PathView], len: usize) -> Vec<u8> {
        match r.select(Instant::ZERO, paths, len) {
            Selection::Paths(p) => p.iter().map(|p| p.0).collect(),
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn fixed_copies_are_fixed() {
        let paths = [
            view(0, PathState::Up, 50, 1.0),
            view(1, PathState::Up, 10, 1.0),
            view(2, PathState::Suspect, 5, 1.0),
            view(3, PathState::Down, 1, 1.0),
        ];
        assert_eq!(pick(&mut Redundant::new(Some(2)), &paths), [1, 0]);
        let mut lossy = paths;
        lossy[0].loss = 0.2;
        lossy[1].loss = 0.2;
        assert_eq!(
            pick(&mut Redundant::new(Some(2)), &lossy),
            [1, 0],
            "no extras"
        );
        assert_eq!(pick(&mut Redundant::new(Some(9)), &paths), [1, 0, 2]);
    }

    #[test]
    fn adaptive_one_copy_on_clean_paths_more_under_loss() {
        let mut paths = [
            view(0, PathState::Up, 50, 1.0),
            view(1, PathState::Up, 10, 1.0),
            view(2, PathState::Up, 20, 1.0),
        ];
        let mut r = Redundant::new(None);
        assert_eq!(pick(&mut r, &paths), [1], "clean: the fastest alone");
        paths[1].loss = 0.03;
        assert_eq!(
            pick(&mut r, &paths),
            [1, 2],
            "3 %: one more, the faster of equals"
        );
        paths[2].cost = 5;
        assert_eq!(pick(&mut r, &paths), [1, 0], "the cheaper clean path");
        // Both cheap paths lossy: the pricier clean path buys more loss per unit of cost.
        paths[0].loss = 0.5;
        assert_eq!(pick(&mut r, &paths), [1, 2]);
        // Two paths at 20 %: both used, then a second copy on each (0.2^4 = 0.16 %).
        let lossy = [
            PathView {
                loss: 0.2,
                ..view(0, PathState::Up, 10, 1.0)
            },
            PathView {
                loss: 0.2,
                ..view(1, PathState::Up, 20, 1.0)
            },
        ];
        assert_eq!(pick(&mut r, &lossy), [0, 1, 0, 1]);
    }

    #[test]
    fn adaptive_copies_while_a_failover_is_in_doubt() {
        let mut paths = [
            view(0, PathState::Suspect, 10, 1.0),
            view(1, PathState::Up, 30, 1.0),
        ];
        let mut r = Redundant::new(None);
        assert_eq!(pick(&mut r, &paths), [1, 0], "Suspect: copies on both");
        paths[0].state = PathState::Down;
        assert_eq!(pick(&mut r, &paths), [1]);
        paths[0].state = PathState::Up;
        assert_eq!(pick(&mut r, &paths), [0]);
        let all_down = [view(0, PathState::Down, 10, 1.0)];
        assert_eq!(r.select(Instant::ZERO, &all_down, 1), Selection::AllPaths);
    }

    #[test]
    fn adaptive_copies_only_where_there_is_room() {
        // A lossy primary wants a copy on the slower link; that link's pacer or window is
        // shut (a bulk flow's copies already fill it): the copy is skipped, not queued.
        let mut paths = [
            PathView {
                loss: 0.05,
                ..view(0, PathState::Up, 10, 50.0)
            },
            view(1, PathState::Up, 60, 2.0),
        ];
        let mut r = Redundant::new(None);
        assert_eq!(pick(&mut r, &paths), [0, 1], "room: the copy goes");
        paths[1].ready_at = Instant::from_micros(5_000);
        assert_eq!(pick(&mut r, &paths), [0], "pacer shut");
        paths[1].ready_at = Instant::ZERO;
        paths[1].inflight_bytes = paths[1].cwnd_bytes;
        assert_eq!(pick(&mut r, &paths), [0], "window full");
        // The primary goes whatever its room, and fixed copies are the user's to choose.
        paths[0].inflight_bytes = paths[0].cwnd_bytes;
        assert_eq!(pick(&mut r, &paths), [0]);
        assert_eq!(pick(&mut Redundant::new(Some(2)), &paths), [0, 1]);
    }

    #[test]
    fn a_small_packet_gets_a_second_copy_on_clean_links_room_or_not() {
        let mut paths = [
            view(0, PathState::Up, 10, 50.0),
            view(1, PathState::Up, 60, 2.0),
            view(2, PathState::Up, 40, 2.0),
        ];
        let mut r = Redundant::new(None);
        assert_eq!(pick_len(&mut r, &paths, 1200), [0], "bulk: one copy");
        assert_eq!(pick_len(&mut r, &paths, SMALL_PACKET), [0, 2], "voice: two");
        assert_eq!(pick_len(&mut r, &paths, SMALL_PACKET + 1), [0]);
        // Full links take the small copy anyway; a metered one is the last choice.
        paths[2].inflight_bytes = paths[2].cwnd_bytes;
        paths[2].cost = 5;
        assert_eq!(pick_len(&mut r, &paths, 160), [0, 1]);
        paths[1].ready_at = Instant::from_micros(5_000);
        assert_eq!(pick_len(&mut r, &paths, 160), [0, 1], "pacer shut: still");
        assert_eq!(
            pick_len(&mut r, &paths[..1], 160),
            [0],
            "one link: one copy"
        );
    }
}
