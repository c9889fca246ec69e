//! Relays handed out by the server (`session/relays.rs`, PROTOCOL.md §15.7): the list
//! reaches a client that takes lists, despite loss and a downlink busy with full
//! datagrams; the newest list wins; a client that did not ask for lists never sees one.

use super::*;
use crate::detour::{Mode, RelaySpec};

fn relay(i: u8) -> RelaySpec {
    RelaySpec {
        name: format!("relay-{i}"),
        address: format!("192.0.2.{i}:51900").parse().unwrap(),
        key: crate::crypto::PublicKey([i; 32]),
        mode: if i.is_multiple_of(2) {
            Mode::Nat
        } else {
            Mode::Tunnel
        },
    }
}

/// A pair over one 20 ms link whose client takes relay lists.
fn pair(seed: u64) -> Pair {
    let mut p = Pair::new(vec![Link::new(10, Some(20.0))], Policy::Best, None, seed);
    p.client.accept_relays();
    p
}

/// The server's list arrives right after the handshake and is acknowledged; a second
/// list, set while the link is cut for 2 s (every copy lost), arrives once it heals, and
/// it is taken exactly once.
#[test]
fn the_list_arrives_and_is_resent_until_acknowledged() {
    let mut p = pair(91);
    assert!(p.server.set_relays(&[relay(1)]));
    p.establish();
    p.run_until(p.now + Duration::from_millis(300));
    assert_eq!(p.client.take_server_relays(), Some(vec![relay(1)]));
    assert_eq!(p.client.take_server_relays(), None, "taken once");
    let st = p.server_session().relays_stats();
    assert!(st.acked && st.relays == 1, "{st:?}");
    p.set_blackhole(0, true);
    assert!(p.server.set_relays(&[relay(2), relay(3)]));
    p.run_until(p.now + Duration::from_secs(2));
    assert_eq!(p.client.take_server_relays(), None, "through a blackhole");
    p.set_blackhole(0, false);
    p.run_until(p.now + Duration::from_secs(2));
    assert_eq!(
        p.client.take_server_relays(),
        Some(vec![relay(2), relay(3)])
    );
    let st = p.server_session().relays_stats();
    assert!(st.acked && st.relays == 2, "{st:?}");
    assert!(st.sent >= 3, "resent while lost: {st:?}");
    assert_eq!(p.client.session().relays_stats().epoch, st.epoch);
    assert_eq!(p.client.session().counters().rx_malformed, 0);
}

/// A downlink busy with full datagrams (no room for the list in any of them) still
/// delivers a new list at once: a PING of its own carries it (without it the list waited
/// 241 ms here, for a keepalive).
#[test]
fn a_busy_downlink_does_not_hold_the_list_back() {
    let mut p = pair(92);
    p.establish();
    p.run_until(p.now + Duration::from_millis(300));
    assert_eq!(
        p.client.take_server_relays(),
        Some(vec![]),
        "the server's empty list"
    );
    let size = session_cfg().max_datagram - crate::wire::OVERHEAD_BYTES;
    let t0 = p.now;
    let mut arrived = None;
    p.traffic(
        2_000,
        Duration::from_micros(1_000),
        size,
        (false, true),
        Duration::from_millis(200),
        |p, n| {
            if n == 500 {
                assert!(p.server.set_relays(&[relay(4)]));
            }
            if arrived.is_none() && p.client.take_server_relays().is_some() {
                arrived = Some(p.now);
            }
        },
    );
    let set_at = t0 + Duration::from_millis(500);
    let took = arrived
        .expect("the list never arrived")
        .saturating_since(set_at);
    eprintln!("relay list under a full downlink: arrived after {took:?}");
    assert!(took < Duration::from_millis(100), "{took:?}");
    assert!(!p.delivered_down.is_empty());
}

/// A client that did not say it takes lists (an old client's handshake) is sent none:
/// its datagrams carry no frame it would stop parsing at.
#[test]
fn a_client_that_takes_no_lists_is_sent_none() {
    let mut p = Pair::new(vec![Link::new(10, Some(20.0))], Policy::Best, None, 93);
    assert!(p.server.set_relays(&[relay(5)]));
    p.establish();
    p.traffic(
        200,
        Duration::from_millis(5),
        600,
        (true, true),
        Duration::from_millis(500),
        |_, _| {},
    );
    assert_eq!(p.server_session().relays_stats().sent, 0);
    assert_eq!(p.client.take_server_relays(), None);
    assert_eq!(p.client.session().counters().rx_malformed, 0);
    assert_eq!(
        assert_intact_unique(&p.delivered_down, false, 600, "down").len(),
        200
    );
}

/// A list that cannot be handed out is refused and leaves the one in force.
#[test]
fn an_invalid_list_is_not_set() {
    let mut p = pair(94);
    assert!(p.server.set_relays(&[relay(1)]));
    let nine: Vec<RelaySpec> = (1..10).map(relay).collect();
    assert!(!p.server.set_relays(&nine));
    assert!(!p.server.set_relays(&[relay(1), relay(1)]));
    assert_eq!(p.server.relays().1, &[relay(1)]);
    p.establish();
    p.run_until(p.now + Duration::from_millis(300));
    assert_eq!(p.client.take_server_relays(), Some(vec![relay(1)]));
}
