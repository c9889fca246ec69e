//! Synchronous rtnetlink requests: query and change links, addresses and routes.
//!
//! Each public function opens a fresh `NETLINK_ROUTE` socket (cheap: one syscall pair), so it
//! acts in the calling thread's network namespace and is safe to call from any thread. The
//! socket is blocking: the kernel answers rtnetlink requests synchronously, so the wait is
//! bounded by the kernel's own work, not by the network.

use std::ffi::CString;
use std::io;
use std::net::IpAddr;

use ipnet::IpNet;
use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP,
    NLM_F_DUMP_INTR, NLM_F_REPLACE, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressFlags, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use super::NetlinkError;

/// Large enough for any single rtnetlink datagram (dump batches are at most ~32 KiB).
const RECV_BUF: usize = 64 * 1024;
/// A dump interrupted by concurrent changes (NLM_F_DUMP_INTR) is retried this many times.
const DUMP_RETRIES: usize = 5;

/// One request/response rtnetlink channel.
pub(crate) struct Rtnl {
    sock: Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl Rtnl {
    pub(crate) fn open(op: &str) -> Result<Self, NetlinkError> {
        let sock_err = |source| NetlinkError::Socket {
            op: op.to_owned(),
            source,
        };
        let mut sock = Socket::new(NETLINK_ROUTE).map_err(sock_err)?;
        sock.bind_auto().map_err(sock_err)?;
        sock.connect(&SocketAddr::new(0, 0)).map_err(sock_err)?;
        Ok(Rtnl {
            sock,
            seq: 0,
            buf: vec![0; RECV_BUF],
        })
    }

    /// Sends a request that changes state and waits for the kernel's acknowledgement.
    pub(crate) fn execute(
        &mut self,
        op: &str,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<Vec<RouteNetlinkMessage>, NetlinkError> {
        self.exchange(op, msg, flags | NLM_F_ACK).map(|(r, _)| r)
    }

    /// Dumps a table (links, addresses, ...), retrying if the dump was interrupted.
    pub(crate) fn dump(
        &mut self,
        op: &str,
        msg: RouteNetlinkMessage,
    ) -> Result<Vec<RouteNetlinkMessage>, NetlinkError> {
        let mut last = Vec::new();
        for _ in 0..DUMP_RETRIES {
            let (replies, interrupted) = self.exchange(op, msg.clone(), NLM_F_DUMP)?;
            if !interrupted {
                return Ok(replies);
            }
            last = replies;
        }
        // Still changing after several tries: a slightly stale view beats no view; the
        // watcher's multicast events correct it afterwards.
        Ok(last)
    }

    fn exchange(
        &mut self,
        op: &str,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<(Vec<RouteNetlinkMessage>, bool), NetlinkError> {
        self.seq = self.seq.wrapping_add(1);
        let mut hdr = NetlinkHeader::default();
        hdr.flags = NLM_F_REQUEST | flags;
        hdr.sequence_number = self.seq;
        let mut nl = NetlinkMessage::new(hdr, NetlinkPayload::from(msg));
        nl.finalize();
        let mut out = vec![0u8; nl.buffer_len()];
        nl.serialize(&mut out);
        let sock_err = |source| NetlinkError::Socket {
            op: op.to_owned(),
            source,
        };
        retry_eintr(|| self.sock.send(&out, 0)).map_err(sock_err)?;

        let mut replies = Vec::new();
        let mut interrupted = false;
        loop {
            let n = retry_eintr(|| self.sock.recv(&mut &mut self.buf[..], 0)).map_err(sock_err)?;
            let mut off = 0;
            while off < n {
                let m = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&self.buf[off..n])
                    .map_err(|e| NetlinkError::Decode {
                        op: op.to_owned(),
                        detail: e.to_string(),
                    })?;
                let len = m.header.length as usize;
                if len == 0 {
                    break;
                }
                // Messages inside one datagram are 4-byte aligned (NLMSG_ALIGN).
                off += (len + 3) & !3;
                if m.header.sequence_number != self.seq {
                    continue; // a late reply to an earlier request on this socket
                }
                interrupted |= m.header.flags & NLM_F_DUMP_INTR != 0;
                match m.payload {
                    NetlinkPayload::Done(d) if d.code < 0 => {
                        return Err(NetlinkError::Kernel {
                            op: op.to_owned(),
                            source: io::Error::from_raw_os_error(-d.code),
                        })
                    }
                    NetlinkPayload::Done(_) => return Ok((replies, interrupted)),
                    NetlinkPayload::Error(e) if e.code.is_none() => {
                        return Ok((replies, interrupted))
                    }
                    NetlinkPayload::Error(e) => {
                        return Err(NetlinkError::Kernel {
                            op: op.to_owned(),
                            source: e.to_io(),
                        })
                    }
                    NetlinkPayload::InnerMessage(inner) => replies.push(inner),
                    _ => {}
                }
            }
        }
    }
}

fn retry_eintr<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

/// The kernel's index of interface `name` (in the calling thread's namespace).
pub fn link_index(name: &str) -> Result<u32, NetlinkError> {
    let missing = || NetlinkError::NoSuchInterface {
        name: name.to_owned(),
    };
    let c = CString::new(name).map_err(|_| missing())?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx != 0 {
        return Ok(idx);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENODEV) | Some(libc::ENXIO) => Err(missing()),
        _ => Err(NetlinkError::Socket {
            op: format!("look up interface {name:?}"),
            source: e,
        }),
    }
}

/// Name of the interface with `index`, if it exists.
pub(crate) fn index_to_name(index: u32) -> Option<String> {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: `buf` has IF_NAMESIZE bytes as if_indextoname requires.
    let p = unsafe { libc::if_indextoname(index, buf.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: on success the kernel wrote a NUL-terminated name into `buf`.
    let s = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    Some(s.to_string_lossy().into_owned())
}

/// Whether a link with these flags carries traffic: administratively up (`IFF_UP`) *and*
/// operationally running (`IFF_RUNNING`: carrier present, RFC 2863 state up or unknown).
pub(crate) fn flags_up(flags: LinkFlags) -> bool {
    flags.contains(LinkFlags::Up | LinkFlags::Running)
}

fn get_link(name: &str) -> Result<LinkMessage, NetlinkError> {
    let op = format!("read link {name}");
    let mut req = LinkMessage::default();
    req.header.index = link_index(name)?;
    let replies = Rtnl::open(&op)?.execute(&op, RouteNetlinkMessage::GetLink(req), 0)?;
    replies
        .into_iter()
        .find_map(|m| match m {
            RouteNetlinkMessage::NewLink(l) => Some(l),
            _ => None,
        })
        .ok_or(NetlinkError::NoSuchInterface {
            name: name.to_owned(),
        })
}

/// Whether `name` is up and running (see the watcher's `Up` event for the same definition).
pub fn link_is_up(name: &str) -> Result<bool, NetlinkError> {
    Ok(flags_up(get_link(name)?.header.flags))
}

/// Sets the administrative state of `name` (`ip link set NAME up|down`).
pub fn set_link_up(name: &str, up: bool) -> Result<(), NetlinkError> {
    let op = format!("set link {name} {}", if up { "up" } else { "down" });
    let mut req = LinkMessage::default();
    req.header.index = link_index(name)?;
    req.header.flags = if up {
        LinkFlags::Up
    } else {
        LinkFlags::empty()
    };
    req.header.change_mask = LinkFlags::Up;
    Rtnl::open(&op)?.execute(&op, RouteNetlinkMessage::SetLink(req), 0)?;
    Ok(())
}

/// Sets the MTU of `name` (`ip link set NAME mtu MTU`).
pub fn set_mtu(name: &str, mtu: u32) -> Result<(), NetlinkError> {
    let op = format!("set mtu {mtu} on {name}");
    let mut req = LinkMessage::default();
    req.header.index = link_index(name)?;
    req.attributes.push(LinkAttribute::Mtu(mtu));
    Rtnl::open(&op)?.execute(&op, RouteNetlinkMessage::SetLink(req), 0)?;
    Ok(())
}

fn family(ip: IpAddr) -> AddressFamily {
    match ip {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    }
}

fn address_message(index: u32, cidr: IpNet) -> AddressMessage {
    let addr = cidr.addr();
    let mut m = AddressMessage::default();
    m.header.family = family(addr);
    m.header.prefix_len = cidr.prefix_len();
    m.header.index = index;
    if addr.is_ipv4() {
        // For IPv4 IFA_LOCAL is the interface's own address; IFA_ADDRESS equal to it means
        // "not point-to-point", which keeps the prefix route `cidr` on the interface.
        m.attributes.push(AddressAttribute::Local(addr));
    }
    m.attributes.push(AddressAttribute::Address(addr));
    m
}

/// Adds `cidr` (address and prefix length) to `name`, replacing an identical address.
///
/// IPv6 addresses are added with `IFA_F_NODAD`: this crate configures point-to-point devices
/// (the TUN) where duplicate address detection cannot find a duplicate and would only keep the
/// address unusable ("tentative") for a second or more.
pub fn add_address(name: &str, cidr: IpNet) -> Result<(), NetlinkError> {
    let op = format!("add address {cidr} to {name}");
    let mut m = address_message(link_index(name)?, cidr);
    if cidr.addr().is_ipv6() {
        m.attributes
            .push(AddressAttribute::Flags(AddressFlags::Nodad));
    }
    Rtnl::open(&op)?.execute(
        &op,
        RouteNetlinkMessage::NewAddress(m),
        NLM_F_CREATE | NLM_F_REPLACE,
    )?;
    Ok(())
}

/// Removes `cidr` from `name` (`ip addr del CIDR dev NAME`).
pub fn del_address(name: &str, cidr: IpNet) -> Result<(), NetlinkError> {
    let op = format!("delete address {cidr} from {name}");
    let m = address_message(link_index(name)?, cidr);
    Rtnl::open(&op)?.execute(&op, RouteNetlinkMessage::DelAddress(m), 0)?;
    Ok(())
}

/// Extracts (index, address/prefix, usable) from an address message. An address is not usable
/// while IPv6 duplicate address detection runs (`tentative`) or after it failed.
pub(crate) fn parse_address(m: &AddressMessage) -> Option<(u32, IpNet, bool)> {
    let mut local = None;
    let mut address = None;
    let mut flags = AddressFlags::from_bits_retain(u32::from(m.header.flags.bits()));
    for a in &m.attributes {
        match a {
            AddressAttribute::Local(ip) => local = Some(*ip),
            AddressAttribute::Address(ip) => address = Some(*ip),
            AddressAttribute::Flags(f) => flags = *f,
            _ => {}
        }
    }
    // On point-to-point IPv4 links IFA_ADDRESS is the peer; IFA_LOCAL is always ours.
    let ip = local.or(address)?;
    let net = IpNet::new(ip, m.header.prefix_len).ok()?;
    let usable = !flags.intersects(AddressFlags::Tentative | AddressFlags::Dadfailed);
    Some((m.header.index, net, usable))
}

/// Dumps every address of every interface as (index, address/prefix, usable).
pub(crate) fn dump_addresses(op: &str) -> Result<Vec<(u32, IpNet, bool)>, NetlinkError> {
    let replies = Rtnl::open(op)?.dump(
        op,
        RouteNetlinkMessage::GetAddress(AddressMessage::default()),
    )?;
    Ok(replies
        .iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewAddress(a) => parse_address(a),
            _ => None,
        })
        .collect())
}

/// Dumps every link as (index, name, up).
pub(crate) fn dump_links(op: &str) -> Result<Vec<(u32, String, bool)>, NetlinkError> {
    let replies = Rtnl::open(op)?.dump(op, RouteNetlinkMessage::GetLink(LinkMessage::default()))?;
    Ok(replies
        .iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewLink(l) => parse_link(l),
            _ => None,
        })
        .collect())
}

