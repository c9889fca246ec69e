//! Sending side of a session: which path(s) each IP packet goes to.
//!
//! `redundant`, `realtime` and non-TCP `best` and link-policy packets are scheduled as they
//! arrive (a realtime packet no path can deliver before its deadline is dropped here,
//! `sched/realtime.rs`). `aggregate` packets wait in the CoDel ingress queue and leave one
//! at a time, when the scheduler finds a path that may send (window and pacer): the queue,
//! not the links, holds the standing backlog, so CoDel's drops are the inner TCP's
//! congestion signal and link queues stay short (its interval follows the paths' RTTs,
//! updated when feedback arrives, not per packet). Each aggregate packet's flow is looked
//! up first: a flow too small for a second path to pay (`sched::split`) only sees the
//! primary path.
//!
//! TCP under `best` is carried the same way, restricted to the path `best` picks: a queue
//! of its own (CoDel too), paced by that path's rate controller, numbered and ordered in
//! its flow when it leaves, so a datagram the link loses is repaired (`reinject.rs`) and
//! the inner TCP sees only CoDel's drops. Unpaced, `best` left the link's losses to the
//! inner TCP: 1 % random loss held CUBIC at 5.3 Mbit/s on a 60 Mbit/s link (45.5 now). Why pacing
//! and not repair alone: a repaired congestion loss is one the inner TCP never sees, so it
//! would fill the link's queue without bound; the rate controller and CoDel put that
//! signal back where `aggregate` has it. Other protocols under `best` stay unpaced and
//! unordered: their own recovery (QUIC) or none (DNS, games) wants no hold; only their
//! small packets are repaired when lost (`reinject.rs`). TCP under a
//! link policy is carried so too, on the path its rule picks, in a queue per rule
//! (`link_queues.rs`). The one-path queues go before the aggregate one: each only ever
//! waits for one path's pacer.
//!
//! Invariants: a data sequence number is taken only when a packet leaves a queue, so
//! numbers follow send order (what the receiver's reorder buffer relies on); a path that
//! had room while the queues were empty is marked application-limited, so its delivery
//! samples do not lower its bandwidth estimate.

use super::{Job, Session, MAX_JOBS};
use crate::fq_codel::FqCodelQueue;
use crate::path::{PathId, PathState, PathView};
use crate::policy::{parse_flow, FlowKey, LinkRule, Policy};
use crate::sched::realtime::{self, RtChoice};
use crate::sched::split::FlowMeter;
use crate::sched::{split, EarliestArrival, PathSet, Scheduler, Selection, MAX_PATHS};
use crate::wire::{DataFlags, OrderMode};
use crate::Instant;
use core::time::Duration;
use std::sync::Arc;

impl Session {
    /// Queues one IP packet for the peer under `policy`; while no path may carry it, it
    /// is held (`store.rs`).
    pub fn send_packet(&mut self, now: Instant, packet: &[u8], policy: Policy) {
        if self.keys.current.is_none() {
            self.counters.no_key_drops += 1;
            return;
        }
        let packet: Arc<[u8]> = Arc::from(packet);
        if self.must_hold(now, policy) {
            self.counters.tx_ip_packets += 1;
            self.hold(now, policy, packet);
            return;
        }
        self.send_now(now, packet, policy, None);
    }

    /// Schedules one IP packet under `policy`, on path `on` if given (held packets leave
    /// on the path that came back).
    pub(super) fn send_now(
        &mut self,
        now: Instant,
        packet: Arc<[u8]>,
        policy: Policy,
        on: Option<PathId>,
    ) {
        if policy == Policy::Aggregate {
            // Sequence numbers are taken when packets leave the queue (see codel.rs).
            if self.agg_queue.push(now, packet) && on.is_none() {
                self.counters.tx_ip_packets += 1;
            }
            return;
        }
        // A held packet (`on`) goes out on the path that came back, as before.
        let packet = if on.is_none() && is_tcp(&packet) {
            match self.queue_tcp(now, policy, packet) {
                Ok(()) => return,
                Err(p) => p,
            }
        } else {
            packet
        };
        if let Policy::Realtime { deadline, fec } = policy {
            self.send_realtime(now, packet, deadline, fec);
            return;
        }
        // A held packet was counted when it was accepted.
        if on.is_none() {
            self.counters.tx_ip_packets += 1;
        }
        let seq = self.next_data_seq;
        self.next_data_seq += 1;
        let sel = match on {
            Some(path) => crate::sched::one(path),
            None => self.select(now, policy, packet.len()),
        };
        let (flags, arg) = policy.data_flags();
        self.push_data_jobs(sel, seq, (flags, 0), (arg, policy.link_rule()), packet);
    }

