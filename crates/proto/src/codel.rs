//! One flow's queue at the ingress of `aggregate` traffic, with CoDel dropping (RFC 8289);
//! `fq_codel.rs` keeps one per flow.
//!
//! Packets wait here while every path is out of window. A plain tail-drop queue would let
//! the wait grow to the queue's size (bufferbloat: 1 MB at 10 Mbit/s is 800 ms); CoDel
//! instead drops from the head when the *sojourn time* has stayed above `TARGET` for an
//! `INTERVAL`, at a rate that grows with the square root of the drop count, so the inner
//! TCP sees an early loss and slows down while the standing queue stays near `TARGET`.
//!
//! Small packets (up to `SMALL_PACKET` bytes: voice frames, pure ACKs, DNS) are never
//! dropped at the head. A drop is a congestion signal, and these flows do not answer it: a
//! voice codec keeps its rate, a dropped ACK relieves nothing. In its own flow queue
//! (`fq_codel.rs`) such a flow, sending less than its share, only stands when the paths
//! stall, an outage the sender has not detected yet. CoDel then dropped the call's
//! packets: `aggregate` lost one voice packet per run on a cellular driving pair, while both
//! links were out, once the backlog of 8 frames outlasted an interval. They stay bounded
//! by the byte limit, as every packet does.
//!
//! Invariants: bounded in bytes (tail drop beyond `max_bytes`); FIFO; every dropped packet
//! is counted. Packets get their session sequence number only when they leave, so a drop
//! here never leaves a hole the receiver would wait for.

use crate::sched::SMALL_PACKET;
use crate::Instant;
use core::time::Duration;
use std::collections::VecDeque;
use std::sync::Arc;

/// Acceptable standing queue delay (RFC 8289's default; see `set_interval`).
pub const TARGET: Duration = Duration::from_millis(5);
/// Window over which the sojourn time must stay above `TARGET` before dropping starts.
pub const INTERVAL: Duration = Duration::from_millis(100);
/// Longest interval `set_interval` accepts.
pub const MAX_INTERVAL: Duration = Duration::from_secs(1);

/// Drop counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueDrops {
    /// Dropped by CoDel at the head.
    pub codel: u64,
    /// Dropped at the tail because the byte bound was reached.
    pub overflow: u64,
}

/// A CoDel-managed FIFO of IP packets.
#[derive(Debug)]
pub struct CodelQueue {
    q: VecDeque<(Instant, Arc<[u8]>)>,
    bytes: usize,
    max_bytes: usize,
    first_above: Option<Instant>,
    dropping: bool,
    drop_next: Instant,
    count: u32,
    last_count: u32,
    drops: QueueDrops,
    target: Duration,
    interval: Duration,
    ramping: bool,
    stalled: bool,
}

impl CodelQueue {
    /// A queue bounded at `max_bytes`.
    pub fn new(max_bytes: usize) -> Self {
        CodelQueue {
            q: VecDeque::new(),
            bytes: 0,
            max_bytes,
            first_above: None,
            dropping: false,
            drop_next: Instant::ZERO,
            count: 0,
            last_count: 0,
            drops: QueueDrops::default(),
            target: TARGET,
            interval: INTERVAL,
            ramping: false,
            stalled: false,
        }
    }

    /// Sets the interval to the worst round trip the queue's traffic sees (RFC 8289 §4.4:
    /// the interval should be on the order of the worst-case RTT; a shorter one drops
    /// before the inner TCP could have reacted to the last drop), at least `INTERVAL`.
    ///
    /// The target is half the flows' base round trip `rtt` (the fastest path carrying
    /// data; at least `TARGET` and RFC 8289's 5 % of the interval), not RFC 8289's 5 ms: after a drop a CUBIC flow's window falls
    /// to 0.7 of what filled the path and its queue, and it keeps the path busy only if
    /// that queue held about 0.43 of a round trip; on a long path a 5-ms queue left it
    /// below the path's rate for seconds after each drop (one CUBIC flow over a 62-ms
    /// detour: 0.85 × plain TCP; at half the RTT 0.91, in the same runs). The fastest path,
    /// not the slowest: half of a 120-ms path's RTT let the queue stand so long that a
    /// 30+20+10 Mbit/s aggregate lost 6 %. The longer standing queue delays only the flow
    /// that builds it: `fq_codel.rs` serves every other flow from its own queue first.
    pub fn set_interval(&mut self, interval: Duration, rtt: Duration) {
        self.interval = interval.clamp(INTERVAL, MAX_INTERVAL);
        self.target = (self.interval / 20).max(TARGET).max(rtt / 2);
    }

