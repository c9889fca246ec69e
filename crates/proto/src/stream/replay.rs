//! Replayed message 1s of stream mode are refused: each client's handshake timestamps
//! (µs, its own clock) must be new. Unlike the tunnel's single session, a client opens many
//! stream connections at once and their first messages may arrive out of order, so a
//! strictly growing timestamp would refuse honest ones. Instead a timestamp is accepted if
//! it is no older than [`WINDOW_US`] behind the newest accepted one and was never accepted
//! before.
//!
//! Invariants: at most [`MAX_REMEMBERED`] timestamps per client are kept; when full, the
//! oldest is forgotten and the floor rises past it, so a forgotten one is still refused.

use std::collections::BTreeSet;

/// How far behind the newest accepted timestamp a new one may be.
pub const WINDOW_US: u64 = 30_000_000;
/// Timestamps remembered per client.
pub const MAX_REMEMBERED: usize = 4096;

/// The accepted timestamps of one client.
#[derive(Debug, Default, Clone)]
pub struct InitReplay {
    seen: BTreeSet<u64>,
    /// Timestamps at or below this are refused (forgotten ones, or too old).
    floor: u64,
}

impl InitReplay {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Accepts `timestamp_us` (and remembers it) if it is new and recent enough.
    pub fn check_and_set(&mut self, timestamp_us: u64) -> bool {
        let newest = self.seen.last().copied().unwrap_or(0);
        let oldest_allowed = newest
            .saturating_sub(WINDOW_US)
            .max(self.floor.saturating_add(1));
        if timestamp_us < oldest_allowed || !self.seen.insert(timestamp_us) {
            return false;
        }
        let newest = self.seen.last().copied().unwrap_or(timestamp_us);
        let cutoff = newest.saturating_sub(WINDOW_US);
        while let Some(&first) = self.seen.first() {
            if first >= cutoff && self.seen.len() <= MAX_REMEMBERED {
                break;
            }
            self.seen.pop_first();
            self.floor = self.floor.max(first);
        }
        true
    }

    /// Timestamps remembered now.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn out_of_order_first_messages_pass_once() {
        let mut r = InitReplay::new();
        assert!(r.check_and_set(1_000_000));
        assert!(
            r.check_and_set(900_000),
            "slightly older, never seen: accepted"
        );
        assert!(!r.check_and_set(1_000_000), "replay");
        assert!(!r.check_and_set(900_000), "replay");
        assert!(r.check_and_set(50_000_000));
        assert!(
            !r.check_and_set(1_500_000),
            "older than the window behind the newest"
        );
    }

    proptest! {
        /// Whatever the order, no timestamp is ever accepted twice and memory stays bounded.
        #[test]
        fn never_twice_and_bounded(ts in proptest::collection::vec(0u64..20_000, 1..6000)) {
            let mut r = InitReplay::new();
            let mut accepted = std::collections::HashSet::new();
            for t in ts {
                let t = t * 10;
                if r.check_and_set(t) {
                    prop_assert!(accepted.insert(t), "{t} accepted twice");
                }
                prop_assert!(r.len() <= MAX_REMEMBERED);
            }
        }
    }
}
