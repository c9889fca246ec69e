//! One path of a session: a (local link, remote address) pair with its own sequence
//! numbers, estimators, feedback and liveness.
//!
//! Sender side: every datagram gets a `path_seq`; ACK frames from the peer give RTT
//! samples, cumulative loss, delivery-rate samples and the bytes in flight; the rate
//! controller (`control.rs`) turns them into a pacing rate (`pacer.rs`) and a window.
//! Receiver side (`receiver.rs`): counts what arrives, measures packet pairs (`pair.rs`)
//! and schedules ACK and PAIR frames. Liveness: a path whose oldest
//! unacknowledged datagram is older than the detection time is `Down`; keepalive PINGs
//! are sent on paths nothing else is sent on, so this holds without user traffic, at the
//! rate the session's activity calls for (`liveness.rs`, `session/keepalive.rs`).
//!
//! Invariants: all counters are monotonic; a path never reports `Up` without having
//! received feedback; memory per path is bounded (fixed ring of sent records).

mod control;
mod gaps;
mod liveness;
mod loss;
mod oneway;
mod pacer;
mod pair;
mod rate;
mod receiver;
mod rtt;
mod sent;
mod tail;

pub use control::LossCounters;
pub use liveness::Keepalive;
pub use rate::{DeliveryRate, WindowedMaxRate};
pub use receiver::{Nacks, Received, MAX_NACK_RANGES};
pub use rtt::RttEstimator;

use crate::wire::AckFrame;
use crate::Instant;
use control::{PathNow, RateControl, Verdict};
use core::time::Duration;
use loss::LossRates;
use oneway::ForwardDelay;
use pacer::Pacer;
use pair::PairMeter;
use sent::{SentRecord, SentRing};
use std::net::SocketAddr;

/// Identifies a path within a session (chosen by the client: its link index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PathId(pub u8);

/// Liveness as seen by this side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathState {
    /// Feedback is recent.
    Up,
    /// Feedback is late; still used, but failover may be near.
    Suspect,
    /// No feedback within the detection time, or the local interface is gone.
    Down,
}

impl PathState {
    /// Lower-case name, as shown by `status`.
    pub fn as_str(self) -> &'static str {
        match self {
            PathState::Up => "up",
            PathState::Suspect => "suspect",
            PathState::Down => "down",
        }
    }
}

/// Send an ACK after this many datagrams received.
pub const ACK_EVERY: u32 = 8;
/// Shortest wait for an ACK after the first unacknowledged datagram (and the wait before
/// the path has an RTT sample).
pub const MIN_ACK_DELAY: Duration = Duration::from_millis(2);
/// Longest an ACK waits after the first unacknowledged datagram.
pub const MAX_ACK_DELAY: Duration = Duration::from_millis(10);

/// How long the receiver of a path may hold an ACK back: a quarter of the path's minimum
/// RTT, within [`MIN_ACK_DELAY`, `MAX_ACK_DELAY`] — Chromium QUIC's ACK decimation
/// (min_rtt / 4). Below `ACK_EVERY` × 8 datagrams per round trip the timer, not the count,
/// paces ACKs; a fixed 2 ms made a 3-Mbit/s path with a 60-ms RTT acknowledge every datagram
/// (one ACK datagram per data datagram, a third of all the datagrams a downstream stream
/// caused), where four ACKs per round trip still give the rate sampler and the window
/// their feedback. Both ends compute it from their own min RTT of the same path, so the
/// sender can size its window for the delay its peer will use.
pub fn ack_delay(min_rtt: Option<Duration>) -> Duration {
    min_rtt.map_or(MIN_ACK_DELAY, |r| {
        (r / 4).clamp(MIN_ACK_DELAY, MAX_ACK_DELAY)
    })
}
const MIN_CWND_BYTES: u64 = 32 * 1024;
const INITIAL_CWND_BYTES: u64 = 64 * 1024;

/// Counters shown by `status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PathCounters {
    /// Datagrams sent.
    pub tx_packets: u64,
    /// Bytes sent (UDP payload).
    pub tx_bytes: u64,
    /// Authenticated datagrams received.
    pub rx_packets: u64,
    /// Bytes received (UDP payload).
    pub rx_bytes: u64,
}

