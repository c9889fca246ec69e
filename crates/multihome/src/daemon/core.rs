//! What the driver needs from a sans-IO core: one trait over
//! `multihome_proto::endpoint::Client` (wrapped in [`ClientCore`], which adds the link
//! names for the status document and remembers whether the session was established, to
//! log the change) and `multihome_proto::endpoint::Server`.
//!
//! The two endpoints differ in small ways the trait irons out: the client's
//! `handle_datagram` takes the link a datagram came on, the server's does not (it keys on
//! the sender; the server impl ignores the link); the client sends each datagram from its
//! path's socket, the server from its only socket (number 0); only the client has links to
//! lose and a session to close.
//!
//! The client's detour paths (`super::detours`) live here too: a detour path is sent from
//! its link's socket (`Outgoing::socket` is then the link's, not the path's id), relay
//! answers are taken off the link sockets, and relay requests go out with the tunnel's
//! datagrams.
//!
//! `poll_deliver` writes into the caller's buffer (the driver keeps one of `BUF_BYTES`,
//! reused for every packet), as the endpoints' own does.

use super::detours::Detours;
use crate::config::client::LinkSettings;
use multihome_proto::endpoint::{Client, Server};
use multihome_proto::path::PathId;
use multihome_proto::Instant;
use std::net::SocketAddr;

/// A datagram the core built: which socket sends it, to where, how long it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outgoing {
    /// The socket's number in the bind (client: the link's `PathId`, also for a detour path
    /// over that link, plus the number of links for the link's copy socket; server: 0, 1
    /// for its copy socket).
    pub socket: usize,
    /// Destination.
    pub dst: SocketAddr,
    /// Length of the datagram at the front of the buffer.
    pub len: usize,
}

/// The sans-IO core as the driver sees it. All methods are the endpoints' own, except
/// `link_gone`, `log_events` and `status`.
pub trait Core {
    /// A datagram that arrived on socket `link` from `from` (decrypted in place).
    fn handle_datagram(&mut self, now: Instant, link: PathId, from: SocketAddr, buf: &mut [u8]);
    /// An IP packet read from the device.
    fn handle_tun_packet(&mut self, now: Instant, packet: &[u8]);
    /// Builds the next datagram into `buf`.
    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Outgoing>;
    /// Writes the next IP packet for the device into `buf` and returns its length (a packet
    /// larger than `buf` is dropped and counted, and the next one tried).
    fn poll_deliver(&mut self, buf: &mut [u8]) -> Option<usize>;
    /// The next time `handle_timeout` has work.
    fn poll_timeout(&self) -> Option<Instant>;
    /// Runs due timers.
    fn handle_timeout(&mut self, now: Instant);
    /// Socket `link` is gone (its interface vanished): stop using the link.
    fn link_gone(&mut self, now: Instant, link: PathId);
    /// Drains the core's events into the log.
    fn log_events(&mut self);
    /// The status document served on the control socket and rendered as metrics.
    fn status(&self) -> serde_json::Value;
    /// What the dashboard's history samples once a second: the snapshot of the status
    /// document, unless the role builds the same more cheaply (the server).
    fn sample(&self) -> multihome_runtime::dashboard::Snapshot {
        crate::dashboard::snapshot(&self.status())
    }
    /// Starts closing: queues CLOSE where the role sends one (then flush).
    fn close(&mut self);
}

/// The client endpoint with what the daemon adds: link names (status) and the last
/// established state (the log says when it changes).
pub struct ClientCore {
    /// The endpoint.
    pub client: Client,
    link_names: Vec<String>,
    /// Links configured (detour paths, named after them in `link_names`, are not links).
    n_links: usize,
    was_established: bool,
    detours: Option<Detours>,
    /// The naming watch's status (`daemon/naming.rs`), shown under `naming`.
    pub naming: Option<serde_json::Value>,
    /// The configured flow classes, shown under `policies`.
    policies: Option<serde_json::Value>,
    /// Links removed by a reload: their paths stay in the session (down), as a detour's
    /// do, so a later link given the same id goes on in step with the server; status
    /// leaves them out.
    retired: Vec<PathId>,
    /// Stream mode, if on: it is told each link's state and keeps the paths probed while
    /// it has connections (`stream/steer.rs`).
    stream: Option<StreamLinks>,
}

