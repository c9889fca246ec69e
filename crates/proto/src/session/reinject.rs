//! Reinjection: the data a failing path still holds unacknowledged is sent again on the
//! paths that work; and repair: ordered data whose datagram the peer reports lost (NACK)
//! is sent again.
//!
//! Why: when a link dies mid-transfer, every packet sent on it since its last feedback is
//! lost, and the inner TCP learns of it only by duplicate ACKs or its retransmission timer
//! (≥ 200 ms, doubled for each loss in a row) — the gap users see after a cut. The tunnel
//! knows sooner: the path turns `Suspect` once its feedback is overdue (`liveness.rs`). At
//! that moment we resend, on the other paths, each packet the path carried after the last
//! datagram the peer acknowledged on it, so the inner TCP sees no loss at all (MPTCP's
//! reinjection of a failed subflow's data, RFC 8684 §3.3.6, done a layer lower).
//!
//! How: each path keeps its unacknowledged data packets (`InFlight`: the `Arc` the queue
//! already held, so no copy) in send order, pruned by every ACK on that path up to its
//! largest acknowledged `path_seq`. When the path leaves `Up` while another path is `Up`
//! — or, if none was, once one delivers for sure again (`on_path_sure`) — its list moves
//! to the session's reinjection queue, which `poll_transmit` serves before
//! new data, through the aggregate scheduler (so windows and pacers hold) and never onto a
//! path in doubt. A copy keeps its `data_seq` and goes unordered: the receiver drops it if
//! the original did arrive (the de-duplication window), and otherwise releases it at once,
//! filling its hole without teaching the reorder buffer that packets come late.
//! `redundant` packets are reinjected too: on clean paths the adaptive scheduler sends one
//! copy of a packet above `SMALL_PACKET` (`sched/redundant.rs`), which a failing path would
//! lose like a `best` packet; one that had copies elsewhere is dropped as a duplicate.
//! Realtime packets are not (too late by then; FEC repairs them).
//!
//! Repair: the peer sees a gap in a path's `path_seq` when the next datagram arrives on that
//! path, and reports it in a NACK once RACK declares it lost (`path/gaps.rs`: at once on a
//! path that has not reordered, after the reordering window on one that has). The ordered
//! data those datagrams carried (`aggregate`, and TCP under `best`) is queued again,
//! keeping its ORDERED flag,
//! while the receiver's reorder buffer still holds the hole (its hold covers a repair:
//! `Session::reorder_hold`). An ACK's `largest` says nothing about the datagrams below it
//! that are still missing at the peer, so what an ACK covers is kept for `grace` (the
//! longest the peer's window can hold a hole back, plus the NACK's way) before it is
//! forgotten: a NACK that comes after the reordering window still finds its data.
//! So a loss on one path — a drop-tail overflow, a radio error — never reaches the inner
//! TCP, whose congestion signal is the ingress queue's CoDel drops (each path's rate is the
//! rate controller's business).
//!
//! Small packets (up to `SMALL_PACKET` bytes: voice frames, acknowledgements, DNS, game
//! state) are repaired whatever their policy and order: on real driving traces `best`
//! lost 15 voice packets in a row to a link's full queue during a 0.84-s gap, and
//! `redundant` 8 in a row on another pair, all of them reported by NACKs once the link
//! delivered again. Late beats lost for these (a voice jitter buffer decides, a DNS
//! client does not wait for its own timeout), they cost a few bytes, and so few cannot
//! build a queue; large unordered packets (QUIC data) are left to their own recovery,
//! which a copy would only confuse. Realtime packets are never in flight here (below).
//!
//! TCP under `best` is repaired too, because it is carried as `aggregate` is, restricted
//! to the one path `best` picks (`schedule.rs`): its own CoDel queue, that path's pacer
//! and window, ORDERED in its flow; its repairs go on that same path (or follow `best` to
//! another when the path fails). The pacing is what makes repair safe: a congestion loss
//! repaired is one the inner TCP never sees, so unpaced it would grow into the link's
//! queue without bound; paced, the rate controller answers the link's congestion and
//! CoDel tells the inner TCP. The alternative, repairing only losses judged transmission
//! errors (`path/loss.rs`) while `best` stays unpaced, was not taken: the verdict comes a
//! few samples after the loss, later than the repair should leave, and each congestion
//! loss misjudged and repaired lets the queue grow again. TCP under a link policy is
//! carried the same way on the path its rule picks (`link_queues.rs`), and its repairs
//! keep to that rule: `only:L` data never leaves L (it waits for L, held if L goes
//! `Down`), `backup:L` data goes on L only while no other path is `Up`. Other packets of
//! these policies (not TCP) above `SMALL_PACKET` are not repaired: they go unordered and
//! unpaced, and a copy would only reorder them.
//!
//! Invariants: memory is bounded (`MAX_IN_FLIGHT` packets per path not yet covered by an
//! ACK and as many covered, `MAX_REINJECT` in the queue; the oldest go first when full,
//! being the likeliest already recovered); a packet is reinjected at most once per path
//! failure it was caught in, and only if no ACK covered it (covered packets most likely
//! arrived).

