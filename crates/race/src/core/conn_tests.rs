//! Tests of the per-connection race: the thesis's scenarios scripted, then a property test
//! of the invariants over random event sequences.

use super::*;
use crate::core::predictor::{Plan, PlannedAttempt};
use proptest::prelude::*;

const U0: UplinkId = UplinkId(0);
const U1: UplinkId = UplinkId(1);
const U2: UplinkId = UplinkId(2);

fn t(ms: u64) -> Instant {
    Instant::from_micros(ms * 1000)
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn drain(r: &mut Race) -> Vec<Action> {
    std::iter::from_fn(|| r.poll_action()).collect()
}

const TIMEOUT: Duration = Duration::from_secs(10);

#[test]
fn first_completion_wins_and_losers_are_closed() {
    let mut r = Race::new(t(0), &Plan::all(3, None, ms(0)), TIMEOUT);
    assert_eq!(
        drain(&mut r),
        vec![Action::Start(U0), Action::Start(U1), Action::Start(U2)]
    );
    r.handle_connected(t(12), U1);
    assert_eq!(
        drain(&mut r),
        vec![Action::Use(U1), Action::Close(U0), Action::Close(U2)]
    );
    assert_eq!(r.outcome(), Some((Outcome::Chosen(U1), t(12))));
    assert_eq!(r.first_connected(), Some((U1, t(12))));
    // Late completion and late RST on losers: nothing happens (figure 3-3b).
    r.handle_connected(t(15), U0);
    r.handle_refused(t(16), U2);
    r.handle_timeout(t(20_000));
    assert_eq!(drain(&mut r), vec![]);
    assert_eq!(r.state(U1), Some(AttemptState::Chosen));
    assert_eq!(r.poll_timeout(), None);
}

#[test]
fn all_refused_refuses_the_client_only_at_the_last_rst() {
    // Figure 3-3a: three uplinks, the server resets each attempt.
    let mut r = Race::new(t(0), &Plan::all(3, None, ms(0)), TIMEOUT);
    drain(&mut r);
    r.handle_refused(t(5), U0);
    r.handle_refused(t(7), U2);
    assert_eq!(
        drain(&mut r),
        vec![],
        "an RST is ignored while another may succeed"
    );
    assert_eq!(r.outcome(), None);
    r.handle_refused(t(9), U1);
    assert_eq!(drain(&mut r), vec![Action::RefuseClient]);
    assert_eq!(r.outcome(), Some((Outcome::Refused, t(9))));
}

#[test]
fn refusal_on_some_uplinks_still_connects() {
    // Figure 3-3b: RST on the first and third, accepted on the second.
    let mut r = Race::new(t(0), &Plan::all(3, None, ms(0)), TIMEOUT);
    drain(&mut r);
    r.handle_refused(t(3), U0);
    r.handle_connected(t(4), U1);
    assert_eq!(drain(&mut r), vec![Action::Use(U1), Action::Close(U2)]);
    r.handle_refused(t(6), U2);
    assert_eq!(drain(&mut r), vec![]);
    assert_eq!(r.outcome(), Some((Outcome::Chosen(U1), t(4))));
}

#[test]
fn mixed_failures_refuse_with_failed_outcome() {
    let mut r = Race::new(t(0), &Plan::all(2, None, ms(0)), TIMEOUT);
    drain(&mut r);
    r.handle_refused(t(3), U0);
    assert_eq!(r.poll_timeout(), Some(t(10_000)));
    r.handle_timeout(t(10_000));
    assert_eq!(drain(&mut r), vec![Action::Close(U1), Action::RefuseClient]);
    assert_eq!(r.outcome(), Some((Outcome::Failed, t(10_000))));
}

#[test]
fn avmet_hold_prefers_the_best_uplink() {
    let plan = Plan::all(2, Some(U0), ms(100));
    // The preferred uplink completes within the hold: it is used.
    let mut r = Race::new(t(0), &plan, TIMEOUT);
    drain(&mut r);
    r.handle_connected(t(10), U1);
    assert_eq!(drain(&mut r), vec![]);
    assert_eq!(r.poll_timeout(), Some(t(110)));
    r.handle_connected(t(60), U0);
    assert_eq!(drain(&mut r), vec![Action::Use(U0), Action::Close(U1)]);
    assert_eq!(
        r.first_connected(),
        Some((U1, t(10))),
        "AvMet learns U1 was first"
    );

    // It does not: the held one is used when the hold expires.
    let mut r = Race::new(t(0), &plan, TIMEOUT);
    drain(&mut r);
    r.handle_connected(t(10), U1);
    r.handle_timeout(t(109));
    assert_eq!(drain(&mut r), vec![]);
    r.handle_timeout(t(110));
    assert_eq!(drain(&mut r), vec![Action::Use(U1), Action::Close(U0)]);

    // It is refused during the hold: the held one is used at once.
    let mut r = Race::new(t(0), &plan, TIMEOUT);
    drain(&mut r);
    r.handle_connected(t(10), U1);
    r.handle_refused(t(20), U0);
    assert_eq!(drain(&mut r), vec![Action::Use(U1)]);
    assert_eq!(r.outcome(), Some((Outcome::Chosen(U1), t(20))));

    // The preferred uplink already failed before the other completed: no hold.
    let mut r = Race::new(t(0), &plan, TIMEOUT);
    drain(&mut r);
    r.handle_failed(t(1), U0);
    r.handle_connected(t(10), U1);
    assert_eq!(drain(&mut r), vec![Action::Use(U1)]);
}

#[test]
fn blackholed_preferred_uplink_costs_at_most_the_hold() {
    let mut r = Race::new(t(0), &Plan::all(2, Some(U0), ms(100)), TIMEOUT);
    drain(&mut r);
    r.handle_connected(t(5), U1);
    let deadline = r.poll_timeout().unwrap();
    r.handle_timeout(deadline);
    assert_eq!(drain(&mut r), vec![Action::Use(U1), Action::Close(U0)]);
    assert_eq!(r.outcome().unwrap().1, t(105));
}

#[test]
fn stagger_starts_the_next_after_the_delay_or_on_failure() {
    let plan = Plan {
        attempts: [(U1, 0), (U0, 250), (U2, 500)]
            .into_iter()
            .map(|(uplink, d)| PlannedAttempt {
                uplink,
                start_after: ms(d),
            })
            .collect(),
        preferred: None,
        hold: ms(0),
        advance_on_failure: true,
    };
    let mut r = Race::new(t(0), &plan, TIMEOUT);
    assert_eq!(drain(&mut r), vec![Action::Start(U1)]);
    assert_eq!(r.poll_timeout(), Some(t(250)));
    r.handle_timeout(t(250));
    assert_eq!(drain(&mut r), vec![Action::Start(U0)]);
    r.handle_failed(t(300), U1);
    assert_eq!(drain(&mut r), vec![Action::Start(U2)], "failure advances");
    r.handle_connected(t(320), U2);
    assert_eq!(drain(&mut r), vec![Action::Use(U2), Action::Close(U0)]);

    // Decided before the third started: it is skipped, never started.
    let mut r = Race::new(t(0), &plan, TIMEOUT);
    drain(&mut r);
    r.handle_connected(t(20), U1);
    assert_eq!(drain(&mut r), vec![Action::Use(U1)]);
    assert_eq!(r.state(U0), Some(AttemptState::Skipped));
}

#[test]
fn single_attempt_plans() {
    let mut r = Race::new(t(0), &Plan::single(U1), TIMEOUT);
    assert_eq!(drain(&mut r), vec![Action::Start(U1)]);
    r.handle_connected(t(30), U1);
    assert_eq!(drain(&mut r), vec![Action::Use(U1)]);

    let mut r = Race::new(t(0), &Plan::single(U1), TIMEOUT);
    drain(&mut r);
    r.handle_refused(t(30), U1);
    assert_eq!(drain(&mut r), vec![Action::RefuseClient]);
    assert_eq!(r.outcome().unwrap().0, Outcome::Refused);
}

fn collect(r: &mut Race, decided_before: bool, log: &mut Vec<(Action, bool)>) {
    while let Some(a) = r.poll_action() {
        log.push((a, decided_before));
    }
}

#[derive(Debug, Clone, Copy)]
enum Ev {
    Connected,
    Refused,
    Failed,
}

fn arb_plan() -> impl Strategy<Value = Plan> {
    (
        1usize..=4,
        proptest::option::of(0u8..4),
        0u64..300,
        any::<bool>(),
        0u64..300,
    )
        .prop_map(|(n, pref, hold, stagger, step)| {
            let mut p = Plan::all(n, pref.map(UplinkId), ms(hold));
            if stagger {
                for (k, a) in p.attempts.iter_mut().enumerate() {
                    a.start_after = ms(step * k as u64);
                }
                p.advance_on_failure = true;
            }
            p
        })
}

fn arb_events() -> impl Strategy<Value = Vec<(u64, u8, Ev)>> {
    proptest::collection::vec(
        (
            0u64..400,
            0u8..4,
            prop_oneof![Just(Ev::Connected), Just(Ev::Refused), Just(Ev::Failed)],
        ),
        0..16,
    )
}

proptest! {
    #[test]
    fn race_invariants(plan in arb_plan(), events in arb_events()) {
        let timeout = ms(1000);
        let mut r = Race::new(t(0), &plan, timeout);
        let mut now = t(0);
        let mut log: Vec<(Action, bool)> = Vec::new(); // (action, decided before it)
        let mut connected_ok = Vec::new(); // uplinks whose completion hit a pending attempt
        let mut self_ended = Vec::new(); // uplinks that ended by their own refusal/failure
        collect(&mut r, false, &mut log);
        let mut gaps = events.clone();
        gaps.push((5_000, 0, Ev::Failed)); // then run time out well past every deadline
        for (k, (gap, u, ev)) in gaps.into_iter().enumerate() {
            let target = now + ms(gap);
            while let Some(d) = r.poll_timeout().filter(|d| *d <= target) {
                let before = r.outcome().is_some();
                r.handle_timeout(d);
                collect(&mut r, before, &mut log);
            }
            now = target;
            if k == events.len() {
                break; // the sentinel only advanced time
            }
            let u = UplinkId(u);
            let before = r.outcome().is_some();
            let was_pending = matches!(r.state(u), Some(AttemptState::Pending(_)));
            match ev {
                Ev::Connected => {
                    if was_pending { connected_ok.push(u); }
                    r.handle_connected(now, u);
                }
                Ev::Refused => {
                    if was_pending { self_ended.push(u); }
                    r.handle_refused(now, u);
                }
                Ev::Failed => {
                    if was_pending { self_ended.push(u); }
                    r.handle_failed(now, u);
                }
            }
            collect(&mut r, before, &mut log);
        }
        // Every race is decided once time has run out.
        let (outcome, _) = r.outcome().expect("undecided after all deadlines");
        prop_assert_eq!(r.poll_timeout(), None);
        let uses: Vec<UplinkId> = log.iter().filter_map(|(a, _)| match a {
            Action::Use(u) => Some(*u), _ => None }).collect();
        let refusals = log.iter().filter(|(a, _)| *a == Action::RefuseClient).count();
        prop_assert!(uses.len() + refusals == 1, "{:?}", log);
        // No action at all after the decision.
        prop_assert!(log.iter().all(|(_, decided_before)| !decided_before), "{:?}", log);
        if let Some(u) = uses.first() {
            prop_assert!(connected_ok.contains(u), "used {:?} which never completed", u);
            prop_assert_eq!(outcome, Outcome::Chosen(*u));
        } else {
            // Refused only when no completion ever reached a live attempt.
            prop_assert!(connected_ok.is_empty(), "{:?} {:?}", connected_ok, log);
        }
        // Every started attempt ends exactly once: Use, Close, or its own refusal/failure.
        for (u, st) in r.attempts() {
            let starts = log.iter().filter(|(a, _)| *a == Action::Start(u)).count();
            let ends = log.iter().filter(|(a, _)| *a == Action::Use(u) || *a == Action::Close(u)).count()
                + self_ended.iter().filter(|x| **x == u).count();
            prop_assert!(starts <= 1);
            prop_assert_eq!(starts, ends, "uplink {:?} state {:?} log {:?}", u, st, log);
            prop_assert!(!st.alive());
        }
    }
}

/// Each started attempt is reported from its own start: the staggered one that was still
/// connecting when the first won is a censored sample, the unstarted one is not reported.
#[test]
fn reports_measure_each_attempt_from_its_own_start() {
    let plan = Plan {
        attempts: [(U0, 0), (U1, 250), (U2, 500)]
            .into_iter()
            .map(|(uplink, d)| PlannedAttempt {
                uplink,
                start_after: ms(d),
            })
            .collect(),
        preferred: None,
        hold: ms(0),
        advance_on_failure: false,
    };
    let mut r = Race::new(t(0), &plan, TIMEOUT);
    assert_eq!(r.reports().count(), 0);
    r.handle_timeout(t(250));
    r.handle_connected(t(400), U0);
    let reports: Vec<_> = r.reports().collect();
    assert_eq!(
        reports,
        vec![
            (U0, AttemptReport::Connected(ms(400))),
            (U1, AttemptReport::Unfinished(ms(150)))
        ]
    );
    let mut r = Race::new(t(0), &Plan::all(2, None, ms(0)), TIMEOUT);
    r.handle_refused(t(3), U0);
    r.handle_connected(t(9), U1);
    let reports: Vec<_> = r.reports().collect();
    assert_eq!(
        reports,
        vec![
            (U0, AttemptReport::Refused),
            (U1, AttemptReport::Connected(ms(9)))
        ]
    );
}
