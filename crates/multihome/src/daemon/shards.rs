//! The server's data path on every core: `threads` event loops, each on its own thread
//! with its own `Server` core ([`ShardCore`]: one shard of the sessions,
//! `multihome_proto::endpoint::Shard`), its own socket of one SO_REUSEPORT group on the
//! listening port and its own queue of the multi-queue TUN device.
//!
//! The kernel does most of the sorting: the group's filter sends a data datagram to the
//! socket of the thread owning its receiver index (`multihome_io::udp::steer`), and the
//! TUN device queues a downstream packet on the thread that last wrote a packet of the
//! same flow (the device's flow table), which is the session's own thread for a flow the
//! client opened. What still reaches another thread — initiations, spread by source
//! address; a downstream flow the server side opened — is handed over through the
//! threads' inboxes ([`Mesh`]).
//!
//! Thread 0 (the primary) also runs the control socket, metrics and dashboard: it gathers
//! the others' status documents on request ([`ShardMsg::Status`], waiting at most
//! [`STATUS_WAIT`]) and passes a reload on to them ([`ShardMsg::Reload`]). The dashboard's
//! once-a-second sample (a typed snapshot, [`ShardMsg::Sample`]) does not wait: it merges
//! the latest sample each other thread sent (one sample interval old) and asks for the next
//! ([`LatestSamples`]), so the primary's data path never stops for another thread's answer.
//!
//! Invariants: each core stays single-threaded (nothing is shared but the inboxes); an
//! inbox is bounded ([`INBOX`]; a handoff to a full one is dropped and counted); with one
//! thread there is no inbox and nothing is handed over.

use super::core::{Core, Outgoing};
use super::driver::Watch;
use super::io::ListenBind;
use super::Clock;
use crate::config::reload::ServerReload;
use crate::status::server_snapshot;
use multihome_proto::endpoint::{Handoff, Server};
use multihome_proto::path::PathId;
use multihome_proto::Instant;
use multihome_runtime::dashboard::Snapshot;
use serde_json::Value;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;

/// Messages one thread's inbox holds at most.
pub const INBOX: usize = 4096;
/// How long the primary waits for another thread's status document.
pub const STATUS_WAIT: Duration = Duration::from_millis(500);

/// What one thread sends another.
pub enum ShardMsg {
    /// Input for a session the receiver owns.
    Handoff(Handoff),
    /// Send your status document here, with your thread number.
    Status(std::sync::mpsc::SyncSender<(usize, Value)>),
    /// Send what the dashboard samples of you here, with your thread number.
    Sample(std::sync::mpsc::SyncSender<(usize, Snapshot)>),
    /// Apply this reload (the primary checked and applied it).
    Reload(Arc<ServerReload>),
}

/// One thread's ends of the inboxes: senders to every other thread, its own receiver.
pub struct Mesh {
    me: usize,
    to: Vec<mpsc::Sender<ShardMsg>>,
    inbox: Option<mpsc::Receiver<ShardMsg>>,
}

impl Mesh {
    /// The ends for `n` threads, thread `i`'s at `i`.
    pub fn build(n: usize) -> Vec<Mesh> {
        let (tx, rx): (Vec<_>, Vec<_>) = (0..n).map(|_| mpsc::channel(INBOX)).unzip();
        rx.into_iter()
            .enumerate()
            .map(|(me, inbox)| Mesh {
                me,
                to: tx.clone(),
                inbox: Some(inbox),
            })
            .collect()
    }

    /// Sends `msg` to thread `i`; false if its inbox is full or gone.
    fn send(&self, i: usize, msg: ShardMsg) -> bool {
        i != self.me && self.to.get(i).is_some_and(|t| t.try_send(msg).is_ok())
    }

    /// The other threads' numbers.
    fn others(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.to.len()).filter(move |&i| i != self.me)
    }
}

