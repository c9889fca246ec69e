//! Sliding anti-replay window (RFC 6479 style, as in wireguard-go `replay/replay.go`).
//!
//! Accepts each 64-bit counter at most once, rejects counters older than the window.
//! Used twice per session: on the AEAD nonce counter (rejects replayed datagrams) and on
//! the inner data sequence number (drops the extra copies of redundant sends, so the
//! same structure is the de-duplication filter). Invariant: `check_and_set` is only
//! called after the datagram authenticated, so an attacker cannot advance the window.

/// Bits in the window: counters more than this far behind the highest seen are refused.
pub const WINDOW_BITS: u64 = 8192;
// One spare word so the oldest and newest counters of a full window never share a word.
const WORDS: usize = (WINDOW_BITS / 64) as usize + 1;

/// Bitmap window over the most recent `WINDOW_BITS` counters.
#[derive(Debug, Clone)]
pub struct ReplayWindow {
    /// Highest counter accepted so far plus one (0 = nothing accepted yet).
    next: u64,
    /// The bitmap (1 KB), allocated at the first counter accepted: the data-sequence
    /// window of a session that never carries data holds none (an idle session's memory).
    bits: Option<Box<[u64; WORDS]>>,
}

impl Default for ReplayWindow {
    fn default() -> Self {
        Self::new()
    }
}

impl ReplayWindow {
    /// An empty window.
    pub fn new() -> Self {
        ReplayWindow {
            next: 0,
            bits: None,
        }
    }

    /// Would `counter` be accepted? Does not change state.
    pub fn would_accept(&self, counter: u64) -> bool {
        // u64::MAX has no successor for `next`; no sender ever uses it (keys retire first).
        if counter == u64::MAX {
            return false;
        }
        if counter >= self.next {
            return true;
        }
        if self.next - counter > WINDOW_BITS {
            return false;
        }
        // Below `next`, so something was accepted and the bitmap exists.
        let (w, b) = Self::slot(counter);
        self.bits
            .as_ref()
            .is_none_or(|bits| bits[w] & (1 << b) == 0)
    }

    /// Accepts `counter` if it is new and recent; returns whether it was accepted.
    pub fn check_and_set(&mut self, counter: u64) -> bool {
        if !self.would_accept(counter) {
            return false;
        }
        let highest = self.highest();
        let bits = self.bits.get_or_insert_with(|| Box::new([0; WORDS]));
        if counter >= self.next {
            if let Some(highest) = highest {
                // Clear the words the window slides into, at most the whole bitmap.
                let old_word = highest / 64;
                let clear = (counter / 64 - old_word).min(WORDS as u64);
                for i in 1..=clear {
                    bits[((old_word + i) % WORDS as u64) as usize] = 0;
                }
            }
            self.next = counter + 1;
        }
        let (w, b) = Self::slot(counter);
        bits[w] |= 1 << b;
        true
    }

    /// Highest counter accepted, if any.
    pub fn highest(&self) -> Option<u64> {
        self.next.checked_sub(1)
    }

    fn slot(counter: u64) -> (usize, u32) {
        (
            ((counter / 64) % WORDS as u64) as usize,
            (counter % 64) as u32,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    #[test]
    fn accepts_once() {
        let mut w = ReplayWindow::new();
        assert!(w.check_and_set(0));
        assert!(!w.check_and_set(0));
        assert!(w.check_and_set(5));
        assert!(w.check_and_set(3));
        assert!(!w.check_and_set(3));
        assert!(!w.check_and_set(5));
        assert_eq!(w.highest(), Some(5));
    }

    #[test]
    fn refuses_too_old() {
        let mut w = ReplayWindow::new();
        assert!(w.check_and_set(WINDOW_BITS + 10));
        assert!(!w.check_and_set(5));
        assert!(w.check_and_set(11));
    }

    proptest! {
        /// Against a model: a set of seen counters plus the age limit.
        #[test]
        fn matches_model(seq in proptest::collection::vec(0u64..30_000, 1..400)) {
            let mut w = ReplayWindow::new();
            let mut seen = HashSet::new();
            let mut max: Option<u64> = None;
            for c in seq {
                let too_old = max.is_some_and(|m| c < m && m - c >= WINDOW_BITS);
                let expect = !seen.contains(&c) && !too_old;
                prop_assert_eq!(w.check_and_set(c), expect, "counter {}", c);
                if expect {
                    seen.insert(c);
                    max = Some(max.map_or(c, |m| m.max(c)));
                }
            }
        }
    }
}
