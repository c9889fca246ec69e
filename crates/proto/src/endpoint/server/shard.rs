//! The server's sessions spread over threads ("shards"). Each thread runs a `Server` of
//! its own with the whole peer list, and owns the sessions of the peers whose key maps to
//! it. What reaches a shard that does not own its session — an initiation (the kernel
//! spreads those over the shards by source address), a data datagram the kernel's filter
//! did not steer, a packet the device queued on another thread — is handed to the owner
//! ([`Handoff`]); the daemon carries it across.
//!
//! Invariants: a peer's owner is a pure function of its public key and the number of
//! shards, so shards agree without talking; a receiver index's owner is the index modulo
//! the number of shards (what the reuseport filter computes from the index's four bytes on
//! the wire, docs/PROTOCOL.md §2.3), and a shard hands out only indices it owns, so every
//! data datagram of a session can be steered to its thread by the kernel; at most
//! [`MAX_HANDOFFS`] wait, beyond that they are dropped and counted. With one shard nothing
//! is ever handed off and the server behaves exactly as before shards existed.

use crate::crypto::PublicKey;
use std::collections::VecDeque;
use std::net::SocketAddr;

/// Most shards a server may have (a reuseport group and a TUN device take 256 queues at
/// most, and the index's owner must fit a byte).
pub const MAX_SHARDS: u16 = 64;
/// Most handoffs waiting for the daemon (a flood of initiations for another shard's
/// peers is bounded here, not in memory).
pub const MAX_HANDOFFS: usize = 4096;

/// Which shard this server is, of how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    index: u16,
    count: u16,
}

impl Default for Shard {
    fn default() -> Self {
        Shard::ALONE
    }
}

impl Shard {
    /// The only shard: owns every session.
    pub const ALONE: Shard = Shard { index: 0, count: 1 };

    /// Shard `index` of `count`; `None` unless `index < count <= MAX_SHARDS`.
    pub fn new(index: u16, count: u16) -> Option<Shard> {
        (index < count && count <= MAX_SHARDS).then_some(Shard { index, count })
    }

    /// This shard's number.
    pub fn index(&self) -> u16 {
        self.index
    }

    /// How many shards there are.
    pub fn count(&self) -> u16 {
        self.count
    }

    /// The shard that owns the session of the peer with `key`.
    pub fn owner_of_key(&self, key: &PublicKey) -> u16 {
        // Public keys are uniform bytes: their first four spread peers evenly.
        let b = &key.0;
        let v = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        (v % u32::from(self.count)) as u16
    }

    /// The shard that owns receiver index `idx` (what the kernel's filter computes).
    pub fn owner_of_index(&self, idx: u32) -> u16 {
        (idx % u32::from(self.count)) as u16
    }

    /// Whether this shard owns the session of the peer with `key`.
    pub fn owns_key(&self, key: &PublicKey) -> bool {
        self.owner_of_key(key) == self.index
    }

    /// `random` made into an index this shard owns (keeps all but its residue).
    pub fn own_index(&self, random: u32) -> u32 {
        let c = u32::from(self.count);
        let base = random / c * c;
        base.checked_add(u32::from(self.index))
            .unwrap_or(base - c + u32::from(self.index))
    }
}

/// Input that belongs to another shard's session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handoff {
    /// A datagram, as it arrived: a data datagram, or an initiation (it passed the mac1
    /// check and flood defence of the shard that read it: the owner does not screen it
    /// again).
    Datagram {
        /// The shard it goes to.
        to: u16,
        /// Where it came from.
        from: SocketAddr,
        /// The datagram.
        bytes: Vec<u8>,
    },
    /// A packet read from the device for a peer of another shard.
    Packet {
        /// The shard it goes to.
        to: u16,
        /// The IP packet.
        bytes: Vec<u8>,
    },
}

impl Handoff {
    /// The shard it goes to.
    pub fn to(&self) -> u16 {
        match self {
            Handoff::Datagram { to, .. } | Handoff::Packet { to, .. } => *to,
        }
    }
}

/// Handoffs owed, bounded.
#[derive(Debug, Default)]
pub(super) struct Handoffs {
    queue: VecDeque<Handoff>,
}

impl Handoffs {
    /// Queues `h`; false (the caller counts a drop) when [`MAX_HANDOFFS`] wait.
    pub(super) fn push(&mut self, h: Handoff) -> bool {
        if self.queue.len() >= MAX_HANDOFFS {
            return false;
        }
        self.queue.push_back(h);
        true
    }

    pub(super) fn pop(&mut self) -> Option<Handoff> {
        self.queue.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn only_valid_shards_are_made() {
        assert!(Shard::new(0, 1).is_some());
        assert!(Shard::new(1, 1).is_none());
        assert!(Shard::new(0, 0).is_none());
        assert!(Shard::new(0, MAX_SHARDS + 1).is_none());
        assert_eq!(Shard::default(), Shard::ALONE);
    }

    #[test]
    fn the_queue_is_bounded() {
        let mut q = Handoffs::default();
        let h = Handoff::Packet {
            to: 1,
            bytes: vec![0; 4],
        };
        for _ in 0..MAX_HANDOFFS {
            assert!(q.push(h.clone()));
        }
        assert!(!q.push(h.clone()));
        assert_eq!(q.pop(), Some(h));
    }

    proptest! {
        #[test]
        fn an_index_a_shard_hands_out_is_its_own(random: u32, count in 1u16..=MAX_SHARDS, i: u16) {
            let s = Shard::new(i % count, count).unwrap();
            let idx = s.own_index(random);
            prop_assert_eq!(s.owner_of_index(idx), s.index());
            // All but the residue is kept: indices stay as unpredictable as the input.
            prop_assert!(idx.abs_diff(random) < u32::from(count));
        }

        #[test]
        fn every_shard_agrees_on_a_key_owner(key: [u8; 32], count in 1u16..=MAX_SHARDS) {
            let k = PublicKey(key);
            let owners: Vec<u16> = (0..count)
                .filter(|&i| Shard::new(i, count).unwrap().owns_key(&k))
                .collect();
            prop_assert_eq!(owners.len(), 1);
            prop_assert_eq!(owners[0], Shard::new(0, count).unwrap().owner_of_key(&k));
        }
    }
}
