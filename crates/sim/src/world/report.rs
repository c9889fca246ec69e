//! What a run produced, as one serialisable report: per-flow results, per-path and
//! per-hop counters, the tunnel's own counters and reorder statistics, and the
//! simulator's reorder metrics computed from traced arrival orders.
//!
//! Invariant: the report holds only simulated quantities (no wall-clock times), so two
//! runs with the same scenario and seed serialise to the same bytes.

use super::{World, DOWN, UP};
use crate::stats::{jain, reorder, ReorderReport, TrafficReport};
use multihome_proto::reorder::ReorderStats;
use multihome_proto::session::Session;
use serde::Serialize;

/// Per-client detail (paths, hops) is reported for this many clients only.
const DETAIL_CLIENTS: u32 = 8;

/// Counters of the simulator itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SimCounters {
    /// Events processed.
    pub events: u64,
    /// Tunnel datagrams the endpoints sent.
    pub datagrams: u64,
    /// Packets offered to hops (a datagram crossing 3 hops counts 3).
    pub hop_packets: u64,
    /// Inner IP packets the apps sent.
    pub inner_packets: u64,
    /// Packets no app or client could take.
    pub unroutable: u64,
}

/// Overall figures of a run.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    /// Sum of the flows' goodput, Mbit/s.
    pub goodput_mbit: f64,
    /// Jain's index over the flows' goodput (two or more flows).
    pub jain: Option<f64>,
    /// Bulk flows that completed.
    pub completed: u32,
    /// Datagram bytes the clients sent on all paths per byte of upstream flows delivered
    /// (redundancy, parity, headers, probes): `None` without upstream bytes or tunnel.
    pub up_bytes_per_delivered: Option<f64>,
}

/// Traffic of one path.
#[derive(Debug, Clone, Serialize)]
pub struct PathReport {
    /// Client.
    pub client: u32,
    /// Link (path id).
    pub link: u8,
    /// Datagrams the client sent.
    pub up_packets: u64,
    /// Bytes the client sent.
    pub up_bytes: u64,
    /// Datagrams the server sent.
    pub down_packets: u64,
    /// Bytes the server sent.
    pub down_bytes: u64,
    /// Client's smoothed RTT, ms.
    pub srtt_ms: f64,
    /// Client's view of the path at the end.
    pub state: &'static str,
}

/// One hop's link counters (frames).
#[derive(Debug, Clone, Serialize)]
pub struct HopReport {
    /// Client.
    pub client: u32,
    /// Link.
    pub link: u8,
    /// `up` or `down`.
    pub dir: &'static str,
    /// Hop index from the client.
    pub hop: u8,
    /// Frames delivered.
    pub delivered: u64,
    /// Frames dropped by the loss model.
    pub dropped_loss: u64,
    /// Frames dropped by the full queue.
    pub dropped_queue: u64,
    /// Frames dropped during outages.
    pub dropped_outage: u64,
}

/// The core's reorder buffer statistics, summed over clients.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CoreReorder {
    /// Insertions.
    pub inserts: u64,
    /// Ordered packets that waited.
    pub held: u64,
    /// Gaps given up on.
    pub skipped_gaps: u64,
    /// Packets delivered behind the in-order point.
    pub late: u64,
    /// Mean packets held at an insertion.
    pub mean_occupancy: f64,
    /// Most packets held at once.
    pub max_held: u64,
    /// Gaps given up on at once because their packet was known lost.
    pub lost_skips: u64,
    /// Ordered packets that arrived displaced (reorder density's non-zero part).
    pub displaced: u64,
}

