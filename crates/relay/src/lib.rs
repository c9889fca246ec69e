//! `multihome relay`: extra paths ("detours") through this node for multihome clients.
//!
//! A client asks, in an authenticated request (`multihome_proto::detour`, docs/PROTOCOL.md
//! §15), for one of its tunnel paths to be forwarded to a server; the relay installs the
//! forwarding and answers with the relay port. NAT mode: nftables DNAT + SNAT per detour
//! (`multihome_io::detour`), the kernel forwards and this process does no per-packet work.
//! Tunnel mode: a UDP socket per detour forwards in userspace with batched
//! `recvmmsg`/`sendmmsg` (`tunnel.rs`). The relay only moves the tunnel's sealed datagrams.
//!
//! One tokio current-thread runtime: the request socket, the expiry timer, the control
//! socket, SIGINT/SIGTERM, and one local task per tunnel detour. Everything installed is
//! removed on exit (the table with it). Reference: docs/CONFIG.md.

pub mod config;
mod tunnel;

use anyhow::{Context, Result};
use config::RelaySettings;
use multihome_io::detour::{NatDetour, RelayTable};
use multihome_io::udp::{LinkSocket, RecvBuf};
use multihome_proto::detour::{
    Action, DetourRelay, Entry, Mode, RelayConfig, RelayCounters, ANSWER_LEN,
};
use multihome_proto::Instant;
use serde::Serialize;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixListener;
use tokio::signal::unix::{signal, SignalKind};
use tracing::{info, warn};

pub use tunnel::TunnelStats;

/// Extra kernel life of a NAT element beyond the detour's lifetime: the relay removes it
/// first; the kernel timeout only acts if the relay died without cleanup.
const KERNEL_SLACK: Duration = Duration::from_secs(30);

/// Runs the relay with the config at `path` until SIGINT or SIGTERM.
pub fn run(path: &Path) -> Result<()> {
    run_until(path, std::future::pending())
}

/// Runs the relay until SIGINT, SIGTERM or `stop` completes (tests stop it this way
/// without signalling their whole process).
pub fn run_until(path: &Path, stop: impl std::future::Future<Output = ()>) -> Result<()> {
    let settings = config::load(path)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, serve(settings, stop))
}

/// The status document of the control socket.
#[derive(Debug, Serialize)]
struct Status<'a> {
    name: &'a str,
    listen: SocketAddr,
    detours: usize,
    nat_detours: usize,
    tunnel_detours: usize,
    counters: CountersDoc,
    tunnel_forwarded_datagrams: u64,
    tunnel_forwarded_bytes: u64,
    tunnel_dropped: u64,
    clients: Vec<ClientDoc<'a>>,
}

#[derive(Debug, Serialize)]
struct ClientDoc<'a> {
    name: &'a str,
    detours: usize,
}

#[derive(Debug, Serialize)]
struct CountersDoc {
    rx_datagrams: u64,
    rx_malformed: u64,
    rx_rate_limited: u64,
    rx_unauthenticated: u64,
    rx_unknown_client: u64,
    rx_replayed: u64,
    answers: u64,
    installed: u64,
    renewed: u64,
    released: u64,
    expired: u64,
    refused_mode: u64,
    refused_client_limit: u64,
    refused_full: u64,
    refused_destination: u64,
    failed: u64,
}

impl From<RelayCounters> for CountersDoc {
    fn from(c: RelayCounters) -> Self {
        CountersDoc {
            rx_datagrams: c.rx_datagrams,
            rx_malformed: c.rx_malformed,
            rx_rate_limited: c.rx_rate_limited,
            rx_unauthenticated: c.rx_unauthenticated,
            rx_unknown_client: c.rx_unknown_client,
            rx_replayed: c.rx_replayed,
            answers: c.answers,
            installed: c.installed,
            renewed: c.renewed,
            released: c.released,
            expired: c.expired,
            refused_mode: c.refused_mode,
            refused_client_limit: c.refused_client_limit,
            refused_full: c.refused_full,
            refused_destination: c.refused_destination,
            failed: c.failed,
        }
    }
}

struct Relay {
    s: RelaySettings,
    core: DetourRelay,
    table: Option<RelayTable>,
    tunnels: HashMap<u16, tunnel::Tunnel>,
    stats: Rc<TunnelStats>,
    origin: std::time::Instant,
}

