//! NAT mode's daemon side (the MultiNAT thesis §3): the client's own SYN copied out on every
//! uplink, the answers judged by the core's [`NatRace`], the winner handed to the kernel.
//!
//! Life of a connection (IPv4):
//! 1. The client's SYN is held in the queue as in proxy mode ([`super::held`]); the race
//!    starts, and [`connection`] sends a copy of the SYN out of each uplink the plan names,
//!    from that uplink's address, with the client's port, ISN and options
//!    ([`crate::core::craft::syn_copy`], raw socket [`RawSender`], untracked by mark).
//! 2. The SYN-ACKs and RSTs that come back to the uplink addresses are queued (setup's
//!    [`super::setup::nat_queue_rules`]) and [`on_packet`] hands them to the connection's
//!    task by their 4-tuple. The core says what each one becomes: held (the delay queue is
//!    the netfilter queue itself: the packet simply gets no verdict yet), forwarded, or
//!    reset. A reset is a verdict ACCEPT: the SYN-ACK reaches the gateway's own stack,
//!    which has no socket for it and answers with a RST from the uplink's address, routed
//!    out of that uplink — the kernel builds the RST (sequence numbers, checksum), as the
//!    `reject` of a refusal does. A RST from a server is always dropped here.
//! 3. The winner: the flow is recorded as won (uplink W), the client's held SYN is dropped
//!    (its copies did its work), and the held SYN-ACK gets a verdict ACCEPT with its bytes
//!    replaced by the readdressed copy: the kernel forwards it to the client.
//! 4. The client's ACK is the first packet conntrack sees of the connection (a pick-up: NEW
//!    without SYN); it is queued, marked with W's uplink mark, and from there the kernel
//!    carries the connection: ct mark, policy routing out of W, masquerade to W's address
//!    with the client's port kept. The data never reaches this process.
//! 5. All refused or timed out: the held SYN is refused as in proxy mode (ECONNREFUSED).
//!
//! After the decision the connection gives back its `max_connections` slot and lingers so the
//! winner's retransmitted SYN-ACK (the client's ACK was lost before the gateway) is
//! forwarded again and late answers are judged by the core — until the client's ACK has
//! left with the winner's mark (from then on conntrack carries the connection and its
//! answers are no longer queued), at most [`LINGER`]. An answer nobody claims gets ACCEPT
//! (a SYN-ACK: the kernel's RST; a RST: the kernel drops it), which is the same fate.
//! Holding the slot through a 5 s linger had capped NAT mode at `max_connections` new
//! connections per 5 s (513 quick connections in a row: the 513th refused as busy).
//!
//! Invariants: every queued packet gets exactly one verdict (held ones when the core
//! releases them, or at the end of the task); the client's SYN is never forwarded while
//! racing; nothing here relays data.

use super::nfqueue::{Packet, Verdict};
use super::setup::{uplink_mark, UplinkAddrs, REFUSE_MARK, UPLINK_MARK_MASK};
use super::state::{NatEvent, NatState, Shared, Slot};
use crate::core::craft::{self, SYN};
use crate::core::nat::{NatAction, NatRace, SynAckVerdict};
use crate::core::{Flow, Race, UplinkId, MAX_UPLINKS};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::rc::Rc;
use std::time::Duration;
use tokio::sync::mpsc;

/// How long a decided connection keeps judging its answers (the servers' SYN-ACK
/// retransmissions come at 1 s and 3 s).
pub const LINGER: Duration = Duration::from_secs(5);

/// Opens NAT mode's raw senders, one per uplink with an IPv4 address.
pub fn open(s: &super::config::RaceSettings, addrs: &[UplinkAddrs]) -> std::io::Result<NatState> {
    let mut raw = Vec::new();
    for (u, a) in s.uplinks.iter().zip(addrs) {
        raw.push(match a.v4 {
            Some(IpAddr::V4(v4)) => Some(super::attempt::RawSender::open(
                &u.interface,
                v4,
                super::setup::RAW_MARK,
            )?),
            _ => None,
        });
    }
    Ok(NatState {
        raw,
        ..NatState::default()
    })
}

