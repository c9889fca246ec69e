//! Measurements: latency histograms, summaries, Jain's fairness index, and the reorder
//! metrics of Mukherjee, "Network-Assisted Multihoming for Emerging Heterogeneous Wireless
//! Access Scenarios" (Rutgers M.S. thesis, 2014), computed from the order in which striped packets reached a receiver.
//!
//! Reorder metrics (that thesis §4.3.1, after Piratla & Jayasumana): packets are ranked by
//! sequence number among those that arrived (lost ones are not waited for), then
//! - buffer occupancy after each arrival = packets held because an earlier one is missing
//!   (its Table 4.3: the example sequence 1 2 4 3 6 7 5 10 8 9 gives a mean of 0.6 over
//!   the ten arrivals when counted after each arrival);
//! - displacement = arrival position − rank (its Table 4.4: negative = early, positive =
//!   late); reorder density = the distribution of displacements.
//!
//! Invariant: every function here is a pure function of its inputs (no clock, no RNG),
//! so reports are bit-identical for identical runs.

use crate::scenario::{Direction, FlowKind};
use crate::tcp::TcpStats;
use serde::Serialize;
use std::time::Duration;

/// Latency histogram: 100 µs buckets up to 100 ms, then 1 ms buckets up to 2 s, then one
/// overflow bucket. Bounded memory whatever the run length.
#[derive(Debug, Clone)]
pub struct Histogram {
    buckets: Vec<u64>,
    count: u64,
    sum_ns: u128,
}

const FINE: usize = 1000;
const COARSE: usize = 1900;

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: vec![0; FINE + COARSE + 1],
            count: 0,
            sum_ns: 0,
        }
    }
}

impl Histogram {
    /// Records one value.
    pub fn add(&mut self, d: Duration) {
        let us = d.as_micros() as usize;
        let i = if us < 100_000 {
            us / 100
        } else {
            (FINE + (us - 100_000) / 1000).min(FINE + COARSE)
        };
        self.buckets[i] += 1;
        self.count += 1;
        self.sum_ns += d.as_nanos();
    }

    /// Upper edge of the bucket holding quantile `q`, in ms.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        let target = ((self.count as f64 * q).ceil() as u64).max(1);
        let mut acc = 0;
        for (i, &n) in self.buckets.iter().enumerate() {
            acc += n;
            if acc >= target {
                return if i < FINE {
                    (i + 1) as f64 * 0.1
                } else {
                    100.0 + (i - FINE + 1) as f64
                };
            }
        }
        f64::NAN
    }

    /// Mean and quantiles, `None` when empty.
    pub fn summary_ms(&self) -> Option<Summary> {
        (self.count > 0).then(|| Summary {
            n: self.count,
            mean: self.sum_ns as f64 / self.count as f64 / 1e6,
            p50: self.quantile_ms(0.5),
            p95: self.quantile_ms(0.95),
            p99: self.quantile_ms(0.99),
            max: self.quantile_ms(1.0),
        })
    }
}

/// Mean and quantiles of a sample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    /// Sample size.
    pub n: u64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Maximum.
    pub max: f64,
}

/// Summary of a list of values (nearest-rank quantiles), `None` when empty.
pub fn summary(xs: &[f64]) -> Option<Summary> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let q = |p: f64| v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1];
    Some(Summary {
        n: v.len() as u64,
        mean: v.iter().sum::<f64>() / v.len() as f64,
        p50: q(0.5),
        p95: q(0.95),
        p99: q(0.99),
        max: v[v.len() - 1],
    })
}

/// Jain's fairness index (Σx)² / (n·Σx²); 1 = perfectly fair.
pub fn jain(xs: &[f64]) -> Option<f64> {
    let s: f64 = xs.iter().sum();
    let s2: f64 = xs.iter().map(|x| x * x).sum();
    (!xs.is_empty() && s2 > 0.0).then(|| s * s / (xs.len() as f64 * s2))
}

/// What one flow achieved.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TrafficReport {
    /// Name.
    pub name: String,
    /// Kind.
    pub kind: FlowKind,
    /// Direction.
    pub direction: Direction,
    /// Client.
    pub client: u32,
    /// Payload bytes delivered in order (TCP) or IP bytes received (UDP).
    pub bytes_delivered: u64,
    /// Goodput over the flow's active time (bulk: until completion), Mbit/s.
    pub goodput_mbit: f64,
    /// Bulk: time from start to the last byte, s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_s: Option<f64>,
    /// Bulk with `resume`: reconnections made after address changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reconnects: Option<u32>,
    /// TCP counters (bulk and web).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpStats>,
    /// Web: objects completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub objects_done: Option<u32>,
    /// Web: object completion times, s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_s: Option<Summary>,
    /// CBR: packets sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sent: Option<u64>,
    /// CBR: packets received.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub received: Option<u64>,
    /// CBR with a `deadline`: packets received after it (counted in `received` too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub late: Option<u64>,
    /// CBR: fraction lost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss: Option<f64>,
    /// CBR: one-way latency, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<Summary>,
    /// CBR: RFC 3550 jitter, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jitter_ms: Option<f64>,
    /// CBR under a drive: the stream around each handoff (`crate::handoff`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handoff: Option<crate::handoff::HandoffReport>,
}

