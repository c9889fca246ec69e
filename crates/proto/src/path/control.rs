//! Rate control of one path (R-MTP's rate-based transmission, with BBR's gain cycle):
//! how fast the path may send (`pacing_rate`) and how much it may have in flight (`cwnd`).
//!
//! The rate is the bottleneck bandwidth estimate (windowed maximum of delivery-rate
//! samples, `rate.rs`) times a gain:
//! - **startup**: gain 2 until the estimate stops growing by a quarter for three rounds
//!   (rounds count when a sample was taken while the path was busy, or a queue stands),
//!   or a loss is judged congestion;
//! - **probing**, steered by the forward queue (`oneway.rs`): gain 1.25 while the queue
//!   is below half its target (the link is not being filled: find out how much more it
//!   gives), 1 within the target, 0.9 above it (drain). On a link that delivers in bursts
//!   the drain reads the standing queue instead (`drain_reading`). The target is
//!   `max(10 ms, min_rtt / 4)`. A small standing queue at the bottleneck is what keeps a
//!   link busy; BBR's fixed cycle (1.25, 0.75, 1 ×6) left a link idle in every 0.75 round
//!   that had no queue to drain, and found a rate rise only once per eight rounds — too
//!   slow for Wi-Fi and cellular links whose rate changes every few hundred ms;
//! - **packet pairs**: when the capacity the peer measures from back-to-back pairs
//!   (`pair.rs`) is well above the estimate, gain 2 (R-MTP's exponential increase by
//!   packet pairs): a path that was idle or starved gets back to its capacity in a few
//!   rounds instead of 1.25× per eight.
//!
//! Loss discrimination (the R-MTP thesis, "Loss discrimination"): after a loss, look at the jitter
//! of the next `JITTER_SAMPLES` forward-delay samples (q_i − q_{i−1}, the change of the
//! queue the datagrams met, as the seed's IAT − P is for a rate-based sender). A queue
//! that shrinks right after the loss means the loss was a queue overflow: congestion →
//! multiplicative decrease of the estimate. Otherwise it was a transmission error and the
//! rate stays. The seed's rule alone misreads half of all random losses (jitter on an
//! empty queue is noise, negative half the time), so congestion also needs the queue to
//! have been near its recent peak at the moment of the loss — a drop-tail queue overflows
//! when full — and at least `max(1 ms, min_rtt/8)` deep.
//!
//! Every queue here is the **forward one-way** queueing delay (`oneway.rs`), not RTT minus
//! its minimum: on a link whose reverse direction is busy, the RTT grows with the peer's
//! queue, and reading that as ours made a sender drain a link it was not filling.
//!
//! Invariants: the pacing rate is positive and finite; the window is at least
//! `MIN_CWND_BYTES`; nothing here reads a clock.

use crate::Instant;
use core::time::Duration;

/// Gain while the forward queue is below half its target: probe for more.
const PROBE_UP: f64 = 1.25;
/// Gain while starting up or catching up with the packet-pair capacity.
const HIGH_GAIN: f64 = 2.0;
/// Jitter samples looked at after a loss.
const JITTER_SAMPLES: u32 = 3;
/// Multiplicative decrease on a congestion loss.
const DECREASE: f64 = 0.8;
/// Lowest pacing rate (bytes/s): 64 kbit/s.
const MIN_RATE: f64 = 8_000.0;
/// A path whose estimate is below the pairs' capacity by this factor catches up even
/// while a queue stands.
const STARVED: f64 = 4.0;
/// Gain of a cruising round that finds a standing queue.
const CRUISE_DRAIN: f64 = 0.9;

/// The forward queue a path aims at: a quarter of the minimum RTT, at least 10 ms. A
/// few packets of queue are what keep a link busy between our pacer's ticks and the inner
/// TCP's bursts: with 5 ms, simult-flows 10+10 (0/0 ms) took 8.3 s, with 10 ms 8.1 s, with
/// 20 ms no better.
fn queue_target(p: PathNow) -> Duration {
    (p.min_rtt / 4).max(Duration::from_millis(10))
}