fn verdict(sh: &Shared, id: u32, v: Verdict, mark: Option<u32>, payload: Option<&[u8]>) {
    let Some(q) = sh.queue.as_ref() else { return };
    if let Err(e) = q.get_ref().verdict_with(id, v, mark, payload) {
        tracing::warn!("netfilter queue verdict for packet {id}: {e}");
    }
}

fn v4(a: SocketAddr) -> Option<SocketAddrV4> {
    match a {
        SocketAddr::V4(a) => Some(a),
        SocketAddr::V6(_) => None,
    }
}

/// The mark a packet of the won `flow` leaves with (its winner's uplink), if it was won.
pub fn admitted_mark(sh: &Shared, flow: Flow, mark: u32) -> Option<u32> {
    let nat = sh.nat.as_ref()?;
    let u = *nat.won.borrow().get(&flow)?;
    Some((mark & !UPLINK_MARK_MASK) | uplink_mark(u.index()))
}

/// Takes the queued packets that are NAT mode's business: answers to the SYN copies, and
/// the first non-SYN packet of a LAN connection. Gives back any other packet.
pub fn on_packet(sh: &Shared, p: Packet) -> Option<Packet> {
    let Some(nat) = sh.nat.as_ref() else {
        return Some(p);
    };
    let Some(seg) = craft::segment(&p.payload) else {
        return Some(p);
    };
    let ours = sh
        .addrs
        .iter()
        .any(|a| a.v4 == Some(IpAddr::V4(*seg.dst.ip())));
    if ours && (seg.is_syn_ack() || seg.is_rst()) {
        let claimed = nat.attempts.borrow().get(&(seg.dst, seg.src)).copied();
        let task = claimed.and_then(|(flow, u)| Some((nat.tasks.borrow().get(&flow)?.clone(), u)));
        match task {
            Some((tx, uplink)) => {
                let ev = NatEvent::Answer {
                    uplink,
                    syn_ack: seg.is_syn_ack(),
                    packet: p,
                };
                if let Err(mpsc::error::SendError(ev)) = tx.send(ev) {
                    accept_unclaimed(sh, ev);
                }
            }
            // Nobody's: the kernel answers a SYN-ACK with a RST and ignores a RST.
            None => verdict(sh, p.id, Verdict::Accept, None, None),
        }
        return None;
    }
    if seg.flags & SYN == 0 && !ours {
        // A connection conntrack picked up without a SYN: a won flow's first ACK gets its
        // uplink; anything else passes as it came.
        let flow = Flow {
            client: SocketAddr::V4(seg.src),
            dst: SocketAddr::V4(seg.dst),
        };
        let mark = admitted_mark(sh, flow, p.mark);
        verdict(sh, p.id, Verdict::Accept, mark, None);
        if mark.is_some() {
            if let Some(tx) = nat.tasks.borrow().get(&flow) {
                // A closed task has nothing left to end.
                let _ = tx.send(NatEvent::ClientAcked);
            }
        }
        return None;
    }
    Some(p)
}

/// Everything one NAT-mode connection holds in the queue, per uplink.
struct Held {
    syn_acks: [Option<Packet>; MAX_UPLINKS],
}

