//! What every multihome daemon stands on — the tunnel's client and server, the racing
//! gateway and the relay alike — so each daemon crate holds only its own role.
//!
//! - [`clock`]: the monotonic clock mapped to the sans-IO core's injected `Instant`, and the
//!   OS seed of a core's RNG;
//! - [`rt`]: the current-thread tokio runtime (one thread owns the core: no locks) and the
//!   shutdown signal;
//! - [`control`]: the control socket `multihome status` reads;
//! - [`http`]: the one small HTTP server (Prometheus metrics, the dashboard);
//! - [`prometheus`]: the metrics' text format, which each role fills from its document;
//! - [`dashboard`]: the web dashboard and JSON API, and the history of samples and events
//!   behind them;
//! - [`config`]: configuration files read as TOML, with every error located by file and
//!   line and given a fix.
//!
//! Invariants: nothing here decides anything about traffic; the clock never goes backwards;
//! the control socket is readable by root only; nothing served over HTTP changes state.

pub mod clock;
pub mod config;
pub mod control;
pub mod dashboard;
pub mod http;
pub mod prometheus;
pub mod rt;

pub use clock::{os_seed, Clock};
pub use rt::{block_on, shutdown_signal};