/// Whether the forward queue stands above its target: the link is busy, so what it
/// delivers now is its capacity (`Path` then shortens the bandwidth filter's memory).
pub fn standing_queue(p: PathNow) -> bool {
    p.fwd_queue > queue_target(p)
}

/// The queue the drain decision reads: the standing queue where the samples of a round
/// spread by more than the target, else the smoothed one.
///
/// Why: a cellular link delivers in bursts of transmission opportunities, so each
/// datagram waits for the next burst even on a link far from full. On real driving traces
/// the smoothed reading stood at 20–60 ms on a link given a fifth of its rate, above the
/// target, and the drain held it there for seconds (4.8 Mbit/s offered, 1 Mbit/s paced).
/// Such waits spread a round's samples from near zero upwards, while a queue that stands
/// lifts them all; the smallest of the round is then the queue to drain. Where samples
/// spread little (a fixed-rate link), the smoothed reading stays: its round minimum lags a
/// growing queue, and draining on it let a 60-Mbit/s link's queue stand long enough for
/// a repair to miss its reorder hold.
fn drain_reading(p: PathNow) -> Duration {
    if p.fwd_queue.saturating_sub(p.fwd_standing) > queue_target(p) {
        p.fwd_standing
    } else {
        p.fwd_queue
    }
}

/// Shortest round (keeps the cycle meaningful on sub-millisecond paths).
const MIN_ROUND: Duration = Duration::from_millis(5);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Startup { full_bw: f64, stalled_rounds: u32 },
    Probe,
}

#[derive(Debug, Clone, Copy)]
struct LossCheck {
    queue_delay: Duration,
    prev_queue: Duration,
    jitter_sum_us: i64,
    samples: u32,
}

/// Counters of the loss discrimination.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LossCounters {
    /// Loss events judged congestion (the rate was decreased).
    pub congestion: u64,
    /// Loss events judged transmission errors (no back-off).
    pub error: u64,
}

/// What the controller needs to know about the path right now.
#[derive(Debug, Clone, Copy)]
pub struct PathNow {
    /// Bottleneck bandwidth estimate, bytes/s (0 = none yet).
    pub bw: f64,
    /// Minimum RTT.
    pub min_rtt: Duration,
    /// Smoothed RTT.
    pub srtt: Duration,
    /// Smoothed forward one-way queueing delay: what datagrams wait on average.
    pub fwd_queue: Duration,
    /// Standing forward one-way queueing delay (`oneway.rs`: the smallest of the last
    /// round or two, not a bursty link's momentary waits), at most `fwd_queue`.
    pub fwd_standing: Duration,
    /// Whether any delivery sample was taken while the path was busy: until then the
    /// estimate is only a lower bound (the path was given less than it could carry).
    pub busy: bool,
}

/// The controller.
#[derive(Debug, Clone)]
pub struct RateControl {
    mode: Mode,
    round_start: Instant,
    capacity: Option<f64>,
    check: Option<LossCheck>,
    counters: LossCounters,
    /// Recent peak of the queueing delay (µs), decaying by `PEAK_KEEP` per RTT sample.
    peak_queue_us: f64,
}

/// Per-sample retention of the queue-delay peak (about 100 samples to halve).
const PEAK_KEEP: f64 = 0.993;
/// A loss is a queue overflow only if the queue was at least this share of its peak.
const NEAR_PEAK: f64 = 0.6;

/// The outcome of a forward-queue sample for loss discrimination.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    /// No loss episode was judged by this sample.
    Keep,
    /// The episode was a transmission error: the rate stays.
    Error,
    /// The episode was congestion: lower the bandwidth estimate to this (bytes/s; 0 when
    /// there was no estimate to lower).
    Decrease(f64),
}

impl RateControl {
    /// A controller starting up at `now`.
    pub fn new(now: Instant) -> Self {
        RateControl {
            mode: Mode::Startup {
                full_bw: 0.0,
                stalled_rounds: 0,
            },
            round_start: now,
            capacity: None,
            check: None,
            counters: LossCounters::default(),
            peak_queue_us: 0.0,
        }
    }

