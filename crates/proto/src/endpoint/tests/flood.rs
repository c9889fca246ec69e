//! Handshake floods (docs/PROTOCOL.md §3.5): mac1 checked before any Diffie-Hellman,
//! cookie replies under load and the client's immediate retry with mac2, cookies bound to
//! a source address and to the secret's lifetime, the per-source rate limit, and a real
//! client getting through a flood of spoofed initiations.

use super::*;
use crate::crypto::cookie::{mac1_of, MacKeys, COOKIE_SECRET_LIFETIME};
use crate::crypto::{Initiator, PublicKey, INIT_FLAG_FRESH};
use crate::wire::outer::NOISE_INIT_LEN;
use crate::wire::{outer, MessageType, OuterPacket, COOKIE_REPLY_LEN, HANDSHAKE_INIT_LEN};

/// An initiation (path 0, sender index 7) from `key` to the server `server`, timestamp
/// `ts`, mac1 under `mac_to`'s key and mac2 under `cookie`.
fn init_from(
    key: &StaticSecret,
    server: &PublicKey,
    ts: u64,
    mac_to: &PublicKey,
    cookie: Option<&[u8; 16]>,
) -> Vec<u8> {
    let mut i = Initiator::new(key, server, [ts as u8; 32]).unwrap();
    let mut m = vec![0u8; HANDSHAKE_INIT_LEN];
    i.write_init(
        ts,
        INIT_FLAG_FRESH,
        CipherSet::ALL,
        &mut m[8..8 + NOISE_INIT_LEN],
    )
    .unwrap();
    outer::emit_init_header(&mut m, 0, 7);
    MacKeys::new(mac_to).seal(&mut m, cookie);
    m
}

/// What the server sends now, as (type byte, bytes).
fn drain(server: &mut Server, now: Instant) -> Vec<(u8, Vec<u8>)> {
    let mut buf = vec![0u8; 2048];
    let mut out = vec![];
    while let Some(t) = server.poll_transmit(now, &mut buf) {
        out.push((buf[0], buf[..t.len].to_vec()));
    }
    out
}

/// Opens the cookie of a cookie reply to `init` (as the client does).
fn cookie_of(server: &PublicKey, init: &[u8], reply: &[u8]) -> [u8; 16] {
    let p = OuterPacket::new_checked(reply).unwrap();
    assert_eq!(p.kind(), MessageType::CookieReply);
    assert_eq!(
        p.index(),
        7,
        "the reply names the initiation's sender index"
    );
    let (nonce, sealed) = p.cookie_reply();
    MacKeys::new(server)
        .open_cookie(&mac1_of(init), &nonce, &sealed)
        .expect("the cookie opens with the initiation's mac1")
}

/// Without the server's public key nobody writes a right mac1: such initiations are
/// counted and dropped before the Diffie-Hellman (which would count them as failed or
/// from an unknown peer), whatever key is inside.
#[test]
fn bad_mac1_dropped_before_any_diffie_hellman() {
    let mut p = Pair::new(vec![Link::new(10, None)], Policy::Best, None, 3);
    let (ck, sk) = keys();
    let server = sk.public_key();
    let stranger = StaticSecret::from_bytes([99; 32]);
    let elsewhere = PublicKey([5; 32]);
    let from: SocketAddr = "192.0.2.9:9".parse().unwrap();
    let now = Pair::at(1_000);
    for (i, key) in [&stranger, &ck].into_iter().enumerate() {
        let mut m = init_from(key, &server, 10 + i as u64, &elsewhere, None);
        p.server.handle_datagram(now, from, &mut m);
    }
    let c = p.server.counters();
    assert_eq!(c.rx_bad_mac1, 2);
    assert_eq!(
        (c.rx_unknown_peer, c.rx_handshake_failed, c.handshakes),
        (0, 0, 0),
        "nothing reached the handshake"
    );
    assert!(drain(&mut p.server, now).is_empty(), "no answer");
    // The same stranger with a right mac1 costs the DH and is refused there.
    let mut m = init_from(&stranger, &server, 20, &server, None);
    p.server.handle_datagram(now, from, &mut m);
    assert_eq!(p.server.counters().rx_unknown_peer, 1);
    // The client drops a response whose mac1 is not under its key, before its DH.
    p.establish();
    let before = p.client.counters();
    let mut forged = vec![0u8; crate::wire::HANDSHAKE_RESP_LEN];
    outer::emit_resp_header(&mut forged, 0, 1, 2);
    p.client
        .handle_datagram(p.now, PathId(0), SERVER.parse().unwrap(), &mut forged);
    let after = p.client.counters();
    assert_eq!(after.rx_bad_mac1, before.rx_bad_mac1 + 1);
    assert_eq!(after.rx_handshake_failed, before.rx_handshake_failed);
}

