//! A server's copy of a shared store's records, kept current from the store's change feed
//! (etcd's watch), sans-IO: lookups are answered from memory instead of a quorum read.
//!
//! Role: the etcd store (`store/etcd.rs`) lists every record once, then feeds this cache
//! each change the watch reports ([`WatchBatch`]) and each record it wrote itself; lookups
//! read the cache. Everything that enters passes the checks a publish passes — size,
//! signature, lease ([`admit`]), the key it is stored under matching the name its key
//! gives, and a sequence number above the one known for that name ([`supersedes`]) — so a
//! record written into the cluster by anyone else, forged, replayed or misplaced, is
//! refused, counted ([`RecordCache::refusals`]) and never served.
//!
//! Ordering: every entry remembers the etcd revision it was written at; a change at or
//! below it is already reflected (the watch echoing this server's own write, or a replay
//! of the feed after a reconnection) and is skipped without verifying again. A record
//! deleted from the cluster (its lease ended) leaves a *floor*: its sequence number, kept
//! until the record's own expiry, below which the name accepts nothing — an old but still
//! live copy written back after the delete stays out.
//!
//! Re-listing ([`RecordCache::relist`]) after the feed was lost for longer than the
//! cluster keeps history (compaction) replaces the entries by the list, except those
//! written after the list's revision.
//!
//! Invariants: no clock, no I/O (times are given); a served record is live at the time
//! asked; the cache never holds two records for one name; [`RecordCache::revision`] only
//! goes up.

use crate::record::{Kind, Record};
use crate::signed::{admit, supersedes, Refusal, RefusalCounts, SignedRecord};
use crate::store::{key, prefix};
use multihome_proto::crypto::SessionId;
use std::collections::{BTreeMap, HashMap};

/// One listed key: the key, its value's check (`None`: not wanted), its revision.
pub type Listed = (String, Option<Result<SignedRecord, Refusal>>, i64);

/// One change reported by the feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// `key` now holds `value`, written at `revision`.
    Put {
        /// Database key.
        key: String,
        /// Stored bytes.
        value: Vec<u8>,
        /// The key's modification revision.
        revision: i64,
    },
    /// `key` was deleted at `revision` (its lease ended, or someone deleted it).
    Delete {
        /// Database key.
        key: String,
        /// The deletion's revision.
        revision: i64,
    },
}

/// One message of the feed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchBatch {
    /// The cluster's revision when the message was sent.
    pub header_revision: i64,
    /// Non-zero: the feed's start is older than the cluster keeps (compacted).
    pub compact_revision: i64,
    /// The feed was just created (its header revision is the cluster's, not the feed's:
    /// older changes may still follow).
    pub created: bool,
    /// The cluster ended the feed.
    pub canceled: bool,
    /// Changes, in revision order.
    pub changes: Vec<Change>,
}

/// What the feed's owner must do after a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Keep reading the feed.
    Continue,
    /// Start a new feed from [`RecordCache::revision`] + 1.
    Resume,
    /// The history is gone: list everything again, then start a feed after the list.
    Relist,
}

/// Counters for status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Records held (live or not yet purged).
    pub records: usize,
    /// Changes applied from the feed.
    pub applied: u64,
    /// Full lists taken (the first, then one per lost history).
    pub relists: u64,
    /// Feeds resumed after a loss.
    pub resumes: u64,
    /// The revision the cache reflects.
    pub revision: i64,
    /// Reads that waited for the copy's lock (kept by the reader, not the cache).
    pub reads_waited: u64,
}

struct Entry {
    rec: SignedRecord,
    revision: i64,
}

/// The records of one cluster, as this server knows them.
#[derive(Default)]
pub struct RecordCache {
    entries: BTreeMap<String, Entry>,
    /// Per name: the sequence number of a deleted record, until that record's expiry.
    floors: HashMap<String, (u64, u64)>,
    revision: i64,
    refusals: RefusalCounts,
    stats: CacheStats,
}

/// A record stored under `k` must be the one its own key names.
fn placed(k: &str, r: &Record) -> bool {
    key(r.kind(), r.name()) == k
}

impl RecordCache {
    /// An empty cache.
    pub fn new() -> RecordCache {
        RecordCache::default()
    }

    /// The live record of `kind` named `name` at `now_ms`.
    pub fn get(&self, kind: Kind, name: SessionId, now_ms: u64) -> Option<SignedRecord> {
        let e = self.entries.get(&key(kind, name))?;
        (e.rec.record().expires_ms > now_ms).then(|| e.rec.clone())
    }

