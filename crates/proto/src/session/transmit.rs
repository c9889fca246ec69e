//! Building and sealing outgoing datagrams.
//!
//! A `Job` says what one datagram must carry on which path; `poll_transmit` turns the next
//! job into a sealed datagram in the caller's buffer, piggybacking any ACK due on that path
//! so feedback rarely costs a datagram of its own. The per-path sequence number is taken
//! only when the datagram is actually built, so numbering has no holes that would read as
//! loss.
//!
//! Feedback crosses paths while a path's own datagrams go unacknowledged (it is not
//! `Up`): its ACK then also rides on the other paths' datagrams, and an ACK due on it
//! gets a datagram on each of them (`Session::handle_timeout`). Why: the two directions of
//! a cellular link fail apart. On real driving traces one link's uplink was out for 4 s
//! while its downlink delivered, and the other link's downlink was out meanwhile while
//! its uplink worked: the downloads' data could go on the first and their feedback on the
//! second, but each path's feedback travelled on its own dead leg, both paths turned
//! `Down` on both sides, and the flow stalled for seconds while a link delivered. An
//! ACK names its path (`AckFrame::path`) and carries the peer's receive time, so it
//! means the same on whichever path it arrives; its RTT sample then spans the forward
//! leg of its path and the reverse leg of the carrier. A path that is `Up` keeps its
//! feedback to itself: no bytes are added while both legs work.

use super::schedule::Queue;
use super::Session;
use crate::crypto::TAG_LEN;
use crate::fec::ParityBlock;
use crate::header_compress::{self, Encoding};
use crate::path::{Path, PathId, PathState, SentKind};
use crate::policy::{parse_flow, LinkRule};
use crate::wire::{
    outer, AckFrame, DataFlags, DataFrame, FecFrame, FrameWriter, InnerHeader, NackFrame,
    OrderMode, PairFrame, DATA_HEADER_LEN, PRED_GAP_LEN,
};
use crate::Instant;
use std::net::SocketAddr;
use std::sync::Arc;

/// Largest IP packet that rides in the datagram of the striped packet before it, when it
/// is queued right behind: a TCP acknowledgement, SACK blocks included. A burst of them —
/// the inner TCP acknowledging a run the reorder buffer just released — otherwise left
/// as a burst of tiny datagrams, and on a link whose queue counts packets (a 50-packet
/// drop-tail, as in the kernel's MPTCP selftests) forty of them filled the queue behind
/// a few full-size ones and the next data datagrams were dropped.
const RIDER_MAX: usize = 160;
/// Most packets riding in one datagram.
const MAX_RIDERS: usize = 32;

/// What one datagram must carry.
#[derive(Debug, Clone)]
pub(super) enum Job {
    /// An IP packet.
    Data {
        path: PathId,
        seq: u64,
        flags: DataFlags,
        /// The flow predecessor's distance, if `flags` name one (`wire::OrderMode`).
        pred_gap: u16,
        /// A realtime packet's deadline (ms), 0 otherwise.
        deadline_ms: u16,
        packet: Arc<[u8]>,
        /// Sealed once for the kernel to copy onto the other links.
        kernel_copies: bool,
        /// A link policy's rule: where it may be sent again (`reinject.rs`).
        link: Option<LinkRule>,
    },
    /// Feedback only.
    Ack { path: PathId },
    /// Keepalive probe.
    Ping { path: PathId },
    /// Session end.
    Close { path: PathId },
    /// Parity shard `index` of a realtime FEC block (`session/fec.rs`).
    Parity {
        path: PathId,
        block: Arc<ParityBlock>,
        index: u8,
    },
}

impl Job {
    pub(super) fn path(&self) -> PathId {
        match self {
            Job::Data { path, .. }
            | Job::Ack { path }
            | Job::Ping { path }
            | Job::Close { path }
            | Job::Parity { path, .. } => *path,
        }
    }
}

