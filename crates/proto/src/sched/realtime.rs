//! `realtime`: each packet must arrive before its deadline — the multimedia mode (MMTP)
//! of Magalhães, *A Transport Layer Approach to Host Mobility* (UIUC).
//!
//! MMTP's rule: a frame that cannot reach the receiver before it is due is useless there,
//! so it is dropped at the sender instead of taking capacity from the frames that still
//! can; and the spare capacity of a multihomed host is used from the *highest-latency*
//! channel down, so the low-latency channels stay free for what needs them (a packet close
//! to its deadline, another flow's tighter deadline, the FEC parity that must overtake a
//! loss). Here, per packet: among the preferred paths (the Up ones, else the Suspect ones),
//! those whose expected delivery — one-way delay with the path's forward queue plus
//! serialisation, the estimate `earliest` uses without its loss charge
//! (`expected_delivery`) — falls within the time left; of those with room now (window and
//! pacer), the one expected latest; if none has room, the earliest one that still makes it
//! (a pacer is a soft limit, a deadline is not); if none makes it, `Late`: the session drops
//! the packet and counts it (`rt_dropped_late`), it is never sent late.
//!
//! Sans-IO and stateless: it sees only `PathView`s, like every scheduler.

use super::{expected_delivery, one, preferred, Selection};
use crate::path::{PathId, PathView};
use crate::Instant;
use core::time::Duration;

/// What to do with one realtime packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RtChoice {
    /// Send it (on one path, or on every path when none is believed usable).
    Send(Selection),
    /// No path delivers it within its time: drop it at the sender.
    Late,
}

/// Chooses the path for a realtime packet of `len` bytes that must arrive within `budget`.
pub fn select(now: Instant, paths: &[PathView], len: usize, budget: Duration) -> RtChoice {
    let limit = budget.as_secs_f64();
    let mut any = false;
    let mut latest_with_room: Option<(f64, PathId)> = None;
    let mut earliest: Option<(f64, PathId)> = None;
    for p in preferred(paths) {
        any = true;
        let t = expected_delivery(p, len);
        if t > limit {
            continue;
        }
        if p.may_send(now, len) {
            // Ties go to the lower id (the first seen).
            if latest_with_room.is_none_or(|(best, _)| t > best) {
                latest_with_room = Some((t, p.id));
            }
        }
        if earliest.is_none_or(|(best, _)| t < best) {
            earliest = Some((t, p.id));
        }
    }
    match latest_with_room.or(earliest) {
        Some((_, id)) => RtChoice::Send(one(id)),
        None if any => RtChoice::Late,
        None => RtChoice::Send(Selection::AllPaths),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::PathState;
    use crate::sched::testutil::view;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// MMTP: the slowest path that still makes the deadline carries the packet.
    #[test]
    fn highest_latency_path_within_the_deadline() {
        let fast = view(0, PathState::Up, 20, 10.0);
        let mid = view(1, PathState::Up, 100, 10.0);
        let slow = view(2, PathState::Up, 400, 10.0);
        let paths = [fast, mid, slow];
        // One-way 10, 50 and 200 ms: within 150 ms the 50-ms path is the latest.
        assert_eq!(
            select(Instant::ZERO, &paths, 200, MS(150)),
            RtChoice::Send(one(mid.id))
        );
        // Within 30 ms only the fast one.
        assert_eq!(
            select(Instant::ZERO, &paths, 200, MS(30)),
            RtChoice::Send(one(fast.id))
        );
        // Within 5 ms none: dropped, never sent late.
        assert_eq!(select(Instant::ZERO, &paths, 200, MS(5)), RtChoice::Late);
    }

    /// A path without room now (pacer closed, window full) is passed over for one with
    /// room; if none has room, the earliest in time still takes it.
    #[test]
    fn room_first_then_earliest_in_time() {
        let fast = view(0, PathState::Up, 20, 10.0);
        let mut mid = view(1, PathState::Up, 100, 10.0);
        mid.ready_at = Instant::from_micros(1_000);
        assert_eq!(
            select(Instant::ZERO, &[fast, mid], 200, MS(150)),
            RtChoice::Send(one(fast.id))
        );
        let mut fast_full = fast;
        fast_full.inflight_bytes = fast_full.cwnd_bytes;
        assert_eq!(
            select(Instant::ZERO, &[fast_full, mid], 200, MS(150)),
            RtChoice::Send(one(fast.id))
        );
    }

    /// Forward queueing counts: a path whose queue would make the packet late is not used;
    /// Suspect paths only when none is Up; no usable path at all: every path.
    #[test]
    fn queue_and_liveness() {
        let fast = view(0, PathState::Up, 20, 10.0);
        let mut mid = view(1, PathState::Up, 100, 10.0);
        mid.fwd_queue = MS(120);
        assert_eq!(
            select(Instant::ZERO, &[fast, mid], 200, MS(150)),
            RtChoice::Send(one(fast.id))
        );
        let suspect = view(1, PathState::Suspect, 100, 10.0);
        assert_eq!(
            select(Instant::ZERO, &[fast, suspect], 200, MS(150)),
            RtChoice::Send(one(fast.id))
        );
        let down = view(0, PathState::Down, 20, 10.0);
        assert_eq!(
            select(Instant::ZERO, &[down], 200, MS(150)),
            RtChoice::Send(Selection::AllPaths)
        );
    }
}
