//! Held SYNs: the client's connection attempt waits, unanswered, while the gateway races.
//!
//! The daemon receives each new connection's SYN from a netfilter queue and must give every
//! queued packet a verdict. [`SynHold`] decides, per SYN, from the connection's 4-tuple
//! ([`Flow`]):
//!
//! - a new flow is **held**: the table keeps the packet handle and the driver starts a race;
//! - a retransmitted SYN of a held flow is **dropped** (the held one will be answered, and
//!   answering twice would make two handshakes);
//! - when the race is won the held SYN is handed back for **accept** ([`SynHold::admit`]),
//!   so it reaches the transparent listener; the flow stays *admitted* until the driver has
//!   paired the accepted socket with the winner ([`SynHold::close`]), and a SYN of an
//!   admitted flow is accepted too (the first one's SYN-ACK may have been lost);
//! - when every uplink refused or timed out, the held SYN is handed back for **refusal**
//!   ([`SynHold::refuse`]): the kernel answers it with an RST, so the client's `connect()`
//!   fails with ECONNREFUSED instead of succeeding and then being reset;
//! - past `capacity` flows, a new SYN is refused at once ([`SynVerdict::Busy`]).
//!
//! Invariants (property-tested): at most one held packet per flow, so at most one race per
//! connection; every packet given to [`SynHold::on_syn`] comes back exactly once, either at
//! once or from `admit`/`refuse`; the table never exceeds its capacity. Generic over the
//! packet handle `P` so it stays free of I/O.

use std::collections::HashMap;
use std::net::SocketAddr;

/// A TCP connection's 4-tuple as the client sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Flow {
    /// The client's address and port.
    pub client: SocketAddr,
    /// The original destination.
    pub dst: SocketAddr,
}

/// What to do with a SYN now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SynVerdict<P> {
    /// A new connection: the packet is held; start a race for the flow.
    Race,
    /// A retransmission of a held SYN: drop this copy.
    Drop(P),
    /// The flow's race was won already: let this SYN through to the listener.
    Accept(P),
    /// The table is full: refuse the connection.
    Busy(P),
}

#[derive(Debug, Clone)]
enum Entry<P> {
    Held(P),
    Admitted,
}

/// The table of held and admitted flows.
#[derive(Debug, Clone)]
pub struct SynHold<P> {
    flows: HashMap<Flow, Entry<P>>,
    capacity: usize,
    busy: u64,
}

impl<P> SynHold<P> {
    /// An empty table that holds at most `capacity` flows (at least 1).
    pub fn new(capacity: usize) -> SynHold<P> {
        SynHold {
            flows: HashMap::new(),
            capacity: capacity.max(1),
            busy: 0,
        }
    }

    /// A SYN of `flow` arrived, with handle `packet`.
    pub fn on_syn(&mut self, flow: Flow, packet: P) -> SynVerdict<P> {
        match self.flows.get(&flow) {
            Some(Entry::Held(_)) => SynVerdict::Drop(packet),
            Some(Entry::Admitted) => SynVerdict::Accept(packet),
            None if self.flows.len() >= self.capacity => {
                self.busy += 1;
                SynVerdict::Busy(packet)
            }
            None => {
                self.flows.insert(flow, Entry::Held(packet));
                SynVerdict::Race
            }
        }
    }

    /// The race of `flow` was won: the held SYN, to accept. The flow stays admitted until
    /// [`SynHold::close`]. `None` if the flow was not held.
    pub fn admit(&mut self, flow: Flow) -> Option<P> {
        let entry = self.flows.get_mut(&flow)?;
        match std::mem::replace(entry, Entry::Admitted) {
            Entry::Held(p) => Some(p),
            Entry::Admitted => None,
        }
    }

    /// The race of `flow` was lost on every uplink (or could not start): the held SYN, to
    /// refuse. The flow is forgotten.
    pub fn refuse(&mut self, flow: Flow) -> Option<P> {
        match self.flows.remove(&flow)? {
            Entry::Held(p) => Some(p),
            Entry::Admitted => None,
        }
    }

    /// An admitted flow's client connection was paired with its winner, or will never be:
    /// forget it. A held flow is left alone (its packet still needs a verdict).
    pub fn close(&mut self, flow: Flow) {
        if matches!(self.flows.get(&flow), Some(Entry::Admitted)) {
            self.flows.remove(&flow);
        }
    }

