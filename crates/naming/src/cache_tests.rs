//! The watched copy against hand-made feed messages: what enters is verified and newer,
//! forged, replayed and misplaced records stay out and are counted, deletes leave a floor,
//! lost history asks for a re-list, and a re-list keeps what was written after it.

use super::*;
use crate::record::{Body, IdentityBody, LinkAddr};
use multihome_proto::crypto::StaticSecret;

const NOW: u64 = 1_700_000_000_000;

fn sk(i: u8) -> StaticSecret {
    StaticSecret::from_bytes([i; 32])
}

fn rec(i: u8, seq: u64, lease_ms: u64) -> SignedRecord {
    let k = sk(i);
    let r = Record {
        key: k.public_key(),
        seq,
        expires_ms: NOW + lease_ms,
        body: Body::Identity(IdentityBody {
            server: None,
            policy: 0,
            links: vec![LinkAddr {
                name: "lte".into(),
                addr: format!("192.0.2.{i}:{seq}").parse().unwrap(),
            }],
        }),
    };
    SignedRecord::sign(r, &k).unwrap()
}

fn k(r: &SignedRecord) -> String {
    key(r.kind(), r.name())
}

fn put(r: &SignedRecord, revision: i64) -> Change {
    Change::Put {
        key: k(r),
        value: r.bytes().to_vec(),
        revision,
    }
}

/// Feeds one message the way the etcd feed does (checks, then apply).
fn feed(c: &mut RecordCache, changes: Vec<Change>) -> Next {
    let b = WatchBatch {
        header_revision: 0,
        changes,
        ..WatchBatch::default()
    };
    let wanted = c.wanted(&b);
    let checked = RecordCache::check_batch(&b, &wanted, NOW);
    c.apply(&b, checked, NOW)
}

fn seq_of(c: &RecordCache, i: u8) -> Option<u64> {
    c.get(Kind::Identity, sk(i).public_key().session_id(), NOW)
        .map(|r| r.record().seq)
}

#[test]
fn takes_newer_records_and_refuses_forged_replayed_misplaced() {
    let mut c = RecordCache::new();
    let r1 = rec(1, 10, 30_000);
    assert_eq!(feed(&mut c, vec![put(&r1, 5)]), Next::Continue);
    assert_eq!(seq_of(&c, 1), Some(10));
    assert_eq!(c.revision(), 5);
    // Forged: a byte of the body changed after signing.
    let mut forged = rec(1, 11, 30_000).bytes().to_vec();
    let n = forged.len();
    forged[n - 67] ^= 1;
    let f = Change::Put {
        key: k(&r1),
        value: forged,
        revision: 6,
    };
    // Replayed: an older record of the same name, written back.
    let old = rec(1, 9, 30_000);
    // Misplaced: a valid record of name 2 under name 1's key.
    let r2 = rec(2, 1, 30_000);
    let m = Change::Put {
        key: k(&r1),
        value: r2.bytes().to_vec(),
        revision: 8,
    };
    feed(&mut c, vec![f, put(&old, 7), m]);
    assert_eq!(seq_of(&c, 1), Some(10), "nothing of those entered");
    assert_eq!(seq_of(&c, 2), None);
    let r = c.refusals();
    assert_eq!((r.bad_signature, r.stale, r.malformed), (1, 1, 1));
    assert_eq!(c.revision(), 8, "refused changes are still passed");
    // A newer one replaces it; the same revision again is skipped silently.
    let r1b = rec(1, 12, 30_000);
    feed(&mut c, vec![put(&r1b, 9), put(&r1b, 9)]);
    assert_eq!(seq_of(&c, 1), Some(12));
    assert_eq!(c.refusals().total(), 3);
}

#[test]
fn own_writes_are_not_verified_twice_nor_refused_when_echoed() {
    let mut c = RecordCache::new();
    let r = rec(3, 1, 30_000);
    c.put_own(r.clone(), 20, NOW);
    assert_eq!(seq_of(&c, 3), Some(1));
    // The watch echoes it (and an older change of the key, delayed): both skipped.
    let b = WatchBatch {
        changes: vec![put(&rec(3, 0, 30_000), 19), put(&r, 20)],
        ..WatchBatch::default()
    };
    assert_eq!(c.wanted(&b), [false, false]);
    feed(&mut c, b.changes);
    assert_eq!(c.refusals().total(), 0);
    assert_eq!(seq_of(&c, 3), Some(1));
}

