//! The server's indexes over its peers, which keep per-packet work independent of how many
//! peers it has: routes by prefix, session deadlines in a heap, and the sets of peers that
//! may have output.
//!
//! Invariants: `Routes` answers what a scan of every peer's `allowed_ips` for the longest
//! prefix would (the later peer on a tie); `Timers` holds each known deadline exactly once
//! and `pos` indexes it; a `PeerSet`'s `len` is its number of members.

use super::PeerConfig;
use crate::Instant;
use ipnet::IpNet;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Longest-prefix match from inner addresses to peers: one table per prefix length in
/// use, longest first (a handful of lengths in practice, /32 and /128 hosts mostly).
#[derive(Default)]
pub struct Routes {
    /// (is IPv6, prefix length, network address → peer), longest prefix first. Ordered
    /// maps: a few comparisons per lookup, cheaper than hashing an address.
    tables: Vec<(bool, u8, BTreeMap<IpAddr, usize>)>,
}

impl Routes {
    pub fn new(peers: &[PeerConfig]) -> Self {
        let mut r = Routes::default();
        for (i, p) in peers.iter().enumerate() {
            for n in &p.allowed_ips {
                let key = (matches!(n, IpNet::V6(_)), n.prefix_len());
                let t = match r.tables.iter().position(|t| (t.0, t.1) == key) {
                    Some(t) => t,
                    None => {
                        r.tables.push((key.0, key.1, BTreeMap::new()));
                        r.tables.len() - 1
                    }
                };
                // A later peer with the same prefix wins, as the linear scan this replaces
                // (`max_by_key` keeps the last maximum) did.
                r.tables[t].2.insert(n.network(), i);
            }
        }
        r.tables.sort_by_key(|t| std::cmp::Reverse(t.1));
        r
    }

    pub fn lookup(&self, dst: IpAddr) -> Option<usize> {
        self.tables
            .iter()
            .filter(|t| t.0 == dst.is_ipv6())
            .find_map(|(_, len, map)| map.get(&IpNet::new(dst, *len).ok()?.network()).copied())
    }
}

/// Deadline index of the peers' sessions. A session's deadline changes only when it is
/// called, so every call marks the peer stale and only stale peers are recomputed. The
/// known deadlines form an indexed binary min-heap: the earliest is at the root, and a
/// peer's entry moves in place when its deadline does (nearly every datagram moves it).
#[derive(Default)]
pub struct Timers {
    /// (deadline, peer), a min-heap.
    heap: Vec<(Instant, usize)>,
    /// Each peer's index in `heap`, or `NOT_IN_HEAP`.
    pos: Vec<usize>,
    /// Peers called since their deadline was last computed.
    stale: Vec<usize>,
    is_stale: Vec<bool>,
}

const NOT_IN_HEAP: usize = usize::MAX;

impl Timers {
    pub fn new(peers: usize) -> Self {
        Timers {
            pos: vec![NOT_IN_HEAP; peers],
            is_stale: vec![false; peers],
            ..Default::default()
        }
    }

    pub fn touch(&mut self, i: usize) {
        if !self.is_stale[i] {
            self.is_stale[i] = true;
            self.stale.push(i);
        }
    }

    pub fn first(&self) -> Option<Instant> {
        self.heap.first().map(|&(t, _)| t)
    }

    /// Recomputes the deadline of every stale peer with `deadline(peer)`.
    pub fn refresh(&mut self, deadline: impl Fn(usize) -> Option<Instant>) {
        while let Some(i) = self.stale.pop() {
            self.is_stale[i] = false;
            self.set(i, deadline(i));
        }
    }

    fn set(&mut self, i: usize, at: Option<Instant>) {
        let p = self.pos[i];
        match (p == NOT_IN_HEAP, at) {
            (true, None) => {}
            (true, Some(t)) => {
                self.heap.push((t, i));
                self.pos[i] = self.heap.len() - 1;
                self.sift_up(self.heap.len() - 1);
            }
            (false, None) => {
                self.heap.swap_remove(p);
                self.pos[i] = NOT_IN_HEAP;
                if p < self.heap.len() {
                    self.pos[self.heap[p].1] = p;
                    self.resift(p);
                }
            }
            (false, Some(t)) => {
                if self.heap[p].0 != t {
                    self.heap[p].0 = t;
                    self.resift(p);
                }
            }
        }
    }

    /// Restores the heap order around index `p`, whose key changed.
    fn resift(&mut self, p: usize) {
        let peer = self.heap[p].1;
        self.sift_up(p);
        self.sift_down(self.pos[peer]);
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.pos[self.heap[a].1] = a;
        self.pos[self.heap[b].1] = b;
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 && self.heap[i] < self.heap[(i - 1) / 2] {
            self.swap(i, (i - 1) / 2);
            i = (i - 1) / 2;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let mut m = i;
            for c in [2 * i + 1, 2 * i + 2] {
                if c < self.heap.len() && self.heap[c] < self.heap[m] {
                    m = c;
                }
            }
            if m == i {
                return;
            }
            self.swap(i, m);
            i = m;
        }
    }

