//! The name service in the daemons: the client resolving its server and publishing its
//! record (a [`Watch`] beside the netlink one), and the server running a resolver thread.
//!
//! Client: before the session starts, [`start`] asks the configured resolvers for the
//! server records and waits for `multihome_naming::resolver` to pick a server; the
//! settings then carry that server's key and address, and the daemon starts as with a
//! fixed server. While it runs, [`NamingWatch`] feeds the resolver its answers and, every
//! [`TICK`], looks at the session: a server that stopped answering (every path Down after
//! it had been up, or no handshake within [`handshake_grace`]) is reported lost, and the
//! client's attachment (links up, their addresses, its default policy) is published when
//! it changes. When the resolver names another server the session is replaced by a new one
//! towards it (same identity, new handshake). Connections that went out through the lost
//! server's NAT cannot survive: their packets now leave with the new server's public
//! address, which the remote end does not know; new connections work at once.
//!
//! Resolver requests go out of the first available link's own socket (bound to its
//! interface like the tunnel's), so they never enter the tunnel itself.
//!
//! Server: [`serve`] starts a thread with its own runtime for the resolver
//! (`multihome_naming::service`), so a slow store never stalls the tunnel; its load (the
//! number of sessions) is read from the server's own control socket once a second. Its
//! counters (requests, records refused by reason, the etcd copy's state) are shared with
//! the server's loop, which shows them under `naming` in its status ([`server_status`]).

use super::core::ClientCore;
use super::driver::Watch;
use super::io::LinkBind;
use super::{register, Clock};
use crate::config::naming::{ClientNaming, ServerNaming, StoreSettings};
use crate::config::{ClientSettings, ServerSettings};
use anyhow::{Context as _, Result};
use multihome_io::udp::LinkSocket;
use multihome_naming::resolver::{Event, Resolver, ResolverConfig};
use multihome_naming::service::{self, ServiceConfig, ServiceStats, SharedStats};
use multihome_naming::signed::RefusalCounts;
use multihome_naming::store::{EmbeddedStore, EtcdStore, RecordStore, Store};
use multihome_naming::LinkAddr;
use multihome_proto::crypto::{PublicKey, StaticSecret};
use multihome_proto::endpoint::Client;
use multihome_proto::path::PathState;
use multihome_proto::policy::Policy;
use serde_json::json;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::unix::AsyncFd;

/// How often the session is looked at (server lost? attachment changed?).
pub const TICK: Duration = Duration::from_millis(250);
/// Longest wait for the first resolution at start.
pub const FIRST_RESOLUTION: Duration = Duration::from_secs(60);

/// A new server's session must come up within this, or the server counts as lost.
pub fn handshake_grace(detect: Duration) -> Duration {
    (detect * 3).max(Duration::from_secs(3))
}

fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Builds the session towards a server with the given key.
pub type ClientFactory = Box<dyn Fn(PublicKey) -> Result<Client>>;

/// The client's resolver, its sockets and what it knows of the session.
pub struct NamingWatch {
    resolver: Resolver,
    /// One socket per link, bound to its interface (`None`: could not bind).
    socks: Vec<Option<AsyncFd<LinkSocket>>>,
    links: Vec<(String, String)>,
    policy: u8,
    detect: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
    inbox: Vec<(SocketAddr, Vec<u8>)>,
    make_client: Option<ClientFactory>,
    /// Since when (core time, µs) the current server is used, and whether it came up.
    attached: Option<(u64, bool)>,
    next_tick_us: u64,
    status: serde_json::Value,
}

/// The policy's two-bit code, as DATA frames carry it (a link policy publishes as `best`).
fn policy_code(p: &Policy) -> u8 {
    p.code()
}

