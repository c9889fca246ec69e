//! The event queue: one timer per simulated component, in time order.
//!
//! Every component (a hop, an endpoint, a traffic source) has a `NodeId` and at most one
//! armed wake-up. Re-arming pushes a new heap entry and records its time; entries whose
//! time no longer matches the node's armed time are stale and skipped when popped (lazy
//! deletion, cheaper than a decrease-key heap). Ties are broken by insertion order, so
//! the order of events — and therefore the whole run — depends only on the inputs.
//!
//! Invariants: `pop` never returns a time earlier than the previous one; a node is woken
//! at most once per armed time.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

/// Index of a component.
pub type NodeId = u32;

/// Time-ordered wake-ups with one armed time per node.
#[derive(Debug, Default)]
pub struct EventQueue {
    heap: BinaryHeap<Reverse<(Duration, u64, NodeId)>>,
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
            self.heap.push(Reverse((t, self.seq, node)));
        }
    }

    /// The next live event at or before `until`: (time, node); the node is disarmed.
    pub fn pop(&mut self, until: Duration) -> Option<(Duration, NodeId)> {
        while let Some(&Reverse((t, _, node))) = self.heap.peek() {
            if t > until {
                return None;
            }
            self.heap.pop();
            if self.armed[node as usize] != Some(t) {
                continue;
            }
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