/// Displacements beyond ±this are pooled in the two tail bins.
pub const DENSITY_SPAN: i64 = 20;

/// Reorder metrics of one receiver (Mukherjee, "Network-Assisted Multihoming", §4.3.1).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReorderReport {
    /// Packets traced.
    pub packets: u64,
    /// Mean buffer occupancy after each arrival, packets.
    pub mean_occupancy: f64,
    /// Largest occupancy, packets.
    pub max_occupancy: u64,
    /// Mean occupancy in bytes (inner packets held; sizes from datagram lengths, ±26 B).
    pub mean_occupancy_bytes: f64,
    /// Fraction of packets with a non-zero displacement.
    pub displaced: f64,
    /// Mean |displacement|.
    pub mean_abs_displacement: f64,
    /// Reorder density: fraction of packets per displacement, from −SPAN−1 (pooled
    /// "earlier") to +SPAN+1 (pooled "later").
    pub density: Vec<f64>,
}

/// Computes the reorder metrics from (sequence, bytes) in arrival order.
pub fn reorder(arrivals: &[(u64, u32)]) -> ReorderReport {
    if arrivals.is_empty() {
        return ReorderReport::default();
    }
    let mut sorted: Vec<u64> = arrivals.iter().map(|a| a.0).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let rank = |s: u64| sorted.binary_search(&s).expect("present") as u64;
    let n = arrivals.len();
    let mut held = vec![false; sorted.len()];
    let mut held_bytes = vec![0u32; sorted.len()];
    let (mut next, mut count, mut bytes) = (0u64, 0u64, 0u64);
    let (mut occ_sum, mut occ_bytes_sum, mut occ_max) = (0u64, 0u64, 0u64);
    let span = DENSITY_SPAN;
    let mut density = vec![0u64; (2 * span + 3) as usize];
    let (mut displaced, mut abs_sum) = (0u64, 0u64);
    for (i, &(s, b)) in arrivals.iter().enumerate() {
        let r = rank(s);
        let d = i as i64 - r as i64;
        density[(d.clamp(-span - 1, span + 1) + span + 1) as usize] += 1;
        displaced += u64::from(d != 0);
        abs_sum += d.unsigned_abs();
        if r == next {
            next += 1;
            while (next as usize) < held.len() && held[next as usize] {
                held[next as usize] = false;
                count -= 1;
                bytes -= u64::from(held_bytes[next as usize]);
                next += 1;
            }
        } else if r > next && !held[r as usize] {
            held[r as usize] = true;
            held_bytes[r as usize] = b;
            count += 1;
            bytes += u64::from(b);
        }
        occ_sum += count;
        occ_bytes_sum += bytes;
        occ_max = occ_max.max(count);
    }
    ReorderReport {
        packets: n as u64,
        mean_occupancy: occ_sum as f64 / n as f64,
        max_occupancy: occ_max,
        mean_occupancy_bytes: occ_bytes_sum as f64 / n as f64,
        displaced: displaced as f64 / n as f64,
        mean_abs_displacement: abs_sum as f64 / n as f64,
        density: density.iter().map(|&c| c as f64 / n as f64).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_003_table_4_3_and_4_4() {
        let arrival = [1u64, 2, 4, 3, 6, 7, 5, 10, 8, 9];
        let a: Vec<(u64, u32)> = arrival.iter().map(|&s| (s, 1000)).collect();
        let r = reorder(&a);
        // Occupancy after each arrival: 0 0 1 0 1 2 0 1 1 0 (the table's row) = 0.6.
        assert!((r.mean_occupancy - 0.6).abs() < 1e-12, "{r:?}");
        assert_eq!(r.max_occupancy, 2);
        assert!((r.mean_occupancy_bytes - 600.0).abs() < 1e-9);
        // Displacements 0 0 -1 +1 -1 -1 +2 -2 +1 +1 (Table 4.4): density as in the text.
        let at = |d: i64| r.density[(d + DENSITY_SPAN + 1) as usize];
        assert!((at(-2) - 0.1).abs() < 1e-12);
        assert!((at(-1) - 0.3).abs() < 1e-12);
        assert!((at(0) - 0.2).abs() < 1e-12);
        assert!((at(1) - 0.3).abs() < 1e-12);
        assert!((at(2) - 0.1).abs() < 1e-12);
        assert!((r.displaced - 0.8).abs() < 1e-12);
    }

    #[test]
    fn losses_are_not_waited_for() {
        let r = reorder(&[(0, 1), (1, 1), (3, 1), (4, 1)]);
        assert_eq!(r.max_occupancy, 0);
        assert_eq!(r.displaced, 0.0);
    }

    #[test]
    fn jain_and_quantiles() {
        assert_eq!(jain(&[5.0; 5]), Some(1.0));
        assert!((jain(&[1.0, 0.0, 0.0, 0.0]).unwrap() - 0.25).abs() < 1e-12);
        let s = summary(&[3.0, 1.0, 2.0, 4.0]).unwrap();
        assert_eq!((s.p50, s.max, s.mean), (2.0, 4.0, 2.5));
        let mut h = Histogram::default();
        for ms in 1..=100u64 {
            h.add(Duration::from_millis(ms));
        }
        assert!((h.quantile_ms(0.5) - 50.1).abs() < 1e-9);
        assert_eq!(h.quantile_ms(1.0), 101.0);
    }
}
