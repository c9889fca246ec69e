//! When a gap in a path's numbering is a loss: RACK (RFC 8985, *The RACK-TLP Loss Detection
//! Algorithm for TCP*) run where the scoreboard is — at the receiver of the path, which sees
//! every datagram arrive, and so sees directly what a TCP sender learns from SACK and DSACK.
//!
//! A datagram numbered above the largest seen leaves the datagrams in between *missing*,
//! since its arrival. RACK's rule ("a packet is lost once a packet sent after it was
//! delivered and the reordering window has passed", §6.2) becomes: a missing datagram is
//! lost once `window` has passed since a datagram sent after it arrived. The window is
//! `max(mult · min_rtt / 4, extent · 9/8)`:
//!
//! - `min_rtt / 4` from the start, RFC 8985's settling time;
//! - `extent` is the largest lateness actually seen (a datagram arriving inside its hole,
//!   or after being declared lost: `now − since`) over the last `PERSIST` loss episodes;
//! - `mult` (RFC 8985's `reo_wnd_mult`) grows by one, at most once per round trip, each
//!   time a datagram arrives after being declared lost — a spurious repair, what DSACK
//!   tells a TCP sender;
//! - the multiple of `min_rtt / 4` never above the path's retransmission timeout,
//!   `rto = srtt + 4 · rttvar` (RFC 6298), the lateness seen never above twice that.
//!   (RFC 8985 caps the window at the smoothed RTT. On a path whose delay varies as much
//!   as its RTT — 10 ± 10 ms each way — the receiver's RTT, from its sparse keepalives,
//!   read 10–15 ms under 22 ms of reordering: capped there, one datagram in seven was
//!   resent for nothing; capped at `rto`, a dip of the estimate still cost 50 at once.)
//!
//! Decay (§6.2's `reo_wnd_persist`): after `PERSIST` loss episodes (losses a round apart)
//! without a spurious declaration, `mult` falls back to 1 and `extent` to what those
//! episodes saw.
//!
//! Left out of §6.2: the zero window on a path not yet seen to reorder (after DupThresh
//! datagrams, or during a recovery). Here a spurious declaration costs more than a resend:
//! the sender's rate controller counts it as a loss (`loss.rs`), and on links that reorder
//! within 5 ms the first few, judged congestion, ended the rate controller's start-up at a
//! tenth of the link's rate. A FIFO path's losses are repaired `min_rtt / 4` later instead.
//!
//! Invariants: at most `MAX_MISSING` datagrams are held missing (the oldest is declared to
//! make room) and `MAX_DECLARED` remembered as declared; `missing` is in `path_seq` order,
//! which is also the order of `since` (holes open as the largest advances), so its front
//! has the earliest deadline and datagrams are declared in `path_seq` order; a datagram is
//! declared lost at most once.

use crate::Instant;
use core::time::Duration;
use std::collections::VecDeque;

/// Datagrams held missing at once.
const MAX_MISSING: usize = 1024;
/// Declared datagrams remembered, to recognise a spurious declaration.
const MAX_DECLARED: usize = 512;
/// Loss episodes without a spurious declaration before the window falls back (§6.2).
const PERSIST: u32 = 16;
/// Largest multiplier of `min_rtt / 4` (the retransmission timeout caps the window first anyway).
const MAX_MULT: u32 = 64;

/// The path's round-trip times the window is made of.
#[derive(Debug, Clone, Copy)]
pub struct Rtts {
    /// Minimum RTT: reordering is a property of the path, not of its queue (RFC 8985).
    pub min: Duration,
    /// Smoothed RTT: the length of a round.
    pub smoothed: Duration,
    /// Mean deviation: with the smoothed RTT, the window's cap.
    pub var: Duration,
}

/// A datagram missing since `since`.
#[derive(Debug, Clone, Copy)]
struct Missing {
    seq: u32,
    since: Instant,
}

/// The receiver's loss detection of one path.
#[derive(Debug, Clone)]
pub struct GapWindow {
    missing: VecDeque<Missing>,
    /// Recently declared: (seq, since it was missing).
    declared: VecDeque<(u32, Instant)>,
    /// RFC 8985's `reo_wnd_mult`.
    mult: u32,
    /// Loss episodes left before the window falls back.
    persist: u32,
    /// Largest lateness the window goes by, and the largest seen since the last fall-back.
    extent: Duration,
    extent_lately: Duration,
    /// `mult` grows at most once per round: not before this.
    grow_after: Instant,
    /// The loss episode under way ends then (one round after it started).
    recovery_until: Option<Instant>,
    /// Whether the episode under way had a spurious declaration.
    episode_spurious: bool,
    reordered: u64,
    spurious: u64,
    lost: u64,
}

impl Default for GapWindow {
    fn default() -> Self {
        GapWindow {
            missing: VecDeque::new(),
            declared: VecDeque::new(),
            mult: 1,
            persist: PERSIST,
            extent: Duration::ZERO,
            extent_lately: Duration::ZERO,
            grow_after: Instant::ZERO,
            recovery_until: None,
            episode_spurious: false,
            reordered: 0,
            spurious: 0,
            lost: 0,
        }
    }
}

impl GapWindow {
    /// The reordering window: how long after a later datagram arrived a missing one is
    /// lost.
    pub fn window(&self, rtt: Rtts) -> Duration {
        let rto = rtt.smoothed + rtt.var * 4;
        let base = (rtt.min / 4 * self.mult).min(rto);
        base.max((self.extent + self.extent / 8).min(rto * 2))
    }

    /// Datagrams that arrived late, inside their hole.
    pub fn reordered(&self) -> u64 {
        self.reordered
    }

    /// Datagrams that arrived after being declared lost.
    pub fn spurious(&self) -> u64 {
        self.spurious
    }

