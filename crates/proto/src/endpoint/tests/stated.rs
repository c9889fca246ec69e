//! The receiver states its own policy (`session/stated.rs`): the client's rules reach the
//! server inside the session and the server applies them to the client's downlink — here
//! a downlink-only flow the client never sent a packet of, so nothing could be learned.

use super::*;
use crate::path::PathState;
use crate::policy::LinkRule;

const GAP: Duration = Duration::from_millis(5);
const SIZE: usize = 600;

/// A pair whose client states `classifier` while the server's own default is
/// `server_default`.
fn pair_stating(links: Vec<Link>, classifier: Classifier, server_default: Policy) -> Pair {
    let n = links.len();
    let mut p = Pair::new(links, server_default, None, 81);
    let (ck, sk) = keys();
    p.client = Client::new(
        ClientConfig {
            local_key: ck,
            server_key: sk.public_key(),
            session: session_cfg(),
            classifier,
            epoch_us: 1_700_000_000_000_000,
            ciphers: CipherSet::ALL,
        },
        82,
    );
    for i in 0..n {
        p.client
            .add_link(Instant::ZERO, PathId(i as u8), SERVER.parse().unwrap());
    }
    p
}

/// The client states `only:` its slower link (RTT 60 ms) as its default; the server's own
/// default is `best`, which would use the 20 ms link. A downlink-only stream (a packet
/// every 5 ms) runs 9 s, the slow link cut from 3 s to 6 s: the server never puts a
/// data datagram on the fast link, holds the stream across the cut and delivers all of
/// it, in order, after the heal.
#[test]
fn the_server_applies_the_clients_stated_policy_to_its_downlink() {
    let only = Policy::Link(LinkRule::Only(PathId(1)));
    let mut p = pair_stating(
        vec![Link::new(10, Some(20.0)), Link::new(30, Some(20.0))],
        Classifier::uniform(only),
        Policy::Best,
    );
    p.establish();
    p.run_until(p.now + Duration::from_millis(300));
    let (epoch, stated) = p.server_session().stated_policy().expect("nothing stated");
    assert_eq!((epoch, stated.default), (1, only));
    assert!(p.client.session().stated_stats().acked);
    let t0 = p.now;
    let (cut, heal) = (t0 + Duration::from_secs(3), t0 + Duration::from_secs(6));
    let count = 9_000 / GAP.as_millis() as u32;
    p.traffic(
        count,
        GAP,
        SIZE,
        (false, true),
        Duration::from_secs(2),
        |p, _| {
            if p.now >= cut && p.now < heal && !p.up[1].blackhole {
                p.set_blackhole(1, true);
            }
            if p.now >= heal && p.up[1].blackhole {
                p.set_blackhole(1, false);
            }
        },
    );
    let on_fast = p
        .sent
        .iter()
        .filter(|s| !s.to_server && s.path == 0 && s.len >= DATA_MIN_LEN && s.at >= t0)
        .count();
    let got = assert_intact_unique(&p.delivered_down, false, SIZE, "stated");
    let c = p.server_session().counters();
    let first_after = p
        .delivered_down
        .iter()
        .find(|(t, _)| *t >= heal)
        .map(|(t, _)| t.saturating_since(heal));
    eprintln!(
        "stated only:1 downlink: {on_fast} data datagrams on link 0, {} of {count} delivered, \
         {} held and released, first after the heal +{first_after:?}",
        got.len(),
        c.hold_released
    );
    assert_eq!(on_fast, 0, "the server used the link the client excluded");
    assert_eq!(got.len() as u32, count, "lost downlink packets");
    assert!(numbers(&p.delivered_down).windows(2).all(|w| w[0] < w[1]));
    assert!(
        c.hold_released >= 500,
        "the server did not hold across the cut"
    );
    let down = p
        .server_events
        .iter()
        .any(|(t, e)| *t >= cut && *e == Event::PathState(PathId(1), PathState::Down));
    assert!(down, "the server never saw link 1 down");
}

