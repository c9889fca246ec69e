//! Does a second path pay for this flow? (the MobilityFirst multihoming thesis §4.3.3: small flows, and flows over
//! paths of very different rates, finish sooner on the best path alone.)
//!
//! For the primary path p (lowest one-way delay, queueing included) and another path q,
//! a flow with S bytes still to send finishes at about `S/R_p + d_p` on p alone and at
//! `S/(R_p + R_q) + d_q` striped (the last packets ride the slower path). Striping pays
//! when `S > (d_q − d_p) · R_p · (R_p + R_q) / R_q`. The remaining size is unknown; as
//! for any heavy-tailed flow-size law, the bytes a flow has already sent are the best
//! guess of what it will still send, so q is added once the flow has sent that many
//! bytes. The threshold follows the measured rates and delays, so it adapts by itself:
//! equal delays → 0 (always stripe); a path 30 ms behind at a quarter of the rate →
//! hundreds of kilobytes.
//!
//! `FlowMeter` counts bytes per flow (a flow idle for `IDLE` starts again from zero, so a
//! persistent connection is judged per burst) and remembers each flow's latest `data_seq`,
//! which the next packet of the flow names as its predecessor for the receiver's reorder
//! buffer (`reorder`: flows are released independently). Invariants: the table is bounded
//! (`MAX_FLOWS`, least recently seen evicted); packets that are not TCP/UDP are treated as
//! large flows (striped).

use super::preferred;
use crate::path::PathView;
use crate::policy::FlowKey;
use crate::Instant;
use core::time::Duration;
use foldhash::HashMap;

/// Most flows counted at once.
pub const MAX_FLOWS: usize = 4096;
/// A flow silent this long starts a new burst.
pub const IDLE: Duration = Duration::from_secs(1);

/// Bytes a flow must have sent before `q` is added to primary `p`.
pub fn stripe_threshold(p: &PathView, q: &PathView) -> u64 {
    // A path given little to do has a low estimate; the packet-pair capacity says what it
    // could carry, which is what the question is about.
    let (rp, rq) = (p.bandwidth_bps, q.bandwidth_bps.max(q.capacity_bps));
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

/// Keeps the paths a flow that has sent `flow_bytes` may use: the primary (lowest one-way
/// delay) and every other path whose threshold it has passed. In place: a set of views is
/// kilobytes (`MAX_PATHS` of them), too much to copy per packet.
pub fn retain_eligible(paths: &mut Vec<PathView>, flow_bytes: u64) {
    let primary = preferred(paths)
        .min_by(|a, b| one_way(a).total_cmp(&one_way(b)).then(a.id.cmp(&b.id)))
        .copied();
    if let Some(p) = primary {
        paths.retain(|q| q.id == p.id || stripe_threshold(&p, q) <= flow_bytes);
    }
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    /// Bytes metered in the current burst, and when the last of them was sent.
    bytes: u64,
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

    /// Bytes the flow has sent in its current burst (0 for a new or idle flow).
    pub fn bytes(&self, now: Instant, key: &FlowKey) -> u64 {
        self.flows
            .get(key)
            .filter(|s| now.saturating_since(s.last) < IDLE)
            .map_or(0, |s| s.bytes)
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
            bytes: 0,
            last: now,
            seq: None,
            seen: now,
        });
        if let Some(len) = len {
            if now.saturating_since(e.last) >= IDLE {
                e.bytes = 0;
            }
            e.bytes = e.bytes.saturating_add(len as u64);
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
        retain_eligible(&mut v, flow_bytes);
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
