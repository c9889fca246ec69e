//! The `mptcp_pm` generic-netlink messages: the commands we send (subflow create/destroy,
//! an address removed from a connection) and the events we read, in the kernel's uAPI layout (`include/uapi/linux/mptcp_pm.h`;
//! the kernel selftests' `pm_nl_ctl.c` builds the same attributes).
//!
//! Byte orders follow the kernel: in commands, a nested address's `PORT` is a host-order
//! u16 and `ADDR4`/`ADDR6` are in network order; in events, `SPORT`/`DPORT` are big-endian
//! (`nla_put_be16`) and `TOKEN`/`FAMILY` host order. Decoding never panics on short or
//! unknown attributes: they are skipped.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use netlink_packet_core::{DecodeError, DefaultNla, Emitable, Nla, NlasIterator, Parseable};
use netlink_packet_generic::{GenlFamily, GenlHeader};

use netlink_packet_core::ParseableParametrized;

/// Generic-netlink family name.
pub const FAMILY_NAME: &str = "mptcp_pm";
/// Multicast group of path-manager events.
pub const EVENTS_GROUP: &str = "mptcp_pm_events";
const VERSION: u8 = 1;

/// `MPTCP_PM_CMD_SUBFLOW_CREATE`.
pub const CMD_SUBFLOW_CREATE: u8 = 10;
/// `MPTCP_PM_CMD_SUBFLOW_DESTROY`.
pub const CMD_SUBFLOW_DESTROY: u8 = 11;
/// `MPTCP_PM_CMD_REMOVE` (userspace path manager: send REMOVE_ADDR for a local address id).
pub const CMD_REMOVE: u8 = 9;
/// `MPTCP_PM_CMD_SET_LIMITS`.
pub const CMD_SET_LIMITS: u8 = 5;
/// `MPTCP_PM_CMD_GET_LIMITS`.
pub const CMD_GET_LIMITS: u8 = 6;

// MPTCP_PM_ATTR_*
const ATTR_ADDR: u16 = 1;
const ATTR_RCV_ADD_ADDRS: u16 = 2;
const ATTR_SUBFLOWS: u16 = 3;
const ATTR_TOKEN: u16 = 4;
const ATTR_LOC_ID: u16 = 5;
const ATTR_ADDR_REMOTE: u16 = 6;
// MPTCP_PM_ADDR_ATTR_*
const ADDR_FAMILY: u16 = 1;
const ADDR_ID: u16 = 2;
const ADDR_ADDR4: u16 = 3;
const ADDR_ADDR6: u16 = 4;
const ADDR_PORT: u16 = 5;
const ADDR_FLAGS: u16 = 6;
const ADDR_IF_IDX: u16 = 7;
/// `MPTCP_PM_ADDR_FLAG_SUBFLOW`: the local address of a subflow create.
pub const FLAG_SUBFLOW: u32 = 1 << 1;
const NLA_F_NESTED: u16 = 1 << 15;

// MPTCP_EVENT_*
const EV_CREATED: u8 = 1;
const EV_ESTABLISHED: u8 = 2;
const EV_CLOSED: u8 = 3;
const EV_SUB_ESTABLISHED: u8 = 10;
const EV_SUB_CLOSED: u8 = 11;
// MPTCP_ATTR_*
const EA_TOKEN: u16 = 1;
const EA_FAMILY: u16 = 2;
const EA_LOC_ID: u16 = 3;
const EA_REM_ID: u16 = 4;
const EA_SADDR4: u16 = 5;
const EA_SADDR6: u16 = 6;
const EA_DADDR4: u16 = 7;
const EA_DADDR6: u16 = 8;
const EA_SPORT: u16 = 9;
const EA_DPORT: u16 = 10;
const EA_ERROR: u16 = 12;
const EA_FLAGS: u16 = 13;
const EA_SERVER_SIDE: u16 = 18;
/// `MPTCP_PM_EV_FLAG_SERVER_SIDE` (newer kernels; older ones send `SERVER_SIDE`).
const EV_FLAG_SERVER_SIDE: u16 = 1 << 1;

