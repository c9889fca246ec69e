//! Hostile input: a client with a key the server does not know; random, truncated,
//! replayed and forged datagrams injected at the server during a stream; an authenticated
//! peer sending extreme sequence numbers. Each refusal must be counted in the right
//! counter and change nothing a user can see.

use super::*;
use crate::crypto::cookie::MacKeys;
use crate::crypto::TAG_LEN;
use crate::endpoint::handshake_retry;
use crate::session::SessionCounters;
use crate::wire::{COOKIE_REPLY_LEN, DATA_HEADER_LEN, HANDSHAKE_INIT_LEN, HANDSHAKE_RESP_LEN};

/// A client whose key is not in the peer list retries forever and never gets a byte back
/// (no answer means no amplification and no oracle for key guessing).
#[test]
fn unknown_client_key_gets_no_answer() {
    let stranger = StaticSecret::from_bytes([99; 32]);
    let mut p = Pair::new(
        vec![Link::new(10, None), Link::new(30, None)],
        Policy::Best,
        Some(stranger),
        5,
    );
    let end = Pair::at(6_000);
    p.run_until(Pair::at(5_500));
    p.client.handle_tun_packet(p.now, &packet(true, 0, 300));
    p.run_until(end);
    assert!(!p.client.is_established());
    let inits = p.sent.iter().filter(|s| s.to_server).count() as u64;
    // One attempt on each of the 2 links at 0 s and after every retry wait: the first
    // wait each time (no cookie reply came, so nothing says the server is loaded), up to a
    // quarter more: as many as the shortest waits allow, at least as many as the longest.
    let attempts_by = |stretch: f64| {
        let (mut at, mut n) = (Duration::ZERO, 0u64);
        while Instant::ZERO + at <= end {
            at += handshake_retry(0).mul_f64(stretch);
            n += 1;
        }
        n
    };
    let (fewest, most) = (attempts_by(1.25), attempts_by(1.0));
    assert!(
        (2 * fewest..=2 * most).contains(&inits),
        "client attempts: {inits} initiations, {fewest}..={most} per link expected"
    );
    // Let the last ones arrive (the next attempt is at least a second away).
    p.run_until(end + Duration::from_millis(100));
    let c = p.server.counters();
    assert_eq!(
        c.rx_unknown_peer, inits,
        "every initiation refused as unknown"
    );
    assert_eq!(c.handshakes, 0);
    assert!(p.server.peers().all(|x| x.session.is_none()));
    assert!(p.sent.iter().all(|s| s.to_server), "server answered");
    assert!(p.delivered_up.is_empty());
}

/// Which counter the server must increment for an injected datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Refusal {
    Garbage,
    UnknownIndex,
    BadMac1,
    HandshakeFailed,
    HandshakeReplayed,
    Unauthenticated,
    Replayed,
}

/// Expected refusal of random bytes, from the layout in `docs/PROTOCOL.md` §2 (an
/// independent model of the outer parser, not a call into it).
fn expected(b: &[u8], live_index: u32) -> Refusal {
    let Some(&t) = b.first() else {
        return Refusal::Garbage;
    };
    let reserved_ok = b.len() >= 4 && b[2] == 0 && b[3] == 0;
    match t {
        // Random bytes do not carry the right mac1 (2^-128).
        1 if b.len() == HANDSHAKE_INIT_LEN && reserved_ok => Refusal::BadMac1,
        3 if b.len() >= DATA_HEADER_LEN + TAG_LEN && reserved_ok => {
            let index = u32::from_be_bytes(b[4..8].try_into().unwrap());
            if index == live_index {
                Refusal::Unauthenticated
            } else {
                Refusal::UnknownIndex
            }
        }
        _ => Refusal::Garbage,
    }
}

