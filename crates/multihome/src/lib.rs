//! The `multihome` binary's library: configuration, daemons, control socket, status,
//! metrics and the dashboard's view of the tunnel. It is a library so the config parser can be fuzzed and tested on
//! its own; `main.rs` is only the command line. The racing gateway (`multihome race`) is
//! the `multihome_race` crate, which `main.rs` calls.

//!
//! The `daemon` feature (default) brings everything but the configuration parser and
//! checker ([`config`], [`check`], [`keyfile`]): the fuzz crate turns it off so it does not
//! compile the daemons and etcd's client.

pub mod check;
pub mod config;
#[cfg(feature = "daemon")]
pub mod daemon;
#[cfg(feature = "daemon")]
pub mod dashboard;
pub mod keyfile;
#[cfg(feature = "daemon")]
pub mod loadgen;
#[cfg(feature = "daemon")]
pub mod metrics;
#[cfg(feature = "daemon")]
pub mod reload;
#[cfg(feature = "daemon")]
pub mod resolve;
#[cfg(feature = "daemon")]
pub mod status;
#[cfg(feature = "daemon")]
pub mod status_text;

/// The control socket `multihome status` reads (shared by every daemon).
pub use multihome_runtime::control;