    /// Every live record of `kind` at `now_ms`.
    pub fn list(&self, kind: Kind, now_ms: u64) -> Vec<SignedRecord> {
        let p = prefix(kind);
        self.entries
            .range(p.clone()..)
            .take_while(|(k, _)| k.starts_with(&p))
            .filter(|(_, e)| e.rec.record().expires_ms > now_ms)
            .map(|(_, e)| e.rec.clone())
            .collect()
    }

    /// The highest sequence number `k` accepts nothing at or below, and the revision of the
    /// entry (if one is held): what a new write must supersede and the guard it writes under.
    pub fn latest(&self, k: &str) -> (Option<&Record>, Option<i64>) {
        match self.entries.get(k) {
            Some(e) => (Some(e.rec.record()), Some(e.revision)),
            None => (None, None),
        }
    }

    /// The sequence floor of `k` left by a deleted record, if still in force at `now_ms`.
    pub fn floor(&self, k: &str, now_ms: u64) -> Option<u64> {
        self.floors
            .get(k)
            .filter(|(_, until)| *until > now_ms)
            .map(|(s, _)| *s)
    }

    /// Must a change of `k` at `revision` be looked at (verified and applied)? No when the
    /// cache already reflects that revision of the key.
    pub fn wants(&self, k: &str, revision: i64) -> bool {
        self.entries.get(k).is_none_or(|e| e.revision < revision)
    }

    /// Checks stored bytes without the cache (no lock needed: the costly part, the
    /// signature).
    pub fn check(k: &str, value: &[u8], now_ms: u64) -> Result<SignedRecord, Refusal> {
        let rec = admit(value, now_ms)?;
        if !placed(k, rec.record()) {
            return Err(Refusal::Malformed);
        }
        Ok(rec)
    }

    /// Holds `rec`, stored under `k` at `revision`, unless the cache reflects that revision
    /// already; refused as stale unless its sequence number is above the entry's and the
    /// floor.
    fn take(
        &mut self,
        k: &str,
        rec: SignedRecord,
        revision: i64,
        now_ms: u64,
    ) -> Result<(), Refusal> {
        if !self.wants(k, revision) {
            return Ok(());
        }
        let (old, _) = self.latest(k);
        supersedes(rec.record(), old)?;
        if self.floor(k, now_ms).is_some_and(|f| rec.record().seq <= f) {
            return Err(Refusal::Stale);
        }
        self.floors.remove(k);
        self.entries.insert(k.to_owned(), Entry { rec, revision });
        Ok(())
    }

    /// Counts a refusal of a stored record. An expired one is not counted: the cluster
    /// keeps a record until its lease ends, a little after the record's own expiry, and a
    /// feed replayed after a loss carries records that have expired since.
    fn refuse(&mut self, r: Refusal) {
        if r != Refusal::Expired {
            self.refusals.count(r);
        }
    }

    /// A record this server itself wrote at `revision` (admitted, and stored by a write
    /// guarded on what the cache held, so it supersedes it).
    pub fn put_own(&mut self, rec: SignedRecord, revision: i64, now_ms: u64) {
        let k = key(rec.kind(), rec.name());
        let _ = self.take(&k, rec, revision, now_ms);
    }

    /// A stored value read outside the feed (the list, a read after a failed guarded
    /// write): checked, held, or counted as refused.
    pub fn observe(&mut self, k: &str, value: &[u8], revision: i64, now_ms: u64) {
        if !self.wants(k, revision) {
            return;
        }
        let r = RecordCache::check(k, value, now_ms)
            .and_then(|rec| self.take(k, rec, revision, now_ms));
        if let Err(e) = r {
            self.refuse(e);
        }
    }

    fn delete(&mut self, k: &str, revision: i64) {
        if let Some(e) = self.entries.get(k) {
            if e.revision < revision {
                let r = e.rec.record();
                self.floors.insert(k.to_owned(), (r.seq, r.expires_ms));
                self.entries.remove(k);
            }
        }
    }

    /// Which of a message's puts the cache does not reflect yet (taken under the lock).
    pub fn wanted(&self, batch: &WatchBatch) -> Vec<bool> {
        batch
            .changes
            .iter()
            .map(|c| match c {
                Change::Put { key, revision, .. } => self.wants(key, *revision),
                Change::Delete { .. } => false,
            })
            .collect()
    }

