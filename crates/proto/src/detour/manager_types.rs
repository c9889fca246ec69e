//! The path manager's public types: its settings, the relays it may use, the actions and
//! datagrams it hands the daemon, the path observations it takes, and its status and
//! counters. The decisions are in `manager.rs`.

use super::wire::Mode;
use crate::crypto::{PublicKey, StaticSecret};
use crate::path::{PathId, PathState};
use std::net::SocketAddr;
use std::time::Duration;

/// The manager re-evaluates at least this often.
pub const TICK: Duration = Duration::from_millis(500);

/// A relay the client may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelaySpec {
    /// Name for status and path names ("LINK via RELAY").
    pub name: String,
    /// The relay's request address.
    pub address: SocketAddr,
    /// The relay's static public key.
    pub key: PublicKey,
    /// NAT (kernel) or tunnel (userspace) forwarding.
    pub mode: Mode,
}

/// Settings of the manager.
#[derive(Debug, Clone)]
pub struct ManagerConfig {
    /// Our static key (the one relays list).
    pub local_key: StaticSecret,
    /// Wall-clock µs at `Instant::ZERO` (request timestamps).
    pub wall_origin_us: u64,
    /// Detour paths in use at most (N).
    pub detours: usize,
    /// First `PathId` for detour paths (the number of links).
    pub first_slot: u8,
    /// Answers awaited this long after a probe round before choosing.
    pub probe_window: Duration,
    /// A path Down this long is retired.
    pub dead_after: Duration,
    /// A failed candidate waits this long.
    pub backoff: Duration,
    /// Both busy this long before a detour is judged useless.
    pub useless_after: Duration,
    /// Gain over the direct path below which a detour is useless.
    pub useless_gain: f64,
    /// A useless candidate waits this long.
    pub useless_backoff: Duration,
    /// A path is in use at least this long before it is swapped for a better one.
    pub min_hold: Duration,
    /// Waiting candidates are probed again this often.
    pub reprobe: Duration,
    /// A relay the server stopped listing keeps its paths at most this long (until others
    /// replace them).
    pub leave_after: Duration,
}

impl ManagerConfig {
    /// Defaults: detours found in 1 s, dead after 10 s Down, retried after 60 s, useless
    /// after 5 s below +10 % (retried after 10 min), swaps after 30 s, reprobes every 5 min,
    /// paths through a relay the server no longer lists kept at most 10 s.
    pub fn new(local_key: StaticSecret, wall_origin_us: u64, detours: usize, links: u8) -> Self {
        ManagerConfig {
            local_key,
            wall_origin_us,
            detours,
            first_slot: links,
            probe_window: Duration::from_secs(1),
            dead_after: Duration::from_secs(10),
            backoff: Duration::from_secs(60),
            useless_after: Duration::from_secs(5),
            useless_gain: 0.10,
            useless_backoff: Duration::from_secs(600),
            min_hold: Duration::from_secs(30),
            reprobe: Duration::from_secs(300),
            leave_after: Duration::from_secs(10),
        }
    }
}

/// What the daemon must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Add (or re-point) path `path`: datagrams to `remote`, from link `link`'s socket.
    AddPath {
        /// The detour's path id.
        path: PathId,
        /// The link whose socket carries it.
        link: PathId,
        /// relay address:port.
        remote: SocketAddr,
        /// "LINK via RELAY".
        name: String,
    },
    /// Stop using path `path` (its in-flight data goes to the other paths).
    RemovePath {
        /// The detour's path id.
        path: PathId,
    },
    /// Put path `path` on standby, or take it off standby: a direct path whose detour
    /// shares its bottleneck and loses less (or may: a trial while the detour is measured
    /// alone). A standby path stays live and carries data only while no other path is `Up`.
    Standby {
        /// The direct path (a link).
        path: PathId,
        /// On or off.
        standby: bool,
    },
}

/// A request datagram: send `data` to `dst` from link `link`'s socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The link whose socket sends it.
    pub link: PathId,
    /// The relay's request address.
    pub dst: SocketAddr,
    /// The datagram.
    pub data: Vec<u8>,
}

/// What the manager needs to know of one path of the session.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PathObs {
    /// Which path.
    pub id: PathId,
    /// Liveness.
    pub state: PathState,
    /// Minimum RTT, if measured.
    pub min_rtt: Option<Duration>,
    /// Delivery-rate estimate, bytes/s.
    pub rate_bps: f64,
    /// Whether the path is busy (rate measured while not application-limited).
    pub busy: bool,
    /// Recent rate of losses judged transmission errors, 0..=1.
    pub error_loss: f64,
    /// Bytes the peer has reported delivered on the path, in all.
    pub delivered: u64,
}

/// Where a relay came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelaySource {
    /// The client's own `[[relay]]`.
    Config,
    /// The server's list (docs/PROTOCOL.md §15.7).
    Server,
}

impl RelaySource {
    /// `config` or `server`, as `status` shows it.
    pub fn name(self) -> &'static str {
        match self {
            RelaySource::Config => "config",
            RelaySource::Server => "server",
        }
    }
}

/// One relay as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayListing {
    /// The relay.
    pub spec: RelaySpec,
    /// Where it came from.
    pub source: RelaySource,
    /// The server no longer lists it: its paths go once replaced.
    pub leaving: bool,
}

/// One candidate as `status` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct CandidateStatus {
    /// Link name.
    pub link: String,
    /// Relay name.
    pub relay: String,
    /// Where the relay came from.
    pub source: RelaySource,
    /// idle / asking / held / active / backoff.
    pub state: &'static str,
    /// The path id while active.
    pub path: Option<PathId>,
    /// The RTT estimate.
    pub rtt: Option<Duration>,
    /// Whether the estimate is the path's own.
    pub rtt_from_path: bool,
    /// The relay port while held or active.
    pub relay_port: Option<u16>,
}

/// Counters of the manager.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ManagerCounters {
    /// Detour paths added.
    pub added: u64,
    /// Retired because the path was Down for `dead_after`.
    pub retired_dead: u64,
    /// Retired because a renewal failed or went unanswered.
    pub retired_relay: u64,
    /// Retired as useless (shared bottleneck).
    pub retired_useless: u64,
    /// Direct paths put on standby for a detour sharing their bottleneck that loses less.
    pub direct_standby: u64,
    /// Retired for a better candidate.
    pub swapped: u64,
    /// Requests refused or unanswered.
    pub refused: u64,
}