/// Random datagrams shaped enough like ours to reach every stage of the parser: the type
/// byte and reserved field are often valid, the lengths often the handshake sizes.
fn random_datagram(rng: &mut ChaCha8Rng) -> Vec<u8> {
    let len = match rng.next_u32() % 9 {
        0 => HANDSHAKE_INIT_LEN,
        1 => HANDSHAKE_RESP_LEN,
        2 => COOKIE_REPLY_LEN,
        _ => (rng.next_u32() % 1500) as usize,
    };
    let mut b = vec![0u8; len];
    rng.fill_bytes(&mut b);
    if len >= 4 && !rng.next_u32().is_multiple_of(4) {
        b[0] = 1 + (rng.next_u32() % 4) as u8;
        b[2..4].fill(0);
    }
    b
}

fn counts(p: &Pair) -> (EndpointCounters, SessionCounters) {
    (p.server.counters(), p.server_session().counters())
}

#[test]
fn injected_garbage_is_counted_and_harmless() {
    const COUNT: u32 = 1000;
    const SIZE: usize = 400;
    let mut p = Pair::new(
        vec![Link::new(10, None), Link::new(30, None)],
        Policy::Best,
        None,
        21,
    );
    p.capture_up = true;
    p.establish();
    let init = p.captured_up[0].1.clone();
    assert_eq!(init.len(), HANDSHAKE_INIT_LEN);
    let live_index = p
        .client
        .session()
        .keys
        .current
        .as_ref()
        .unwrap()
        .remote_index;
    let (ep0, s0) = counts(&p);
    let attacker: SocketAddr = "192.0.2.66:666".parse().unwrap();
    let server_macs = MacKeys::new(&p.server_cfg.local_key.public_key());
    let mut rng = ChaCha8Rng::seed_from_u64(0x6a4b);
    let mut want: std::collections::BTreeMap<Refusal, u64> = Default::default();
    let mut injected = 0u64;
    p.traffic(
        COUNT,
        Duration::from_millis(5),
        SIZE,
        (true, true),
        Duration::from_secs(1),
        |p, n| {
            let now = p.now;
            // Real datagrams sent at least 100 ms ago have been processed (RTT ≤ 60 ms).
            let old: Vec<usize> = (0..p.captured_up.len())
                .filter(|&i| {
                    let (t, b) = &p.captured_up[i];
                    now.saturating_since(*t) >= Duration::from_millis(100) && b[0] == 3
                })
                .collect();
            let mut add = |p: &mut Pair, b: Vec<u8>, r: Refusal| {
                *want.entry(r).or_default() += 1;
                injected += 1;
                p.inject(now, attacker, b);
            };
            for _ in 0..2 {
                let b = random_datagram(&mut rng);
                let r = expected(&b, live_index);
                add(p, b, r);
            }
            if n % 20 == 0 {
                // Random Noise bytes behind a right mac1 (anyone who knows the server's
                // public key can write it) reach the Diffie-Hellman and fail there.
                let mut b = random_datagram(&mut rng);
                b.resize(HANDSHAKE_INIT_LEN, 0);
                b[..4].copy_from_slice(&[1, 0, 0, 0]);
                server_macs.seal(&mut b, None);
                add(p, b, Refusal::HandshakeFailed);
            }
            if n % 100 == 0 {
                add(p, init.clone(), Refusal::HandshakeReplayed);
                let cut = (rng.next_u32() as usize) % init.len();
                add(p, init[..cut].to_vec(), Refusal::Garbage);
            }
            if !old.is_empty() {
                let i = old[rng.next_u32() as usize % old.len()];
                let real = p.captured_up[i].1.clone();
                add(p, real.clone(), Refusal::Replayed);
                // A truncated copy keeps its (used) counter: the replay check, which comes
                // before the costlier authentication, refuses it — unless the header is
                // cut.
                let cut = (rng.next_u32() as usize) % real.len();
                let r = if cut < DATA_HEADER_LEN + TAG_LEN {
                    Refusal::Garbage
                } else {
                    Refusal::Replayed
                };
                add(p, real[..cut].to_vec(), r);
                // A copy under a fresh counter (which is authenticated data) is a forgery.
                let mut forged = real;
                let fresh = (1u64 << 40) + u64::from(rng.next_u32());
                forged[8..16].copy_from_slice(&fresh.to_be_bytes());
                add(p, forged, Refusal::Unauthenticated);
            }
            // Keep the capture short: only the recent past is replayed.
            p.captured_up
                .retain(|(t, _)| now.saturating_since(*t) < Duration::from_secs(2));
        },
    );
    let (ep, s) = counts(&p);
    let got = [
        (Refusal::Garbage, ep.rx_garbage - ep0.rx_garbage),
        (
            Refusal::UnknownIndex,
            ep.rx_unknown_index - ep0.rx_unknown_index,
        ),
        (Refusal::BadMac1, ep.rx_bad_mac1 - ep0.rx_bad_mac1),
        (
            Refusal::HandshakeFailed,
            ep.rx_handshake_failed - ep0.rx_handshake_failed,
        ),
        (
            Refusal::HandshakeReplayed,
            ep.rx_handshake_replayed - ep0.rx_handshake_replayed,
        ),
        (
            Refusal::Unauthenticated,
            s.rx_unauthenticated - s0.rx_unauthenticated,
        ),
        (Refusal::Replayed, s.rx_replayed - s0.rx_replayed),
    ];
    for (r, n) in got {
        assert_eq!(n, want.get(&r).copied().unwrap_or(0), "{r:?}: {want:?}");
    }
    // Every category was exercised (so the exact counts above mean something).
    assert_eq!(want.len(), 7, "{want:?}");
    assert_eq!(got.iter().map(|g| g.1).sum::<u64>(), injected);
    assert_eq!(s.rx_malformed, s0.rx_malformed);
    assert_eq!(ep.handshakes, ep0.handshakes, "garbage made a handshake");
    // The user sees the stream exactly as sent, once, in order; nothing followed the
    // attacker's address.
    assert_eq!(numbers(&p.delivered_up), (0..COUNT).collect::<Vec<_>>());
    assert_intact_unique(&p.delivered_up, true, SIZE, "up");
    assert_eq!(numbers(&p.delivered_down), (0..COUNT).collect::<Vec<_>>());
    assert!(p
        .server_events
        .iter()
        .all(|(_, e)| !matches!(e, Event::PathRoamed(..))));
    assert!(p.server_session().paths().all(|x| x.remote() != attacker));
}