/// The primary's latest sample from each other thread, and the answers still to come to
/// its last request. A thread's sample stays until a newer one replaces it, so a late
/// answer never makes its sessions vanish from the dashboard for a second.
#[derive(Default)]
struct LatestSamples {
    latest: Vec<Option<Snapshot>>,
    coming: Option<std::sync::mpsc::Receiver<(usize, Snapshot)>>,
}

/// One thread's core: the server shard and its ends of the inboxes.
pub struct ShardCore {
    /// The shard's server.
    pub server: Server,
    mesh: Mesh,
    samples: std::cell::RefCell<LatestSamples>,
}

impl ShardCore {
    /// Wraps `server` (its shard already set) with its thread's `mesh`.
    pub fn new(server: Server, mesh: Mesh) -> Self {
        ShardCore {
            server,
            mesh,
            samples: Default::default(),
        }
    }

    /// The thread's inbox (taken once, by its [`ShardWatch`]).
    pub fn take_inbox(&mut self) -> Option<mpsc::Receiver<ShardMsg>> {
        self.mesh.inbox.take()
    }

    /// Passes a reload applied here on to the other threads.
    pub fn spread_reload(&self, r: ServerReload) {
        let r = Arc::new(r);
        for i in self.mesh.others() {
            if !self.mesh.send(i, ShardMsg::Reload(r.clone())) {
                tracing::warn!(thread = i, "a reload could not reach a server thread");
            }
        }
    }

    /// Hands what the server owes other shards to their threads.
    fn send_handoffs(&mut self) {
        while let Some(h) = self.server.poll_handoff() {
            if !self.mesh.send(usize::from(h.to()), ShardMsg::Handoff(h)) {
                self.server.handoff_dropped();
            }
        }
    }

    /// This shard's own status document (each session says which thread holds it).
    fn own_status(&self) -> Value {
        let mut v = crate::status::server_status(&self.server);
        for s in v["sessions"].as_array_mut().into_iter().flatten() {
            s["thread"] = self.mesh.me.into();
        }
        v
    }

    /// Handles one message from another thread.
    fn receive(&mut self, now: Instant, msg: ShardMsg) {
        match msg {
            ShardMsg::Handoff(Handoff::Datagram {
                from, mut bytes, ..
            }) => self.server.handle_handed_datagram(now, from, &mut bytes),
            ShardMsg::Handoff(Handoff::Packet { bytes, .. }) => {
                self.server.handle_tun_packet(now, &bytes)
            }
            ShardMsg::Status(reply) => {
                let _ = reply.send((self.mesh.me, self.own_status()));
            }
            ShardMsg::Sample(reply) => {
                let _ = reply.send((self.mesh.me, server_snapshot(&self.server)));
            }
            ShardMsg::Reload(r) => super::reload::apply_server(&mut self.server, &r),
        }
    }
}

impl Core for ShardCore {
    fn handle_datagram(&mut self, now: Instant, link: PathId, from: SocketAddr, buf: &mut [u8]) {
        Core::handle_datagram(&mut self.server, now, link, from, buf);
    }