/// What the client core shares with stream mode's thread.
pub struct StreamLinks {
    /// Where each link's tunnel state is published.
    pub states: tokio::sync::watch::Sender<Vec<multihome_proto::path::PathState>>,
    /// Stream mode's counters (its open connections).
    pub stats: std::sync::Arc<super::stream::StreamStats>,
    /// When the core next looks whether stream connections are open (an idle session's
    /// own deadlines are a keepalive apart; this bounds how late the first connection
    /// after a quiet spell starts the fast probing).
    pub next_check: Instant,
}

/// How often the core looks whether stream connections are open.
pub const STREAM_CHECK: std::time::Duration = std::time::Duration::from_millis(500);

impl ClientCore {
    /// Wraps `client`, whose links are named `link_names` in `PathId` order.
    pub fn new(client: Client, link_names: Vec<String>) -> Self {
        ClientCore {
            client,
            n_links: link_names.len(),
            link_names,
            was_established: false,
            detours: None,
            naming: None,
            policies: None,
            retired: Vec::new(),
            stream: None,
        }
    }

    /// Steers stream mode's subflows by the links' states (`None`: stream mode is off).
    pub fn with_stream(mut self, stream: Option<StreamLinks>) -> Self {
        self.stream = stream;
        self
    }

    /// Shows `classifier` (the config's flow classes) in the status document.
    pub fn with_policies(mut self, classifier: &multihome_proto::policy::Classifier) -> Self {
        self.show_policies(classifier);
        self
    }

    /// Shows `classifier` in the status document from now on (at start and after a
    /// reload, which may rename links or change rules).
    pub fn show_policies(&mut self, classifier: &multihome_proto::policy::Classifier) {
        let names = &self.link_names;
        let name_of = |id: PathId| {
            names
                .get(id.0 as usize)
                .cloned()
                .unwrap_or_else(|| id.0.to_string())
        };
        self.policies = Some(crate::status::policies_json(classifier, &name_of));
    }

    /// Adds link `l` or moves it to its (new) server (a reload), usable or not; `slots` is
    /// the number of link sockets now (the copy sockets' numbers follow them).
    pub fn set_link(&mut self, now: Instant, l: &LinkSettings, usable: bool, slots: usize) {
        let i = l.id.0 as usize;
        if self.link_names.len() <= i {
            self.link_names.resize(i + 1, String::new());
        }
        self.link_names[i] = l.name.clone();
        self.n_links = slots;
        self.retired.retain(|r| *r != l.id);
        self.client.add_link(now, l.id, l.server);
        self.client.set_link_cost(l.id, l.cost);
        self.set_link_up(now, l.id, usable);
    }

    /// Takes link `id` out of use for good (a reload removed it): its path goes down, so
    /// what it held is sent again over the others.
    pub fn retire_link(&mut self, now: Instant, id: PathId) {
        self.set_link_up(now, id, false);
        self.retired.push(id);
    }

    /// Uses detour paths through relays, as `detours` decides; the client then takes the
    /// relay lists its server hands out.
    pub fn with_detours(mut self, detours: Option<Detours>) -> Self {
        if detours.is_some() {
            self.client.accept_relays();
        }
        self.detours = detours;
        self
    }

    /// Link `link`'s interface is usable or not (netlink); its detours follow.
    pub fn set_link_up(&mut self, now: Instant, link: PathId, up: bool) {
        self.client.set_link_available(now, link, up);
        if let Some(d) = &mut self.detours {
            d.set_link_up(now, link, up);
            d.apply(now, &mut self.client, &mut self.link_names);
        }
    }
}

impl Core for ClientCore {
    fn handle_datagram(&mut self, now: Instant, link: PathId, from: SocketAddr, buf: &mut [u8]) {
        let Some(d) = &mut self.detours else {
            return self.client.handle_datagram(now, link, from, buf);
        };
        let sock = link.0 as usize;
        if d.handle_datagram(now, sock, from, buf) {
            d.apply(now, &mut self.client, &mut self.link_names);
            return;
        }
        let path = d.path_for(sock, from);
        self.client.handle_datagram(now, path, from, buf);
    }