/// A datagram ready in the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// The path (client: which link's socket to send it from).
    pub path: PathId,
    /// Destination address.
    pub dst: SocketAddr,
    /// Datagram length in the buffer.
    pub len: usize,
    /// Send it where the kernel copies it onto every other link
    /// (`SessionConfig::kernel_copies`).
    pub kernel_copies: bool,
}

impl Session {
    /// Builds the next datagram into `buf`; `None` when there is nothing to send.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        loop {
            if self.jobs.is_empty() && !self.store.is_empty() {
                // Held packets first (`store.rs`): they are older than anything queued.
                self.release_held(now);
            }
            if self.jobs.is_empty() {
                self.schedule_aggregate(now);
            }
            let job = self.jobs.pop_front()?;
            if let Some(t) = self.build(now, &job, buf) {
                return Some(t);
            }
        }
    }

    /// Whether datagrams are waiting to be built.
    pub fn has_pending_transmit(&self) -> bool {
        !self.jobs.is_empty()
    }

    /// Builds `job` into a sealed datagram in `buf`: its plan, the inner header, feedback
    /// that fits, the job's own frame (and riders), then sealing under the next counter.
    fn build(&mut self, now: Instant, job: &Job, buf: &mut [u8]) -> Option<Transmit> {
        // Riders of a datagram that failed to build are lost with it.
        self.riders.clear();
        let frames_room = self.frames_room();
        let plan = self.plan(now, job, frames_room);
        let idx = self.paths.iter().position(|s| s.path.id() == job.path())?;
        self.keys.current.as_ref()?;
        if matches!(job, Job::Ping { .. }) {
            self.paths[idx].ping_queued = false;
        }
        let body_end = buf.len().checked_sub(TAG_LEN)?;
        let body = buf.get_mut(DATA_HEADER_LEN..body_end)?;
        let mut w = FrameWriter::new(body);
        // Inner header first; its path_seq is filled in when sealing, once the size is known.
        w.inner_header(InnerHeader {
            path_seq: 0,
            send_time_us: 0,
        })
        .ok()?;
        let room = frames_room.saturating_sub(plan.frame_len);
        let mut acked = write_feedback(&mut self.paths[idx].path, &mut w, now, room)?;
        // Room left for riders once the frames written so far and the data frame are in.
        let (frame_len, total) = (plan.frame_len, frames_room + InnerHeader::LEN);
        let left = |w: &FrameWriter<'_>| total.saturating_sub(w.len() + frame_len);
        let room = left(&w);
        acked |= self.write_crossing_acks(idx, now, &mut w, room)?;
        let room = left(&w);
        self.write_nack_echoes(idx, &mut w, room)?;
        // The stated policy, the relay list and their acknowledgements ride where there is
        // room.
        let room = left(&w);
        self.write_stated(now, &mut w, room)?;
        let room = left(&w);
        self.write_relays(now, &mut w, room)?;
        match job {
            Job::Data {
                seq,
                packet,
                deadline_ms,
                ..
            } => self.write_data(now, &mut w, (*seq, *deadline_ms), packet, &plan)?,
            Job::Ack { .. } if !acked => return None,
            Job::Ack { .. } => {}
            Job::Ping { .. } => w.ping().ok()?,
            Job::Close { .. } => w.close().ok()?,
            Job::Parity { block, index, .. } => {
                let entries = block.entries_at(now);
                let shard = block.parity.get(usize::from(*index))?;
                w.fec(&FecFrame {
                    first_seq: block.first_seq,
                    k: u8::try_from(block.entries.len()).ok()?,
                    m: u8::try_from(block.parity.len()).ok()?,
                    index: *index,
                    deadline_ms: block.deadline_ms,
                    entries: &entries,
                    shard,
                })
                .ok()?;
                self.counters.fec_parity_sent += 1;
            }
        }
        let plain_len = w.len();
        self.seal(now, job, idx, plan.order, buf, plain_len)
    }

    /// An ACK is due on path `id`, whose feedback crosses: a datagram for it on each
    /// other path that is not `Down`, since which one's reverse leg works is unknown here.
    pub(super) fn queue_crossing_acks(&mut self, id: PathId) {
        for s in &self.paths {
            if s.path.id() != id && s.path.state() != PathState::Down {
                self.jobs.push_back(Job::Ack { path: s.path.id() });
            }
        }
    }

    /// The ACKs of the other paths whose own datagrams go unacknowledged (not `Up`) that
    /// fit in `room` bytes of the datagram being built on path `idx`: feedback crosses to
    /// a path whose reverse leg works (module doc). Returns whether one went in.
    fn write_crossing_acks(
        &mut self,
        idx: usize,
        now: Instant,
        w: &mut FrameWriter<'_>,
        room: usize,
    ) -> Option<bool> {
        let mut left = room / AckFrame::LEN;
        let mut wrote = false;
        for (i, s) in self.paths.iter_mut().enumerate() {
            if left == 0 {
                break;
            }
            if i == idx || !crosses(&s.path) {
                continue;
            }
            if let Some(ack) = s.path.crossing_ack(now) {
                w.ack(&ack).ok()?;
                wrote = true;
                left -= 1;
            }
        }
        Some(wrote)
    }

    /// Copies of the other paths' recent NACKs (`Path::nack_echo`) that fit in `room`
    /// bytes of the datagram being built on path `idx`. The sender repairs on the first
    /// copy to arrive and ignores the others (it took the packets out).
    fn write_nack_echoes(&self, idx: usize, w: &mut FrameWriter<'_>, room: usize) -> Option<()> {
        let mut left = room / NackFrame::LEN;
        let others = self.paths.iter().enumerate().filter(|(i, _)| *i != idx);
        for n in others.flat_map(|(_, s)| s.path.nack_echo()) {
            if left == 0 {
                break;
            }
            w.nack(n).ok()?;
            left -= 1;
        }
        Some(())
    }

    /// Bytes of frames a datagram holds after its inner header.
    pub(super) fn frames_room(&self) -> usize {
        self.cfg
            .max_datagram
            .saturating_sub(DATA_HEADER_LEN + TAG_LEN + InnerHeader::LEN)
    }

    /// Decides how `job`'s packet travels: with riders or not, compressed or not, with its
    /// predecessor's distance or not.
    fn plan(&mut self, now: Instant, job: &Job, frames_room: usize) -> Plan {
        let Job::Data {
            flags,
            pred_gap,
            packet,
            link,
            ..
        } = job
        else {
            let frame_len = match job {
                Job::Parity { block, .. } => block.frame_len(),
                _ => 1,
            };
            return Plan {
                riding: false,
                queue: Queue::Aggregate,
                encoding: Encoding::Plain,
                order: (DataFlags::default(), 0),
                frame_len,
            };
        };
        // Small striped packets queued right behind this one ride along (`RIDER_MAX`). Then
        // this one goes plain, first: a compressed frame runs to the end of the datagram,
        // and the receiver should meet the packets in their order. Only if the first of
        // them fits beside it sent plain: a full-size packet would otherwise lose its
        // compression (29 bytes) for no rider at all.
        let queue = Queue::of_job(flags.policy_code(), *link);
        let riding = flags.ordered() && self.reinject.is_empty() && {
            let plain = DataFrame::header_len(*flags) + packet.len();
            self.paced_queue(queue)
                .and_then(|q| q.head(now))
                .is_some_and(|next| {
                    next.len() <= RIDER_MAX
                        && plain + DataFrame::HEADER_LEN + PRED_GAP_LEN + next.len() <= frames_room
                })
        };
        // A realtime packet goes whole: it must stand alone (a lost context definition
        // would make the next ones undecodable), as the FEC shards it belongs to do.
        let encoding = if self.cfg.header_compression && !riding && !flags.realtime() {
            self.compressor.encode(now, packet)
        } else {
            Encoding::Plain
        };
        // A packet that fills the datagram has no room for its predecessor's distance: it
        // is then ordered after every earlier packet, which is never wrong, only slower.
        let len = encoding.frame_len(packet.len());
        let (order, frame_len) = if len + flags.extra_len() <= frames_room {
            ((*flags, *pred_gap), len + flags.extra_len())
        } else {
            let session = flags.with_order(OrderMode::Session);
            ((session, 0), len + session.extra_len())
        };
        Plan {
            riding,
            queue,
            encoding,
            order,
            frame_len,
        }
    }

    /// Writes a data job's frame as planned, and its riders.
    fn write_data(
        &mut self,
        now: Instant,
        w: &mut FrameWriter<'_>,
        (seq, deadline_ms): (u64, u16),
        packet: &[u8],
        plan: &Plan,
    ) -> Option<()> {
        let (flags, pred_gap) = plan.order;
        let frame = DataFrame {
            data_seq: seq,
            flags,
            pred_gap,
            deadline_ms,
            payload: packet,
        };
        let written = match plan.encoding {
            Encoding::Plain => w.data(&frame),
            Encoding::Define(ctx) => w.data_define(ctx, &frame),
            Encoding::Compressed { ctx, header_len } => {
                w.data_compressed_with((seq, flags, pred_gap, deadline_ms), ctx, |out| {
                    header_compress::write_body(packet, header_len, out)
                })
            }
        };
        if written.is_err() {
            self.counters.queue_drops += 1;
            return None;
        }
        if matches!(plan.encoding, Encoding::Compressed { .. }) {
            self.counters.tx_compressed += 1;
        }
        if plan.riding {
            self.write_riders(now, w, plan.queue);
        }
        Some(())
    }

    /// Small striped packets queued behind the one just written, from its queue `queue`,
    /// into the same datagram.
    fn write_riders(&mut self, now: Instant, w: &mut FrameWriter<'_>, queue: Queue) {
        let limit = self.cfg.max_datagram - DATA_HEADER_LEN - TAG_LEN;
        while self.riders.len() < MAX_RIDERS {
            let Some(q) = (match queue {
                Queue::Best => Some(&mut self.best_queue),
                Queue::Aggregate => Some(&mut self.agg_queue),
                Queue::Link(rule) => self.link_queues.get_mut(rule),
            }) else {
                break;
            };
            let Some(next) = q.head(now) else {
                break;
            };
            // Room for the largest header a rider may need (with a gap).
            if next.len() > RIDER_MAX
                || w.len() + DataFrame::HEADER_LEN + PRED_GAP_LEN + next.len() > limit
            {
                break;
            }
            // Its flow orders it, but its bytes do not count for the split rule
            // (`FlowMeter::record`): acknowledgements need no second path.
            let flow = parse_flow(next).map(|(k, _)| k);
            let Some(r) = super::schedule::take_striped(
                q,
                &mut self.flow_meter,
                &mut self.next_data_seq,
                now,
                (flow, queue.policy()),
                false,
                self.cfg.flow_order,
            ) else {
                break;
            };
            let frame = DataFrame {
                data_seq: r.seq,
                flags: r.flags,
                pred_gap: r.pred_gap,
                deadline_ms: 0,
                payload: &r.packet,
            };
            // Cannot fail: the room was checked above.
            if w.data(&frame).is_err() {
                self.counters.queue_drops += 1;
                break;
            }
            self.counters.tx_riders += 1;
            self.riders.push(r);
        }
    }

    /// Numbers the datagram on its path, records what it carries as in flight, fills in
    /// the headers and seals it in place.
    fn seal(
        &mut self,
        now: Instant,
        job: &Job,
        idx: usize,
        order: (DataFlags, u16),
        buf: &mut [u8],
        plain_len: usize,
    ) -> Option<Transmit> {
        let total = DATA_HEADER_LEN + plain_len + TAG_LEN;
        let kp = self.keys.current.as_mut()?;
        let counter = kp.seal.next_counter().ok()?;
        let kind = match job {
            Job::Data { .. } | Job::Parity { .. } => SentKind::Data,
            Job::Ping { .. } => SentKind::Probe,
            Job::Ack { .. } | Job::Close { .. } => SentKind::AckOnly,
        };
        // User data makes the session active; so does its first datagram, a new session
        // being busy finding its paths (`keepalive.rs`).
        if kind == SentKind::Data || self.last_data.is_none() {
            self.last_data = Some(now);
        }
        let slot = &mut self.paths[idx];
        let path_seq = slot.path.on_sent(now, total, kind);
        if let Job::Data {
            seq, packet, link, ..
        } = job
        {
            slot.in_flight.on_sent(path_seq, *seq, order, *link, packet);
            // Riders come from the job's queue: its link rule is theirs.
            for r in self.riders.drain(..) {
                slot.in_flight
                    .on_sent(path_seq, r.seq, (r.flags, r.pred_gap), *link, &r.packet);
            }
        }
        InnerHeader {
            path_seq,
            send_time_us: now.as_micros() as u32,
        }
        .emit(&mut buf[DATA_HEADER_LEN..])
        .ok()?;
        let path_id = slot.path.id();
        outer::emit_data_header(buf, path_id.0, kp.remote_index, counter);
        let (aad, rest) = buf.split_at_mut(DATA_HEADER_LEN);
        kp.seal.seal(counter, aad, rest, plain_len).ok()?;
        let kernel_copies = matches!(
            job,
            Job::Data {
                kernel_copies: true,
                ..
            }
        );
        self.counters.tx_kernel_copies += u64::from(kernel_copies);
        Some(Transmit {
            path: path_id,
            dst: self.paths[idx].path.remote(),
            len: total,
            kernel_copies,
        })
    }
}

