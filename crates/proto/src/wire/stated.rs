//! The POLICY and POLICY_ACK frames: the client states how its downlink traffic is to be
//! treated (its rules and default, link policies included), and the server acknowledges
//! the statement it applies (PROTOCOL.md §4.3, §8.5) — MobilityFirst's host-stated policy,
//! which its GNRS holds for the network to apply.
//!
//! ```text
//! POLICY     (0x0A): epoch u32 | default (kind u8 | arg u16) | count u8 |
//!                    count × rule (mask u8 | protocol u8 | port_lo u16 | port_hi u16 |
//!                                  dscp u8 | kind u8 | arg u16)
//! POLICY_ACK (0x0B): epoch u32
//! kind/arg: 0 best (0) | 1 redundant (copies, 0 = adaptive) | 2 aggregate (0) |
//!           3 realtime (deadline_ms ≥ 1) | 4 only (link) | 5 prefer (link) | 6 backup (link)
//! mask:     bit 0 protocol, bit 1 ports, bit 2 dscp present; bits 3–7 zero; an absent
//!           field is zero on the wire
//! ```
//!
//! Invariants: the frame parser never panics and reads only within the buffer (any count
//! up to 255 parses); `decode` accepts exactly what `encode` produces for a classifier of
//! at most `MAX_STATED_RULES` rules (the encoding is canonical), so what a server applies
//! is bounded in size whatever an authenticated client sends.

use super::frame::{FrameReader, FrameWriter};
use super::WireError;
use crate::path::PathId;
use crate::policy::{Classifier, LinkRule, Policy, Rule};
use crate::sched::MAX_PATHS;
use core::time::Duration;

/// Most rules a server accepts in a statement (the client's config allows no more).
pub const MAX_STATED_RULES: usize = 32;
/// Bytes of one encoded rule.
pub const RULE_LEN: usize = 10;
/// Bytes of a POLICY frame before its rules, type byte included.
pub const POLICY_HEADER_LEN: usize = 1 + 4 + 3 + 1;
/// Bytes of a POLICY_ACK frame, type byte included.
pub const POLICY_ACK_LEN: usize = 1 + 4;

const HAS_PROTOCOL: u8 = 0x01;
const HAS_PORTS: u8 = 0x02;
const HAS_DSCP: u8 = 0x04;

/// A POLICY frame as it was on the wire (not yet validated: see `decode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyFrame<'a> {
    /// Which statement this is; a newer one replaces an older one.
    pub epoch: u32,
    /// The default policy: kind, arg.
    pub default: (u8, u16),
    /// `count × RULE_LEN` bytes of rules.
    pub rules: &'a [u8],
}

/// Why a statement was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StatedError {
    /// More rules than `MAX_STATED_RULES`.
    #[error("too many rules: {0}")]
    TooManyRules(usize),
    /// A policy kind or argument out of range (unknown kind, link id, zero deadline).
    #[error("bad policy kind {0} / arg {1}")]
    BadPolicy(u8, u16),
    /// Reserved mask bits, a present field out of range, or an absent field not zero.
    #[error("bad rule {0}")]
    BadRule(usize),
}

impl<'a> FrameReader<'a> {
    /// The fields of a POLICY frame after its type byte.
    pub(super) fn policy(&mut self) -> Result<PolicyFrame<'a>, WireError> {
        let h = self.take(POLICY_HEADER_LEN - 1)?;
        let rules = self.take(usize::from(h[7]) * RULE_LEN)?;
        Ok(PolicyFrame {
            epoch: u32::from_be_bytes([h[0], h[1], h[2], h[3]]),
            default: (h[4], u16::from_be_bytes([h[5], h[6]])),
            rules,
        })
    }
}

impl FrameWriter<'_> {
    /// Writes a POLICY frame (its rules as they are: `encode` makes valid ones).
    pub fn policy(&mut self, f: &PolicyFrame<'_>) -> Result<(), WireError> {
        let count = f.rules.len() / RULE_LEN;
        let count8 = u8::try_from(count).map_err(|_| WireError::BufferTooSmall)?;
        if !f.rules.len().is_multiple_of(RULE_LEN)
            || self.remaining() < POLICY_HEADER_LEN + f.rules.len()
        {
            return Err(WireError::BufferTooSmall);
        }
        self.put(&[0x0A])?;
        self.put(&f.epoch.to_be_bytes())?;
        self.put(&[f.default.0])?;
        self.put(&f.default.1.to_be_bytes())?;
        self.put(&[count8])?;
        self.put(f.rules)
    }

    /// Writes a POLICY_ACK frame.
    pub fn policy_ack(&mut self, epoch: u32) -> Result<(), WireError> {
        if self.remaining() < POLICY_ACK_LEN {
            return Err(WireError::BufferTooSmall);
        }
        self.put(&[0x0B])?;
        self.put(&epoch.to_be_bytes())
    }
}

