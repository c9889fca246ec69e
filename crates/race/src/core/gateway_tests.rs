//! Tests of the gateway: bounds, counters, scopes, pins, probes, and AvMet converging
//! through whole races driven in virtual time.

use super::*;
use crate::core::conn::Action;
use std::net::Ipv4Addr;

fn t(ms: u64) -> Instant {
    Instant::from_micros(ms * 1000)
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn cfg(predictor: PredictorConfig) -> GatewayConfig {
    GatewayConfig {
        n_uplinks: 2,
        predictor,
        scope: Scope::Global,
        connect_timeout: ms(3000),
        max_connections: 4,
        probe_interval: None,
        dscp_pins: vec![],
    }
}

const DST: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 80, 0, 1));

/// Runs one race to its end: `connect[i]` is uplink i's handshake time (None: never).
fn run_race(gw: &mut Gateway, start: Instant, connect: [Option<u64>; 2]) -> Vec<Action> {
    let mut race = gw.begin(start, DST, None).expect("not busy");
    let mut events: Vec<(Instant, UplinkId)> = connect
        .iter()
        .enumerate()
        .filter_map(|(i, c)| c.map(|c| (start + ms(c), UplinkId(i as u8))))
        .collect();
    events.sort();
    let mut actions = Vec::new();
    let mut ev = events.into_iter().peekable();
    loop {
        actions.extend(std::iter::from_fn(|| race.poll_action()));
        if race.outcome().is_some() {
            break;
        }
        let next_ev = ev.peek().map(|e| e.0);
        match (next_ev, race.poll_timeout()) {
            (Some(e), Some(d)) if d < e => race.handle_timeout(d),
            (Some(_), _) => {
                let (at, u) = ev.next().unwrap();
                // Only attempts that were started can complete.
                if matches!(race.state(u), Some(AttemptState::Pending(_))) {
                    race.handle_connected(at, u);
                }
            }
            (None, Some(d)) => race.handle_timeout(d),
            (None, None) => break,
        }
    }
    actions.extend(std::iter::from_fn(|| race.poll_action()));
    let now = race.outcome().map_or(start, |o| o.1);
    gw.end_race(now, DST, &race);
    gw.release();
    actions
}

fn used(actions: &[Action]) -> Option<UplinkId> {
    actions.iter().find_map(|a| match a {
        Action::Use(u) => Some(*u),
        _ => None,
    })
}

/// AvMet converges on the uplink that usually connects first, and once it has, uses it
/// even in races where the other one was a little faster (the delay queue at work).
#[test]
fn avmet_converges_to_the_better_uplink() {
    let mut gw = Gateway::new(
        cfg(PredictorConfig::AvMet {
            alpha: 0.9,
            delay: ms(100),
        }),
        1,
        t(0),
    )
    .unwrap();
    // Uplink 1 is usually faster (20 ms vs 40 ms); every 4th race uplink 0 is 10 ms faster.
    let mut used_late = Vec::new();
    for k in 0..60u64 {
        let connect = if k % 4 == 3 {
            [Some(30), Some(40)]
        } else {
            [Some(40), Some(20)]
        };
        let a = run_race(&mut gw, t(k * 1000), connect);
        if k >= 20 {
            used_late.push(used(&a).unwrap());
        }
    }
    let st = gw.status();
    assert_eq!(st.best, UplinkId(1));
    assert!(st.global.wins().curbest().unwrap() > 0.6);
    assert!(used_late.iter().all(|u| *u == UplinkId(1)), "{used_late:?}");
    assert_eq!(st.uplinks[1].wins, 45);
    assert_eq!(st.uplinks[0].wins, 15);
    assert_eq!(st.uplinks[0].attempts, 60);
    assert_eq!(st.races, (60, 0, 0));
    assert_eq!(st.active, 0);
}

