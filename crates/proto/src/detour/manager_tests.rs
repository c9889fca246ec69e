//! The path manager against real `DetourRelay`s in virtual time: choice by RTT, renewal,
//! replacement of dead paths and dead relays, the useless-detour rule, release, determinism.

use super::*;
use crate::crypto::StaticSecret;
use crate::path::{PathId, PathState};
use crate::Instant;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

const STEP: Duration = Duration::from_millis(10);

fn relay_key(i: usize) -> StaticSecret {
    StaticSecret::from_bytes([50 + i as u8; 32])
}

fn client_key() -> StaticSecret {
    StaticSecret::from_bytes([1; 32])
}

fn link_addr(l: u8) -> SocketAddr {
    format!("198.51.100.{}:40001", 10 + l).parse().unwrap()
}

fn relay_addr(r: usize) -> SocketAddr {
    format!("192.0.2.{}:51900", 1 + r).parse().unwrap()
}

struct Sim {
    m: DetourManager,
    relays: Vec<DetourRelay>,
    alive: Vec<bool>,
    /// One-way delay link → relay (answers come back after twice that).
    delay: BTreeMap<(u8, usize), Duration>,
    now: Instant,
    /// Answers on their way: (arrival, link, relay).
    wire: Vec<(Instant, PathId, usize, Vec<u8>)>,
    /// Paths the daemon would have: id → (link, remote, name).
    paths: BTreeMap<PathId, (PathId, SocketAddr, String)>,
    log: Vec<ManagerAction>,
    /// Path observations beyond the default (Up, idle).
    obs: BTreeMap<PathId, PathObs>,
    /// Bytes each path has delivered (busy paths deliver at their rate).
    delivered: BTreeMap<PathId, f64>,
}

/// Relay `r` as the client knows it.
fn spec(r: usize) -> RelaySpec {
    RelaySpec {
        name: format!("r{r}"),
        address: relay_addr(r),
        key: relay_key(r).public_key(),
        mode: Mode::Nat,
    }
}

impl Sim {
    /// `links` links × `delays.len()` relays; `delays[r][l]` is the one-way delay in ms.
    fn new(links: u8, delays: &[&[u64]], n: usize, lifetime: Duration) -> Sim {
        Sim::configured(links, delays, n, lifetime, delays.len())
    }

    /// As `new`, with only the first `configured` relays in the client's config (the others
    /// run, for the server to hand out).
    fn configured(
        links: u8,
        delays: &[&[u64]],
        n: usize,
        lifetime: Duration,
        configured: usize,
    ) -> Sim {
        let specs = (0..configured).map(spec).collect();
        let cfg = ManagerConfig::new(client_key(), 1_700_000_000_000_000, n, links);
        let mut m = DetourManager::new(cfg, specs, [3; 32]);
        for l in 0..links {
            m.add_link(
                PathId(l),
                &format!("l{l}"),
                "203.0.113.2:7000".parse().unwrap(),
            );
        }
        let relays = (0..delays.len())
            .map(|r| {
                let mut rc = RelayConfig::new(relay_key(r), vec![client_key().public_key()]);
                rc.lifetime = lifetime;
                DetourRelay::new(rc, [r as u8; 32])
            })
            .collect();
        let mut delay = BTreeMap::new();
        for (r, ds) in delays.iter().enumerate() {
            for (l, d) in ds.iter().enumerate() {
                delay.insert((l as u8, r), Duration::from_millis(*d));
            }
        }
        Sim {
            m,
            alive: vec![true; delays.len()],
            relays,
            delay,
            now: Instant::from_micros(1_000),
            wire: Vec::new(),
            paths: BTreeMap::new(),
            log: Vec::new(),
            obs: BTreeMap::new(),
            delivered: BTreeMap::new(),
        }
    }