use super::Session;
use crate::path::{PathId, PathState};
use crate::policy::{LinkRule, Policy};
use crate::sched::SMALL_PACKET;
use crate::wire::{DataFlags, NackFrame};
use crate::Instant;
use core::time::Duration;
use std::collections::VecDeque;
use std::sync::Arc;

/// Unacknowledged data packets remembered per path (a window of 1500-byte packets: 3 MB,
/// which at 100 ms of RTT covers 240 Mbit/s).
pub const MAX_IN_FLIGHT: usize = 2048;
/// Packets waiting to be reinjected.
pub const MAX_REINJECT: usize = 4096;

/// A data packet: what is sent again.
#[derive(Debug, Clone)]
pub(super) struct Reinjection {
    pub data_seq: u64,
    pub flags: DataFlags,
    /// Sent again with the same order (`wire::OrderMode`).
    pub pred_gap: u16,
    pub packet: Arc<[u8]>,
    /// A link policy's rule: `only:` data is never sent on another link, `backup:` data
    /// not on its link while another is `Up`.
    pub link: Option<LinkRule>,
}

impl Reinjection {
    /// Whether a NACK of its datagram sends it again: ordered data, and small packets of
    /// any policy (module doc).
    fn repairable(&self) -> bool {
        self.flags.ordered() || self.packet.len() <= SMALL_PACKET
    }
}

/// A data packet sent as datagram `path_seq` and not yet covered by its path's feedback.
#[derive(Debug)]
struct Sent {
    path_seq: u32,
    data: Reinjection,
}

/// One path's unacknowledged data, in send (= `path_seq`) order: not yet covered by an
/// ACK, and covered but still within reach of a NACK (with when that reach ends).
#[derive(Debug, Default)]
pub(super) struct InFlight {
    sent: VecDeque<Sent>,
    covered: VecDeque<(Instant, Sent)>,
}

/// Whether `a` is at or before `b` in wrapping `path_seq` order.
fn seq_le(a: u32, b: u32) -> bool {
    b.wrapping_sub(a) < 1 << 31
}

impl InFlight {
    /// Remembers a data packet sent as datagram `path_seq`.
    pub fn on_sent(
        &mut self,
        path_seq: u32,
        data_seq: u64,
        (flags, pred_gap): (DataFlags, u16),
        link: Option<LinkRule>,
        packet: &Arc<[u8]>,
    ) {
        // Not realtime packets: a copy sent after a failure is detected would mostly
        // arrive after its deadline; FEC covers their losses.
        if matches!(
            Policy::from_code(flags.policy_code()),
            Policy::Realtime { .. }
        ) {
            return;
        }
        if self.sent.len() >= MAX_IN_FLIGHT {
            self.sent.pop_front();
        }
        self.sent.push_back(Sent {
            path_seq,
            data: Reinjection {
                data_seq,
                flags,
                pred_gap,
                packet: packet.clone(),
                link,
            },
        });
    }

    /// The peer acknowledged every datagram up to `largest` at `now`: they are covered,
    /// and forgotten `grace` later (a NACK for one still missing at the peer comes
    /// before). Covered packets whose grace ended are forgotten now.
    pub fn on_ack(&mut self, now: Instant, largest: u32, grace: Duration) {
        while self
            .sent
            .front()
            .is_some_and(|s| seq_le(s.path_seq, largest))
        {
            if self.covered.len() >= MAX_IN_FLIGHT {
                self.covered.pop_front();
            }
            let s = self.sent.pop_front().expect("front");
            self.covered.push_back((now + grace, s));
        }
        while self.covered.front().is_some_and(|(until, _)| *until <= now) {
            self.covered.pop_front();
        }
    }

    /// Whether the last packet sent on the path is one a NACK would repair and no ACK
    /// covered it yet: a tail worth a loss probe (`path/tail.rs`).
    pub fn tail_repairable(&self) -> bool {
        self.sent.back().is_some_and(|s| s.data.repairable())
    }

