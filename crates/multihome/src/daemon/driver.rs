//! The one event loop of both daemons: it owns a [`Core`], a [`PacketDevice`] and a
//! [`DatagramBind`] and moves bytes between them, on a tokio current-thread runtime.
//!
//! Each turn: flush (everything the core has to deliver, coalesced by the device, then
//! the device read again for what the host answered at once; timers already due;
//! everything the core wants to send, batched per socket with one `sendmmsg` each; its
//! events logged), then wait for the first of: shutdown, the core's deadline, the device readable,
//! a socket readable, the role's own [`Watch`] (the client's netlink watcher), a control
//! request (status, or reload: the watch re-reads the config), SIGHUP (reload, where the
//! role asked for it), a metrics or dashboard connection, or the dashboard's once-a-second
//! sample. Reads drain a ready source until "would block" or
//! [`READ_BUDGET`] batches, so one busy source cannot starve the others (readiness stays
//! set when the budget runs out, and the loop comes straight back).
//!
//! Invariants: one thread owns the core, so nothing is locked; nothing allocates per packet
//! (the datagram and delivery buffers are allocated once, here or in the I/O types); the
//! core's clock is read once per batch; the loop decides nothing about scheduling — that is
//! all in `multihome_proto`.
//!
//! The driver knows no fds: with the in-memory [`super::mem`] implementations it runs a
//! real client and server in one process without root (the test in
//! `tests/driver.rs`). The load generator (`crate::loadgen`) drives the client endpoint
//! with a leaner loop of its own: one of these per session would hold 4 MB of buffers.

use super::core::{Core, Outgoing};
use super::io::{DatagramBind, PacketDevice};
use super::{Clock, BUF_BYTES, READ_BUDGET};
use crate::control::{ControlSocket, Pending, Request, Requests};
use anyhow::Result;
use multihome_io::udp::BATCH_MAX;
use multihome_proto::path::PathId;
use multihome_proto::time::Instant;
use multihome_runtime::dashboard::Live;
use multihome_runtime::http::{HttpListener, Response};
use std::future::{poll_fn, Future};
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::task::{Context, Poll};

/// A role-specific source of events the loop also waits on.
pub trait Watch<C, B> {
    /// Ready when there is something to handle (an implementation may read it here).
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    /// Handles it, with the core and the bind at hand.
    fn handle(&mut self, clock: &Clock, core: &mut C, bind: &mut B);
    /// Re-reads the configuration file and applies what changed (`multihome reload`,
    /// SIGHUP): one line per change, or why nothing was changed.
    fn reload(
        &mut self,
        _clock: &Clock,
        _core: &mut C,
        _bind: &mut B,
    ) -> Result<Vec<String>, String> {
        Err("this daemon cannot reload its configuration: restart it".into())
    }
}

/// No role-specific source (the server, tests).
pub struct NoWatch;

impl<C, B> Watch<C, B> for NoWatch {
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Pending
    }

    fn handle(&mut self, _clock: &Clock, _core: &mut C, _bind: &mut B) {}
}

/// The listeners that serve the core's status document and the history behind the
/// dashboard; all optional (tests have none).
#[derive(Default)]
pub struct Services {
    /// The control socket (`multihome status`, `multihome reload`).
    pub control: Option<ControlSocket>,
    /// The Prometheus listener.
    pub metrics: Option<HttpListener>,
    /// What runs beside the core and adds to its document: the server's resolver, whose
    /// counters live on its own thread (`super::naming`), under `naming`.
    pub resolver: Option<super::naming::ResolverStatus>,
    /// Stream mode's counters (its own thread, `super::stream`), under `stream`.
    pub stream: Option<std::sync::Arc<super::stream::StreamStats>>,
    /// The history of samples and events, and the dashboard if configured.
    pub live: Option<Live>,
    /// Control connections whose request is being read.
    pub requests: Requests,
}