/// Seals `plain` as the client would on path 0, under `counter` (one it has not used).
fn forge_as_client(p: &Pair, counter: u64, plain: &[u8]) -> Vec<u8> {
    let kp = p.client.session().keys.current.as_ref().unwrap();
    let mut d = vec![0u8; DATA_HEADER_LEN + plain.len() + TAG_LEN];
    d[0] = 3;
    d[4..8].copy_from_slice(&kp.remote_index.to_be_bytes());
    d[8..16].copy_from_slice(&counter.to_be_bytes());
    d[DATA_HEADER_LEN..DATA_HEADER_LEN + plain.len()].copy_from_slice(plain);
    let (aad, rest) = d.split_at_mut(DATA_HEADER_LEN);
    kp.seal.seal(counter, aad, rest, plain.len()).unwrap();
    d
}

/// An authenticated peer (a compromised client) sends DATA frames with the largest
/// sequence numbers: the server must neither crash nor deliver a packet twice. (Found by
/// the `session_data` fuzz target: `data_seq = u64::MAX` overflowed `next = counter + 1`
/// in `ReplayWindow::check_and_set`.) Jumping its own numbers only silences the peer's
/// later packets — as if it sent nothing — which it could do anyway.
#[test]
fn extreme_sequence_numbers_from_an_authenticated_peer() {
    use crate::wire::{DataFlags, DataFrame, FrameWriter, InnerHeader};
    let mut p = Pair::new(vec![Link::new(10, None)], Policy::Best, None, 61);
    p.establish();
    p.traffic(
        50,
        Duration::from_millis(10),
        300,
        (true, false),
        Duration::ZERO,
        |_, _| {},
    );
    let intruder = packet(true, 9_999, 300);
    for (i, seq) in [u64::MAX, u64::MAX, u64::MAX - 1, u64::MAX - 1]
        .into_iter()
        .enumerate()
    {
        let mut plain = vec![0u8; 400];
        let mut w = FrameWriter::new(&mut plain);
        w.inner_header(InnerHeader {
            path_seq: 0,
            send_time_us: 0,
        })
        .unwrap();
        w.data(&DataFrame {
            data_seq: seq,
            flags: DataFlags::new(0, false),
            pred_gap: 0,
            deadline_ms: 0,
            payload: &intruder,
        })
        .unwrap();
        let n = w.len();
        // Ahead of the client's own counters but within the replay window, so its later
        // datagrams still pass the nonce check and only the data_seq jump shows.
        let next = p
            .client
            .session()
            .keys
            .current
            .as_ref()
            .unwrap()
            .seal
            .counter();
        let d = forge_as_client(&p, next + 5_000 + i as u64, &plain[..n]);
        let from = p.client_addrs[0];
        p.inject(p.now, from, d);
        p.run_until(p.now + Duration::from_millis(1));
    }
    let twice = numbers(&p.delivered_up)
        .iter()
        .filter(|&&n| n == 9_999)
        .count();
    assert!(twice <= 1, "a sequence number was delivered {twice} times");
    let dup0 = p.server_session().counters().rx_duplicates;
    p.traffic(
        50,
        Duration::from_millis(10),
        300,
        (true, false),
        Duration::from_secs(1),
        |_, _| {},
    );
    assert_eq!(numbers(&p.delivered_up).len(), 50 + twice);
    assert_eq!(p.server_session().counters().rx_duplicates, dup0 + 50);
}