impl Relay {
    fn now(&self) -> Instant {
        Instant::from_micros(self.origin.elapsed().as_micros() as u64)
    }

    /// Performs an action; true if it took effect.
    fn act(&mut self, action: Action) -> bool {
        match action {
            Action::None => true,
            Action::Install(e) => {
                let ok = self.install(&e);
                if ok {
                    info!(port = e.port, source = %e.source, server = %e.server, mode = e.mode.name(),
                        client = %self.s.clients[e.client].name, "detour installed");
                }
                ok
            }
            Action::Renew(e) => match (e.mode, &self.table) {
                (Mode::Nat, Some(t)) => t
                    .renew(&nat(&e), self.s.lifetime + KERNEL_SLACK)
                    .map_err(|err| warn!("renewing detour on port {}: {err}", e.port))
                    .is_ok(),
                _ => true,
            },
            Action::Remove(e) => {
                self.uninstall(&e);
                true
            }
        }
    }

    fn install(&mut self, e: &Entry) -> bool {
        match e.mode {
            Mode::Nat => match &self.table {
                Some(t) => t
                    .add(&nat(e), self.s.lifetime + KERNEL_SLACK)
                    .map_err(|err| warn!("installing detour on port {}: {err}", e.port))
                    .is_ok(),
                None => false,
            },
            Mode::Tunnel => {
                let local = SocketAddr::new(self.s.listen.ip(), e.port);
                match tunnel::Tunnel::start(local, e.source, e.server, self.stats.clone()) {
                    Ok(t) => {
                        self.tunnels.insert(e.port, t);
                        true
                    }
                    Err(err) => {
                        warn!("tunnel detour on {local}: {err:#}");
                        false
                    }
                }
            }
        }
    }

    fn uninstall(&mut self, e: &Entry) {
        match e.mode {
            Mode::Nat => {
                if let Some(t) = &self.table {
                    if let Err(err) = t.remove(&nat(e)) {
                        warn!("removing detour on port {}: {err}", e.port);
                    }
                }
            }
            Mode::Tunnel => {
                self.tunnels.remove(&e.port);
            }
        }
        info!(port = e.port, source = %e.source, server = %e.server, mode = e.mode.name(), "detour removed");
    }

    fn status(&self) -> String {
        let entries: Vec<&Entry> = self.core.entries().collect();
        let nat_n = entries.iter().filter(|e| e.mode == Mode::Nat).count();
        let doc = Status {
            name: &self.s.name,
            listen: self.s.listen,
            detours: entries.len(),
            nat_detours: nat_n,
            tunnel_detours: entries.len() - nat_n,
            counters: self.core.counters().into(),
            tunnel_forwarded_datagrams: self.stats.datagrams.get(),
            tunnel_forwarded_bytes: self.stats.bytes.get(),
            tunnel_dropped: self.stats.dropped.get(),
            clients: self
                .s
                .clients
                .iter()
                .enumerate()
                .map(|(i, c)| ClientDoc {
                    name: &c.name,
                    detours: self.core.client_entries(i),
                })
                .collect(),
        };
        serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
    }
}

fn nat(e: &Entry) -> NatDetour {
    NatDetour {
        source: e.source,
        relay_port: e.port,
        server: e.server,
    }
}