/// A narrow, copyable view of a path for schedulers (they never see the session).
#[derive(Debug, Clone, Copy)]
pub struct PathView {
    /// Which path.
    pub id: PathId,
    /// Liveness.
    pub state: PathState,
    /// Smoothed RTT.
    pub srtt: Duration,
    /// Minimum RTT.
    pub min_rtt: Duration,
    /// Whether any RTT sample exists.
    pub measured: bool,
    /// Bottleneck bandwidth estimate, bytes/s (0 when unknown).
    pub bandwidth_bps: f64,
    /// Bytes sent and not yet covered by feedback.
    pub inflight_bytes: u64,
    /// Sending window.
    pub cwnd_bytes: u64,
    /// Recent loss rate, 0..=1.
    pub loss: f64,
    /// Recent rate of losses judged transmission errors (not congestion), 0..=1.
    pub error_loss: f64,
    /// Since when the path has been continuously `Up` (for failback hysteresis).
    pub up_since: Option<Instant>,
    /// Pacing rate, bytes/s.
    pub pacing_bps: f64,
    /// When the pacer lets the next full-size datagram go (≤ the view's time: at once).
    pub ready_at: Instant,
    /// Whether the bandwidth estimate comes from a time the path was busy (else it only
    /// says what the path was given, not what it can carry).
    pub bw_valid: bool,
    /// Bottleneck capacity the peer measured with packet pairs, bytes/s (0 = unknown).
    pub capacity_bps: f64,
    /// Time since the bandwidth estimate was last refreshed by a sample taken while the
    /// path was busy (`Duration::MAX`: never).
    pub bw_age: Duration,
    /// Smoothed forward one-way queueing delay (`oneway.rs`).
    pub fwd_queue: Duration,
    /// What sending on the path costs, relative to the others (`PathConfig::cost`).
    pub cost: u32,
    /// On standby (`PathConfig::standby`): schedulers use it only while no other path is
    /// `Up` (`sched::preferred`).
    pub standby: bool,
}

impl PathView {
    /// Whether the path may carry new data.
    pub fn usable(&self) -> bool {
        self.state != PathState::Down
    }

    /// Whether the window allows `len` more bytes.
    pub fn has_window(&self, len: usize) -> bool {
        self.inflight_bytes + len as u64 <= self.cwnd_bytes
    }

    /// Whether `len` bytes may leave now: window, and a pacer that lets them go.
    pub fn may_send(&self, now: Instant, len: usize) -> bool {
        self.has_window(len) && self.ready_at <= now
    }

    /// One-way delay a datagram sent now should see, in seconds: half the minimum RTT
    /// plus the forward queue. Not srtt/2: the reverse direction's queue (the peer's data
    /// ahead of our ACKs) would make a path look later than its data arrives.
    pub fn forward_delay_s(&self) -> f64 {
        self.min_rtt.as_secs_f64() / 2.0 + self.fwd_queue.as_secs_f64()
    }
}

/// What a datagram carries, as far as the path's accounting cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SentKind {
    /// An IP packet (elicits an ACK, counts for pacing pairs and rate samples).
    Data,
    /// A keepalive PING (elicits an ACK; its rate sample says nothing about capacity).
    Probe,
    /// Feedback only (never acknowledged).
    AckOnly,
}

/// Timing parameters of a path.
#[derive(Debug, Clone, Copy)]
pub struct PathConfig {
    /// A path with no feedback for this long is `Down`.
    pub detect: Duration,
    /// A path nothing eliciting was sent on for this long is probed, while the session
    /// carries user data (an idle session probes every `SessionConfig::keepalive`).
    pub probe_interval: Duration,
    /// Relative cost of a byte on the path (a metered LTE link costs more than DSL; default
    /// 1): redundancy and FEC parity go on the cheapest paths that meet their targets.
    pub cost: u32,
    /// On standby: live, but carrying data only while no other path is `Up` (a detour
    /// that loses less shares its bottleneck, `detour/manager_shared.rs`).
    pub standby: bool,
}

impl PathConfig {
    /// Parameters derived from the detection time (probe four times per detection time).
    pub fn from_detect(detect: Duration) -> Self {
        PathConfig {
            detect,
            probe_interval: detect / 4,
            cost: 1,
            standby: false,
        }
    }
}