/// One NAT-mode connection: copies out, answers judged, winner handed to the kernel.
///
/// The gateway slot (`max_connections`) is held while racing only: once decided, the
/// connection lingers to judge late answers — until the client's ACK has left with the
/// winner's mark (usually one round trip), at most [`LINGER`] — and lingering connections
/// are bounded apart, at [`LINGER_PER_SLOT`] per slot; past that a decided connection
/// ends at once (a late answer then gets the kernel's fate, which is the same).
pub async fn connection(sh: Rc<Shared>, flow: Flow, race: Race, syn: Vec<u8>) {
    let mut slot = Some(Slot(sh.clone()));
    let (Some(nat), Some(client), Some(dst)) = (sh.nat.as_ref(), v4(flow.client), v4(flow.dst))
    else {
        return;
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    nat.tasks.borrow_mut().insert(flow, tx);
    let keys = register_attempts(&sh, nat, flow, client, dst);
    let mut r = NatRace::new(race);
    let mut held = Held {
        syn_acks: Default::default(),
    };
    let mut linger: Option<Linger> = None;
    loop {
        act(&sh, nat, flow, &syn, &mut r, &mut held);
        if r.race().outcome().is_some() && linger.is_none() {
            sh.gw
                .borrow_mut()
                .end_race(sh.clock.now(), flow.dst.ip(), r.race());
            drop(slot.take());
            match Linger::begin(&sh, nat) {
                Some(l) => linger = Some(l),
                None => break,
            }
        }
        let deadline = match &linger {
            Some(l) => l.until,
            None => sh.clock.deadline(r.poll_timeout()),
        };
        tokio::select! {
            ev = rx.recv() => match ev {
                Some(NatEvent::Answer { uplink, syn_ack, packet }) => {
                    on_answer(&sh, flow, &mut r, &mut held, uplink, syn_ack, packet)
                }
                Some(NatEvent::ClientAcked) if linger.is_some() => break,
                Some(NatEvent::ClientAcked) => {}
                None => break,
            },
            _ = tokio::time::sleep_until(deadline) => {
                if linger.is_some() {
                    break;
                }
                r.on_timeout(sh.clock.now());
            }
        }
    }
    forget(&sh, nat, flow, &keys, rx, held);
}

/// Lingering connections allowed per `max_connections` slot.
pub const LINGER_PER_SLOT: usize = 8;

/// A decided connection's linger; counted in [`NatState::lingering`] while it lasts.
struct Linger<'a> {
    nat: &'a NatState,
    until: tokio::time::Instant,
}

impl<'a> Linger<'a> {
    /// `None` when too many connections linger already.
    fn begin(sh: &Shared, nat: &'a NatState) -> Option<Linger<'a>> {
        let cap = sh.settings.gateway.max_connections * LINGER_PER_SLOT;
        if nat.lingering.get() >= cap {
            return None;
        }
        nat.lingering.set(nat.lingering.get() + 1);
        Some(Linger {
            nat,
            until: tokio::time::Instant::now() + LINGER,
        })
    }
}

impl Drop for Linger<'_> {
    fn drop(&mut self) {
        self.nat.lingering.set(self.nat.lingering.get() - 1);
    }
}

/// Claims the answers to the SYN copies: the uplink-side 4-tuples (uplink address with the
/// client's port, destination) name this connection.
fn register_attempts(
    sh: &Shared,
    nat: &NatState,
    flow: Flow,
    client: SocketAddrV4,
    dst: SocketAddrV4,
) -> Vec<(SocketAddrV4, SocketAddrV4)> {
    let mut attempts = nat.attempts.borrow_mut();
    sh.addrs
        .iter()
        .enumerate()
        .filter_map(|(i, a)| match a.v4 {
            Some(IpAddr::V4(ip)) => Some((i, SocketAddrV4::new(ip, client.port()))),
            _ => None,
        })
        .map(|(i, local)| {
            attempts.insert((local, dst), (flow, UplinkId(i as u8)));
            (local, dst)
        })
        .collect()
}

/// The connection's end: its table entries go, every packet it still holds gets a verdict.
fn forget(
    sh: &Shared,
    nat: &NatState,
    flow: Flow,
    keys: &[(SocketAddrV4, SocketAddrV4)],
    mut rx: mpsc::UnboundedReceiver<NatEvent>,
    mut held: Held,
) {
    for k in keys {
        nat.attempts.borrow_mut().remove(k);
    }
    nat.tasks.borrow_mut().remove(&flow);
    nat.won.borrow_mut().remove(&flow);
    sh.hold.borrow_mut().close(flow);
    rx.close();
    while let Ok(ev) = rx.try_recv() {
        accept_unclaimed(sh, ev);
    }
    for p in held.syn_acks.iter_mut().filter_map(Option::take) {
        verdict(sh, p.id, Verdict::Accept, None, None);
    }
}

/// An answer nobody judges any more: ACCEPT (a SYN-ACK gets the kernel's RST, a RST is
/// dropped by the stack).
fn accept_unclaimed(sh: &Shared, ev: NatEvent) {
    if let NatEvent::Answer { packet, .. } = ev {
        verdict(sh, packet.id, Verdict::Accept, None, None);
    }
}

