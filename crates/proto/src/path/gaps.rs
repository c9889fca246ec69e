//! When a gap in a path's numbering is a loss: RACK's reordering window (RFC 8985 §6.2),
//! kept by the receiver, which is the side that sees the gaps.
//!
//! A datagram numbered above the largest seen opens a gap. On a path that has never
//! reordered, the gap is a loss at once (the window is zero): links are FIFO, and the
//! sooner the sender hears, the sooner it repairs. Once a datagram arrives inside an open
//! gap, the path reorders: the window becomes what that datagram's lateness says (plus a
//! quarter), and later gaps are declared lost only when they stayed open that long. A
//! datagram arriving after its gap was declared lost (a spurious NACK: its repair was
//! wasted) doubles the window. The window never exceeds the path's smoothed RTT — waiting
//! longer costs more than a resend — and halves after `FORGET` without reordering, so a path
//! that stopped reordering goes back to immediate reports.
//!
//! Invariants: at most `MAX_OPEN` gaps are open (the oldest is declared lost to make room);
//! a datagram number is declared lost at most once per gap; with a zero window the
//! behaviour is exactly "every gap is a loss at once".

use crate::Instant;
use arrayvec::ArrayVec;
use core::time::Duration;

/// Most gaps held open at once.
const MAX_OPEN: usize = 8;
/// Without reordering for this long, the window halves (at most once per `FORGET`).
const FORGET: Duration = Duration::from_secs(10);
/// Smallest window a spurious loss sets.
const MIN_STEP: Duration = Duration::from_millis(1);

/// One open gap: datagrams `first .. first + count` missing since `since`.
#[derive(Debug, Clone, Copy)]
struct Gap {
    first: u32,
    count: u32,
    since: Instant,
}

impl Gap {
    fn contains(&self, seq: u32) -> bool {
        seq.wrapping_sub(self.first) < self.count
    }
}

/// Open gaps of one path and its reordering window.
#[derive(Debug, Clone, Default)]
pub struct GapWindow {
    open: ArrayVec<Gap, MAX_OPEN>,
    window: Duration,
    /// When reordering was last seen, or the window last halved.
    last_reorder: Option<Instant>,
    /// Datagrams that arrived inside an open gap (reordered, not lost).
    reordered: u64,
    /// Datagrams that arrived after their gap was declared lost.
    spurious: u64,
}

impl GapWindow {
    /// The current reordering window.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// Datagrams that arrived reordered inside an open gap.
    pub fn reordered(&self) -> u64 {
        self.reordered
    }

    /// Datagrams that arrived after being declared lost.
    pub fn spurious(&self) -> u64 {
        self.spurious
    }

    /// Datagrams `first .. first + count` are missing as of `now`; `lost` hears each range
    /// declared lost now (all of it while the window is zero; the oldest open gap when
    /// there is no room for another).
    pub fn on_gap(&mut self, now: Instant, first: u32, count: u32, mut lost: impl FnMut(u32, u32)) {
        if self.window.is_zero() {
            lost(first, count);
            return;
        }
        if self.open.is_full() {
            let g = self.open.remove(0);
            lost(g.first, g.count);
        }
        self.open.push(Gap {
            first,
            count,
            since: now,
        });
    }

    /// Datagram `seq`, below the largest seen, arrived at `now`. `cap` bounds the window
    /// (the path's smoothed RTT).
    pub fn on_late(&mut self, now: Instant, seq: u32, cap: Duration) {
        self.last_reorder = Some(now);
        let Some(i) = self.open.iter().position(|g| g.contains(seq)) else {
            // Not in an open gap: it was declared lost (or fell beyond a NACK's run).
            self.spurious += 1;
            self.window = (self.window * 2).max(MIN_STEP).min(cap.max(MIN_STEP));
            return;
        };
        self.reordered += 1;
        let g = self.open[i];
        let late = now.saturating_since(g.since);
        self.window = self.window.max(late + late / 4).min(cap.max(MIN_STEP));
        // Split the gap around `seq`.
        let before = seq.wrapping_sub(g.first);
        let after = g.count - before - 1;
        self.open.remove(i);
        let mut at = i;
        for (first, count) in [(g.first, before), (seq.wrapping_add(1), after)] {
            if count > 0 && !self.open.is_full() {
                let since = g.since;
                self.open.insert(
                    at,
                    Gap {
                        first,
                        count,
                        since,
                    },
                );
                at += 1;
            }
        }
    }

