//! Per-flow policies: which scheduler a packet's flow is under.
//!
//! The client classifies each IP packet from the TUN by protocol, port range and DSCP
//! against ordered rules (first match wins, else the default), as MobilityFirst's per-flow
//! policy and Speedify's/Peplink's classes do. The policy code travels in the DATA frame's
//! flags, and the server remembers it per flow in a bounded `FlowTable`, so return traffic
//! is scheduled by the same policy without the server carrying the client's rules.
//!
//! Link policies (`only:`, `prefer:`, `backup:` a link) pin a flow to one link, or keep it
//! off one, as MobilityFirst's per-interface policies do ("only Wi-Fi"); their DATA frames
//! carry the `best` code (the flags have no room for a link), and the server learns them
//! only from the client's stated policy (`session/stated.rs`).
//!
//! Invariant: classification never panics; an unparsable packet gets the default policy.

use crate::path::PathId;
use crate::Instant;
use core::time::Duration;
use foldhash::HashMap;
use std::net::IpAddr;

/// A flow policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// One path at a time, the best, with fast failover.
    Best,
    /// Copies on k paths (`None` = all).
    Redundant {
        /// Number of copies.
        copies: Option<u8>,
    },
    /// Striped over all paths, delivered in order.
    Aggregate,
    /// Each packet must arrive within `deadline` of leaving the sender (voice, video
    /// calls, live streams): sent on the highest-latency path that still makes it (MMTP),
    /// dropped at the sender if none can, protected by FEC unless `fec` is off, released at
    /// once.
    Realtime {
        /// How long after it was sent a packet is still of use.
        deadline: Duration,
        /// Whether the sender adds Reed-Solomon parity (`session/fec.rs`). A sender-side
        /// choice: it is not on the wire, so a peer's replies on the flow get parity.
        fec: bool,
    },
    /// One link is singled out (`sched/link.rs`).
    Link(LinkRule),
}

/// How a link policy treats its link (a path id: the client's link index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkRule {
    /// `only:<link>`: never another link; held while it is not live, even if others are
    /// (`session/store.rs`).
    Only(PathId),
    /// `prefer:<link>`: this link whenever it is `Up`; the others (as `best`) only while
    /// it is not.
    Prefer(PathId),
    /// `backup:<link>`: the others (as `best`); this link only while none of them is `Up`.
    Backup(PathId),
}

impl LinkRule {
    /// The link singled out.
    pub fn link(self) -> PathId {
        match self {
            LinkRule::Only(l) | LinkRule::Prefer(l) | LinkRule::Backup(l) => l,
        }
    }

    /// Name as used in config and status (before the `:`).
    pub fn name(self) -> &'static str {
        match self {
            LinkRule::Only(_) => "only",
            LinkRule::Prefer(_) => "prefer",
            LinkRule::Backup(_) => "backup",
        }
    }
}

/// Deadline of `realtime` when none is configured: ITU-T G.114's 150 ms mouth-to-ear
/// budget for voice.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(150);

/// DSCP values that mean `realtime` when no rule matches: EF (46, RFC 3246, voice) and
/// AF41/AF42/AF43 (34/36/38, RFC 4594's interactive video).
pub const REALTIME_DSCP: [u8; 4] = [46, 34, 36, 38];

impl Policy {
    /// `realtime` with `deadline` and FEC on (the default).
    pub fn realtime(deadline: Duration) -> Policy {
        Policy::Realtime {
            deadline,
            fec: true,
        }
    }

    /// Two-bit code carried in DATA flags (a link policy travels as `best`).
    pub fn code(self) -> u8 {
        match self {
            Policy::Best | Policy::Link(_) => 0,
            Policy::Redundant { .. } => 1,
            Policy::Aggregate => 2,
            Policy::Realtime { .. } => crate::wire::REALTIME_CODE,
        }
    }

    /// The policy for a code received from the peer (unknown codes mean `Best`); a
    /// realtime code gets the default deadline (`from_data` reads the packet's own).
    pub fn from_code(code: u8) -> Policy {
        match code {
            1 => Policy::Redundant { copies: None },
            2 => Policy::Aggregate,
            3 => Policy::realtime(DEFAULT_DEADLINE),
            _ => Policy::Best,
        }
    }

    /// The policy of a DATA frame from the peer: its code, and for `realtime` the
    /// deadline it carries (0 = the default).
    pub fn from_data(code: u8, deadline_ms: u16) -> Policy {
        match Policy::from_code(code) {
            Policy::Realtime { .. } if deadline_ms > 0 => {
                Policy::realtime(Duration::from_millis(u64::from(deadline_ms)))
            }
            p => p,
        }
    }