    /// Queues a TCP packet under `best` or a link policy in its paced queue (counted sent
    /// if the queue took it); gives it back for any other policy, or a link rule beyond
    /// `link_queues::MAX_RULES`, which then goes unpaced.
    fn queue_tcp(
        &mut self,
        now: Instant,
        policy: Policy,
        packet: Arc<[u8]>,
    ) -> Result<(), Arc<[u8]>> {
        let taken = match policy {
            Policy::Best => self.best_queue.push(now, packet),
            Policy::Link(rule) => {
                self.link_queues
                    .push(now, rule, packet, self.cfg.queue_max_bytes)?
            }
            _ => return Err(packet),
        };
        if taken {
            self.counters.tx_ip_packets += 1;
        }
        Ok(())
    }

    /// The paths a `best`, `redundant` or link-policy packet of `len` bytes goes on.
    fn select(&mut self, now: Instant, policy: Policy, len: usize) -> Selection {
        let views = self.take_views(now);
        let sel = match policy {
            Policy::Redundant { copies } => {
                self.redundant = crate::sched::Redundant::new(copies.map(usize::from));
                self.redundant.select(now, &views, len)
            }
            Policy::Link(rule) => self.link_sched.select(now, rule, &views, len),
            _ => self.best.select(now, &views, len),
        };
        self.put_views(views);
        sel
    }

    /// A realtime packet: on the path `sched::realtime` picks within its deadline, or
    /// dropped here (counted `rt_dropped_late`) if no path delivers it in time; with `fec`,
    /// it joins the open parity block.
    fn send_realtime(&mut self, now: Instant, packet: Arc<[u8]>, deadline: Duration, fec: bool) {
        let views = self.take_views(now);
        let choice = realtime::select(now, &views, packet.len(), deadline);
        self.put_views(views);
        let RtChoice::Send(sel) = choice else {
            self.counters.rt_dropped_late += 1;
            return;
        };
        self.counters.tx_ip_packets += 1;
        let seq = self.next_data_seq;
        self.next_data_seq += 1;
        let policy = Policy::Realtime { deadline, fec };
        let flags = DataFlags::new(policy.code(), false);
        let path = match &sel {
            Selection::Paths(p) if p.len() == 1 => Some(p[0]),
            _ => None,
        };
        let deadline_ms = policy.deadline_ms();
        self.push_data_jobs(sel, seq, (flags, 0), (deadline_ms, None), packet.clone());
        if let (Some(path), true) = (path, fec) {
            self.protect_realtime(now, seq, path, packet, deadline);
        }
    }

    /// Jobs sending packet `seq` on the selected paths; `order` is its flags and its
    /// predecessor's distance (`wire::OrderMode`), then its deadline (realtime) and link
    /// rule (link policies: what a resend must respect, `reinject.rs`).
    pub(super) fn push_data_jobs(
        &mut self,
        sel: Selection,
        seq: u64,
        (flags, pred_gap): (DataFlags, u16),
        (deadline_ms, link): (u16, Option<LinkRule>),
        packet: Arc<[u8]>,
    ) {
        let mut targets: PathSet = match sel {
            Selection::Paths(p) => p,
            Selection::AllPaths | Selection::Wait => self
                .paths
                .iter()
                .filter(|s| s.path.available())
                .map(|s| s.path.id())
                .collect(),
        };
        // Kernel fast path: one datagram, on the first path; the kernel copies it.
        let kernel_copies = self.cfg.kernel_copies
            && targets.len() > 1
            && flags.policy_code() == (Policy::Redundant { copies: None }).code();
        if kernel_copies {
            targets.truncate(1);
        }
        for path in targets {
            if self.jobs.len() >= MAX_JOBS {
                self.counters.queue_drops += 1;
                return;
            }
            self.jobs.push_back(Job::Data {
                path,
                seq,
                flags,
                pred_gap,
                deadline_ms,
                packet: packet.clone(),
                kernel_copies,
                link,
            });
        }
    }

