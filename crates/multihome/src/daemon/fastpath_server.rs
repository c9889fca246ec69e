//! The server's kernel fast path for downstream `redundant` copies (`[server]
//! kernel_copies = true`): a session seals a packet that needs copies once
//! (`Transmit::kernel_copies`), the driver sends it from the copy socket
//! (`io::ListenBind`), and the kernel copies it onto the session's other paths by the
//! nftables table this module keeps (`multihome_io::dup_server`).
//!
//! Invariants: the table describes the paths the sessions have now, checked every
//! [`REFRESH`] and replaced when a path appeared, moved (roaming) or went; a path with an
//! IPv6 remote is left out. Until the table knows a new path, a datagram for it leaves
//! uncopied (from the listening port all the same). The table is removed when the
//! [`ServerFastPath`] is dropped (daemon exit, even on an error); a table left by a daemon
//! that was killed is replaced at the next start, or removed there if the fast path is off.

use super::driver::Watch;
use super::io::ListenBind;
use super::Clock;
use multihome_io::dup::{self, KernelCopies};
use multihome_io::dup_server::{self, DupPath};
use multihome_proto::endpoint::Server;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::task::{Context, Poll};
use std::time::Duration;

/// Name of the nftables table (`ip multihome_dup_server`; the client's is `multihome_dup`,
/// so both roles may run on one host).
pub const TABLE: &str = "multihome_dup_server";

/// How often the sessions' paths are compared with the table.
pub const REFRESH: Duration = Duration::from_millis(250);

/// The installed table, what it was built from, and the refresh timer; inert when the fast
/// path is off.
pub struct ServerFastPath {
    table: Option<KernelCopies>,
    listen: SocketAddr,
    /// The sessions' path remotes the table was built from.
    installed: Vec<Vec<SocketAddrV4>>,
    tick: tokio::time::Interval,
}

impl ServerFastPath {
    /// Installs an empty table for `bind`'s copy socket (replacing a leftover), or with
    /// the fast path off removes a leftover.
    pub fn start(enabled: bool, bind: &ListenBind) -> anyhow::Result<ServerFastPath> {
        let listen = bind.local_addr()?;
        let mut tick = tokio::time::interval(REFRESH);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut fast = ServerFastPath {
            table: None,
            listen,
            installed: Vec::new(),
            tick,
        };
        let copy_port = bind.copy_port();
        if !enabled || copy_port.is_none() {
            if let Err(e) = dup::remove_leftover(TABLE) {
                tracing::debug!("no fast-path table to remove: {e}");
            }
            return Ok(fast);
        }
        let text = fast.ruleset(bind, &[])?;
        fast.table = Some(KernelCopies::install_ruleset(TABLE, &text)?);
        tracing::info!(table = TABLE, "kernel fast path installed");
        Ok(fast)
    }

    fn ruleset(&self, bind: &ListenBind, sessions: &[Vec<SocketAddrV4>]) -> anyhow::Result<String> {
        let copy_port = bind.copy_port().unwrap_or(0);
        let paths: Vec<Vec<DupPath>> = sessions
            .iter()
            .map(|s| s.iter().map(|&r| self.dup_path(r)).collect())
            .collect();
        Ok(dup_server::ruleset(
            TABLE,
            self.listen.port(),
            copy_port,
            &paths,
        )?)
    }

    /// `remote` with the source the listening socket uses towards it: the listen address,
    /// or with a wildcard listen address the one the kernel's route to `remote` picks.
    fn dup_path(&self, remote: SocketAddrV4) -> DupPath {
        let local = match self.listen.ip() {
            IpAddr::V4(a) if !a.is_unspecified() => a,
            _ => route_source(remote).unwrap_or(Ipv4Addr::UNSPECIFIED),
        };
        DupPath { remote, local }
    }

    /// Replaces the table if the sessions' paths changed.
    fn refresh(&mut self, core: &Server, bind: &ListenBind) {
        let Some(table) = &self.table else { return };
        let now = remotes(core);
        if now == self.installed {
            return;
        }
        let res = self
            .ruleset(bind, &now)
            .and_then(|t| Ok(table.update_ruleset(&t)?));
        match res {
            Ok(()) => {
                let paths: usize = now.iter().map(Vec::len).sum();
                tracing::info!(sessions = now.len(), paths, "kernel fast path updated");
                self.installed = now;
            }
            Err(e) => tracing::warn!("kernel fast path not updated: {e:#}"),
        }
    }
}

impl Watch<Server, ListenBind> for ServerFastPath {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.table.is_none() {
            return Poll::Pending;
        }
        self.tick.poll_tick(cx).map(|_| Ok(()))
    }

    fn handle(&mut self, _clock: &Clock, core: &mut Server, bind: &mut ListenBind) {
        self.refresh(core, bind);
    }
}

/// Each session's IPv4 path remotes, in path order.
fn remotes(core: &Server) -> Vec<Vec<SocketAddrV4>> {
    core.peers()
        .filter_map(|p| p.session)
        .map(|s| {
            s.paths()
                .filter_map(|p| match p.remote() {
                    SocketAddr::V4(a) => Some(a),
                    SocketAddr::V6(_) => None,
                })
                .collect()
        })
        .collect()
}

/// The source address the kernel picks for a datagram to `remote` (a connected UDP socket
/// sends nothing: connecting only looks the route up).
fn route_source(remote: SocketAddrV4) -> Option<Ipv4Addr> {
    let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok()?;
    s.connect(remote).ok()?;
    match s.local_addr().ok()?.ip() {
        IpAddr::V4(a) => Some(a),
        IpAddr::V6(_) => None,
    }
}
