//! A server's peers replaced mid-session (`Server::set_peers`, a configuration reload): a
//! peer whose key stays keeps its session under the new numbering — a two-way stream goes
//! on without a loss or a handshake while a new peer is listed before it — and a peer
//! whose key is gone is cut off at once.

use super::*;

const GAP: Duration = Duration::from_millis(5);
const SIZE: usize = 400;

/// The one session the server holds, whichever peer's it is.
fn session(p: &Pair) -> &crate::session::Session {
    p.server.peers().find_map(|s| s.session).expect("a session")
}

fn peer(name: &str, key: [u8; 32], net: &str) -> PeerConfig {
    PeerConfig {
        name: name.into(),
        public_key: StaticSecret::from_bytes(key).public_key(),
        allowed_ips: vec![net.parse().unwrap()],
    }
}

#[test]
fn a_kept_peer_keeps_its_session_when_the_list_changes() {
    let mut p = Pair::new(
        vec![Link::new(10, Some(20.0)), Link::new(20, Some(20.0))],
        Policy::Aggregate,
        None,
        91,
    );
    p.establish();
    let handshakes = p.client.counters().handshakes;
    let id = session(&p).id();
    let home = keys().0.public_key();
    let at = p.now + Duration::from_secs(1);
    let mut replaced = false;
    p.traffic(
        600,
        GAP,
        SIZE,
        (true, true),
        Duration::from_secs(1),
        |p, _| {
            if p.now >= at && !replaced {
                replaced = true;
                // A new peer first (so "home" moves from index 0 to 1), "home" renamed
                // and given the LAN behind it too.
                let mut home_cfg = peer("home-renamed", [0; 32], "10.200.0.2/32");
                home_cfg.public_key = home;
                home_cfg.allowed_ips.push("192.168.1.0/24".parse().unwrap());
                p.server
                    .set_peers(vec![peer("office", [33; 32], "10.200.0.3/32"), home_cfg]);
                p.server
                    .set_default_policy(Policy::Redundant { copies: None });
            }
        },
    );
    let names: Vec<&str> = p.server.peers().map(|s| s.config.name.as_str()).collect();
    assert_eq!(names, ["office", "home-renamed"]);
    assert_eq!(session(&p).id(), id, "the session was replaced");
    assert_eq!(
        p.client.counters().handshakes,
        handshakes,
        "a new handshake"
    );
    assert_eq!(
        assert_intact_unique(&p.delivered_up, true, SIZE, "up").len(),
        600
    );
    assert_eq!(
        assert_intact_unique(&p.delivered_down, false, SIZE, "down").len(),
        600
    );
    assert_eq!(p.server.counters().rx_unknown_index, 0);
}

#[test]
fn a_removed_peer_is_cut_off_at_once() {
    let mut p = Pair::new(vec![Link::new(10, Some(20.0))], Policy::Best, None, 92);
    p.establish();
    p.server
        .set_peers(vec![peer("office", [33; 32], "10.200.0.3/32")]);
    assert!(p.server.peers().all(|s| s.session.is_none()));
    let before = p.delivered_up.len();
    p.traffic(
        50,
        GAP,
        SIZE,
        (true, true),
        Duration::from_millis(500),
        |_, _| {},
    );
    assert_eq!(
        p.delivered_up.len(),
        before,
        "a removed peer's packet was delivered"
    );
    assert!(p.delivered_down.is_empty());
    let c = p.server.counters();
    assert!(c.rx_unknown_index >= 50, "{c:?}");
    assert_eq!(c.tx_no_route, 50, "{c:?}");
}
