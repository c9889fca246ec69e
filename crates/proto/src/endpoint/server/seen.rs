//! Initiations already taken, by their ephemeral public key. A client sends the same
//! initiation on every link at once; each copy after the first would cost the server the
//! Diffie-Hellman of `Responder::read_init` (and, on another shard, a second one after the
//! hand-over) only to be refused for its timestamp. A copy whose key is here is refused
//! before any: when thousands of clients join at once this halves the work.
//!
//! Invariants: only initiations that authenticated as a configured peer are remembered (so
//! no one without a peer's key can put one here or push the others out); at most
//! `MAX_SEEN`, the oldest forgotten first. An honest client never repeats an ephemeral key
//! (32 random bytes), so a hit is always a copy or a replay, which the timestamp check
//! would refuse anyway.

use std::collections::{HashSet, VecDeque};

/// Most ephemeral keys remembered (about 300 KB): more than the copies in flight while a
/// shard works through a burst of joins.
pub const MAX_SEEN: usize = 4096;

/// An initiation's ephemeral public key: the first bytes of its Noise message.
pub type Ephemeral = [u8; 32];

/// The bounded set, in arrival order.
#[derive(Default)]
pub struct SeenInits {
    order: VecDeque<Ephemeral>,
    set: HashSet<Ephemeral>,
}

impl SeenInits {
    /// The ephemeral key of an initiation's Noise message, if it is long enough to hold one.
    pub fn key_of(noise: &[u8]) -> Option<Ephemeral> {
        noise.get(..32)?.try_into().ok()
    }

    /// Whether an initiation with this ephemeral key was taken already.
    pub fn contains(&self, e: &Ephemeral) -> bool {
        self.set.contains(e)
    }

    /// Remembers an authenticated initiation's key, forgetting the oldest beyond
    /// `MAX_SEEN`.
    pub fn insert(&mut self, e: Ephemeral) {
        if !self.set.insert(e) {
            return;
        }
        self.order.push_back(e);
        if self.order.len() > MAX_SEEN {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Against a model: the last `MAX_SEEN` distinct keys inserted, and nothing else.
        #[test]
        fn holds_the_newest_distinct_keys(keys in proptest::collection::vec(0u16..6000, 0..9000)) {
            let mut s = SeenInits::default();
            let mut model: Vec<u16> = Vec::new();
            let key = |k: u16| { let mut e = [0u8; 32]; e[..2].copy_from_slice(&k.to_le_bytes()); e };
            for k in keys {
                s.insert(key(k));
                if !model.contains(&k) {
                    model.push(k);
                }
                if model.len() > MAX_SEEN {
                    model.remove(0);
                }
            }
            prop_assert_eq!(s.set.len(), model.len());
            prop_assert!(s.order.len() == s.set.len());
            for k in &model {
                prop_assert!(s.contains(&key(*k)));
            }
        }
    }

    #[test]
    fn a_short_message_has_no_key() {
        assert!(SeenInits::key_of(&[0; 31]).is_none());
        assert_eq!(SeenInits::key_of(&[7; 40]), Some([7; 32]));
    }
}
