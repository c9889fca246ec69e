//! The etcd store: records shared by several servers through an etcd cluster (v3 API).
//!
//! Role: every server of a deployment points at the same cluster, so a client's record
//! published through one server is found through any other, and a server's record (its
//! address and load) is seen by every resolver.
//!
//! Reads come from memory. At connection the store lists every record and then follows the
//! cluster's watch from the list's revision (`etcd_feed.rs`), feeding a [`RecordCache`]
//! that verifies each record (signature, lease, sequence number, the key it sits under)
//! before it enters; `get` and `list` answer from the cache. A lookup thus costs no round
//! trip and no quorum read — under 1 000 updates per second on a small cluster, the
//! linearizable reads this store used to make took hundreds of milliseconds
//! (docs/EXPERIMENTS.md, naming). The price is that a record published through another
//! server is found here once the watch brings it (milliseconds; the lab measures it), not
//! at the instant that publish was acknowledged; a record published through this store is
//! found at once (it enters the cache when its write succeeds).
//!
//! Writes: a `put` checks that the new record supersedes what the cache holds for its name
//! (or the floor a deleted record left), then writes it in a transaction guarded by the
//! revision the cache holds for the key (`mod_revision`, or `create_revision = 0` for a key
//! it holds none of). If anyone wrote the key since, the guard fails: the store reads the
//! key, lets the cache take what it read, and tries again (at most [`RETRIES`] times), so
//! two servers racing never leave the older record stored. A put thus costs one round trip
//! when the cache is current.
//!
//! Leases: each record is attached to an etcd lease that outlives its own expiry by less
//! than [`LEASE_BUCKET_S`], so etcd deletes dead attachments itself (the delete reaches
//! every cache through the watch; the cache never serves a record past its own expiry
//! anyway). Records expiring in the same bucket share one lease (granted once,
//! remembered).
//!
//! A member dying makes requests to it fail at the transport: every request is retried
//! ([`TRANSPORT_TRIES`], backing off from 20 ms) and the client moves to the others; the
//! watch resumes from the cache's revision on another member. A transaction whose answer
//! was lost may have been applied: a retry that then finds exactly its own record stored
//! reports success, not a stale refusal. While no member answers, lookups go on from the
//! cache (records still expire by their own lease); publishes fail.
//!
//! Invariant: a record is served only from the cache, which admits nothing unverified, so
//! a cluster written to by anyone else still cannot make a forged or replayed record be
//! served.

use super::etcd_feed::{self, Feed};
use super::{key, Counter, RecordReader, RecordStore, StoreError, StoreStats};
use crate::cache::{CacheStats, RecordCache};
use crate::record::{Kind, Record};
use crate::signed::{admit, supersedes, Refusal, RefusalCounts, SignedRecord};
use etcd_client::{Client, Compare, CompareOp, ConnectOptions, PutOptions, Txn, TxnOp};
use multihome_proto::crypto::SessionId;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Attempts of one `put` when other writers keep changing the record.
pub const RETRIES: usize = 8;
/// Width of a lease bucket (seconds).
pub const LEASE_BUCKET_S: u64 = 5;
/// Attempts of one request that fails at the transport (a member gone).
pub const TRANSPORT_TRIES: u32 = 6;

/// Runs `f` until it succeeds or failed [`TRANSPORT_TRIES`] times; says whether it was
/// tried more than once.
pub(super) async fn retry<T, F, Fut>(mut f: F) -> Result<(T, bool), StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    let mut wait = Duration::from_millis(20);
    for attempt in 1.. {
        match f().await {
            Ok(v) => return Ok((v, attempt > 1)),
            Err(e) if attempt >= TRANSPORT_TRIES => return Err(backend(e)),
            Err(e) => tracing::debug!("etcd: {e}; retrying"),
        }
        tokio::time::sleep(wait).await;
        wait *= 2;
    }
    unreachable!("the loop returns")
}

