//! Link policies (`sched/link.rs`): `backup:` carries nothing while another link is up,
//! `prefer:` returns to its link as soon as it is back, `only:` never uses another link
//! and holds across its link's gap (`session/store.rs`). Upstream traffic, under the
//! client's rules.

use super::*;
use crate::path::{PathConfig, PathState};
use crate::policy::LinkRule;

const GAP: Duration = Duration::from_millis(5);
const SIZE: usize = 600;

/// Upstream data datagrams handed to link `path` in `[from, to)`: (count, bytes).
fn data_on(p: &Pair, path: u8, from: Instant, to: Instant) -> (usize, usize) {
    p.sent
        .iter()
        .filter(|s| s.to_server && s.path == path && s.len >= DATA_MIN_LEN)
        .filter(|s| s.at >= from && s.at < to)
        .fold((0, 0), |(n, b), s| (n + 1, b + s.len))
}

fn client_state_at(p: &Pair, path: u8, st: PathState, after: Instant) -> Instant {
    p.client_events
        .iter()
        .find(|(t, e)| *t >= after && *e == Event::PathState(PathId(path), st))
        .unwrap_or_else(|| panic!("path {path} never {st:?} after {after:?}"))
        .0
}

/// Two links (RTT 20 and 60 ms, 20 Mbit/s), packets upstream every 5 ms for `secs`
/// under `rule`; link `cut_link` blackholed from 3 s to 3 s + `outage`. Returns the pair,
/// the cut, the heal and the packet count.
fn run(rule: LinkRule, cut_link: usize, outage: Duration, secs: u64, seed: u64) -> Run {
    let mut p = Pair::new(
        vec![Link::new(10, Some(20.0)), Link::new(30, Some(20.0))],
        Policy::Link(rule),
        None,
        seed,
    );
    p.establish();
    let t0 = p.now;
    let cut = t0 + Duration::from_secs(3);
    let heal = cut + outage;
    let count = (Duration::from_secs(secs).as_millis() / GAP.as_millis()) as u32;
    p.traffic(
        count,
        GAP,
        SIZE,
        (true, false),
        Duration::from_secs(2),
        |p, _| {
            if p.now >= cut && p.now < heal && !p.up[cut_link].blackhole {
                p.set_blackhole(cut_link, true);
            }
            if p.now >= heal && p.up[cut_link].blackhole {
                p.set_blackhole(cut_link, false);
            }
        },
    );
    Run {
        p,
        t0,
        cut,
        heal,
        count,
    }
}

struct Run {
    p: Pair,
    t0: Instant,
    cut: Instant,
    heal: Instant,
    count: u32,
}

impl Run {
    /// Asserts every packet arrived, intact and once; returns how many arrived out of
    /// order.
    fn all_delivered(&self) -> usize {
        let got = assert_intact_unique(&self.p.delivered_up, true, SIZE, "link policy");
        let lost: Vec<u32> = (0..self.count)
            .filter(|n| got.binary_search(n).is_err())
            .collect();
        assert!(lost.is_empty(), "lost {lost:?}");
        self.p
            .delivered_up
            .windows(2)
            .filter(|w| number(&w[0].1) > number(&w[1].1))
            .count()
    }
}

/// `backup:` the faster link (RTT 20 ms, which `best` would use): while link 1 is `Up` it
/// carries every data datagram and the backup none; when link 1 is cut, the backup takes
/// over once link 1 is no longer `Up` (`Suspect`: 2 RTTs + 4 deviations, at least
/// detect/10 = 100 ms), and leaves again the moment link 1's first ACK after the heal
/// makes it `Up` (a probe every detect/4 = 250 ms, plus its 60 ms RTT). Nothing is lost:
/// what link 1 swallowed is reinjected (the backup may carry it: no other link is `Up`).
#[test]
fn backup_carries_nothing_while_another_link_is_up() {
    let r = run(
        LinkRule::Backup(PathId(0)),
        1,
        Duration::from_secs(4),
        10,
        71,
    );
    let p = &r.p;
    let suspect = client_state_at(p, 1, PathState::Suspect, r.cut);
    let back = client_state_at(p, 1, PathState::Up, r.heal);
    let end = p.now;
    let before = data_on(p, 0, r.t0, suspect);
    let during = data_on(p, 0, suspect, back);
    let after = data_on(p, 0, back, end);
    let main_before = data_on(p, 1, r.t0, r.cut);
    eprintln!(
        "backup: before the cut {before:?} (link 1: {main_before:?}), outage {during:?}, \
         after link 1 is Up again {after:?}; suspect +{:?}, back +{:?}",
        suspect.saturating_since(r.cut),
        back.saturating_since(r.heal)
    );
    assert_eq!(before, (0, 0), "backup used while link 1 was Up");
    assert_eq!(after, (0, 0), "backup used after link 1 came back");
    assert!(during.0 > 500, "the backup did not take over");
    assert!(main_before.0 >= 550, "link 1 did not carry the traffic");
    let probe = PathConfig::from_detect(session_cfg().detect).probe_interval;
    assert!(back.saturating_since(r.heal) <= probe + Duration::from_millis(120));
    assert_eq!(r.all_delivered(), 0, "out of order");
}