/// Under load the server answers a first initiation with a cookie reply only; the client
/// resends that copy with mac2 at once, and the session comes up one round trip later
/// (not after the 1 s retry) and carries traffic.
#[test]
fn under_load_cookie_reply_then_mac2_retry_accepted() {
    let mut p = Pair::new(
        vec![Link::new(10, None), Link::new(30, None)],
        Policy::Best,
        None,
        4,
    );
    p.server.set_load_threshold(0);
    p.run_until(Pair::at(100));
    assert!(p.client.is_established(), "up within two round trips");
    let (s, c) = (p.server.counters(), p.client.counters());
    assert_eq!(s.tx_cookie_replies, 2, "one per link's copy");
    // The slower link's cookie reply came after the response: ignored, not a refusal.
    assert_eq!((c.rx_cookie_replies, c.rx_unknown_index), (1, 0));
    assert_eq!(s.handshakes, 1);
    assert_eq!((s.rx_handshake_failed, s.rx_handshake_rate_limited), (0, 0));
    assert_eq!(c.handshakes, 1);
    p.traffic(
        50,
        Duration::from_millis(5),
        300,
        (true, true),
        Duration::from_secs(1),
        |_, _| {},
    );
    assert_eq!(numbers(&p.delivered_up), (0..50).collect::<Vec<_>>());
    assert_intact_unique(&p.delivered_down, false, 300, "down");
}

/// A cookie proves one source address under one secret: from another address, or once
/// the secret rotated (`COOKIE_SECRET_LIFETIME`), the initiation gets a new cookie reply
/// instead of a handshake.
#[test]
fn cookie_bound_to_address_and_secret() {
    let mut p = Pair::new(vec![Link::new(10, None)], Policy::Best, None, 5);
    p.server.set_load_threshold(0);
    let (ck, sk) = keys();
    let server = sk.public_key();
    let a: SocketAddr = "192.0.2.1:4000".parse().unwrap();
    let b: SocketAddr = "192.0.2.2:4000".parse().unwrap();
    let t1 = Pair::at(1_000);
    let mut init = init_from(&ck, &server, 1, &server, None);
    p.server.handle_datagram(t1, a, &mut init.clone());
    let out = drain(&mut p.server, t1);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].0, out[0].1.len()), (4, COOKIE_REPLY_LEN));
    let cookie = cookie_of(&server, &init, &out[0].1);
    MacKeys::new(&server).seal(&mut init, Some(&cookie));
    // From another address: refused, a new cookie offered.
    p.server.handle_datagram(t1, b, &mut init.clone());
    assert_eq!(drain(&mut p.server, t1)[0].0, 4);
    assert_eq!(p.server.counters().handshakes, 0);
    // From the address the cookie was made for: the handshake.
    p.server.handle_datagram(t1, a, &mut init.clone());
    assert_eq!(drain(&mut p.server, t1)[0].0, 2);
    assert_eq!(p.server.counters().handshakes, 1);
    // After the secret rotated, the same cookie no longer works.
    let t2 = t1 + COOKIE_SECRET_LIFETIME;
    let mut init2 = init_from(&ck, &server, 2, &server, Some(&cookie));
    p.server.handle_datagram(t2, a, &mut init2.clone());
    let out = drain(&mut p.server, t2);
    assert_eq!(out[0].0, 4, "stale cookie: a new one offered");
    assert_eq!(p.server.counters().handshakes, 1);
    let fresh = cookie_of(&server, &init2, &out[0].1);
    assert_ne!(fresh, cookie);
    MacKeys::new(&server).seal(&mut init2, Some(&fresh));
    p.server.handle_datagram(t2, a, &mut init2);
    assert_eq!(drain(&mut p.server, t2)[0].0, 2);
    let c = p.server.counters();
    assert_eq!((c.handshakes, c.tx_cookie_replies), (2, 3));
}