/// One path.
#[derive(Debug)]
pub struct Path {
    id: PathId,
    remote: SocketAddr,
    cfg: PathConfig,
    available: bool,
    state: PathState,
    up_since: Option<Instant>,
    // Sender side.
    next_seq: u32,
    sent: SentRing,
    cum_sent_bytes: u64,
    largest_acked: Option<u32>,
    acked_cum_bytes: u64,
    first_unacked_time: Option<Instant>,
    /// When the path last came back from `Down`: the liveness clock never starts earlier
    /// (`revive`).
    revived_at: Instant,
    /// Back from `Down` on an ACK of a datagram from before its return, and no ACK yet of
    /// one sent since: shown to schedulers as on standby (`revive`).
    on_probation: bool,
    last_sent_time: Option<Instant>,
    last_data_sent: Option<Instant>,
    /// `path_seq` of the last data datagram sent, and when the last new ACK came (the
    /// tail loss probe's clock, `tail.rs`).
    last_data_seq: Option<u32>,
    last_ack_at: Option<Instant>,
    /// The clock reading a tail loss probe was sent for.
    tail_probed: Option<Instant>,
    /// One past the highest datagram a NACK named, and the datagrams NACKs named since the
    /// last ACK (the losses `LossRates` counts).
    nacked_upto: Option<u32>,
    nacked: u64,
    losses: LossRates,
    rtt: RttEstimator,
    /// `liveness::suspect_after` of `rtt`, kept with it: the deadlines need it after
    /// every event, the RTT changes only with feedback.
    suspect_after: Duration,
    rate: DeliveryRate,
    control: RateControl,
    fwd: ForwardDelay,
    pacer: Pacer,
    app_limited: bool,
    // Receiver side.
    pair: PairMeter,
    rx_largest: Option<(u32, Instant)>,
    /// Loss detection: missing datagrams held for the reordering window (`gaps.rs`).
    gaps: gaps::GapWindow,
    /// Datagrams declared lost (first `path_seq`, count) and not yet reported in a NACK.
    rx_nack: receiver::NackRanges,
    /// The last NACKs sent, and how many more ACKs repeat them (a lost NACK loses a repair).
    rx_nack_repeat: Option<(receiver::Nacks, u8)>,
    rx_count: u64,
    /// `rx_count` when this path's ACK last crossed on another path (`crossing_ack`).
    rx_crossed: u64,
    rx_bytes: u64,
    unacked_rx: u32,
    ack_deadline: Option<Instant>,
    counters: PathCounters,
}

impl Path {
    /// A new path towards `remote`; it starts `Down` until feedback proves it.
    pub fn new(id: PathId, remote: SocketAddr, now: Instant, cfg: PathConfig) -> Self {
        let rtt = RttEstimator::new(Duration::from_millis(100));
        Path {
            id,
            remote,
            cfg,
            available: true,
            state: PathState::Down,
            up_since: None,
            next_seq: 0,
            sent: SentRing::new(),
            cum_sent_bytes: 0,
            largest_acked: None,
            acked_cum_bytes: 0,
            first_unacked_time: None,
            revived_at: Instant::ZERO,
            on_probation: false,
            last_sent_time: None,
            last_data_sent: None,
            last_data_seq: None,
            last_ack_at: None,
            tail_probed: None,
            nacked_upto: None,
            nacked: 0,
            losses: LossRates::default(),
            rtt,
            suspect_after: liveness::suspect_after(&rtt, cfg.detect),
            rate: DeliveryRate::new(now),
            control: RateControl::new(now),
            fwd: ForwardDelay::default(),
            pacer: Pacer::new(now),
            app_limited: false,
            pair: PairMeter::new(u64::from(id.0) + 1),
            rx_largest: None,
            gaps: gaps::GapWindow::default(),
            rx_nack: receiver::NackRanges::new(),
            rx_nack_repeat: None,
            rx_count: 0,
            rx_crossed: 0,
            rx_bytes: 0,
            unacked_rx: 0,
            ack_deadline: None,
            counters: PathCounters::default(),
        }
    }

    /// Path id.
    pub fn id(&self) -> PathId {
        self.id
    }

    /// Where datagrams on this path are sent.
    pub fn remote(&self) -> SocketAddr {
        self.remote
    }

    /// Follows the peer to a new address (roaming); returns whether it changed.
    pub fn set_remote(&mut self, addr: SocketAddr) -> bool {
        let changed = self.remote != addr;
        self.remote = addr;
        changed
    }

    /// Liveness.
    pub fn state(&self) -> PathState {
        self.state
    }

    /// Counters.
    pub fn counters(&self) -> PathCounters {
        self.counters
    }

    /// RTT estimator.
    pub fn rtt(&self) -> &RttEstimator {
        &self.rtt
    }

