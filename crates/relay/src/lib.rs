//! `multihome relay`: extra paths ("detours") through this node for multihome clients.
//!
//! A client asks, in an authenticated request (`multihome_proto::detour`, docs/PROTOCOL.md
//! §15), for one of its tunnel paths to be forwarded to a server; the relay installs the
//! forwarding and answers with the relay port. NAT mode: nftables DNAT + SNAT per detour
//! (`multihome_io::detour`), the kernel forwards and this process does no per-packet work.
//! NAT mode also forwards TCP for kernel MPTCP subflows (mode `nat-tcp`, requested by
//! `multihome mptcp-detours`). Tunnel mode: a UDP socket per detour forwards in userspace with batched
//! `recvmmsg`/`sendmmsg` (`tunnel.rs`). The relay only moves the tunnel's sealed datagrams.
//!
//! One tokio current-thread runtime (`multihome_runtime`, as every daemon): the request
//! socket, the expiry timer, the control socket, the optional dashboard and its
//! once-a-second sample, SIGINT/SIGTERM, and one local task per tunnel detour. Everything installed is
//! removed on exit (the table with it). Reference: docs/CONFIG.md.

pub mod config;
mod metrics;
mod status;
mod tunnel;

use anyhow::{Context, Result};
use config::RelaySettings;
use multihome_io::detour::{NatDetour, Proto, RelayTable};
use multihome_io::udp::{LinkSocket, RecvBuf};
use multihome_proto::detour::{Action, DetourRelay, Entry, Mode, RelayConfig, ANSWER_LEN};
use multihome_runtime::control::{self, ControlSocket};
use multihome_runtime::dashboard::Live;
use multihome_runtime::{block_on, os_seed, shutdown_signal, Clock};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;
use tokio::io::unix::{AsyncFd, AsyncFdReadyGuard};
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
    block_on(serve(settings, stop))
}

struct Relay {
    s: RelaySettings,
    core: DetourRelay,
    table: Option<RelayTable>,
    tunnels: HashMap<u16, tunnel::Tunnel>,
    stats: Rc<TunnelStats>,
    clock: Clock,
}

impl Relay {
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
                (Mode::Nat | Mode::NatTcp, Some(t)) => t
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
            Mode::Nat | Mode::NatTcp => match &self.table {
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
            Mode::Nat | Mode::NatTcp => {
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
}

fn nat(e: &Entry) -> NatDetour {
    NatDetour {
        proto: if e.mode == Mode::NatTcp {
            Proto::Tcp
        } else {
            Proto::Udp
        },
        source: e.source,
        relay_port: e.port,
        server: e.server,
    }
}

/// Starts the relay: the request socket, the NAT table (or a leftover one removed), the
/// control socket and the core.
fn start(s: RelaySettings) -> Result<(Relay, AsyncFd<LinkSocket>, ControlSocket)> {
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
    let control = ControlSocket::bind(&s.control_socket)?;
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
    let relay = Relay {
        core: DetourRelay::new(cfg, os_seed()?),
        s,
        table,
        tunnels: HashMap::new(),
        stats: Rc::new(TunnelStats::default()),
        clock: Clock::new(),
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
    Ok((relay, sock, control))
}

async fn serve(s: RelaySettings, stop: impl std::future::Future<Output = ()>) -> Result<()> {
    // Bound before `start` installs anything, so a taken address leaves nothing behind.
    let live = Live::new(
        "relay",
        s.dashboard,
        status::snapshot,
        Some(metrics::render),
    )
    .await?;
    let (mut relay, sock, control) = start(s)?;
    let mut tick = Live::tick();
    let stop = async {
        tokio::select! {
            _ = shutdown_signal() => {}
            _ = stop => {}
        }
    };
    tokio::pin!(stop);
    let mut log_tick = tokio::time::interval(Duration::from_secs(60));
    let mut bufs: Vec<RecvBuf> = (0..32).map(|_| RecvBuf::new(512)).collect();
    loop {
        let sleep = tokio::time::sleep_until(relay.clock.deadline(relay.core.poll_timeout()));
        tokio::select! {
            r = sock.readable() => relay.on_readable(r?, &sock, &mut bufs),
            _ = sleep => {
                let now = relay.clock.now();
                while let Some(e) = relay.core.poll_expired(now) {
                    relay.uninstall(&e);
                }
            }
            c = control.accept() => {
                if let Ok(stream) = c {
                    let doc = live.document(relay.status());
                    control::reply(stream, serde_json::to_string_pretty(&doc)? + "\n");
                }
            }
            c = live.accept() => {
                if let Ok(stream) = c {
                    live.serve(stream, live.document(relay.status()));
                }
            }
            _ = tick.tick() => live.sample(&relay.status()),
            _ = log_tick.tick() => relay.log_counters(),
            _ = &mut stop => break,
        }
    }
    relay.shut_down()
}

impl Relay {
    /// Answers every request waiting on the request socket.
    fn on_readable(
        &mut self,
        mut guard: AsyncFdReadyGuard<'_, LinkSocket>,
        sock: &AsyncFd<LinkSocket>,
        bufs: &mut [RecvBuf],
    ) {
        let mut out = [0u8; ANSWER_LEN];
        loop {
            let n = match sock.get_ref().recv_batch(bufs) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    guard.clear_ready();
                    return;
                }
                Err(e) => {
                    warn!("request socket: {e}");
                    return;
                }
            };
            let now = self.clock.now();
            for b in &bufs[..n] {
                let Some(adm) = self.core.handle_datagram(now, b.source(), b.packet()) else {
                    continue;
                };
                let ok = self.act(adm.action);
                let to = adm.from();
                if let Some(len) = self.core.answer(adm, ok, &mut out) {
                    // Lost answers are retried by the client.
                    let _ = sock.get_ref().send_to(&out[..len], to);
                }
            }
        }
    }

    fn log_counters(&self) {
        let c = self.core.counters();
        info!(
            detours = self.core.len(),
            answers = c.answers,
            unknown = c.rx_unknown_client,
            unauthenticated = c.rx_unauthenticated,
            replayed = c.rx_replayed,
            rate_limited = c.rx_rate_limited,
            tunnel_datagrams = self.stats.datagrams.get(),
            "relay counters"
        );
    }

    /// Removes every detour and the table.
    fn shut_down(mut self) -> Result<()> {
        info!("relay stopping: removing {} detours", self.core.len());
        for e in self.core.drain() {
            self.uninstall(&e);
        }
        if let Some(t) = self.table.take() {
            t.remove_table()
                .context("removing the relay's nftables table")?;
        }
        Ok(())
    }
}
