//! One suite, both stores: the embedded redb file and a real three-member etcd cluster.
//! What a resolver's user sees: a stored record comes back byte for byte, through the
//! handle that stored it at once and through another within [`CATCH_UP`]; a forged, stale
//! or expired record is never served and each refusal is counted; two writers racing
//! leave the highest sequence number; the embedded file survives a restart; etcd keeps
//! every record when one member is killed, and its watched copy refuses what others write
//! into the cluster behind the stores' back and drops records whose lease ended.

mod common;

use multihome_naming::store::{EmbeddedStore, EtcdStore, RecordStore, StoreError};
use multihome_naming::{
    Body, IdentityBody, Kind, LinkAddr, Record, Refusal, ServerBody, SignedRecord,
};
use multihome_proto::crypto::StaticSecret;

/// The tests' "now" (Unix ms): the real time at start, as the etcd store's watched copy
/// checks leases on the real clock.
fn now() -> u64 {
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *START.get_or_init(multihome_naming::service::unix_ms)
}

fn sk(i: u32) -> StaticSecret {
    let mut b = [0u8; 32];
    // Bytes 1..5: X25519 clamps the low bits of byte 0.
    b[1..5].copy_from_slice(&i.to_le_bytes());
    b[31] = 0x42;
    StaticSecret::from_bytes(b)
}

fn identity(i: u32, seq: u64, lease_ms: u64) -> SignedRecord {
    identity_at(i, seq, now() + lease_ms)
}

fn identity_at(i: u32, seq: u64, expires_ms: u64) -> SignedRecord {
    let k = sk(i);
    let r = Record {
        key: k.public_key(),
        seq,
        expires_ms,
        body: Body::Identity(IdentityBody {
            server: None,
            policy: 0,
            links: vec![LinkAddr {
                name: "lte".into(),
                addr: format!("192.0.2.{}:{}", i % 250, seq % 60000)
                    .parse()
                    .unwrap(),
            }],
        }),
    };
    SignedRecord::sign(r, &k).unwrap()
}

fn server(i: u32, seq: u64) -> SignedRecord {
    let k = sk(1000 + i);
    let r = Record {
        key: k.public_key(),
        seq,
        expires_ms: now() + 10_000,
        body: Body::Server(ServerBody {
            tunnel: vec![format!("198.51.100.{i}:7000").parse().unwrap()],
            resolver: format!("198.51.100.{i}:7001").parse().unwrap(),
            load: i,
            capacity: 100,
        }),
    };
    SignedRecord::sign(r, &k).unwrap()
}

/// How long another handle may take to see a put (etcd: the watch's delay; far less in
/// practice, and the lab measures it).
const CATCH_UP: std::time::Duration = std::time::Duration::from_secs(3);

