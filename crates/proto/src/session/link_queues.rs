//! Paced ingress queues for TCP under link policies (`only:`, `prefer:`, `backup:`), one
//! per rule.
//!
//! A link policy's TCP is carried as `best`'s is (`schedule.rs`): queued with CoDel, paced
//! on the path its rule picks (`sched/link.rs`), numbered and ordered in its flow when it
//! leaves, so a datagram the link loses is repaired (`reinject.rs`) and the inner TCP sees
//! only CoDel's drops. One queue per rule, not one for all: flows of different rules go on
//! different paths, and in one fair queue the head of a flow whose path is paced shut would
//! hold back flows whose paths have room. Flows of one rule are on the same path at any
//! moment, so within a queue nothing waits for another path.
//!
//! Invariants: at most `MAX_RULES` queues (a rule names one link: three rules per path); a
//! queue lives as long as the session once made, and costs no allocation while empty; the
//! queues' bytes together stay under the bound each was made with times their number
//! (each is bounded like the `best` queue).

use crate::codel::QueueDrops;
use crate::fq_codel::FqCodelQueue;
use crate::policy::LinkRule;
use crate::Instant;
use core::time::Duration;
use std::sync::Arc;

/// Most rules with a queue of their own; a packet of another rule goes unpaced.
pub(super) const MAX_RULES: usize = 3 * crate::sched::MAX_PATHS;

/// The queues, in the order their rules first carried TCP.
#[derive(Debug, Default)]
pub(super) struct LinkQueues {
    queues: Vec<(LinkRule, FqCodelQueue)>,
}

impl LinkQueues {
    /// Queues `packet` under `rule` (a queue of `max_bytes` made for it if needed). `Err`
    /// gives the packet back when no queue can be made for the rule (`MAX_RULES`); else
    /// whether the queue took it (a full queue drops it, counted as an overflow).
    pub fn push(
        &mut self,
        now: Instant,
        rule: LinkRule,
        packet: Arc<[u8]>,
        max_bytes: usize,
    ) -> Result<bool, Arc<[u8]>> {
        let i = match self.queues.iter().position(|(r, _)| *r == rule) {
            Some(i) => i,
            None if self.queues.len() < MAX_RULES => {
                self.queues.push((rule, FqCodelQueue::new(max_bytes)));
                self.queues.len() - 1
            }
            None => return Err(packet),
        };
        Ok(self.queues[i].1.push(now, packet))
    }

    /// The queue of `rule`, if one was made.
    pub fn get_mut(&mut self, rule: LinkRule) -> Option<&mut FqCodelQueue> {
        self.queues
            .iter_mut()
            .find(|(r, _)| *r == rule)
            .map(|(_, q)| q)
    }

    /// The rule of queue `i` (in `0..len()`).
    pub fn rule(&self, i: usize) -> LinkRule {
        self.queues[i].0
    }

    /// Queues made.
    pub fn len(&self) -> usize {
        self.queues.len()
    }

    /// Whether every queue is empty.
    pub fn is_empty(&self) -> bool {
        self.queues.iter().all(|(_, q)| q.is_empty())
    }

    /// Bytes queued in all.
    pub fn bytes(&self) -> usize {
        self.queues.iter().map(|(_, q)| q.bytes()).sum()
    }

    /// Drops of all the queues.
    pub fn drops(&self) -> QueueDrops {
        self.queues.iter().fold(QueueDrops::default(), |d, (_, q)| {
            let e = q.drops();
            QueueDrops {
                codel: d.codel + e.codel,
                overflow: d.overflow + e.overflow,
            }
        })
    }

    /// Sets every queue's CoDel interval (RFC 8289's 5-ms target, as the `best` queue
    /// keeps), ramping while `ramping(rule)` says the rule's link is in startup.
    pub fn set_interval(&mut self, interval: Duration, ramping: impl Fn(LinkRule) -> bool) {
        for (rule, q) in &mut self.queues {
            q.set_interval(interval, Duration::ZERO);
            q.set_ramping(ramping(*rule));
        }
    }

    /// Marks each queue stalled or not, as `stalled(rule)` says (`CodelQueue::set_stalled`).
    pub fn set_stalled(&mut self, stalled: impl Fn(LinkRule) -> bool) {
        for (rule, q) in &mut self.queues {
            q.set_stalled(stalled(*rule));
        }
    }

    /// Removes and returns the packets of the rules `take` selects, queue by queue, each
    /// with its rule.
    pub fn drain_where(&mut self, take: impl Fn(LinkRule) -> bool) -> Vec<(LinkRule, Arc<[u8]>)> {
        let mut out = Vec::new();
        for (rule, q) in &mut self.queues {
            if take(*rule) {
                while let Some(p) = q.take() {
                    out.push((*rule, p));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::PathId;

    fn pkt(n: u8) -> Arc<[u8]> {
        Arc::from(&[n; 100][..])
    }

    #[test]
    fn one_queue_per_rule_and_no_more_than_the_bound() {
        let mut q = LinkQueues::default();
        let now = Instant::ZERO;
        let only = LinkRule::Only(PathId(1));
        let prefer = LinkRule::Prefer(PathId(1));
        assert_eq!(q.push(now, only, pkt(1), 10_000), Ok(true));
        assert_eq!(q.push(now, only, pkt(2), 10_000), Ok(true));
        assert_eq!(q.push(now, prefer, pkt(3), 10_000), Ok(true));
        assert_eq!(q.len(), 2);
        assert_eq!(q.bytes(), 300);
        for id in 2..=u8::MAX {
            let _ = q.push(now, LinkRule::Backup(PathId(id)), pkt(4), 10_000);
        }
        assert_eq!(q.len(), MAX_RULES);
        assert!(q
            .push(now, LinkRule::Only(PathId(200)), pkt(5), 10_000)
            .is_err());
        // The bound is per queue: a full one drops, counted.
        assert_eq!(
            q.push(now, only, Arc::from(&[0u8; 20_000][..]), 10_000),
            Ok(false)
        );
        assert_eq!(q.drops().overflow, 1);
    }

    #[test]
    fn drain_where_takes_only_the_rules_named() {
        let mut q = LinkQueues::default();
        let now = Instant::ZERO;
        let (a, b) = (LinkRule::Only(PathId(0)), LinkRule::Prefer(PathId(0)));
        for n in 0..3 {
            q.push(now, a, pkt(n), 10_000).unwrap();
            q.push(now, b, pkt(10 + n), 10_000).unwrap();
        }
        let taken = q.drain_where(|r| matches!(r, LinkRule::Only(_)));
        assert_eq!(taken.len(), 3);
        assert!(taken.iter().all(|(r, p)| *r == a && p[0] < 10));
        assert_eq!(
            taken.iter().map(|(_, p)| p[0]).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert_eq!(q.bytes(), 300);
        assert!(!q.is_empty());
    }
}
