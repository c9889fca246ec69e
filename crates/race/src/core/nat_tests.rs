//! Tests of NAT mode's race: the thesis's figures 3-2 and 3-3 as packet fates, the delay
//! queue holding a SYN-ACK, then a property test of the invariants.

use super::*;
use crate::core::predictor::Plan;
use core::time::Duration;
use proptest::prelude::*;

const U0: UplinkId = UplinkId(0);
const U1: UplinkId = UplinkId(1);
const U2: UplinkId = UplinkId(2);

fn t(ms: u64) -> Instant {
    Instant::from_micros(ms * 1000)
}

fn race(n: usize, preferred: Option<UplinkId>, hold_ms: u64) -> NatRace {
    let plan = Plan::all(n, preferred, Duration::from_millis(hold_ms));
    NatRace::new(Race::new(t(0), &plan, Duration::from_secs(3)))
}

fn drain(r: &mut NatRace) -> Vec<NatAction> {
    std::iter::from_fn(|| r.poll_action()).collect()
}

#[test]
fn first_syn_ack_is_forwarded_the_others_reset() {
    // Figure 3-2: SYN out of every uplink; first SYN-ACK to the client; later ones reset.
    let mut r = race(3, None, 0);
    assert_eq!(
        drain(&mut r),
        vec![
            NatAction::SendSyn(U0),
            NatAction::SendSyn(U1),
            NatAction::SendSyn(U2)
        ]
    );
    assert_eq!(r.on_syn_ack(t(5), U1), SynAckVerdict::Hold);
    assert_eq!(drain(&mut r), vec![NatAction::ForwardHeld(U1)]);
    assert_eq!(r.on_syn_ack(t(6), U0), SynAckVerdict::Reset);
    assert_eq!(
        r.on_syn_ack(t(7), U1),
        SynAckVerdict::Forward,
        "retransmitted"
    );
    r.on_rst(t(8), U2);
    assert_eq!(drain(&mut r), vec![], "a late RST on a loser is ignored");
    assert_eq!(r.winner(), Some(U1));
}

#[test]
fn refusals_reach_the_client_only_when_every_uplink_refused() {
    // Figure 3-3b: RST on the first and third, SYN-ACK on the second.
    let mut r = race(3, None, 0);
    drain(&mut r);
    r.on_rst(t(1), U0);
    assert_eq!(drain(&mut r), vec![]);
    assert_eq!(r.on_syn_ack(t(2), U1), SynAckVerdict::Hold);
    r.on_rst(t(3), U2);
    assert_eq!(drain(&mut r), vec![NatAction::ForwardHeld(U1)]);
    // Figure 3-3a: every uplink refuses; one refusal, at the last RST.
    let mut r = race(3, None, 0);
    drain(&mut r);
    r.on_rst(t(1), U0);
    r.on_rst(t(2), U2);
    assert_eq!(drain(&mut r), vec![]);
    r.on_rst(t(3), U1);
    assert_eq!(drain(&mut r), vec![NatAction::RefuseClient]);
    r.on_rst(t(4), U1);
    assert_eq!(drain(&mut r), vec![], "refused once");
    assert_eq!(r.on_syn_ack(t(5), U0), SynAckVerdict::Reset);
}

#[test]
fn the_delay_queue_holds_a_syn_ack_for_the_preferred_uplink() {
    // AvMet prefers U0: U1's SYN-ACK waits; U0 answers within the hold and is forwarded.
    let mut r = race(2, Some(U0), 100);
    drain(&mut r);
    assert_eq!(r.on_syn_ack(t(10), U1), SynAckVerdict::Hold);
    assert_eq!(r.on_syn_ack(t(11), U1), SynAckVerdict::Drop, "duplicate");
    assert_eq!(drain(&mut r), vec![]);
    assert_eq!(r.poll_timeout(), Some(t(110)));
    assert_eq!(r.on_syn_ack(t(50), U0), SynAckVerdict::Hold);
    assert_eq!(
        drain(&mut r),
        vec![NatAction::ForwardHeld(U0), NatAction::ResetHeld(U1)]
    );
    // It does not: the held one is forwarded when the hold ends.
    let mut r = race(2, Some(U0), 100);
    drain(&mut r);
    r.on_syn_ack(t(10), U1);
    r.on_timeout(t(110));
    assert_eq!(drain(&mut r), vec![NatAction::ForwardHeld(U1)]);
}

#[derive(Debug, Clone, Copy)]
enum Ev {
    SynAck(u8),
    Rst(u8),
    Tick(u64),
}

fn arb_events() -> impl Strategy<Value = Vec<Ev>> {
    let ev = prop_oneof![
        (0u8..3).prop_map(Ev::SynAck),
        (0u8..3).prop_map(Ev::Rst),
        (1u64..2000).prop_map(Ev::Tick),
    ];
    proptest::collection::vec(ev, 0..30)
}

proptest! {
    #[test]
    fn every_syn_ack_has_one_fate(events in arb_events(), pref in 0u8..4, hold in 0u64..500) {
        let preferred = (pref < 3).then_some(UplinkId(pref));
        let mut r = race(3, preferred, hold);
        let mut now = 0;
        let (mut held, mut forwarded, mut refused) = ([false; 3], Vec::new(), false);
        let mut take = |a: NatAction, held: &mut [bool; 3]| match a {
            NatAction::ForwardHeld(u) => {
                assert!(std::mem::replace(&mut held[u.index()], false));
                forwarded.push(u);
            }
            NatAction::ResetHeld(u) => assert!(std::mem::replace(&mut held[u.index()], false)),
            NatAction::RefuseClient => refused = true,
            NatAction::SendSyn(_) => {}
        };
        for e in events {
            match e {
                Ev::SynAck(u) => match r.on_syn_ack(t(now), UplinkId(u)) {
                    SynAckVerdict::Hold => held[usize::from(u)] = true,
                    SynAckVerdict::Forward => prop_assert_eq!(r.winner(), Some(UplinkId(u))),
                    SynAckVerdict::Drop => prop_assert!(held[usize::from(u)]),
                    SynAckVerdict::Reset => {}
                },
                Ev::Rst(u) => r.on_rst(t(now), UplinkId(u)),
                Ev::Tick(d) => {
                    now += d;
                    r.on_timeout(t(now));
                }
            }
            while let Some(a) = r.poll_action() {
                take(a, &mut held);
            }
        }
        r.on_timeout(t(now + 10_000));
        while let Some(a) = r.poll_action() {
            take(a, &mut held);
        }
        forwarded.dedup();
        prop_assert!(forwarded.len() <= 1);
        prop_assert!(!refused || forwarded.is_empty(), "never both");
        prop_assert_eq!(held, [false; 3], "decided: nothing left held");
        prop_assert!(r.race().outcome().is_some());
    }
}
