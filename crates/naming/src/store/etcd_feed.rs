//! The etcd store's change feed: a full list of the records, then etcd's watch from the
//! list's revision, feeding a [`RecordCache`] (whose checks decide what enters).
//!
//! Role: one task per store, started at connection and stopped with the store. It reads
//! watch messages, checks their records' signatures without holding the cache's lock (a
//! lookup never waits behind a signature check), then applies them under it. It keeps
//! the feed alive across failures:
//! - the stream ends or errs (the member it was on died, or lost its leader: the client
//!   requires one): a new watch from the cache's revision + 1, on whichever member answers,
//!   after [`RESUME_WAIT`] (doubling up to [`RESUME_WAIT_MAX`] while it keeps failing);
//! - the stream stays silent: every [`PROGRESS_EVERY`] the task asks for a progress
//!   message; with no message at all for [`SILENT_LIMIT`], the stream is taken for dead;
//! - the history it needs was compacted (the watch says so): a new full list, then a
//!   watch after it.
//!
//! Every [`PROGRESS_EVERY`] it also purges expired records from the cache.
//!
//! Invariant: the cache only ever moves forward (its revision), and every change after the
//! list reaches it exactly once or is skipped as already reflected.

use super::etcd::{backend, retry};
use super::StoreError;
use crate::cache::{Change, Next, RecordCache, WatchBatch};
use crate::service::unix_ms;
use etcd_client::{Client, EventType, GetOptions, WatchOptions, WatchResponse};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// Root of every record key (both kinds).
pub const ROOT: &str = "mh/1/";
/// Keys per page of a full list.
pub const PAGE: i64 = 2_000;
/// How often the feed asks for progress and the cache is purged.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// A stream that sent nothing for this long (progress asked every second) is dead.
pub const SILENT_LIMIT: Duration = Duration::from_secs(3);
/// First wait before a new watch after a failure.
pub const RESUME_WAIT: Duration = Duration::from_millis(50);
/// Longest wait between attempts.
pub const RESUME_WAIT_MAX: Duration = Duration::from_secs(2);

type Cache = Arc<Mutex<RecordCache>>;

/// The running feed.
pub struct Feed {
    task: tokio::task::JoinHandle<()>,
    up: Arc<AtomicBool>,
}

impl Feed {
    /// Starts following the watch after the cache's revision.
    pub fn start(client: Client, cache: Cache) -> Feed {
        let up = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(run(client, cache, up.clone()));
        Feed { task, up }
    }

    /// Is a watch stream open now?
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock(c: &Cache) -> std::sync::MutexGuard<'_, RecordCache> {
    c.lock().expect("never poisoned")
}

/// One past the last key with prefix `p` (etcd's range end for a prefix).
fn range_end(p: &str) -> Vec<u8> {
    let mut e = p.as_bytes().to_vec();
    *e.last_mut().expect("non-empty prefix") += 1;
    e
}

/// Lists every record, page by page at one revision, into `cache` (which then reflects
/// that revision).
pub async fn list_into(client: &Client, cache: &Cache) -> Result<(), StoreError> {
    let end = range_end(ROOT);
    let (mut from, mut at, mut kvs) = (ROOT.as_bytes().to_vec(), 0i64, Vec::new());
    loop {
        let opts = GetOptions::new()
            .with_range(end.clone())
            .with_limit(PAGE)
            .with_revision(at);
        let (got, _) = retry(|| {
            let mut c = client.clone();
            let (from, opts) = (from.clone(), opts.clone());
            async move { c.get(from, Some(opts)).await }
        })
        .await?;
        if at == 0 {
            at = got
                .header()
                .map(|h| h.revision())
                .ok_or_else(|| backend("list without header"))?;
        }
        for kv in got.kvs() {
            let k = String::from_utf8_lossy(kv.key()).into_owned();
            kvs.push((k, kv.value().to_vec(), kv.mod_revision()));
        }
        match got.kvs().last() {
            Some(kv) if got.more() => {
                from = kv.key().to_vec();
                from.push(0);
            }
            _ => break,
        }
    }
    // Signatures are checked without the cache's lock (10 000 take a while), only for
    // keys the cache does not hold at that revision already.
    let now = unix_ms();
    let wanted: Vec<bool> = {
        let c = lock(cache);
        kvs.iter().map(|(k, _, rev)| c.wants(k, *rev)).collect()
    };
    let checked = kvs
        .into_iter()
        .zip(wanted)
        .map(|((k, v, rev), w)| {
            let c = w.then(|| RecordCache::check(&k, &v, now));
            (k, c, rev)
        })
        .collect();
    lock(cache).relist_checked(checked, at, now);
    Ok(())
}

