//! The netfilter queue side of the racing gateway: every new connection's SYN and every new
//! UDP flow's first packet from the LAN is queued here before the kernel answers or routes
//! it.
//!
//! - A SYN of a new 4-tuple is held ([`crate::core::SynHold`]) and its race starts at once;
//!   the client sees nothing yet. Its retransmissions are dropped. When an uplink wins, the
//!   flow waits in [`Shared::waiting`] and the held SYN is accepted: it continues to the
//!   TPROXY rule, the kernel completes the client's handshake on the transparent listener,
//!   and the accept loop hands the connection to this flow's task by its 4-tuple, which
//!   relays it. When every uplink refused or timed out, the SYN is accepted with
//!   [`REFUSE_MARK`] and the nftables chain answers it with an RST: the client's connect()
//!   fails with ECONNREFUSED. A SYN that finds the gateway full is refused the same way.
//! - NAT mode (`mode = "nat"`): the held SYN's race is carried out by [`nat::connection`]
//!   (copies of the SYN, answers judged by the core, winner handed to the kernel's NAT), and
//!   the answers to the copies and the client's first ACK are taken by [`nat::on_packet`].
//! - A UDP flow's first packet is accepted with its uplink's mark, chosen by the same
//!   predictor as the races (`Gateway::flow_uplink`); conntrack carries the mark to the
//!   flow's later packets (see [`super::setup`]).
//! - Anything else that reaches the queue (not TCP/UDP, a fragment, a SYN while
//!   `hold_syns` is off) is accepted untouched.
//!
//! Invariants: every queued packet gets exactly one verdict (`SynHold` hands each held one
//! back once; every other one is answered where it is read); a won flow waits for its
//! client at most [`ADMIT_TIMEOUT`], then its winner is reset; the gateway slot taken by
//! `Gateway::begin` is released however the task ends.
//!
//! Dependencies: this module uses [`super::state`] (the shared types) and
//! [`super::drive`] (a race over sockets, the relay); the event loop uses it to start the
//! queue reader, and nothing here names the event loop.

use super::attempt;
use super::drive::{drive, relay};
use super::nat;
use super::nfqueue::{Packet, Verdict};
use super::setup::{uplink_mark, REFUSE_MARK, UPLINK_MARK_MASK};
use super::state::{Held, Shared, Slot};
use crate::core::{classify, Flow, Race, RaceError, SynVerdict, Transport};
use std::rc::Rc;
use std::time::Duration;
use tokio::sync::oneshot;