    /// Starts up again at `now` (a path back from an outage: what it could carry before
    /// says little of now, and what it trickled during says less); the packet pairs'
    /// capacity and the counters are kept.
    pub fn restart(&mut self, now: Instant) {
        *self = RateControl {
            capacity: self.capacity,
            counters: self.counters,
            ..RateControl::new(now)
        };
    }

    /// Loss discrimination counters.
    pub fn loss_counters(&self) -> LossCounters {
        self.counters
    }

    /// The peer's packet-pair capacity estimate, bytes/s.
    pub fn capacity(&self) -> Option<f64> {
        self.capacity
    }

    /// Records the peer's packet-pair capacity estimate.
    pub fn on_capacity(&mut self, bytes_per_sec: f64) {
        if bytes_per_sec.is_finite() && bytes_per_sec > 0.0 {
            self.capacity = Some(bytes_per_sec);
        }
    }

    /// Whether the controller is still starting up.
    pub fn in_startup(&self) -> bool {
        matches!(self.mode, Mode::Startup { .. })
    }

    /// Advances rounds (call on every ACK).
    pub fn on_feedback(&mut self, now: Instant, p: PathNow) {
        // Rounds only count in startup; probing is steered by the queue, not by rounds.
        let Mode::Startup {
            full_bw,
            stalled_rounds,
        } = self.mode
        else {
            return;
        };
        if now.saturating_since(self.round_start) < p.min_rtt.max(MIN_ROUND) {
            return;
        }
        // Rounds in which the path was never busy say nothing about its capacity (BBR
        // ignores application-limited rounds too): a path the scheduler barely used kept
        // a first estimate of 7.5 kbit/s from one lone packet, left startup, and was
        // paced at the 64 kbit/s floor — unused for a whole 30-s lab run.
        // A standing queue does say something, busy or not: the link is full.
        if !p.busy && !standing_queue(p) {
            self.round_start = now;
            return;
        }
        self.round_start = now;
        // A queue standing at the bottleneck means the link is full, whatever the estimate
        // still does. (Leaving startup at the first such feedback was tried: queues from
        // bursts ended startup below the link's rate and made simult-flows slower.)
        self.mode = if p.bw >= full_bw * 1.25 && !standing_queue(p) {
            Mode::Startup {
                full_bw: p.bw,
                stalled_rounds: 0,
            }
        } else if stalled_rounds + 1 >= 3 {
            Mode::Probe
        } else {
            Mode::Startup {
                full_bw,
                stalled_rounds: stalled_rounds + 1,
            }
        };
    }

    fn gain(&self, p: PathNow, bw: f64) -> f64 {
        let base = match self.mode {
            Mode::Startup { .. } => HIGH_GAIN,
            // Above the target the estimate is a little high (a maximum of noisy
            // samples, or a link that slowed): drain instead of letting the queue grow.
            Mode::Probe if drain_reading(p) > queue_target(p) => CRUISE_DRAIN,
            Mode::Probe if p.fwd_queue < queue_target(p) / 2 => PROBE_UP,
            Mode::Probe => 1.0,
        };
        match self.capacity {
            // The pairs see room the delivery rate has not found yet: catch up fast.
            Some(c) if c > bw * 1.5 && base >= 1.0 => HIGH_GAIN,
            // So far below the pairs' capacity, a queue cannot be of our making (the
            // reading also carries the peer's processing delay and other flows):
            // draining here held a 10 Mbit/s path at 0.1 Mbit/s for 11 s.
            _ if self.starved(bw).is_some() => HIGH_GAIN,
            _ => base,
        }
    }

    /// The pairs' capacity, if the estimate `bw` is below it by `STARVED` or more.
    fn starved(&self, bw: f64) -> Option<f64> {
        self.capacity.filter(|&c| c > bw * STARVED)
    }