/// Extracts (index, name, up) from a link message.
pub(crate) fn parse_link(l: &LinkMessage) -> Option<(u32, String, bool)> {
    let name = l.attributes.iter().find_map(|a| match a {
        LinkAttribute::IfName(n) => Some(n.clone()),
        _ => None,
    })?;
    Some((l.header.index, name, flags_up(l.header.flags)))
}

/// All addresses of `name` (IPv4 and IPv6, including link-local and tentative ones).
pub fn interface_addresses(name: &str) -> Result<Vec<IpNet>, NetlinkError> {
    let index = link_index(name)?;
    let all = dump_addresses(&format!("list addresses of {name}"))?;
    Ok(all
        .into_iter()
        .filter(|(i, _, _)| *i == index)
        .map(|(_, net, _)| net)
        .collect())
}

fn route_message(prefix: IpNet, index: u32, adding: bool) -> RouteMessage {
    let net = prefix.trunc(); // the kernel refuses host bits below the prefix length
    let v4 = net.addr().is_ipv4();
    let mut m = RouteMessage::default();
    m.header.address_family = family(net.addr());
    m.header.destination_prefix_length = net.prefix_len();
    m.header.table = RouteHeader::RT_TABLE_MAIN;
    if adding {
        m.header.protocol = RouteProtocol::Static;
        // A route straight out of a device (no gateway) has link scope in IPv4; IPv6 routes
        // carry no scope.
        m.header.scope = if v4 {
            RouteScope::Link
        } else {
            RouteScope::Universe
        };
        m.header.kind = RouteType::Unicast;
    } else {
        // As iproute2 does for deletions: "nowhere" scope and unspecified protocol/type
        // match a route of any scope, protocol and type.
        m.header.scope = RouteScope::NoWhere;
    }
    if net.prefix_len() > 0 {
        m.attributes
            .push(RouteAttribute::Destination(RouteAddress::from(net.addr())));
    }
    m.attributes.push(RouteAttribute::Oif(index));
    m
}

