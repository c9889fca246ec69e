//! The event queue: one timer per simulated component, in time order.
//!
//! Every component (a hop, an endpoint, a traffic source) has a `NodeId` and at most one
//! armed wake-up. Re-arming pushes a new heap entry and records its key; entries whose
//! key is no longer the node's live key are stale and skipped when popped (lazy deletion,
//! cheaper than a decrease-key heap). Ties are broken by the order of arming (a node
//! re-armed to a time it had before takes its place from the new arming), so the order of
//! events — and therefore the whole run — depends only on the inputs.
//! Entries are keyed by one `u128` (time in ns, then sequence): one comparison per heap
//! step instead of a chain over `Duration`'s fields, on the simulator's hottest path.
//! A world of at most `SCAN_MAX` nodes (one client–server pair: a dozen) skips the heap:
//! each node's live key sits in a small array and `pop` takes its minimum by a linear scan,
//! which beats a heap of lazily deleted entries at that size. Both modes order events by
//! the same key, so a run is identical in either.
//!
//! Invariants: `pop` never returns a time earlier than the previous one; a node is woken
//! at most once per armed time.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

/// Heap key: (time in ns) << 64 | sequence; the node rides along (sequences are unique,
/// so it never decides an order — as with the (time, sequence, node) tuple it replaces).
#[derive(Debug, Clone, Copy)]
struct Entry {
    key: u128,
    node: NodeId,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        self.key == o.key
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Entry {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.key.cmp(&o.key)
    }
}

fn ns(t: Duration) -> u64 {
    // 2^64 ns is 584 years of simulated time.
    u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)
}

/// Index of a component.
pub type NodeId = u32;

/// Worlds of at most this many nodes find the next event by scanning (see the module doc).
const SCAN_MAX: usize = 32;
/// Key of a disarmed node (above every real key: time < 2^64 - 1 ns).
const NO_KEY: u128 = u128::MAX;

/// Time-ordered wake-ups with one armed time per node.
#[derive(Debug, Default)]
pub struct EventQueue {
    heap: BinaryHeap<Reverse<Entry>>,
    /// Each node's live key (its armed time is the high half), `NO_KEY` when disarmed.
    keys: Vec<u128>,
    /// Whether `pop` scans `keys` instead of using the heap.
    scan: bool,
    seq: u64,
    now: Duration,
    /// Events delivered (stale entries excluded).
    pub fired: u64,
}

impl EventQueue {
    /// A queue for `nodes` components.
    pub fn new(nodes: usize) -> Self {
        EventQueue {
            keys: vec![NO_KEY; nodes],
            scan: nodes <= SCAN_MAX,
            ..Default::default()
        }
    }

    /// Current time (of the last popped event).
    pub fn now(&self) -> Duration {
        self.now
    }

    /// Sets `node`'s wake-up to `at` (clamped to now), or disarms it with `None`.
    pub fn arm(&mut self, node: NodeId, at: Option<Duration>) {
        let at = at.map(|t| ns(t.max(self.now)));
        let live = self.keys[node as usize];
        if (live != NO_KEY).then_some((live >> 64) as u64) == at {
            return;
        }
        let key = at.map(|t| {
            self.seq += 1;
            (u128::from(t) << 64) | u128::from(self.seq)
        });
        self.keys[node as usize] = key.unwrap_or(NO_KEY);
        if let (false, Some(key)) = (self.scan, key) {
            self.heap.push(Reverse(Entry { key, node }));
        }
    }

    /// The next live event at or before `until`: (time, node); the node is disarmed.
    pub fn pop(&mut self, until: Duration) -> Option<(Duration, NodeId)> {
        let until = ns(until);
        if self.scan {
            return self.pop_scan(until);
        }
        while let Some(&Reverse(Entry { key, node })) = self.heap.peek() {
            if (key >> 64) as u64 > until {
                return None;
            }
            self.heap.pop();
            // Stale: the node was re-armed (or disarmed) since this entry was pushed.
            if self.keys[node as usize] != key {
                continue;
            }
            return Some(self.fire(node as usize, key));
        }
        None
    }

    fn pop_scan(&mut self, until: u64) -> Option<(Duration, NodeId)> {
        let (node, &key) = self.keys.iter().enumerate().min_by_key(|&(_, k)| *k)?;
        if key == NO_KEY || (key >> 64) as u64 > until {
            return None;
        }
        Some(self.fire(node, key))
    }

    /// Disarms `node`, whose live `key` is the next event, and moves the clock to it.
    fn fire(&mut self, node: usize, key: u128) -> (Duration, NodeId) {
        self.keys[node] = NO_KEY;
        let t = Duration::from_nanos((key >> 64) as u64);
        self.now = t;
        self.fired += 1;
        (t, node as NodeId)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: u64) -> Duration {
        Duration::from_millis(x)
    }

    #[test]
    fn rearming_replaces_and_ties_keep_insertion_order() {
        // Scan mode (3 nodes) and heap mode (padded beyond SCAN_MAX with idle nodes).
        for nodes in [3, SCAN_MAX + 1] {
            rearming_replaces_and_ties_keep_insertion_order_with(nodes);
        }
    }

    fn rearming_replaces_and_ties_keep_insertion_order_with(nodes: usize) {
        let mut q = EventQueue::new(nodes);
        q.arm(0, Some(ms(5)));
        q.arm(1, Some(ms(3)));
        q.arm(2, Some(ms(3)));
        q.arm(0, Some(ms(1)));
        assert_eq!(q.pop(ms(100)), Some((ms(1), 0)));
        assert_eq!(q.pop(ms(100)), Some((ms(3), 1)));
        assert_eq!(q.pop(ms(100)), Some((ms(3), 2)));
        assert_eq!(
            q.pop(ms(100)),
            None,
            "stale entry of node 0 at 5 ms skipped"
        );
        q.arm(1, Some(ms(50)));
        assert_eq!(q.pop(ms(10)), None);
        q.arm(1, None);
        assert_eq!(q.pop(ms(100)), None);
        // A node re-armed to a time it had before ranks from its latest arming.
        q.arm(0, Some(ms(20)));
        q.arm(0, Some(ms(30)));
        q.arm(1, Some(ms(20)));
        q.arm(0, Some(ms(20)));
        assert_eq!(q.pop(ms(100)), Some((ms(20), 1)));
        assert_eq!(q.pop(ms(100)), Some((ms(20), 0)));
    }

    proptest::proptest! {
        /// The scan mode pops exactly what the heap mode pops, for any arm/pop sequence.
        #[test]
        fn scan_and_heap_modes_agree(
            ops in proptest::collection::vec((0u32..8, proptest::option::of(0u64..6), 0u64..4), 0..200)
        ) {
            let mut scan = EventQueue::new(8);
            let mut heap = EventQueue::new(SCAN_MAX + 1);
            for (node, at, until) in ops {
                let now = scan.now();
                let at = at.map(|d| now + ms(d));
                scan.arm(node, at);
                heap.arm(node, at);
                let until = now + ms(until);
                proptest::prop_assert_eq!(scan.pop(until), heap.pop(until));
            }
            proptest::prop_assert_eq!(scan.fired, heap.fired);
        }
    }
}
