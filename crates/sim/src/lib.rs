//! multihome-sim: a deterministic discrete-event simulator that drives multihome's real
//! sans-IO core (`multihome_proto::endpoint::{Client, Server}`) over simulated multi-hop links.
//!
//! Layout: `scenario` (TOML schema) and `sweep` (axes, shards) describe runs; `world`
//! builds and runs one (endpoints, linkem hop chains, apps, event loop) and reports it;
//! `traffic`, `tcp` (with `cubic`) and `packet` are the applications and their inner
//! packets; `stats` holds the metrics (reorder density and occupancy from Mukherjee,
//! "Network-Assisted Multihoming", Jain's
//! index);
//! `drive` turns a drive past Wi-Fi access points into link events (issue 16), and
//! `handoff` measures a constant-rate stream around each of its outages;
//! `runner` runs sweeps on all cores and writes results; `bench` measures speed.
//!
//! Invariants: a run is a pure function of (scenario, seed) — the same seed gives the
//! same report bytes; nothing here re-implements the core: links are linkem's pipelines
//! and the tunnel is `multihome_proto` itself.

pub mod bench;
pub mod cubic;
pub mod drive;
pub mod events;
pub mod handoff;
pub mod packet;
pub mod runner;
pub mod scenario;
pub mod stats;
pub mod sweep;
pub mod tcp;
pub mod traffic;
pub mod world;