/// An authenticated peer's statements (`session/stated.rs`): one beyond the bounds (33
/// rules) or with a link id no session can have is refused whole and counted, the one
/// in force stays; a valid newer one replaces it; an older one never does.
#[test]
fn a_stated_policy_beyond_the_bounds_is_refused_whole() {
    use crate::wire::stated::{PolicyFrame, MAX_STATED_RULES, RULE_LEN};
    use crate::wire::{FrameWriter, InnerHeader};
    let mut p = Pair::new(vec![Link::new(10, None)], Policy::Aggregate, None, 64);
    p.establish();
    p.run_until(p.now + Duration::from_millis(300));
    assert_eq!(p.server_session().stated_policy().map(|(e, _)| e), Some(1));
    let mut counter = p
        .client
        .session()
        .keys
        .current
        .as_ref()
        .unwrap()
        .seal
        .counter()
        + 1000;
    let mut send = |p: &mut Pair, epoch: u32, default: (u8, u16), rules: &[u8]| {
        let mut plain = vec![0u8; 600];
        let mut w = FrameWriter::new(&mut plain);
        w.inner_header(InnerHeader {
            path_seq: 0,
            send_time_us: 0,
        })
        .unwrap();
        w.policy(&PolicyFrame {
            epoch,
            default,
            rules,
        })
        .unwrap();
        let n = w.len();
        counter += 1;
        let d = forge_as_client(p, counter, &plain[..n]);
        let from = p.client_addrs[0];
        p.inject(p.now, from, d);
        p.run_until(p.now + Duration::from_millis(1));
    };
    let malformed = p.server_session().counters().rx_malformed;
    let too_many = vec![0u8; (MAX_STATED_RULES + 1) * RULE_LEN];
    send(&mut p, 5, (0, 0), &too_many);
    send(&mut p, 6, (4, 16), &[]);
    let s = p.server_session();
    assert_eq!(s.stated_stats().refused, 2);
    assert_eq!(s.counters().rx_malformed, malformed + 2);
    assert_eq!(
        s.stated_policy().map(|(e, c)| (e, c.default)),
        Some((1, Policy::Aggregate))
    );
    send(&mut p, 7, (0, 0), &[]);
    send(&mut p, 3, (2, 0), &[]);
    let s = p.server_session();
    assert_eq!(
        s.stated_policy().map(|(e, c)| (e, c.default)),
        Some((7, Policy::Best))
    );
}