/// Resolves the first server when `s` names none: waits (up to [`FIRST_RESOLUTION`])
/// for the resolver's choice and writes its key and address into `s`.
pub async fn start(s: &mut ClientSettings, key: &StaticSecret) -> Result<Option<NamingWatch>> {
    let Some(n) = s.naming.clone() else {
        return Ok(None);
    };
    let mut w = NamingWatch::new(s, &n, key);
    let give_up = tokio::time::Instant::now() + FIRST_RESOLUTION;
    loop {
        w.send_all(None);
        while let Some(e) = w.resolver.poll_event() {
            if let Event::Use {
                key,
                tunnel,
                tunnels,
                name,
            } = e
            {
                tracing::info!(server = %name, %tunnel, "server resolved");
                s.server_public_key = key;
                for l in &mut s.links {
                    l.server = tunnel_for(&l.interface, &tunnels, tunnel);
                }
                w.attached = Some((0, false));
                w.publish_status();
                return Ok(Some(w));
            }
        }
        tokio::select! {
            _ = tokio::time::sleep_until(give_up) => anyhow::bail!(
                "no trusted server resolved within {}s from {:?}", FIRST_RESOLUTION.as_secs(), n.resolvers
            ),
            _ = std::future::poll_fn(|cx| w.poll_ready(cx)) => {}
        }
        let now = unix_us();
        for (from, b) in std::mem::take(&mut w.inbox) {
            w.resolver.handle_datagram(now, from, &b);
        }
        w.resolver.handle_timeout(now);
        w.reset_sleep(now);
    }
}

impl NamingWatch {
    fn new(s: &ClientSettings, n: &ClientNaming, key: &StaticSecret) -> NamingWatch {
        let cfg = ResolverConfig {
            key: key.clone(),
            bootstrap: n.resolvers.clone(),
            trusted: n.trusted.clone(),
            lease_ms: n.lease.as_millis() as u64,
            collect_ms: 100,
            retry_ms: 500,
            exclude_ms: 30_000,
        };
        // Dual-stack, so a link reaches IPv4 and IPv6 resolvers alike; IPv4 only where the
        // kernel has no IPv6.
        let any6: SocketAddr = "[::]:0".parse().expect("literal");
        let any4: SocketAddr = "0.0.0.0:0".parse().expect("literal");
        let socks = s
            .links
            .iter()
            .map(|l| {
                LinkSocket::bind(Some(&l.interface), any6)
                    .or_else(|_| LinkSocket::bind(Some(&l.interface), any4))
                    .map_err(anyhow::Error::from)
                    .and_then(register)
                    .map_err(|e| tracing::warn!(link = %l.name, "no resolver socket: {e:#}"))
                    .ok()
            })
            .collect();
        NamingWatch {
            resolver: Resolver::new(cfg, unix_us()),
            socks,
            links: s
                .links
                .iter()
                .map(|l| (l.name.clone(), l.interface.clone()))
                .collect(),
            policy: policy_code(&s.classifier.default),
            detect: s.detect,
            sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
            inbox: Vec::new(),
            make_client: None,
            attached: None,
            next_tick_us: 0,
            status: json!(null),
        }
    }

    /// How a session towards another server is built (needed before the daemon runs).
    pub fn with_factory(mut self, f: ClientFactory) -> Self {
        self.make_client = Some(f);
        self
    }

    /// Sends what the resolver queued from the first available link's socket (any bound
    /// one when none is known available).
    fn send_all(&mut self, available: Option<&[bool]>) {
        while let Some((dst, bytes)) = self.resolver.poll_transmit() {
            let usable = |i: usize| available.is_none_or(|a| a.get(i).copied().unwrap_or(false));
            // Usable links first, then any; the next one when a link cannot send there (no
            // route of the resolver's family on it: a dual-stack client's IPv4-only link).
            let mut tried = 0u32;
            let order = (0..self.socks.len()).filter(|&i| usable(i));
            for i in order.chain(0..self.socks.len()) {
                let Some(s) = self.socks[i].as_ref().filter(|_| tried & (1 << i) == 0) else {
                    continue;
                };
                tried |= 1 << i;
                match s.get_ref().send_to(&bytes, dst) {
                    Ok(_) => break,
                    Err(e) => {
                        tracing::debug!(%dst, link = %self.links[i].0, "resolver request not sent: {e}")
                    }
                }
            }
        }
    }

    fn reset_sleep(&mut self, now_us: u64) {
        let tick = self.next_tick_us.max(now_us);
        let due = self.resolver.poll_timeout().map_or(tick, |t| t.min(tick));
        let wait = Duration::from_micros(due.saturating_sub(now_us));
        self.sleep
            .as_mut()
            .reset(tokio::time::Instant::now() + wait.max(Duration::from_millis(1)));
    }

