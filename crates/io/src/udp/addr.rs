//! Socket addresses between Rust and C (`sockaddr_storage`) for the batch calls.
//!
//! Invariant: IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`, what a dual-stack socket reports
//! for an IPv4 peer) come out as plain IPv4, so a peer has one spelling whatever the socket.

use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// Reports IPv4-mapped IPv6 peers as IPv4.
pub(super) fn canonical(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::V4(SocketAddrV4::new(v4, v6.port())),
            None => a,
        },
        v4 => v4,
    }
}

/// Writes `addr` as a C socket address into `out` and returns its length.
pub(super) fn to_storage(addr: SocketAddr, out: &mut libc::sockaddr_storage) -> libc::socklen_t {
    match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            let sin =
                unsafe { &mut *(out as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
            mem::size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(a) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            let sin6 =
                unsafe { &mut *(out as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_scope_id = a.scope_id();
            mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// Reads a C socket address written by the kernel (IPv4-mapped peers become IPv4).
pub(super) fn from_storage(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match s.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6 =
                unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let a = SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            );
            Some(canonical(SocketAddr::V6(a)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_addresses_round_trip_through_c_storage() {
        for a in ["192.0.2.9:4433", "[2001:db8::7]:51820", "[fe80::1%3]:9"] {
            let a: SocketAddr = a.parse().unwrap();
            // SAFETY: all-zero is a valid sockaddr_storage.
            let mut st: libc::sockaddr_storage = unsafe { mem::zeroed() };
            to_storage(a, &mut st);
            assert_eq!(from_storage(&st), Some(a));
        }
    }

    #[test]
    fn mapped_ipv4_is_reported_as_ipv4() {
        let m: SocketAddr = "[::ffff:192.0.2.1]:7".parse().unwrap();
        assert_eq!(canonical(m), "192.0.2.1:7".parse().unwrap());
    }
}