    /// The checks of a message's wanted puts, without the cache (so without its lock):
    /// `None` for deletes and for puts not wanted.
    pub fn check_batch(
        batch: &WatchBatch,
        wanted: &[bool],
        now_ms: u64,
    ) -> Vec<Option<Result<SignedRecord, Refusal>>> {
        batch
            .changes
            .iter()
            .zip(wanted)
            .map(|(c, &w)| match c {
                Change::Put { key, value, .. } if w => Some(RecordCache::check(key, value, now_ms)),
                _ => None,
            })
            .collect()
    }

    /// Applies one message of the feed, its puts checked by [`RecordCache::check_batch`],
    /// and says what to do next.
    pub fn apply(
        &mut self,
        batch: &WatchBatch,
        checked: Vec<Option<Result<SignedRecord, Refusal>>>,
        now_ms: u64,
    ) -> Next {
        if batch.compact_revision > 0 {
            return Next::Relist;
        }
        for (c, chk) in batch.changes.iter().zip(checked) {
            let r = match (c, chk) {
                (Change::Put { key, revision, .. }, Some(rec)) => {
                    rec.and_then(|rec| self.take(key, rec, *revision, now_ms))
                }
                (Change::Put { .. }, None) => Ok(()),
                (Change::Delete { key, revision }, _) => {
                    self.delete(key, *revision);
                    Ok(())
                }
            };
            if let Err(e) = r {
                self.refuse(e);
            }
            self.stats.applied += 1;
        }
        let last = batch.changes.iter().map(|c| match c {
            Change::Put { revision, .. } | Change::Delete { revision, .. } => *revision,
        });
        // A progress message (no changes, neither created nor canceled) says every change
        // up to its header revision was sent.
        let progress = !(batch.created || batch.canceled);
        let reached = last
            .max()
            .or(progress.then_some(batch.header_revision))
            .unwrap_or(0);
        self.revision = self.revision.max(reached);
        if batch.canceled {
            Next::Resume
        } else {
            Next::Continue
        }
    }

    /// Replaces the entries by a full list taken at `revision` (`kvs`: key, value, the
    /// key's revision). Entries written after the list are kept; entries the list lacks
    /// leave a floor as a delete does. Checks every value here; a caller holding the cache
    /// behind a lock uses [`RecordCache::relist_checked`] to check outside it.
    pub fn relist(&mut self, kvs: Vec<(String, Vec<u8>, i64)>, revision: i64, now_ms: u64) {
        let checked = kvs
            .into_iter()
            .map(|(k, v, rev)| {
                let c = self
                    .wants(&k, rev)
                    .then(|| RecordCache::check(&k, &v, now_ms));
                (k, c, rev)
            })
            .collect();
        self.relist_checked(checked, revision, now_ms);
    }

    /// [`RecordCache::relist`] of values already checked (`None`: not wanted, the cache
    /// reflects that revision of the key).
    pub fn relist_checked(&mut self, kvs: Vec<Listed>, revision: i64, now_ms: u64) {
        let listed: std::collections::HashSet<&str> = kvs.iter().map(|(k, _, _)| &**k).collect();
        let gone: Vec<String> = self
            .entries
            .iter()
            .filter(|(k, e)| e.revision <= revision && !listed.contains(k.as_str()))
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            self.delete(&k, revision + 1);
        }
        for (k, c, rev) in kvs {
            let r = match c {
                Some(c) => c.and_then(|rec| self.take(&k, rec, rev, now_ms)),
                None => Ok(()),
            };
            if let Err(e) = r {
                self.refuse(e);
            }
        }
        self.revision = self.revision.max(revision);
        self.stats.relists += 1;
    }

    /// Counts a feed resumed after a loss.
    pub fn resumed(&mut self) {
        self.stats.resumes += 1;
    }

    /// Drops entries and floors whose lease ended before `now_ms` (the cluster deletes
    /// them too; this bounds memory when the feed misses the deletes). Returns how many
    /// entries went.
    pub fn purge(&mut self, now_ms: u64) -> usize {
        let before = self.entries.len();
        self.entries
            .retain(|_, e| e.rec.record().expires_ms > now_ms);
        self.floors.retain(|_, (_, until)| *until > now_ms);
        before - self.entries.len()
    }

    /// The revision the cache reflects (the feed resumes after it).
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// Records refused from the feed, by reason.
    pub fn refusals(&self) -> RefusalCounts {
        self.refusals
    }

    /// Counters for status.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            records: self.entries.len(),
            revision: self.revision,
            ..self.stats
        }
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