    fn run(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            self.now = self.now + STEP;
            self.tick();
        }
    }

    fn tick(&mut self) {
        let now = self.now;
        let due: Vec<_> = self.wire.iter().filter(|w| w.0 <= now).cloned().collect();
        self.wire.retain(|w| w.0 > now);
        for (_, link, r, data) in due {
            assert!(self.m.handle_datagram(now, link, relay_addr(r), &data));
        }
        // A busy path delivers at its rate; the manager's meters read the sum.
        for o in self.obs.values() {
            if o.busy {
                *self.delivered.entry(o.id).or_default() += o.rate_bps * STEP.as_secs_f64();
            }
        }
        let obs: Vec<PathObs> = (0..16)
            .map(PathId)
            .map(|id| {
                let delivered = self.delivered.get(&id).copied().unwrap_or(0.0) as u64;
                let o = self.obs.get(&id).copied().unwrap_or(PathObs {
                    id,
                    state: PathState::Up,
                    min_rtt: None,
                    rate_bps: 0.0,
                    busy: false,
                    error_loss: 0.0,
                    delivered: 0,
                });
                PathObs { delivered, ..o }
            })
            .collect();
        self.m.observe(now, &obs);
        if self.m.poll_timeout().is_some_and(|t| t <= now) {
            self.m.handle_timeout(now);
        }
        for r in &mut self.relays {
            while r.poll_expired(now).is_some() {}
        }
        self.carry();
    }

    fn carry(&mut self) {
        let now = self.now;
        while let Some(t) = self.m.poll_transmit() {
            let r = (0..self.relays.len())
                .find(|&r| relay_addr(r) == t.dst)
                .unwrap();
            if !self.alive[r] {
                continue;
            }
            let Some(adm) = self.relays[r].handle_datagram(now, link_addr(t.link.0), &t.data)
            else {
                continue;
            };
            let mut out = [0u8; 128];
            let n = self.relays[r].answer(adm, true, &mut out).unwrap();
            let back = now + self.delay[&(t.link.0, r)] * 2;
            self.wire.push((back, t.link, r, out[..n].to_vec()));
        }
        while let Some(a) = self.m.poll_action() {
            match &a {
                ManagerAction::AddPath {
                    path,
                    link,
                    remote,
                    name,
                } => {
                    self.paths.insert(*path, (*link, *remote, name.clone()));
                }
                ManagerAction::RemovePath { path } => {
                    assert!(self.paths.remove(path).is_some(), "removed an unknown path");
                }
                ManagerAction::Standby { .. } => {}
            }
            self.log.push(a);
        }
    }

    /// The paths' names, sorted.
    fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.paths.values().map(|p| p.2.clone()).collect();
        v.sort();
        v
    }

    fn path_named(&self, name: &str) -> PathId {
        *self.paths.iter().find(|p| p.1 .2 == name).unwrap().0
    }
}

/// Two links × three relays, N = 2: the two lowest request RTTs become paths 2 and 3, sent
/// from their links' sockets to the relay ports; every other probe is released.
#[test]
fn chooses_the_n_lowest_rtt_and_releases_the_rest() {
    let mut s = Sim::new(
        2,
        &[&[30, 5], &[10, 40], &[20, 25]],
        2,
        Duration::from_secs(300),
    );
    s.run(Duration::from_secs(3));
    assert_eq!(s.names(), vec!["l0 via r1", "l1 via r0"]);
    let (link, remote, _) = &s.paths[&PathId(2)];
    assert_eq!(*link, PathId(1));
    assert_eq!(remote.ip(), relay_addr(0).ip());
    assert_eq!(s.relays.iter().map(|r| r.len()).sum::<usize>(), 2);
    assert_eq!(s.m.counters().added, 2);
    let st = s.m.status();
    assert_eq!(st.iter().filter(|c| c.state == "active").count(), 2);
}

/// Detours are renewed before their lifetime runs out: after ten lifetimes the same paths
/// exist and the relays still hold them.
#[test]
fn renews_before_the_lifetime_runs_out() {
    let mut s = Sim::new(1, &[&[5]], 2, Duration::from_secs(20));
    s.run(Duration::from_secs(200));
    assert_eq!(s.names(), vec!["l0 via r0"]);
    assert_eq!(s.relays[0].len(), 1);
    assert_eq!(s.m.counters().added, 1);
    assert_eq!(s.log.len(), 1, "{:?}", s.log);
}

/// A relay that stops answering loses its path at the next renewal, and the next best
/// candidate takes its place.
#[test]
fn dead_relay_is_replaced() {
    let mut s = Sim::new(1, &[&[5], &[10], &[20]], 2, Duration::from_secs(20));
    s.run(Duration::from_secs(3));
    assert_eq!(s.names(), vec!["l0 via r0", "l0 via r1"]);
    s.alive[0] = false;
    // Renewal at 10 s, four attempts 1 s apart, then retirement and a new request.
    s.run(Duration::from_secs(15));
    assert_eq!(s.names(), vec!["l0 via r1", "l0 via r2"]);
    assert_eq!(s.m.counters().retired_relay, 1);
}