    fn publish_status(&mut self) {
        let st = self.resolver.status();
        self.status = json!({
            "server": st.server.map(|(n, _)| n.to_string()),
            "server_address": st.server.map(|(_, a)| a.to_string()),
            "servers_known": st.servers_known,
            "published_unix_ms": st.published.map(|p| p.0),
            "published_seq": st.published.map(|p| p.1),
            "failovers": st.failovers,
            "refused": st.refusals.total(),
            "refused_stale": st.refusals.stale,
            "refused_bad_signature": st.refusals.bad_signature,
            "untrusted": st.untrusted,
        });
    }

    /// The server in use stopped answering, or never answered within the grace?
    fn check_server(&mut self, now_core_us: u64, core: &ClientCore) -> bool {
        let Some((since, was_up)) = &mut self.attached else {
            return false;
        };
        let c = &core.client;
        let any_link = c.links().iter().any(|l| l.available);
        let up = c.session().paths().any(|p| p.state() != PathState::Down);
        *was_up |= up && c.is_established();
        let grace = handshake_grace(self.detect).as_micros() as u64;
        any_link && ((*was_up && !up) || (!*was_up && now_core_us > *since + grace))
    }

    /// The client's links that are up, with their interfaces' first address.
    fn attachment(&self, core: &ClientCore) -> Vec<LinkAddr> {
        let avail = core.client.links();
        self.links
            .iter()
            .enumerate()
            .filter(|(i, _)| avail.get(*i).is_some_and(|l| l.available))
            .filter_map(|(_, (name, iface))| {
                let ip = multihome_io::netlink::interface_addresses(iface)
                    .ok()?
                    .into_iter()
                    .map(|n| n.addr())
                    .find(|a| {
                        a.is_ipv4()
                            || !matches!(a, std::net::IpAddr::V6(v) if v.is_unicast_link_local())
                    })?;
                Some(LinkAddr {
                    name: name.clone(),
                    addr: SocketAddr::new(ip, 0),
                })
            })
            .collect()
    }

    /// Replaces the session by one towards the server with `key` at `tunnel` (each link at
    /// the first of `tunnels` of a family its interface has).
    fn switch(
        &mut self,
        clock: &Clock,
        core: &mut ClientCore,
        key: PublicKey,
        tunnel: SocketAddr,
        tunnels: &[SocketAddr],
    ) {
        let Some(make) = &self.make_client else {
            return;
        };
        let mut c = match make(key) {
            Ok(c) => c,
            Err(e) => return tracing::error!("cannot start a session: {e:#}"),
        };
        let now = clock.now();
        for l in core.client.links().to_vec() {
            let server = match self.links.get(usize::from(l.id.0)) {
                Some((_, interface)) => tunnel_for(interface, tunnels, tunnel),
                None => tunnel,
            };
            c.add_link(now, l.id, server);
            c.set_link_cost(l.id, l.cost);
            c.set_link_available(now, l.id, l.available);
        }
        core.client = c;
        self.attached = Some((now.as_micros(), false));
        tracing::info!(%tunnel, "session moved to another server");
    }
}

impl Watch<ClientCore, LinkBind> for NamingWatch {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut buf = [0u8; 2048];
        for s in self.socks.iter().flatten() {
            while let Poll::Ready(Ok(mut g)) = s.poll_read_ready(cx) {
                match g.try_io(|s| s.get_ref().recv_from(&mut buf)) {
                    Ok(Ok((n, from))) => self.inbox.push((from, buf[..n].to_vec())),
                    Ok(Err(_)) => break,
                    Err(_would_block) => continue,
                }
            }
        }
        let timer = self.sleep.as_mut().poll(cx).is_ready();
        if timer || !self.inbox.is_empty() {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    }

