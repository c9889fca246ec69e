//! FEC of realtime packets in the session (`crate::fec` has the blocks and the codec).
//!
//! Sending: each realtime packet joins the open block (`protect_realtime`); the block closes
//! when full, when the next packet does not fit its parity frame, or at the latest when
//! its parity, sent on the path it will take, would reach the receiver just in time to
//! rebuild the block's oldest packet (`CLOSE_MARGIN` before its deadline). At close the
//! parity count follows the measured loss of the path each packet took
//! (`fec::parity_count`; a Suspect path counts as losing half its packets: a failover in
//! doubt), and the shards go on the
//! paths that still deliver within the oldest packet's time, other paths than the data's
//! first (a loss burst on the data's path spares them), then the cheapest (`cost`), then
//! the fastest.
//!
//! Receiving: every realtime packet is remembered a while, every parity shard kept with
//! its block; a block with k shards rebuilds its missing packets (`fec::Decoder`), which
//! then pass the de-duplication window like any copy (so the original, if it comes after
//! all, is a duplicate) and are delivered at once — only if still in time: a rebuilt
//! packet past its deadline less `REBUILT_GUARD` is dropped (`fec_late`).

use super::{Job, Session, MAX_JOBS};
use crate::fec::{self, Pending, Rebuilt};
use crate::path::{PathId, PathState, PathView};
use crate::reorder::Order;
use crate::sched::{expected_delivery, preferred, PathSet};
use crate::wire::{FecFrame, InnerHeader};
use crate::Instant;
use core::time::Duration;
use std::sync::Arc;

/// A rebuilt packet is delivered only if its estimated one-way delay is at least this much
/// under its deadline. Rebuilt packets are the latest a receiver delivers (a block completes
/// when its last shard is in, possibly over the slower path after the oldest packet's
/// deadline), and the estimate reads low by the fastest path's asymmetry and by the time
/// between decoding and the TUN write; without the guard about one rebuilt packet in 2 000
/// reached the application 0.3–1 ms past its deadline (netns voice test, simulator).
const REBUILT_GUARD: Duration = Duration::from_millis(2);

/// Parity must arrive at least this long before the oldest packet's deadline (jitter,
/// decoding, the estimate's error).
const CLOSE_MARGIN: Duration = Duration::from_millis(10);
/// Loss assumed of a Suspect path: its feedback is overdue, it may be failing.
const SUSPECT_LOSS: f64 = 0.5;

/// Loss to plan for on a path.
pub(super) fn planned_loss(v: &PathView) -> f64 {
    if v.state == PathState::Suspect {
        v.loss.max(SUSPECT_LOSS)
    } else {
        v.loss
    }
}

impl Session {
    /// Adds realtime packet `seq`, just scheduled on `path`, to the open FEC block.
    pub(super) fn protect_realtime(
        &mut self,
        now: Instant,
        seq: u64,
        path: PathId,
        packet: Arc<[u8]>,
        deadline: Duration,
    ) {
        let room = self.frames_room();
        let deadline_ms = crate::policy::Policy::realtime(deadline).deadline_ms();
        if !self.fec_tx.fits(seq, packet.len(), deadline_ms, room) {
            self.close_fec_block(now);
        }
        if !self.fec_tx.fits(seq, packet.len(), deadline_ms, room) {
            return; // too large to protect in one datagram of parity
        }
        // The parity's expected delivery on the path it would take now.
        let views = self.take_views(now);
        let parity_delay = parity_paths(&views, &[path], Duration::MAX)
            .first()
            .and_then(|id| views.iter().find(|v| v.id == *id))
            .map_or(0.0, |v| expected_delivery(v, room));
        self.put_views(views);
        let wait = deadline.as_secs_f64() - parity_delay - CLOSE_MARGIN.as_secs_f64();
        let close_by = now + Duration::from_secs_f64(wait.max(0.0));
        let pending = Pending {
            seq,
            sent: now,
            path,
            packet,
        };
        self.fec_tx.add(pending, deadline_ms, close_by);
        if self.fec_tx.full() || close_by <= now {
            self.close_fec_block(now);
        }
    }