/// Under load, a source that proved its address still gets at most `RATE_BURST`
/// handshakes at once and `RATE_PER_SEC` a second.
#[test]
fn rate_limit_per_source_ip() {
    let mut p = Pair::new(vec![Link::new(10, None)], Policy::Best, None, 6);
    p.server.set_load_threshold(0);
    let (ck, sk) = keys();
    let server = sk.public_key();
    let a: SocketAddr = "192.0.2.1:4000".parse().unwrap();
    let t = Pair::at(1_000);
    let init = init_from(&ck, &server, 1, &server, None);
    p.server.handle_datagram(t, a, &mut init.clone());
    let cookie = cookie_of(&server, &init, &drain(&mut p.server, t)[0].1);
    let signed = init_from(&ck, &server, 2, &server, Some(&cookie));
    for _ in 0..8 {
        p.server.handle_datagram(t, a, &mut signed.clone());
    }
    let c = p.server.counters();
    assert_eq!(c.handshakes, 1);
    assert_eq!(
        c.rx_handshake_replayed,
        RATE_BURST - 1,
        "the rest of the burst"
    );
    assert_eq!(c.rx_handshake_rate_limited, 8 - RATE_BURST);
    let later = t + Duration::from_millis(1000 / RATE_PER_SEC);
    let mut next = init_from(&ck, &server, 3, &server, Some(&cookie));
    p.server.handle_datagram(later, a, &mut next);
    assert_eq!(p.server.counters().handshakes, 2, "one token back");
}

/// 2000 initiations a second from 6000 spoofed addresses, all with a right mac1 (the
/// attacker knows the server's public key) and a key the server does not know: the
/// server does at most about `LOAD_THRESHOLD` Diffie-Hellmans a second for them and
/// answers the rest with 64-byte cookie replies to addresses that never read them, while
/// the real client comes up and carries its traffic intact.
#[test]
fn real_client_gets_through_a_spoofed_flood() {
    let mut p = Pair::new(
        vec![Link::new(10, None), Link::new(30, None)],
        Policy::Best,
        None,
        7,
    );
    let (_, sk) = keys();
    let server = sk.public_key();
    let stranger = StaticSecret::from_bytes([99; 32]);
    let base = init_from(&stranger, &server, 1, &server, None);
    let macs = MacKeys::new(&server);
    const FLOOD: u32 = 6000;
    for i in 0..FLOOD {
        let mut m = base.clone();
        m[4..8].copy_from_slice(&i.to_be_bytes());
        macs.seal(&mut m, None);
        let from = SocketAddr::from((
            (0xc612_0000u32 + i).to_be_bytes(),
            1024 + (i % 50000) as u16,
        ));
        p.inject(Instant::from_micros(u64::from(i) * 500), from, m);
    }
    p.establish();
    p.traffic(
        200,
        Duration::from_millis(10),
        300,
        (true, true),
        Duration::from_secs(1),
        |_, _| {},
    );
    assert_eq!(numbers(&p.delivered_up), (0..200).collect::<Vec<_>>());
    assert_intact_unique(&p.delivered_down, false, 300, "down");
    let c = p.server.counters();
    let dh = c.rx_unknown_peer + c.rx_handshake_failed;
    // The real client's copies that were answered with cookies are not the flood's.
    let ours = p.client.counters().rx_cookie_replies;
    assert_eq!(
        dh + c.tx_cookie_replies - ours,
        u64::from(FLOOD),
        "every flood datagram counted"
    );
    // 3 s of flood: the first window's threshold, then nothing without a cookie.
    assert!(dh <= u64::from(LOAD_THRESHOLD) + 1, "{c:?}");
    assert!(
        c.handshakes >= 1 && c.rx_handshake_rate_limited == 0,
        "{c:?}"
    );
}