/// `prefer:` the slower link (RTT 60 ms): it carries everything while `Up`; when it is
/// cut, link 0 takes over at `Suspect`; the flow is back on link 1 from its first ACK
/// after the heal (a probe every 250 ms plus its 60 ms RTT), without `best`'s 3 s
/// failback hold, and link 0 carries nothing after that.
#[test]
fn prefer_returns_to_its_link_when_it_is_back() {
    let r = run(
        LinkRule::Prefer(PathId(1)),
        1,
        Duration::from_secs(4),
        10,
        72,
    );
    let p = &r.p;
    let suspect = client_state_at(p, 1, PathState::Suspect, r.cut);
    let back = client_state_at(p, 1, PathState::Up, r.heal);
    let end = p.now;
    let other_before = data_on(p, 0, r.t0, suspect);
    let other_during = data_on(p, 0, suspect, back);
    let other_after = data_on(p, 0, back, end);
    let pref_after = data_on(p, 1, back, end);
    eprintln!(
        "prefer: link 0 before {other_before:?}, during {other_during:?}, after {other_after:?}; \
         link 1 after {pref_after:?}; back on link 1 +{:?} after the heal",
        back.saturating_since(r.heal)
    );
    assert_eq!(other_before, (0, 0));
    assert!(other_during.0 > 500, "link 0 did not take over");
    assert_eq!(
        other_after,
        (0, 0),
        "stayed on link 0 after link 1 was back"
    );
    assert!(pref_after.0 > 300);
    let probe = PathConfig::from_detect(session_cfg().detect).probe_interval;
    assert!(back.saturating_since(r.heal) <= probe + Duration::from_millis(120));
    assert_eq!(r.all_delivered(), 0, "out of order");
}

/// `only:` link 1, cut for 5 s while link 0 stays up: link 0 carries no data datagram at
/// any time; what was sent into the cut (until link 1 went `Down`, 1 s) and everything
/// after it is held, then delivered on link 1 after the heal: every packet, in order.
#[test]
fn only_never_uses_another_link_and_holds_across_its_gap() {
    let r = run(LinkRule::Only(PathId(1)), 1, Duration::from_secs(5), 10, 73);
    let p = &r.p;
    let end = p.now;
    let other = data_on(p, 0, r.t0, end);
    let c = p.client.session().counters();
    let back = client_state_at(p, 1, PathState::Up, r.heal);
    let first_after = p
        .delivered_up
        .iter()
        .find(|(t, _)| *t >= r.heal)
        .map(|(t, _)| *t)
        .expect("nothing delivered after the heal");
    eprintln!(
        "only: link 0 data {other:?}; released {} (max held while cut), link 1 Up +{:?}, \
         first delivery +{:?} after the heal",
        c.hold_released,
        back.saturating_since(r.heal),
        first_after.saturating_since(r.heal)
    );
    assert_eq!(other, (0, 0), "only: data on another link");
    // 5 s of packets every 5 ms: about 1000 held (those sent before `Down` as numbered).
    assert!(c.hold_released >= 900, "released {}", c.hold_released);
    assert_eq!(
        (c.held_packets, c.hold_dropped_bytes, c.hold_dropped_age),
        (0, 0, 0)
    );
    assert_eq!(r.all_delivered(), 0, "out of order");
}
