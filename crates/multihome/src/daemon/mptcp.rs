//! `multihome mptcp-detours`: subflows through relays' NAT detours for this host's kernel
//! MPTCP connections, with the kernel's userspace path manager (no kernel patch). It carries
//! out what `multihome_proto::detour::MptcpManager` decides, nothing more:
//!
//! - switches the namespace to the userspace path manager (`net.mptcp.pm_type = 1`) and
//!   restores the previous type on exit;
//! - reads the `mptcp_pm_events` (connection established / closed, subflow established /
//!   closed) and hands them to the manager;
//! - `Open`: binds a UDP socket on the connection's local address whose port is free for
//!   TCP too (`multihome_io::mptcp::bind_detour_socket`), and a local task that passes the
//!   relay's answers arriving on it back; `Send`/`Close` use and drop it;
//! - `CreateSubflow`/`DestroySubflow`: `MPTCP_PM_CMD_SUBFLOW_CREATE` / `_DESTROY`; a
//!   refused create is reported back (`create_failed`);
//! - a control socket with the status document (role `mptcp-detours`).
//!
//! On SIGINT/SIGTERM every detour subflow is destroyed and every relay entry released
//! (waiting at most `RELEASE_WAIT` for the answers). One tokio current-thread runtime.

use crate::config::mptcp::{load, MptcpSettings};
use anyhow::{Context, Result};
use multihome_io::mptcp::{
    bind_detour_socket, set_pm_type, set_userspace_pm, MptcpEvent, Pm, PmEvents,
};
use multihome_io::udp::LinkSocket;
use multihome_proto::detour::{DetourId, MptcpAction, MptcpConfig, MptcpManager, TYPE_ANSWER};
use multihome_runtime::control::{self, ControlSocket};
use multihome_runtime::{block_on, os_seed, shutdown_signal, Clock};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

/// Longest wait for the relays' answers to the releases at shutdown.
const RELEASE_WAIT: Duration = Duration::from_secs(2);

/// Runs the daemon with the config at `path` until SIGINT or SIGTERM.
pub fn run(path: &Path) -> Result<()> {
    let s = load(path)?;
    block_on(serve(s))
}

/// A detour's socket and the task that reads the relay's answers off it.
struct DetourSocket {
    sock: Rc<AsyncFd<LinkSocket>>,
    task: JoinHandle<()>,
}

impl Drop for DetourSocket {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Daemon {
    mgr: MptcpManager,
    pm: Pm,
    sockets: HashMap<DetourId, DetourSocket>,
    answers: UnboundedSender<(DetourId, Vec<u8>)>,
    clock: Clock,
    overruns: u64,
}

async fn serve(s: MptcpSettings) -> Result<()> {
    let pm = Pm::open().context(
        "opening the kernel's MPTCP path manager (generic netlink family mptcp_pm); \
         is this a Linux kernel with MPTCP (CONFIG_MPTCP, net.mptcp.enabled = 1)?",
    )?;
    let events = pm.events().context("subscribing to MPTCP events")?;
    // SAFETY: PmEvents owns its netlink fd for its whole life and `as_raw_fd` returns it.
    let mut events =
        unsafe { AsyncFd::register(events) }.context("registering the event socket")?;
    // Everything that can fail comes before the switch, so an error leaves nothing to undo.
    let control = ControlSocket::bind(&s.control_socket)?;
    let seed = os_seed()?;
    let old_pm = set_userspace_pm()
        .context("setting net.mptcp.pm_type = 1 (the userspace path manager); run as root")?;
    let clock = Clock::new();
    let mut cfg = MptcpConfig::new(s.private_key.clone(), clock.epoch_us);
    cfg.detours = s.detours;
    cfg.targets = s.targets.clone();
    cfg.max_connections = s.max_connections;
    cfg.check_interval = s.check_interval;
    cfg.join_timeout = s.join_timeout;
    cfg.backoff = s.backoff;
    cfg.max_failures = s.max_failures;
    let (tx, mut rx) = unbounded_channel();
    let mut d = Daemon {
        mgr: MptcpManager::new(cfg, s.relays.clone(), seed),
        pm,
        sockets: HashMap::new(),
        answers: tx,
        clock,
        overruns: 0,
    };
    info!(
        relays = s.relays.len(),
        detours = s.detours,
        targets = s.targets.len(),
        previous_pm_type = old_pm,
        "mptcp-detours running (userspace path manager)"
    );
    let r = d.event_loop(&mut events, &mut rx, &control).await;
    d.shut_down(&mut rx).await;
    if old_pm != 1 {
        if let Err(e) = set_pm_type(old_pm) {
            warn!("restoring net.mptcp.pm_type = {old_pm}: {e}");
        }
    }
    r
}

impl Daemon {
    async fn event_loop(
        &mut self,
        events: &mut AsyncFd<PmEvents>,
        rx: &mut UnboundedReceiver<(DetourId, Vec<u8>)>,
        control: &ControlSocket,
    ) -> Result<()> {
        let stop = shutdown_signal();
        tokio::pin!(stop);
        let mut evs = Vec::new();
        loop {
            let sleep = tokio::time::sleep_until(self.clock.deadline(self.mgr.poll_timeout()));
            tokio::select! {
                r = events.readable_mut() => {
                    let mut guard = r?;
                    // poll_events drains until the kernel says "would block".
                    if let Err(e) = guard.get_inner_mut().poll_events(&mut evs) {
                        warn!("reading MPTCP events: {e}");
                    }
                    self.overruns = guard.get_inner().overruns();
                    guard.clear_ready();
                    for e in evs.drain(..) {
                        self.on_event(e);
                    }
                }
                Some((id, data)) = rx.recv() => {
                    let now = self.clock.now();
                    self.mgr.handle_datagram(now, id, &data);
                }
                _ = sleep => self.mgr.handle_timeout(self.clock.now()),
                c = control.accept() => {
                    if let Ok(stream) = c {
                        control::reply(stream, self.status().to_string() + "\n");
                    }
                }
                _ = &mut stop => return Ok(()),
            }
            self.carry_out();
        }
    }