    /// Pacing rate in bytes/s. Before any estimate, and never less while starting up: the
    /// initial window per smoothed RTT.
    ///
    /// Why the floor in startup: the first samples of a session come while the inner TCP
    /// is itself in slow start, so they are application-limited and tiny (a few packets
    /// per round trip), and the first one replaced the initial-window rate. Paced at twice
    /// that trickle, the fast path's pacer closed on every burst of the inner TCP's slow
    /// start, the scheduler spilled packets onto the slow path, and the reorder wait
    /// behind them raised the inner RTT by the paths' delay difference — which ends the
    /// inner TCP's slow start (HyStart) at a window of a few dozen packets, far below the
    /// aggregate's BDP. CUBIC then needs seconds to grow. Simulated Wi-Fi/cellular trace
    /// pairs (mptraces 7_1, 11_1): goodput 73.9 → 80.3 and 71.6 → 78.8 Mbit/s over 30 s;
    /// in the lab, with the busy-round rule of `on_feedback`, 59.1 → 87.3 and 59.7 → 80.7
    /// (docs/AGGREGATION.md §2).
    pub fn pacing_rate(&self, p: PathNow, initial_window: u64) -> f64 {
        let initial = initial_window as f64 / p.srtt.as_secs_f64().max(1e-3);
        let bw = if p.bw <= 0.0 {
            initial
        } else if self.in_startup() {
            p.bw.max(initial)
        } else {
            p.bw
        };
        let rate = bw * self.gain(p, bw);
        // Far below what the packet pairs measure and with no queue standing, pace at half
        // the capacity: a path that was given little has a small estimate only because
        // it was given little, and the earliest-arrival scheduler feeds a path no faster
        // than its pacer allows, so doubling from a trickle's rate took seconds (a 10
        // Mbit/s path held at 0.1 Mbit/s for 11 s in simult-flows). Half the capacity
        // cannot build a queue by itself; its samples show the real rate within a round
        // trip, and a queue stops it.
        let floor = match self.starved(bw) {
            Some(c) if !standing_queue(p) => c / 2.0,
            _ => 0.0,
        };
        rate.max(floor).max(MIN_RATE)
    }

    /// A loss was detected; `latest_queue` is the newest forward queueing-delay sample.
    pub fn on_loss(&mut self, latest_queue: Duration) {
        if self.check.is_some() {
            return; // One verdict per loss episode.
        }
        self.check = Some(LossCheck {
            queue_delay: latest_queue,
            prev_queue: latest_queue,
            jitter_sum_us: 0,
            samples: 0,
        });
    }

    /// Whether a loss episode is being judged (its verdict is still to come).
    pub fn judging(&self) -> bool {
        self.check.is_some()
    }

