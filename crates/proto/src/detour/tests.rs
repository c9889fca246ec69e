//! Round trips, refusals, bounds and parser robustness of the relay protocol.

use super::*;
use crate::crypto::StaticSecret;
use crate::Instant;
use proptest::prelude::*;
use std::net::SocketAddr;
use std::time::Duration;

const SERVER: &str = "203.0.113.2:51820";
const FROM: &str = "198.51.100.2:40001";

fn relay_key() -> StaticSecret {
    StaticSecret::from_bytes([7; 32])
}

fn client_key(i: u8) -> StaticSecret {
    StaticSecret::from_bytes([i; 32])
}

fn relay(clients: &[u8]) -> DetourRelay {
    let mut cfg = RelayConfig::new(
        relay_key(),
        clients
            .iter()
            .map(|&i| client_key(i).public_key())
            .collect(),
    );
    cfg.ports = (40000, 40099);
    cfg.max_per_client = 4;
    cfg.max_total = 6;
    cfg.max_requests_per_s = 1_000_000;
    DetourRelay::new(cfg, [9; 32])
}

fn client(i: u8) -> DetourClient {
    DetourClient::new(
        ClientConfig::new(
            client_key(i),
            relay_key().public_key(),
            1_700_000_000_000_000,
        ),
        [i; 32],
    )
}

fn req(server: &str, mode: Mode) -> Request {
    Request {
        server: server.parse().unwrap(),
        mode,
        release: false,
    }
}

/// One exchange: the client asks, the relay admits (action always succeeds), the client
/// reads the answer. Returns the relay's action and the client's answer (None: no answer).
fn exchange(
    c: &mut DetourClient,
    r: &mut DetourRelay,
    now: Instant,
    from: &str,
    rq: Request,
) -> (Option<Action>, Option<Answer>) {
    c.request(now, rq).unwrap();
    let msg = c.poll_transmit().unwrap();
    assert_eq!(msg.len(), REQUEST_LEN);
    let Some(adm) = r.handle_datagram(now, from.parse().unwrap(), &msg) else {
        return (None, None);
    };
    let action = adm.action;
    let mut out = [0u8; 128];
    let n = r.answer(adm, true, &mut out).unwrap();
    assert_eq!(n, ANSWER_LEN);
    assert!(n < REQUEST_LEN, "the relay must not amplify");
    assert!(c.handle_datagram(now, &out[..n]));
    match c.poll_event() {
        Some(ClientEvent::Answered { answer, .. }) => (Some(action), Some(answer)),
        other => panic!("expected an answer, got {other:?}"),
    }
}

#[test]
fn round_trip_install_renew_release() {
    let (mut c, mut r) = (client(1), relay(&[1]));
    let now = Instant::from_micros(1_000);
    let (action, answer) = exchange(&mut c, &mut r, now, FROM, req(SERVER, Mode::Nat));
    let answer = answer.unwrap();
    assert_eq!(answer.status, Status::Ok);
    assert_eq!(answer.lifetime_s, 300);
    assert_eq!(answer.observed, FROM.parse::<SocketAddr>().unwrap());
    assert!((40000..=40099).contains(&answer.relay_port));
    let Some(Action::Install(e)) = action else {
        panic!("{action:?}")
    };
    assert_eq!(e.port, answer.relay_port);
    assert_eq!(e.server, SERVER.parse::<SocketAddr>().unwrap());
    assert_eq!(r.len(), 1);

    // The same request again renews: same port, later expiry, no second entry.
    let later = now + Duration::from_secs(100);
    let (action, answer2) = exchange(&mut c, &mut r, later, FROM, req(SERVER, Mode::Nat));
    assert!(matches!(action, Some(Action::Renew(e2)) if e2.expires > e.expires));
    assert_eq!(answer2.unwrap().relay_port, answer.relay_port);
    assert_eq!(r.len(), 1);

    let mut rel = req(SERVER, Mode::Nat);
    rel.release = true;
    let (action, answer3) = exchange(&mut c, &mut r, later, FROM, rel);
    assert!(matches!(action, Some(Action::Remove(_))));
    assert_eq!(answer3.unwrap().status, Status::Released);
    assert!(r.is_empty());
    assert_eq!(r.counters().installed, 1);
    assert_eq!(r.counters().renewed, 1);
    assert_eq!(r.counters().released, 1);
}

#[test]
fn unknown_client_and_wrong_relay_key_get_nothing() {
    // A client whose key the relay does not list: verified, but never answered.
    let (mut c, mut r) = (client(2), relay(&[1]));
    let (action, answer) = exchange(&mut c, &mut r, Instant::ZERO, FROM, req(SERVER, Mode::Nat));
    assert_eq!((action, answer), (None, None));
    assert_eq!(r.counters().rx_unknown_client, 1);
    assert!(r.is_empty());

    // A client that believes in another relay key: message 1 does not verify.
    let mut c = DetourClient::new(
        ClientConfig::new(client_key(1), client_key(99).public_key(), 0),
        [1; 32],
    );
    let (action, _) = exchange(&mut c, &mut r, Instant::ZERO, FROM, req(SERVER, Mode::Nat));
    assert_eq!(action, None);
    assert_eq!(r.counters().rx_unauthenticated, 1);
    assert_eq!(r.counters().answers, 0);
}

