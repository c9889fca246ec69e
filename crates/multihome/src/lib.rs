//! The `multihome` binary's library: configuration, daemons, control socket, status,
//! metrics and the dashboard's view of the tunnel. It is a library so the config parser can be fuzzed and tested on
//! its own; `main.rs` is only the command line. The racing gateway (`multihome race`) is
//! the `multihome_race` crate, which `main.rs` calls.

pub mod check;
pub mod config;
pub mod daemon;
pub mod dashboard;
pub mod keyfile;
pub mod loadgen;
pub mod metrics;
pub mod reload;
pub mod resolve;
pub mod status;
pub mod status_text;

/// The control socket `multihome status` reads (shared by every daemon).
pub use multihome_runtime::control;
