//! Which MPTCP subflows a stream-mode connection should have, from the tunnel's path model.
//!
//! The tunnel probes every link all the time and knows within a few round trips that a
//! link stopped delivering (PROTOCOL.md §7: Suspect, then Down after the detection time).
//! Kernel MPTCP learns it only from its own retransmission timeouts: the data in flight on
//! the dead subflow leaves a hole in the connection's byte stream that its timers fill
//! piece by piece, backed off. So the client steers its connections' subflows by the
//! tunnel's view of each link:
//!
//! - a link that leaves Up (Suspect or Down): its subflow is closed, and the kernel sends
//!   what was in flight on it again over the others at once (measured in the lab: the
//!   longest gap when a link is cut under an upload fell from 0.7–0.85 s to 0.2–0.3 s).
//!   Before that, its address is removed from the connection (REMOVE_ADDR, RFC 8684
//!   §3.4.2, by its [`address_id`]): the option travels on a live subflow, so the server
//!   closes its own end of the dead subflow and resends what *it* had in flight there —
//!   the close alone cannot reach the server over the dead link, and in a download the
//!   server's kernel would go on sending on it until its own timeouts;
//! - a link back Up without a subflow (closed so, or the connection opened while it was
//!   away) gets one;
//! - a link that is Down is tried last for a new connection's first subflow.
//!
//! Closing rather than marking a backup (MP_PRIO) is deliberate: a backup subflow keeps
//! its data in flight, and the hole stays until the kernel's timers fill it; closed, the
//! data is resent in one round trip. A false alarm costs a new subflow's handshake and
//! slow start on that link.
//!
//! Invariant: a step never closes a connection's last subflow on an Up link, nor any
//! subflow while no link with a subflow is Up (MPTCP then waits on what it has, as it
//! would alone). Sans-IO: the daemon reads the states and the subflows and carries out
//! the steps.

use crate::path::PathState;

/// A change to carry out on one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Close the subflow on `link` (its data in flight is resent over the others), after
    /// removing its address (REMOVE_ADDR with its [`address_id`]) so the server closes
    /// its end too.
    Close {
        /// The link's index.
        link: usize,
    },
    /// Open a subflow on `link`.
    Create {
        /// The link's index.
        link: usize,
    },
}

/// The steps that bring a connection with subflows on `links` (one entry per subflow, by
/// link index) in line with the links' `states` (indexed by link; a link past the end is
/// unknown and left alone). `usable(link)`: the link has an interface up with an address
/// now (a subflow can be created on it).
pub fn plan(
    states: &[PathState],
    links: &[usize],
    usable: impl Fn(usize) -> bool,
    out: &mut Vec<Step>,
) {
    out.clear();
    let up = |l: usize| states.get(l) == Some(&PathState::Up);
    let known = |l: usize| l < states.len();
    if links.iter().any(|&l| up(l)) {
        let mut closing: Vec<usize> = links
            .iter()
            .copied()
            .filter(|&l| known(l) && !up(l))
            .collect();
        closing.sort_unstable();
        closing.dedup();
        out.extend(closing.into_iter().map(|link| Step::Close { link }));
    }
    for link in (0..states.len()).filter(|&l| up(l) && usable(l)) {
        if !links.contains(&link) {
            out.push(Step::Create { link });
        }
    }
}

/// The local address id of a connection's subflow on `link` (the id REMOVE_ADDR names):
/// 0 for the connection's initial subflow, which MPTCP always numbers 0 (RFC 8684
/// §3.2), `link + 1` for one the client added (`MP_JOIN` carries the id it was created
/// with). Ids 1..=255 are distinct per link, so a removal never names another link's
/// subflow.
pub fn address_id(link: usize, initial: bool) -> u8 {
    if initial {
        0
    } else {
        (link as u8).wrapping_add(1)
    }
}

/// Whether a new connection's first subflow tries `link` only after the others: the
/// tunnel holds it Down. Down links are still tried (the tunnel may be wrong, and a link
/// that carries nothing costs one connect stagger, not a timeout); a link past the end
/// of `states` counts as not Down. Sort the links by this, stably, for the order.
pub fn tried_last(states: &[PathState], link: usize) -> bool {
    states.get(link) == Some(&PathState::Down)
}

