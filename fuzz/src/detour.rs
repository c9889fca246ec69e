//! Target of the relay protocol (`multihome_proto::detour`): the relay's request socket
//! and the client's answer parser read datagrams from anyone on the Internet.

use multihome_proto::crypto::StaticSecret;
use multihome_proto::detour::{
    emit_answer_payload, emit_request_payload, parse_answer_payload, parse_header,
    parse_request_payload, ClientConfig, DetourClient, DetourRelay, Mode, RelayConfig, Request,
};
use multihome_proto::Instant;
use std::net::SocketAddr;

/// Fuzz body: each record is one datagram, given to a relay that lists one client key and
/// to a client waiting for an answer; the bytes are also parsed as both payloads.
///
/// Checks: no panic; no datagram the fuzzer wrote is admitted, answered or changes the
/// relay's table (it cannot hold a listed client's key); the client accepts no answer;
/// a payload that parses emits back to the same bytes. Returns the number of records.
pub fn relay_request(data: &[u8]) -> usize {
    let client_key = StaticSecret::from_bytes([1; 32]);
    let relay_key = StaticSecret::from_bytes([2; 32]);
    let mut cfg = RelayConfig::new(relay_key.clone(), vec![client_key.public_key()]);
    cfg.max_requests_per_s = u32::MAX;
    let mut relay = DetourRelay::new(cfg, [3; 32]);
    let mut client = DetourClient::new(
        ClientConfig::new(client_key, relay_key.public_key(), 0),
        [4; 32],
    );
    let server: SocketAddr = "203.0.113.2:51820".parse().expect("literal");
    let _ = client.request(
        Instant::ZERO,
        Request {
            server,
            mode: Mode::Nat,
            release: false,
        },
    );
    let from: SocketAddr = "198.51.100.2:4000".parse().expect("literal");
    let mut n = 0;
    for (_, body) in crate::records(data) {
        n += 1;
        let _ = parse_header(body);
        if let Ok((ts, id, rq)) = parse_request_payload(body) {
            assert_eq!(&emit_request_payload(ts, id, &rq)[..], body);
        }
        if let Ok(a) = parse_answer_payload(body) {
            assert_eq!(&emit_answer_payload(&a)[..], body);
        }
        assert!(
            relay.handle_datagram(Instant::ZERO, from, body).is_none(),
            "a forged request was admitted"
        );
        assert!(
            !client.handle_datagram(Instant::ZERO, body),
            "a forged answer was accepted"
        );
    }
    assert!(relay.is_empty());
    assert_eq!(relay.counters().answers, 0);
    n
}