/// What `Session::plan` decided about a job before it is written.
struct Plan {
    /// Small striped packets ride behind this one, which then goes plain and first.
    riding: bool,
    /// The paced queue the riders come from: the job's own.
    queue: Queue,
    /// How the packet's headers travel.
    encoding: Encoding,
    /// The flags and predecessor distance the data frame carries.
    order: (DataFlags, u16),
    /// Bytes of the job's own frame.
    frame_len: usize,
}

/// Whether `path`'s feedback crosses to the other paths (module doc): it worked once (an
/// RTT sample) and the datagrams this side sends on it now go unacknowledged. A path not
/// yet proven has no leg known to work, and its handshake proves it.
pub(super) fn crosses(path: &Path) -> bool {
    path.state() != PathState::Up && path.rtt().has_sample()
}

/// Feedback rides along only where it fits under the datagram bound: a full-size packet
/// leaves without it, and the ACK goes in a datagram of its own when due. Returns whether
/// an ACK went in (`None` if the writer failed).
fn write_feedback(
    path: &mut Path,
    w: &mut FrameWriter<'_>,
    now: Instant,
    room: usize,
) -> Option<bool> {
    // A pending NACK travels with the ACK and before it: the peer must see which
    // datagrams were lost before the ACK makes it forget everything below `largest`.
    let nack_len = path.nack_count() * NackFrame::LEN;
    if room < AckFrame::LEN + nack_len {
        return Some(false);
    }
    let Some(ack) = path.take_ack(now, true) else {
        return Some(false);
    };
    for n in path.take_nack() {
        w.nack(&n).ok()?;
    }
    w.ack(&ack).ok()?;
    // Packet-pair reports ride with ACKs (6 bytes, only when the estimate moved).
    if room >= AckFrame::LEN + nack_len + PairFrame::LEN {
        if let Some(p) = path.take_pair_report() {
            w.pair(&p).ok()?;
        }
    }
    Some(true)
}