    /// Datagrams declared lost.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    fn in_recovery(&self, now: Instant) -> bool {
        self.recovery_until.is_some_and(|t| now < t)
    }

    /// Datagrams `first .. first + count` went missing at `now` (the one after them
    /// arrived); `lost` hears each run declared lost now (to make room). Of a gap longer
    /// than `MAX_MISSING` (an outage, not reordering) all but the last `MAX_MISSING` are
    /// declared at once, as one run: the work per gap stays bounded.
    pub fn on_gap(
        &mut self,
        now: Instant,
        first: u32,
        count: u32,
        rtt: Rtts,
        lost: impl FnMut(u32, u32),
    ) {
        let mut out = Runs::new(lost);
        let bulk = count.saturating_sub(MAX_MISSING as u32);
        if bulk > 0 {
            while let Some(m) = self.missing.pop_front() {
                self.declare(now, rtt, m, &mut out);
            }
            self.lost += u64::from(bulk);
            out.run(first, bulk);
        }
        let (first, count) = (first.wrapping_add(bulk), count - bulk);
        for i in 0..count {
            if self.missing.len() >= MAX_MISSING {
                let m = self.missing.pop_front().expect("full");
                self.declare(now, rtt, m, &mut out);
            }
            self.missing.push_back(Missing {
                seq: first.wrapping_add(i),
                since: now,
            });
        }
    }

    /// Datagram `seq`, below the largest seen, arrived at `now`: reordering, and if it had
    /// been declared lost, a spurious declaration.
    pub fn on_late(&mut self, now: Instant, seq: u32, rtt: Rtts) {
        let since = if let Some(i) = self.find_missing(seq) {
            self.reordered += 1;
            self.missing.remove(i).map(|m| m.since)
        } else if let Some(i) = self.declared.iter().rposition(|d| d.0 == seq) {
            self.spurious += 1;
            self.episode_spurious = true;
            self.persist = PERSIST;
            if now >= self.grow_after {
                self.mult = (self.mult + 1).min(MAX_MULT);
                self.grow_after = now + rtt.smoothed;
            }
            self.declared.remove(i).map(|d| d.1)
        } else {
            // Beyond a run too long to report, or forgotten: late, but how late is unknown.
            None
        };
        if let Some(since) = since {
            let late = now.saturating_since(since);
            self.extent = self.extent.max(late);
            self.extent_lately = self.extent_lately.max(late);
        }
    }

    /// Index of `seq` in `missing` (sorted in wrapping order from its front).
    fn find_missing(&self, seq: u32) -> Option<usize> {
        let base = self.missing.front()?.seq;
        let key = seq.wrapping_sub(base);
        let i = self
            .missing
            .partition_point(|m| m.seq.wrapping_sub(base) < key);
        (self.missing.get(i)?.seq == seq).then_some(i)
    }

    /// When the oldest missing datagram is due to be declared lost.
    pub fn deadline(&self, rtt: Rtts) -> Option<Instant> {
        let m = self.missing.front()?;
        Some(m.since + self.window(rtt))
    }

    /// Declares lost every missing datagram whose window has passed; returns whether any was.
    pub fn declare_due(&mut self, now: Instant, rtt: Rtts, lost: impl FnMut(u32, u32)) -> bool {
        let mut out = Runs::new(lost);
        let before = self.lost;
        while let Some(m) = self.missing.front().copied() {
            if m.since + self.window(rtt) > now {
                break;
            }
            self.missing.pop_front();
            self.declare(now, rtt, m, &mut out);
        }
        self.lost > before
    }

    /// Declares `m` lost; the first declaration after a quiet round opens a loss episode
    /// and closes the previous one (§6.2's persist count).
    fn declare(
        &mut self,
        now: Instant,
        rtt: Rtts,
        m: Missing,
        out: &mut Runs<impl FnMut(u32, u32)>,
    ) {
        if !self.in_recovery(now) {
            if self.recovery_until.is_some() && !self.episode_spurious {
                self.persist -= 1;
                if self.persist == 0 {
                    self.fall_back();
                }
            }
            self.episode_spurious = false;
            self.recovery_until = Some(now + rtt.smoothed);
        }
        self.lost += 1;
        if self.declared.len() >= MAX_DECLARED {
            self.declared.pop_front();
        }
        self.declared.push_back((m.seq, m.since));
        out.push(m.seq);
    }

    /// `PERSIST` episodes without a spurious declaration: back to the base window, keeping
    /// the reordering those episodes saw.
    fn fall_back(&mut self) {
        self.persist = PERSIST;
        self.mult = 1;
        self.extent = self.extent_lately;
        self.extent_lately = Duration::ZERO;
    }
}

/// Collects declared datagrams into runs of consecutive numbers for `f`.
struct Runs<F: FnMut(u32, u32)> {
    run: Option<(u32, u32)>,
    f: F,
}

impl<F: FnMut(u32, u32)> Runs<F> {
    fn new(f: F) -> Self {
        Runs { run: None, f }
    }

    fn push(&mut self, seq: u32) {
        match &mut self.run {
            Some((first, count)) if first.wrapping_add(*count) == seq => *count += 1,
            _ => {
                self.flush();
                self.run = Some((seq, 1));
            }
        }
    }

    /// Hands on `count` datagrams from `first` as a run of their own, after the pending one.
    fn run(&mut self, first: u32, count: u32) {
        self.flush();
        (self.f)(first, count);
    }

    fn flush(&mut self) {
        if let Some((first, count)) = self.run.take() {
            (self.f)(first, count);
        }
    }
}

impl<F: FnMut(u32, u32)> Drop for Runs<F> {
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
#[path = "gaps_tests.rs"]
mod tests;