/// Routes `prefix` out of device `dev` in the main table (`ip route replace PREFIX dev DEV`).
///
/// Host bits of `prefix` are ignored. IPv4 requires `dev` to be up (the kernel answers
/// `ENETDOWN` otherwise).
pub fn add_route(prefix: IpNet, dev: &str) -> Result<(), NetlinkError> {
    let op = format!("add route {prefix} dev {dev}");
    let m = route_message(prefix, link_index(dev)?, true);
    Rtnl::open(&op)?.execute(
        &op,
        RouteNetlinkMessage::NewRoute(m),
        NLM_F_CREATE | NLM_F_REPLACE,
    )?;
    Ok(())
}

/// Removes the main-table route `prefix` out of `dev`; `ESRCH` if there is none.
pub fn del_route(prefix: IpNet, dev: &str) -> Result<(), NetlinkError> {
    let op = format!("delete route {prefix} dev {dev}");
    let m = route_message(prefix, link_index(dev)?, false);
    Rtnl::open(&op)?.execute(&op, RouteNetlinkMessage::DelRoute(m), 0)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_exists_and_is_up() {
        // Every namespace has `lo`; the host's is up.
        assert_eq!(link_index("lo").unwrap(), 1);
        assert_eq!(index_to_name(1).as_deref(), Some("lo"));
        assert!(link_is_up("lo").unwrap());
    }

    #[test]
    fn loopback_has_its_address() {
        let addrs = interface_addresses("lo").unwrap();
        assert!(addrs.contains(&"127.0.0.1/8".parse().unwrap()), "{addrs:?}");
    }

    #[test]
    fn unknown_interface_is_reported_by_name() {
        let e = link_is_up("mhio-nope0").unwrap_err();
        assert!(matches!(e, NetlinkError::NoSuchInterface { ref name } if name == "mhio-nope0"));
        assert!(e.to_string().contains("ip link"));
    }

    #[test]
    fn route_message_truncates_host_bits_and_omits_default_destination() {
        let m = route_message("10.1.2.3/16".parse().unwrap(), 7, true);
        assert_eq!(m.header.destination_prefix_length, 16);
        assert!(m
            .attributes
            .contains(&RouteAttribute::Destination(RouteAddress::Inet(
                "10.1.0.0".parse().unwrap()
            ))));
        assert!(m.attributes.contains(&RouteAttribute::Oif(7)));
        let d = route_message("::/0".parse().unwrap(), 3, false);
        assert!(!d
            .attributes
            .iter()
            .any(|a| matches!(a, RouteAttribute::Destination(_))));
        assert_eq!(d.header.scope, RouteScope::NoWhere);
    }

    #[test]
    fn tentative_ipv6_address_is_not_usable() {
        let mut m = address_message(4, "2001:db8::1/64".parse().unwrap());
        m.attributes
            .push(AddressAttribute::Flags(AddressFlags::Tentative));
        assert_eq!(
            parse_address(&m),
            Some((4, "2001:db8::1/64".parse().unwrap(), false))
        );
        let m = address_message(4, "192.0.2.1/24".parse().unwrap());
        assert_eq!(
            parse_address(&m),
            Some((4, "192.0.2.1/24".parse().unwrap(), true))
        );
    }
}
