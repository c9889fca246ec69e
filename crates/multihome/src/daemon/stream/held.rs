//! Held SYNs of stream mode: the LAN host's connection attempt waits, unanswered, until the
//! server has answered for the destination, so a refusal reaches the application as a
//! refused connect (the racing gateway does the same for its races, `race` daemon `held`).
//!
//! - A SYN of a new 4-tuple is held ([`SynHold`]) and its stream opened at once; the
//!   application sees nothing yet. Its retransmissions are dropped.
//! - Connected: the opened stream waits in `waiting` under the 4-tuple and the held SYN is
//!   accepted; it continues to TPROXY, the kernel completes the handshake on the listener,
//!   and the accept path claims the stream by the accepted socket's 4-tuple.
//! - Refused, unreachable, timed out, or the stream could not be opened: the SYN is
//!   accepted with [`REFUSE_MARK`] and the nftables chain answers it with an RST.
//! - A SYN that finds the table full is refused the same way.
//!
//! Invariants: every queued packet gets exactly one verdict; a waiting stream not claimed
//! within [`ADMIT_TIMEOUT`] is closed; the table holds at most `max_connections` flows.

use super::client::{open, Ctx, Opened};
use super::intercept::REFUSE_MARK;
use anyhow::{Context, Result};
use multihome_proto::stream::ConnectStatus;
use multihome_race::core::hold::{SynHold, SynVerdict};
use multihome_race::core::{classify, Flow, Transport};
use multihome_race::daemon::nfqueue::{NfQueue, Packet, Verdict};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// How long an opened stream waits for the application to complete its handshake (one LAN
/// round trip normally; the margin covers a lost SYN-ACK or two).
pub const ADMIT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of each queued packet the kernel copies to us (IP and TCP headers).
const COPY_RANGE: u16 = 128;

/// A held SYN: the kernel's packet id and its mark.
type Handle = (u32, u32);

/// The queue and the flows it holds.
pub struct Held {
    queue: AsyncFd<NfQueue>,
    hold: RefCell<SynHold<Handle>>,
    waiting: RefCell<HashMap<Flow, Opened>>,
}

impl Held {
    /// Binds queue `num` (inside the runtime) for at most `capacity` flows.
    pub fn bind(num: u16, capacity: usize) -> Result<Held> {
        let max_len = u32::try_from(capacity)
            .unwrap_or(u32::MAX)
            .saturating_add(1024);
        let q = NfQueue::bind(num, COPY_RANGE, max_len)
            .with_context(|| format!("opening netfilter queue {num} for held SYNs"))?;
        // SAFETY: NfQueue owns its netlink socket for its whole life and `as_raw_fd` always
        // returns that fd; it is closed only by NfQueue's drop, after the AsyncFd has
        // deregistered it.
        let queue =
            unsafe { AsyncFd::register_with_interest(q, Interest::READABLE) }.map_err(|e| {
                anyhow::anyhow!("registering the netfilter queue: {}", e.into_parts().1)
            })?;
        Ok(Held {
            queue,
            hold: RefCell::new(SynHold::new(capacity)),
            waiting: RefCell::new(HashMap::new()),
        })
    }

    /// The stream opened for `flow`, if its SYN was held and admitted.
    pub fn claim(&self, flow: Flow) -> Option<Opened> {
        let opened = self.waiting.borrow_mut().remove(&flow);
        if opened.is_some() {
            self.hold.borrow_mut().close(flow);
        }
        opened
    }

    fn verdict(&self, (id, mark): Handle, refuse: bool) {
        let mark = refuse.then_some(mark | REFUSE_MARK);
        if let Err(e) = self.queue.get_ref().verdict(id, Verdict::Accept, mark) {
            tracing::warn!("stream: verdict for held SYN {id}: {e}");
        }
    }
}

/// Reads the queue until the daemon stops.
pub async fn queue_loop(ctx: Rc<Ctx>) {
    let Some(held) = ctx.held.as_ref() else {
        return;
    };
    let mut batch = Vec::new();
    loop {
        let mut guard = match held.queue.readable().await {
            Ok(g) => g,
            Err(e) => {
                tracing::error!("stream: netfilter queue: {e}; SYNs are no longer held");
                return;
            }
        };
        match guard.try_io(|q| q.get_ref().recv(&mut batch)) {
            Ok(Ok(())) => {
                for p in batch.drain(..) {
                    on_packet(&ctx, held, p);
                }
            }
            Ok(Err(e)) => {
                tracing::warn!("stream: netfilter queue: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(_would_block) => {}
        }
    }
}

fn on_packet(ctx: &Rc<Ctx>, held: &Held, p: Packet) {
    let handle = (p.id, p.mark);
    let flow = match classify(&p.payload) {
        Some(c) if matches!(c.transport, Transport::Tcp { .. }) => Flow {
            client: c.src,
            dst: c.dst,
        },
        // Not ours to judge (the rule queues only TCP SYNs): let it pass.
        _ => return held.verdict(handle, false),
    };
    let v = held.hold.borrow_mut().on_syn(flow, handle);
    match v {
        SynVerdict::Race => {
            let ctx = ctx.clone();
            tokio::task::spawn_local(async move { decide(ctx, flow).await });
        }
        SynVerdict::Drop((id, _)) => {
            let _ = held.queue.get_ref().verdict(id, Verdict::Drop, None);
        }
        SynVerdict::Accept(h) => held.verdict(h, false),
        SynVerdict::Busy(h) => {
            ctx.stats.over_limit.fetch_add(1, Relaxed);
            held.verdict(h, true);
        }
    }
}

/// Opens the flow's stream, then lets its SYN through or refuses it.
async fn decide(ctx: Rc<Ctx>, flow: Flow) {
    let Some(held) = ctx.held.as_ref() else {
        return;
    };
    match open(&ctx, flow.dst).await {
        Ok(opened) if opened.0 == ConnectStatus::Connected => {
            held.waiting.borrow_mut().insert(flow, opened);
            let admitted = held.hold.borrow_mut().admit(flow);
            if let Some(h) = admitted {
                held.verdict(h, false);
            }
            tokio::time::sleep(ADMIT_TIMEOUT).await;
            if held.claim(flow).is_some() {
                ctx.stats.failed.fetch_add(1, Relaxed);
                tracing::debug!(
                    ?flow,
                    "stream: the application never completed its handshake"
                );
            }
        }
        outcome => {
            match outcome {
                Ok((status, ..)) => {
                    tracing::debug!(dst = %flow.dst, ?status, "stream: refused for the application");
                    ctx.stats.refused.fetch_add(1, Relaxed);
                }
                Err(e) => {
                    tracing::warn!(dst = %flow.dst, "stream: {e:#}");
                    ctx.stats.failed.fetch_add(1, Relaxed);
                }
            }
            let refused = held.hold.borrow_mut().refuse(flow);
            if let Some(h) = refused {
                held.verdict(h, true);
            }
        }
    }
}
