//! The daemon's shared state: what the event loop owns and every connection task, the
//! queue reader and the status document borrow.
//!
//! This module sits at the bottom of the daemon's dependency order: it names the types the
//! others share ([`Shared`], [`Held`], [`Slot`]) and imports none of the modules that use
//! them. Invariants: the state lives on one thread (`Rc`, `RefCell`, `Cell`); a `RefCell`
//! is borrowed only between awaits, never across one, so no borrow can collide; every
//! connection that took a gateway slot holds a [`Slot`], which gives it back on drop.

use super::attempt::RawSender;
use super::config::RaceSettings;
use super::nfqueue::NfQueue;
use super::nfqueue::Packet;
use super::setup::UplinkAddrs;
use crate::core::{Flow, Gateway, SynHold, UplinkId};
use multihome_runtime::Clock;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddrV4;
use std::rc::Rc;
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

/// How often at most the "connection limit reached" line is logged.
const BUSY_LOG_EVERY: Duration = Duration::from_secs(5);

/// A held SYN: the kernel's packet id and the mark it was queued with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// The queued packet's id (what a verdict names).
    pub id: u32,
    /// Its netfilter mark when queued (kept when a refusal adds its own bit).
    pub mark: u32,
}

/// What a NAT-mode connection's task is told.
#[derive(Debug)]
pub enum NatEvent {
    /// A SYN-ACK or RST queued for one of the connection's uplink-side 4-tuples.
    Answer {
        /// The uplink it arrived on (the one whose address it is sent to).
        uplink: UplinkId,
        /// True for a SYN-ACK, false for a RST.
        syn_ack: bool,
        /// The queued packet (its id for the verdict, its bytes to readdress).
        packet: Packet,
    },
    /// The client's ACK of the forwarded SYN-ACK left with the winner's mark: conntrack has
    /// the connection, nothing is left to judge.
    ClientAcked,
}

/// NAT mode's state: raw senders, and which queued answers belong to which connection.
#[derive(Default)]
pub struct NatState {
    /// One raw sender per uplink (`None`: the uplink has no IPv4 address).
    pub raw: Vec<Option<RawSender>>,
    /// (uplink address and client port, destination) → the connection and uplink.
    pub attempts: RefCell<HashMap<(SocketAddrV4, SocketAddrV4), (Flow, UplinkId)>>,
    /// Racing connections' tasks, fed the answers to their copies.
    pub tasks: RefCell<HashMap<Flow, mpsc::UnboundedSender<NatEvent>>>,
    /// Won connections (until the kernel's conntrack has them): their uplink.
    pub won: RefCell<HashMap<Flow, UplinkId>>,
    /// Connections handed to the kernel's NAT.
    pub handed: Cell<u64>,
    /// Decided connections still judging late answers (bounded: see `nat::LINGER_PER_SLOT`).
    pub lingering: Cell<usize>,
}

/// State shared by the connection tasks.
pub struct Shared {
    /// The sans-IO core.
    pub gw: RefCell<Gateway>,
    /// Core time.
    pub clock: Clock,
    /// Settings.
    pub settings: RaceSettings,
    /// Uplink addresses found at start-up.
    pub addrs: Vec<UplinkAddrs>,
    /// Bytes relayed (client → origin, origin → client) by finished connections.
    pub relayed: Cell<(u64, u64)>,
    /// Connections relayed now.
    pub relaying: Cell<u64>,
    /// The netfilter queue (held SYNs, first packets of UDP flows), when enabled.
    pub queue: Option<AsyncFd<NfQueue>>,
    /// Held and admitted SYNs.
    pub hold: RefCell<SynHold<Held>>,
    /// Admitted flows waiting for the listener to accept the client's connection.
    pub waiting: RefCell<HashMap<Flow, oneshot::Sender<TcpStream>>>,
    /// Connections accepted without a held SYN (raced after the accept).
    pub unheld: Cell<u64>,
    /// NAT mode's state (`None` in proxy mode).
    pub nat: Option<NatState>,
    last_busy_log: Cell<Option<std::time::Instant>>,
}

impl Shared {
    /// The state at start-up: no connection yet, every counter zero.
    pub fn new(
        gw: Gateway,
        clock: Clock,
        settings: RaceSettings,
        addrs: Vec<UplinkAddrs>,
        queue: Option<AsyncFd<NfQueue>>,
        nat: Option<NatState>,
    ) -> Shared {
        let hold = SynHold::new(settings.gateway.max_connections);
        Shared {
            gw: RefCell::new(gw),
            clock,
            settings,
            addrs,
            relayed: Cell::new((0, 0)),
            relaying: Cell::new(0),
            queue,
            hold: RefCell::new(hold),
            waiting: RefCell::new(HashMap::new()),
            unheld: Cell::new(0),
            nat,
            last_busy_log: Cell::new(None),
        }
    }

    /// Logs (at most every [`BUSY_LOG_EVERY`]) that new connections are being refused: a
    /// flood of refusals must not become a flood of log lines.
    pub fn log_busy(&self, limit: usize) {
        let now = std::time::Instant::now();
        if self
            .last_busy_log
            .get()
            .is_none_or(|t| now.duration_since(t) >= BUSY_LOG_EVERY)
        {
            self.last_busy_log.set(Some(now));
            let refused = self.gw.borrow().status().busy_refusals + self.hold.borrow().busy();
            tracing::warn!(
                "connection limit reached: {limit} connections are being raced or relayed; new \
                 connections are refused until some finish ({refused} so far). Raise \
                 max_connections in [race] if the host has the file descriptors"
            );
        }
    }
}

/// Frees the connection's slot in the gateway however the task ends (finished, failed,
/// or aborted at shutdown).
pub struct Slot(pub Rc<Shared>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.gw.borrow_mut().release();
    }
}
