//! multihome's racing gateway (`multihome race`, seed 000: MultiNAT / AvMet): a LAN gateway
//! with several uplinks races each new TCP connection over every uplink (or the ones its
//! predictor names), keeps the best and resets the others; each new UDP flow gets one
//! uplink from the same predictor. It needs no server and shares no state with the tunnel.
//!
//! - [`core`]: everything that *decides* (predictors, one connection's race, the gateway's
//!   many races, the held-SYN table, the queued packet's parser), sans-IO. Invariants: no
//!   sockets, no clock reads (every entry point takes `now`), no global RNG (the gateway
//!   owns a ChaCha8 seeded by its driver), every table bounded. The daemon, the offline
//!   replay and the tests therefore run the very same decisions.
//! - [`daemon`]: the Linux side that only carries the core's actions out: NFQUEUE (held
//!   SYNs, UDP marks), TPROXY listener, per-uplink connects, splice(2) relay, iptables /
//!   nftables / policy routing set-up and tear-down, the control socket's status.
//!
//! Dependencies point one way: `daemon` → `core` → `multihome_proto::Instant` (the
//! workspace's injected time; nothing else of the tunnel's core is used). The `multihome`
//! binary only parses its `race` subcommand ([`daemon::RaceArgs`]) and calls
//! [`daemon::run`]; `multihome status` renders a race document with
//! [`daemon::status::render`].

pub mod core;
pub mod daemon;