    /// Closes the open block: parity as the loss requires, on the paths chosen for it.
    pub(super) fn close_fec_block(&mut self, now: Instant) {
        let Some(oldest) = self.fec_tx.pending().first() else {
            self.fec_tx.close(0);
            return;
        };
        let budget = Duration::from_millis(u64::from(self.fec_tx.deadline_ms()))
            .saturating_sub(now.saturating_since(oldest.sent));
        let data_paths: PathSet = {
            let mut s = PathSet::new();
            for p in self.fec_tx.pending() {
                if !s.contains(&p.path) {
                    s.push(p.path);
                }
            }
            s
        };
        let views = self.take_views(now);
        let targets = parity_paths(&views, &data_paths, budget);
        let loss_of = |id: &PathId| views.iter().find(|v| v.id == *id).map_or(0.0, planned_loss);
        // Each packet at its own path's loss: a burst spread over a clean and a lossy path
        // needs less parity than if all of it had taken the lossy one.
        let p_data: Vec<f64> = self
            .fec_tx
            .pending()
            .iter()
            .map(|p| loss_of(&p.path))
            .collect();
        let p_parity = targets.first().map_or(1.0, loss_of);
        self.put_views(views);
        let m = if targets.is_empty() {
            0
        } else {
            fec::parity_count(&p_data, p_parity, fec::TARGET_RESIDUAL)
        };
        let Some(block) = self.fec_tx.close(m) else {
            return;
        };
        let block = Arc::new(block);
        for i in 0..m {
            if self.jobs.len() >= MAX_JOBS {
                self.counters.queue_drops += 1;
                return;
            }
            self.jobs.push_back(Job::Parity {
                path: targets[i % targets.len()],
                block: block.clone(),
                index: i as u8,
            });
        }
    }

    /// A parity shard arrived.
    pub(super) fn on_parity(&mut self, now: Instant, hdr: &InnerHeader, f: &FecFrame<'_>) {
        match self.fec_rx.on_parity(hdr.send_time_us, f) {
            Ok(rebuilt) => self.deliver_rebuilt(now, rebuilt),
            Err(_) => self.counters.rx_malformed += 1,
        }
    }

    /// A realtime packet arrived (first copy): kept for rebuilding its block's others.
    pub(super) fn remember_realtime(&mut self, now: Instant, seq: u64, packet: &[u8]) {
        let rebuilt = self.fec_rx.on_data(seq, packet);
        self.deliver_rebuilt(now, rebuilt);
    }

    /// Delivers rebuilt packets not received meanwhile and still in time.
    fn deliver_rebuilt(&mut self, now: Instant, rebuilt: Vec<Rebuilt>) {
        for r in rebuilt {
            if !self.dedupe.check_and_set(r.seq) {
                continue;
            }
            let raw = (now.as_micros() as u32).wrapping_sub(r.sent_us);
            let limit =
                Duration::from_millis(u64::from(r.deadline_ms)).saturating_sub(REBUILT_GUARD);
            if self.rt_rx.is_later_than(raw, self.min_owd(), limit) {
                self.counters.fec_late += 1;
                continue;
            }
            self.counters.fec_recovered += 1;
            self.counters.rx_ip_packets += 1;
            self.reorder
                .insert(now, r.seq, r.packet, Order::Unordered, &mut self.deliver);
        }
    }
}

/// Paths for parity whose expected delivery of a full datagram is within `budget`: other
/// paths than `data` first, then the cheapest, then the fastest; the data's paths last.
fn parity_paths(views: &[PathView], data: &[PathId], budget: Duration) -> PathSet {
    let limit = budget.as_secs_f64();
    let mut c: Vec<(bool, u32, f64, PathId)> = preferred(views)
        .map(|v| {
            (
                data.contains(&v.id),
                v.cost,
                expected_delivery(v, 1400),
                v.id,
            )
        })
        .filter(|c| c.2 <= limit)
        .collect();
    c.sort_by(|a, b| {
        (a.0, a.1)
            .cmp(&(b.0, b.1))
            .then(a.2.total_cmp(&b.2))
            .then(a.3.cmp(&b.3))
    });
    c.into_iter().map(|c| c.3).collect()
}