/// An MPTCP path-manager event of the calling thread's network namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MptcpEvent {
    /// A connection's first subflow is set up (before it is fully established).
    Created {
        /// The connection's local token.
        token: u32,
        /// The first subflow's local address and port.
        local: SocketAddr,
        /// The first subflow's remote address and port.
        remote: SocketAddr,
        /// Whether this host accepted the connection.
        server_side: bool,
    },
    /// A connection is fully established: subflows may be added.
    Established {
        /// The connection's local token.
        token: u32,
        /// The first subflow's local address and port.
        local: SocketAddr,
        /// The first subflow's remote address and port.
        remote: SocketAddr,
        /// Whether this host accepted the connection.
        server_side: bool,
    },
    /// A connection ended.
    Closed {
        /// The connection's local token.
        token: u32,
    },
    /// A subflow joined a connection.
    SubEstablished {
        /// The connection's local token.
        token: u32,
        /// The subflow's local address and port.
        local: SocketAddr,
        /// The subflow's remote address and port.
        remote: SocketAddr,
    },
    /// A subflow of a connection closed (or failed to connect).
    SubClosed {
        /// The connection's local token.
        token: u32,
        /// The subflow's local address and port.
        local: SocketAddr,
        /// The subflow's remote address and port.
        remote: SocketAddr,
        /// The socket error, if the kernel reported one.
        error: Option<u8>,
    },
    /// Another event (announcements, priority changes, ...) or one missing attributes.
    Other {
        /// The event type.
        kind: u8,
    },
}

/// One nested address of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PmAddr {
    /// Address and port (port 0: not sent).
    pub addr: SocketAddr,
    /// The local address id (local addresses only).
    pub id: Option<u8>,
    /// `FLAGS` to send (e.g. [`FLAG_SUBFLOW`]); none if `None`.
    pub flags: Option<u32>,
    /// The interface the subflow is bound to (local address of a subflow create), so it
    /// leaves by that link whatever the routing table says.
    pub ifindex: Option<u32>,
}

/// A command to the path manager, or an event from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PmMessage {
    /// Command or event type.
    pub cmd: u8,
    /// Attributes as (kind, value) pairs.
    pub nlas: Vec<DefaultNla>,
}

impl PmMessage {
    /// `SUBFLOW_CREATE` (`local.port` 0: the kernel picks one) or `SUBFLOW_DESTROY`.
    pub fn subflow(cmd: u8, token: u32, local: PmAddr, remote: SocketAddr) -> PmMessage {
        let remote = PmAddr {
            addr: remote,
            id: None,
            flags: None,
            ifindex: None,
        };
        PmMessage {
            cmd,
            nlas: vec![
                DefaultNla::new(ATTR_TOKEN, token.to_ne_bytes().to_vec()),
                nested(ATTR_ADDR, &local),
                nested(ATTR_ADDR_REMOTE, &remote),
            ],
        }
    }

    /// `REMOVE`: connection `token` tells its peer (RFC 8684 REMOVE_ADDR) that its local
    /// address `id` is gone, so the peer closes its subflows to that address. `LOC_ID` is
    /// a u8, as `pm_nl_ctl rem token T id I` sends it.
    pub fn remove(token: u32, id: u8) -> PmMessage {
        PmMessage {
            cmd: CMD_REMOVE,
            nlas: vec![
                DefaultNla::new(ATTR_TOKEN, token.to_ne_bytes().to_vec()),
                DefaultNla::new(ATTR_LOC_ID, vec![id]),
            ],
        }
    }

    /// `GET_LIMITS` (no attributes) or `SET_LIMITS` of the in-kernel path manager: the
    /// most subflows per connection and ADD_ADDRs accepted.
    pub fn limits(cmd: u8, limits: Option<(u32, u32)>) -> PmMessage {
        let nlas = limits.map_or_else(Vec::new, |(subflows, add_addrs)| {
            vec![
                DefaultNla::new(ATTR_RCV_ADD_ADDRS, add_addrs.to_ne_bytes().to_vec()),
                DefaultNla::new(ATTR_SUBFLOWS, subflows.to_ne_bytes().to_vec()),
            ]
        });
        PmMessage { cmd, nlas }
    }

    /// The (subflows, add_addr_accepted) limits of a `GET_LIMITS` answer.
    pub fn decode_limits(&self) -> Option<(u32, u32)> {
        let find = |k| {
            let nla = self.nlas.iter().find(|n| n.kind() & !NLA_F_NESTED == k)?;
            let mut v = vec![0u8; nla.value_len()];
            nla.emit_value(&mut v);
            ne_u32(&v)
        };
        Some((find(ATTR_SUBFLOWS)?, find(ATTR_RCV_ADD_ADDRS)?))
    }
}

