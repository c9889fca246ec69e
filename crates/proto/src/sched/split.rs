//! Does a second path pay for this flow? (the MobilityFirst multihoming thesis §4.3.3: small flows, and flows over
//! paths of very different rates, finish sooner on the best path alone.)
//!
//! For the primary path p (lowest one-way delay, queueing included) and another path q,
//! a flow with S bytes still to send finishes at about `S/R_p + d_p` on p alone and at
//! `S/(R_p + R_q) + d_q` striped (the last packets ride the slower path). Striping pays
//! when `S > (d_q − d_p) · R_p · (R_p + R_q) / R_q`. The threshold follows the measured
//! rates and delays, so it adapts by itself: equal delays → 0 (always stripe); a path
//! 30 ms behind at a quarter of the rate → hundreds of kilobytes.
//!
//! The remaining size is unknown. As for any heavy-tailed flow-size law, what a flow has
//! already sent is the best guess of what it will still send — but the rule is re-decided
//! for every packet with the rates as they are now, and rates on real links hold for
//! about a second, so no choice is judged over more than `HORIZON`: S is the flow's bytes
//! each weighted by `e^(−age/HORIZON)`, i.e. what it sent so far while it is young, and
//! its recent rate × `HORIZON` once it is old. Counted without the horizon, a bulk flow
//! passed every threshold for good: a second link that fell to 1/20 of the first's rate,
//! 60 ms behind it, kept 7.2 % of the bytes, more than it could carry (the simulator's
//! `changing_links` test; 0.45 % now, the copies that remeasure it). Over a horizon T the
//! rule reads: q pays when what it adds in T (`R_q · T`) exceeds what its extra delay
//! costs the whole stream (`(R_p + R_q) · (d_q − d_p)`), for a flow running at R_p.
//!
//! A path the rule leaves unused gets no new rate samples, and its estimate would keep
//! the value that excluded it: once the estimate is older than `REMEASURE` (no sample
//! taken while the path was busy), the path carries copies of a few of the flow's
//! packets, two back to back each time (`PROBE_BYTES` in flight), so it is measured —
//! rate samples and packet pairs — and taken back once its packet-pair capacity says it
//! pays again. Copies, not the packets: the receiver has the originals from the path that
//! pays, so a remeasurement holds nothing up.
//!
//! `FlowMeter` counts bytes per flow (a flow idle for `IDLE` starts again from zero, so a
//! persistent connection is judged per burst) and remembers each flow's latest `data_seq`,
//! which the next packet of the flow names as its predecessor for the receiver's reorder
//! buffer (`reorder`: flows are released independently). Invariants: the table is bounded
//! (`MAX_FLOWS`, least recently seen evicted); packets that are not TCP/UDP are treated as
//! large flows (striped); the rule is a pure function of the views and the meter (no
//! clock read here).

use super::preferred;
use crate::path::{PathId, PathView};
use crate::policy::FlowKey;
use crate::Instant;
use core::time::Duration;
use foldhash::HashMap;

/// Most flows counted at once.
pub const MAX_FLOWS: usize = 4096;
/// A flow silent this long starts a new burst.
pub const IDLE: Duration = Duration::from_secs(1);
/// How far ahead a striping choice is judged: the time scale over which Wi-Fi and
/// cellular rates hold, and the shortest window the rate estimate keeps a sample for.
pub const HORIZON: Duration = Duration::from_secs(1);
/// A path whose rate estimate no busy sample has refreshed for this long is measured
/// again (at most `PROBE_BYTES` of copies in flight: about 15 kB a second).
pub const REMEASURE: Duration = Duration::from_secs(1);
/// What a remeasured path may have in flight: ten datagrams, five packet pairs (the
/// session sends the copies two at a time, back to back). Pairs are what show a
/// recovered path: the copies leave at its old, low pacing rate, and so would their rate
/// samples; five pairs move the smoothed pair period (α = 1/8) half way to the new one.
pub const PROBE_BYTES: u64 = 15_000;

/// Bytes a flow must have sent (weighted by age, `FlowMeter`) before `q` is added to
/// primary `p`.
pub fn stripe_threshold(p: &PathView, q: &PathView) -> u64 {
    // A path given little to do has a low estimate; the packet-pair capacity says what it
    // could carry, which is what the question is about.
    let rq = q.bandwidth_bps.max(q.capacity_bps);
    let rp = p.bandwidth_bps;
    if rp <= 0.0 || rq <= 0.0 || !q.bw_valid {
        // Unmeasured (or only measured with keepalives): use it, that is how it gets
        // measured; an estimate from a starved path would keep it starved.
        return 0;
    }
    let dd = (one_way(q) - one_way(p)).max(0.0);
    (dd * rp * (rp + rq) / rq).min(u64::MAX as f64 / 2.0) as u64
}

/// One-way delay estimate of a path, seconds (forward queueing included).
fn one_way(p: &PathView) -> f64 {
    p.forward_delay_s()
}