    /// A forward queueing-delay sample; returns the verdict when a pending loss check
    /// completes.
    pub fn on_queue_sample(&mut self, queue: Duration, p: PathNow) -> Verdict {
        let q = queue.as_micros() as f64;
        self.peak_queue_us = q.max(self.peak_queue_us * PEAK_KEEP);
        let peak = self.peak_queue_us;
        let Some(c) = self.check.as_mut() else {
            return Verdict::Keep;
        };
        c.jitter_sum_us += queue.as_micros() as i64 - c.prev_queue.as_micros() as i64;
        c.prev_queue = queue;
        c.samples += 1;
        if c.samples < JITTER_SAMPLES {
            return Verdict::Keep;
        }
        let at_loss = c.queue_delay.as_micros() as f64;
        let queued = c.queue_delay >= (p.min_rtt / 8).max(Duration::from_millis(1))
            && at_loss >= NEAR_PEAK * peak;
        let shrinking = c.jitter_sum_us < 0;
        self.check = None;
        if queued && shrinking {
            self.counters.congestion += 1;
            // A queue overflowed: the pipe is full, whatever the estimate still does (BBR
            // v2 leaves startup on loss too). Starting up on, a path overshoots again and
            // again: an inner BBR flow over a 50 Mbit/s tbf kept both paths in startup
            // for 14 s, paced at ~500 Mbit/s, with ten overflows on the slow one.
            self.mode = Mode::Probe;
            Verdict::Decrease(p.bw * DECREASE)
        } else {
            self.counters.error += 1;
            Verdict::Error
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now_ms(ms: u64) -> Instant {
        Instant::from_micros(ms * 1000)
    }

    fn path(bw: f64) -> PathNow {
        PathNow {
            bw,
            min_rtt: Duration::from_millis(20),
            srtt: Duration::from_millis(22),
            fwd_queue: Duration::from_millis(1),
            fwd_standing: Duration::from_millis(1),
            busy: true,
        }
    }

    /// `p` with a queue of `q` standing (smoothed and standing readings alike, as on a
    /// fixed-rate link).
    fn queued(q: Duration, p: PathNow) -> PathNow {
        PathNow {
            fwd_queue: q,
            fwd_standing: q,
            ..p
        }
    }

    /// Feeds `n` rounds of 21 ms (one min_rtt of `path`) after `t` ms; returns the last.
    fn rounds(c: &mut RateControl, mut t: u64, n: usize, p: PathNow) -> u64 {
        for _ in 0..n {
            t += 21;
            c.on_feedback(now_ms(t), p);
        }
        t
    }

    /// A tiny first estimate (application-limited samples of the inner TCP's own slow
    /// start) does not pull a starting path below its initial window per round trip;
    /// once probing, the estimate rules.
    #[test]
    fn startup_paces_at_least_the_initial_window_per_rtt() {
        let mut c = RateControl::new(Instant::ZERO);
        let initial = 64_000.0 / 0.022;
        assert_eq!(c.pacing_rate(path(1e4), 64_000), HIGH_GAIN * initial);
        assert_eq!(c.pacing_rate(path(4e6), 64_000), HIGH_GAIN * 4e6);
        // Rounds without a busy sample do not end startup.
        let idle = PathNow {
            busy: false,
            ..path(1e4)
        };
        let t = rounds(&mut c, 0, 10, idle);
        assert!(c.in_startup());
        // A queue standing above its target ends it, busy or not: the link is full (an
        // inner BBR flow kept every sample application-limited, and startup lasted 14 s).
        let mut full = c.clone();
        rounds(&mut full, t, 3, queued(Duration::from_millis(15), idle));
        assert!(!full.in_startup());
        rounds(&mut c, t, 4, path(1e4));
        assert!(!c.in_startup());
        assert_eq!(c.pacing_rate(path(1e4), 64_000), PROBE_UP * 1e4);
    }

    #[test]
    fn startup_ends_when_bandwidth_stops_growing() {
        let mut c = RateControl::new(Instant::ZERO);
        let mut t = 0;
        for bw in [1e5, 2e5, 4e5, 8e5] {
            t += 21;
            c.on_feedback(now_ms(t), path(bw));
            assert!(c.in_startup());
        }
        for _ in 0..3 {
            t += 21;
            c.on_feedback(now_ms(t), path(8.5e5));
        }
        assert!(!c.in_startup());
        // No queue at the bottleneck yet (1 ms of a 10 ms target): probe upwards.
        assert_eq!(c.pacing_rate(path(1e6), 0), 1.25e6);
    }

    #[test]
    fn startup_ends_when_a_queue_stands() {
        let mut c = RateControl::new(Instant::ZERO);
        let queued = queued(Duration::from_millis(15), path(1e6));
        let mut bw = 1e5;
        for t in 1..=3 {
            bw *= 2.0;
            c.on_feedback(now_ms(t * 21), PathNow { bw, ..queued });
        }
        assert!(!c.in_startup());
    }

    #[test]
    fn gain_follows_the_forward_queue() {
        let mut c = RateControl::new(Instant::ZERO);
        c.mode = Mode::Probe;
        let at = |ms| queued(Duration::from_millis(ms), path(1e6));
        // Target max(10 ms, 20/4 ms) = 10 ms: below half of it probe, within hold, above
        // drain.
        assert_eq!(c.pacing_rate(at(1), 0), 1.25e6);
        assert_eq!(c.pacing_rate(at(8), 0), 1e6);
        assert_eq!(c.pacing_rate(at(12), 0), 0.9e6);
    }

    #[test]
    fn a_bursty_link_is_drained_only_for_a_queue_that_stands() {
        let mut c = RateControl::new(Instant::ZERO);
        c.mode = Mode::Probe;
        // Waits of 0-60 ms for the next burst, 40 ms on average, none standing: hold.
        let bursty = PathNow {
            fwd_queue: Duration::from_millis(40),
            fwd_standing: Duration::from_millis(1),
            ..path(1e6)
        };
        assert_eq!(c.pacing_rate(bursty, 0), 1e6);
        // Every datagram of the round waited 25 ms or more: drain.
        let standing = PathNow {
            fwd_standing: Duration::from_millis(25),
            ..bursty
        };
        assert_eq!(c.pacing_rate(standing, 0), 0.9e6);
        // Little spread: the smoothed reading decides, as on a fixed-rate link.
        let growing = PathNow {
            fwd_queue: Duration::from_millis(12),
            fwd_standing: Duration::from_millis(5),
            ..bursty
        };
        assert_eq!(c.pacing_rate(growing, 0), 0.9e6);
    }

    #[test]
    fn a_busy_reverse_direction_is_not_our_queue() {
        let mut c = RateControl::new(Instant::ZERO);
        c.mode = Mode::Probe;
        // RTT 40 ms over a 20 ms minimum because the peer's data queues ahead of our
        // ACKs, while our own direction has no queue: no reason to drain, probe.
        let busy_reverse = PathNow {
            srtt: Duration::from_millis(60),
            fwd_queue: Duration::ZERO,
            fwd_standing: Duration::ZERO,
            ..path(1e6)
        };
        assert_eq!(c.pacing_rate(busy_reverse, 0), 1.25e6);
        let own_queue = queued(Duration::from_millis(30), busy_reverse);
        assert_eq!(c.pacing_rate(own_queue, 0), 0.9e6);
    }

    #[test]
    fn packet_pairs_drive_fast_catch_up() {
        let mut c = RateControl::new(Instant::ZERO);
        c.mode = Mode::Probe;
        let holding = queued(Duration::from_millis(8), path(1e6));
        assert_eq!(c.pacing_rate(holding, 0), 1e6);
        c.on_capacity(3e6);
        assert_eq!(c.pacing_rate(holding, 0), 2e6);
        // Not while draining...
        let draining = queued(Duration::from_millis(12), holding);
        assert_eq!(c.pacing_rate(draining, 0), 0.9e6);
        // ...unless the estimate is so far below the capacity that the queue cannot be
        // ours.
        let starved = PathNow {
            bw: 1e5,
            ..draining
        };
        assert_eq!(c.pacing_rate(starved, 0), 2e5);
        // Starved with no queue standing: half the capacity at once.
        let starved_idle = queued(Duration::ZERO, starved);
        assert_eq!(c.pacing_rate(starved_idle, 0), 1.5e6);
    }

    fn verdict_after(c: &mut RateControl, at_loss_ms: u64, after_ms: [u64; 3]) -> Verdict {
        let q = |rtt_ms: u64| Duration::from_millis(rtt_ms.saturating_sub(20));
        c.on_loss(q(at_loss_ms));
        let mut v = Verdict::Keep;
        for r in after_ms {
            v = c.on_queue_sample(q(r), path(1e6));
        }
        v
    }

    #[test]
    fn queue_overflow_is_congestion_random_loss_is_not() {
        let mut c = RateControl::new(Instant::ZERO);
        assert!(c.in_startup());
        // Full queue at the loss (60 ms over a 20 ms base), draining after it.
        assert_eq!(
            verdict_after(&mut c, 80, [78, 74, 70]),
            Verdict::Decrease(0.8e6)
        );
        // An overflow also ends startup: the pipe is full.
        assert!(!c.in_startup());
        // Empty queue, jitter noise around the base: a transmission error.
        assert_eq!(verdict_after(&mut c, 20, [21, 20, 19]), Verdict::Error);
        // Queue present but still growing: the loss did not relieve it.
        assert_eq!(verdict_after(&mut c, 40, [41, 43, 44]), Verdict::Error);
        assert_eq!(
            c.loss_counters(),
            LossCounters {
                congestion: 1,
                error: 2
            }
        );
    }
}