/// A watch message as the cache takes it.
fn batch_of(r: &WatchResponse) -> WatchBatch {
    let changes = r
        .events()
        .iter()
        .filter_map(|e| {
            let kv = e.kv()?;
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            let revision = kv.mod_revision();
            Some(match e.event_type() {
                EventType::Put => Change::Put {
                    key,
                    value: kv.value().to_vec(),
                    revision,
                },
                EventType::Delete => Change::Delete { key, revision },
            })
        })
        .collect();
    WatchBatch {
        header_revision: r.header().map_or(0, |h| h.revision()),
        compact_revision: r.compact_revision(),
        created: r.created(),
        canceled: r.canceled(),
        changes,
    }
}

/// Applies one message: checks outside the lock, then applies under it.
fn take(cache: &Cache, r: &WatchResponse) -> Next {
    let batch = batch_of(r);
    let now = unix_ms();
    let wanted = lock(cache).wanted(&batch);
    let checked = RecordCache::check_batch(&batch, &wanted, now);
    lock(cache).apply(&batch, checked, now)
}

/// Follows one watch stream until it ends; says what to do next.
async fn follow(client: &mut Client, cache: &Cache, up: &AtomicBool) -> Next {
    let from = lock(cache).revision() + 1;
    let opts = WatchOptions::new()
        .with_range(range_end(ROOT))
        .with_start_revision(from);
    let stream = match client.watch(ROOT, Some(opts)).await {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!("etcd watch: {e}");
            return Next::Resume;
        }
    };
    let (mut tx, mut rx) = stream.split();
    up.store(true, Ordering::Relaxed);
    let mut tick = tokio::time::interval(PROGRESS_EVERY);
    let mut heard = Instant::now();
    let next = loop {
        tokio::select! {
            m = rx.message() => match m {
                Ok(Some(r)) => {
                    heard = Instant::now();
                    match take(cache, &r) {
                        Next::Continue => {}
                        other => break other,
                    }
                }
                Ok(None) => break Next::Resume,
                Err(e) => {
                    tracing::debug!("etcd watch: {e}");
                    break Next::Resume;
                }
            },
            _ = tick.tick() => {
                lock(cache).purge(unix_ms());
                if heard.elapsed() > SILENT_LIMIT {
                    tracing::debug!("etcd watch silent; resuming");
                    break Next::Resume;
                }
                let _ = tx.request_progress().await;
            }
        }
    };
    up.store(false, Ordering::Relaxed);
    next
}

/// The feed's task.
async fn run(mut client: Client, cache: Cache, up: Arc<AtomicBool>) {
    let mut wait = RESUME_WAIT;
    loop {
        let started = Instant::now();
        let next = follow(&mut client, &cache, &up).await;
        if started.elapsed() > SILENT_LIMIT {
            // It ran a while: a new failure, not the same one again.
            wait = RESUME_WAIT;
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(RESUME_WAIT_MAX);
        if next == Next::Relist {
            tracing::info!("etcd history compacted: listing the records again");
            if let Err(e) = list_into(&client, &cache).await {
                tracing::warn!("etcd list: {e}");
                continue;
            }
        }
        lock(&cache).resumed();
        tracing::debug!("etcd watch resumed");
    }
}