/// Keeps the paths a flow that has sent `flow_bytes` (weighted by age) may use: the
/// primary (lowest one-way delay) and every other path whose threshold it has passed. In
/// place: a set of views is kilobytes (`MAX_PATHS` of them), too much to copy per packet.
/// Returns a path it left out that is due to be measured again (`remeasured`): the
/// caller sends a copy of the packet there too.
pub fn retain_eligible(
    paths: &mut Vec<PathView>,
    flow_bytes: u64,
    now: Instant,
    len: usize,
) -> Option<PathId> {
    let primary = preferred(paths)
        .min_by(|a, b| one_way(a).total_cmp(&one_way(b)).then(a.id.cmp(&b.id)))
        .copied()?;
    let mut probe = None;
    paths.retain(|q| {
        let keep = q.id == primary.id || stripe_threshold(&primary, q) <= flow_bytes;
        if !keep && probe.is_none() && q.usable() && remeasured(q, now, len) {
            probe = Some(q.id);
        }
        keep
    });
    probe
}

/// Whether `q`, which the rule leaves out, should carry a copy of the packet to refresh
/// an estimate no busy sample has refreshed for `REMEASURE`. A copy, not the packet: the
/// receiver has the original from the path that pays, so the late path holds nothing up
/// (carrying the data itself, each remeasurement held the flow for the late path's delay:
/// windows of 12.5 Mbit/s on an 18 Mbit/s link, once a second). At most `PROBE_BYTES` in
/// flight: a path whose old estimate is far above what it carries now is not given a
/// window's worth (at a stale 18 Mbit/s, 128 kB went into a 1 Mbit/s link).
fn remeasured(q: &PathView, now: Instant, len: usize) -> bool {
    q.bw_age > REMEASURE
        && q.inflight_bytes + 2 * len as u64 <= PROBE_BYTES
        && q.may_send(now, 2 * len)
}

/// `e^(−dt/HORIZON)`: the weight left to a byte `dt` old.
fn decay(dt: Duration) -> f64 {
    (-dt.as_secs_f64() / HORIZON.as_secs_f64()).exp()
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    /// Bytes metered in the current burst, each weighted by `decay` of its age at
    /// `last`, and when the last of them was sent.
    bytes: f64,
    last: Instant,
    /// The flow's latest packet, metered or not: its `data_seq`, and when it was sent
    /// (what eviction goes by).
    seq: Option<u64>,
    seen: Instant,
}

/// Bytes sent per flow in its current burst.
#[derive(Debug, Default)]
pub struct FlowMeter {
    /// foldhash, not std's SipHash: looked up twice per aggregate packet.
    flows: HashMap<FlowKey, Seen>,
}

impl FlowMeter {
    /// An empty meter.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes the flow has sent in its current burst, each weighted by `e^(−age/HORIZON)`
    /// (0 for a new or idle flow): about what it sent while it is young, its recent rate
    /// × `HORIZON` once it is old.
    pub fn bytes(&self, now: Instant, key: &FlowKey) -> u64 {
        self.flows
            .get(key)
            .map(|s| (now.saturating_since(s.last), s.bytes))
            .filter(|&(idle, _)| idle < IDLE)
            .map_or(0, |(idle, b)| (b * decay(idle)) as u64)
    }

    /// Records that the flow sent packet `seq` at `now` — counting its `len` bytes, unless
    /// `None` (small packets riding along: a flow of acknowledgements never needs a second
    /// path, and metering them changed which flows were striped) — and returns the
    /// `data_seq` of the flow's previous packet, which the receiver releases it after
    /// (`reorder`). `None`: the flow is new, or was forgotten.
    pub fn record(
        &mut self,
        now: Instant,
        key: FlowKey,
        len: Option<usize>,
        seq: u64,
    ) -> Option<u64> {
        // Length first: the lookup is only needed once the table is full.
        if self.flows.len() >= MAX_FLOWS && !self.flows.contains_key(&key) {
            self.flows
                .retain(|_, s| now.saturating_since(s.seen) < IDLE);
            if self.flows.len() >= MAX_FLOWS {
                // All busy: forget the least recently seen one.
                if let Some(old) = self
                    .flows
                    .iter()
                    .min_by_key(|(_, s)| s.seen)
                    .map(|(k, _)| *k)
                {
                    self.flows.remove(&old);
                }
            }
        }
        let e = self.flows.entry(key).or_insert(Seen {
            bytes: 0.0,
            last: now,
            seq: None,
            seen: now,
        });
        if let Some(len) = len {
            let idle = now.saturating_since(e.last);
            let kept = if idle >= IDLE { 0.0 } else { decay(idle) };
            e.bytes = e.bytes * kept + len as f64;
            e.last = now;
        }
        e.seen = now;
        e.seq.replace(seq)
    }

    /// Flows tracked.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    /// Whether no flow is tracked.
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::{PathId, PathState};
    use crate::policy::parse_flow;
    use crate::sched::testutil::view;

    fn eligible(paths: &[PathView], flow_bytes: u64) -> Vec<PathId> {
        let mut v: Vec<PathView> = paths.to_vec();
        retain_eligible(&mut v, flow_bytes, Instant::ZERO, 1500);
        v.iter().map(|p| p.id).collect()
    }

