//! The client daemon's side of detours: carries out what
//! `multihome_proto::detour::DetourManager` decides, nothing more.
//!
//! - Relay requests go out from the link's own socket (the relay forwards the source it
//!   sees); answers (first byte `TYPE_ANSWER`, from a relay's request address) are taken off
//!   the link sockets before the tunnel sees them.
//! - `AddPath` becomes a path of the client endpoint (`Client::add_link` with the relay
//!   address:port as remote), named "LINK via RELAY" in status and metrics and sent from
//!   its link's socket ([`Detours::socket`]); `RemovePath` takes it out of use
//!   (`set_link_available(false)`: its unacknowledged data is reinjected). The path itself
//!   stays in the session, so its per-path counters stay in step with the server's if its
//!   id is used again for another detour (the server then follows the new address).
//! - Every timer run, the session's paths are reported to the manager (`PathObs`), and
//!   the server's newest relay list, if it changed (docs/PROTOCOL.md §15.7), is merged
//!   with the configured relays (`DetourManager::set_server_relays`).
//!
//! Invariants: a detour path's socket is its link's socket for as long as the path exists;
//! datagrams from a detour's remote on that socket are the detour path's (handshake
//! responses confirm the right path).

use super::core::Outgoing;
use crate::config::detours::RelaySettings;
use crate::config::ClientSettings;
use multihome_proto::crypto::StaticSecret;
use multihome_proto::detour::{DetourManager, ManagerAction, ManagerConfig, PathObs, TYPE_ANSWER};
use multihome_proto::endpoint::Client;
use multihome_proto::path::PathId;
use multihome_proto::sched::MAX_PATHS;
use multihome_proto::Instant;
use serde_json::{json, Value};
use std::net::SocketAddr;

/// Bytes in flight below which a path counts as idle for the detour manager: keepalive
/// PINGs and ACKs (66–173 bytes) are in flight on every live path.
const PROBE_INFLIGHT: u64 = 512;

/// The manager and the socket of each detour path.
pub struct Detours {
    manager: DetourManager,
    /// Detour path → (its link's socket, the relay address:port it sends to).
    paths: [Option<(usize, SocketAddr)>; MAX_PATHS],
    /// The latest time the driver gave (for `release_all`, called without one).
    now: Instant,
}

impl Detours {
    /// A manager for the configured relays (and those the server will hand out) and links;
    /// None with `detours = 0`, or with a resolved server (`servers`: relays need a fixed
    /// one).
    pub fn new(
        s: &ClientSettings,
        key: StaticSecret,
        epoch_us: u64,
        seed: [u8; 32],
    ) -> Option<Self> {
        if s.detours == 0 || s.naming.is_some() {
            return None;
        }
        let relays = s.relays.iter().map(RelaySettings::spec).collect();
        let cfg = ManagerConfig::new(key, epoch_us, s.detours, s.links.len() as u8);
        let mut manager = DetourManager::new(cfg, relays, seed);
        for (i, l) in s.links.iter().enumerate() {
            manager.add_link(PathId(i as u8), &l.name, l.server);
        }
        Some(Detours {
            manager,
            paths: [None; MAX_PATHS],
            now: Instant::ZERO,
        })
    }

    /// The socket that sends path `path`'s datagrams.
    pub fn socket(&self, path: PathId) -> usize {
        self.paths
            .get(path.0 as usize)
            .copied()
            .flatten()
            .map_or(path.0 as usize, |p| p.0)
    }

    /// The path a datagram from `from` on socket `sock` belongs to.
    pub fn path_for(&self, sock: usize, from: SocketAddr) -> PathId {
        let hit = self.paths.iter().position(|p| *p == Some((sock, from)));
        PathId(hit.unwrap_or(sock) as u8)
    }

