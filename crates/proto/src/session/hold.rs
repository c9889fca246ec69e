//! How long the receiver waits for what is missing: the reorder hold (a gap in the striped
//! sequence), the repair wait (a hole known lost, being resent), and CoDel's interval at
//! the sender (how long the inner TCP takes to react). All follow the live paths' measured
//! delays; none is a fixed constant.

use super::Session;
use crate::path::PathState;
use crate::Instant;
use core::time::Duration;

/// How long after a gap opens its repair can land, at most. The gap opens when a packet
/// behind it arrives, up to `spread` (the one-way lag of the slowest path) before the
/// missing packet was due; the loss shows on its path one datagram later, and is declared
/// once that path's reordering window (`path/gaps.rs`) has passed; the NACK then
/// crosses back on that path and the copy crosses again on the fastest, about one round
/// trip averaged over the lossy path (unknown at the receiver) and the fastest one; plus
/// the hold's margin. Without the spread, a loss on the slow path was given up on before
/// its repair arrived (10+10 Mbit/s at 1/25 ms: 159 holes skipped as lost, 270 repairs
/// late, each a loss for the inner TCP). (A second round, for a copy lost in its turn,
/// was tried: holds of 300 ms on paths with 100 ms of queue fired the inner TCP's
/// retransmission timer, which cost more than the one skip in a hundred losses it saved.)
fn repair_wait(spread: Duration, (lo, hi): (Duration, Duration), reo_wnd: Duration) -> Duration {
    let rtt = (lo + hi) / 2;
    spread + reo_wnd + rtt + (rtt / 4).max(Duration::from_millis(10))
}

impl Session {
    /// Reorder hold time: how far the slowest active path lags the fastest one way
    /// (measured from the sender's timestamps, queueing included), plus a margin of a
    /// quarter of that (at least 10 ms) for scheduling noise; bounded so a dead path cannot
    /// stall delivery for long. A generous hold is cheap: holes known lost do not wait
    /// for it (`holes.rs`).
    pub fn reorder_hold(&self, now: Instant) -> Duration {
        let (spread, _, _) = self.path_delays(now);
        // Margin for what the estimate cannot see: timestamps are taken when a datagram is
        // built, not when the driver's batch leaves, and arrival times per receive batch.
        // What late packets taught the buffer comes on top (`ReorderBuffer::extra`).
        let hold = spread + (spread / 4).max(Duration::from_millis(10)) + self.reorder.extra(now);
        // A lost packet is repaired (`reinject.rs`) once its NACK has crossed back and the
        // copy has crossed again: the hold must last that long, or the repair lands behind
        // a hole already given up on.
        hold.max(self.repair_wait(now))
            .clamp(Duration::from_millis(5), Duration::from_millis(500))
    }

    /// How long a repair takes, at most (see `repair_wait`).
    pub(super) fn repair_wait(&self, now: Instant) -> Duration {
        let (spread, lo, hi) = self.path_delays(now);
        repair_wait(spread, (lo, hi), self.reorder_window())
    }

    /// The widest reordering window of the live paths: the longest a loss on one waits to
    /// be declared.
    fn reorder_window(&self) -> Duration {
        self.paths
            .iter()
            .filter(|s| s.path.state() != PathState::Down)
            .map(|s| s.path.reorder_window())
            .max()
            .unwrap_or_default()
    }

    /// How far the slowest active path lags the fastest one way, and the lowest and
    /// highest smoothed RTT of the live paths.
    fn path_delays(&self, now: Instant) -> (Duration, Duration, Duration) {
        let spread = self.delay.spread(now, Duration::from_secs(1));
        // Until a path has carried data its one-way delay is unknown here; half the RTT
        // difference between live paths (measured by this side's own probes) stands in.
        let (lo, hi) = self.live_rtt_range();
        (spread.max(hi.saturating_sub(lo) / 2), lo, hi)
    }

    /// Lowest and highest smoothed RTT over live (not Down) measured paths; zeros if none.
    pub(super) fn live_rtt_range(&self) -> (Duration, Duration) {
        self.paths
            .iter()
            .filter(|s| s.path.state() != PathState::Down && s.path.rtt().has_sample())
            .map(|s| s.path.rtt().smoothed())
            .fold(None, |acc: Option<(Duration, Duration)>, r| {
                Some(acc.map_or((r, r), |(lo, hi)| (lo.min(r), hi.max(r))))
            })
            .unwrap_or_default()
    }

    /// Lowest smoothed RTT over live, measured paths not on standby (those carry no data);
    /// over all live paths if every one is on standby.
    pub(super) fn fastest_carrying_rtt(&self) -> Duration {
        self.paths
            .iter()
            .filter(|s| {
                s.path.state() != PathState::Down
                    && s.path.rtt().has_sample()
                    && !s.path.is_standby()
            })
            .map(|s| s.path.rtt().smoothed())
            .min()
            .unwrap_or_else(|| self.live_rtt_range().0)
    }

    /// CoDel's interval: the worst round trip a striped flow sees — the slowest live path's
    /// smoothed RTT plus the reorder wait behind it (half the RTT spread) — so CoDel does
    /// not drop again before the inner TCP could react to its last drop.
    pub(super) fn codel_interval(&self) -> Duration {
        let (lo, hi) = self.live_rtt_range();
        hi + hi.saturating_sub(lo) / 2
    }
}