/// A rule beats the stated default and the learned policy: the client's rule puts its
/// port 5004 flow on `backup:` link 0 while its default is `best`; the server applies it
/// to the downlink (link 0 carries nothing while link 1 is up).
#[test]
fn a_stated_rule_is_applied_to_the_reverse_flow() {
    let classifier = Classifier {
        rules: vec![crate::policy::Rule {
            name: "app".into(),
            protocol: None,
            ports: Some((5004, 5004)),
            dscp: None,
            policy: Policy::Link(LinkRule::Backup(PathId(0))),
        }],
        default: Policy::Best,
    };
    let mut p = pair_stating(
        vec![Link::new(10, Some(20.0)), Link::new(30, Some(20.0))],
        classifier,
        Policy::Best,
    );
    p.establish();
    p.run_until(p.now + Duration::from_millis(300));
    let t0 = p.now;
    p.traffic(
        600,
        GAP,
        SIZE,
        (true, true),
        Duration::from_secs(1),
        |_, _| {},
    );
    let data_on = |to_server: bool, path: u8| {
        p.sent
            .iter()
            .filter(|s| s.to_server == to_server && s.path == path)
            .filter(|s| s.len >= DATA_MIN_LEN && s.at >= t0)
            .count()
    };
    let (down0, down1, up0) = (data_on(false, 0), data_on(false, 1), data_on(true, 0));
    eprintln!(
        "stated rule backup:0 - downlink on link 0 {down0}, link 1 {down1}; uplink on link 0 {up0}"
    );
    assert_eq!(
        (down0, up0),
        (0, 0),
        "the backup link carried data while link 1 was up"
    );
    assert!(down1 >= 590);
    assert_eq!(
        assert_intact_unique(&p.delivered_down, false, SIZE, "rule").len(),
        600
    );
}

/// A reload replaces the rules mid-session (`Client::set_classifier`): the client states
/// `only:` link 1, then, 2 s into a two-way stream, `only:` link 0. The server takes the
/// new statement (epoch 2) within a few round trips and moves the downlink, the uplink
/// moves at once (300 ms allowed for both, for what was queued); nothing is lost or duplicated across the change and the session is
/// the same (no handshake).
#[test]
fn replaced_rules_move_both_directions_without_a_loss() {
    let only = |l: u8| Policy::Link(LinkRule::Only(PathId(l)));
    let mut p = pair_stating(
        vec![Link::new(10, Some(20.0)), Link::new(30, Some(20.0))],
        Classifier::uniform(only(1)),
        Policy::Best,
    );
    p.establish();
    p.run_until(p.now + Duration::from_millis(300));
    let handshakes = p.client.counters().handshakes;
    let t0 = p.now;
    let switch = t0 + Duration::from_secs(2);
    let mut switched = false;
    p.traffic(
        800,
        GAP,
        SIZE,
        (true, true),
        Duration::from_secs(1),
        |p, _| {
            if p.now >= switch && !switched {
                switched = true;
                assert!(p.client.set_classifier(Classifier::uniform(only(0))));
            }
        },
    );
    let settled = switch + Duration::from_millis(300);
    let data_on = |to_server: bool, path: u8, from: Instant, to: Instant| {
        p.sent
            .iter()
            .filter(|s| s.to_server == to_server && s.path == path)
            .filter(|s| s.len >= DATA_MIN_LEN && s.at >= from && s.at < to)
            .count()
    };
    let before = (data_on(true, 0, t0, switch), data_on(false, 0, t0, switch));
    let end = Instant::from_micros(u64::MAX);
    let after = (
        data_on(true, 1, settled, end),
        data_on(false, 1, settled, end),
    );
    eprintln!("rules replaced at +2 s: link 0 before {before:?}, link 1 after {after:?}");
    assert_eq!(before, (0, 0), "only:1 in force, yet link 0 carried data");
    assert_eq!(after, (0, 0), "only:0 in force, yet link 1 carried data");
    let (epoch, stated) = p.server_session().stated_policy().expect("nothing stated");
    assert_eq!((epoch, stated.default), (2, only(0)));
    assert_eq!(
        p.client.counters().handshakes,
        handshakes,
        "a new handshake"
    );
    assert_eq!(
        assert_intact_unique(&p.delivered_up, true, SIZE, "up").len(),
        800
    );
    assert_eq!(
        assert_intact_unique(&p.delivered_down, false, SIZE, "down").len(),
        800
    );
}
