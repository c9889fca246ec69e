//! One direction of the emulated link, sans-IO: loss → drop-tail queue → rate → delay.
//!
//! The driver feeds frames with [`Pipeline::enqueue`]`(now, …)`, pulls the ones due with
//! [`Pipeline::poll_dequeue`]`(now)`, and sleeps until [`Pipeline::next_wakeup`]. Time is
//! injected (a `Duration` since the emulator started) and randomness comes from the
//! pipeline's own seeded ChaCha8 stream, so a run is a pure function of its inputs: the unit
//! and property tests drive this very code with a virtual clock.
//! Order of stages (Mahimahi's, netem's): a frame arriving while the direction is down is
//! dropped as an outage; else the loss model may drop it; else it joins the queue if it fits
//! (drop-tail); the rate stage releases it at the instant its last byte would be out; the
//! delay line adds delay and jitter. Work is done lazily at each call, in event-time order,
//! so late calls (a driver that woke up late) change no release or due time.
//! Invariants: a release never precedes arrival nor what the rate allows; every frame is
//! accounted in exactly one [`PipelineStats`] bucket; `now` must not go backwards.

use crate::delay::{DelayLine, DelaySpec, JitterDist};
use crate::loss::{LossModel, LossSpec};
use crate::outage::OutageSchedule;
use crate::queue::{DropTailQueue, QueueLimits};
use crate::rate::{RateModel, Server};
use crate::stats::PipelineStats;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::cell::Cell;
use std::time::Duration;

/// Default queue limit: 1000 frames, the usual txqueuelen of an Ethernet device.
pub const DEFAULT_QUEUE_PACKETS: u64 = 1000;

/// Everything configuring one direction.
#[derive(Debug, Clone, PartialEq)]
pub struct DirectionParams {
    /// Rate model.
    pub rate: RateModel,
    /// Delay, jitter and reordering.
    pub delay: DelaySpec,
    /// Loss model (`None`: no random loss).
    pub loss: Option<LossSpec>,
    /// Queue limits.
    pub queue: QueueLimits,
    /// Scheduled outages (times since start).
    pub outages: OutageSchedule,
}

impl Default for DirectionParams {
    fn default() -> Self {
        DirectionParams {
            rate: RateModel::Unlimited,
            delay: DelaySpec::default(),
            loss: None,
            queue: QueueLimits {
                bytes: None,
                packets: Some(DEFAULT_QUEUE_PACKETS),
            },
            outages: OutageSchedule::default(),
        }
    }
}

/// A live change to one direction.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// New rate model (a trace starts from its beginning now).
    Rate(RateModel),
    /// New fixed delay (applies to frames released from now on).
    Delay(Duration),
    /// New jitter amount.
    Jitter(Duration),
    /// New jitter shape.
    JitterDist(JitterDist),
    /// Allow or forbid reordering.
    Reorder(bool),
    /// New loss model.
    Loss(Option<LossSpec>),
    /// New byte limit of the queue.
    QueueBytes(Option<u64>),
    /// New frame limit of the queue.
    QueuePackets(Option<u64>),
    /// Take the direction down (`true`) or bring it back up (`false`).
    Down(bool),
}

/// What happened to an enqueued frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Accepted into the queue.
    Queued,
    /// Dropped by the loss model.
    DroppedLoss,
    /// Dropped because the queue was full.
    DroppedQueue,
    /// Dropped because the direction was down.
    DroppedOutage,
}

/// One direction of the emulated link.
pub struct Pipeline<P> {
    loss: LossModel,
    queue: DropTailQueue<P>,
    server: Server,
    /// When the head of the queue is out (`Server::completion`), once asked: it is asked
    /// several times per frame (each call, and the driver's `next_wakeup`) and changes only
    /// with the head or the rate stage, which clear it (`head_changed`).
    head_release: Cell<Option<Duration>>,
    line: DelayLine<P>,
    outages: OutageSchedule,
    manual_down: bool,
    /// Scheduled outage starts up to here have been acted on.
    outage_seen: Duration,
    /// Latest `now` seen; earlier values (a racing caller) are treated as this.
    last_now: Duration,
    rng: ChaCha8Rng,
    stats: PipelineStats,
}

impl<P> Pipeline<P> {
    /// A pipeline with `params`, its RNG seeded from (`seed`, `stream`) — give each direction
    /// its own stream so both are reproducible and independent.
    pub fn new(params: DirectionParams, seed: u64, stream: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(stream);
        Pipeline {
            loss: LossModel::new(params.loss),
            queue: DropTailQueue::new(params.queue),
            server: Server::new(&params.rate, Duration::ZERO),
            head_release: Cell::new(None),
            line: DelayLine::new(params.delay),
            outages: params.outages,
            manual_down: false,
            outage_seen: Duration::ZERO,
            last_now: Duration::ZERO,
            rng,
            stats: PipelineStats::default(),
        }
    }

    /// The current parameters.
    pub fn params(&self) -> DirectionParams {
        DirectionParams {
            rate: self.server.model(),
            delay: self.line.spec(),
            loss: self.loss.spec(),
            queue: self.queue.limits(),
            outages: self.outages.clone(),
        }
    }