    /// Scheduler views of all paths at `now`, in a buffer the session keeps (this runs per
    /// packet: no allocation, and no move of a fixed array of `MAX_PATHS` views, which
    /// cost more than computing them); give it back with `put_views`.
    pub(super) fn take_views(&mut self, now: Instant) -> Vec<PathView> {
        let mut v = std::mem::take(&mut self.view_buf);
        v.clear();
        v.extend(self.paths.iter().take(MAX_PATHS).map(|s| s.path.view(now)));
        v
    }

    pub(super) fn put_views(&mut self, v: Vec<PathView>) {
        self.view_buf = v;
    }

    fn set_app_limited(&mut self, limited: bool) {
        for s in &mut self.paths {
            s.path.set_app_limited(limited);
        }
    }

    /// Moves the head of a queue to a job if a path may send it now: first a
    /// reinjection, then the best queue's head, then the aggregate queue's. One packet per
    /// call: the caller builds it (which charges the path's pacer and window) before
    /// asking again, so every decision sees up-to-date paths.
    pub(super) fn schedule_aggregate(&mut self, now: Instant) {
        if self.jobs.len() >= MAX_JOBS {
            return;
        }
        // Data of a failed path goes first (`reinject.rs`): it is older than anything queued.
        if !self.reinject.is_empty() {
            self.schedule_reinjection(now);
            return;
        }
        let stalled = !self.paths.iter().any(|s| s.path.state() == PathState::Up);
        self.agg_queue.set_stalled(stalled);
        self.best_queue.set_stalled(stalled);
        // An `only:` queue is stalled while its one link is not `Up`, though others are:
        // what waits for that link's outage is no standing queue to signal.
        let paths = &self.paths;
        let up = |id: PathId| {
            paths
                .iter()
                .any(|s| s.path.id() == id && s.path.state() == PathState::Up)
        };
        self.link_queues.set_stalled(|rule| match rule {
            LinkRule::Only(l) => !up(l),
            _ => stalled,
        });
        let mut wake = None;
        // One path's queues first (each waits for one pacer only), the striped one last.
        let links = self.link_queues.len();
        for k in 0..links + 2 {
            let queue = match k {
                0 => Queue::Best,
                k if k <= links => Queue::Link(self.link_queues.rule(k - 1)),
                _ => Queue::Aggregate,
            };
            match self.schedule_queue(now, queue) {
                Scheduled::Sent => {
                    self.pace_wake = None;
                    return;
                }
                Scheduled::Wait(at) => wake = earliest(wake, at),
                Scheduled::Empty => {}
            }
        }
        if self.paced_queues_empty() {
            // Nothing to send: whatever room the paths have is unused.
            self.set_app_limited(true);
        } else {
            // The paths are busy, not idle.
            self.set_app_limited(false);
        }
        self.pace_wake = wake;
    }

    /// Sends the head of the reinjection queue if a path may: the aggregate scheduler's
    /// choice, within its link rule and, for a `best` packet, on the path `best` uses.
    fn schedule_reinjection(&mut self, now: Instant) {
        let Some((len, link, code)) = self
            .reinject
            .front()
            .map(|r| (r.packet.len(), r.link, r.flags.policy_code()))
        else {
            return;
        };
        let mut views = self.take_views(now);
        // Repairs of a `best` or link-policy flow stay on the link it uses (or follow it
        // to another when it fails, as its scheduler does); `only:` data never leaves its
        // link, `backup:` data goes on its link only while no other path is `Up`.
        match link {
            Some(rule) => self.restrict_to_link(now, rule, &mut views, len),
            None if code == Policy::Best.code() => self.restrict_to_best(now, &mut views, len),
            None => {}
        }
        self.cap_release_windows(&mut views);
        let sel = self.aggregate.select(now, &views, len);
        if sel == Selection::Wait {
            self.set_app_limited(false);
            self.pace_wake = pacer_wake(now, &views, len);
        } else if let Some(r) = self.reinject.pop_front() {
            self.pace_wake = None;
            self.push_data_jobs(
                sel,
                r.data_seq,
                (r.flags, r.pred_gap),
                (0, r.link),
                r.packet,
            );
        }
        self.put_views(views);
    }