/// How long a won race waits for the client to complete its handshake with the listener.
/// The client's SYN is accepted at the decision, so this normally takes one LAN round trip;
/// the margin covers a lost SYN-ACK or two (the listener retransmits at 1 s and 3 s).
const ADMIT_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads the queue until the daemon stops.
pub async fn queue_loop(sh: Rc<Shared>) {
    let Some(afd) = sh.queue.as_ref() else {
        return;
    };
    let mut batch = Vec::new();
    loop {
        let mut guard = match afd.readable().await {
            Ok(g) => g,
            Err(e) => {
                tracing::error!("netfilter queue: {e}; queued packets are no longer read");
                return;
            }
        };
        match guard.try_io(|q| q.get_ref().recv(&mut batch)) {
            Ok(Ok(())) => {
                for p in batch.drain(..) {
                    on_packet(&sh, p);
                }
            }
            Ok(Err(e)) => {
                tracing::warn!("netfilter queue: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(_would_block) => {}
        }
    }
}

fn verdict(sh: &Shared, id: u32, v: Verdict, mark: Option<u32>) {
    let Some(q) = sh.queue.as_ref() else { return };
    if let Err(e) = q.get_ref().verdict(id, v, mark) {
        tracing::warn!("netfilter queue verdict for packet {id}: {e}");
    }
}

/// Lets a held SYN continue to the listener.
fn accept(sh: &Shared, h: Held) {
    verdict(sh, h.id, Verdict::Accept, None);
}

/// Lets a held SYN continue with the refusal mark: the chain resets it.
fn refuse(sh: &Shared, h: Held) {
    verdict(sh, h.id, Verdict::Accept, Some(h.mark | REFUSE_MARK));
}

fn on_packet(sh: &Rc<Shared>, p: Packet) {
    // NAT mode's answers to SYN copies and first ACKs are its own business.
    let Some(p) = nat::on_packet(sh, p) else {
        return;
    };
    let Some(c) = classify(&p.payload) else {
        verdict(sh, p.id, Verdict::Accept, None);
        return;
    };
    match c.transport {
        Transport::Tcp { syn: true } if sh.settings.hold_syns => {
            let flow = Flow {
                client: c.src,
                dst: c.dst,
            };
            on_syn(sh, flow, c.dscp, p);
        }
        Transport::Udp if sh.settings.udp_flows => {
            let now = sh.clock.now();
            let u = sh
                .gw
                .borrow_mut()
                .flow_uplink(now, c.dst.ip(), Some(c.dscp));
            let mark = (p.mark & !UPLINK_MARK_MASK) | uplink_mark(u.index());
            tracing::trace!("UDP {} -> {}: uplink {}", c.src, c.dst, u.0);
            verdict(sh, p.id, Verdict::Accept, Some(mark));
        }
        _ => verdict(sh, p.id, Verdict::Accept, None),
    }
}

fn on_syn(sh: &Rc<Shared>, flow: Flow, dscp: u8, p: Packet) {
    let nat_mode = sh.nat.is_some();
    if nat_mode && !flow.client.is_ipv4() {
        // NAT mode races IPv4 only; an IPv6 connection is routed as it came.
        verdict(sh, p.id, Verdict::Accept, None);
        return;
    }
    let held = Held {
        id: p.id,
        mark: p.mark,
    };
    let v = sh.hold.borrow_mut().on_syn(flow, held);
    match v {
        SynVerdict::Race => {
            let begun = sh
                .gw
                .borrow_mut()
                .begin(sh.clock.now(), flow.dst.ip(), Some(dscp));
            match begun {
                Ok(race) if nat_mode => {
                    tokio::task::spawn_local(nat::connection(sh.clone(), flow, race, p.payload));
                }
                Ok(race) => {
                    tokio::task::spawn_local(held_connection(sh.clone(), flow, race));
                }
                Err(e) => {
                    match e {
                        RaceError::Busy { limit } => sh.log_busy(limit),
                        other => tracing::warn!("{} -> {}: {other}", flow.client, flow.dst),
                    }
                    if let Some(h) = sh.hold.borrow_mut().refuse(flow) {
                        refuse(sh, h);
                    }
                }
            }
        }
        SynVerdict::Drop(h) => verdict(sh, h.id, Verdict::Drop, None),
        // NAT mode: a retransmitted SYN of a won flow (our SYN-ACK was lost) goes out of
        // its uplink through the kernel's NAT; the server answers it again.
        SynVerdict::Accept(h) if nat_mode => {
            let mark = nat::admitted_mark(sh, flow, h.mark);
            verdict(sh, h.id, Verdict::Accept, mark);
        }
        SynVerdict::Accept(h) => accept(sh, h),
        SynVerdict::Busy(h) => {
            sh.log_busy(sh.hold.borrow().capacity());
            refuse(sh, h);
        }
    }
}

/// One held connection: race, then let the SYN through and relay, or refuse it.
async fn held_connection(sh: Rc<Shared>, flow: Flow, mut race: Race) {
    let _slot = Slot(sh.clone());
    let winner = drive(&sh, &mut race, flow.dst).await;
    sh.gw
        .borrow_mut()
        .end_race(sh.clock.now(), flow.dst.ip(), &race);
    let Some((uplink, origin)) = winner else {
        tracing::debug!(
            "{} -> {}: every uplink failed ({:?}); refusing the client",
            flow.client,
            flow.dst,
            race.outcome()
        );
        if let Some(h) = sh.hold.borrow_mut().refuse(flow) {
            refuse(&sh, h);
        }
        return;
    };
    // Registered before the SYN is let through, so the accept loop finds it.
    let (tx, rx) = oneshot::channel();
    sh.waiting.borrow_mut().insert(flow, tx);
    let held = sh.hold.borrow_mut().admit(flow);
    if let Some(h) = held {
        accept(&sh, h);
    }
    let client = tokio::time::timeout(ADMIT_TIMEOUT, rx).await;
    sh.waiting.borrow_mut().remove(&flow);
    sh.hold.borrow_mut().close(flow);
    match client {
        Ok(Ok(client)) => relay(&sh, client, uplink, origin, flow.client, flow.dst).await,
        _ => {
            tracing::debug!(
                "{} -> {}: the client did not complete its handshake within {:?}; \
                 closing the winner",
                flow.client,
                flow.dst,
                ADMIT_TIMEOUT
            );
            attempt::reset(origin);
        }
    }
}