/// A path Down for `dead_after` is retired and replaced; its candidate waits `backoff`.
#[test]
fn dead_path_is_replaced() {
    let mut s = Sim::new(1, &[&[5], &[10], &[20]], 2, Duration::from_secs(300));
    s.run(Duration::from_secs(3));
    let p = s.path_named("l0 via r0");
    s.obs.insert(
        p,
        PathObs {
            id: p,
            state: PathState::Down,
            min_rtt: None,
            rate_bps: 0.0,
            busy: false,
            error_loss: 0.0,
            delivered: 0,
        },
    );
    s.run(Duration::from_secs(9));
    assert_eq!(s.names(), vec!["l0 via r0", "l0 via r1"]);
    s.run(Duration::from_secs(2));
    s.obs.clear();
    assert_eq!(s.names(), vec!["l0 via r1", "l0 via r2"]);
    assert_eq!(s.m.counters().retired_dead, 1);
    // Only the retired path's own detour was released.
    assert_eq!(s.relays[0].len(), 0);
}

fn busy(id: PathId, rate: f64) -> PathObs {
    PathObs {
        id,
        state: PathState::Up,
        min_rtt: Some(Duration::from_millis(20)),
        rate_bps: rate,
        busy: true,
        error_loss: 0.0,
        delivered: 0,
    }
}

/// A detour that only splits the direct path's capacity (direct + detour < 1.1 × direct
/// alone while both are busy) is dropped after `useless_after`; one that adds is kept.
#[test]
fn useless_detour_is_dropped_useful_one_kept() {
    for (detour_rate, kept) in [(500.0, false), (800.0, true)] {
        let mut s = Sim::new(1, &[&[5]], 1, Duration::from_secs(300));
        s.obs.insert(PathId(0), busy(PathId(0), 1000.0));
        s.run(Duration::from_secs(3));
        let p = s.path_named("l0 via r0");
        s.obs.insert(PathId(0), busy(PathId(0), 520.0));
        s.obs.insert(p, busy(p, detour_rate));
        s.run(Duration::from_secs(4));
        assert_eq!(s.paths.len(), 1, "judged before useless_after");
        s.run(Duration::from_secs(2));
        assert_eq!(s.paths.len() == 1, kept, "rate {detour_rate}");
        assert_eq!(s.m.counters().retired_useless, u64::from(!kept));
    }
}

/// The standby actions on `path` so far.
fn standby_log(s: &Sim, path: PathId) -> Vec<bool> {
    s.log
        .iter()
        .filter_map(|a| match a {
            ManagerAction::Standby { path: p, standby } if *p == path => Some(*standby),
            _ => None,
        })
        .collect()
}

/// Runs `s` with the lossy direct path (0) and detour `p` both busy at the given rates
/// until the direct path goes on trial standby (after `TRIAL_AFTER`, 3 s, not the 5 s of
/// `useless_after`), then the trial with the detour alone at `alone`.
fn trial_and_measure(s: &mut Sim, p: PathId, rates: (f64, f64), alone: f64, loss: f64) {
    let direct = PathObs {
        error_loss: loss,
        ..busy(PathId(0), rates.0)
    };
    s.obs.insert(PathId(0), direct);
    s.obs.insert(p, busy(p, rates.1));
    s.run(Duration::from_millis(2900));
    assert!(standby_log(s, PathId(0)).is_empty(), "tried before 3 s");
    s.run(Duration::from_millis(200));
    assert_eq!(
        standby_log(s, PathId(0)),
        [true],
        "the direct path is on trial"
    );
    assert!(standby_log(s, p).is_empty(), "the detour carries the data");
    s.obs.insert(
        PathId(0),
        PathObs {
            busy: false,
            ..direct
        },
    );
    s.obs.insert(p, busy(p, alone));
    s.run(Duration::from_millis(2100));
}