#[test]
fn race_follows_every_fluctuation() {
    let mut gw = Gateway::new(cfg(PredictorConfig::Race), 1, t(0)).unwrap();
    let a = run_race(&mut gw, t(0), [Some(30), Some(40)]);
    assert_eq!(used(&a), Some(UplinkId(0)));
    let a = run_race(&mut gw, t(1000), [Some(50), Some(40)]);
    assert_eq!(used(&a), Some(UplinkId(1)));
    // A blackholed uplink: the other connects; the dead attempt is closed, not timed out.
    let a = run_race(&mut gw, t(2000), [None, Some(40)]);
    assert_eq!(used(&a), Some(UplinkId(1)));
    assert!(a.contains(&Action::Close(UplinkId(0))));
    // Nothing answers: both time out and the client is refused.
    let a = run_race(&mut gw, t(3000), [None, None]);
    assert_eq!(a.last(), Some(&Action::RefuseClient));
    let st = gw.status();
    assert_eq!(st.uplinks[0].timeouts, 1);
    assert_eq!(st.uplinks[1].timeouts, 1);
    assert_eq!(st.uplinks[0].abandoned, 2);
    assert_eq!(st.races, (3, 0, 1));
}

#[test]
fn the_bound_refuses_and_counts() {
    let mut gw = Gateway::new(cfg(PredictorConfig::Race), 1, t(0)).unwrap();
    let races: Vec<Race> = (0..4).map(|_| gw.begin(t(0), DST, None).unwrap()).collect();
    assert_eq!(
        gw.begin(t(0), DST, None).unwrap_err(),
        RaceError::Busy { limit: 4 }
    );
    assert_eq!(gw.status().busy_refusals, 1);
    drop(races);
    gw.release();
    assert!(gw.begin(t(1), DST, None).is_ok());
}

#[test]
fn dscp_pins_a_connection() {
    let mut c = cfg(PredictorConfig::Race);
    c.dscp_pins = vec![(10, UplinkId(1))];
    let mut gw = Gateway::new(c, 1, t(0)).unwrap();
    let mut r = gw.begin(t(0), DST, Some(10)).unwrap();
    assert_eq!(r.poll_action(), Some(Action::Start(UplinkId(1))));
    assert_eq!(r.poll_action(), None);
    let mut r = gw.begin(t(0), DST, Some(0)).unwrap();
    assert_eq!(r.poll_action(), Some(Action::Start(UplinkId(0))));
    assert_eq!(gw.flow_uplink(t(0), DST, Some(10)), UplinkId(1));

    let mut bad = cfg(PredictorConfig::Race);
    bad.dscp_pins = vec![(64, UplinkId(0))];
    assert!(Gateway::new(bad, 1, t(0)).is_err());
}

#[test]
fn per_destination_state_is_bounded() {
    let mut c = cfg(PredictorConfig::avmet_wired());
    c.scope = Scope::Destination { max_entries: 2 };
    c.max_connections = 100;
    let mut gw = Gateway::new(c, 1, t(0)).unwrap();
    for i in 0..5u8 {
        let dst = IpAddr::V4(Ipv4Addr::new(10, 0, 0, i));
        let mut r = gw.begin(t(u64::from(i)), dst, None).unwrap();
        r.handle_connected(t(u64::from(i) + 1), UplinkId(0));
        gw.end_race(t(u64::from(i) + 1), dst, &r);
    }
    assert_eq!(gw.status().destinations, 2);
    assert_eq!(gw.status().global.wins().samples(), 0, "global untouched");
}

#[test]
fn probes_are_scheduled_with_jitter_and_feed_ett() {
    let mut c = cfg(PredictorConfig::Probe);
    c.probe_interval = Some(ms(1000));
    let mut gw = Gateway::new(c, 7, t(0)).unwrap();
    assert_eq!(gw.poll_probe(t(0)), Some(UplinkId(0)));
    assert_eq!(gw.poll_probe(t(0)), Some(UplinkId(1)));
    assert_eq!(gw.poll_probe(t(0)), None);
    let next = gw.probe_timeout().unwrap();
    assert!(next >= t(900) && next < t(1100), "{next:?}");
    gw.handle_probe(UplinkId(0), Some(ms(50)));
    gw.handle_probe(UplinkId(1), Some(ms(20)));
    assert_eq!(gw.flow_uplink(t(5), DST, None), UplinkId(1));
    let mut r = gw.begin(t(5), DST, None).unwrap();
    assert_eq!(r.poll_action(), Some(Action::Start(UplinkId(1))));
    for _ in 0..20 {
        gw.handle_probe(UplinkId(1), None);
    }
    assert_eq!(gw.flow_uplink(t(6), DST, None), UplinkId(0));
    assert_eq!(gw.status().uplinks[1].probe_losses, 20);

    // Same seed, same schedule.
    let mut c2 = cfg(PredictorConfig::Probe);
    c2.probe_interval = Some(ms(1000));
    let mut a = Gateway::new(c2.clone(), 9, t(0)).unwrap();
    let mut b = Gateway::new(c2, 9, t(0)).unwrap();
    for _ in 0..2 {
        a.poll_probe(t(0));
        b.poll_probe(t(0));
    }
    assert_eq!(a.probe_timeout(), b.probe_timeout());
}