    /// Appends to `out` the peers whose known deadline is at or before `now` (stale ones
    /// excepted): a walk of the heap that stops below every entry later than `now`.
    pub fn due(&self, now: Instant, out: &mut Vec<usize>) {
        self.due_below(0, now, out);
    }

    fn due_below(&self, k: usize, now: Instant, out: &mut Vec<usize>) {
        // Recursion depth is the heap's height: log2(peers) + 1.
        if let Some(&(_, i)) = self.heap.get(k).filter(|e| e.0 <= now) {
            if !self.is_stale[i] {
                out.push(i);
            }
            self.due_below(2 * k + 1, now, out);
            self.due_below(2 * k + 2, now, out);
        }
    }
}

/// A set of peer indices as a bitmap: O(1) insert and remove on the per-packet path, and
/// the next member in round-robin order by scanning words (peers / 64 at worst).
#[derive(Default)]
pub struct PeerSet {
    words: Vec<u64>,
    len: usize,
}

impl PeerSet {
    pub fn new(peers: usize) -> Self {
        PeerSet {
            words: vec![0; peers.div_ceil(64)],
            len: 0,
        }
    }

    pub fn insert(&mut self, i: usize) {
        let (w, b) = (i / 64, 1u64 << (i % 64));
        if self.words[w] & b == 0 {
            self.words[w] |= b;
            self.len += 1;
        }
    }

    pub fn remove(&mut self, i: usize) {
        let (w, b) = (i / 64, 1u64 << (i % 64));
        if self.words[w] & b != 0 {
            self.words[w] &= !b;
            self.len -= 1;
        }
    }

    /// The first member at or after `from`, wrapping around: round-robin order.
    pub fn next_from(&self, from: usize) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let n = self.words.len();
        let start = (from / 64) % n;
        // The start word masked to bits >= from, then the others, then the start word's
        // low bits (the wrap-around).
        let first = self.words[start] & (u64::MAX << (from % 64));
        if first != 0 {
            return Some(start * 64 + first.trailing_zeros() as usize);
        }
        (1..=n).find_map(|k| {
            let w = (start + k) % n;
            let bits = self.words[w];
            (bits != 0).then(|| w * 64 + bits.trailing_zeros() as usize)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::PublicKey;

    use proptest::prelude::*;

    proptest! {
        /// The heap agrees with a plain map of deadlines after any sequence of changes.
        #[test]
        fn timers_match_a_map(ops in prop::collection::vec((0usize..9, prop::option::of(0u64..50)), 1..300), now in 0u64..50) {
            let mut t = Timers::new(9);
            let mut model = std::collections::BTreeMap::new();
            for (i, at) in ops {
                let at = at.map(Instant::from_micros);
                t.set(i, at);
                match at {
                    Some(x) => model.insert(i, x),
                    None => model.remove(&i),
                };
                prop_assert_eq!(t.first(), model.values().min().copied());
                for (k, &(_, p)) in t.heap.iter().enumerate() {
                    prop_assert_eq!(t.pos[p], k);
                }
            }
            let now = Instant::from_micros(now);
            let mut due = Vec::new();
            t.due(now, &mut due);
            due.sort_unstable();
            let want: Vec<usize> = model.iter().filter(|(_, &x)| x <= now).map(|(&i, _)| i).collect();
            prop_assert_eq!(due, want);
        }
    }

    #[test]
    fn peer_set_walks_round_robin() {
        let mut s = PeerSet::new(130);
        assert_eq!(s.next_from(0), None);
        for i in [3, 64, 129] {
            s.insert(i);
        }
        s.insert(64);
        assert_eq!(s.len, 3);
        assert_eq!(s.next_from(0), Some(3));
        assert_eq!(s.next_from(4), Some(64));
        assert_eq!(s.next_from(65), Some(129));
        assert_eq!(s.next_from(130), Some(3), "wraps around");
        s.remove(3);
        s.remove(3);
        assert_eq!(s.len, 2);
        assert_eq!(s.next_from(0), Some(64));
        assert_eq!(s.next_from(130), Some(64));
        s.remove(64);
        s.remove(129);
        assert_eq!(s.next_from(7), None);
    }

    #[test]
    fn routes_take_the_longest_prefix_and_the_last_peer_on_ties() {
        let peer = |nets: &[&str]| PeerConfig {
            name: String::new(),
            public_key: PublicKey([0; 32]),
            allowed_ips: nets.iter().map(|n| n.parse().unwrap()).collect(),
        };
        let r = Routes::new(&[
            peer(&["10.0.0.0/8", "fd00::/64"]),
            peer(&["10.1.2.3/24"]),
            peer(&["10.1.2.7/32"]),
            peer(&["10.1.2.0/24"]),
        ]);
        let at = |a: &str| r.lookup(a.parse().unwrap());
        assert_eq!(at("10.9.9.9"), Some(0));
        assert_eq!(at("10.1.2.7"), Some(2));
        assert_eq!(at("10.1.2.8"), Some(3), "same /24 twice: the later peer");
        assert_eq!(at("fd00::1"), Some(0));
        assert_eq!(at("fd01::1"), None);
        assert_eq!(at("11.0.0.1"), None);
    }
}