impl Services {
    /// The status document: the core's, with what runs beside it.
    /// With the clock it reads (`now_us`), so a reader can tell how long the oldest held
    /// packet has waited (`hold.since_us`).
    pub fn status(&self, core: &impl Core, now: Instant) -> serde_json::Value {
        let mut v = core.status();
        v["now_us"] = now.as_micros().into();
        if let Some(r) = &self.resolver {
            v["naming"] = r.json();
        }
        if let Some(s) = &self.stream {
            v["stream"] = s.to_json();
        }
        v
    }

    /// The status document as served: [`Self::status`], with the events when there is a
    /// history.
    fn document(&self, core: &impl Core, now: Instant) -> serde_json::Value {
        let doc = self.status(core, now);
        match &self.live {
            Some(l) => l.document(doc),
            None => doc,
        }
    }
}

/// Datagrams built but not yet sent, sent with one `sendmmsg` per run of one socket.
pub struct TxBatch {
    bufs: Vec<Box<[u8]>>,
    meta: Vec<Outgoing>,
}

impl Default for TxBatch {
    fn default() -> Self {
        TxBatch {
            bufs: (0..BATCH_MAX)
                .map(|_| vec![0u8; BUF_BYTES].into_boxed_slice())
                .collect(),
            meta: Vec::with_capacity(BATCH_MAX),
        }
    }
}

impl TxBatch {
    /// Builds datagrams with `build` until it has none or the batch is full; true when it
    /// stopped because the batch is full (send, then fill again).
    pub fn fill(&mut self, mut build: impl FnMut(&mut [u8]) -> Option<Outgoing>) -> bool {
        while let Some(buf) = self.bufs.get_mut(self.meta.len()) {
            match build(buf) {
                Some(m) => self.meta.push(m),
                None => return false,
            }
        }
        true
    }

    /// Sends everything, one `send` per run of consecutive datagrams of one socket; the
    /// numbers of sockets found gone are pushed on `gone`. Failed datagrams are dropped.
    pub fn send(&mut self, bind: &mut impl DatagramBind, gone: &mut Vec<usize>) {
        // On the stack: the batch holds at most BATCH_MAX datagrams.
        let unset = (SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)), &[][..]);
        let mut msgs = [unset; BATCH_MAX];
        let mut start = 0;
        while start < self.meta.len() {
            let sock = self.meta[start].socket;
            let end = self.meta[start..]
                .iter()
                .position(|m| m.socket != sock)
                .map_or(self.meta.len(), |p| start + p);
            for (slot, i) in msgs.iter_mut().zip(start..end) {
                *slot = (self.meta[i].dst, &self.bufs[i][..self.meta[i].len]);
            }
            let run = &msgs[..end - start];
            let mut sent = 0;
            while sent < run.len() {
                match bind.send(sock, &run[sent..]) {
                    Ok(0) => break,
                    Ok(n) => sent += n,
                    Err(e) => {
                        if bind.send_failed(sock, &e) {
                            gone.push(sock);
                        }
                        sent += 1; // skip the datagram that failed
                    }
                }
            }
            start = end;
        }
        self.meta.clear();
    }
}

/// The loop's state: the core, its I/O, and the buffers reused on every turn.
pub struct Driver<C, D, B> {
    /// The sans-IO core.
    pub core: C,
    /// IP packets in and out.
    pub device: D,
    /// Datagrams in and out.
    pub bind: B,
    /// The core's time.
    pub clock: Clock,
    tx: TxBatch,
    /// `poll_deliver`'s output, one packet at a time.
    deliver: Box<[u8]>,
    /// Sockets found gone while sending, reported to the core after the sends.
    gone: Vec<usize>,
    /// SIGHUP, when the daemon reloads on it ([`Driver::reload_on_hangup`]).
    hangup: Option<tokio::signal::unix::Signal>,
}

impl<C: Core, D: PacketDevice, B: DatagramBind> Driver<C, D, B> {
    /// A driver; nothing runs until [`Driver::run`].
    pub fn new(core: C, device: D, bind: B, clock: Clock) -> Self {
        Driver {
            core,
            device,
            bind,
            clock,
            tx: TxBatch::default(),
            deliver: vec![0u8; BUF_BYTES].into_boxed_slice(),
            gone: Vec::new(),
            hangup: None,
        }
    }