    /// Marks the local interface (un)usable; an unavailable path is `Down` at once.
    pub fn set_available(&mut self, now: Instant, available: bool) {
        self.available = available;
        if !available {
            self.set_state(now, PathState::Down);
        }
    }

    /// Whether the local interface is usable.
    pub fn available(&self) -> bool {
        self.available
    }

    fn set_state(&mut self, now: Instant, s: PathState) {
        if s == PathState::Up && self.state != PathState::Up && self.up_since.is_none() {
            self.up_since = Some(now);
        }
        if s == PathState::Down {
            self.up_since = None;
        }
        self.state = s;
    }

    /// Window: twice the estimated bandwidth-delay product (with room for delayed
    /// feedback), plus what the reverse direction's queue holds back. Pacing sets the
    /// rate; the window only caps what is in flight when feedback stalls, so a path that
    /// dies cannot swallow much more than two BDPs of packets. The reverse queue (RTT
    /// above its minimum that is not our forward queue) delays our feedback, not our
    /// data: without it the window, not the link, limited a path whose reverse direction
    /// was busy (10 % of a 10 Mbit/s link in a bidirectional transfer).
    pub fn cwnd_bytes(&self) -> u64 {
        let bw = self.rate.bandwidth();
        if bw <= 0.0 {
            return INITIAL_CWND_BYTES;
        }
        let rtt = self.rtt.min() + self.ack_delay() * 2;
        let reverse_queue = self
            .rtt
            .smoothed()
            .saturating_sub(self.rtt.min())
            .saturating_sub(self.fwd.smoothed());
        let bdp = bw * rtt.as_secs_f64();
        ((2.0 * bdp + bw * reverse_queue.as_secs_f64()) as u64 + 16 * 1024).max(MIN_CWND_BYTES)
    }

    /// This path's ACK delay ([`ack_delay`] of its min RTT).
    fn ack_delay(&self) -> Duration {
        ack_delay(self.rtt.has_sample().then(|| self.rtt.min()))
    }

    /// The round over which the standing queue is the minimum (`oneway.rs`): the minimum
    /// RTT, at least 20 ms so a LAN path's round holds a few samples.
    fn round(&self) -> Duration {
        self.rtt.min().max(Duration::from_millis(20))
    }

    fn now_view(&self, now: Instant) -> PathNow {
        PathNow {
            bw: self.rate.bandwidth(),
            min_rtt: self.rtt.min(),
            srtt: self.rtt.smoothed(),
            fwd_queue: self.fwd.queue_at(now, self.last_data_sent),
            fwd_standing: self.fwd.standing_at(now, self.last_data_sent),
            busy: self.rate.valid(),
        }
    }

    /// Pacing rate at `now`, bytes/s.
    pub fn pacing_rate(&self, now: Instant) -> f64 {
        self.control
            .pacing_rate(self.now_view(now), INITIAL_CWND_BYTES)
    }

    /// Loss discrimination counters (congestion vs transmission error).
    pub fn loss_counters(&self) -> LossCounters {
        self.control.loss_counters()
    }

    /// Whether the rate controller is still in startup (gain 2).
    pub fn in_startup(&self) -> bool {
        self.control.in_startup()
    }

    /// The peer's packet-pair capacity estimate, bytes/s.
    pub fn capacity(&self) -> Option<f64> {
        self.control.capacity()
    }

    /// Marks the path application-limited: it had room but nothing to send, so delivery
    /// samples taken until it is busy again understate what it can carry.
    pub fn set_app_limited(&mut self, limited: bool) {
        self.app_limited = limited;
    }

    /// The peer measured the path's capacity with packet pairs.
    pub fn on_pair_report(&mut self, capacity_kbps: u32) {
        self.control
            .on_capacity(f64::from(capacity_kbps) * 1000.0 / 8.0);
    }

    /// Bytes the peer has reported delivered on this path, in all.
    pub fn delivered_bytes(&self) -> u64 {
        self.rate.delivered()
    }

    /// Bytes sent but not covered by feedback yet.
    pub fn inflight_bytes(&self) -> u64 {
        self.cum_sent_bytes - self.acked_cum_bytes
    }