    /// Narrows `views` to the path `best` would send a `len`-byte packet on (all of them
    /// if it names none).
    fn restrict_to_best(&mut self, now: Instant, views: &mut Vec<PathView>, len: usize) {
        if let Selection::Paths(p) = self.best.select(now, views, len) {
            views.retain(|v| p.contains(&v.id));
        }
    }

    /// Narrows `views` to the path link rule `rule` would send a `len`-byte packet on.
    fn restrict_to_link(
        &mut self,
        now: Instant,
        rule: LinkRule,
        views: &mut Vec<PathView>,
        len: usize,
    ) {
        if let Selection::Paths(p) = self.link_sched.select(now, rule, views, len) {
            views.retain(|v| p.contains(&v.id));
        }
    }

    /// Offers the head of `queue` to the paths it may use: the aggregate queue's to those
    /// its flow's split rule allows, through the aggregate scheduler; a one-path queue's
    /// (`best`, a link rule) to the path its scheduler picks, through the earliest-arrival
    /// scheduler (window and pacer).
    fn schedule_queue(&mut self, now: Instant, queue: Queue) -> Scheduled {
        let Some(head) = self.paced_queue(queue).and_then(|q| q.head(now)) else {
            return Scheduled::Empty;
        };
        let len = head.len();
        let flow = parse_flow(head).map(|(k, _)| k);
        let mut allowed = self.take_views(now);
        self.cap_release_windows(&mut allowed);
        let sel = match queue {
            Queue::Best => {
                self.restrict_to_best(now, &mut allowed, len);
                EarliestArrival::new().select(now, &allowed, len)
            }
            Queue::Link(rule) => {
                self.restrict_to_link(now, rule, &mut allowed, len);
                EarliestArrival::new().select(now, &allowed, len)
            }
            Queue::Aggregate => self.select_striped(now, &mut allowed, flow.as_ref(), len),
        };
        let wait = (sel == Selection::Wait).then(|| pacer_wake(now, &allowed, len));
        self.put_views(allowed);
        if let Some(at) = wait {
            return Scheduled::Wait(at);
        }
        let metered = queue == Queue::Aggregate;
        let (flow_order, link) = (self.cfg.flow_order, queue.policy().link_rule());
        let Some(q) = (match queue {
            Queue::Best => Some(&mut self.best_queue),
            Queue::Aggregate => Some(&mut self.agg_queue),
            Queue::Link(rule) => self.link_queues.get_mut(rule),
        }) else {
            return Scheduled::Empty;
        };
        let Some(s) = take_striped(
            q,
            &mut self.flow_meter,
            &mut self.next_data_seq,
            now,
            (flow, queue.policy()),
            metered,
            flow_order,
        ) else {
            return Scheduled::Empty;
        };
        self.push_data_jobs(sel, s.seq, (s.flags, s.pred_gap), (0, link), s.packet);
        Scheduled::Sent
    }

    /// The aggregate queue's head (of `flow`, `len` bytes): on the paths its flow's split
    /// rule allows (`allowed` narrowed to them), as the aggregate scheduler picks.
    fn select_striped(
        &mut self,
        now: Instant,
        allowed: &mut Vec<PathView>,
        flow: Option<&FlowKey>,
        len: usize,
    ) -> Selection {
        let probe = flow.and_then(|k| {
            let bytes = self.flow_meter.bytes(now, k);
            split::retain_eligible(allowed, bytes, now, len)
        });
        let mut sel = self.aggregate.select(now, allowed, len);
        // A path the split rule left out but must measure again gets two copies, back to
        // back: a packet pair (`split::remeasured`). The receiver keeps whichever copy
        // arrives first, the original on the path that pays.
        if let (Selection::Paths(set), Some(q)) = (&mut sel, probe) {
            if !set.contains(&q) && set.remaining_capacity() >= 2 {
                set.push(q);
                set.push(q);
            }
        }
        sel
    }

    /// When a closed pacer opens for the queued packet (or reinjection) that is waiting
    /// for it.
    pub(super) fn pacing_deadline(&self) -> Option<Instant> {
        self.pace_wake
            .filter(|_| !self.paced_queues_empty() || !self.reinject.is_empty())
    }

