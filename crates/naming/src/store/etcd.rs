//! The etcd store: records shared by several servers through an etcd cluster (v3 API).
//!
//! Role: every server of a deployment points at the same cluster, so a client's record
//! published through one server is found through any other, and a server's record (its
//! address and load) is seen by every resolver. A `put` reads the stored record, checks
//! that the new one supersedes it, and writes it in a transaction guarded by the read
//! revision (`mod_revision`, or `create_revision = 0` for a new key); a concurrent writer
//! makes the guard fail and the `put` starts over (at most [`RETRIES`] times), so two
//! servers racing never leave the older record stored.
//!
//! Leases: each record is attached to an etcd lease that outlives its own expiry by less
//! than [`LEASE_BUCKET_S`], so etcd deletes dead attachments itself. Records expiring in the
//! same bucket share one lease (granted once, remembered), which keeps a `put` at two round
//! trips (get + txn) instead of three at 1 000 updates per second.
//!
//! A `put` whose key this store wrote last skips the read: the record and `mod_revision`
//! it wrote are remembered ([`CACHE_MAX`] keys), and the guard on that revision fails if
//! anyone wrote since — then it reads and tries again. A client renewing its record through
//! the same server thus costs one transaction.
//!
//! Lookups are linearizable (a record published through one server is found through any
//! other as soon as the publish was acknowledged). The read inside a `put` is serializable
//! (answered by the member reached, without a quorum round): if it was stale, the
//! transaction's revision guard fails and the `put` reads again.
//!
//! A member dying makes requests to it fail at the transport: every request is retried
//! ([`TRANSPORT_TRIES`], backing off from 20 ms) and the client moves to the others. A
//! transaction whose answer was lost may have been applied: a retry that then finds exactly
//! its own record stored reports success, not a stale refusal.
//!
//! Invariant: a record is served only after re-verification (`read_back`), so a cluster
//! written to by anyone else still cannot make a forged record be served.

use super::{key, prefix, read_back, Counter, RecordStore, StoreError};
use crate::record::{Kind, Record};
use crate::signed::{admit, supersedes, verify, RefusalCounts, SignedRecord};
use etcd_client::{Client, Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, Txn, TxnOp};
use multihome_proto::crypto::SessionId;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

/// Attempts of one `put` when other writers keep changing the record.
pub const RETRIES: usize = 8;
/// Width of a lease bucket (seconds).
pub const LEASE_BUCKET_S: u64 = 5;
/// Keys whose last write is remembered at most (then the memory starts over).
pub const CACHE_MAX: usize = 200_000;
/// Attempts of one request that fails at the transport (a member gone).
pub const TRANSPORT_TRIES: u32 = 6;

/// Runs `f` until it succeeds or failed [`TRANSPORT_TRIES`] times; says whether it was
/// tried more than once.
async fn retry<T, F, Fut>(mut f: F) -> Result<(T, bool), StoreError>
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

/// Records in an etcd cluster.
pub struct EtcdStore {
    client: Client,
    /// Lease per bucket end (Unix seconds).
    leases: Mutex<BTreeMap<u64, i64>>,
    /// What this store last wrote per key, and the key's revision after that write.
    written: Mutex<HashMap<String, (i64, Record)>>,
    counter: Counter,
}

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

impl EtcdStore {
    /// Connects to the cluster (`http://host:port` endpoints; the client balances over
    /// them and moves on when a member fails).
    pub async fn connect(endpoints: &[String]) -> Result<EtcdStore, StoreError> {
        let opts = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(2))
            .with_keep_alive(Duration::from_secs(1), Duration::from_secs(1));
        let client = Client::connect(endpoints, Some(opts))
            .await
            .map_err(backend)?;
        Ok(EtcdStore {
            client,
            leases: Mutex::new(BTreeMap::new()),
            written: Mutex::new(HashMap::new()),
            counter: Counter::default(),
        })
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
}