/// The tunnel's counters, summed over clients; `up` = client → server.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TunnelCounters {
    /// IP packets accepted by the client / the server.
    pub tx_ip_packets: [u64; 2],
    /// IP packets delivered at the server / the client.
    pub rx_ip_packets: [u64; 2],
    /// Redundant copies dropped as duplicates at the server / the client.
    pub rx_duplicates: [u64; 2],
    /// Packets dropped at the client's / the server's aggregate queue.
    pub queue_drops: [u64; 2],
    /// Packets dropped for lack of keys at the client / the server.
    pub no_key_drops: [u64; 2],
    /// Ordered packets the client / the server sent again on its peer's NACK.
    pub repaired: [u64; 2],
    /// Packets the client / the server sent again because their path failed.
    pub reinjected: [u64; 2],
    /// Tail loss probes the client / the server sent.
    pub tail_probes: [u64; 2],
    /// Datagrams the server / the client declared lost (`path/gaps.rs`).
    pub declared_lost: [u64; 2],
    /// Of those, datagrams that arrived after all (spurious declarations).
    pub spurious_lost: [u64; 2],
    /// Reorder buffer at the server (upstream) / the client (downstream).
    pub reorder: [CoreReorder; 2],
}

/// Simulator-side reorder metrics of client 0 (Mukherjee, "Network-Assisted Multihoming",
/// §4.3.1).
#[derive(Debug, Clone, Serialize)]
pub struct ReorderPair {
    /// At the server (client → server).
    pub up: ReorderReport,
    /// At the client (server → client).
    pub down: ReorderReport,
}

/// Everything one run produced.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// Scenario name.
    pub scenario: String,
    /// Sweep point (axis → value).
    pub point: serde_json::Map<String, serde_json::Value>,
    /// Seed.
    pub seed: u64,
    /// Simulated seconds.
    pub duration_s: f64,
    /// Whether the tunnel was used.
    pub tunnel: bool,
    /// Overall figures.
    pub summary: RunSummary,
    /// Per flow.
    pub flows: Vec<TrafficReport>,
    /// Per path (first clients only).
    pub paths: Vec<PathReport>,
    /// Per hop (first clients only).
    pub hops: Vec<HopReport>,
    /// The tunnel's own counters.
    pub tunnel_counters: Option<TunnelCounters>,
    /// Traced reorder metrics (when `metrics.reorder_trace`).
    pub reorder: Option<ReorderPair>,
    /// The simulator's counters.
    pub sim: SimCounters,
}

fn add_reorder(into: &mut CoreReorder, s: ReorderStats) {
    into.inserts += s.inserts;
    into.held += s.held;
    into.skipped_gaps += s.skipped_gaps;
    into.late += s.late;
    into.lost_skips += s.lost_skips;
    into.displaced += s.displaced;
    into.max_held = into.max_held.max(s.max_held);
    // Mean recomputed at the end from the sums kept in `mean_occupancy` meanwhile.
    into.mean_occupancy += s.occupancy_sum as f64;
}

fn add_session(t: &mut TunnelCounters, dir: usize, s: &Session) {
    let c = s.counters();
    t.tx_ip_packets[dir] += c.tx_ip_packets;
    t.rx_ip_packets[1 - dir] += c.rx_ip_packets;
    t.rx_duplicates[1 - dir] += c.rx_duplicates;
    t.queue_drops[dir] += c.queue_drops;
    t.no_key_drops[dir] += c.no_key_drops;
    t.repaired[dir] += c.repaired;
    t.reinjected[dir] += c.reinjected;
    t.tail_probes[dir] += c.tail_probes;
    for p in s.paths() {
        let (_, spurious, lost) = p.reordering();
        t.declared_lost[1 - dir] += lost;
        t.spurious_lost[1 - dir] += spurious;
    }
    add_reorder(&mut t.reorder[1 - dir], s.reorder_stats());
}