#[test]
fn replayed_request_is_refused() {
    let (mut c, mut r) = (client(1), relay(&[1]));
    c.request(Instant::ZERO, req(SERVER, Mode::Nat)).unwrap();
    let msg = c.poll_transmit().unwrap();
    let from = FROM.parse().unwrap();
    assert!(r.handle_datagram(Instant::ZERO, from, &msg).is_some());
    // The same bytes again, and again from elsewhere: replays, no state change.
    assert!(r.handle_datagram(Instant::ZERO, from, &msg).is_none());
    let elsewhere = "192.0.2.9:1234".parse().unwrap();
    assert!(r.handle_datagram(Instant::ZERO, elsewhere, &msg).is_none());
    assert_eq!(r.counters().rx_replayed, 2);
    assert_eq!(r.len(), 1);
}

#[test]
fn forged_answer_is_ignored_and_request_retried_then_times_out() {
    let mut c = client(1);
    let t0 = Instant::ZERO;
    c.request(t0, req(SERVER, Mode::Tunnel)).unwrap();
    let first = c.poll_transmit().unwrap();
    let id = u32::from_be_bytes(first[4..8].try_into().unwrap());
    let mut forged = vec![0x42u8; ANSWER_LEN];
    emit_header(&mut forged, TYPE_ANSWER, id);
    assert!(!c.handle_datagram(t0, &forged));
    assert_eq!(c.counters().rx_invalid, 1);
    for attempt in 1..4 {
        let t = c.poll_timeout().unwrap();
        c.handle_timeout(t);
        let again = c.poll_transmit().expect("retried");
        assert_ne!(again[4..8], first[4..8], "attempt {attempt} reuses the id");
    }
    let t = c.poll_timeout().unwrap();
    c.handle_timeout(t);
    assert!(matches!(c.poll_event(), Some(ClientEvent::TimedOut { .. })));
    assert_eq!(c.pending(), 0);
}

#[test]
fn limits_hold_and_refusals_are_answered() {
    let (mut a, mut b, mut r) = (client(1), client(2), relay(&[1, 2]));
    let mut now = Instant::ZERO;
    for port in 0..10u16 {
        now = now + Duration::from_millis(1);
        let from = format!("198.51.100.2:{}", 1000 + port);
        let (_, ans) = exchange(&mut a, &mut r, now, &from, req(SERVER, Mode::Nat));
        let want = if port < 4 {
            Status::Ok
        } else {
            Status::ClientLimit
        };
        assert_eq!(ans.unwrap().status, want);
    }
    for port in 0..4u16 {
        let from = format!("198.51.100.3:{}", 1000 + port);
        let (_, ans) = exchange(&mut b, &mut r, now, &from, req(SERVER, Mode::Tunnel));
        let want = if port < 2 {
            Status::Ok
        } else {
            Status::RelayFull
        };
        assert_eq!(ans.unwrap().status, want, "port {port}");
    }
    assert_eq!(r.len(), 6);
    // Refused destinations and families.
    for (server, mode) in [
        ("127.0.0.1:80", Mode::Tunnel),
        ("224.0.0.1:80", Mode::Tunnel),
        ("[2001:db8::1]:80", Mode::Nat),
        ("203.0.113.2:0", Mode::Tunnel),
    ] {
        let (_, ans) = exchange(&mut b, &mut r, now, "198.51.100.3:9", req(server, mode));
        assert_eq!(ans.unwrap().status, Status::DestinationRefused, "{server}");
    }
}

#[test]
fn failed_install_and_expiry_free_the_entry() {
    let (mut c, mut r) = (client(1), relay(&[1]));
    c.request(Instant::ZERO, req(SERVER, Mode::Nat)).unwrap();
    let msg = c.poll_transmit().unwrap();
    let adm = r
        .handle_datagram(Instant::ZERO, FROM.parse().unwrap(), &msg)
        .unwrap();
    let mut out = [0u8; ANSWER_LEN];
    r.answer(adm, false, &mut out).unwrap();
    assert!(c.handle_datagram(Instant::ZERO, &out));
    assert!(matches!(
        c.poll_event(),
        Some(ClientEvent::Answered { answer, .. }) if answer.status == Status::Failed && answer.relay_port == 0
    ));
    assert!(r.is_empty());

    let t = Instant::from_micros(5);
    let (_, ans) = exchange(&mut c, &mut r, t, FROM, req(SERVER, Mode::Nat));
    assert_eq!(ans.unwrap().status, Status::Ok);
    let deadline = r.poll_timeout().unwrap();
    assert_eq!(deadline, t + Duration::from_secs(300));
    assert!(r
        .poll_expired(deadline - Duration::from_micros(1))
        .is_none());
    assert!(r.poll_expired(deadline).is_some());
    assert!(r.is_empty() && r.poll_timeout().is_none());
    assert_eq!(r.client_entries(0), 0);
}