    fn on_event(&mut self, e: MptcpEvent) {
        let now = self.clock.now();
        debug!(?e, "mptcp event");
        match e {
            MptcpEvent::Established {
                token,
                local,
                remote,
                server_side,
            } => self
                .mgr
                .connection_established(now, token, local, remote, server_side),
            MptcpEvent::Closed { token } => self.mgr.connection_closed(now, token),
            MptcpEvent::SubEstablished {
                token,
                local,
                remote,
            } => self.mgr.subflow_established(token, local, remote),
            MptcpEvent::SubClosed {
                token,
                local,
                remote,
                ..
            } => self.mgr.subflow_closed(now, token, local, remote),
            MptcpEvent::Created { .. } | MptcpEvent::Other { .. } => {}
        }
    }

    /// Performs every pending action of the manager.
    fn carry_out(&mut self) {
        while let Some(a) = self.mgr.poll_action() {
            match a {
                MptcpAction::Open { id, ip } => self.open(id, ip),
                MptcpAction::Send { id, dst, data } => {
                    if let Some(s) = self.sockets.get(&id) {
                        // A lost request is retried by the manager's relay client.
                        let _ = s.sock.get_ref().send_to(&data, dst);
                    }
                }
                MptcpAction::Close { id } => {
                    self.sockets.remove(&id);
                }
                MptcpAction::CreateSubflow {
                    id,
                    token,
                    local_id,
                    local,
                    remote,
                } => match self.pm.subflow_create(token, local_id, local, remote) {
                    Ok(()) => info!(token, %local, %remote, "detour subflow created"),
                    Err(e) => {
                        warn!("{e}");
                        self.mgr.create_failed(self.clock.now(), id);
                    }
                },
                MptcpAction::DestroySubflow {
                    token,
                    local,
                    remote,
                } => match self.pm.subflow_destroy(token, local, remote) {
                    Ok(()) => info!(token, %local, %remote, "detour subflow removed"),
                    Err(e) => debug!("{e}"),
                },
            }
        }
    }

    fn open(&mut self, id: DetourId, ip: IpAddr) {
        let now = self.clock.now();
        let bound = bind_detour_socket(ip).and_then(|s| {
            let local = s.local_addr()?;
            // SAFETY: the socket owns its fd for its whole life and `as_raw_fd` always
            // returns it (LinkSocket's documented contract for tokio).
            let sock = Rc::new(unsafe { AsyncFd::register(s) }?);
            Ok((local, sock))
        });
        match bound {
            Ok((local, sock)) => {
                let task =
                    tokio::task::spawn_local(read_answers(sock.clone(), id, self.answers.clone()));
                self.sockets.insert(id, DetourSocket { sock, task });
                self.mgr.opened(now, id, Ok(local));
            }
            Err(e) => {
                warn!("binding a detour socket on {ip}: {e}");
                self.mgr.opened(now, id, Err(()));
            }
        }
    }