    /// Flows held (racing) and admitted (waiting for the client's handshake).
    pub fn counts(&self) -> (usize, usize) {
        let held = self
            .flows
            .values()
            .filter(|e| matches!(e, Entry::Held(_)))
            .count();
        (held, self.flows.len() - held)
    }

    /// SYNs refused because the table was full.
    pub fn busy(&self) -> u64 {
        self.busy
    }

    /// The bound on flows.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn flow(port: u16) -> Flow {
        Flow {
            client: SocketAddr::from(([192, 168, 60, 2], port)),
            dst: SocketAddr::from(([10, 80, 0, 1], 80)),
        }
    }

    #[test]
    fn hold_drop_admit_accept_close() {
        let mut h = SynHold::new(4);
        assert_eq!(h.on_syn(flow(1), 10), SynVerdict::Race);
        assert_eq!(
            h.on_syn(flow(1), 11),
            SynVerdict::Drop(11),
            "retransmission"
        );
        assert_eq!(h.counts(), (1, 0));
        assert_eq!(
            h.admit(flow(1)),
            Some(10),
            "the first SYN is the one let through"
        );
        assert_eq!(h.admit(flow(1)), None);
        assert_eq!(h.on_syn(flow(1), 12), SynVerdict::Accept(12));
        assert_eq!(h.counts(), (0, 1));
        h.close(flow(1));
        assert_eq!(h.counts(), (0, 0));
        assert_eq!(h.on_syn(flow(1), 13), SynVerdict::Race, "a new connection");
    }

    #[test]
    fn refuse_returns_the_held_syn_and_forgets() {
        let mut h = SynHold::new(4);
        assert_eq!(h.on_syn(flow(1), 1), SynVerdict::Race);
        h.close(flow(1)); // not admitted: ignored
        assert_eq!(h.refuse(flow(1)), Some(1));
        assert_eq!(h.refuse(flow(1)), None);
        assert_eq!(h.counts(), (0, 0));
    }

    #[test]
    fn capacity_is_a_hard_bound() {
        let mut h = SynHold::new(2);
        assert_eq!(h.on_syn(flow(1), 1), SynVerdict::Race);
        assert_eq!(h.on_syn(flow(2), 2), SynVerdict::Race);
        assert_eq!(h.on_syn(flow(3), 3), SynVerdict::Busy(3));
        assert_eq!(
            h.on_syn(flow(1), 4),
            SynVerdict::Drop(4),
            "known flows still answered"
        );
        assert_eq!(h.busy(), 1);
        h.refuse(flow(1));
        assert_eq!(h.on_syn(flow(3), 5), SynVerdict::Race);
    }

    #[derive(Debug, Clone, Copy)]
    enum Op {
        Syn(u16),
        Admit(u16),
        Refuse(u16),
        Close(u16),
    }

    fn arb_ops() -> impl Strategy<Value = Vec<Op>> {
        proptest::collection::vec(
            (0u8..4, 0u16..6).prop_map(|(k, p)| match k {
                0 => Op::Syn(p),
                1 => Op::Admit(p),
                2 => Op::Refuse(p),
                _ => Op::Close(p),
            }),
            0..64,
        )
    }

    proptest! {
        /// Every packet comes back exactly once; at most one held packet per flow; bounded.
        #[test]
        fn packets_come_back_once(ops in arb_ops(), cap in 1usize..5) {
            let mut h = SynHold::new(cap);
            let mut next = 0u32;
            let mut given = Vec::new();
            let mut back = Vec::new();
            for op in ops {
                match op {
                    Op::Syn(p) => {
                        given.push(next);
                        match h.on_syn(flow(p), next) {
                            SynVerdict::Race => {}
                            SynVerdict::Drop(x) | SynVerdict::Accept(x) | SynVerdict::Busy(x) => {
                                back.push(x)
                            }
                        }
                        next += 1;
                    }
                    Op::Admit(p) => back.extend(h.admit(flow(p))),
                    Op::Refuse(p) => back.extend(h.refuse(flow(p))),
                    Op::Close(p) => h.close(flow(p)),
                }
                let (held, admitted) = h.counts();
                prop_assert!(held + admitted <= cap);
            }
            for p in 0..6 {
                back.extend(h.refuse(flow(p)));
            }
            back.sort_unstable();
            prop_assert_eq!(back, given);
        }
    }
}