    fn handle(&mut self, clock: &Clock, core: &mut ClientCore, _bind: &mut LinkBind) {
        let now = unix_us();
        for (from, b) in std::mem::take(&mut self.inbox) {
            self.resolver.handle_datagram(now, from, &b);
        }
        if now >= self.next_tick_us {
            self.next_tick_us = now + TICK.as_micros() as u64;
            if self.check_server(clock.now().as_micros(), core) {
                tracing::warn!("server stopped answering: resolving another");
                self.attached = None;
                self.resolver.server_lost(now);
            }
            let links = self.attachment(core);
            self.resolver.set_attachment(now, self.policy, links);
        }
        self.resolver.handle_timeout(now);
        while let Some(e) = self.resolver.poll_event() {
            match e {
                Event::Use {
                    key,
                    tunnel,
                    tunnels,
                    ..
                } => self.switch(clock, core, key, tunnel, &tunnels),
                Event::Published { seq } => tracing::debug!(seq, "record published"),
            }
        }
        let avail: Vec<bool> = core.client.links().iter().map(|l| l.available).collect();
        self.send_all(Some(&avail));
        self.publish_status();
        core.naming = Some(self.status.clone());
        self.reset_sleep(now);
    }
}

/// The address a link on `interface` uses among a server's announced `tunnels`: the first
/// of a family the interface has an address of, else `first` (the link then waits for
/// such an address, as a configured server's link does).
fn tunnel_for(interface: &str, tunnels: &[SocketAddr], first: SocketAddr) -> SocketAddr {
    tunnels
        .iter()
        .copied()
        .find(|t| super::client::has_family_address(interface, *t))
        .unwrap_or(first)
}

/// The netlink watch and, when the server is resolved, the naming watch.
pub struct Watches<W> {
    /// The role's own watch.
    pub inner: W,
    /// The naming watch.
    pub naming: Option<NamingWatch>,
    ready: (bool, bool),
}

impl<W> Watches<W> {
    /// Both watches.
    pub fn new(inner: W, naming: Option<NamingWatch>) -> Self {
        Watches {
            inner,
            naming,
            ready: (false, false),
        }
    }
}

impl<W: Watch<ClientCore, LinkBind>> Watch<ClientCore, LinkBind> for Watches<W> {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Poll::Ready(r) = self.inner.poll_ready(cx) {
            r?;
            self.ready.0 = true;
        }
        if let Some(n) = &mut self.naming {
            if let Poll::Ready(r) = n.poll_ready(cx) {
                r?;
                self.ready.1 = true;
            }
        }
        if self.ready.0 || self.ready.1 {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    }

    fn reload(
        &mut self,
        clock: &Clock,
        core: &mut ClientCore,
        bind: &mut LinkBind,
    ) -> Result<Vec<String>, String> {
        self.inner.reload(clock, core, bind)
    }

    fn handle(&mut self, clock: &Clock, core: &mut ClientCore, bind: &mut LinkBind) {
        if std::mem::take(&mut self.ready.0) {
            self.inner.handle(clock, core, bind);
        }
        if std::mem::take(&mut self.ready.1) {
            if let Some(n) = &mut self.naming {
                n.handle(clock, core, bind);
            }
        }
    }
}

/// Starts the server's resolver thread when `[naming]` is configured. Binds its socket and
/// opens an embedded store here, so a bad address or file fails start-up. Returns the
/// resolver's counters.
pub fn serve(s: &ServerSettings, key: &StaticSecret) -> Result<Option<ResolverStatus>> {
    let Some(n) = s.naming.clone() else {
        return Ok(None);
    };
    let sock = std::net::UdpSocket::bind(n.listen)
        .with_context(|| format!("resolver listen {}", n.listen))?;
    sock.set_nonblocking(true)?;
    let embedded = match &n.store {
        StoreSettings::Embedded(p) => Some(
            EmbeddedStore::open(p).with_context(|| format!("opening the store {}", p.display()))?,
        ),
        StoreSettings::Etcd(_) => None,
    };
    let cfg = ServiceConfig {
        key: key.clone(),
        tunnel: n.advertise.clone(),
        resolver: n.resolver_advertise,
        capacity: n.capacity,
        lease_ms: n.lease.as_millis() as u64,
    };
    let control = s.control_socket.clone();
    let status = ResolverStatus {
        stats: SharedStats::default(),
        store: match n.store {
            StoreSettings::Embedded(_) => "embedded",
            StoreSettings::Etcd(_) => "etcd",
        },
    };
    let st = status.stats.clone();
    std::thread::Builder::new()
        .name("naming".into())
        .spawn(move || resolver_thread(n, cfg, sock, embedded, control, st))
        .context("starting the resolver thread")?;
    Ok(Some(status))
}

