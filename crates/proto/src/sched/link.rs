//! Link policies: `only:`, `prefer:` and `backup:` a link (`policy::LinkRule`).
//!
//! MobilityFirst lets a host state how its interfaces may be used ("only Wi-Fi", a metered
//! link kept for when nothing else works); these are the per-flow forms of that:
//!
//! - `only:L` — the packet goes on L, whatever its state: the session holds it while L is
//!   not live (`session/store.rs`), so by the time it gets here L is the one choice;
//! - `prefer:L` — L while it is `Up`; else the other paths as `best` picks among them
//!   (an `Up` one first), else L while `Suspect`; the flow is back on L as soon as L is
//!   `Up` again (no failback hold: the user named it);
//! - `backup:L` — the other paths as `best` picks among them while one of them is `Up`;
//!   L only while none is (`Up` first, then `Suspect`, as `best` prefers).
//!
//! Invariants: a selection names only paths in the view; `backup:L` names L only when no
//! other path is `Up`; `only:L` never names another path (an empty selection if L is not
//! in the view: the packet is dropped, which the store's hold prevents in practice).

use super::{one, BestPath, PathSet, Scheduler, Selection};
use crate::path::{PathId, PathState, PathView};
use crate::policy::LinkRule;
use crate::Instant;
use core::time::Duration;

/// Chooses paths for link-policy packets. Its own `best` for "the other paths", so the
/// session's `best` flows keep their hysteresis whatever link flows do.
#[derive(Debug, Clone)]
pub struct LinkScheduler {
    others: BestPath,
    /// Views without the link singled out, rebuilt per packet in this reused buffer. It
    /// grows to the number of paths at the first link-policy packet (a session that never
    /// sends one holds none of it: 2.5 KB for `MAX_PATHS` views otherwise).
    buf: Vec<PathView>,
}

impl LinkScheduler {
    /// A scheduler whose choice among the other paths fails back after `hold` (`best`).
    pub fn new(hold: Duration) -> Self {
        LinkScheduler {
            others: BestPath::new(hold),
            buf: Vec::new(),
        }
    }

    /// The path(s) for a packet of `len` bytes under `rule`.
    pub fn select(
        &mut self,
        now: Instant,
        rule: LinkRule,
        paths: &[PathView],
        len: usize,
    ) -> Selection {
        let link = rule.link();
        let state = paths.iter().find(|p| p.id == link).map(|p| p.state);
        let link_is = |st: PathState| state == Some(st);
        match rule {
            LinkRule::Only(_) if state.is_some() => one(link),
            LinkRule::Only(_) => Selection::Paths(PathSet::new()),
            LinkRule::Prefer(_) if link_is(PathState::Up) => one(link),
            LinkRule::Prefer(_) => {
                let other = self.best_other(now, link, paths, len);
                if !names(&other, paths, PathState::Up) && link_is(PathState::Suspect) {
                    one(link)
                } else {
                    other
                }
            }
            LinkRule::Backup(_) => {
                // Up before Suspect: the others', then the link's, at each level.
                let other = self.best_other(now, link, paths, len);
                if names(&other, paths, PathState::Up) {
                    other
                } else if link_is(PathState::Up) {
                    one(link)
                } else if names(&other, paths, PathState::Suspect) || !link_is(PathState::Suspect) {
                    other
                } else {
                    one(link)
                }
            }
        }
    }

    /// The path last chosen among the others (for `backup:` and a `prefer:` link not up).
    pub fn current_other(&self) -> Option<PathId> {
        self.others.current()
    }

    /// `best`'s choice among the paths other than `link`.
    fn best_other(
        &mut self,
        now: Instant,
        link: PathId,
        paths: &[PathView],
        len: usize,
    ) -> Selection {
        self.buf.clear();
        self.buf
            .extend(paths.iter().filter(|p| p.id != link).copied());
        let views = std::mem::take(&mut self.buf);
        let sel = self.others.select(now, &views, len);
        self.buf = views;
        sel
    }
}

/// Whether `sel` names a path in state `st`.
fn names(sel: &Selection, paths: &[PathView], st: PathState) -> bool {
    let Selection::Paths(set) = sel else {
        return false;
    };
    set.iter()
        .any(|id| paths.iter().any(|p| p.id == *id && p.state == st))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::testutil::view;

    fn pick(s: &mut LinkScheduler, rule: LinkRule, paths: &[PathView]) -> Vec<u8> {
        match s.select(Instant::ZERO, rule, paths, 1000) {
            Selection::Paths(p) => p.iter().map(|id| id.0).collect(),
            other => panic!("{other:?}"),
        }
    }

    fn three(states: [PathState; 3]) -> [PathView; 3] {
        // Path 0 is the fastest, so plain `best` would pick it.
        [
            view(0, states[0], 10, 10.0),
            view(1, states[1], 30, 10.0),
            view(2, states[2], 60, 10.0),
        ]
    }

    #[test]
    fn backup_only_when_no_other_is_up() {
        use PathState::*;
        let mut s = LinkScheduler::new(Duration::ZERO);
        let b = LinkRule::Backup(PathId(0));
        assert_eq!(pick(&mut s, b, &three([Up, Up, Up])), [1]);
        assert_eq!(pick(&mut s, b, &three([Up, Suspect, Up])), [2]);
        assert_eq!(pick(&mut s, b, &three([Up, Suspect, Down])), [0]);
        assert_eq!(pick(&mut s, b, &three([Suspect, Suspect, Down])), [1]);
        assert_eq!(pick(&mut s, b, &three([Suspect, Down, Down])), [0]);
        assert_eq!(pick(&mut s, b, &three([Down, Suspect, Down])), [1]);
    }

    #[test]
    fn prefer_while_up_and_back_at_once() {
        use PathState::*;
        let mut s = LinkScheduler::new(Duration::from_secs(3));
        let p = LinkRule::Prefer(PathId(2));
        assert_eq!(pick(&mut s, p, &three([Up, Up, Up])), [2]);
        assert_eq!(pick(&mut s, p, &three([Up, Up, Suspect])), [0]);
        assert_eq!(pick(&mut s, p, &three([Down, Up, Down])), [1]);
        assert_eq!(pick(&mut s, p, &three([Suspect, Down, Suspect])), [2]);
        // Back as soon as it is Up: no failback hold for the link the user named.
        assert_eq!(pick(&mut s, p, &three([Up, Up, Up])), [2]);
    }

    #[test]
    fn only_never_names_another_link() {
        use PathState::*;
        let mut s = LinkScheduler::new(Duration::ZERO);
        let o = LinkRule::Only(PathId(1));
        for st in [Up, Suspect, Down] {
            assert_eq!(pick(&mut s, o, &three([Up, st, Up])), [1]);
        }
        assert!(pick(&mut s, LinkRule::Only(PathId(7)), &three([Up, Up, Up])).is_empty());
    }
}