fn on_answer(
    sh: &Shared,
    flow: Flow,
    r: &mut NatRace,
    held: &mut Held,
    uplink: UplinkId,
    syn_ack: bool,
    packet: Packet,
) {
    let now = sh.clock.now();
    let id = packet.id;
    if !syn_ack {
        r.on_rst(now, uplink);
        verdict(sh, id, Verdict::Drop, None, None);
        return;
    }
    match r.on_syn_ack(now, uplink) {
        SynAckVerdict::Hold => {
            if let Some(old) = held.syn_acks[uplink.index()].replace(packet) {
                verdict(sh, old.id, Verdict::Drop, None, None);
            }
        }
        SynAckVerdict::Forward => forward(sh, flow, packet),
        SynAckVerdict::Reset => verdict(sh, id, Verdict::Accept, None, None),
        SynAckVerdict::Drop => verdict(sh, id, Verdict::Drop, None, None),
    }
}

/// Carries out the core's actions until it has none.
fn act(sh: &Shared, nat: &NatState, flow: Flow, syn: &[u8], r: &mut NatRace, held: &mut Held) {
    while let Some(a) = r.poll_action() {
        match a {
            NatAction::SendSyn(u) => {
                if let Err(e) = send_syn(sh, nat, u, syn, flow) {
                    tracing::debug!(
                        "{} -> {}: SYN over uplink {}: {e}",
                        flow.client,
                        flow.dst,
                        u.0
                    );
                    r.on_failed(sh.clock.now(), u);
                }
            }
            NatAction::ForwardHeld(u) => {
                // Recorded before the SYN-ACK leaves, so the client's ACK finds its uplink.
                nat.won.borrow_mut().insert(flow, u);
                nat.handed.set(nat.handed.get() + 1);
                if let Some(h) = sh.hold.borrow_mut().admit(flow) {
                    verdict(sh, h.id, Verdict::Drop, None, None);
                }
                if let Some(p) = held.syn_acks[u.index()].take() {
                    forward(sh, flow, p);
                }
                tracing::debug!(
                    "{} -> {}: uplink {} won; handed to the kernel's NAT",
                    flow.client,
                    flow.dst,
                    sh.settings.uplinks[u.index()].name
                );
            }
            NatAction::ResetHeld(u) => {
                if let Some(p) = held.syn_acks[u.index()].take() {
                    verdict(sh, p.id, Verdict::Accept, None, None);
                }
            }
            NatAction::RefuseClient => {
                if let Some(h) = sh.hold.borrow_mut().refuse(flow) {
                    verdict(sh, h.id, Verdict::Accept, Some(h.mark | REFUSE_MARK), None);
                }
            }
        }
    }
}

fn send_syn(
    sh: &Shared,
    nat: &NatState,
    u: UplinkId,
    syn: &[u8],
    flow: Flow,
) -> std::io::Result<()> {
    let no_addr = || std::io::Error::new(std::io::ErrorKind::AddrNotAvailable, "no IPv4 address");
    let sender = nat
        .raw
        .get(u.index())
        .and_then(Option::as_ref)
        .ok_or_else(no_addr)?;
    let Some(IpAddr::V4(src)) = sh.addrs[u.index()].v4 else {
        return Err(no_addr());
    };
    let IpAddr::V4(dst) = flow.dst.ip() else {
        return Err(no_addr());
    };
    let copy = craft::syn_copy(syn, src).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a whole IPv4 SYN (cut off?)",
        )
    })?;
    sender.send(&copy, dst)
}

/// Forwards a SYN-ACK to the client: the verdict replaces its bytes with the readdressed
/// copy and the kernel routes it to the LAN.
fn forward(sh: &Shared, flow: Flow, p: Packet) {
    let client = match flow.client.ip() {
        IpAddr::V4(c) => c,
        IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
    };
    match craft::to_client(&p.payload, client) {
        Some(bytes) => verdict(sh, p.id, Verdict::Accept, None, Some(&bytes)),
        None => {
            // Cut off by the copy range (a SYN-ACK carrying data): dropped; the client's
            // SYN retransmission is then forwarded over the winner by the kernel's NAT.
            tracing::debug!(
                "{} -> {}: SYN-ACK not whole; dropped",
                flow.client,
                flow.dst
            );
            verdict(sh, p.id, Verdict::Drop, None, None);
        }
    }
}
