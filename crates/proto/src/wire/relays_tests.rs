//! The RELAYS codec: exact round trips within the bounds, canonical decoding of any bytes,
//! and every bound refused.

use super::*;
use crate::wire::Frame;
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

fn spec(name: &str, address: &str, mode: Mode) -> RelaySpec {
    RelaySpec {
        name: name.to_string(),
        address: address.parse().unwrap(),
        key: PublicKey([7; 32]),
        mode,
    }
}

/// Encodes `list` into a frame of `epoch`.
fn frame(list: &[RelaySpec], epoch: u32) -> Vec<u8> {
    let (count, relays) = encode(list).expect("handable");
    let mut buf = vec![0u8; RELAYS_HEADER_LEN + relays.len()];
    FrameWriter::new(&mut buf)
        .relays(&RelaysFrame {
            epoch,
            count,
            relays: &relays,
        })
        .unwrap();
    buf
}

fn parse(buf: &[u8]) -> RelaysFrame<'_> {
    match FrameReader::new(buf).next() {
        Some(Ok(Frame::Relays(f))) => f,
        other => panic!("{other:?}"),
    }
}

fn any_relay() -> impl Strategy<Value = RelaySpec> {
    let v4 = any::<[u8; 4]>().prop_map(|a| IpAddr::V4(Ipv4Addr::from(a)));
    let v6 = any::<[u8; 16]>().prop_map(|a| IpAddr::V6(Ipv6Addr::from(a)));
    (
        "[a-z0-9\u{e9}\u{3b1}-]{1,10}",
        prop_oneof![v4, v6].prop_filter("specified", |ip| !ip.is_unspecified()),
        1u16..,
        any::<[u8; 32]>(),
        prop_oneof![Just(Mode::Nat), Just(Mode::Tunnel)],
    )
        .prop_map(|(name, ip, port, key, mode)| RelaySpec {
            name,
            address: SocketAddr::new(ip, port),
            key: PublicKey(key),
            mode,
        })
}

proptest! {
    /// Every list within the bounds goes through a frame and comes back exactly.
    #[test]
    fn list_round_trips(
        list in proptest::collection::vec(any_relay(), 0..=MAX_HANDED_RELAYS),
        epoch in any::<u32>(),
    ) {
        prop_assume!(distinct(&list));
        let buf = frame(&list, epoch);
        prop_assert!(buf.len() <= MAX_RELAYS_FRAME_LEN);
        let f = parse(&buf);
        prop_assert_eq!(f.epoch, epoch);
        prop_assert_eq!(decode(&f).unwrap(), list);
    }

    /// Any bytes: parsing and decoding never panic, the parser stays within the buffer, and
    /// what decodes re-encodes to the same bytes (canonical), within the bounds.
    #[test]
    fn any_bytes_decode_canonically(body in proptest::collection::vec(any::<u8>(), 0..800)) {
        let mut buf = vec![0x0C];
        buf.extend_from_slice(&body);
        let Some(Ok(Frame::Relays(f))) = FrameReader::new(&buf).next() else {
            return Ok(());
        };
        prop_assert!(RELAYS_HEADER_LEN + f.relays.len() <= buf.len());
        if let Ok(list) = decode(&f) {
            prop_assert!(list.len() <= MAX_HANDED_RELAYS);
            let again = frame(&list, f.epoch);
            prop_assert_eq!(&again[..], &buf[..again.len()]);
        }
    }
}

#[test]
fn largest_list_fits_the_bound() {
    let list: Vec<RelaySpec> = (0..MAX_HANDED_RELAYS)
        .map(|i| {
            let name = format!("{i}{}", "n".repeat(MAX_NAME_LEN - 1));
            spec(&name, &format!("[2001:db8::{i}]:51900"), Mode::Tunnel)
        })
        .collect();
    assert_eq!(frame(&list, 1).len(), MAX_RELAYS_FRAME_LEN);
    assert_eq!(MAX_RELAYS_FRAME_LEN, 694);
}

#[test]
fn bounds_and_bad_relays_are_refused() {
    let ok = spec("a", "192.0.2.1:51900", Mode::Nat);
    let many: Vec<RelaySpec> = (0..=MAX_HANDED_RELAYS)
        .map(|i| {
            spec(
                &format!("r{i}"),
                &format!("192.0.2.{}:51900", i + 1),
                Mode::Nat,
            )
        })
        .collect();
    assert!(encode(&many).is_none(), "nine relays");
    for bad in [
        spec("", "192.0.2.1:51900", Mode::Nat),
        spec(&"x".repeat(MAX_NAME_LEN + 1), "192.0.2.1:51900", Mode::Nat),
        spec("tab\there", "192.0.2.1:51900", Mode::Nat),
        spec("a", "0.0.0.0:51900", Mode::Nat),
        spec("a", "192.0.2.1:0", Mode::Nat),
        spec("a", "192.0.2.1:51900", Mode::NatTcp),
    ] {
        assert!(encode(std::slice::from_ref(&bad)).is_none(), "{bad:?}");
    }
    let same_name = spec("a", "192.0.2.2:51900", Mode::Nat);
    let same_addr = spec("b", "192.0.2.1:51900", Mode::Tunnel);
    assert!(encode(&[ok.clone(), same_name]).is_none());
    assert!(encode(&[ok.clone(), same_addr]).is_none());

    // On the wire: a count above the bound, a reserved byte, an unknown family or mode,
    // a name that is not UTF-8.
    let mut nine = vec![0x0C, 0, 0, 0, 1, 9];
    for i in 0..9u8 {
        let mut one = frame(&[spec(&format!("r{i}"), "192.0.2.1:1", Mode::Nat)], 1);
        nine.extend_from_slice(&one.split_off(RELAYS_HEADER_LEN));
    }
    assert_eq!(decode(&parse(&nine)), Err(RelaysError::TooMany(9)));
    let good = frame(&[ok], 1);
    for (at, value) in [
        (7, 1),
        (6, 5),
        (RELAYS_HEADER_LEN + 52, 3),
        (RELAYS_HEADER_LEN + 54, 0xff),
    ] {
        let mut b = good.clone();
        b[at] = value;
        assert_eq!(
            decode(&parse(&b)),
            Err(RelaysError::BadRelay(0)),
            "byte {at}"
        );
    }
    // A truncated relay is not a frame.
    assert!(matches!(
        FrameReader::new(&good[..good.len() - 1]).next(),
        Some(Err(WireError::Truncated { .. }))
    ));
}

#[test]
fn ack_round_trips() {
    let mut buf = [0u8; RELAYS_ACK_LEN];
    FrameWriter::new(&mut buf).relays_ack(0xdead_beef).unwrap();
    assert!(matches!(
        FrameReader::new(&buf).next(),
        Some(Ok(Frame::RelaysAck(0xdead_beef)))
    ));
    assert_eq!(
        FrameWriter::new(&mut [0u8; 4]).relays_ack(1),
        Err(WireError::BufferTooSmall)
    );
}