    /// The scheduler's view at `now`.
    pub fn view(&self, now: Instant) -> PathView {
        let path_now = self.now_view(now);
        let pacing_bps = self.control.pacing_rate(path_now, INITIAL_CWND_BYTES);
        PathView {
            id: self.id,
            state: self.state,
            srtt: self.rtt.smoothed(),
            min_rtt: self.rtt.min(),
            measured: self.rtt.has_sample(),
            bandwidth_bps: self.rate.bandwidth(),
            inflight_bytes: self.inflight_bytes(),
            cwnd_bytes: self.cwnd_bytes(),
            loss: self.losses.all(),
            error_loss: self.losses.errors(),
            up_since: self.up_since,
            pacing_bps,
            ready_at: self.pacer.ready_at(now, pacing_bps, 1500),
            bw_valid: self.rate.valid(),
            capacity_bps: self.control.capacity().unwrap_or(0.0),
            bw_age: self.rate.busy_age(now).unwrap_or(Duration::MAX),
            fwd_queue: self.fwd.queue_at(now, self.last_data_sent),
            cost: self.cfg.cost,
            standby: self.cfg.standby || self.on_probation,
        }
    }

    /// Sets the path's relative cost (`PathConfig::cost`).
    pub fn set_cost(&mut self, cost: u32) {
        self.cfg.cost = cost;
    }

    /// Whether the path is `Up` and off probation: what is sent on it now arrives.
    pub fn delivers_for_sure(&self) -> bool {
        self.state == PathState::Up && !self.on_probation
    }

    /// Whether the path is on standby (`PathConfig::standby`).
    pub fn is_standby(&self) -> bool {
        self.cfg.standby
    }

    /// Puts the path on standby or takes it off (`PathConfig::standby`).
    pub fn set_standby(&mut self, standby: bool) {
        self.cfg.standby = standby;
    }

    /// Records a datagram of `bytes` being sent now; returns its `path_seq`. Only
    /// eliciting datagrams (DATA, PING) start the liveness clock: an ACK-only datagram
    /// is never acknowledged (else two idle peers would ACK each other's ACKs forever).
    pub fn on_sent(&mut self, now: Instant, bytes: usize, kind: SentKind) -> u32 {
        let eliciting = kind != SentKind::AckOnly;
        let data = kind == SentKind::Data;
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        self.cum_sent_bytes += bytes as u64;
        let idle = self.first_unacked_time.is_none();
        let pacing = self.pacing_rate(now);
        if data && idle {
            // Idle for longer than the pacer kept it (twice this datagram's pacing
            // interval, at least the rate sampler's floor): the application had nothing
            // to send, so restart the delivery clock. A path paced below one datagram per
            // round trip is "idle" before every datagram, and is not restarted.
            let paced = Duration::from_secs_f64(2.0 * bytes as f64 / pacing.max(1.0));
            let gap = self.last_data_sent.map(|t| now.saturating_since(t));
            if gap.is_none_or(|g| g > paced.max(rate::MIN_PEER_INTERVAL)) {
                self.rate.restart(now);
            }
        }
        if data {
            self.fwd.on_data_sent(now, self.last_data_sent);
            self.last_data_sent = Some(now);
            self.last_data_seq = Some(seq);
        }
        // A keepalive proves no rate at all (its sample is its own tiny rate; taken as a
        // first estimate it held a path at 64 kbit/s while the pacing cap let it grow
        // only 2x per round trip). A datagram sent from idle is application-limited: its
        // sample spans the idle time. (Treating a path as busy, whatever the session had
        // to send, while a queue built at its bottleneck was tried: the queue reading
        // includes the peer's processing delay, and stale readings let low start-up
        // samples replace good estimates; simult-flows 1/25 ms went from 8.8 to 13 s.)
        let app_limited = self.app_limited || !data || idle;
        // No sample may exceed what the datagram could prove: the rate it was paced at,
        // or the bottleneck capacity the peer's packet pairs measure (a burst the
        // scheduler put on a little-used path arrives at the link's rate, and that is
        // how such a path learns its rate fast).
        let cap = pacing.max(self.control.capacity().unwrap_or(0.0));
        let rate = self
            .rate
            .snapshot(app_limited, if data { cap } else { 0.0 });
        self.pacer.on_sent(now, pacing, bytes, data);
        self.sent.insert(
            SentRecord {
                seq,
                time: now,
                cum_bytes: self.cum_sent_bytes,
                rate,
                eliciting,
            },
            self.largest_acked,
        );
        if eliciting && self.first_unacked_time.is_none() {
            self.first_unacked_time = Some(now);
        }
        if eliciting {
            // ACK-only datagrams do not count as activity: a side that only acknowledges
            // must still PING, or its own RTT and liveness view would go stale.
            self.last_sent_time = Some(now);
        }
        self.counters.tx_packets += 1;
        self.counters.tx_bytes += bytes as u64;
        seq
    }