/// A policy's kind and argument on the wire.
pub fn policy_code(p: Policy) -> (u8, u16) {
    match p {
        Policy::Best => (0, 0),
        Policy::Redundant { copies } => (1, copies.map_or(0, u16::from)),
        Policy::Aggregate => (2, 0),
        Policy::Realtime { .. } => (3, p.deadline_ms()),
        Policy::Link(LinkRule::Only(l)) => (4, u16::from(l.0)),
        Policy::Link(LinkRule::Prefer(l)) => (5, u16::from(l.0)),
        Policy::Link(LinkRule::Backup(l)) => (6, u16::from(l.0)),
    }
}

/// The policy of a kind and argument, if both are valid.
pub fn policy_of((kind, arg): (u8, u16)) -> Result<Policy, StatedError> {
    let bad = StatedError::BadPolicy(kind, arg);
    let link = || {
        (usize::from(arg) < MAX_PATHS)
            .then_some(PathId(arg as u8))
            .ok_or(bad)
    };
    Ok(match kind {
        0 if arg == 0 => Policy::Best,
        1 if usize::from(arg) <= MAX_PATHS => Policy::Redundant {
            copies: (arg > 0).then_some(arg as u8),
        },
        2 if arg == 0 => Policy::Aggregate,
        // FEC is the sender's choice (a client's `fec = false` is not stated): on.
        3 if arg > 0 => Policy::realtime(Duration::from_millis(u64::from(arg))),
        4 => Policy::Link(LinkRule::Only(link()?)),
        5 => Policy::Link(LinkRule::Prefer(link()?)),
        6 => Policy::Link(LinkRule::Backup(link()?)),
        _ => return Err(bad),
    })
}

/// The rules of `c` encoded (`RULE_LEN` bytes each), for a `PolicyFrame`; `None` if it has
/// more than `MAX_STATED_RULES` or a policy that cannot be stated (copies above
/// `MAX_PATHS`, a link beyond it).
pub fn encode_rules(c: &Classifier) -> Option<Vec<u8>> {
    if c.rules.len() > MAX_STATED_RULES || policy_of(policy_code(c.default)).is_err() {
        return None;
    }
    let mut out = Vec::with_capacity(c.rules.len() * RULE_LEN);
    for r in &c.rules {
        let (kind, arg) = policy_code(r.policy);
        policy_of((kind, arg)).ok()?;
        let bit = |present: bool, b: u8| if present { b } else { 0 };
        let mask = bit(r.protocol.is_some(), HAS_PROTOCOL)
            | bit(r.ports.is_some(), HAS_PORTS)
            | bit(r.dscp.is_some(), HAS_DSCP);
        let (lo, hi) = r.ports.unwrap_or((0, 0));
        out.push(mask);
        out.push(r.protocol.unwrap_or(0));
        out.extend_from_slice(&lo.to_be_bytes());
        out.extend_from_slice(&hi.to_be_bytes());
        out.push(r.dscp.unwrap_or(0));
        out.push(kind);
        out.extend_from_slice(&arg.to_be_bytes());
    }
    Some(out)
}