async fn serve(s: RelaySettings, stop: impl std::future::Future<Output = ()>) -> Result<()> {
    tokio::pin!(stop);
    let sock = LinkSocket::bind(None, s.listen).with_context(|| format!("binding {}", s.listen))?;
    // SAFETY: the socket owns its fd for its whole life and `as_raw_fd` always returns it
    // (LinkSocket's documented contract for tokio).
    let sock = unsafe { AsyncFd::register(sock) }.context("registering the request socket")?;
    let table = if s.modes.nat {
        Some(
            RelayTable::install(&s.name, s.ports)
                .context("installing the relay's nftables table (NAT mode)")?,
        )
    } else {
        // A NAT relay that crashed under this name may have left its table.
        let _ = multihome_io::detour::delete_leftover(&s.name);
        None
    };
    let control = bind_control(&s.control_socket)?;
    let mut seed = [0u8; 32];
    getrandom::getrandom(&mut seed).context("reading randomness")?;
    let mut cfg = RelayConfig::new(
        s.private_key.clone(),
        s.clients.iter().map(|c| c.public_key).collect(),
    );
    cfg.modes = s.modes;
    cfg.ports = s.ports;
    cfg.lifetime = s.lifetime;
    cfg.max_per_client = s.max_per_client;
    cfg.max_total = s.max_entries;
    cfg.max_requests_per_s = s.max_requests_per_s;
    cfg.allowed_destinations = s.allowed_destinations.clone();
    let mut relay = Relay {
        core: DetourRelay::new(cfg, seed),
        s,
        table,
        tunnels: HashMap::new(),
        stats: Rc::new(TunnelStats::default()),
        origin: std::time::Instant::now(),
    };
    info!(
        listen = %relay.s.listen,
        public_key = %relay.s.private_key.public_key().to_base64(),
        nat = relay.s.modes.nat,
        tunnel = relay.s.modes.tunnel,
        ports = %format!("{}-{}", relay.s.ports.0, relay.s.ports.1),
        clients = relay.s.clients.len(),
        "relay running"
    );
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut log_tick = tokio::time::interval(Duration::from_secs(60));
    let mut bufs: Vec<RecvBuf> = (0..32).map(|_| RecvBuf::new(512)).collect();
    let mut out = [0u8; ANSWER_LEN];
    loop {
        let sleep_for = relay
            .core
            .poll_timeout()
            .map(|t| Duration::from_micros(t.as_micros().saturating_sub(relay.now().as_micros())))
            .unwrap_or(Duration::from_secs(3600));
        tokio::select! {
            r = sock.readable() => {
                let mut guard = r?;
                loop {
                    let n = match sock.get_ref().recv_batch(&mut bufs) {
                        Ok(n) => n,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            guard.clear_ready();
                            break;
                        }
                        Err(e) => {
                            warn!("request socket: {e}");
                            break;
                        }
                    };
                    let now = relay.now();
                    for b in &bufs[..n] {
                        let Some(adm) = relay.core.handle_datagram(now, b.source(), b.packet()) else {
                            continue;
                        };
                        let ok = relay.act(adm.action);
                        let to = adm.from();
                        if let Some(len) = relay.core.answer(adm, ok, &mut out) {
                            // Lost answers are retried by the client.
                            let _ = sock.get_ref().send_to(&out[..len], to);
                        }
                    }
                }
            }
            _ = tokio::time::sleep(sleep_for) => {
                let now = relay.now();
                while let Some(e) = relay.core.poll_expired(now) {
                    relay.uninstall(&e);
                }
            }
            c = control_accept(&control) => {
                if let Some(mut stream) = c {
                    let doc = relay.status();
                    tokio::task::spawn_local(async move {
                        let _ = stream.write_all(doc.as_bytes()).await;
                        let _ = stream.shutdown().await;
                    });
                }
            }
            _ = log_tick.tick() => {
                let c = relay.core.counters();
                info!(detours = relay.core.len(), answers = c.answers, unknown = c.rx_unknown_client,
                    unauthenticated = c.rx_unauthenticated, replayed = c.rx_replayed,
                    rate_limited = c.rx_rate_limited, tunnel_datagrams = relay.stats.datagrams.get(),
                    "relay counters");
            }
            _ = sigint.recv() => break,
            _ = sigterm.recv() => break,
            _ = &mut stop => break,
        }
    }
    info!("relay stopping: removing {} detours", relay.core.len());
    for e in relay.core.drain() {
        relay.uninstall(&e);
    }
    if let Some(t) = relay.table.take() {
        t.remove_table()
            .context("removing the relay's nftables table")?;
    }
    drop(control);
    Ok(())
}

struct Control {
    listener: UnixListener,
    path: std::path::PathBuf,
}

impl Drop for Control {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn bind_control(path: &Path) -> Result<Control> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            anyhow::bail!(
                "{} is in use by a running daemon; stop it or set control_socket",
                path.display()
            );
        }
        let _ = std::fs::remove_file(path);
    }
    let listener =
        UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(Control {
        listener,
        path: path.to_path_buf(),
    })
}

async fn control_accept(c: &Control) -> Option<tokio::net::UnixStream> {
    c.listener.accept().await.ok().map(|(s, _)| s)
}