fn resolver_thread(
    n: ServerNaming,
    cfg: ServiceConfig,
    sock: std::net::UdpSocket,
    embedded: Option<EmbeddedStore>,
    control: std::path::PathBuf,
    stats: SharedStats,
) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return tracing::error!("resolver runtime: {e}"),
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let store = match (embedded, &n.store) {
            (Some(e), _) => Store::Embedded(e),
            (None, StoreSettings::Etcd(eps)) => Store::Etcd(Box::new(connect(eps).await)),
            (None, StoreSettings::Embedded(p)) => {
                return tracing::error!("store {} was not opened", p.display())
            }
        };
        let store = std::rc::Rc::new(store);
        let load = Arc::new(AtomicU32::new(0));
        let hk = housekeeping(store.clone(), load.clone(), control, stats.clone());
        tokio::task::spawn_local(hk);
        tracing::info!(listen = %n.listen, "resolver running");
        service::run(store, cfg, sock, load, stats).await;
    });
}

/// Connects to etcd, retrying every second: the server runs meanwhile, and its clients
/// find it once its record is stored.
async fn connect(eps: &[String]) -> EtcdStore {
    loop {
        match EtcdStore::connect(eps).await {
            Ok(s) => return s,
            Err(e) => tracing::warn!("etcd {eps:?}: {e}; retrying"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Once a second: the load from the control socket (its `sample`: the whole status
/// document would cost a server with many sessions far more), the store's counters (they change
/// without requests too: the etcd watch); now and then, expired records swept from an
/// embedded store.
async fn housekeeping(
    store: std::rc::Rc<Store>,
    load: Arc<AtomicU32>,
    control: std::path::PathBuf,
    stats: SharedStats,
) {
    let mut ticks = 0u64;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        stats.set_store(store.stats());
        if let Ok(v) = crate::status::fetch_sample(&control) {
            let n = v["sessions"].as_array().map_or(0, |s| s.len());
            load.store(n as u32, Ordering::Relaxed);
        }
        ticks += 1;
        if let (Store::Embedded(e), 0) = (&*store, ticks % 60) {
            if let Err(e) = e.sweep(service::unix_ms()) {
                tracing::warn!("sweeping the store: {e}");
            }
        }
    }
}

fn refusals_json(r: &RefusalCounts) -> serde_json::Value {
    json!({
        "total": r.total(),
        "unsigned": r.unsigned,
        "bad_signature": r.bad_signature,
        "stale": r.stale,
        "oversized": r.oversized,
        "expired": r.expired,
        "malformed": r.malformed,
        "lease_too_long": r.lease_too_long,
    })
}

/// The server's resolver as its status shows it.
#[derive(Clone)]
pub struct ResolverStatus {
    stats: SharedStats,
    store: &'static str,
}

impl ResolverStatus {
    /// The resolver's part of the server's status document (`naming`).
    pub fn json(&self) -> serde_json::Value {
        let s = self.stats.snapshot();
        server_status(&s, self.store)
    }
}

fn server_status(s: &ServiceStats, store: &str) -> serde_json::Value {
    let mut v = json!({
        "store": store,
        "lookups": s.lookups,
        "server_lists": s.server_lists,
        "publishes": s.publishes,
        "not_found": s.not_found,
        "unavailable": s.unavailable,
        "dropped_busy": s.dropped_busy,
        "refused": refusals_json(&s.store.refused),
        "refused_in_store": refusals_json(&s.store.refused_in_store),
    });
    if let Some(c) = s.store.cache {
        v["cache"] = json!({
            "records": c.records,
            "revision": c.revision,
            "applied": c.applied,
            "relists": c.relists,
            "resumes": c.resumes,
            "reads_waited": c.reads_waited,
            "watch_up": s.store.feed_up.unwrap_or(false),
        });
    }
    v
}