    /// Takes relay answers; true if `buf` was one.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        sock: usize,
        from: SocketAddr,
        buf: &[u8],
    ) -> bool {
        self.now = now;
        buf.first() == Some(&TYPE_ANSWER)
            && self
                .manager
                .handle_datagram(now, PathId(sock as u8), from, buf)
    }

    /// The next relay request, copied into `buf`.
    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<Outgoing> {
        let t = self.manager.poll_transmit()?;
        let len = t.data.len().min(buf.len());
        buf[..len].copy_from_slice(&t.data[..len]);
        Some(Outgoing {
            socket: t.link.0 as usize,
            dst: t.dst,
            len,
        })
    }

    /// Reports the session's paths, runs the manager's timers, applies its actions.
    pub fn handle_timeout(&mut self, now: Instant, client: &mut Client, names: &mut Vec<String>) {
        self.now = now;
        if let Some(list) = client.take_server_relays() {
            let names: Vec<&str> = list.iter().map(|r| r.name.as_str()).collect();
            tracing::info!(relays = ?names, "relay list from the server");
            self.manager.set_server_relays(now, list);
        }
        // No candidate (no relay of its own, none from the server yet): nothing to observe
        // — this runs at every timer of the client, relays or not.
        if self.manager.poll_timeout().is_some() {
            let obs: Vec<PathObs> = client
                .session()
                .paths()
                .map(|p| {
                    let v = p.view(now);
                    PathObs {
                        id: p.id(),
                        state: v.state,
                        min_rtt: v.measured.then_some(v.min_rtt),
                        rate_bps: v.bandwidth_bps,
                        // Probes keep ~100 bytes in flight on an idle path: not data.
                        busy: v.bw_valid && v.inflight_bytes > PROBE_INFLIGHT,
                        error_loss: v.error_loss,
                        delivered: p.delivered_bytes(),
                    }
                })
                .collect();
            self.manager.observe(now, &obs);
        }
        if self.manager.poll_timeout().is_some_and(|t| t <= now) {
            self.manager.handle_timeout(now);
        }
        self.apply(now, client, names);
    }

    /// Carries out the manager's actions.
    pub fn apply(&mut self, now: Instant, client: &mut Client, names: &mut Vec<String>) {
        while let Some(a) = self.manager.poll_action() {
            match a {
                ManagerAction::AddPath {
                    path,
                    link,
                    remote,
                    name,
                } => {
                    tracing::info!(path = path.0, %remote, name = %name, "detour path added");
                    self.paths[path.0 as usize] = Some((link.0 as usize, remote));
                    if names.len() <= path.0 as usize {
                        names.resize(path.0 as usize + 1, String::new());
                    }
                    names[path.0 as usize] = name;
                    client.add_link(now, path, remote);
                }
                ManagerAction::RemovePath { path } => {
                    tracing::info!(path = path.0, "detour path removed");
                    client.set_link_available(now, path, false);
                }
                ManagerAction::Standby { path, standby } => {
                    tracing::info!(path = path.0, standby, "path standby (shared bottleneck)");
                    client.set_link_standby(path, standby);
                }
            }
        }
    }

    /// When the manager has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.manager.poll_timeout()
    }

    /// Link `link`'s interface went up or down.
    pub fn set_link_up(&mut self, now: Instant, link: PathId, up: bool) {
        self.manager.set_link_up(now, link, up);
    }

    /// Releases every detour (shutdown; the requests go out at the next flush).
    pub fn release_all(&mut self) {
        self.manager.release_all(self.now);
    }

    /// The candidates and counters, for the status document.
    pub fn status(&self) -> Value {
        let c = self.manager.counters();
        let cands: Vec<Value> = self
            .manager
            .status()
            .into_iter()
            .map(|s| {
                json!({
                    "link": s.link, "relay": s.relay, "source": s.source.name(), "state": s.state,
                    "path": s.path.map(|p| p.0),
                    "rtt_ms": s.rtt.map(|r| r.as_secs_f64() * 1e3),
                    "rtt_from_path": s.rtt_from_path, "relay_port": s.relay_port,
                })
            })
            .collect();
        let relays: Vec<Value> = self
            .manager
            .relays()
            .into_iter()
            .map(|r| {
                json!({
                    "name": r.spec.name, "address": r.spec.address.to_string(),
                    "mode": r.spec.mode.name(), "source": r.source.name(), "leaving": r.leaving,
                })
            })
            .collect();
        json!({
            "relays": relays,
            "candidates": cands,
            "added": c.added, "retired_dead": c.retired_dead, "retired_relay": c.retired_relay,
            "retired_useless": c.retired_useless, "direct_standby": c.direct_standby,
            "swapped": c.swapped, "refused": c.refused,
        })
    }
}
