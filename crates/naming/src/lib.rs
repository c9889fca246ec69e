//! multihome's name resolution (MobilityFirst's GNRS, for one deployment): identities
//! resolved to the server they are attached through, their addresses and policy; servers
//! resolved to their addresses, key and load.
//!
//! Sans-IO (no sockets, no clock, no RNG): [`record`] (the two kinds of record and their
//! encoding), [`sign`] (signatures by the X25519 key that names a record), [`signed`]
//! (admission: what is refused and why), [`cache`] (a shared store's records kept in
//! memory from its change feed), [`message`] (resolver requests over UDP),
//! [`select`] (which server a client uses), [`resolver`] (the client's state machine).
//! With I/O: [`store`] (embedded redb and etcd behind one trait) and [`service`] (the
//! server's resolver: UDP requests answered from a store, its own record kept fresh),
//! [`load`] (a load generator for the benchmark). The `etcd` feature (default) brings the etcd
//! store and [`load`].
//! Reference: PROTOCOL.md §17, ARCHITECTURE.md, CONFIG.md `[naming]`.

pub mod cache;
#[cfg(feature = "etcd")]
pub mod load;
pub mod message;
pub mod record;
pub mod resolver;
pub mod select;
pub mod service;
pub mod sign;
pub mod signed;
pub mod store;

pub use record::{Body, IdentityBody, Kind, LinkAddr, Record, ServerBody};
pub use signed::{admit, Refusal, RefusalCounts, SignedRecord};