fn nested(kind: u16, a: &PmAddr) -> DefaultNla {
    let mut inner = Vec::new();
    let family: u16 = if a.addr.is_ipv4() {
        libc::AF_INET as u16
    } else {
        libc::AF_INET6 as u16
    };
    inner.push(DefaultNla::new(ADDR_FAMILY, family.to_ne_bytes().to_vec()));
    if let Some(id) = a.id {
        inner.push(DefaultNla::new(ADDR_ID, vec![id]));
    }
    match a.addr.ip() {
        IpAddr::V4(v4) => inner.push(DefaultNla::new(ADDR_ADDR4, v4.octets().to_vec())),
        IpAddr::V6(v6) => inner.push(DefaultNla::new(ADDR_ADDR6, v6.octets().to_vec())),
    }
    if a.addr.port() != 0 {
        inner.push(DefaultNla::new(
            ADDR_PORT,
            a.addr.port().to_ne_bytes().to_vec(),
        ));
    }
    if let Some(flags) = a.flags {
        inner.push(DefaultNla::new(ADDR_FLAGS, flags.to_ne_bytes().to_vec()));
    }
    if let Some(ix) = a.ifindex {
        inner.push(DefaultNla::new(ADDR_IF_IDX, ix.to_ne_bytes().to_vec()));
    }
    let mut value = vec![0u8; inner.as_slice().buffer_len()];
    inner.as_slice().emit(&mut value);
    DefaultNla::new(kind | NLA_F_NESTED, value)
}

impl GenlFamily for PmMessage {
    fn family_name() -> &'static str {
        FAMILY_NAME
    }

    fn command(&self) -> u8 {
        self.cmd
    }

    fn version(&self) -> u8 {
        VERSION
    }
}

impl Emitable for PmMessage {
    fn buffer_len(&self) -> usize {
        self.nlas.as_slice().buffer_len()
    }

    fn emit(&self, buffer: &mut [u8]) {
        self.nlas.as_slice().emit(buffer)
    }
}

impl ParseableParametrized<[u8], GenlHeader> for PmMessage {
    fn parse_with_param(buf: &[u8], header: GenlHeader) -> Result<Self, DecodeError> {
        let mut nlas = Vec::new();
        for nla in NlasIterator::new(buf) {
            nlas.push(DefaultNla::parse(&nla?)?);
        }
        Ok(PmMessage {
            cmd: header.cmd,
            nlas,
        })
    }
}

/// The event attributes we use, gathered from one message.
#[derive(Default)]
struct EventAttrs {
    token: Option<u32>,
    family: Option<u16>,
    saddr: Option<IpAddr>,
    daddr: Option<IpAddr>,
    sport: Option<u16>,
    dport: Option<u16>,
    error: Option<u8>,
    server_side: bool,
}

fn ne_u32(v: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(v.get(..4)?.try_into().ok()?))
}

fn ne_u16(v: &[u8]) -> Option<u16> {
    Some(u16::from_ne_bytes(v.get(..2)?.try_into().ok()?))
}

fn be_u16(v: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes(v.get(..2)?.try_into().ok()?))
}

fn v4(v: &[u8]) -> Option<IpAddr> {
    let o: [u8; 4] = v.get(..4)?.try_into().ok()?;
    Some(IpAddr::V4(Ipv4Addr::from(o)))
}

fn v6(v: &[u8]) -> Option<IpAddr> {
    let o: [u8; 16] = v.get(..16)?.try_into().ok()?;
    let a = Ipv6Addr::from(o);
    // A dual-stack socket's IPv4 subflow is reported as v4-mapped IPv6: give it as IPv4,
    // which is what SUBFLOW_CREATE and routing want.
    Some(a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4))
}