    /// Appends a packet; false (and counted) if the byte bound is reached.
    pub fn push(&mut self, now: Instant, packet: Arc<[u8]>) -> bool {
        if self.bytes + packet.len() > self.max_bytes {
            self.drops.overflow += 1;
            return false;
        }
        self.bytes += packet.len();
        self.q.push_back((now, packet));
        true
    }

    /// Whether the queue is empty.
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Bytes queued.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Packets queued.
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// The head packet, as it is (no CoDel decision).
    pub fn front(&self) -> Option<&Arc<[u8]>> {
        self.q.front().map(|(_, p)| p)
    }

    /// Drop counters.
    pub fn drops(&self) -> QueueDrops {
        self.drops
    }

    /// Whether the paths draining this queue are still finding their rates (startup).
    /// The queue that builds meanwhile is mostly the senders' ignorance, not a link's
    /// limit: dropping at the usual target would end the inner TCP's slow start at a
    /// fraction of what the links carry — one such drop in the first second held a
    /// Wi-Fi + LTE pair at the best link's rate for ten seconds while CUBIC crawled back.
    /// So while ramping the target is one interval (a round trip's worth of queue) instead
    /// of 5 % of it. Not dropping at all was tried: a slow start then overshot into the
    /// byte bound and lost hundreds of packets at once (simulator, 20+20 Mbit/s at 5/20 ms:
    /// 2 287 retransmissions, goodput 30.5 → 13.8 Mbit/s).
    pub fn set_ramping(&mut self, ramping: bool) {
        self.ramping = ramping;
    }

    /// Whether no path draining this queue is `Up` (each in doubt or down): the queue
    /// that stands then is an outage, not congestion, and dropping from it would lose
    /// what store-and-forward (`session/store.rs`) holds once every path is `Down`, or
    /// sends once one is back. Stalled, CoDel does not drop (the byte bound still
    /// holds) and starts afresh when the queue drains again.
    pub fn set_stalled(&mut self, stalled: bool) {
        if stalled {
            self.first_above = None;
            self.dropping = false;
        }
        self.stalled = stalled;
    }

    /// The packet that would leave next, after CoDel has dropped what it must.
    pub fn head(&mut self, now: Instant) -> Option<&Arc<[u8]>> {
        while let Some((enq, p)) = self.q.front() {
            // A small packet is never dropped (see the module doc).
            if p.len() <= SMALL_PACKET
                || self.stalled
                || !self.should_drop(now, now.saturating_since(*enq))
            {
                break;
            }
            self.take();
            self.drops.codel += 1;
        }
        self.q.front().map(|(_, p)| p)
    }

    /// Removes the newest packet (room for another flow's, `fq_codel.rs`).
    pub fn take_newest(&mut self) -> Option<Arc<[u8]>> {
        let (_, p) = self.q.pop_back()?;
        self.bytes -= p.len();
        if self.q.is_empty() {
            self.first_above = None;
        }
        Some(p)
    }

    /// Removes the head packet.
    pub fn take(&mut self) -> Option<Arc<[u8]>> {
        let (_, p) = self.q.pop_front()?;
        self.bytes -= p.len();
        if self.q.is_empty() {
            self.first_above = None;
        }
        Some(p)
    }

    /// RFC 8289's state machine, evaluated for the head packet's sojourn time.
    fn should_drop(&mut self, now: Instant, sojourn: Duration) -> bool {
        let target = if self.ramping {
            self.interval
        } else {
            self.target
        };
        if sojourn < target || self.bytes <= 1500 {
            self.first_above = None;
            self.dropping = false;
            return false;
        }
        let above_long = match self.first_above {
            None => {
                self.first_above = Some(now + self.interval);
                false
            }
            Some(t) => now >= t,
        };
        if self.dropping {
            if now >= self.drop_next {
                self.count += 1;
                self.drop_next = self.control_law(self.drop_next);
                return true;
            }
            return false;
        }
        if above_long {
            self.dropping = true;
            // Resume near the previous drop rate if the last episode was recent.
            let recent = now.saturating_since(self.drop_next) < self.interval * 16;
            self.count = if recent && self.count > self.last_count + 2 {
                self.count - self.last_count
            } else {
                1
            };
            self.last_count = self.count;
            self.drop_next = self.control_law(now);
            return true;
        }
        false
    }

    fn control_law(&self, t: Instant) -> Instant {
        t + self.interval.div_f64(f64::from(self.count.max(1)).sqrt())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: u64) -> Instant {
        Instant::from_micros(x * 1000)
    }