    /// Processes the peer's feedback about this path. `peer_receive_us` is when the peer
    /// received the acknowledged datagram, in its clock (the carrying datagram's
    /// `send_time_us` minus the ACK's delay).
    pub fn on_ack(&mut self, now: Instant, ack: &AckFrame, peer_receive_us: u32) {
        let newer = self
            .largest_acked
            .is_none_or(|l| ack.largest.wrapping_sub(l) as i32 > 0);
        if !newer || ack.largest.wrapping_sub(self.next_seq) as i32 >= 0 {
            // Old feedback, or feedback for something never sent: ignore.
            return;
        }
        let rec = self.sent.get(ack.largest).copied();
        // Whether the acknowledged datagram came back within the Suspect time the path
        // had before this sample: proof that the path delivers on time now (`timely`).
        let timely = rec.is_some_and(|r| now.saturating_since(r.time) <= self.suspect_after);
        // A datagram sent before the path came back from `Down` waited out the outage: its
        // RTT, queue and rate say nothing of the path now (`revive`).
        let rec = rec.filter(|r| r.time >= self.revived_at);
        if let Some(r) = rec {
            let sample = now.saturating_since(r.time);
            let delay = Duration::from_micros(u64::from(ack.ack_delay_us));
            let corrected = if sample > delay + self.rtt.min() / 2 {
                sample - delay
            } else {
                sample
            };
            self.rtt.on_sample(corrected);
            self.suspect_after = liveness::suspect_after(&self.rtt, self.cfg.detect);
            self.acked_cum_bytes = self.acked_cum_bytes.max(r.cum_bytes);
            let queue = self.fwd.on_sample(
                now,
                r.time,
                peer_receive_us,
                self.last_data_sent,
                self.round(),
            );
            match self.control.on_queue_sample(queue, self.now_view(now)) {
                Verdict::Keep => {}
                Verdict::Error => self.losses.settle_as_errors(),
                Verdict::Decrease(bw) => {
                    if bw > 0.0 {
                        self.rate.reset_to(now, bw);
                    }
                    self.losses.settle_as_congestion();
                }
            }
        }
        // The datagrams the peer declared lost since the last feedback (`on_nack`). Whether
        // they were congestion or transmission errors is known once the controller's
        // verdict on the episode comes (`loss.rs`).
        if self
            .losses
            .on_feedback(ack.largest, core::mem::take(&mut self.nacked))
        {
            self.control.on_loss(self.fwd.queue());
        }
        if !self.control.judging() {
            self.losses.settle_as_errors();
        }
        self.rate.on_ack(
            now,
            ack.recv_bytes,
            Some(peer_receive_us),
            rec.map(|r| (r.rate, r.time)),
        );
        self.control.on_feedback(now, self.now_view(now));
        // While a queue stands at the bottleneck the link is busy and delivers exactly its
        // capacity: remember maxima only over the last few RTTs, so a link that slowed
        // (Wi-Fi fade, cellular scheduling) is believed within a round trip, not seconds.
        // Round trips without the queue (the minimum): the queue a slowed link builds
        // swells the smoothed RTT, and four of those kept a 39 Mbit/s maximum for 600 ms
        // on a link down to 4, which was given twice its queue's worth meanwhile.
        let window = if control::standing_queue(self.now_view(now)) {
            (self.rtt.min() * 4).max(Duration::from_millis(200))
        } else {
            (self.rtt.smoothed() * 10).clamp(Duration::from_secs(1), Duration::from_secs(4))
        };
        self.rate.set_window(now, window);
        self.largest_acked = Some(ack.largest);
        self.last_ack_at = Some(now);
        self.first_unacked_time = self.first_eliciting_after(ack.largest, now);
        if rec.is_some_and(|r| r.time >= self.revived_at) {
            self.on_probation = false;
        }
        if self.available {
            match self.state {
                PathState::Down => self.revive(now, timely),
                // An ACK of a datagram that waited past the path's Suspect time (a link
                // trickling out its queue) does not clear a suspicion (`liveness.rs`).
                PathState::Suspect if !timely => return,
                _ => {}
            }
            self.set_state(now, PathState::Up);
        }
    }
}

#[cfg(test)]
mod tests;