/// A pair never measured alone (the detour was up before the first transfer): a clean pair
/// is left as it is (a trial would cost more than a useless clean detour); a lossy direct
/// path goes on a trial standby once, and a detour that adds capacity is kept beside it.
#[test]
fn never_measured_alone_only_a_lossy_direct_path_is_tried() {
    let mut s = Sim::new(1, &[&[5]], 1, Duration::from_secs(300));
    s.run(Duration::from_secs(3));
    let p = s.path_named("l0 via r0");
    s.obs.insert(PathId(0), busy(PathId(0), 520.0));
    s.obs.insert(p, busy(p, 500.0));
    s.run(Duration::from_secs(12));
    assert!(s
        .log
        .iter()
        .all(|a| !matches!(a, ManagerAction::Standby { .. })));
    assert_eq!(s.paths.len(), 1);

    let mut s = Sim::new(1, &[&[5]], 1, Duration::from_secs(300));
    s.run(Duration::from_secs(3));
    let p = s.path_named("l0 via r0");
    trial_and_measure(&mut s, p, (520.0, 800.0), 820.0, 0.008);
    assert_eq!(standby_log(&s, PathId(0)), [true, false], "the trial ends");
    assert_eq!(s.paths.len(), 1, "a detour that adds is kept");
    assert_eq!(s.m.counters().direct_standby, 0);
    s.obs.insert(
        PathId(0),
        PathObs {
            error_loss: 0.008,
            ..busy(PathId(0), 520.0)
        },
    );
    s.obs.insert(p, busy(p, 800.0));
    s.run(Duration::from_secs(12));
    assert_eq!(standby_log(&s, PathId(0)).len(), 2, "tried once");
    assert_eq!(s.paths.len(), 1, "and kept");
}

/// A detour sharing the direct path's bottleneck that loses clearly less takes the link's
/// data: the direct path stays on standby after its trial, and comes off it when the detour
/// is gone.
#[test]
fn a_cleaner_detour_puts_the_lossy_direct_path_on_standby() {
    let mut s = Sim::new(1, &[&[5]], 1, Duration::from_secs(300));
    s.run(Duration::from_secs(3));
    let p = s.path_named("l0 via r0");
    trial_and_measure(&mut s, p, (550.0, 450.0), 950.0, 0.008);
    assert_eq!(s.names(), vec!["l0 via r0"], "the detour is kept");
    assert_eq!(s.m.counters().direct_standby, 1);
    assert_eq!(s.m.counters().retired_useless, 0);
    assert_eq!(standby_log(&s, PathId(0)), [true], "the standby is kept");
    // The standby path carries data now and then (while the detour is not `Up`): the pair
    // looks busy together, but it was judged and stays as it is.
    s.obs.insert(
        PathId(0),
        PathObs {
            error_loss: 0.008,
            ..busy(PathId(0), 50.0)
        },
    );
    s.run(Duration::from_secs(8));
    assert_eq!(s.m.counters().retired_useless, 0);
    assert_eq!(standby_log(&s, PathId(0)), [true]);
    // The detour then dies and is retired: the direct path is back.
    s.obs.insert(
        p,
        PathObs {
            state: PathState::Down,
            busy: false,
            ..busy(p, 0.0)
        },
    );
    s.run(Duration::from_secs(11));
    assert_eq!(s.m.counters().retired_dead, 1);
    assert_eq!(standby_log(&s, PathId(0)), [true, false]);
}

/// A pair still growing (an inner flow's start-up) is not tried: judged then, a pair that
/// adds capacity reads as one that shares it. It is tried once its rate has settled.
#[test]
fn a_pair_still_growing_is_tried_once_settled() {
    let mut s = Sim::new(1, &[&[5]], 1, Duration::from_secs(300));
    s.run(Duration::from_secs(3));
    let p = s.path_named("l0 via r0");
    // 5 s of start-up: the pair's rate grows by 30 % a second.
    for k in 0..50 {
        let rate = 100.0 * 1.3f64.powf(f64::from(k) / 10.0);
        s.obs.insert(
            PathId(0),
            PathObs {
                error_loss: 0.008,
                ..busy(PathId(0), rate)
            },
        );
        s.obs.insert(p, busy(p, rate));
        s.run(Duration::from_millis(100));
    }
    assert!(standby_log(&s, PathId(0)).is_empty(), "tried while growing");
    s.run(Duration::from_secs(2));
    assert_eq!(standby_log(&s, PathId(0)), [true], "tried once settled");
}