/// The classifier a POLICY frame states, if it is valid and within the bounds (its rules
/// are named `stated N`, from 1).
pub fn decode(f: &PolicyFrame<'_>) -> Result<Classifier, StatedError> {
    let count = f.rules.len() / RULE_LEN;
    if count > MAX_STATED_RULES {
        return Err(StatedError::TooManyRules(count));
    }
    let default = policy_of(f.default)?;
    let mut rules = Vec::with_capacity(count);
    for (i, r) in f.rules.chunks_exact(RULE_LEN).enumerate() {
        let mask = r[0];
        let (lo, hi) = (
            u16::from_be_bytes([r[2], r[3]]),
            u16::from_be_bytes([r[4], r[5]]),
        );
        let zero_unless = |bit: u8, zero: bool| mask & bit != 0 || zero;
        let valid = mask & !(HAS_PROTOCOL | HAS_PORTS | HAS_DSCP) == 0
            && zero_unless(HAS_PROTOCOL, r[1] == 0)
            && zero_unless(HAS_PORTS, lo == 0 && hi == 0)
            && zero_unless(HAS_DSCP, r[6] == 0)
            && lo <= hi
            && r[6] <= 63;
        if !valid {
            return Err(StatedError::BadRule(i));
        }
        rules.push(Rule {
            name: format!("stated {}", i + 1),
            protocol: (mask & HAS_PROTOCOL != 0).then_some(r[1]),
            ports: (mask & HAS_PORTS != 0).then_some((lo, hi)),
            dscp: (mask & HAS_DSCP != 0).then_some(r[6]),
            policy: policy_of((r[7], u16::from_be_bytes([r[8], r[9]])))?,
        });
    }
    Ok(Classifier { rules, default })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_policy() -> impl Strategy<Value = Policy> {
        prop_oneof![
            Just(Policy::Best),
            Just(Policy::Aggregate),
            proptest::option::of(1u8..=16).prop_map(|copies| Policy::Redundant { copies }),
            (1u64..=65_535).prop_map(|ms| Policy::realtime(Duration::from_millis(ms))),
            (0u8..16, 0u8..3).prop_map(|(l, k)| Policy::Link(match k {
                0 => LinkRule::Only(PathId(l)),
                1 => LinkRule::Prefer(PathId(l)),
                _ => LinkRule::Backup(PathId(l)),
            })),
        ]
    }

    fn any_rule() -> impl Strategy<Value = Rule> {
        (
            proptest::option::of(any::<u8>()),
            proptest::option::of((any::<u16>(), any::<u16>())),
            proptest::option::of(0u8..64),
            any_policy(),
        )
            .prop_map(|(protocol, ports, dscp, policy)| Rule {
                name: String::new(),
                protocol,
                ports: ports.map(|(a, b)| (a.min(b), a.max(b))),
                dscp,
                policy,
            })
    }

    /// Encodes `c` into a frame and parses it back through `FrameReader`.
    fn round_trip(c: &Classifier, epoch: u32) -> Vec<u8> {
        let rules = encode_rules(c).expect("statable");
        let (kind, arg) = policy_code(c.default);
        let mut buf = vec![0u8; POLICY_HEADER_LEN + rules.len()];
        let mut w = FrameWriter::new(&mut buf);
        w.policy(&PolicyFrame {
            epoch,
            default: (kind, arg),
            rules: &rules,
        })
        .unwrap();
        buf
    }

    proptest! {
        /// Every classifier within the bounds is stated exactly: decode(encode(c)) = c
        /// (rule names aside, which are not sent).
        #[test]
        fn statement_round_trips(
            rules in proptest::collection::vec(any_rule(), 0..=MAX_STATED_RULES),
            default in any_policy(),
            epoch in any::<u32>(),
        ) {
            let c = Classifier { rules, default };
            let buf = round_trip(&c, epoch);
            let f = match FrameReader::new(&buf).next() {
                Some(Ok(crate::wire::Frame::Policy(f))) => f,
                other => panic!("{other:?}"),
            };
            prop_assert_eq!(f.epoch, epoch);
            let mut back = decode(&f).unwrap();
            for (i, r) in back.rules.iter_mut().enumerate() {
                prop_assert_eq!(&r.name, &format!("stated {}", i + 1));
                r.name.clear();
            }
            prop_assert_eq!(back, c);
        }

        /// Any bytes: parsing and decoding never panic; what decodes re-encodes to the same
        /// bytes (canonical), within the bounds.
        #[test]
        fn any_bytes_decode_canonically(body in proptest::collection::vec(any::<u8>(), 0..400)) {
            let mut frame = vec![0x0A];
            frame.extend_from_slice(&body);
            let Some(Ok(crate::wire::Frame::Policy(f))) = FrameReader::new(&frame).next() else {
                return Ok(());
            };
            if let Ok(c) = decode(&f) {
                prop_assert!(c.rules.len() <= MAX_STATED_RULES);
                let again = round_trip(&c, f.epoch);
                prop_assert_eq!(&again[..], &frame[..again.len()]);
            }
        }
    }

    #[test]
    fn bounds_are_enforced() {
        let c = Classifier::uniform(Policy::Best);
        let mut many = c.clone();
        many.rules = vec![
            Rule {
                name: String::new(),
                protocol: None,
                ports: None,
                dscp: None,
                policy: Policy::Best,
            };
            MAX_STATED_RULES + 1
        ];
        assert!(encode_rules(&many).is_none());
        let rules = vec![0u8; (MAX_STATED_RULES + 1) * RULE_LEN];
        let f = PolicyFrame {
            epoch: 1,
            default: (0, 0),
            rules: &rules,
        };
        assert_eq!(decode(&f), Err(StatedError::TooManyRules(33)));
        for bad in [(4, 16), (3, 0), (0, 1), (7, 0), (1, 17)] {
            assert!(policy_of(bad).is_err(), "{bad:?}");
        }
        let mut reserved = [0u8; RULE_LEN];
        reserved[0] = 0x08;
        let f = PolicyFrame {
            epoch: 1,
            default: (0, 0),
            rules: &reserved,
        };
        assert_eq!(
            decode(&f),
            Err(StatedError::BadRule(0)),
            "reserved mask bit"
        );
        let mut rule = [0u8; RULE_LEN];
        rule[0] = HAS_PORTS;
        rule[2..6].copy_from_slice(&[0, 9, 0, 8]);
        let f = PolicyFrame { rules: &rule, ..f };
        assert_eq!(decode(&f), Err(StatedError::BadRule(0)), "low above high");
    }
}
