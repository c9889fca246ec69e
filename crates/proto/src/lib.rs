//! multihome's sans-IO core.
//!
//! Everything that decides — wire format, handshake, sessions, per-path estimators,
//! schedulers, reorder and de-duplication, flow policies — lives here with no sockets, no
//! clock reads and no global RNG, so the daemon, the simulator and the tests drive the
//! very same code (the shape of quinn-proto). Inputs are `handle_*(now, …)`; outputs are
//! pulled with `poll_transmit`, `poll_deliver`, `poll_timeout` and `poll_event`.

pub mod codel;
pub mod crypto;
pub mod detour;
pub mod fq_codel;
pub mod header_compress;
pub mod replay;
pub mod time;
pub mod wire;

pub use time::Instant;
pub mod endpoint;
pub mod fec;
pub mod path;
pub mod policy;
pub mod reorder;
pub mod sched;
pub mod session;
pub mod stream;