/// Records in an etcd cluster, read from a watched copy.
pub struct EtcdStore {
    client: Client,
    /// Lease per bucket end (Unix seconds).
    leases: Mutex<BTreeMap<u64, i64>>,
    cache: Arc<Mutex<RecordCache>>,
    reader: Arc<CacheReader>,
    /// The task following the watch (stopped when the store is dropped).
    feed: Feed,
    counter: Counter,
}

pub(super) fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

/// What a `put` writes against: the record it must supersede and the guard of its write.
struct Base {
    old: Option<Record>,
    floor: Option<u64>,
    guard: Compare,
}

impl EtcdStore {
    /// Connects to the cluster (`http://host:port` endpoints; the client balances over
    /// them and moves on when a member fails), lists every record and starts following the
    /// watch. Must be called inside a tokio runtime, which runs the watch.
    pub async fn connect(endpoints: &[String]) -> Result<EtcdStore, StoreError> {
        let opts = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(2))
            .with_keep_alive(Duration::from_secs(1), Duration::from_secs(1))
            // A member cut off from the others answers nothing rather than old data, and
            // ends its watches (the feed then resumes on another member).
            .with_require_leader(true);
        let client = Client::connect(endpoints, Some(opts))
            .await
            .map_err(backend)?;
        let cache = Arc::new(Mutex::new(RecordCache::new()));
        etcd_feed::list_into(&client, &cache).await?;
        let feed = Feed::start(client.clone(), cache.clone());
        Ok(EtcdStore {
            client,
            leases: Mutex::new(BTreeMap::new()),
            reader: Arc::new(CacheReader {
                cache: cache.clone(),
                waited: Default::default(),
            }),
            cache,
            feed,
            counter: Counter::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RecordCache> {
        self.cache.lock().expect("never poisoned")
    }

    /// A lease that ends at the end of the bucket holding `expires_ms`.
    async fn lease(&self, expires_ms: u64, now_ms: u64) -> Result<i64, StoreError> {
        let end = (expires_ms / 1000 / LEASE_BUCKET_S + 1) * LEASE_BUCKET_S;
        let now_s = now_ms / 1000;
        {
            let mut l = self.leases.lock().expect("never poisoned");
            // Buckets whose lease is ending are no use for new records.
            l.retain(|&e, _| e > now_s + 1);
            if let Some(&id) = l.get(&end) {
                return Ok(id);
            }
        }
        let ttl = (end - now_s).max(1) as i64;
        let (grant, _) = retry(|| {
            let mut c = self.client.clone();
            async move { c.lease_grant(ttl, None).await }
        })
        .await?;
        let id = grant.id();
        self.leases.lock().expect("never poisoned").insert(end, id);
        Ok(id)
    }

    /// The base from the cache.
    fn base_cached(&self, k: &str, now_ms: u64) -> Base {
        let c = self.lock();
        let (old, rev) = c.latest(k);
        Base {
            old: old.cloned(),
            floor: c.floor(k, now_ms),
            guard: match rev {
                Some(r) => Compare::mod_revision(k, CompareOp::Equal, r),
                None => Compare::create_revision(k, CompareOp::Equal, 0),
            },
        }
    }

    /// The base from the cluster (the cache was behind): what was read enters the cache
    /// if it passes the cache's checks, and the new record must supersede what the cache
    /// then holds (a record that fails them — forged, misplaced — is simply written over);
    /// `None` when the stored record is exactly `rec` and an earlier attempt may have
    /// written it (its answer lost).
    async fn base_read(
        &self,
        k: &str,
        rec: &SignedRecord,
        maybe_applied: bool,
        now_ms: u64,
    ) -> Result<Option<Base>, StoreError> {
        let (got, _) = retry(|| {
            let mut c = self.client.clone();
            let k = k.to_owned();
            async move { c.get(k, None).await }
        })
        .await?;
        let guard = match got.kvs().first() {
            Some(kv) if maybe_applied && kv.value() == rec.bytes() => return Ok(None),
            Some(kv) => {
                self.lock()
                    .observe(k, kv.value(), kv.mod_revision(), now_ms);
                Compare::mod_revision(k, CompareOp::Equal, kv.mod_revision())
            }
            None => Compare::create_revision(k, CompareOp::Equal, 0),
        };
        let c = self.lock();
        Ok(Some(Base {
            old: c.latest(k).0.cloned(),
            floor: c.floor(k, now_ms),
            guard,
        }))
    }

    /// Records refused from the cluster (written there by someone else), by reason.
    pub fn feed_refusals(&self) -> RefusalCounts {
        self.lock().refusals()
    }
}

impl RecordStore for EtcdStore {
    async fn put(&self, bytes: &[u8], now_ms: u64) -> Result<SignedRecord, StoreError> {
        let rec = self.counter.check(admit(bytes, now_ms))?;
        let k = key(rec.kind(), rec.name());
        let mut maybe_applied = false;
        let mut base = Some(self.base_cached(&k, now_ms));
        for _ in 0..RETRIES {
            let b = match base.take() {
                Some(b) => b,
                None => match self.base_read(&k, &rec, maybe_applied, now_ms).await? {
                    Some(b) => b,
                    // Our own transaction, applied although its answer was lost.
                    None => return Ok(rec),
                },
            };
            self.counter
                .check(supersedes(rec.record(), b.old.as_ref()))?;
            if b.floor.is_some_and(|f| rec.record().seq <= f) {
                return self.counter.check(Err(Refusal::Stale));
            }
            let lease = self.lease(rec.record().expires_ms, now_ms).await?;
            let put = TxnOp::put(
                k.as_str(),
                rec.bytes(),
                Some(PutOptions::new().with_lease(lease)),
            );
            let txn = Txn::new().when([b.guard]).and_then([put]);
            let (resp, retried) = retry(|| {
                let mut c = self.client.clone();
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await?;
            maybe_applied |= retried;
            if resp.succeeded() {
                if let Some(h) = resp.header() {
                    self.lock().put_own(rec.clone(), h.revision(), now_ms);
                }
                return Ok(rec);
            }
        }
        Err(StoreError::Backend(format!(
            "{k}: {RETRIES} concurrent writers won"
        )))
    }

    fn reader(&self) -> Arc<dyn RecordReader> {
        self.reader.clone()
    }

    fn refusals(&self) -> RefusalCounts {
        self.counter.get()
    }

    fn stats(&self) -> StoreStats {
        let c = self.lock();
        StoreStats {
            refused: self.counter.get(),
            refused_in_store: c.refusals(),
            cache: Some(CacheStats {
                reads_waited: self
                    .reader
                    .waited
                    .load(std::sync::atomic::Ordering::Relaxed),
                ..c.stats()
            }),
            feed_up: Some(self.feed.is_up()),
        }
    }
}

/// Reads of the watched copy (a lock held for one map lookup).
pub struct CacheReader {
    cache: Arc<Mutex<RecordCache>>,
    /// Reads that found the lock taken (by the store's thread) and waited.
    waited: std::sync::atomic::AtomicU64,
}

impl CacheReader {
    fn lock(&self) -> std::sync::MutexGuard<'_, RecordCache> {
        match self.cache.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::WouldBlock) => {
                self.waited
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.cache.lock().expect("never poisoned")
            }
            Err(std::sync::TryLockError::Poisoned(_)) => panic!("never poisoned"),
        }
    }
}

impl RecordReader for CacheReader {
    fn get(
        &self,
        kind: Kind,
        name: SessionId,
        now_ms: u64,
    ) -> Result<Option<SignedRecord>, StoreError> {
        Ok(self.lock().get(kind, name, now_ms))
    }

    fn list(&self, kind: Kind, now_ms: u64) -> Result<Vec<SignedRecord>, StoreError> {
        Ok(self.lock().list(kind, now_ms))
    }
}
