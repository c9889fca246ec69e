//! `multihome race`: a transparent gateway that races each new TCP connection over every
//! uplink and keeps the one its predictor picks (seed 000: MultiNAT, AvMet).
//!
//! LAN hosts only use the gateway as their default route. nftables diverts their TCP
//! connections to a transparent listener ([`setup`]); for each accepted connection the
//! sans-IO core (`proto::race`) plans attempts, one socket per uplink bound to that
//! uplink's device and address ([`attempt`]), decides by the seed's rules, the losers are
//! reset and the winner is relayed with splice(2) ([`splice`]). `--replay` runs the same
//! core offline over a recorded fetch dataset ([`replay`]) for the lab's evaluation.
//!
//! The client's own handshake is completed by the kernel before the race (TPROXY accepts
//! first): this kernel has no nftables `queue` statement (CONFIG_NFT_QUEUE is off) to hold
//! the SYN in userspace. So "refuse the client" is an RST on its freshly accepted
//! connection, before any byte is relayed: the client sees ECONNRESET, not ECONNREFUSED.

pub mod attempt;
pub mod config;
pub mod daemon;
pub mod replay;
pub mod setup;
pub mod splice;
pub mod status;

use anyhow::Result;
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
    let text = crate::config::read_file(path)?;
    let src = crate::config::Source { path, text: &text };
    Ok(config::validate(&src)?)
}

/// `multihome race`.
pub fn run(args: RaceArgs) -> Result<()> {
    let settings = load(&args.config)?;
    match args.replay {
        Some(dataset) => replay::run(&settings, &dataset),
        None => daemon::run(settings),
    }
}