    #[test]
    fn short_queues_are_never_dropped() {
        let mut q = CodelQueue::new(1 << 20);
        for i in 0..1000 {
            q.push(ms(i), Arc::from(vec![0u8; 1000]));
            // Served 1 ms later: sojourn 1 ms < target.
            if i > 0 {
                assert!(q.head(ms(i + 1)).is_some());
                q.take();
            }
        }
        assert_eq!(q.drops(), QueueDrops::default());
    }

    /// Arrivals at 2 packets/ms, service at 1 packet/ms for `until` ms: the sojourn time
    /// only grows (0.5 ms per ms). Returns the times (ms) of CoDel's drops.
    fn overloaded(q: &mut CodelQueue, until: u64) -> Vec<u64> {
        let mut drop_times = vec![];
        for t in 0..until {
            for _ in 0..2 {
                q.push(ms(t), Arc::from(vec![0u8; 1000]));
            }
            let before = q.drops().codel;
            if q.head(ms(t)).is_some() {
                q.take();
            }
            for _ in before..q.drops().codel {
                drop_times.push(t);
            }
        }
        drop_times
    }

    #[test]
    fn persistent_queue_is_dropped_at_a_rising_rate() {
        // CoDel must wait one INTERVAL above TARGET, then drop ever faster (the square
        // root control law), which a responsive TCP answers by slowing down.
        let mut q = CodelQueue::new(100 << 20);
        let drop_times = overloaded(&mut q, 4000);
        // Sojourn passes TARGET at t ≈ 5 ms; no drop before TARGET + INTERVAL.
        assert!(drop_times[0] >= 100, "first drop at {} ms", drop_times[0]);
        let first_half = drop_times.iter().filter(|&&t| t < 2000).count();
        let second_half = drop_times.len() - first_half;
        assert!(
            second_half > first_half,
            "{first_half} then {second_half}: rate must rise"
        );
        assert_eq!(q.drops().overflow, 0);
    }

    #[test]
    fn while_the_paths_ramp_up_a_round_trip_of_queue_is_tolerated() {
        let first_drop = |ramping: bool| {
            let mut q = CodelQueue::new(100 << 20);
            q.set_ramping(ramping);
            overloaded(&mut q, 2000)
                .first()
                .copied()
                .unwrap_or(u64::MAX)
        };
        // Normal: above 5 ms from t ≈ 10 ms, first drop one interval later.
        assert!(
            (100..150).contains(&first_drop(false)),
            "{}",
            first_drop(false)
        );
        // Ramping: above 100 ms of sojourn from t ≈ 200 ms, first drop an interval later —
        // later, but it still comes: the queue stays bounded.
        assert!(
            (280..350).contains(&first_drop(true)),
            "{}",
            first_drop(true)
        );
    }

    #[test]
    fn a_small_packet_flow_standing_through_an_undetected_outage_loses_nothing() {
        // A 50-packet/s call of 160-byte frames whose queue stands for a second (the
        // paths took nothing and were not yet known to be out), then drains: every frame
        // is delivered, late. Bulk packets standing so long are dropped.
        let mut voice = CodelQueue::new(1 << 20);
        let mut bulk = CodelQueue::new(1 << 20);
        for t in (0..1000).step_by(20) {
            voice.push(ms(t), Arc::from(vec![0u8; 160]));
            bulk.push(ms(t), Arc::from(vec![0u8; 1400]));
        }
        let mut delivered = 0;
        for t in 1000..1500 {
            if voice.head(ms(t)).is_some() && t % 5 == 0 {
                voice.take();
                delivered += 1;
            }
            if bulk.head(ms(t)).is_some() && t % 5 == 0 {
                bulk.take();
            }
        }
        assert_eq!((delivered, voice.drops()), (50, QueueDrops::default()));
        assert!(bulk.drops().codel > 0);
        // Still bounded in bytes.
        let mut tiny = CodelQueue::new(320);
        assert!(tiny.push(ms(0), Arc::from(vec![0u8; 160])));
        assert!(tiny.push(ms(0), Arc::from(vec![0u8; 160])));
        assert!(!tiny.push(ms(0), Arc::from(vec![0u8; 160])));
    }

    #[test]
    fn byte_bound_tail_drops() {
        let mut q = CodelQueue::new(3000);
        assert!(q.push(ms(0), Arc::from(vec![0u8; 1500])));
        assert!(q.push(ms(0), Arc::from(vec![0u8; 1500])));
        assert!(!q.push(ms(0), Arc::from(vec![0u8; 1])));
        assert_eq!(q.drops().overflow, 1);
    }
}
