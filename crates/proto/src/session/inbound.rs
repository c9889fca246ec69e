//! What happens to one IP packet the peer sent us, once its frame has been decoded (plain
//! DATA, DATA_DEFINE, or restored from a compressed TCP frame): de-duplication, policy
//! learning, the reorder buffer, and skipping holes known lost.
//!
//! The payload comes borrowed (from the datagram) or owned (restored from a compressed
//! frame): it is copied only if borrowed and only once it passed de-duplication.
//!
//! Invariant: a packet is counted and handed to the reorder buffer at most once per
//! `data_seq` (redundant copies and replays stop at the de-duplication window).

use super::Session;
use crate::path::{PathId, PathState};
use crate::policy::{parse_flow, Policy};
use crate::reorder::Order;
use crate::wire::DataFlags;
use crate::Instant;
use std::borrow::Cow;

impl Session {
    pub(super) fn accept_data(
        &mut self,
        now: Instant,
        create_paths: bool,
        path_id: PathId,
        (data_seq, flags, pred_gap): (u64, DataFlags, u16),
        payload: Cow<'_, [u8]>,
    ) {
        if !self.dedupe.check_and_set(data_seq) {
            self.counters.rx_duplicates += 1;
            return;
        }
        // Only the server schedules return traffic by the peer's policy.
        if let Some((key, _)) = create_paths.then(|| parse_flow(&payload)).flatten() {
            self.flows
                .learn(now, key, Policy::from_code(flags.policy_code()));
        }
        self.counters.rx_ip_packets += 1;
        self.holes.on_datagram(path_id, Some(data_seq));
        self.reorder.insert(
            now,
            data_seq,
            payload.into_owned(),
            Order::of(flags, data_seq, pred_gap),
            &mut self.deliver,
        );
        // Only a gap can be known lost; most packets arrive with none open. A lost ordered
        // packet is being repaired (`reinject.rs`): give up on it only once a repair had
        // its time.
        if self
            .reorder
            .gap_age(now)
            .is_some_and(|age| age >= self.repair_wait(now))
        {
            let paths = &self.paths;
            let alive = |id| {
                paths
                    .iter()
                    .any(|s| s.path.id() == id && s.path.state() != PathState::Down)
            };
            if let Some(bound) = self.holes.lost_below(alive) {
                self.reorder.skip_lost_below(now, bound, &mut self.deliver);
            }
        }
    }
}