    fn handle_tun_packet(&mut self, now: Instant, packet: &[u8]) {
        self.client.handle_tun_packet(now, packet);
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Outgoing> {
        if let Some(o) = self.detours.as_mut().and_then(|d| d.poll_transmit(buf)) {
            return Some(o);
        }
        let t = self.client.poll_transmit(now, buf)?;
        let link = self
            .detours
            .as_ref()
            .map_or(t.path.0 as usize, |d| d.socket(t.path));
        Some(Outgoing {
            // Copy sockets follow the links' own (`LinkBind`).
            socket: link + if t.kernel_copies { self.n_links } else { 0 },
            dst: t.dst,
            len: t.len,
        })
    }

    fn poll_deliver(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.client.poll_deliver(buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let d = self.detours.as_ref().and_then(|d| d.poll_timeout());
        let s = self.stream.as_ref().map(|s| s.next_check);
        [self.client.poll_timeout(), d, s]
            .into_iter()
            .flatten()
            .min()
    }

    fn handle_timeout(&mut self, now: Instant) {
        if let Some(s) = self.stream.as_mut().filter(|s| s.next_check <= now) {
            s.next_check = now + STREAM_CHECK;
            if s.stats.active.load(std::sync::atomic::Ordering::Relaxed) > 0 {
                // Its connections' subflows follow the links' states: keep them fresh.
                self.client.keep_active(now);
            }
        }
        self.client.handle_timeout(now);
        if let Some(d) = &mut self.detours {
            d.handle_timeout(now, &mut self.client, &mut self.link_names);
        }
    }

    fn link_gone(&mut self, now: Instant, link: PathId) {
        self.set_link_up(now, link, false);
    }

    fn log_events(&mut self) {
        while let Some(e) = self.client.poll_event() {
            tracing::info!(event = ?e, "session event");
            if let (Some(s), multihome_proto::session::Event::PathState(id, st)) =
                (&self.stream, &e)
            {
                super::stream::steer::publish(&s.states, id.0 as usize, *st);
            }
        }
        if self.client.is_established() != self.was_established {
            self.was_established = self.client.is_established();
            tracing::info!(established = self.was_established, "session");
        }
    }

    fn status(&self) -> serde_json::Value {
        let mut v = crate::status::client_status(&self.client, &self.link_names);
        if let Some(links) = v["sessions"][0]["links"].as_array_mut() {
            links.retain(|l| {
                let id = l["id"].as_u64().unwrap_or(u64::MAX);
                !self.retired.iter().any(|r| u64::from(r.0) == id)
            });
        }
        if let Some(d) = &self.detours {
            v["detours"] = d.status();
        }
        if let Some(n) = &self.naming {
            v["naming"] = n.clone();
        }
        if let Some(p) = &self.policies {
            v["policies"] = p.clone();
        }
        v
    }

    /// Releases the detours (requests sent with the CLOSE datagrams), then closes.
    fn close(&mut self) {
        if let Some(d) = &mut self.detours {
            d.release_all();
        }
        self.client.close();
    }
}

impl Core for Server {
    fn handle_datagram(&mut self, now: Instant, _link: PathId, from: SocketAddr, buf: &mut [u8]) {
        Server::handle_datagram(self, now, from, buf);
    }

    fn handle_tun_packet(&mut self, now: Instant, packet: &[u8]) {
        Server::handle_tun_packet(self, now, packet);
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Outgoing> {
        Server::poll_transmit(self, now, buf).map(|t| Outgoing {
            // The copy socket (`ListenBind`), where the kernel copies the datagram.
            socket: usize::from(t.kernel_copies),
            dst: t.dst,
            len: t.len,
        })
    }

    fn poll_deliver(&mut self, buf: &mut [u8]) -> Option<usize> {
        Server::poll_deliver(self, buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Server::poll_timeout(self)
    }

    fn handle_timeout(&mut self, now: Instant) {
        Server::handle_timeout(self, now);
    }

    /// The server's socket never goes (see `ListenBind::send_failed`).
    fn link_gone(&mut self, _now: Instant, _link: PathId) {}

    fn log_events(&mut self) {
        while let Some((peer, e)) = self.poll_event() {
            tracing::info!(peer, event = ?e, "session event");
        }
    }

    fn status(&self) -> serde_json::Value {
        crate::status::server_status(self)
    }

    fn sample(&self) -> multihome_runtime::dashboard::Snapshot {
        crate::status::server_snapshot(self)
    }

    /// `Server` has no CLOSE to send: its clients detect a stopped server by silence and
    /// keep retrying the handshake, so a restarted one is found again.
    fn close(&mut self) {}
}
