//! linkem: a userspace link emulator for a kernel without netem (Mahimahi's idea).
//!
//! It bridges Ethernet frames between two interfaces (normally veth peers of two network
//! namespaces) and applies, per direction: random loss (Bernoulli or Gilbert-Elliott), a
//! drop-tail queue (bytes and/or frames), a rate (constant or a looping Mahimahi trace), a
//! delay with jitter (no reordering unless asked), scheduled outages, and live changes
//! through a control socket.
//!
//! Layout: the impairment model is sans-IO and deterministic ([`pipeline::Pipeline`] with
//! injected time and a seeded RNG); [`config`] turns TOML into its parameters; [`control`]
//! parses control commands; [`bridge`] and [`server`] are the Linux I/O (AF_PACKET sockets,
//! precise sleeps, the Unix control socket); [`tracegen`] makes synthetic traces.

pub mod bridge;
pub mod config;
pub mod control;
pub mod delay;
pub mod loss;
pub mod outage;
pub mod pipeline;
pub mod queue;
pub mod rate;
pub mod server;
pub mod stats;
pub mod sys;
pub mod trace;
pub mod tracegen;
pub mod units;
pub mod wire;

pub use pipeline::{Change, DirectionParams, Pipeline, Verdict};
pub use stats::Stats;
pub use trace::Trace;
pub use tracegen::{generate as generate_trace, TraceKind};