/// UDP flows follow the predictor a race would: after uplink 1 wins the races, new flows
/// go to uplink 1, and each flow is counted on its uplink.
#[test]
fn udp_flows_follow_avmet_and_are_counted() {
    let mut c = cfg(PredictorConfig::AvMet {
        alpha: 0.5,
        delay: ms(0),
    });
    c.max_connections = 100;
    let mut gw = Gateway::new(c, 1, t(0)).unwrap();
    assert_eq!(
        gw.flow_uplink(t(0), DST, None),
        UplinkId(0),
        "ties go first"
    );
    for i in 0..4 {
        let start = t(100 * i);
        run_race(&mut gw, start, [None, Some(5)]);
    }
    assert_eq!(gw.flow_uplink(t(500), DST, None), UplinkId(1));
    assert_eq!(gw.flow_uplink(t(501), DST, None), UplinkId(1));
    let st = gw.status();
    assert_eq!((st.uplinks[0].udp_flows, st.uplinks[1].udp_flows), (1, 2));
}

/// Runs one race where uplink i's handshake takes `handshake[i]` ms from the start of its
/// own attempt (None: its SYN is lost); returns the uplink used.
fn run_timed(gw: &mut Gateway, start: Instant, handshake: [Option<u64>; 2]) -> Option<UplinkId> {
    let mut race = gw.begin(start, DST, None).expect("not busy");
    let (mut now, mut done): (Instant, Vec<(Instant, UplinkId)>) = (start, Vec::new());
    let mut used = None;
    loop {
        while let Some(a) = race.poll_action() {
            match a {
                Action::Start(u) => {
                    if let Some(h) = handshake[u.index()] {
                        done.push((now + ms(h), u));
                    }
                }
                Action::Use(u) => used = Some(u),
                _ => {}
            }
        }
        if race.outcome().is_some() {
            break;
        }
        done.sort();
        let next = done.first().map(|e| e.0);
        match (next, race.poll_timeout()) {
            (Some(e), d) if d.is_none_or(|d| e <= d) => {
                let (at, u) = done.remove(0);
                now = at;
                race.handle_connected(at, u);
            }
            (_, Some(d)) => {
                now = d;
                race.handle_timeout(d);
            }
            (_, None) => break,
        }
    }
    gw.end_race(race.outcome().map_or(start, |o| o.1), DST, &race);
    gw.release();
    used
}

/// The lock-in case: uplink A (0) takes 100 ms, B (1) 20 ms, but B's first SYN is lost,
/// so A wins the first race. Learning only the winner, stagger then started A alone for
/// every connection (B 250 ms later, never reached) and kept A forever. With per-attempt
/// samples and re-probing, B is measured again and ranks first within a few dozen.
#[test]
fn stagger_does_not_lock_onto_the_first_winner() {
    let mut c = cfg(PredictorConfig::Stagger { delay: ms(250) });
    c.max_connections = 100;
    let mut gw = Gateway::new(c, 1, t(0)).unwrap();
    assert_eq!(
        run_timed(&mut gw, t(0), [Some(100), None]),
        Some(UplinkId(0))
    );
    assert_eq!(gw.status().best, UplinkId(0), "A won the first tie");
    let mut used = Vec::new();
    for i in 1..40 {
        used.push(run_timed(&mut gw, t(1000 * i), [Some(100), Some(20)]));
    }
    assert_eq!(gw.status().best, UplinkId(1));
    let p = gw.global.plan(t(40_000));
    assert_eq!(p.attempts[0].uplink, UplinkId(1), "{p:?}");
    let b = used.iter().filter(|u| **u == Some(UplinkId(1))).count();
    assert!(b >= 20, "B used in {b} of 39: {used:?}");
    assert!(
        used[30..].iter().all(|u| *u == Some(UplinkId(1))),
        "{used:?}"
    );
    let st = gw.status();
    // A is still re-measured now and then (a stale uplink starts beside the top one).
    assert!(st.uplinks[0].attempts > st.uplinks[0].chosen, "{st:?}");
}