    /// The deadline on the wire (ms, at least 1, at most 65 535); 0 for other policies.
    pub fn deadline_ms(self) -> u16 {
        match self {
            Policy::Realtime { deadline, .. } => u16::try_from(deadline.as_millis())
                .unwrap_or(u16::MAX)
                .max(1),
            _ => 0,
        }
    }

    /// The DATA flags (unordered) and the policy argument that follows them on the wire
    /// (`deadline_ms` for realtime, 0 and absent otherwise).
    pub fn data_flags(self) -> (crate::wire::DataFlags, u16) {
        (
            crate::wire::DataFlags::new(self.code(), false),
            self.deadline_ms(),
        )
    }

    /// Name as used in config and status.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Best => "best",
            Policy::Redundant { .. } => "redundant",
            Policy::Aggregate => "aggregate",
            Policy::Realtime { .. } => "realtime",
            Policy::Link(r) => r.name(),
        }
    }

    /// The link rule of a link policy.
    pub fn link_rule(self) -> Option<LinkRule> {
        match self {
            Policy::Link(r) => Some(r),
            _ => None,
        }
    }
}

/// The fields of an IP packet that rules match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// IP protocol number.
    pub protocol: u8,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port (0 when not TCP/UDP or fragmented).
    pub sport: u16,
    /// Destination port (0 when not TCP/UDP or fragmented).
    pub dport: u16,
}

impl FlowKey {
    /// The key of the reverse direction.
    pub fn reversed(self) -> FlowKey {
        FlowKey {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            ..self
        }
    }
}

/// Parses the flow key and DSCP of an IP packet.
///
/// IPv4 without an authentication header, the common case, is read directly: the key is
/// parsed several times per packet (routing, policy, flow meter, source check), where
/// etherparse's general parser cost more than the scheduling around it. It gives exactly
/// etherparse's answer, which everything else still gets (see `parse_flow_etherparse`).
pub fn parse_flow(packet: &[u8]) -> Option<(FlowKey, u8)> {
    match (packet.first().map(|b| b >> 4), packet.get(9)) {
        (Some(4), Some(&p)) if p != etherparse::ip_number::AUTH.0 => parse_ipv4(packet),
        _ => parse_flow_etherparse(packet),
    }
}

/// `parse_flow` for IPv4 whose protocol is not AH, with etherparse's checks: the header
/// length is at least 20 and within the packet, the total length covers the header and
/// the packet covers it; the payload ends at the total length.
fn parse_ipv4(p: &[u8]) -> Option<(FlowKey, u8)> {
    let header_len = usize::from(p[0] & 0xf) * 4;
    if header_len < 20 || p.len() < header_len {
        return None;
    }
    let total_len = usize::from(u16::from_be_bytes([p[2], p[3]]));
    if total_len < header_len || p.len() < total_len {
        return None;
    }
    let fragmented = p[6] & 0x20 != 0 || u16::from_be_bytes([p[6] & 0x1f, p[7]]) != 0;
    let addr = |i: usize| IpAddr::from([p[i], p[i + 1], p[i + 2], p[i + 3]]);
    let key = flow_key(
        p[9],
        fragmented,
        &p[header_len..total_len],
        addr(12),
        addr(16),
    );
    Some((key, p[1] >> 2))
}

/// `parse_flow` by etherparse: IPv6, and IPv4 with an authentication header.
fn parse_flow_etherparse(packet: &[u8]) -> Option<(FlowKey, u8)> {
    let ip = etherparse::IpSlice::from_slice(packet).ok()?;
    let dscp = match &ip {
        etherparse::IpSlice::Ipv4(v4) => v4.header().dcp().value(),
        etherparse::IpSlice::Ipv6(v6) => v6.header().dscp().value(),
    };
    let payload = ip.payload();
    let key = flow_key(
        payload.ip_number.0,
        payload.fragmented,
        payload.payload,
        ip.source_addr(),
        ip.destination_addr(),
    );
    Some((key, dscp))
}

/// The key of a transport `payload`: ports only for an unfragmented TCP or UDP one that
/// holds them.
fn flow_key(protocol: u8, fragmented: bool, payload: &[u8], src: IpAddr, dst: IpAddr) -> FlowKey {
    let ports = (!fragmented && (protocol == 6 || protocol == 17))
        .then(|| payload.get(..4))
        .flatten()
        .map(|p| {
            (
                u16::from_be_bytes([p[0], p[1]]),
                u16::from_be_bytes([p[2], p[3]]),
            )
        });
    let (sport, dport) = ports.unwrap_or((0, 0));
    FlowKey {
        protocol,
        src,
        dst,
        sport,
        dport,
    }
}