/// Releasing the detours (shutdown) during a trial gives the link back to the direct path,
/// and no standby is counted.
#[test]
fn release_during_a_trial_ends_it() {
    let mut s = Sim::new(1, &[&[5]], 1, Duration::from_secs(300));
    s.run(Duration::from_secs(3));
    let p = s.path_named("l0 via r0");
    s.obs.insert(
        PathId(0),
        PathObs {
            error_loss: 0.008,
            ..busy(PathId(0), 550.0)
        },
    );
    s.obs.insert(p, busy(p, 450.0));
    s.run(Duration::from_millis(3100));
    assert_eq!(standby_log(&s, PathId(0)), [true]);
    s.m.release_all(s.now);
    s.carry();
    assert_eq!(standby_log(&s, PathId(0)), [true, false]);
    assert_eq!(s.m.counters().direct_standby, 0);
}

/// An inner TCP's flight drains for a moment now and then (loss recovery, a held repair):
/// a pair that is busy but for such 20-ms gaps every 200 ms is still judged, and the lossy
/// direct path goes on standby as when both are busy throughout.
#[test]
fn short_idle_gaps_do_not_restart_the_judgement() {
    let mut s = Sim::new(1, &[&[5]], 1, Duration::from_secs(300));
    s.run(Duration::from_secs(3));
    let p = s.path_named("l0 via r0");
    let direct = PathObs {
        error_loss: 0.008,
        ..busy(PathId(0), 550.0)
    };
    for _ in 0..60 {
        s.obs.insert(PathId(0), direct);
        s.obs.insert(p, busy(p, 450.0));
        s.run(Duration::from_millis(180));
        s.obs.insert(
            PathId(0),
            PathObs {
                busy: false,
                ..direct
            },
        );
        s.obs.insert(
            p,
            PathObs {
                busy: false,
                ..busy(p, 450.0)
            },
        );
        s.run(Duration::from_millis(20));
        if !standby_log(&s, PathId(0)).is_empty() {
            break;
        }
    }
    assert_eq!(
        standby_log(&s, PathId(0)),
        [true],
        "the flickering pair is tried"
    );
    s.obs.insert(
        PathId(0),
        PathObs {
            busy: false,
            ..direct
        },
    );
    s.obs.insert(p, busy(p, 980.0));
    s.run(Duration::from_millis(2100));
    assert_eq!(s.m.counters().direct_standby, 1);
    assert_eq!(standby_log(&s, PathId(0)), [true]);
}

/// A clearly better waiting candidate replaces the worst path once that path was held for
/// `min_hold`; the path's own RTT replaces the optimistic request RTT.
#[test]
fn path_rtt_refines_the_choice() {
    let mut s = Sim::new(1, &[&[5], &[10]], 1, Duration::from_secs(300));
    s.run(Duration::from_secs(3));
    let p = s.path_named("l0 via r0");
    // The detour through r0 turns out slow end to end (its relay–server leg is long).
    let mut o = busy(p, 0.0);
    o.busy = false;
    o.min_rtt = Some(Duration::from_millis(80));
    s.obs.insert(p, o);
    s.run(Duration::from_secs(35));
    assert_eq!(s.names(), vec!["l0 via r1"]);
    assert_eq!(s.m.counters().swapped, 1);
}

/// Shutdown releases every detour; a link going down retires its detours at once.
#[test]
fn release_all_and_link_down() {
    let mut s = Sim::new(2, &[&[5, 6], &[10, 11]], 2, Duration::from_secs(300));
    s.run(Duration::from_secs(3));
    assert_eq!(s.paths.len(), 2);
    s.m.set_link_up(s.now, PathId(0), false);
    s.carry();
    s.run(Duration::from_secs(2));
    assert!(
        s.names().iter().all(|n| n.starts_with("l1 ")),
        "{:?}",
        s.names()
    );
    s.m.release_all(s.now);
    s.carry();
    assert!(s.paths.is_empty());
    assert_eq!(s.relays.iter().map(|r| r.len()).sum::<usize>(), 0);
}

/// Same inputs and seed, same actions and datagrams.
#[test]
fn deterministic() {
    let run = || {
        let mut s = Sim::new(2, &[&[30, 5], &[10, 40]], 2, Duration::from_secs(20));
        s.run(Duration::from_secs(60));
        s.log
    };
    assert_eq!(run(), run());
}

#[path = "manager_relays_tests.rs"]
mod relays;