    #[test]
    fn threshold_follows_the_seed_formula() {
        // 50 Mbit/s at 20 ms RTT, 20 Mbit/s at 80 ms RTT: d_q - d_p = 30 ms.
        let p = view(0, PathState::Up, 20, 50.0);
        let q = view(1, PathState::Up, 80, 20.0);
        let t = stripe_threshold(&p, &q) as f64;
        let want = 0.030 * 6.25e6 * (6.25e6 + 2.5e6) / 2.5e6;
        assert!((t - want).abs() < 1.0, "{t} vs {want}");
        // Equal delays: stripe from the first byte.
        let q2 = view(1, PathState::Up, 20, 5.0);
        assert_eq!(stripe_threshold(&p, &q2), 0);
    }

    #[test]
    fn small_flows_stay_on_the_primary() {
        let paths = [
            view(0, PathState::Up, 80, 20.0),
            view(1, PathState::Up, 20, 50.0),
        ];
        assert_eq!(eligible(&paths, 10_000), [PathId(1)]);
        assert_eq!(eligible(&paths, 1_000_000).len(), 2);
    }

    /// A long flow is judged by its recent rate over `HORIZON`, not by all it has sent:
    /// a second path that fell to 1/20 of the primary's rate, 60 ms later, is left.
    #[test]
    fn a_long_flow_is_judged_over_the_horizon() {
        let mut m = FlowMeter::new();
        let pkt = crate::policy::tests::udp4(0, 1000, 443);
        let (key, _) = parse_flow(&pkt).unwrap();
        // 20 Mbit/s (2.5 MB/s) for 30 s: 75 MB sent, 1400-byte packets.
        let mut now = Instant::ZERO;
        for i in 0..(30 * 2_500_000 / 1400) as u64 {
            now = Instant::from_micros(i * 560);
            m.record(now, key, Some(1400), i);
        }
        let s = m.bytes(now, &key) as f64;
        assert!((2.3e6..2.6e6).contains(&s), "{s}: about 2.5 MB/s × 1 s");
        let p = view(0, PathState::Up, 20, 20.0);
        let mut q = view(1, PathState::Up, 140, 1.0);
        assert_eq!(eligible(&[p, q], s as u64), [PathId(0)]);
        // At the same rate it pays: 300 kB.
        q.bandwidth_bps = p.bandwidth_bps;
        assert_eq!(eligible(&[p, q], s as u64).len(), 2);
    }

    /// An idle path's low estimate does not exclude it: its packet-pair capacity says
    /// what it could carry.
    #[test]
    fn the_pair_capacity_raises_an_idle_paths_rate() {
        let p = view(0, PathState::Up, 20, 20.0);
        let mut q = view(1, PathState::Up, 140, 1.0);
        assert!(stripe_threshold(&p, &q) > 3_000_000);
        q.capacity_bps = 20e6 / 8.0;
        assert!(stripe_threshold(&p, &q) < 400_000);
    }

    /// A left path whose estimate no busy sample refreshed for `REMEASURE` is named for
    /// copies, a pair at a time and at most `PROBE_BYTES` in flight.
    #[test]
    fn a_left_path_is_remeasured_when_its_estimate_is_old() {
        let p = view(0, PathState::Up, 20, 20.0);
        let mut q = view(1, PathState::Up, 140, 1.0);
        let probe = |q: &PathView| {
            let mut v = vec![p, *q];
            let r = retain_eligible(&mut v, 2_500_000, Instant::ZERO, 1400);
            assert_eq!(v.len(), 1, "left out either way");
            r
        };
        assert_eq!(probe(&q), None);
        q.bw_age = REMEASURE + Duration::from_millis(1);
        assert_eq!(probe(&q), Some(PathId(1)));
        q.inflight_bytes = PROBE_BYTES - 2000;
        assert_eq!(probe(&q), None);
        q.inflight_bytes = 0;
        q.ready_at = Instant::from_micros(1);
        assert_eq!(probe(&q), None, "its pacer is closed");
    }

    #[test]
    fn meter_counts_bursts_and_stays_bounded() {
        let mut m = FlowMeter::new();
        let pkt = crate::policy::tests::udp4(0, 1000, 53);
        let (key, _) = parse_flow(&pkt).unwrap();
        let t0 = Instant::from_micros(1_000_000);
        assert_eq!(m.record(t0, key, Some(1000), 3), None);
        assert_eq!(m.record(t0, key, Some(500), 7), Some(3));
        assert_eq!(m.bytes(t0, &key), 1500);
        // A packet riding along is not metered, but it is the flow's latest.
        assert_eq!(m.record(t0, key, None, 8), Some(7));
        assert_eq!(m.bytes(t0, &key), 1500);
        let later = t0 + IDLE;
        assert_eq!(m.bytes(later, &key), 0);
        assert_eq!(m.record(later, key, Some(100), 9), Some(8));
        assert_eq!(m.bytes(later, &key), 100);
        for port in 0..(MAX_FLOWS as u16 + 50) {
            let p = crate::policy::tests::udp4(0, port, 9);
            let (k, _) = parse_flow(&p).unwrap();
            m.record(later, k, Some(1), 10);
        }
        assert!(m.len() <= MAX_FLOWS);
    }
}
