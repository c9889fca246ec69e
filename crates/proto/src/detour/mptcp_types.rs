//! Public types of the kernel-MPTCP detour manager (`mptcp.rs`): its settings, which
//! connections it serves, the actions it hands the daemon, and its status and counters.

use crate::crypto::StaticSecret;
use ipnet::IpNet;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// One detour's identity (stable for its life; never reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DetourId(pub u64);

/// A server (prefix, optionally one port) whose MPTCP connections get detours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// Server addresses.
    pub net: IpNet,
    /// Server port (any if None).
    pub port: Option<u16>,
}

impl Target {
    /// Whether a connection to `remote` is covered.
    pub fn matches(&self, remote: SocketAddr) -> bool {
        self.net.contains(&remote.ip()) && self.port.is_none_or(|p| p == remote.port())
    }
}

/// Settings of the MPTCP detour manager.
#[derive(Debug, Clone)]
pub struct MptcpConfig {
    /// Our static key (the one relays list).
    pub local_key: StaticSecret,
    /// Wall-clock µs at `Instant::ZERO` (request timestamps).
    pub wall_origin_us: u64,
    /// Detour subflows per connection at most (N; one per relay).
    pub detours: usize,
    /// Servers whose connections get detours; empty: every outgoing connection.
    pub targets: Vec<Target>,
    /// Connections served at once at most (more get no detours).
    pub max_connections: usize,
    /// Each relay with detours is checked (a renewal) this often: its death is noticed
    /// within `check_interval` + the request timeout (4 attempts 1 s apart).
    pub check_interval: Duration,
    /// A created subflow must be established within this, else it is removed.
    pub join_timeout: Duration,
    /// A relay that stopped answering is not asked again for this long.
    pub backoff: Duration,
    /// Failed detours of one (connection, relay) before that relay is not tried again for
    /// the connection.
    pub max_failures: u32,
}

impl MptcpConfig {
    /// Defaults: N = 2 (Brennan's), every connection, 1024 connections, checks every 5 s,
    /// joins within 5 s, dead relays rested 30 s, 2 failures per connection and relay.
    pub fn new(local_key: StaticSecret, wall_origin_us: u64) -> Self {
        MptcpConfig {
            local_key,
            wall_origin_us,
            detours: 2,
            targets: Vec::new(),
            max_connections: 1024,
            check_interval: Duration::from_secs(5),
            join_timeout: Duration::from_secs(5),
            backoff: Duration::from_secs(30),
            max_failures: 2,
        }
    }
}

/// What the daemon must do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MptcpAction {
    /// Bind a UDP socket for detour `id` to (`ip`, a free port whose TCP port is free too)
    /// and report it with `opened`.
    Open {
        /// The detour.
        id: DetourId,
        /// The connection's local address.
        ip: IpAddr,
    },
    /// Send `data` to `dst` from detour `id`'s socket (a relay request).
    Send {
        /// The detour.
        id: DetourId,
        /// The relay's request address.
        dst: SocketAddr,
        /// The datagram.
        data: Vec<u8>,
    },
    /// Close detour `id`'s socket.
    Close {
        /// The detour.
        id: DetourId,
    },
    /// `MPTCP_PM_CMD_SUBFLOW_CREATE`; a refusal is reported with `create_failed`.
    CreateSubflow {
        /// The detour.
        id: DetourId,
        /// The connection.
        token: u32,
        /// Local address id (unique in the connection).
        local_id: u8,
        /// Local address and port (the detour socket's).
        local: SocketAddr,
        /// relay address : relay port.
        remote: SocketAddr,
    },
    /// `MPTCP_PM_CMD_SUBFLOW_DESTROY`.
    DestroySubflow {
        /// The connection.
        token: u32,
        /// Local address and port.
        local: SocketAddr,
        /// relay address : relay port.
        remote: SocketAddr,
    },
}

/// One detour as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetourStatus {
    /// The connection's token.
    pub token: u32,
    /// The connection's server.
    pub server: SocketAddr,
    /// Relay name.
    pub relay: String,
    /// opening / asking / joining / up / releasing.
    pub state: &'static str,
    /// Local address and port, once bound.
    pub local: Option<SocketAddr>,
    /// The relay port, once granted.
    pub relay_port: Option<u16>,
}

/// One relay as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayStatus {
    /// Name.
    pub name: String,
    /// Request address.
    pub address: SocketAddr,
    /// Request round trip of the latest answer.
    pub rtt: Option<Duration>,
    /// Not asked (it stopped answering) until this long from now.
    pub resting_for: Option<Duration>,
}

/// Counters of the manager.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MptcpCounters {
    /// Client-side connections established (events seen).
    pub connections: u64,
    /// Of these, the ones served (a target, under `max_connections`).
    pub connections_served: u64,
    /// Detours started (a socket, then a request).
    pub detours_started: u64,
    /// Subflows created (SUBFLOW_CREATE issued).
    pub subflows_created: u64,
    /// Subflows that joined (SUB_ESTABLISHED).
    pub subflows_joined: u64,
    /// Subflows removed by us (SUBFLOW_DESTROY issued).
    pub subflows_removed: u64,
    /// Detour subflows the kernel reported closed.
    pub subflows_closed: u64,
    /// Relays found dead (a request unanswered).
    pub relays_dead: u64,
    /// Requests refused by a relay (any status but ok).
    pub refused: u64,
    /// Failed detours (socket, refusal, join, closed subflow).
    pub failures: u64,
    /// The relay saw another source than our socket (a NAT in between): unusable.
    pub nat_in_path: u64,
}