    /// Reloads the configuration on SIGHUP (the result is logged), as on `multihome
    /// reload` (the result is the answer). Without this a SIGHUP ends the process, as by
    /// default.
    pub fn reload_on_hangup(mut self) -> Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        self.hangup = Some(signal(SignalKind::hangup())?);
        Ok(self)
    }

    /// Runs until `shutdown` resolves (then returns without closing: see
    /// [`Driver::close`]), or a device or watch error.
    pub async fn run(
        &mut self,
        services: &Services,
        watch: &mut impl Watch<C, B>,
        shutdown: impl Future<Output = ()>,
    ) -> Result<()> {
        tokio::pin!(shutdown);
        let mut tick = Live::tick();
        // One timer for the loop's life, moved only when the core's deadline changes: a
        // new `Sleep` every turn cost a timer-wheel insert and removal per wake-up.
        let sleep = tokio::time::sleep_until(self.clock.deadline(self.core.poll_timeout()));
        tokio::pin!(sleep);
        let mut armed = None;
        loop {
            self.flush();
            let due = self.core.poll_timeout();
            if armed != Some(due) {
                sleep.as_mut().reset(self.clock.deadline(due));
                armed = Some(due);
            }
            let (device, bind) = (&mut self.device, &mut self.bind);
            let hangup = &mut self.hangup;
            // select! drops every branch's future before running a handler, so the
            // handlers may use what the futures borrowed.
            tokio::select! {
                _ = &mut shutdown => return Ok(()),
                _ = &mut sleep => {
                    // Fired: re-arm on the next turn even if the deadline is the same.
                    armed = None;
                    self.core.handle_timeout(self.clock.now());
                }
                r = poll_fn(|cx| device.poll_readable(cx)) => {
                    r?;
                    self.read_device();
                }
                i = poll_fn(|cx| bind.poll_readable(cx)) => self.read_bind(i),
                r = poll_fn(|cx| watch.poll_ready(cx)) => {
                    r?;
                    watch.handle(&self.clock, &mut self.core, &mut self.bind);
                }
                p = next_request(services), if services.control.is_some() => {
                    self.answer(p, watch, services);
                }
                _ = poll_fn(|cx| hangup.as_mut().expect("guarded").poll_recv(cx)),
                    if hangup.is_some() => {
                    tracing::info!("SIGHUP: reloading the configuration");
                    let _ = self.reload(watch);
                }
                m = accept_metrics(services), if services.metrics.is_some() => {
                    if let (Ok(stream), Some(l)) = (m, &services.metrics) {
                        let text = crate::metrics::render(&services.status(&self.core, self.clock.now()));
                        l.serve(stream, move |_| {
                            Response::ok("text/plain; version=0.0.4", text.into_bytes())
                        });
                    }
                }
                d = accept_dashboard(services), if services.live.is_some() => {
                    if let (Ok(stream), Some(l)) = (d, &services.live) {
                        l.serve(stream, services.document(&self.core, self.clock.now()));
                    }
                }
                _ = tick.tick(), if services.live.is_some() => {
                    if let Some(l) = &services.live {
                        l.sample_snapshot(self.core.sample());
                    }
                }
            }
        }
    }

    /// Answers a control request: the status document, or a reload's outcome as JSON
    /// (`{"reloaded": true, "changes": [...]}` or `{"reloaded": false, "error": ...}`).
    fn answer(&mut self, p: Pending, watch: &mut impl Watch<C, B>, services: &Services) {
        let doc = match &p.request {
            Request::Status => services.document(&self.core, self.clock.now()),
            Request::Sample => crate::dashboard::snapshot_json(&self.core.sample()),
            Request::Reload => match self.reload(watch) {
                Ok(changes) => serde_json::json!({"reloaded": true, "changes": changes}),
                Err(error) => serde_json::json!({"reloaded": false, "error": error}),
            },
            Request::Unknown(r) => serde_json::json!({"error": format!("unknown request `{r}`")}),
        };
        p.answer(doc.to_string());
    }

    /// Reloads through the role's watch and logs the outcome.
    fn reload(&mut self, watch: &mut impl Watch<C, B>) -> Result<Vec<String>, String> {
        let r = watch.reload(&self.clock, &mut self.core, &mut self.bind);
        match &r {
            Ok(changes) if changes.is_empty() => tracing::info!("reload: nothing changed"),
            Ok(changes) => {
                for c in changes {
                    tracing::info!("reload: {c}");
                }
            }
            Err(e) => tracing::warn!("reload refused, the configuration in force is kept: {e}"),
        }
        r
    }

    /// Closes the core's session (CLOSE where the role sends one) and sends it.
    pub fn close(&mut self) {
        self.core.close();
        self.flush();
    }

    /// Delivers everything the core has received (and reads what the host answered at
    /// once), runs timers already due, sends everything the core has queued (batched per
    /// socket), tells it of sockets that vanished, and logs its events.
    pub fn flush(&mut self) {
        // Delivered first, then the device read once more: what the host's stack answers
        // at once to a delivered packet (an echo reply, the ACK of a TCP segment, produced
        // while the write is processed) is then sealed and sent in this same turn, with
        // whatever else is due, instead of one more wake-up and `sendmmsg` later.
        let mut delivered = false;
        while let Some(n) = self.core.poll_deliver(&mut self.deliver) {
            self.device.write_packet(&self.deliver[..n]);
            delivered = true;
        }
        self.device.flush();
        if delivered {
            let (core, clock) = (&mut self.core, &self.clock);
            drain(|| {
                let now = clock.now();
                self.device
                    .read_packets_now(|p| core.handle_tun_packet(now, p))
            });
        }
        let mut now = self.clock.now();
        // Timers due now (an ACK owed at once, say) run here rather than through the
        // runtime's timer, which would cost an unpark, a wake-up and a `sendmmsg` of
        // their own.
        if self.core.poll_timeout().is_some_and(|t| t <= now) {
            self.core.handle_timeout(now);
            now = self.clock.now();
        }
        let core = &mut self.core;
        let mut build = |buf: &mut [u8]| core.poll_transmit(now, buf);
        while self.tx.fill(&mut build) {
            self.tx.send(&mut self.bind, &mut self.gone);
        }
        self.tx.send(&mut self.bind, &mut self.gone);
        for i in self.gone.drain(..) {
            self.core.link_gone(now, PathId(i as u8));
        }
        self.core.log_events();
    }

    /// Drains the device into the core.
    fn read_device(&mut self) {
        let (core, clock) = (&mut self.core, &self.clock);
        drain(|| {
            let now = clock.now();
            self.device.read_packets(|p| core.handle_tun_packet(now, p))
        });
    }

    /// Drains socket `sock` into the core.
    fn read_bind(&mut self, sock: usize) {
        let (core, clock) = (&mut self.core, &self.clock);
        let link = PathId(sock as u8);
        drain(|| {
            // The time of arrival is read once the batch is in, not before the call.
            let mut now = None;
            self.bind
                .recv(sock, |from, buf| {
                    let now = *now.get_or_insert_with(|| clock.now());
                    core.handle_datagram(now, link, from, buf);
                })
                .map(drop)
        });
    }
}

/// Calls `read` until the source says "would block" (which clears its readiness, so the
/// next wait blocks), fails, or [`READ_BUDGET`] batches were read (readiness stays set,
/// so the loop comes back at once after serving the others).
fn drain(mut read: impl FnMut() -> io::Result<()>) {
    for _ in 0..READ_BUDGET {
        match read() {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => {
                tracing::debug!("read error: {e}");
                break;
            }
        }
    }
}

async fn next_request(s: &Services) -> Pending {
    s.requests.next(s.control.as_ref().expect("guarded")).await
}

async fn accept_metrics(s: &Services) -> io::Result<tokio::net::TcpStream> {
    s.metrics.as_ref().expect("guarded").accept().await
}

async fn accept_dashboard(s: &Services) -> io::Result<tokio::net::TcpStream> {
    s.live.as_ref().expect("guarded").accept().await
}