    fn handle_tun_packet(&mut self, now: Instant, packet: &[u8]) {
        self.server.handle_tun_packet(now, packet);
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Outgoing> {
        Core::poll_transmit(&mut self.server, now, buf)
    }

    fn poll_deliver(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.server.poll_deliver(buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.server.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.server.handle_timeout(now);
    }

    fn link_gone(&mut self, now: Instant, link: PathId) {
        Core::link_gone(&mut self.server, now, link);
    }

    /// Also hands over what this turn's input owed other threads (once per turn: the
    /// driver calls this at the end of every flush).
    fn log_events(&mut self) {
        self.send_handoffs();
        Core::log_events(&mut self.server);
    }

    /// On the primary, the whole server's document: every thread's sessions, counters
    /// summed (a thread that does not answer within [`STATUS_WAIT`] is left out, and the
    /// log says so).
    fn status(&self) -> Value {
        self.gather()
    }

    /// What the dashboard samples of all threads, built without the document and without
    /// waiting: the other threads' part is their latest answer ([`LatestSamples`]).
    fn sample(&self) -> Snapshot {
        self.gather_sample()
    }

    fn close(&mut self) {}
}

impl ShardCore {
    /// The document ([`Core::status`]) of this thread, and on the primary of all threads.
    fn gather(&self) -> Value {
        let mut docs = vec![self.own_status()];
        if self.mesh.me == 0 && self.mesh.to.len() > 1 {
            let (asked, rx) = self.ask_others(ShardMsg::Status);
            let deadline = std::time::Instant::now() + STATUS_WAIT;
            for _ in 0..asked {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                match rx.recv_timeout(left) {
                    Ok((_, v)) => docs.push(v),
                    Err(_) => {
                        tracing::warn!("a server thread did not send its status in time");
                        break;
                    }
                }
            }
        }
        crate::status::merge_server_status(docs)
    }

    /// Asks every other thread for its document or sample (`ask` makes the message);
    /// how many were asked, and where the answers come.
    fn ask_others<T>(
        &self,
        ask: fn(std::sync::mpsc::SyncSender<(usize, T)>) -> ShardMsg,
    ) -> (usize, std::sync::mpsc::Receiver<(usize, T)>) {
        let (tx, rx) = std::sync::mpsc::sync_channel(self.mesh.to.len());
        let asked = self
            .mesh
            .others()
            .filter(|&i| self.mesh.send(i, ask(tx.clone())))
            .count();
        (asked, rx)
    }

    /// The dashboard's sample on the primary: its own now, the others' latest answers,
    /// and the next request sent (never waited for).
    fn gather_sample(&self) -> Snapshot {
        let mut parts = vec![server_snapshot(&self.server)];
        if self.mesh.me == 0 && self.mesh.to.len() > 1 {
            let mut s = self.samples.borrow_mut();
            s.latest.resize(self.mesh.to.len(), None);
            if let Some(rx) = s.coming.take() {
                for (i, v) in rx.try_iter() {
                    if let Some(slot) = s.latest.get_mut(i) {
                        *slot = Some(v);
                    }
                }
            }
            parts.extend(s.latest.iter().flatten().cloned());
            s.coming = Some(self.ask_others(ShardMsg::Sample).1);
        }
        crate::dashboard::merge(parts)
    }
}

/// A thread's watch: its role's own (`inner`: the primary's reloads and fast path), and
/// its inbox.
pub struct ShardWatch<W> {
    inner: W,
    inbox: Option<mpsc::Receiver<ShardMsg>>,
    inner_ready: bool,
    received: Vec<ShardMsg>,
}

impl<W> ShardWatch<W> {
    /// `inner` and the inbox of `core`'s thread.
    pub fn new(inner: W, core: &mut ShardCore) -> Self {
        ShardWatch {
            inner,
            inbox: core.take_inbox(),
            inner_ready: false,
            received: Vec::new(),
        }
    }
}

impl<W: Watch<ShardCore, ListenBind>> Watch<ShardCore, ListenBind> for ShardWatch<W> {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Poll::Ready(r) = self.inner.poll_ready(cx) {
            r?;
            self.inner_ready = true;
        }
        if let Some(inbox) = &mut self.inbox {
            // The senders live as long as every thread's core: `None` never comes while
            // this thread runs, and 0 would mean the same.
            let _ = inbox.poll_recv_many(cx, &mut self.received, 256);
        }
        match self.inner_ready || !self.received.is_empty() {
            true => Poll::Ready(Ok(())),
            false => Poll::Pending,
        }
    }

    fn handle(&mut self, clock: &Clock, core: &mut ShardCore, bind: &mut ListenBind) {
        if std::mem::take(&mut self.inner_ready) {
            self.inner.handle(clock, core, bind);
        }
        let now = clock.now();
        for msg in self.received.drain(..) {
            core.receive(now, msg);
        }
    }

    fn reload(
        &mut self,
        clock: &Clock,
        core: &mut ShardCore,
        bind: &mut ListenBind,
    ) -> Result<Vec<String>, String> {
        self.inner.reload(clock, core, bind)
    }
}