    /// Whether no paced queue holds a packet.
    pub(super) fn paced_queues_empty(&self) -> bool {
        self.agg_queue.is_empty() && self.best_queue.is_empty() && self.link_queues.is_empty()
    }
}

/// The session's paced queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Queue {
    /// TCP under `best`.
    Best,
    /// TCP under a link policy (`link_queues.rs`).
    Link(LinkRule),
    /// `aggregate`.
    Aggregate,
}

impl Queue {
    /// The queue a data job of policy code `code` and link rule `link` took its riders
    /// from (link policies travel with `best`'s code).
    pub(super) fn of_job(code: u8, link: Option<LinkRule>) -> Queue {
        match link {
            Some(rule) => Queue::Link(rule),
            None if code == Policy::Best.code() => Queue::Best,
            None => Queue::Aggregate,
        }
    }

    /// The policy its packets are sent under.
    pub(super) fn policy(self) -> Policy {
        match self {
            Queue::Best => Policy::Best,
            Queue::Link(rule) => Policy::Link(rule),
            Queue::Aggregate => Policy::Aggregate,
        }
    }
}

/// What `schedule_queue` did with a queue's head.
enum Scheduled {
    /// Nothing queued.
    Empty,
    /// Made a job of it.
    Sent,
    /// No path may send it yet; a pacer opens at the given time (none: a window must).
    Wait(Option<Instant>),
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// When the first pacer that could take a `len`-byte packet opens; a path without window
/// is waiting for feedback, which wakes the session anyway.
fn pacer_wake(now: Instant, allowed: &[PathView], len: usize) -> Option<Instant> {
    allowed
        .iter()
        .filter(|v| v.usable() && v.has_window(len) && v.ready_at > now)
        .map(|v| v.ready_at)
        .min()
}

/// Whether an IP packet is TCP (what `best` paces and repairs).
fn is_tcp(packet: &[u8]) -> bool {
    parse_flow(packet).is_some_and(|(k, _)| k.protocol == 6)
}

/// A packet leaving the aggregate queue: its `data_seq`, and flags that order it after its
/// flow's previous packet.
pub(super) struct Striped {
    pub seq: u64,
    pub flags: DataFlags,
    pub pred_gap: u16,
    pub packet: Arc<[u8]>,
}

/// Takes the head of a paced queue as the next striped packet (carrying `policy`'s code):
/// gives it its `data_seq`, records it for its flow `flow` (`split.rs`: its bytes count for the split
/// rule if `metered`) and, with `flow_order`, names the flow's previous packet as the one
/// the receiver releases it after; a packet of unknown flow, or any without `flow_order`,
/// is released after every earlier packet.
/// The scheduler's packet and the small ones riding with it (`transmit.rs`) both leave
/// the queue here. (Fields, not `&mut Session`: the datagram builder holds the path and
/// key borrowed meanwhile.)
pub(super) fn take_striped(
    queue: &mut FqCodelQueue,
    meter: &mut FlowMeter,
    next_data_seq: &mut u64,
    now: Instant,
    flow: (Option<FlowKey>, Policy),
    metered: bool,
    flow_order: bool,
) -> Option<Striped> {
    let packet = queue.take()?;
    Some(number_striped(
        packet,
        meter,
        next_data_seq,
        now,
        flow,
        metered,
        flow_order,
    ))
}

/// Gives a striped packet its `data_seq`, `policy`'s code and its flow's order (its
/// predecessor's distance, or session order), and meters it for the split rule when
/// `metered`.
pub(super) fn number_striped(
    packet: Arc<[u8]>,
    meter: &mut FlowMeter,
    next_data_seq: &mut u64,
    now: Instant,
    (flow, policy): (Option<FlowKey>, Policy),
    metered: bool,
    flow_order: bool,
) -> Striped {
    let seq = *next_data_seq;
    *next_data_seq += 1;
    let flags = DataFlags::new(policy.code(), true);
    let (flags, pred_gap) = match flow {
        Some(k) => {
            let prev = meter.record(now, k, metered.then_some(packet.len()), seq);
            if flow_order {
                flags.with_pred_gap(prev.map(|p| seq - p))
            } else {
                (flags.with_order(OrderMode::Session), 0)
            }
        }
        None => (flags.with_order(OrderMode::Session), 0),
    };
    Striped {
        seq,
        flags,
        pred_gap,
        packet,
    }
}
