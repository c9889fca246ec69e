//! `multihome race`: a transparent gateway that races each new TCP connection over every
//! uplink and keeps the one its predictor picks (Rao's MultiNAT and AvMet).
//!
//! LAN hosts only use the gateway as their default route. Each new connection's SYN is
//! held in a netfilter queue ([`nfqueue`], fed by an iptables NFQUEUE rule: this kernel has
//! no nftables `queue` statement) while the sans-IO core ([`crate::core`]) plans attempts, one
//! socket per uplink bound to that uplink's device and address ([`attempt`]), and decides
//! by the thesis's rules ([`held`]). The losers are reset; the client's SYN is then let
//! through to a transparent listener (nftables TPROXY, [`setup`]) and its connection is
//! relayed over the winner with splice(2) ([`splice`]) — or, when every uplink refused or
//! timed out, the SYN is answered with an RST, so the client's connect() fails with
//! ECONNREFUSED, as if it had tried the destination itself. New UDP flows get one uplink
//! each from the same predictor (a mark, conntrack, policy routing). `--replay` runs the
//! same core offline over a recorded fetch dataset ([`replay`]) for the lab's evaluation.
//!
//! In NAT mode (`mode = "nat"`, [`nat`]) the client's own SYN is copied out on every uplink
//! instead, the first SYN-ACK passed back, the others reset, and the connection handed to
//! the kernel's NAT: no relay.
//!
//! Dependencies among the modules point one way (no module imports one above it):
//!
//! ```text
//! event_loop                      owns the state, starts the tasks, answers the control socket
//!   ├─> held                      the queue side: holds SYNs, gives verdicts, marks UDP flows
//!   │     ├─> nat                 NAT mode: SYN copies, answers, hand-over to kernel NAT
//!   │     └─> drive               one race over sockets, the relay of its winner
//!   ├─> status                    reads the state into the status document
//!   ├─> metrics                   the document as Prometheus metrics (dashboard /metrics)
//!   └─> drive
//! held, drive, status ─> state    the shared types: Shared, Held, Slot
//! state ─> config, setup, nfqueue
//! attempt ─> setup ─> config;   replay ─> config (offline, virtual time)
//! ```
//!
//! The runtime, clock, control socket and located config errors are those of every
//! multihome daemon (`multihome_runtime`).
//!
//! [`state`] holds what the tasks share ([`state::Shared`], [`state::Held`],
//! [`state::Slot`]); [`event_loop`] creates and owns it; [`held`] (the queue side) and the
//! accept loop carry races out with [`drive`]; [`status`] only reads it.

pub mod attempt;
pub mod config;
pub mod drive;
pub mod event_loop;
pub mod held;
pub mod metrics;
pub mod nat;
pub mod nfqueue;
pub mod replay;
pub mod setup;
pub mod splice;
pub mod state;
pub mod status;

use anyhow::Result;
use multihome_runtime::config::{read_file, Source};
use std::path::PathBuf;

/// Arguments of `multihome race`.
#[derive(Debug, clap::Args)]
pub struct RaceArgs {
    /// Path of race.toml.
    #[arg(long)]
    pub config: PathBuf,
    /// Instead of running the gateway, replay a fetch dataset (JSON lines, from
    /// lab/race/fetch.py) through the configured predictor in virtual time and print one
    /// JSON line per object: the uplink used and the resulting download time.
    #[arg(long, value_name = "DATASET")]
    pub replay: Option<PathBuf>,
}

/// Loads and validates the configuration.
pub fn load(path: &std::path::Path) -> Result<config::RaceSettings> {
    let text = read_file(path)?;
    let src = Source { path, text: &text };
    Ok(config::validate(&src)?)
}

/// `multihome race`.
pub fn run(args: RaceArgs) -> Result<()> {
    let settings = load(&args.config)?;
    match args.replay {
        Some(dataset) => replay::run(&settings, &dataset),
        None => event_loop::run(settings),
    }
}
