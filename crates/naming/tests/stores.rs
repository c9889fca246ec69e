//! One suite, both stores: the embedded redb file and a real three-member etcd cluster.
//! What a resolver's user sees: a stored record comes back byte for byte; a forged, stale
//! or expired record is never served and each refusal is counted; two writers racing
//! leave the highest sequence number; the embedded file survives a restart; etcd keeps
//! every record when one member is killed.

mod common;

use multihome_naming::store::{EmbeddedStore, EtcdStore, RecordStore, StoreError};
use multihome_naming::{
    Body, IdentityBody, Kind, LinkAddr, Record, Refusal, ServerBody, SignedRecord,
};
use multihome_proto::crypto::StaticSecret;

const NOW: u64 = 1_700_000_000_000;

fn sk(i: u32) -> StaticSecret {
    let mut b = [0u8; 32];
    // Bytes 1..5: X25519 clamps the low bits of byte 0.
    b[1..5].copy_from_slice(&i.to_le_bytes());
    b[31] = 0x42;
    StaticSecret::from_bytes(b)
}

fn identity(i: u32, seq: u64, lease_ms: u64) -> SignedRecord {
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
        expires_ms: NOW + 10_000,
        body: Body::Server(ServerBody {
            tunnel: vec![format!("198.51.100.{i}:7000").parse().unwrap()],
            resolver: format!("198.51.100.{i}:7001").parse().unwrap(),
            load: i,
            capacity: 100,
        }),
    };
    SignedRecord::sign(r, &k).unwrap()
}

fn refused(r: Result<SignedRecord, StoreError>) -> Refusal {
    match r {
        Err(StoreError::Refused(x)) => x,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The shared suite; `a` and `b` are two handles on the same records (two servers).
async fn suite<S: RecordStore>(a: &S, b: &S) {
    // Stored and found, through the other handle too, byte for byte.
    let r1 = identity(1, 10, 30_000);
    a.put(r1.bytes(), NOW).await.unwrap();
    let got = b
        .get(Kind::Identity, r1.name(), NOW)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.bytes(), r1.bytes());
    // Unknown name, and the same name of the other kind: nothing.
    assert!(b
        .get(Kind::Identity, identity(2, 1, 1).name(), NOW)
        .await
        .unwrap()
        .is_none());
    assert!(b.get(Kind::Server, r1.name(), NOW).await.unwrap().is_none());
    // Stale (lower and equal sequence) and forged records are refused and counted; the
    // stored record is unchanged.
    let before = a.refusals();
    assert_eq!(
        refused(a.put(identity(1, 9, 30_000).bytes(), NOW).await),
        Refusal::Stale
    );
    assert_eq!(refused(a.put(r1.bytes(), NOW).await), Refusal::Stale);
    let mut forged = identity(1, 11, 30_000).bytes().to_vec();
    let n = forged.len();
    forged[n - 80] ^= 0x01; // the link's address, after signing
    assert_eq!(refused(a.put(&forged, NOW).await), Refusal::BadSignature);
    let mut unsigned = forged.clone();
    unsigned[n - 64..].fill(0);
    assert_eq!(refused(a.put(&unsigned, NOW).await), Refusal::Unsigned);
    assert_eq!(refused(a.put(&[0u8; 800], NOW).await), Refusal::Oversized);
    assert_eq!(
        refused(a.put(identity(3, 1, 1_000).bytes(), NOW + 1_000).await),
        Refusal::Expired
    );
    let after = a.refusals();
    assert_eq!(after.total() - before.total(), 6);
    assert_eq!(after.stale - before.stale, 2);
    let got = b
        .get(Kind::Identity, r1.name(), NOW)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.record().seq, 10);
    // A higher sequence replaces it.
    let r2 = identity(1, 11, 30_000);
    b.put(r2.bytes(), NOW).await.unwrap();
    assert_eq!(
        a.get(Kind::Identity, r1.name(), NOW)
            .await
            .unwrap()
            .unwrap()
            .bytes(),
        r2.bytes()
    );
    // Its lease ends: gone for lookups.
    assert!(a
        .get(Kind::Identity, r1.name(), NOW + 30_000)
        .await
        .unwrap()
        .is_none());
    // Two writers racing with interleaved sequence numbers: the highest stays.
    let (x, y) = tokio::join!(
        async {
            for s in (20..60).step_by(2) {
                let _ = a.put(identity(4, s, 30_000).bytes(), NOW).await;
            }
        },
        async {
            for s in (21..61).step_by(2) {
                let _ = b.put(identity(4, s, 30_000).bytes(), NOW).await;
            }
        }
    );
    let ((), ()) = (x, y);
    let top = a
        .get(Kind::Identity, identity(4, 1, 1).name(), NOW)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(top.record().seq, 59);
    // Servers are listed, identities are not among them.
    for i in 1..=3 {
        a.put(server(i, 1).bytes(), NOW).await.unwrap();
    }
    let mut loads: Vec<u32> = b
        .list(Kind::Server, NOW)
        .await
        .unwrap()
        .iter()
        .map(|s| match &s.record().body {
            Body::Server(b) => b.load,
            Body::Identity(_) => panic!("identity listed as a server"),
        })
        .collect();
    loads.sort();
    assert_eq!(loads, [1, 2, 3]);
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
            .get(Kind::Identity, identity(4, 1, 1).name(), NOW)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(r.record().seq, 59);
        assert_eq!(s.list(Kind::Server, NOW).await.unwrap().len(), 3);
        // Sweeping at a time after every lease removes them all from the file.
        assert!(s.sweep(NOW + 3_600_000).unwrap() >= 5);
        assert!(s.list(Kind::Server, NOW).await.unwrap().is_empty());
    });
}

/// Connects once the members have elected a leader (within a second or two of starting).
async fn connect(eps: &[String]) -> EtcdStore {
    for _ in 0..100 {
        if let Ok(s) = EtcdStore::connect(eps).await {
            if s.get(Kind::Server, identity(0, 1, 1).name(), NOW)
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

#[test]
fn etcd_suite_and_member_loss() {
    let Some(mut cluster) = common::EtcdCluster::start() else {
        return;
    };
    let eps = cluster.endpoints();
    // Everything runs on a thread inside the namespace (its loopback has the members);
    // one runtime per thread, as the client's connections live on it.
    cluster
        .ns
        .run(|| {
            rt().block_on(async {
                let (a, b) = (connect(&eps).await, connect(&eps).await);
                suite(&a, &b).await;
                // 200 records, then one member killed: all 200 still found, writes go on.
                for i in 100..300 {
                    a.put(identity(i, 1, 60_000).bytes(), NOW).await.unwrap();
                }
            })
        })
        .unwrap();
    cluster.kill(0);
    cluster
        .ns
        .run(|| {
            rt().block_on(async {
                let s = connect(&eps[1..]).await;
                for i in 100..300 {
                    let r = s
                        .get(Kind::Identity, identity(i, 1, 1).name(), NOW)
                        .await
                        .unwrap();
                    assert!(r.is_some(), "record {i} lost with one member");
                }
                s.put(identity(100, 2, 60_000).bytes(), NOW).await.unwrap();
            })
        })
        .unwrap();
}