    /// Whether the direction is down at `now`.
    pub fn is_down(&self, now: Duration) -> bool {
        self.manual_down || self.outages.is_down(now)
    }

    /// Offers a frame of `bytes` (its wire size) arriving at `now`.
    pub fn enqueue(&mut self, now: Duration, payload: P, bytes: u64) -> Verdict {
        let now = self.advance(now);
        self.stats.input.add(bytes);
        let verdict = if self.is_down(now) {
            self.stats.dropped_outage.add(bytes);
            Verdict::DroppedOutage
        } else if self.loss.should_drop(&mut self.rng) {
            self.stats.dropped_loss.add(bytes);
            Verdict::DroppedLoss
        } else if !self.queue.admits(bytes) {
            self.stats.dropped_queue.add(bytes);
            Verdict::DroppedQueue
        } else {
            self.queue.push(payload, bytes, now);
            if self.queue.len() == 1 {
                self.head_changed();
            }
            Verdict::Queued
        };
        // An idle or unlimited link may release the frame at once. Behind another frame it
        // cannot: everything due by `now` was released above.
        if verdict == Verdict::Queued && self.queue.len() == 1 {
            self.advance(now);
        }
        verdict
    }

    /// The next frame due at or before `now`, if any.
    pub fn poll_dequeue(&mut self, now: Duration) -> Option<P> {
        let now = self.advance(now);
        let (payload, bytes) = self.line.pop_due(now)?;
        self.stats.delivered.add(bytes);
        Some(payload)
    }

    /// When something next becomes due (a frame's delay ends or the queue head is out).
    pub fn next_wakeup(&self) -> Option<Duration> {
        match (self.release(), self.line.next_due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Applies a live change at `now`.
    pub fn apply(&mut self, now: Duration, change: Change) {
        let now = self.advance(now);
        let mut delay = self.line.spec();
        let mut limits = self.queue.limits();
        match change {
            Change::Rate(model) => {
                // Keep what the head frame already got through, then restart the stage.
                if let Some(h) = self.queue.front() {
                    let served = self.server.served_by(now, h.arrival, h.remaining);
                    if let Some(h) = self.queue.front_mut() {
                        h.remaining -= served;
                        h.arrival = h.arrival.max(now);
                    }
                }
                self.server = Server::new(&model, now);
            }
            Change::Delay(d) => delay.delay = d,
            Change::Jitter(j) => delay.jitter = j,
            Change::JitterDist(dist) => delay.dist = dist,
            Change::Reorder(r) => delay.reorder = r,
            Change::Loss(l) => self.loss.set(l),
            Change::QueueBytes(b) => limits.bytes = b,
            Change::QueuePackets(p) => limits.packets = p,
            Change::Down(down) => {
                if down && !self.manual_down {
                    self.flush(now);
                }
                self.manual_down = down;
            }
        }
        self.line.set_spec(delay);
        self.queue.set_limits(limits);
        self.head_changed();
        self.advance(now);
    }

    /// The counters, with gauges as of the last call.
    pub fn stats(&self, now: Duration) -> PipelineStats {
        let mut s = self.stats.clone();
        s.queued
            .add_many(self.queue.len() as u64, self.queue.bytes());
        s.in_flight
            .add_many(self.line.len() as u64, self.line.bytes());
        s.down = self.is_down(now);
        s
    }

    /// Drops everything queued at `at` as lost with the link.
    fn flush(&mut self, at: Duration) {
        let (frames, bytes) = self.queue.flush();
        self.stats.dropped_outage.add_many(frames, bytes);
        self.server.reset_idle(at);
        self.head_changed();
    }

    /// When the head of the queue is fully out, if there is one.
    fn release(&self) -> Option<Duration> {
        let h = self.queue.front()?;
        let t = self
            .head_release
            .get()
            .unwrap_or_else(|| self.server.completion(h.arrival, h.remaining));
        self.head_release.set(Some(t));
        Some(t)
    }

    /// The head of the queue or the rate stage's state changed: `release` must recompute.
    fn head_changed(&mut self) {
        self.head_release.set(None);
    }

    /// Processes, in time order, every release and outage start up to `now`; returns `now`
    /// clamped so time never goes backwards.
    fn advance(&mut self, now: Duration) -> Duration {
        let now = now.max(self.last_now);
        self.last_now = now;
        loop {
            let release = self.release();
            let outage = self.outages.start_in(self.outage_seen, now);
            match (release, outage) {
                (r, Some(s)) if r.is_none_or(|r| s <= r) => {
                    self.flush(s);
                    self.outage_seen = s;
                }
                (Some(r), _) if r <= now => {
                    let head = self.queue.pop().expect("release implies a head");
                    let at = self.server.complete(head.arrival, head.remaining);
                    self.head_changed();
                    self.line.push(at, head.payload, head.bytes, &mut self.rng);
                }
                _ => break,
            }
        }
        self.outage_seen = self.outage_seen.max(now);
        now
    }
}

#[cfg(test)]
#[path = "pipeline_tests.rs"]
mod tests;