#[cfg(test)]
mod tests {
    use super::*;
    use PathState::{Down, Suspect, Up};

    fn steps(states: &[PathState], links: &[usize]) -> Vec<Step> {
        let mut out = vec![Step::Create { link: 99 }];
        plan(states, links, |_| true, &mut out);
        out
    }

    #[test]
    fn a_link_that_leaves_up_is_closed_while_another_carries() {
        assert_eq!(
            steps(&[Up, Suspect], &[0, 1]),
            vec![Step::Close { link: 1 }]
        );
        assert_eq!(steps(&[Down, Up], &[0, 1]), vec![Step::Close { link: 0 }]);
    }

    #[test]
    fn nothing_is_closed_while_no_link_with_a_subflow_is_up() {
        assert_eq!(steps(&[Suspect, Down], &[0, 1]), vec![]);
        // The only Up link has no subflow yet: it gets one, nothing is closed.
        assert_eq!(steps(&[Down, Up], &[0]), vec![Step::Create { link: 1 }]);
    }

    #[test]
    fn a_link_back_up_gets_a_subflow() {
        assert_eq!(
            steps(&[Up, Up, Up], &[0]),
            vec![Step::Create { link: 1 }, Step::Create { link: 2 }]
        );
    }

    #[test]
    fn a_link_without_an_interface_gets_no_subflow() {
        let mut out = Vec::new();
        plan(&[Up, Up], &[0], |l| l != 1, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn steady_states_need_no_step_and_unknown_links_are_left_alone() {
        assert_eq!(steps(&[Up, Up], &[0, 1]), vec![]);
        assert_eq!(steps(&[Up], &[0, 3]), vec![]);
        assert_eq!(steps(&[], &[0, 1]), vec![]);
    }

    #[test]
    fn the_initial_subflow_is_id_zero_and_added_ones_their_link_plus_one() {
        assert_eq!(address_id(2, true), 0);
        assert_eq!(address_id(0, false), 1);
        assert_eq!(address_id(2, false), 3);
    }

    fn first_subflow_order(states: &[PathState], links: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..links).collect();
        order.sort_by_key(|&l| tried_last(states, l));
        order
    }

    #[test]
    fn first_subflows_try_down_links_last() {
        assert_eq!(first_subflow_order(&[Down, Up, Suspect], 3), vec![1, 2, 0]);
        assert_eq!(first_subflow_order(&[], 2), vec![0, 1]);
        assert_eq!(first_subflow_order(&[Down, Down], 2), vec![0, 1]);
    }

    proptest::proptest! {
        /// Whatever the states and subflows: a connection that had a subflow on an Up link
        /// keeps one, no link is named twice, and nothing is closed on an Up link.
        #[test]
        fn never_leaves_a_connection_without_a_live_subflow(
            st in proptest::collection::vec(0u8..3, 0..5),
            links in proptest::collection::vec(0usize..6, 0..5),
        ) {
            let states: Vec<PathState> =
                st.iter().map(|s| [Up, Suspect, Down][*s as usize]).collect();
            let mut out = Vec::new();
            plan(&states, &links, |_| true, &mut out);
            let up = |l: usize| states.get(l) == Some(&Up);
            let closed: Vec<usize> = out.iter().filter_map(|s| match *s {
                Step::Close { link } => Some(link),
                Step::Create { .. } => None,
            }).collect();
            proptest::prop_assert!(closed.iter().all(|&l| !up(l)));
            let had_up = links.iter().any(|&l| up(l));
            let left_up = links.iter().any(|&l| up(l) && !closed.contains(&l));
            proptest::prop_assert!(!had_up || left_up);
            let mut named: Vec<usize> = out.iter().map(|s| match *s {
                Step::Close { link } | Step::Create { link } => link,
            }).collect();
            let n = named.len();
            named.sort_unstable();
            named.dedup();
            proptest::prop_assert_eq!(named.len(), n);
        }
    }
}