/// The record of `kind` named like `r` through `s`, once its sequence number is `seq`
/// (waiting up to [`CATCH_UP`]); what is there then otherwise.
async fn seen<S: RecordStore>(
    s: &S,
    kind: Kind,
    r: &SignedRecord,
    seq: u64,
) -> Option<SignedRecord> {
    let until = std::time::Instant::now() + CATCH_UP;
    loop {
        let got = s.get(kind, r.name(), now()).await.unwrap();
        if got.as_ref().is_some_and(|g| g.record().seq == seq) || std::time::Instant::now() > until
        {
            return got;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

fn refused(r: Result<SignedRecord, StoreError>) -> Refusal {
    match r {
        Err(StoreError::Refused(x)) => x,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The shared suite; `a` and `b` are two handles on the same records (two servers).
async fn suite<S: RecordStore>(a: &S, b: &S) {
    // Stored and found, through the same handle at once and the other one too, byte for
    // byte.
    let r1 = identity(1, 10, 30_000);
    a.put(r1.bytes(), now()).await.unwrap();
    let got = a.get(Kind::Identity, r1.name(), now()).await.unwrap();
    assert_eq!(got.unwrap().bytes(), r1.bytes());
    let got = seen(b, Kind::Identity, &r1, 10).await.unwrap();
    assert_eq!(got.bytes(), r1.bytes());
    // Unknown name, and the same name of the other kind: nothing.
    assert!(b
        .get(Kind::Identity, identity(2, 1, 1).name(), now())
        .await
        .unwrap()
        .is_none());
    assert!(b
        .get(Kind::Server, r1.name(), now())
        .await
        .unwrap()
        .is_none());
    // Stale (lower and equal sequence) and forged records are refused and counted; the
    // stored record is unchanged.
    let before = a.refusals();
    assert_eq!(
        refused(a.put(identity(1, 9, 30_000).bytes(), now()).await),
        Refusal::Stale
    );
    assert_eq!(refused(a.put(r1.bytes(), now()).await), Refusal::Stale);
    let mut forged = identity(1, 11, 30_000).bytes().to_vec();
    let n = forged.len();
    forged[n - 80] ^= 0x01; // the link's address, after signing
    assert_eq!(refused(a.put(&forged, now()).await), Refusal::BadSignature);
    let mut unsigned = forged.clone();
    unsigned[n - 64..].fill(0);
    assert_eq!(refused(a.put(&unsigned, now()).await), Refusal::Unsigned);
    assert_eq!(refused(a.put(&[0u8; 800], now()).await), Refusal::Oversized);
    assert_eq!(
        refused(a.put(identity(3, 1, 1_000).bytes(), now() + 1_000).await),
        Refusal::Expired
    );
    let after = a.refusals();
    assert_eq!(after.total() - before.total(), 6);
    assert_eq!(after.stale - before.stale, 2);
    let got = b
        .get(Kind::Identity, r1.name(), now())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.record().seq, 10);
    // A higher sequence replaces it.
    let r2 = identity(1, 11, 30_000);
    b.put(r2.bytes(), now()).await.unwrap();
    assert_eq!(
        seen(a, Kind::Identity, &r1, 11).await.unwrap().bytes(),
        r2.bytes()
    );
    // Its lease ends: gone for lookups.
    assert!(a
        .get(Kind::Identity, r1.name(), now() + 30_000)
        .await
        .unwrap()
        .is_none());
    // Two writers racing with interleaved sequence numbers: the highest stays.
    let (x, y) = tokio::join!(
        async {
            for s in (20..60).step_by(2) {
                let _ = a.put(identity(4, s, 30_000).bytes(), now()).await;
            }
        },
        async {
            for s in (21..61).step_by(2) {
                let _ = b.put(identity(4, s, 30_000).bytes(), now()).await;
            }
        }
    );
    let ((), ()) = (x, y);
    for s in [a, b] {
        let top = seen(s, Kind::Identity, &identity(4, 1, 1), 59)
            .await
            .unwrap();
        assert_eq!(top.record().seq, 59);
    }
    // Servers are listed, identities are not among them.
    for i in 1..=3 {
        a.put(server(i, 1).bytes(), now()).await.unwrap();
    }
    let mut loads: Vec<u32> = servers(b, 3)
        .await
        .iter()
        .map(|s| match &s.record().body {
            Body::Server(b) => b.load,
            Body::Identity(_) => panic!("identity listed as a server"),
        })
        .collect();
    loads.sort();
    assert_eq!(loads, [1, 2, 3]);
}

/// Servers as `s` lists them, once there are `n` (waiting up to [`CATCH_UP`]).
async fn servers<S: RecordStore>(s: &S, n: usize) -> Vec<SignedRecord> {
    let until = std::time::Instant::now() + CATCH_UP;
    loop {
        let v = s.list(Kind::Server, now()).await.unwrap();
        if v.len() >= n || std::time::Instant::now() > until {
            return v;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn embedded_suite_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("naming.redb");
    rt().block_on(async {
        let a = EmbeddedStore::open(&path).unwrap();
        suite(&a, &a).await;
    });
    // Restart: a new process would open the same file; the records are there.
    rt().block_on(async {
        let s = EmbeddedStore::open(&path).unwrap();
        let r = s
            .get(Kind::Identity, identity(4, 1, 1).name(), now())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(r.record().seq, 59);
        assert_eq!(s.list(Kind::Server, now()).await.unwrap().len(), 3);
        // Sweeping at a time after every lease removes them all from the file.
        assert!(s.sweep(now() + 3_600_000).unwrap() >= 5);
        assert!(s.list(Kind::Server, now()).await.unwrap().is_empty());
    });
}

/// Connects once the members have elected a leader (within a second or two of starting).
async fn connect(eps: &[String]) -> EtcdStore {
    for _ in 0..100 {
        if let Ok(s) = EtcdStore::connect(eps).await {
            if s.get(Kind::Server, identity(0, 1, 1).name(), now())
                .await
                .is_ok()
            {
                return s;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("etcd cluster did not come up");
}

/// `SIGKILL` to `pid` (a member, from inside the test's namespace thread).
fn kill_pid(pid: u32) {
    let ok = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {pid}");
}

/// What the etcd store's watched copy does with what others write into the cluster behind
/// the stores' back (`raw`: a plain etcd client): a forged record, an old copy written
/// over a newer one and a record under another name's key are refused, counted and never
/// served; a record whose etcd lease ends is deleted by etcd and leaves the copy.
async fn watched_copy(a: &EtcdStore, b: &EtcdStore, eps: &[String]) {
    let mut raw = etcd_client::Client::connect(eps, None).await.unwrap();
    let good = identity(60, 5, 30_000);
    a.put(good.bytes(), now()).await.unwrap();
    assert!(seen(b, Kind::Identity, &good, 5).await.is_some());
    let k = multihome_naming::store::key(Kind::Identity, good.name());
    let before = b.stats().refused_in_store;
    let mut forged = identity(60, 6, 30_000).bytes().to_vec();
    let n = forged.len();
    forged[n - 80] ^= 0x01;
    raw.put(k.as_str(), forged, None).await.unwrap();
    raw.put(k.as_str(), identity(60, 4, 30_000).bytes(), None)
        .await
        .unwrap();
    raw.put(k.as_str(), identity(61, 9, 30_000).bytes(), None)
        .await
        .unwrap();
    let until = std::time::Instant::now() + CATCH_UP;
    while b.stats().refused_in_store.total() < before.total() + 3
        && std::time::Instant::now() < until
    {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let after = b.stats().refused_in_store;
    assert_eq!(after.bad_signature - before.bad_signature, 1);
    assert_eq!(after.stale - before.stale, 1);
    assert_eq!(after.malformed - before.malformed, 1);
    for s in [a, b] {
        let got = s
            .get(Kind::Identity, good.name(), now())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            got.bytes(),
            good.bytes(),
            "the copy still serves the genuine record"
        );
    }
    // The genuine owner's next record goes in over the junk in the cluster.
    let next = identity(60, 7, 30_000);
    b.put(next.bytes(), now()).await.unwrap();
    assert!(seen(a, Kind::Identity, &next, 7).await.is_some());

    // A record with a 1 s lease, at the real time now: etcd deletes it within a lease
    // bucket (5 s) after its expiry, and the copies drop it.
    let t = multihome_naming::service::unix_ms();
    let short = identity_at(62, 1, t + 1_000);
    a.put(short.bytes(), t).await.unwrap();
    let kk = multihome_naming::store::key(Kind::Identity, short.name());
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !raw.get(kk.as_str(), None).await.unwrap().kvs().is_empty() {
        assert!(
            std::time::Instant::now() < until,
            "etcd kept a record past its lease"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let t = multihome_naming::service::unix_ms();
    assert!(b
        .get(Kind::Identity, short.name(), t)
        .await
        .unwrap()
        .is_none());
}

#[test]
fn etcd_suite_watched_copy_and_member_loss() {
    let Some(mut cluster) = common::EtcdCluster::start() else {
        return;
    };
    let eps = cluster.endpoints();
    let pid0 = cluster.pid(0).unwrap();
    // Everything runs on a thread inside the namespace (its loopback has the members);
    // one runtime per thread, as the client's connections live on it.
    cluster
        .ns
        .run(|| {
            rt().block_on(async {
                let (a, b) = (connect(&eps).await, connect(&eps).await);
                suite(&a, &b).await;
                watched_copy(&a, &b, &eps).await;
                // 200 records, then one member killed: all 200 still found, writes go on
                // and reach every copy. Which member a copy's watch is on is the client's
                // choice: with six copies, member 0 carries some of them in most runs, and
                // those must resume on another member.
                for i in 100..300 {
                    a.put(identity(i, 1, 60_000).bytes(), now()).await.unwrap();
                }
                let mut copies = vec![b];
                for _ in 0..5 {
                    copies.push(connect(&eps).await);
                }
                kill_pid(pid0);
                let r = identity(100, 2, 60_000);
                a.put(r.bytes(), now()).await.unwrap();
                for (n, c) in copies.iter().enumerate() {
                    let got = seen(c, Kind::Identity, &r, 2).await;
                    assert_eq!(
                        got.map(|g| g.record().seq),
                        Some(2),
                        "copy {n} stopped following"
                    );
                    for i in 101..300 {
                        let got = c.get(Kind::Identity, identity(i, 1, 1).name(), now()).await;
                        assert!(got.unwrap().is_some(), "record {i} lost with one member");
                    }
                }
                // A store connecting now lists them all from the two members left.
                let s = connect(&eps[1..]).await;
                for i in 101..300 {
                    let got = s.get(Kind::Identity, identity(i, 1, 1).name(), now()).await;
                    assert!(got.unwrap().is_some(), "record {i} not listed");
                }
            })
        })
        .unwrap();
    cluster.kill(0);
}
