//! The embedded store: records in one redb file on the server's disk.
//!
//! Role: the default for a single server — no other process to run, records survive a
//! restart (every `put` commits durably before it is acknowledged). redb is a pure-Rust,
//! ACID, copy-on-write B-tree with one write transaction at a time, so the
//! read-compare-write of a `put` is atomic without further locking.
//!
//! Group commit: a durable commit costs an fsync (milliseconds), which would cap one
//! transaction per record at a few hundred records per second and stall the caller's
//! thread. So `put` hands its admitted record to a writer thread and awaits the answer; the
//! writer takes every record waiting (up to [`BATCH`]), checks and inserts each in one write
//! transaction, commits once and then answers them all. Lookups read a snapshot on the
//! caller's thread and never wait for the writer.
//!
//! Reads do not verify signatures again: only this store writes the file, after admission
//! (a file edited behind its back is outside the threat model; etcd, shared by servers,
//! does re-verify).
//!
//! Invariant: what is stored was admitted and superseded what was there (checked inside
//! the write transaction, against records of the same batch too); nothing is acknowledged
//! before its transaction committed.

use super::{
    decode_local, key, prefix, read_local, Counter, RecordReader, RecordStore, StoreError,
};
use crate::record::Kind;
use crate::signed::{admit, supersedes, verify, RefusalCounts, SignedRecord};
use multihome_proto::crypto::SessionId;
use redb::{Database, ReadableTable, TableDefinition};
use std::path::Path;
use std::sync::mpsc;
use std::sync::Arc;
use tokio::sync::oneshot;

const RECORDS: TableDefinition<&str, &[u8]> = TableDefinition::new("records");

/// Records committed in one transaction at most.
pub const BATCH: usize = 512;

type Reply = oneshot::Sender<Result<SignedRecord, StoreError>>;

/// Records in a redb file.
pub struct EmbeddedStore {
    db: Arc<Database>,
    reader: Arc<EmbeddedReader>,
    counter: Arc<Counter>,
    writer: Option<mpsc::Sender<(SignedRecord, Reply)>>,
    thread: Option<std::thread::JoinHandle<()>>,
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
        let (db, counter) = (Arc::new(db), Arc::new(Counter::default()));
        let (writer, jobs) = mpsc::channel();
        let (d, c) = (db.clone(), counter.clone());
        let thread = std::thread::Builder::new()
            .name("naming-store".into())
            .spawn(move || write_loop(&d, &c, &jobs))
            .map_err(backend)?;
        Ok(EmbeddedStore {
            reader: Arc::new(EmbeddedReader { db: db.clone() }),
            db,
            counter,
            writer: Some(writer),
            thread: Some(thread),
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

impl Drop for EmbeddedStore {
    /// Stops the writer (after what it holds) and waits, so the file is closed on return.
    fn drop(&mut self) {
        self.writer.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The writer thread: batches of waiting records, one commit each.
fn write_loop(db: &Database, counter: &Counter, jobs: &mpsc::Receiver<(SignedRecord, Reply)>) {
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match jobs.try_recv() {
                Ok(j) => batch.push(j),
                Err(_) => break,
            }
        }
        write_batch(db, counter, batch);
    }
}

fn write_batch(db: &Database, counter: &Counter, batch: Vec<(SignedRecord, Reply)>) {
    let mut done = Vec::with_capacity(batch.len());
    let result = (|| -> Result<(), StoreError> {
        let tx = db.begin_write().map_err(backend)?;
        {
            let mut t = tx.open_table(RECORDS).map_err(backend)?;
            for (rec, reply) in batch {
                let k = key(rec.kind(), rec.name());
                let old = t
                    .get(k.as_str())
                    .map_err(backend)?
                    .and_then(|v| decode_local(v.value()));
                match counter.check(supersedes(rec.record(), old.as_ref())) {
                    Ok(()) => {
                        t.insert(k.as_str(), rec.bytes()).map_err(backend)?;
                        done.push((Ok(rec), reply));
                    }
                    Err(e) => done.push((Err(e), reply)),
                }
            }
        }
        tx.commit().map_err(backend)
    })();
    for (r, reply) in done {
        let r = match (&result, r) {
            (Err(e), Ok(_)) => Err(StoreError::Backend(e.to_string())),
            (_, r) => r,
        };
        let _ = reply.send(r);
    }
}

impl RecordStore for EmbeddedStore {
    async fn put(&self, bytes: &[u8], now_ms: u64) -> Result<SignedRecord, StoreError> {
        let rec = self.counter.check(admit(bytes, now_ms))?;
        let (tx, rx) = oneshot::channel();
        let closed = || StoreError::Backend("the store's writer stopped".into());
        let w = self.writer.as_ref().ok_or_else(closed)?;
        w.send((rec, tx)).map_err(|_| closed())?;
        rx.await.map_err(|_| closed())?
    }

    fn reader(&self) -> Arc<dyn RecordReader> {
        self.reader.clone()
    }

    fn refusals(&self) -> RefusalCounts {
        self.counter.get()
    }
}

/// Reads of the file: each a read transaction on a snapshot, which redb gives without
/// waiting for the writer.
pub struct EmbeddedReader {
    db: Arc<Database>,
}

impl RecordReader for EmbeddedReader {
    fn get(
        &self,
        kind: Kind,
        name: SessionId,
        now_ms: u64,
    ) -> Result<Option<SignedRecord>, StoreError> {
        let tx = self.db.begin_read().map_err(backend)?;
        let t = tx.open_table(RECORDS).map_err(backend)?;
        let v = t.get(key(kind, name).as_str()).map_err(backend)?;
        Ok(v.and_then(|v| read_local(v.value(), kind, Some(name), now_ms)))
    }

    fn list(&self, kind: Kind, now_ms: u64) -> Result<Vec<SignedRecord>, StoreError> {
        let tx = self.db.begin_read().map_err(backend)?;
        let t = tx.open_table(RECORDS).map_err(backend)?;
        let p = prefix(kind);
        let mut out = Vec::new();
        for e in t.range(p.as_str()..).map_err(backend)? {
            let (k, v) = e.map_err(backend)?;
            if !k.value().starts_with(&p) {
                break;
            }
            out.extend(read_local(v.value(), kind, None, now_ms));
        }
        Ok(out)
    }
}