    /// Destroys and releases everything, waiting a little for the relays' answers.
    async fn shut_down(&mut self, rx: &mut UnboundedReceiver<(DetourId, Vec<u8>)>) {
        info!("mptcp-detours stopping: removing the detour subflows, releasing the entries");
        self.mgr.release_all(self.clock.now());
        self.carry_out();
        let deadline = tokio::time::Instant::now() + RELEASE_WAIT;
        while !self.mgr.is_idle() {
            let next = self.clock.deadline(self.mgr.poll_timeout()).min(deadline);
            tokio::select! {
                Some((id, data)) = rx.recv() => {
                    self.mgr.handle_datagram(self.clock.now(), id, &data);
                }
                _ = tokio::time::sleep_until(next) => {
                    if tokio::time::Instant::now() >= deadline {
                        break;
                    }
                    self.mgr.handle_timeout(self.clock.now());
                }
            }
            self.carry_out();
        }
    }

    fn status(&self) -> Value {
        let now = self.clock.now();
        let c = self.mgr.counters();
        json!({
            "role": "mptcp-detours",
            "connections": self.mgr.connections(),
            "detours": self.mgr.detours().iter().map(|d| json!({
                "token": d.token,
                "server": d.server.to_string(),
                "relay": d.relay,
                "state": d.state,
                "local": d.local.map(|a| a.to_string()),
                "relay_port": d.relay_port,
            })).collect::<Vec<_>>(),
            "relays": self.mgr.relays(now).iter().map(|r| json!({
                "name": r.name,
                "address": r.address.to_string(),
                "rtt_ms": r.rtt.map(|d| d.as_secs_f64() * 1e3),
                "resting_s": r.resting_for.map(|d| d.as_secs_f64()),
            })).collect::<Vec<_>>(),
            "counters": {
                "connections": c.connections,
                "connections_served": c.connections_served,
                "detours_started": c.detours_started,
                "subflows_created": c.subflows_created,
                "subflows_joined": c.subflows_joined,
                "subflows_removed": c.subflows_removed,
                "subflows_closed": c.subflows_closed,
                "relays_dead": c.relays_dead,
                "refused": c.refused,
                "failures": c.failures,
                "nat_in_path": c.nat_in_path,
                "event_overruns": self.overruns,
            },
        })
    }
}

/// Passes the relay answers arriving on a detour socket to the event loop.
async fn read_answers(
    sock: Rc<AsyncFd<LinkSocket>>,
    id: DetourId,
    tx: UnboundedSender<(DetourId, Vec<u8>)>,
) {
    let mut buf = [0u8; 512];
    loop {
        let Ok(mut guard) = sock.readable().await else {
            return;
        };
        loop {
            match sock.get_ref().recv_from(&mut buf) {
                Ok((n, _)) if n > 0 && buf[0] == TYPE_ANSWER => {
                    if tx.send((id, buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    guard.clear_ready();
                    break;
                }
                Err(_) => return,
            }
        }
    }
}

/// The plain-text view of the status document (`multihome status`).
pub fn render(v: &Value) -> String {
    let mut out = String::new();
    let o = &mut out;
    let s = |x: &Value| match x {
        Value::Null => "-".to_string(),
        Value::String(t) => t.clone(),
        other => other.to_string(),
    };
    let _ = writeln!(
        o,
        "role: mptcp-detours, connections served: {}",
        s(&v["connections"])
    );
    let _ = writeln!(
        o,
        "{:<10} {:<22} {:<10} {:<10} {:<22} port",
        "token", "server", "relay", "state", "local"
    );
    for d in v["detours"].as_array().into_iter().flatten() {
        let _ = writeln!(
            o,
            "{:<10} {:<22} {:<10} {:<10} {:<22} {}",
            s(&d["token"]),
            s(&d["server"]),
            s(&d["relay"]),
            s(&d["state"]),
            s(&d["local"]),
            s(&d["relay_port"])
        );
    }
    for r in v["relays"].as_array().into_iter().flatten() {
        let _ = writeln!(
            o,
            "relay {} {} rtt_ms {} resting_s {}",
            s(&r["name"]),
            s(&r["address"]),
            s(&r["rtt_ms"]),
            s(&r["resting_s"])
        );
    }
    let _ = writeln!(o, "counters: {}", v["counters"]);
    out
}