    /// Packets held, not covered and covered.
    #[cfg(test)]
    pub fn len(&self) -> (usize, usize) {
        (self.sent.len(), self.covered.len())
    }

    /// Removes and returns every packet held, in send order.
    pub fn drain(&mut self) -> impl Iterator<Item = Reinjection> + '_ {
        self.sent.drain(..).map(|s| s.data)
    }

    /// Removes and returns the `only:` packets (in send order), keeping the others.
    pub fn take_only(&mut self) -> Vec<Reinjection> {
        self.take(true).into_iter().map(|s| s.data).collect()
    }

    /// Removes and returns the `only:` packets (`only`) or the others, in send order.
    fn take(&mut self, only: bool) -> Vec<Sent> {
        let is_only = |s: &Sent| matches!(s.data.link, Some(LinkRule::Only(_)));
        let (taken, kept): (VecDeque<Sent>, VecDeque<Sent>) = std::mem::take(&mut self.sent)
            .into_iter()
            .partition(|s| is_only(s) == only);
        self.sent = kept;
        taken.into()
    }

    /// Removes and returns the packets of datagrams `first .. first + count`, covered or
    /// not, in send order.
    fn take_range(&mut self, first: u32, count: u16) -> Vec<Reinjection> {
        let mut out: Vec<Reinjection> =
            take_seqs(&mut self.covered, |c| c.1.path_seq, first, count)
                .map(|c| c.1.data)
                .collect();
        out.extend(take_seqs(&mut self.sent, |s| s.path_seq, first, count).map(|s| s.data));
        out
    }
}

/// Drains the entries of `list` (in wrapping `path_seq` order) numbered `first .. first +
/// count`: a binary search, since a NACK names a few datagrams of a list of hundreds.
fn take_seqs<T>(
    list: &mut VecDeque<T>,
    seq: impl Fn(&T) -> u32,
    first: u32,
    count: u16,
) -> std::collections::vec_deque::Drain<'_, T> {
    let key = |x: &T| seq(x).wrapping_sub(first) as i32;
    let lo = list.partition_point(|x| key(x) < 0);
    let hi = list.partition_point(|x| key(x) < i32::from(count));
    list.drain(lo..hi.max(lo))
}

impl Session {
    fn queue_again(&mut self, r: Reinjection) {
        if self.reinject.len() >= MAX_REINJECT {
            self.reinject.pop_front();
        }
        self.reinject.push_back(r);
    }

    /// The peer lost datagrams on a path: repair what they carried that is repairable.
    pub(super) fn on_nack(&mut self, n: NackFrame) {
        let Some(slot) = self.slot_mut(PathId(n.path)) else {
            return;
        };
        slot.path.on_nack(n.first, n.count);
        for r in slot.in_flight.take_range(n.first, n.count) {
            if r.repairable() {
                self.counters.repaired += 1;
                self.queue_again(r);
            }
        }
    }

    /// After path `id` changed to `state`: if it left `Up` while another path is `Up`, its
    /// unacknowledged data joins the reinjection queue.
    pub(super) fn on_path_failing(&mut self, id: PathId, state: PathState) {
        if state == PathState::Up {
            return;
        }
        let other_up = self
            .paths
            .iter()
            .any(|s| s.path.id() != id && s.path.state() == PathState::Up);
        if !other_up {
            // Nowhere better to send it; if the path comes back, its feedback covers it.
            return;
        }
        self.reinject_in_flight(id);
    }

    /// Path `id` delivers for sure again (`Up`, off probation). While none did, the paths
    /// in doubt (`Suspect`, or back from `Down` on probation) carried data, there being
    /// nowhere better; what they hold unacknowledged is reinjected now, as it would have
    /// been had a path been `Up` when they failed. Without this, on a cellular driving
    /// pair, datagrams given to a link on probation while the other was in doubt waited in
    /// its dead downlink until it turned `Suspect` 0.65 s after the other had recovered:
    /// the receiver had given up on the holes by then and the inner TCP stalled for 2 s.
    pub(super) fn on_path_sure(&mut self, id: PathId) {
        let in_doubt: Vec<PathId> = self
            .paths
            .iter()
            .filter(|s| {
                let p = &s.path;
                p.id() != id && p.state() != PathState::Down && !p.delivers_for_sure()
            })
            .map(|s| s.path.id())
            .collect();
        for p in in_doubt {
            self.reinject_in_flight(p);
        }
    }

