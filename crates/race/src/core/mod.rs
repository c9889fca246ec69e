//! The racing gateway's decisions (Rao's MultiNAT and AvMet), sans-IO.
//!
//! A gateway with several uplinks opens each new TCP connection over every uplink (or over
//! the ones its predictor names), keeps one and closes the rest. Everything that *decides*
//! lives here, driven with injected time and a seeded RNG, so the daemon
//! (`multihome race`), the offline replay of a fetch dataset and the tests run the very
//! same code:
//!
//! - [`avmet`]: the EWMA of which uplink connected first (the thesis §4.4), generalised to N.
//! - [`probe`]: an ETT-like metric per uplink from periodic probes (the thesis §2.2, §4.3.2),
//!   and the probe predictor's choice with hysteresis.
//! - [`stagger`]: Happy Eyeballs' handshake-time estimates learned from every attempt, and
//!   re-probing of stale uplinks.
//! - [`predictor`]: the five predictors (`race`, `avmet`, `static`, `probe`, `stagger`)
//!   turned into a [`Plan`] per connection: which uplinks to try, when, which one is
//!   preferred and how long a completion elsewhere is held back (the SYN-ACK delay queue).
//! - [`conn`]: one connection's race ([`Race`]): the thesis's reset rules (§3.1).
//! - [`gateway`]: many races: per-uplink counters, predictor state global or per
//!   destination, the bound on concurrent races, DSCP pins, probe schedule, and the uplink
//!   of each UDP flow (from the same predictor).
//! - [`nat`]: NAT mode's race: which SYN-ACK is forwarded to the client, which are held
//!   (the delay queue) or reset, when the client is refused.
//! - [`craft`]: the client's SYN copied with an uplink's address, the SYN-ACK readdressed to
//!   the client (checksums recomputed).
//! - [`hold`]: the client's SYN held while its connection is raced: which SYN starts a race,
//!   which is a retransmission to drop, which is let through or refused once decided.
//! - [`packet`]: the addresses, ports, DSCP and SYN flag of a queued packet.
//!
//! Invariants: no clock reads (every entry point takes `now`), no global RNG (the gateway
//! owns a ChaCha8 seeded by the driver), every table is bounded.

pub mod avmet;
pub mod conn;
pub mod craft;
pub mod gateway;
pub mod hold;
pub mod nat;
pub mod packet;
pub mod predictor;
pub mod probe;
pub mod stagger;

pub use conn::{Action, AttemptReport, AttemptState, Outcome, Race};
pub use gateway::{Gateway, GatewayConfig, GatewayStatus, Scope, UplinkCounters};
pub use hold::{Flow, SynHold, SynVerdict};
pub use packet::{classify, Classified, Transport};
pub use predictor::{Plan, Predictor, PredictorConfig};

/// Index of an uplink in the gateway's configuration (0-based, at most [`MAX_UPLINKS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UplinkId(pub u8);

impl UplinkId {
    /// The index as a `usize`, for slices.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Most uplinks one gateway races over (a race is a handful of sockets per connection).
pub const MAX_UPLINKS: usize = 8;

/// Errors of the racing core.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RaceError {
    /// Too many races at once; the caller should refuse or delay the new connection.
    #[error(
        "{limit} connections are being raced or relayed; new ones are refused until some finish"
    )]
    Busy {
        /// The configured bound.
        limit: usize,
    },
    /// A configuration value out of range.
    #[error("invalid race configuration: {0}")]
    Config(String),
}