#[test]
fn a_delete_leaves_a_floor_until_the_record_expires() {
    let mut c = RecordCache::new();
    let r = rec(4, 50, 10_000);
    feed(&mut c, vec![put(&r, 3)]);
    feed(
        &mut c,
        vec![Change::Delete {
            key: k(&r),
            revision: 4,
        }],
    );
    assert_eq!(seq_of(&c, 4), None);
    // An older copy, still live, written back after the delete: refused.
    feed(&mut c, vec![put(&rec(4, 49, 5_000), 5)]);
    assert_eq!(seq_of(&c, 4), None);
    assert_eq!(c.refusals().stale, 1);
    // A newer one is taken, and lifts the floor.
    feed(&mut c, vec![put(&rec(4, 51, 10_000), 6)]);
    assert_eq!(seq_of(&c, 4), Some(51));
    assert_eq!(c.floor(&k(&r), NOW), None);
}

#[test]
fn expiry_hides_then_purge_drops_and_expired_feed_records_are_not_refusals() {
    let mut c = RecordCache::new();
    feed(&mut c, vec![put(&rec(5, 1, 1_000), 2)]);
    let name = sk(5).public_key().session_id();
    assert!(c.get(Kind::Identity, name, NOW + 999).is_some());
    assert!(c.get(Kind::Identity, name, NOW + 1_000).is_none());
    assert_eq!(c.stats().records, 1);
    assert_eq!(c.purge(NOW + 1_000), 1);
    assert_eq!(c.stats().records, 0);
    // A record the feed replays after it expired: skipped, not counted.
    let b = WatchBatch {
        changes: vec![put(&rec(6, 1, 1_000), 3)],
        ..WatchBatch::default()
    };
    let checked = RecordCache::check_batch(&b, &[true], NOW + 2_000);
    c.apply(&b, checked, NOW + 2_000);
    assert_eq!(c.refusals().total(), 0);
    assert_eq!(c.stats().records, 0);
}

#[test]
fn lost_history_asks_for_a_relist_and_the_relist_keeps_later_writes() {
    let mut c = RecordCache::new();
    let (a, b, d) = (rec(7, 1, 30_000), rec(8, 1, 30_000), rec(9, 1, 30_000));
    c.relist(
        vec![
            (k(&a), a.bytes().to_vec(), 3),
            (k(&b), b.bytes().to_vec(), 4),
        ],
        10,
        NOW,
    );
    assert_eq!(c.revision(), 10);
    assert_eq!(c.list(Kind::Identity, NOW).len(), 2);
    // Written through this store after the next list was taken.
    c.put_own(d.clone(), 25, NOW);
    let compacted = WatchBatch {
        compact_revision: 20,
        canceled: true,
        ..WatchBatch::default()
    };
    assert_eq!(c.apply(&compacted, vec![], NOW), Next::Relist);
    // The new list (at 22): `a` is gone, `b` is newer; `d` is after the list and stays.
    let b2 = rec(8, 2, 30_000);
    c.relist(vec![(k(&b2), b2.bytes().to_vec(), 21)], 22, NOW);
    assert_eq!(seq_of(&c, 7), None);
    assert_eq!(seq_of(&c, 8), Some(2));
    assert_eq!(seq_of(&c, 9), Some(1));
    assert_eq!(c.stats().relists, 2);
    // A gone record left its floor: an old copy does not come back.
    feed(&mut c, vec![put(&a, 30)]);
    assert_eq!(seq_of(&c, 7), None);
}

#[test]
fn created_and_canceled_messages_do_not_move_the_revision() {
    let mut c = RecordCache::new();
    c.relist(vec![], 10, NOW);
    let created = WatchBatch {
        header_revision: 50,
        created: true,
        ..WatchBatch::default()
    };
    assert_eq!(c.apply(&created, vec![], NOW), Next::Continue);
    assert_eq!(c.revision(), 10, "changes 11..50 may still follow");
    let canceled = WatchBatch {
        header_revision: 60,
        canceled: true,
        ..WatchBatch::default()
    };
    assert_eq!(c.apply(&canceled, vec![], NOW), Next::Resume);
    assert_eq!(c.revision(), 10);
    let progress = WatchBatch {
        header_revision: 70,
        ..WatchBatch::default()
    };
    c.apply(&progress, vec![], NOW);
    assert_eq!(c.revision(), 70);
}