#[test]
fn rate_limit_drops_unread() {
    let mut cfg = RelayConfig::new(relay_key(), vec![client_key(1).public_key()]);
    cfg.max_requests_per_s = 3;
    let mut r = DetourRelay::new(cfg, [0; 32]);
    let mut c = client(1);
    for i in 0..5u16 {
        c.request(Instant::ZERO, req(SERVER, Mode::Nat)).unwrap();
        let msg = c.poll_transmit().unwrap();
        let from = SocketAddr::from(([198, 51, 100, 2], 1000 + i));
        let _ = r.handle_datagram(Instant::ZERO, from, &msg);
    }
    assert_eq!(r.counters().rx_rate_limited, 2);
    assert_eq!(r.len(), 3);
}

fn any_addr() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>()).prop_map(|(a, p)| SocketAddr::from((a, p))),
        (any::<[u8; 16]>(), any::<u16>()).prop_map(|(a, p)| SocketAddr::from((a, p))),
    ]
}

proptest! {
    #[test]
    fn payloads_round_trip(
        ts in any::<u64>(), id in any::<u32>(), server in any_addr(), observed in any_addr(),
        nat in any::<bool>(), release in any::<bool>(), port in any::<u16>(), life in any::<u32>(),
        status in 0u8..8,
    ) {
        let mode = if nat { Mode::Nat } else { Mode::Tunnel };
        let rq = Request { server, mode, release };
        prop_assert_eq!(parse_request_payload(&emit_request_payload(ts, id, &rq)), Ok((ts, id, rq)));
        let mut p = emit_answer_payload(&Answer {
            request_id: id, status: Status::Ok, mode, relay_port: port, lifetime_s: life, observed,
        });
        p[4] = status;
        let a = parse_answer_payload(&p).unwrap();
        prop_assert_eq!(a.status as u8, status);
        prop_assert_eq!(emit_answer_payload(&a), p);
    }

    /// Truncated, extended or garbage datagrams never panic, never get an answer and never
    /// change the table; the parsers never panic either.
    #[test]
    fn garbage_never_panics_nor_admits(
        data in proptest::collection::vec(any::<u8>(), 0..200),
        cut in 0usize..200, kind in prop_oneof![Just(TYPE_REQUEST), Just(TYPE_ANSWER), any::<u8>()],
    ) {
        let mut r = relay(&[1]);
        let mut c = client(1);
        let from: SocketAddr = FROM.parse().unwrap();
        let mut d = data.clone();
        if let Some(b) = d.first_mut() { *b = kind; }
        for x in [&data[..], &d[..]] {
            let _ = parse_header(x);
            let _ = parse_request_payload(x);
            let _ = parse_answer_payload(x);
            prop_assert!(r.handle_datagram(Instant::ZERO, from, x).is_none());
            prop_assert!(!c.handle_datagram(Instant::ZERO, x));
        }
        // A valid request cut short or with one byte flipped is refused too.
        c.request(Instant::ZERO, req(SERVER, Mode::Nat)).unwrap();
        let msg = c.poll_transmit().unwrap();
        prop_assert!(r.handle_datagram(Instant::ZERO, from, &msg[..cut.min(msg.len() - 1)]).is_none());
        let mut flipped = msg.clone();
        let at = 8 + cut % (msg.len() - 8);
        flipped[at] ^= 1 + (data.len() as u8 % 255);
        prop_assert!(r.handle_datagram(Instant::ZERO, from, &flipped).is_none());
        prop_assert!(r.is_empty());
        prop_assert_eq!(r.counters().answers, 0);
    }

    /// Whatever mix of sources, servers, modes and releases a set of listed clients asks
    /// for, the table stays within its bounds and its indexes agree.
    #[test]
    fn table_stays_bounded(ops in proptest::collection::vec((0u8..3, 0u16..12, 0u8..3, any::<bool>()), 1..60)) {
        let mut r = relay(&[1, 2, 3]);
        let mut clients = [client(1), client(2), client(3)];
        let mut now = Instant::ZERO;
        for (who, sport, srv, release) in ops {
            now = now + Duration::from_secs(20);
            while r.poll_expired(now).is_some() {}
            let c = &mut clients[usize::from(who)];
            let from = format!("198.51.100.{}:{}", who + 2, 1000 + sport);
            let mut rq = req(&format!("203.0.113.{}:9000", srv + 2), if srv == 0 { Mode::Tunnel } else { Mode::Nat });
            rq.release = release;
            let _ = exchange(c, &mut r, now, &from, rq);
            prop_assert!(r.len() <= 6);
            for i in 0..3 {
                prop_assert!(r.client_entries(i) <= 4);
                prop_assert_eq!(r.client_entries(i), r.entries().filter(|e| e.client == i).count());
            }
        }
    }
}