impl EtcdStore {
    fn lock_written(&self) -> std::sync::MutexGuard<'_, HashMap<String, (i64, Record)>> {
        self.written.lock().expect("never poisoned")
    }

    /// Remembers what this store wrote under `k` and the key's revision after it.
    fn remember(&self, k: String, revision: Option<i64>, r: &Record) {
        let Some(rev) = revision else { return };
        let mut w = self.lock_written();
        if w.len() >= CACHE_MAX {
            w.clear();
        }
        w.insert(k, (rev, r.clone()));
    }

    /// The stored record under `k` and the guard for replacing it; `None` when it is
    /// exactly `rec` and an earlier attempt may have written it (its answer lost).
    async fn read_for_put(
        &self,
        k: &str,
        rec: &SignedRecord,
        maybe_applied: bool,
    ) -> Result<Option<(Option<Record>, Compare)>, StoreError> {
        let (got, _) = retry(|| self.get_raw(k, GetOptions::new().with_serializable())).await?;
        Ok(match got.kvs().first() {
            Some(kv) if maybe_applied && kv.value() == rec.bytes() => None,
            Some(kv) => Some((
                verify(kv.value()).ok(),
                Compare::mod_revision(k, CompareOp::Equal, kv.mod_revision()),
            )),
            None => Some((None, Compare::create_revision(k, CompareOp::Equal, 0))),
        })
    }

    /// One get, on a clone of the client (cheap: it shares the connections).
    fn get_raw(
        &self,
        k: &str,
        opts: GetOptions,
    ) -> impl std::future::Future<Output = Result<etcd_client::GetResponse, etcd_client::Error>>
    {
        let mut c = self.client.clone();
        let k = k.to_owned();
        async move { c.get(k, Some(opts)).await }
    }
}

impl RecordStore for EtcdStore {
    async fn put(&self, bytes: &[u8], now_ms: u64) -> Result<SignedRecord, StoreError> {
        let rec = self.counter.check(admit(bytes, now_ms))?;
        let k = key(rec.kind(), rec.name());
        let mut maybe_applied = false;
        let mut remembered = self.lock_written().get(&k).cloned();
        for _ in 0..RETRIES {
            let (old, guard) = match remembered.take() {
                Some((rev, old)) => (
                    Some(old),
                    Compare::mod_revision(k.as_str(), CompareOp::Equal, rev),
                ),
                None => match self.read_for_put(&k, &rec, maybe_applied).await? {
                    Some(found) => found,
                    // Our own transaction, applied although its answer was lost.
                    None => return Ok(rec),
                },
            };
            self.counter.check(supersedes(rec.record(), old.as_ref()))?;
            let lease = self.lease(rec.record().expires_ms, now_ms).await?;
            let put = TxnOp::put(
                k.as_str(),
                rec.bytes(),
                Some(PutOptions::new().with_lease(lease)),
            );
            let txn = Txn::new().when([guard]).and_then([put]);
            let (resp, retried) = retry(|| {
                let mut c = self.client.clone();
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await?;
            maybe_applied |= retried;
            if resp.succeeded() {
                self.remember(k, resp.header().map(|h| h.revision()), rec.record());
                return Ok(rec);
            }
            self.lock_written().remove(&k);
        }
        Err(StoreError::Backend(format!(
            "{k}: {RETRIES} concurrent writers won"
        )))
    }

    async fn get(
        &self,
        kind: Kind,
        name: SessionId,
        now_ms: u64,
    ) -> Result<Option<SignedRecord>, StoreError> {
        let k = key(kind, name);
        let (got, _) = retry(|| self.get_raw(&k, GetOptions::new())).await?;
        Ok(got
            .kvs()
            .first()
            .and_then(|kv| read_back(kv.value(), kind, Some(name), now_ms)))
    }

    async fn list(&self, kind: Kind, now_ms: u64) -> Result<Vec<SignedRecord>, StoreError> {
        let p = prefix(kind);
        let opts = GetOptions::new().with_prefix();
        let (got, _) = retry(|| self.get_raw(&p, opts.clone())).await?;
        Ok(got
            .kvs()
            .iter()
            .filter_map(|kv| read_back(kv.value(), kind, None, now_ms))
            .collect())
    }

    fn refusals(&self) -> RefusalCounts {
        self.counter.get()
    }
}
