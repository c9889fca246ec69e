//! The embedded store: records in one redb file on the server's disk.
//!
//! Role: the default for a single server — no other process to run, records survive a
//! restart (every `put` commits durably before it is acknowledged). redb is a pure-Rust,
//! ACID, copy-on-write B-tree; one write transaction at a time, so the read-compare-write of
//! a `put` is atomic without further locking.
//!
//! Invariant: what is stored was admitted and superseded what was there, inside one write
//! transaction; a refused `put` aborts its transaction (dropped uncommitted).

use super::{key, prefix, read_back, Counter, RecordStore, StoreError};
use crate::record::Kind;
use crate::signed::{admit, supersedes, verify, RefusalCounts, SignedRecord};
use multihome_proto::crypto::SessionId;
use redb::{Database, ReadableTable, TableDefinition};
use std::path::Path;

const RECORDS: TableDefinition<&str, &[u8]> = TableDefinition::new("records");

/// Records in a redb file.
pub struct EmbeddedStore {
    db: Database,
    counter: Counter,
}

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

impl EmbeddedStore {
    /// Opens `path`, creating the file and its table if needed.
    pub fn open(path: &Path) -> Result<EmbeddedStore, StoreError> {
        let db = Database::create(path).map_err(backend)?;
        let tx = db.begin_write().map_err(backend)?;
        tx.open_table(RECORDS).map_err(backend)?;
        tx.commit().map_err(backend)?;
        Ok(EmbeddedStore {
            db,
            counter: Counter::default(),
        })
    }

    /// Deletes expired records; returns how many.
    pub fn sweep(&self, now_ms: u64) -> Result<usize, StoreError> {
        let tx = self.db.begin_write().map_err(backend)?;
        let mut n = 0;
        {
            let mut t = tx.open_table(RECORDS).map_err(backend)?;
            t.retain(|_, v| {
                let keep = verify(v).is_ok_and(|r| r.expires_ms > now_ms);
                n += usize::from(!keep);
                keep
            })
            .map_err(backend)?;
        }
        tx.commit().map_err(backend)?;
        Ok(n)
    }
}

impl RecordStore for EmbeddedStore {
    async fn put(&self, bytes: &[u8], now_ms: u64) -> Result<SignedRecord, StoreError> {
        let rec = self.counter.check(admit(bytes, now_ms))?;
        let k = key(rec.kind(), rec.name());
        let tx = self.db.begin_write().map_err(backend)?;
        {
            let mut t = tx.open_table(RECORDS).map_err(backend)?;
            let old = t
                .get(k.as_str())
                .map_err(backend)?
                .and_then(|v| verify(v.value()).ok());
            self.counter.check(supersedes(rec.record(), old.as_ref()))?;
            t.insert(k.as_str(), rec.bytes()).map_err(backend)?;
        }
        tx.commit().map_err(backend)?;
        Ok(rec)
    }

    async fn get(
        &self,
        kind: Kind,
        name: SessionId,
        now_ms: u64,
    ) -> Result<Option<SignedRecord>, StoreError> {
        let tx = self.db.begin_read().map_err(backend)?;
        let t = tx.open_table(RECORDS).map_err(backend)?;
        let v = t.get(key(kind, name).as_str()).map_err(backend)?;
        Ok(v.and_then(|v| read_back(v.value(), kind, Some(name), now_ms)))
    }

    async fn list(&self, kind: Kind, now_ms: u64) -> Result<Vec<SignedRecord>, StoreError> {
        let tx = self.db.begin_read().map_err(backend)?;
        let t = tx.open_table(RECORDS).map_err(backend)?;
        let p = prefix(kind);
        let mut out = Vec::new();
        for e in t.range(p.as_str()..).map_err(backend)? {
            let (k, v) = e.map_err(backend)?;
            if !k.value().starts_with(&p) {
                break;
            }
            out.extend(read_back(v.value(), kind, None, now_ms));
        }
        Ok(out)
    }

    fn refusals(&self) -> RefusalCounts {
        self.counter.get()
    }
}
