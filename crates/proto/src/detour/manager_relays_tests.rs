//! Relays handed out by the server, in the manager's virtual-time harness: they become
//! candidates, configured relays win and the bound holds, and relays the server stops
//! listing leave gracefully (replaced first, then removed and released).

use super::*;

fn source_of(s: &Sim, relay: &str) -> RelaySource {
    s.m.relays()
        .into_iter()
        .find(|r| r.spec.name == relay)
        .unwrap()
        .source
}

/// Index in the log of the first action matching `f`.
fn first(s: &Sim, f: impl Fn(&ManagerAction) -> bool) -> Option<usize> {
    s.log.iter().position(f)
}

/// A client with no relays of its own gains a detour through the one the server lists.
#[test]
fn server_relay_becomes_a_path() {
    let mut s = Sim::configured(1, &[&[5]], 2, Duration::from_secs(300), 0);
    s.run(Duration::from_secs(2));
    assert!(s.paths.is_empty());
    assert_eq!(s.m.poll_timeout(), None, "nothing to do without relays");
    s.m.set_server_relays(s.now, vec![spec(0)]);
    s.run(Duration::from_secs(3));
    assert_eq!(s.names(), vec!["l0 via r0"]);
    assert_eq!(source_of(&s, "r0"), RelaySource::Server);
    let st = s.m.status();
    assert_eq!(st[0].source, RelaySource::Server);
    assert_eq!(st[0].state, "active");
    // The same list again (a resend, a new session) changes nothing.
    let before = s.log.len();
    s.m.set_server_relays(s.now, vec![spec(0)]);
    s.run(Duration::from_secs(5));
    assert_eq!(s.log.len(), before, "{:?}", &s.log[before..]);
}

/// A server relay named like a configured one, or at its address, is skipped; configured
/// plus server relays stay within eight.
#[test]
fn configured_relays_win_and_the_bound_holds() {
    let mut s = Sim::configured(1, &[&[5], &[6]], 2, Duration::from_secs(300), 1);
    let mut same_name = spec(1);
    same_name.name = "r0".into();
    let mut same_address = spec(1);
    same_address.name = "other".into();
    same_address.address = relay_addr(0);
    s.m.set_server_relays(s.now, vec![same_name, same_address]);
    let names: Vec<_> = s.m.relays().into_iter().map(|r| r.spec.name).collect();
    assert_eq!(names, vec!["r0"]);
    assert_eq!(source_of(&s, "r0"), RelaySource::Config);
    let nine: Vec<RelaySpec> = (1..10).map(spec).collect();
    s.m.set_server_relays(s.now, nine);
    let listed = s.m.relays();
    assert_eq!(listed.len(), 8, "one configured + seven of the server's");
    assert_eq!(listed[7].spec.name, "r7", "taken in list order");
}

/// The server replaces r0 by r1: r1's detour becomes a path first, then r0's path is
/// removed and its detour released at the relay, and r0 is forgotten.
#[test]
fn unlisted_relay_leaves_after_its_replacement() {
    // r1 answers after 600 ms: r0's path carries on meanwhile.
    let mut s = Sim::configured(1, &[&[5], &[300]], 1, Duration::from_secs(300), 0);
    s.m.set_server_relays(s.now, vec![spec(0)]);
    s.run(Duration::from_secs(3));
    assert_eq!(s.names(), vec!["l0 via r0"]);
    let old = s.path_named("l0 via r0");
    s.m.set_server_relays(s.now, vec![spec(1)]);
    assert!(s.m.relays()[0].leaving);
    s.run(Duration::from_millis(500));
    assert_eq!(
        s.names(),
        vec!["l0 via r0"],
        "kept while the new one is probed"
    );
    s.run(Duration::from_secs(3));
    assert_eq!(s.names(), vec!["l0 via r1"]);
    let added = first(
        &s,
        |a| matches!(a, ManagerAction::AddPath { name, .. } if name == "l0 via r1"),
    );
    let removed = first(&s, |a| *a == ManagerAction::RemovePath { path: old });
    assert!(added.unwrap() < removed.unwrap(), "{:?}", s.log);
    assert_eq!(s.relays[0].len(), 0, "released at the old relay");
    assert_eq!(s.relays[1].len(), 1);
    let names: Vec<_> = s.m.relays().into_iter().map(|r| r.spec.name).collect();
    assert_eq!(names, vec!["r1"], "the old relay is forgotten");
}

/// An empty list: nothing can replace the path, so it goes at once; a replacement that
/// never answers holds it only until its request is given up.
#[test]
fn unlisted_relay_without_replacement_goes() {
    let mut s = Sim::configured(1, &[&[5]], 1, Duration::from_secs(300), 0);
    s.m.set_server_relays(s.now, vec![spec(0)]);
    s.run(Duration::from_secs(3));
    s.m.set_server_relays(s.now, Vec::new());
    s.run(Duration::from_secs(1));
    assert!(s.paths.is_empty());
    assert_eq!(s.relays[0].len(), 0);
    assert!(s.m.relays().is_empty());

    let mut s = Sim::configured(1, &[&[5], &[5]], 1, Duration::from_secs(300), 0);
    s.m.set_server_relays(s.now, vec![spec(0)]);
    s.run(Duration::from_secs(3));
    s.alive[1] = false;
    s.m.set_server_relays(s.now, vec![spec(1)]);
    s.run(Duration::from_secs(3));
    assert_eq!(
        s.names(),
        vec!["l0 via r0"],
        "kept while r1 may still answer"
    );
    // Four attempts 1 s apart, then r1 backs off and r0's path has nothing to wait for.
    s.run(Duration::from_secs(2));
    assert!(s.paths.is_empty());
    assert_eq!(s.relays[0].len(), 0);
}

/// A relay listed again before it left is kept with its path; one listed again under
/// another key starts over (its old path removed at once).
#[test]
fn relisted_and_changed_relays() {
    let mut s = Sim::configured(1, &[&[5], &[10]], 1, Duration::from_secs(300), 0);
    s.m.set_server_relays(s.now, vec![spec(0)]);
    s.run(Duration::from_secs(3));
    s.m.set_server_relays(s.now, vec![spec(1)]);
    s.m.set_server_relays(s.now, vec![spec(0), spec(1)]);
    s.run(Duration::from_secs(3));
    assert_eq!(s.names(), vec!["l0 via r0"]);
    assert!(s.m.relays().iter().all(|r| !r.leaving));
    let mut rekeyed = spec(0);
    rekeyed.key = relay_key(9).public_key();
    s.m.set_server_relays(s.now, vec![spec(1)]);
    s.m.set_server_relays(s.now, vec![rekeyed, spec(1)]);
    s.carry();
    assert!(s.paths.is_empty(), "{:?}", s.names());
    assert_eq!(s.relays[0].len(), 0, "released under the old key");
    let listed = s.m.relays();
    assert_eq!(listed.len(), 2);
    assert!(listed
        .iter()
        .any(|r| r.spec.key == relay_key(9).public_key()));
}