/// One classification rule; `None` fields match anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Name, for status and logs.
    pub name: String,
    /// IP protocol number.
    pub protocol: Option<u8>,
    /// Inclusive port range, matched against source or destination port.
    pub ports: Option<(u16, u16)>,
    /// DSCP value (0..=63).
    pub dscp: Option<u8>,
    /// The policy applied on a match.
    pub policy: Policy,
}

impl Rule {
    fn matches(&self, k: &FlowKey, dscp: u8) -> bool {
        self.protocol.is_none_or(|p| p == k.protocol)
            && self.dscp.is_none_or(|d| d == dscp)
            && self
                .ports
                .is_none_or(|(lo, hi)| (lo..=hi).contains(&k.sport) || (lo..=hi).contains(&k.dport))
    }
}

/// Ordered rules plus a default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classifier {
    /// Rules, first match wins.
    pub rules: Vec<Rule>,
    /// Policy when no rule matches.
    pub default: Policy,
}

impl Classifier {
    /// Everything under one policy.
    pub fn uniform(p: Policy) -> Self {
        Classifier {
            rules: vec![],
            default: p,
        }
    }

    /// The policy of the first rule that matches `packet`, if one does.
    pub fn rule_policy(&self, packet: &[u8]) -> Option<Policy> {
        let (key, dscp) = parse_flow(packet)?;
        self.rules
            .iter()
            .find(|r| r.matches(&key, dscp))
            .map(|r| r.policy)
    }

    /// The policy of `packet`: the first rule that matches; else `realtime` (default
    /// deadline) for a packet marked EF or AF4x (`REALTIME_DSCP`) — a rule naming the DSCP
    /// overrides this; else the default.
    pub fn classify(&self, packet: &[u8]) -> Policy {
        let Some((key, dscp)) = parse_flow(packet) else {
            return self.default;
        };
        match self.rules.iter().find(|r| r.matches(&key, dscp)) {
            Some(r) => r.policy,
            None if REALTIME_DSCP.contains(&dscp) => Policy::realtime(DEFAULT_DEADLINE),
            None => self.default,
        }
    }
}

/// Bounded memory of which policy the peer uses per flow (server side).
#[derive(Debug)]
pub struct FlowTable {
    /// foldhash, not std's SipHash: looked up for every packet sent.
    map: HashMap<FlowKey, (Policy, Instant)>,
    cap: usize,
    idle: Duration,
}

impl FlowTable {
    /// A table of at most `cap` flows, forgetting flows idle for `idle`.
    pub fn new(cap: usize, idle: Duration) -> Self {
        FlowTable {
            map: HashMap::default(),
            cap,
            idle,
        }
    }

    /// Records that packets of `key` (peer → us) use `policy`.
    pub fn learn(&mut self, now: Instant, key: FlowKey, policy: Policy) {
        if self.map.len() >= self.cap && !self.map.contains_key(&key) {
            let idle = self.idle;
            self.map.retain(|_, (_, t)| now.saturating_since(*t) < idle);
            if self.map.len() >= self.cap {
                return;
            }
        }
        self.map.insert(key, (policy, now));
    }

    /// The policy for a packet we send (us → peer), looked up by its reverse key.
    pub fn lookup(&self, packet: &[u8]) -> Option<Policy> {
        let (key, _) = parse_flow(packet)?;
        self.map.get(&key.reversed()).map(|&(p, _)| p)
    }

