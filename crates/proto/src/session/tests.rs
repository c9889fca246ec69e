//! Session tests live with the endpoint pair tests (`endpoint::tests`), which drive a real
//! client and server through handshakes; here only what needs no handshake.

use super::*;
use crate::crypto::StaticSecret;

#[test]
fn no_keys_means_counted_drop() {
    let id = StaticSecret::from_bytes([1; 32]).public_key().session_id();
    let mut s = Session::new(id, SessionConfig::default(), Side::Server);
    s.send_packet(Instant::ZERO, &[0x45, 0, 0, 20], Policy::Best);
    assert_eq!(s.counters().no_key_drops, 1);
    let mut buf = [0u8; 2048];
    assert!(s.poll_transmit(Instant::ZERO, &mut buf).is_none());
}

#[test]
fn garbage_is_refused_without_state_change() {
    let id = StaticSecret::from_bytes([1; 32]).public_key().session_id();
    let mut s = Session::new(id, SessionConfig::default(), Side::Server);
    let mut junk = vec![3u8, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 9];
    junk.extend([0u8; 40]);
    let from: SocketAddr = "192.0.2.9:1".parse().unwrap();
    let d = SealedData {
        receiver_index: 1,
        counter: 9,
        path: PathId(0),
        datagram: &mut junk,
    };
    assert!(!s.handle_datagram(Instant::ZERO, from, d));
    assert_eq!(s.paths().count(), 0);
    assert_eq!(s.counters().rx_unauthenticated, 1);
}