impl EventAttrs {
    fn gather(nlas: &[DefaultNla]) -> EventAttrs {
        let mut a = EventAttrs::default();
        for nla in nlas {
            let mut v = vec![0u8; nla.value_len()];
            nla.emit_value(&mut v);
            match nla.kind() & !NLA_F_NESTED {
                EA_TOKEN => a.token = ne_u32(&v),
                EA_FAMILY => a.family = ne_u16(&v),
                EA_SADDR4 => a.saddr = v4(&v),
                EA_SADDR6 => a.saddr = v6(&v),
                EA_DADDR4 => a.daddr = v4(&v),
                EA_DADDR6 => a.daddr = v6(&v),
                EA_SPORT => a.sport = be_u16(&v),
                EA_DPORT => a.dport = be_u16(&v),
                EA_ERROR => a.error = v.first().copied(),
                EA_SERVER_SIDE => a.server_side |= v.first().is_some_and(|&b| b != 0),
                EA_FLAGS => {
                    a.server_side |= ne_u16(&v).is_some_and(|f| f & EV_FLAG_SERVER_SIDE != 0)
                }
                EA_LOC_ID | EA_REM_ID => {}
                _ => {}
            }
        }
        a
    }

    fn ends(&self) -> Option<(SocketAddr, SocketAddr)> {
        self.family?;
        Some((
            SocketAddr::new(self.saddr?, self.sport?),
            SocketAddr::new(self.daddr?, self.dport?),
        ))
    }
}