    /// Flows remembered.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no flow is remembered.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal IPv4/UDP packet with the given DSCP and ports.
    pub fn udp4(dscp: u8, sport: u16, dport: u16) -> Vec<u8> {
        let mut p = vec![0u8; 28];
        p[0] = 0x45;
        p[1] = dscp << 2;
        p[2..4].copy_from_slice(&28u16.to_be_bytes());
        p[8] = 64;
        p[9] = 17;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&dport.to_be_bytes());
        p[24..26].copy_from_slice(&8u16.to_be_bytes());
        p
    }

    #[test]
    fn rules_first_match_wins() {
        let c = Classifier {
            rules: vec![
                Rule {
                    name: "voip".into(),
                    protocol: Some(17),
                    ports: Some((5000, 5999)),
                    dscp: None,
                    policy: Policy::Redundant { copies: Some(2) },
                },
                Rule {
                    name: "ef".into(),
                    protocol: None,
                    ports: None,
                    dscp: Some(46),
                    policy: Policy::Best,
                },
            ],
            default: Policy::Aggregate,
        };
        assert_eq!(
            c.classify(&udp4(0, 40000, 5004)),
            Policy::Redundant { copies: Some(2) }
        );
        assert_eq!(c.classify(&udp4(46, 1, 2)), Policy::Best);
        assert_eq!(c.classify(&udp4(0, 1, 2)), Policy::Aggregate);
        assert_eq!(c.classify(&[0x45, 0, 1]), Policy::Aggregate);
    }

    /// EF and AF4x mean `realtime` when no rule matches; a rule naming the DSCP wins.
    #[test]
    fn dscp_realtime_default() {
        let rt = Policy::realtime(DEFAULT_DEADLINE);
        let mut c = Classifier::uniform(Policy::Aggregate);
        for d in [46, 34, 36, 38] {
            assert_eq!(c.classify(&udp4(d, 1, 2)), rt, "dscp {d}");
        }
        for d in [0, 10, 32, 40, 48] {
            assert_eq!(c.classify(&udp4(d, 1, 2)), Policy::Aggregate, "dscp {d}");
        }
        c.rules.push(Rule {
            name: "ef-best".into(),
            protocol: None,
            ports: None,
            dscp: Some(46),
            policy: Policy::Best,
        });
        assert_eq!(c.classify(&udp4(46, 1, 2)), Policy::Best);
        assert_eq!(c.classify(&udp4(34, 1, 2)), rt);
    }

    #[test]
    fn realtime_code_and_deadline_round_trip() {
        let p = Policy::realtime(Duration::from_millis(80));
        assert_eq!(p.code(), 3);
        assert_eq!(Policy::from_data(p.code(), p.deadline_ms()), p);
        assert_eq!(Policy::from_data(3, 0), Policy::realtime(DEFAULT_DEADLINE));
        assert_eq!(Policy::from_data(2, 80), Policy::Aggregate);
        let long = Policy::realtime(Duration::from_secs(100));
        assert_eq!(long.deadline_ms(), u16::MAX);
    }

    #[test]
    fn flow_table_answers_reverse_direction() {
        let mut t = FlowTable::new(2, Duration::from_secs(1));
        let up = udp4(0, 1000, 2000);
        let (k, _) = parse_flow(&up).unwrap();
        t.learn(Instant::ZERO, k, Policy::Aggregate);
        let mut down = udp4(0, 2000, 1000);
        down[12..16].copy_from_slice(&[10, 0, 0, 2]);
        down[16..20].copy_from_slice(&[10, 0, 0, 1]);
        assert_eq!(t.lookup(&down), Some(Policy::Aggregate));
        assert_eq!(t.lookup(&up), None);
    }

    proptest::proptest! {
        /// The direct IPv4 reader agrees with etherparse on every input: a valid UDP or
        /// TCP packet (options included) with bytes overwritten — header fields, lengths,
        /// fragment bits, protocol — and cut anywhere.
        #[test]
        fn direct_ipv4_parse_is_etherparse(
            tcp in proptest::bool::ANY,
            options in 0usize..3,
            body in proptest::collection::vec(proptest::num::u8::ANY, 0..40),
            edits in proptest::collection::vec((0usize..64, proptest::num::u8::ANY), 0..4),
            cut in proptest::option::of(0usize..80),
        ) {
            let mut p = udp4(5, 1234, 80);
            if tcp {
                p[9] = 6;
            }
            // Options: grow the header by `options` words (they are opaque to both).
            p.splice(20..20, std::iter::repeat_n(1u8, options * 4));
            p[0] = 0x45 + options as u8;
            p.extend_from_slice(&body);
            let total = p.len() as u16;
            p[2..4].copy_from_slice(&total.to_be_bytes());
            for (i, v) in edits {
                if let Some(b) = p.get_mut(i) {
                    *b = v;
                }
            }
            if let Some(n) = cut {
                p.truncate(n);
            }
            proptest::prop_assert_eq!(parse_flow(&p), parse_flow_etherparse(&p));
        }
    }

    #[test]
    fn flow_table_is_bounded() {
        let mut t = FlowTable::new(2, Duration::from_secs(10));
        for port in 0..5 {
            let (k, _) = parse_flow(&udp4(0, port, 1)).unwrap();
            t.learn(Instant::ZERO, k, Policy::Best);
        }
        assert_eq!(t.len(), 2);
    }
}
