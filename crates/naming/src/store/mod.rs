//! Where records live: one trait, an embedded store for one server and etcd for several.
//!
//! Role: [`RecordStore`] stores signed records under `(kind, name)` and gives them back.
//! Both implementations admit every record (`signed::admit`) before storing it, replace a
//! stored record only with a higher sequence number (`signed::supersedes`, checked inside
//! the store's own transaction, so two servers racing cannot store an older record last),
//! and never return an expired record: a dead attachment vanishes when its lease ends, and
//! `sweep` (embedded) or the etcd lease removes it from the database.
//!
//! What a read sees: a record put through a handle is found through that handle as soon
//! as the put returned. Through another handle on the same records (another server on the
//! same etcd cluster) it is found once that handle's copy caught up — etcd reads come from
//! a cache the cluster's watch keeps current (`etcd.rs`, `crate::cache`), milliseconds
//! behind. The embedded store has one handle per file, so it is found at once.
//!
//! The same test suite runs against both (`tests/stores.rs`).

pub mod embedded;
#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(feature = "etcd")]
mod etcd_feed;

use crate::cache::CacheStats;
use crate::record::Kind;
use crate::signed::{Refusal, RefusalCounts, SignedRecord};
use multihome_proto::crypto::SessionId;
use std::fmt::Write as _;
use std::sync::Mutex;

pub use embedded::EmbeddedStore;
#[cfg(feature = "etcd")]
pub use etcd::EtcdStore;

/// A store's failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The record was refused (and counted).
    #[error("refused: {0}")]
    Refused(#[from] Refusal),
    /// The database failed or could not be reached.
    #[error("store: {0}")]
    Backend(String),
}

/// Reads of a store, answered at once from any thread: never a round trip, never behind a
/// write (embedded: a snapshot of the file; etcd: the watched copy). The resolver answers
/// lookups with one on a thread of their own (`service.rs`).
pub trait RecordReader: Send + Sync {
    /// The live record of `kind` named `name` at `now_ms`.
    fn get(
        &self,
        kind: Kind,
        name: SessionId,
        now_ms: u64,
    ) -> Result<Option<SignedRecord>, StoreError>;
    /// Every live record of `kind` at `now_ms`.
    fn list(&self, kind: Kind, now_ms: u64) -> Result<Vec<SignedRecord>, StoreError>;
}

/// Records by kind and name.
///
/// `async fn` in a public trait gives futures without a `Send` bound; every caller here
/// runs them on a current-thread runtime, so none needs one.
#[allow(async_fn_in_trait)]
pub trait RecordStore {
    /// Admits `bytes` at `now_ms` (Unix ms) and stores it if it supersedes the stored one.
    async fn put(&self, bytes: &[u8], now_ms: u64) -> Result<SignedRecord, StoreError>;
    /// The store's reader (shared: every call gives the same one).
    fn reader(&self) -> std::sync::Arc<dyn RecordReader>;
    /// The live record of `kind` named `name` (the reader's answer).
    async fn get(
        &self,
        kind: Kind,
        name: SessionId,
        now_ms: u64,
    ) -> Result<Option<SignedRecord>, StoreError> {
        self.reader().get(kind, name, now_ms)
    }
    /// Every live record of `kind` (the reader's answer).
    async fn list(&self, kind: Kind, now_ms: u64) -> Result<Vec<SignedRecord>, StoreError> {
        self.reader().list(kind, now_ms)
    }
    /// Records refused when put, so far, by reason.
    fn refusals(&self) -> RefusalCounts;
    /// What status shows of the store.
    fn stats(&self) -> StoreStats {
        StoreStats {
            refused: self.refusals(),
            ..StoreStats::default()
        }
    }
}

/// A store's counters for status and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Records refused when put (publishes), by reason.
    pub refused: RefusalCounts,
    /// Records found in a shared store that fail its checks (written there by someone
    /// else: forged, replayed, misplaced), by reason; never served.
    pub refused_in_store: RefusalCounts,
    /// The watched copy's counters (etcd).
    pub cache: Option<CacheStats>,
    /// Is the watch open (etcd)?
    pub feed_up: Option<bool>,
}

/// The database key of a record: `mh/1/<i|s>/<32 hex digits>`.
pub fn key(kind: Kind, name: SessionId) -> String {
    let mut k = prefix(kind);
    for b in name.0 {
        let _ = write!(k, "{b:02x}");
    }
    k
}

/// The common prefix of one kind's keys.
pub fn prefix(kind: Kind) -> String {
    match kind {
        Kind::Identity => "mh/1/i/".into(),
        Kind::Server => "mh/1/s/".into(),
    }
}

/// Refusal counting shared by the implementations.
#[derive(Debug, Default)]
pub(crate) struct Counter(Mutex<RefusalCounts>);

impl Counter {
    /// Counts `r` if it is a refusal, and passes it on.
    pub(crate) fn check<T>(&self, r: Result<T, Refusal>) -> Result<T, StoreError> {
        r.map_err(|e| {
            self.0.lock().expect("never poisoned").count(e);
            StoreError::Refused(e)
        })
    }

    pub(crate) fn get(&self) -> RefusalCounts {
        *self.0.lock().expect("never poisoned")
    }
}

/// A stored value of a file only this store writes (after admission): decoded and checked
/// for name, kind and lease, without verifying the signature again (half a lookup's CPU).
pub(crate) fn read_local(
    bytes: &[u8],
    kind: Kind,
    name: Option<SessionId>,
    now_ms: u64,
) -> Option<SignedRecord> {
    let r = decode_local(bytes)?;
    let ok = r.kind() == kind && name.is_none_or(|n| r.name() == n) && r.expires_ms > now_ms;
    ok.then(|| SignedRecord::trusted(bytes.to_vec(), r))
}

/// The record in stored bytes, signature not checked.
pub(crate) fn decode_local(bytes: &[u8]) -> Option<crate::record::Record> {
    let body = bytes.len().checked_sub(crate::sign::SIG_LEN)?;
    crate::record::Record::decode_unsigned(&bytes[..body]).ok()
}

/// Either store, chosen by configuration.
pub enum Store {
    /// redb on disk.
    Embedded(EmbeddedStore),
    /// An etcd cluster (boxed: its client is large).
    #[cfg(feature = "etcd")]
    Etcd(Box<EtcdStore>),
}

impl RecordStore for Store {
    async fn put(&self, bytes: &[u8], now_ms: u64) -> Result<SignedRecord, StoreError> {
        match self {
            Store::Embedded(s) => s.put(bytes, now_ms).await,
            #[cfg(feature = "etcd")]
            Store::Etcd(s) => s.put(bytes, now_ms).await,
        }
    }

    fn reader(&self) -> std::sync::Arc<dyn RecordReader> {
        match self {
            Store::Embedded(s) => s.reader(),
            #[cfg(feature = "etcd")]
            Store::Etcd(s) => s.reader(),
        }
    }

    fn refusals(&self) -> RefusalCounts {
        match self {
            Store::Embedded(s) => s.refusals(),
            #[cfg(feature = "etcd")]
            Store::Etcd(s) => s.refusals(),
        }
    }

    fn stats(&self) -> StoreStats {
        match self {
            Store::Embedded(s) => s.stats(),
            #[cfg(feature = "etcd")]
            Store::Etcd(s) => s.stats(),
        }
    }
}