    /// When the oldest open gap is due to be declared lost.
    pub fn deadline(&self) -> Option<Instant> {
        self.open.iter().map(|g| g.since + self.window).min()
    }

    /// Declares lost every gap open for the window or longer; returns whether any was.
    pub fn declare_due(&mut self, now: Instant, mut lost: impl FnMut(u32, u32)) -> bool {
        let window = self.window;
        let before = self.open.len();
        self.open.retain(|g| {
            let due = g.since + window <= now;
            if due {
                lost(g.first, g.count);
            }
            !due
        });
        let any = self.open.len() < before;
        if any
            && self
                .last_reorder
                .is_none_or(|t| now.saturating_since(t) >= FORGET)
        {
            self.window /= 2;
            if self.window < MIN_STEP {
                self.window = Duration::ZERO;
            }
            self.last_reorder = Some(now);
        }
        any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Instant {
        Instant::from_micros(v * 1000)
    }

    fn collect(w: &mut GapWindow, now: Instant) -> Vec<(u32, u32)> {
        let mut v = Vec::new();
        w.declare_due(now, |f, c| v.push((f, c)));
        v
    }

    #[test]
    fn without_reordering_a_gap_is_lost_at_once() {
        let mut w = GapWindow::default();
        let mut v = Vec::new();
        w.on_gap(ms(0), 5, 2, |f, c| v.push((f, c)));
        assert_eq!(v, vec![(5, 2)]);
        assert_eq!(w.deadline(), None);
    }

    #[test]
    fn reordering_learns_a_window_and_fills_gaps() {
        let mut w = GapWindow::default();
        // A spurious loss: seq 3 arrives after its gap was reported.
        w.on_late(ms(10), 3, Duration::from_millis(50));
        assert_eq!(w.window(), MIN_STEP);
        assert_eq!(w.spurious(), 1);
        // Now gaps wait: seq 10..13 missing at 20 ms, 11 comes 4 ms later.
        w.on_gap(ms(20), 10, 3, |_, _| panic!("not yet"));
        w.on_late(ms(24), 11, Duration::from_millis(50));
        assert_eq!(w.window(), Duration::from_millis(5));
        assert_eq!(w.reordered(), 1);
        // 10 and 12 still open, due at 25 ms.
        assert_eq!(w.deadline(), Some(ms(25)));
        assert!(collect(&mut w, ms(24)).is_empty());
        w.on_late(ms(24), 12, Duration::from_millis(50));
        assert_eq!(collect(&mut w, ms(25)), vec![(10, 1)]);
        assert_eq!(w.deadline(), None);
    }

    #[test]
    fn the_window_is_capped_and_forgets() {
        let mut w = GapWindow::default();
        w.on_late(ms(0), 1, Duration::from_millis(50));
        w.on_gap(ms(0), 10, 1, |_, _| {});
        w.on_late(ms(400), 10, Duration::from_millis(50));
        assert_eq!(w.window(), Duration::from_millis(50));
        // Ten seconds without reordering: a declared loss halves the window.
        w.on_gap(ms(20_000), 20, 1, |_, _| {});
        assert_eq!(collect(&mut w, ms(20_050)), vec![(20, 1)]);
        assert_eq!(w.window(), Duration::from_millis(25));
    }

    #[test]
    fn open_gaps_are_bounded() {
        let mut w = GapWindow::default();
        w.on_late(ms(0), 1, Duration::from_millis(50));
        let mut lost = Vec::new();
        for i in 0..(MAX_OPEN as u32 + 2) {
            w.on_gap(ms(1), 10 + 2 * i, 1, |f, c| lost.push((f, c)));
        }
        assert_eq!(lost, vec![(10, 1), (12, 1)]);
        assert_eq!(w.open.len(), MAX_OPEN);
    }
}
