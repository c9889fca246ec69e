//! The event queue: one timer per simulated component, in time order.
//!
//! Every component (a hop, an endpoint, a traffic source) has a `NodeId` and at most one
//! armed wake-up. Re-arming pushes a new heap entry and records its time; entries whose
//! time no longer matches the node's armed time are stale and skipped when popped (lazy
//! deletion, cheaper than a decrease-key heap). Ties are broken by insertion order, so
//! the order of events — and therefore the whole run — depends only on the inputs.
//! Entries are keyed by one `u128` (time in ns, then sequence): one comparison per heap
//! step instead of a chain over `Duration`'s fields, on the simulator's hottest path.
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

/// Time-ordered wake-ups with one armed time per node.
#[derive(Debug, Default)]
pub struct EventQueue {
    heap: BinaryHeap<Reverse<Entry>>,
    armed: Vec<Option<Duration>>,
    seq: u64,
    now: Duration,
    /// Events delivered (stale entries excluded).
    pub fired: u64,
}

impl EventQueue {
    /// A queue for `nodes` components.
    pub fn new(nodes: usize) -> Self {
        EventQueue {
            armed: vec![None; nodes],
            ..Default::default()
        }
    }

    /// Current time (of the last popped event).
    pub fn now(&self) -> Duration {
        self.now
    }

    /// Sets `node`'s wake-up to `at` (clamped to now), or disarms it with `None`.
    pub fn arm(&mut self, node: NodeId, at: Option<Duration>) {
        let at = at.map(|t| t.max(self.now));
        let slot = &mut self.armed[node as usize];
        if *slot == at {
            return;
        }
        *slot = at;
        if let Some(t) = at {
            self.seq += 1;
            let key = (u128::from(ns(t)) << 64) | u128::from(self.seq);
            self.heap.push(Reverse(Entry { key, node }));
        }
    }

    /// The next live event at or before `until`: (time, node); the node is disarmed.
    pub fn pop(&mut self, until: Duration) -> Option<(Duration, NodeId)> {
        let until = ns(until);
        while let Some(&Reverse(Entry { key, node })) = self.heap.peek() {
            if (key >> 64) as u64 > until {
                return None;
            }
            self.heap.pop();
            // Stale: the node was re-armed (or disarmed) since this entry was pushed.
            let Some(t) = self.armed[node as usize].filter(|&t| ns(t) == (key >> 64) as u64) else {
                continue;
            };
            self.armed[node as usize] = None;
            self.now = t;
            self.fired += 1;
            return Some((t, node));
        }
        None
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
        let mut q = EventQueue::new(3);
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
    }
}