    /// Moves what path `id` holds unacknowledged to the reinjection queue.
    fn reinject_in_flight(&mut self, id: PathId) {
        let Some(slot) = self.slot_mut(id) else {
            return;
        };
        // `only:` data stays: it goes on no other link, and is held if its link goes
        // `Down` (`store.rs`).
        for s in slot.in_flight.take(false) {
            self.counters.reinjected += 1;
            let mut r = s.data;
            // Unordered: it fills its hole, or is dropped as a duplicate.
            r.flags = DataFlags::new(r.flags.policy_code(), false);
            r.pred_gap = 0;
            self.queue_again(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt() -> Arc<[u8]> {
        Arc::from(&[0x45u8; 40][..])
    }

    fn aggregate() -> DataFlags {
        DataFlags::new(Policy::Aggregate.code(), true)
    }

    const GRACE: Duration = Duration::from_millis(30);

    fn ms(v: u64) -> Instant {
        Instant::from_micros(v * 1000)
    }

    #[test]
    fn acks_cover_in_send_order_across_wrap_and_forget_after_the_grace() {
        let mut f = InFlight::default();
        for (i, seq) in [u32::MAX - 1, u32::MAX, 0, 1].into_iter().enumerate() {
            f.on_sent(seq, i as u64, (aggregate(), 0), None, &pkt());
        }
        f.on_ack(ms(0), u32::MAX, GRACE);
        assert_eq!(f.len(), (2, 2), "the two before the wrap are covered");
        f.on_ack(ms(10), 0, GRACE);
        assert_eq!(f.len(), (1, 3));
        // An old ACK (reordered feedback) covers nothing more; the grace of the first two
        // has ended.
        f.on_ack(ms(30), u32::MAX - 5, GRACE);
        assert_eq!(f.len(), (1, 1));
        f.on_ack(ms(40), 0, GRACE);
        assert_eq!(f.len(), (1, 0));
    }

    #[test]
    fn a_nack_after_the_ack_still_finds_its_data() {
        let mut f = InFlight::default();
        for seq in 0..10 {
            f.on_sent(seq, u64::from(seq), (aggregate(), 0), None, &pkt());
        }
        // Datagram 3 is missing at the peer, which holds it for its reordering window
        // while acknowledging up to 9.
        f.on_ack(ms(0), 9, GRACE);
        let lost: Vec<u64> = f.take_range(3, 1).iter().map(|s| s.data_seq).collect();
        assert_eq!(lost, vec![3]);
        assert_eq!(f.len(), (0, 9));
        assert!(
            f.take_range(3, 1).is_empty(),
            "a repeated NACK finds nothing"
        );
    }

    #[test]
    fn a_failing_path_reinjects_only_what_no_ack_covered() {
        let mut f = InFlight::default();
        for seq in 0..10 {
            f.on_sent(seq, u64::from(seq), (aggregate(), 0), None, &pkt());
        }
        f.on_ack(ms(0), 5, GRACE);
        let again: Vec<u64> = f.take(false).iter().map(|s| s.data.data_seq).collect();
        assert_eq!(again, vec![6, 7, 8, 9]);
    }

    #[test]
    fn a_nacked_range_is_taken_out_across_wrap() {
        let mut f = InFlight::default();
        for (i, seq) in [u32::MAX - 1, u32::MAX, 0, 1, 2].into_iter().enumerate() {
            f.on_sent(seq, i as u64, (aggregate(), 0), None, &pkt());
        }
        let lost: Vec<u64> = f
            .take_range(u32::MAX, 2)
            .iter()
            .map(|s| s.data_seq)
            .collect();
        assert_eq!(lost, vec![1, 2]);
        assert_eq!(f.len(), (3, 0));
        assert!(f.take_range(5, 10).is_empty(), "nothing sent there");
    }

    #[test]
    fn realtime_packets_are_not_remembered_and_memory_is_bounded() {
        let mut f = InFlight::default();
        let realtime = Policy::realtime(core::time::Duration::from_millis(150));
        f.on_sent(
            0,
            0,
            (DataFlags::new(realtime.code(), false), 0),
            None,
            &pkt(),
        );
        assert_eq!(f.len(), (0, 0));
        for i in 0..(MAX_IN_FLIGHT as u32 + 10) {
            f.on_sent(i, u64::from(i), (aggregate(), 0), None, &pkt());
        }
        assert_eq!(f.len(), (MAX_IN_FLIGHT, 0));
        // The oldest went first.
        assert_eq!(f.sent.front().map(|s| s.data.data_seq), Some(10));
    }
}