/// Decodes an event message; missing attributes give [`MptcpEvent::Other`].
pub fn decode_event(m: &PmMessage) -> MptcpEvent {
    let a = EventAttrs::gather(&m.nlas);
    let other = MptcpEvent::Other { kind: m.cmd };
    let Some(token) = a.token else {
        return other;
    };
    let ends = a.ends();
    match (m.cmd, ends) {
        (EV_CREATED, Some((local, remote))) => MptcpEvent::Created {
            token,
            local,
            remote,
            server_side: a.server_side,
        },
        (EV_ESTABLISHED, Some((local, remote))) => MptcpEvent::Established {
            token,
            local,
            remote,
            server_side: a.server_side,
        },
        (EV_CLOSED, _) => MptcpEvent::Closed { token },
        (EV_SUB_ESTABLISHED, Some((local, remote))) => MptcpEvent::SubEstablished {
            token,
            local,
            remote,
        },
        (EV_SUB_CLOSED, Some((local, remote))) => MptcpEvent::SubClosed {
            token,
            local,
            remote,
            error: a.error,
        },
        _ => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(m: &PmMessage) -> Vec<u8> {
        let mut b = vec![0u8; m.buffer_len()];
        m.emit(&mut b);
        b
    }

    /// The attribute layout of `pm_nl_ctl csf lip 10.0.1.2 lid 3 rip 10.0.80.2 rport 40001
    /// token 7` (plus our local port), written out by hand.
    #[test]
    fn subflow_create_matches_the_uapi_layout() {
        let local = PmAddr {
            addr: "10.0.1.2:4321".parse().unwrap(),
            id: Some(3),
            flags: Some(FLAG_SUBFLOW),
            ifindex: None,
        };
        let m = PmMessage::subflow(
            CMD_SUBFLOW_CREATE,
            7,
            local,
            "10.0.80.2:40001".parse().unwrap(),
        );
        let b = bytes(&m);
        let mut want = Vec::new();
        let nla = |w: &mut Vec<u8>, kind: u16, v: &[u8]| {
            w.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
            w.extend_from_slice(&kind.to_ne_bytes());
            w.extend_from_slice(v);
            while !w.len().is_multiple_of(4) {
                w.push(0);
            }
        };
        nla(&mut want, 4, &7u32.to_ne_bytes());
        let mut l = Vec::new();
        nla(&mut l, 1, &2u16.to_ne_bytes());
        nla(&mut l, 2, &[3]);
        nla(&mut l, 3, &[10, 0, 1, 2]);
        nla(&mut l, 5, &4321u16.to_ne_bytes());
        nla(&mut l, 6, &2u32.to_ne_bytes());
        nla(&mut want, 1 | 0x8000, &l);
        let mut r = Vec::new();
        nla(&mut r, 1, &2u16.to_ne_bytes());
        nla(&mut r, 3, &[10, 0, 80, 2]);
        nla(&mut r, 5, &40001u16.to_ne_bytes());
        nla(&mut want, 6 | 0x8000, &r);
        assert_eq!(b, want);
    }

    /// `pm_nl_ctl rem token 7 id 3`: the token as a host-order u32, the id as one byte
    /// padded to four; both attributes parse back.
    #[test]
    fn remove_matches_the_uapi_layout_and_parses_back() {
        let m = PmMessage::remove(7, 3);
        let b = bytes(&m);
        let mut want = Vec::new();
        want.extend_from_slice(&8u16.to_ne_bytes());
        want.extend_from_slice(&4u16.to_ne_bytes());
        want.extend_from_slice(&7u32.to_ne_bytes());
        want.extend_from_slice(&5u16.to_ne_bytes());
        want.extend_from_slice(&5u16.to_ne_bytes());
        want.extend_from_slice(&[3, 0, 0, 0]);
        assert_eq!(b, want);
        assert_eq!(m.cmd, CMD_REMOVE);
        let header = GenlHeader {
            cmd: CMD_REMOVE,
            version: VERSION,
        };
        let back = PmMessage::parse_with_param(&b[..], header).unwrap();
        assert_eq!(back, m);
    }

    fn event(cmd: u8, attrs: &[(u16, Vec<u8>)]) -> PmMessage {
        PmMessage {
            cmd,
            nlas: attrs
                .iter()
                .map(|(k, v)| DefaultNla::new(*k, v.clone()))
                .collect(),
        }
    }

    #[test]
    fn events_decode_with_their_byte_orders() {
        let ends = |extra: Vec<(u16, Vec<u8>)>| {
            let mut v = vec![
                (EA_TOKEN, 0xdead_beefu32.to_ne_bytes().to_vec()),
                (EA_FAMILY, 2u16.to_ne_bytes().to_vec()),
                (EA_SADDR4, vec![10, 0, 1, 2]),
                (EA_DADDR4, vec![10, 0, 1, 1]),
                (EA_SPORT, 40000u16.to_be_bytes().to_vec()),
                (EA_DPORT, 5201u16.to_be_bytes().to_vec()),
            ];
            v.extend(extra);
            v
        };
        let est = decode_event(&event(EV_ESTABLISHED, &ends(vec![])));
        assert_eq!(
            est,
            MptcpEvent::Established {
                token: 0xdead_beef,
                local: "10.0.1.2:40000".parse().unwrap(),
                remote: "10.0.1.1:5201".parse().unwrap(),
                server_side: false,
            }
        );
        let srv = decode_event(&event(
            EV_CREATED,
            &ends(vec![(EA_FLAGS, EV_FLAG_SERVER_SIDE.to_ne_bytes().to_vec())]),
        ));
        assert!(matches!(
            srv,
            MptcpEvent::Created {
                server_side: true,
                ..
            }
        ));
        let closed = decode_event(&event(EV_SUB_CLOSED, &ends(vec![(EA_ERROR, vec![111])])));
        assert!(matches!(
            closed,
            MptcpEvent::SubClosed {
                error: Some(111),
                ..
            }
        ));
        // v4-mapped addresses come out as IPv4.
        let mut mapped = [0u8; 16];
        mapped[10] = 0xff;
        mapped[11] = 0xff;
        mapped[12..].copy_from_slice(&[10, 0, 1, 2]);
        let sub = decode_event(&event(
            EV_SUB_ESTABLISHED,
            &[
                (EA_TOKEN, 1u32.to_ne_bytes().to_vec()),
                (EA_FAMILY, 10u16.to_ne_bytes().to_vec()),
                (EA_SADDR6, mapped.to_vec()),
                (EA_DADDR4, vec![10, 0, 80, 2]),
                (EA_SPORT, 1u16.to_be_bytes().to_vec()),
                (EA_DPORT, 2u16.to_be_bytes().to_vec()),
            ],
        ));
        assert_eq!(
            sub,
            MptcpEvent::SubEstablished {
                token: 1,
                local: "10.0.1.2:1".parse().unwrap(),
                remote: "10.0.80.2:2".parse().unwrap(),
            }
        );
        assert_eq!(
            decode_event(&event(
                EV_CLOSED,
                &[(EA_TOKEN, 9u32.to_ne_bytes().to_vec())]
            )),
            MptcpEvent::Closed { token: 9 }
        );
        // Missing or short attributes: no panic, an `Other`.
        assert_eq!(
            decode_event(&event(EV_ESTABLISHED, &[(EA_TOKEN, vec![1])])),
            MptcpEvent::Other {
                kind: EV_ESTABLISHED
            }
        );
    }
}