impl World {
    /// The report of the run so far.
    pub fn report(
        &self,
        scenario: &str,
        point: serde_json::Map<String, serde_json::Value>,
        seed: u64,
    ) -> RunReport {
        let end = self.now().max(self.end);
        let flows: Vec<TrafficReport> = self
            .apps
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let mut r = a.report(i, end);
                if let (Some(trace), Some(d)) = (a.cbr_trace(), &self.drive) {
                    let deadline = a.cbr_deadline().unwrap_or(crate::handoff::DEFAULT_DEADLINE);
                    r.handoff = Some(crate::handoff::report(trace, &d.outages, deadline));
                }
                r
            })
            .collect();
        let goodputs: Vec<f64> = flows.iter().map(|f| f.goodput_mbit).collect();
        let summary = RunSummary {
            goodput_mbit: goodputs.iter().sum(),
            jain: if goodputs.len() > 1 {
                jain(&goodputs)
            } else {
                None
            },
            completed: flows.iter().filter(|f| f.completion_s.is_some()).count() as u32,
            up_bytes_per_delivered: self.up_bytes_per_delivered(&flows),
        };
        let tunnel_counters = self.server.as_ref().map(|server| {
            let mut t = TunnelCounters::default();
            for node in &self.clients {
                if let Some(ep) = &node.ep {
                    add_session(&mut t, UP, ep.session());
                }
            }
            for p in server.peers() {
                if let Some(s) = p.session {
                    add_session(&mut t, DOWN, s);
                }
            }
            for r in &mut t.reorder {
                r.mean_occupancy /= r.inserts.max(1) as f64;
            }
            t
        });
        let reorder = (self.trace && !self.clients.is_empty()).then(|| ReorderPair {
            up: reorder(&self.clients[0].arrivals[UP]),
            down: reorder(&self.clients[0].arrivals[DOWN]),
        });
        RunReport {
            scenario: scenario.to_owned(),
            point,
            seed,
            duration_s: self.end.as_secs_f64(),
            tunnel: self.server.is_some(),
            summary,
            flows,
            paths: self.path_reports(),
            hops: self.hop_reports(end),
            tunnel_counters,
            reorder,
            sim: SimCounters {
                events: self.q.fired,
                ..self.counters
            },
        }
    }

    fn up_bytes_per_delivered(&self, flows: &[TrafficReport]) -> Option<f64> {
        let delivered: u64 = flows
            .iter()
            .filter(|f| f.direction == crate::scenario::Direction::Up)
            .map(|f| f.bytes_delivered)
            .sum();
        let sent: u64 = self
            .clients
            .iter()
            .filter_map(|n| n.ep.as_ref())
            .flat_map(|ep| ep.session().paths().map(|p| p.counters().tx_bytes))
            .sum();
        (self.server.is_some() && delivered > 0).then(|| sent as f64 / delivered as f64)
    }

    fn path_reports(&self) -> Vec<PathReport> {
        let Some(server) = &self.server else {
            return vec![];
        };
        let mut out = Vec::new();
        for (c, (node, peer)) in self.clients.iter().zip(server.peers()).enumerate() {
            if c as u32 >= DETAIL_CLIENTS {
                break;
            }
            let Some(ep) = &node.ep else { continue };
            for p in ep.session().paths() {
                let down = peer
                    .session
                    .and_then(|s| s.paths().find(|q| q.id() == p.id()).map(|q| q.counters()))
                    .unwrap_or_default();
                out.push(PathReport {
                    client: c as u32,
                    link: p.id().0,
                    up_packets: p.counters().tx_packets,
                    up_bytes: p.counters().tx_bytes,
                    down_packets: down.tx_packets,
                    down_bytes: down.tx_bytes,
                    srtt_ms: p.rtt().smoothed().as_secs_f64() * 1e3,
                    state: p.state().as_str(),
                });
            }
        }
        out
    }

    fn hop_reports(&self, end: std::time::Duration) -> Vec<HopReport> {
        self.hops
            .iter()
            .filter(|h| h.label.0 < DETAIL_CLIENTS)
            .map(|h| {
                let s = h.pipe.stats(end);
                HopReport {
                    client: h.label.0,
                    link: h.label.1,
                    dir: if h.label.2 { "up" } else { "down" },
                    hop: h.label.3,
                    delivered: s.delivered.frames,
                    dropped_loss: s.dropped_loss.frames,
                    dropped_queue: s.dropped_queue.frames,
                    dropped_outage: s.dropped_outage.frames,
                }
            })
            .collect()
    }
}
