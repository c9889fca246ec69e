//! Admission: every refusal reason, round trips, and the properties the issue names (a
//! record signed by another key never verifies; only a higher sequence replaces).

use super::*;
use crate::record::{Body, IdentityBody, LinkAddr, ServerBody};
use multihome_proto::crypto::PublicKey;
use proptest::prelude::*;

const NOW: u64 = 1_700_000_000_000;

fn secret(b: u8) -> StaticSecret {
    StaticSecret::from_bytes([b; 32])
}

pub(crate) fn identity(sk: &StaticSecret, seq: u64, links: usize) -> Record {
    Record {
        key: sk.public_key(),
        seq,
        expires_ms: NOW + 30_000,
        body: Body::Identity(IdentityBody {
            server: Some(secret(200).public_key().session_id()),
            policy: 2,
            links: (0..links)
                .map(|i| LinkAddr {
                    name: format!("link{i}"),
                    addr: format!("192.0.2.{i}:{}", 7000 + i).parse().unwrap(),
                })
                .collect(),
        }),
    }
}

fn server(sk: &StaticSecret) -> Record {
    Record {
        key: sk.public_key(),
        seq: 5,
        expires_ms: NOW + 10_000,
        body: Body::Server(ServerBody {
            tunnel: vec![
                "198.51.100.1:7000".parse().unwrap(),
                "[2001:db8::1]:7000".parse().unwrap(),
            ],
            resolver: "198.51.100.1:7001".parse().unwrap(),
            load: 3,
            capacity: 1000,
        }),
    }
}

#[test]
fn round_trip_both_kinds() {
    for r in [identity(&secret(1), 9, 3), server(&secret(2))] {
        let s = SignedRecord::sign(
            r.clone(),
            &secret(if r.kind() == Kind::Identity { 1 } else { 2 }),
        )
        .unwrap();
        let back = admit(s.bytes(), NOW).unwrap();
        assert_eq!(back.record(), &r);
        assert_eq!(back.name(), r.key.session_id());
    }
}

#[test]
fn each_refusal() {
    let sk = secret(1);
    let good = SignedRecord::sign(identity(&sk, 1, 2), &sk).unwrap();
    let b = good.bytes();
    // Unsigned: the signature cut off, or zeroed.
    assert_eq!(
        admit(&b[..b.len() - 64], NOW).unwrap_err(),
        Refusal::Unsigned
    );
    let mut zero = b.to_vec();
    let n = zero.len();
    zero[n - 64..].fill(0);
    assert_eq!(admit(&zero, NOW).unwrap_err(), Refusal::Unsigned);
    // Wrongly signed: someone else's key in the record, the owner's signature kept.
    let mut forged = b.to_vec();
    forged[2..34].copy_from_slice(&secret(3).public_key().0);
    assert_eq!(admit(&forged, NOW).unwrap_err(), Refusal::BadSignature);
    // Oversized.
    assert_eq!(
        admit(&vec![1u8; MAX_RECORD + 1], NOW).unwrap_err(),
        Refusal::Oversized
    );
    // Expired, and a lease too long.
    assert_eq!(admit(b, NOW + 30_000).unwrap_err(), Refusal::Expired);
    let mut long = identity(&sk, 1, 1);
    long.expires_ms = NOW + MAX_LEASE_MS + 1;
    let long = SignedRecord::sign(long, &sk).unwrap();
    assert_eq!(admit(long.bytes(), NOW).unwrap_err(), Refusal::LeaseTooLong);
    // Malformed: a wrong version (signature then irrelevant).
    let mut v = b.to_vec();
    v[0] = 9;
    assert_eq!(admit(&v, NOW).unwrap_err(), Refusal::Malformed);
    // Stale.
    let newer = identity(&sk, 2, 1);
    assert_eq!(supersedes(good.record(), Some(&newer)), Err(Refusal::Stale));
    assert_eq!(
        supersedes(good.record(), Some(good.record())),
        Err(Refusal::Stale)
    );
    assert_eq!(supersedes(&newer, Some(good.record())), Ok(()));
    assert_eq!(supersedes(&newer, None), Ok(()));
}

#[test]
fn encoder_refuses_what_receivers_refuse() {
    let sk = secret(1);
    assert!(SignedRecord::sign(identity(&sk, 1, 17), &sk).is_err());
    let mut long_name = identity(&sk, 1, 1);
    if let Body::Identity(b) = &mut long_name.body {
        b.links[0].name = "x".repeat(16);
    }
    assert!(SignedRecord::sign(long_name, &sk).is_err());
    // 16 IPv6 links with 15-byte names fit under MAX_RECORD.
    let mut full = identity(&sk, 1, 16);
    if let Body::Identity(b) = &mut full.body {
        for (i, l) in b.links.iter_mut().enumerate() {
            l.name = format!("{i:0>15}");
            l.addr = "[2001:db8::1]:65535".parse().unwrap();
        }
    }
    let s = SignedRecord::sign(full, &sk).unwrap();
    assert!(s.bytes().len() <= MAX_RECORD);
}

#[test]
fn counts_by_reason() {
    let mut c = RefusalCounts::default();
    for r in [Refusal::Stale, Refusal::Stale, Refusal::BadSignature] {
        c.count(r);
    }
    assert_eq!((c.stale, c.bad_signature, c.total()), (2, 1, 3));
}

proptest! {
    /// A record carrying key B but signed by A never verifies, whatever A, B and the body.
    #[test]
    fn signed_by_another_key_never_verifies(a in any::<[u8; 32]>(), b in any::<[u8; 32]>(),
                                            seq in any::<u64>(), links in 0usize..4) {
        let (sa, sb) = (StaticSecret::from_bytes(a), StaticSecret::from_bytes(b));
        prop_assume!(sa.public_key() != sb.public_key());
        let mut r = identity(&sa, seq, links);
        let signed = SignedRecord::sign(r.clone(), &sa).unwrap();
        r.key = sb.public_key();
        let mut forged = r.encode_unsigned();
        forged.extend_from_slice(&signed.bytes()[signed.bytes().len() - 64..]);
        prop_assert_eq!(admit(&forged, NOW).unwrap_err(), Refusal::BadSignature);
        // Nor does B's name accept A's record re-labelled by hand.
        prop_assert_ne!(signed.name(), PublicKey(sb.public_key().0).session_id());
    }

    /// A store that applies `supersedes` ends with the highest sequence number offered,
    /// whatever order the copies arrive in, and refuses every copy not above its current.
    #[test]
    fn sequence_is_monotonic(seqs in proptest::collection::vec(0u64..50, 1..30)) {
        let sk = secret(7);
        let mut stored: Option<Record> = None;
        for s in &seqs {
            let r = identity(&sk, *s, 1);
            let before = stored.as_ref().map(|o| o.seq);
            match supersedes(&r, stored.as_ref()) {
                Ok(()) => { prop_assert!(before.is_none_or(|b| *s > b)); stored = Some(r); }
                Err(e) => { prop_assert_eq!(e, Refusal::Stale); prop_assert!(*s <= before.unwrap()); }
            }
        }
        prop_assert_eq!(stored.unwrap().seq, *seqs.iter().max().unwrap());
    }

    /// Any bytes: admission never panics, and what it accepts re-encodes to the same bytes.
    #[test]
    fn arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..700)) {
        if let Ok(s) = admit(&bytes, NOW) {
            prop_assert_eq!(s.record().encode_unsigned(), &bytes[..bytes.len() - 64]);
        }
    }
}
