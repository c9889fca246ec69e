//! Socket options of an MPTCP socket (`SOL_MPTCP`, uapi `linux/mptcp.h`): the connection's
//! token and fallback state (`MPTCP_INFO`), and its subflows' addresses
//! (`MPTCP_SUBFLOW_ADDRS`). Parsing never panics on a short or odd answer.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, BorrowedFd};

const SOL_MPTCP: libc::c_int = 284;

/// What `MPTCP_INFO` (`getsockopt(SOL_MPTCP)`) says of an MPTCP socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MptcpInfo {
    /// The connection's local token (the path manager's handle).
    pub token: u32,
    /// Subflows besides the initial one.
    pub subflows: u8,
    /// The peer does not speak MPTCP: the connection fell back to plain TCP.
    pub fallback: bool,
}

/// `getsockopt(SOL_MPTCP, opt)` into `buf` (which may carry the request); the length the
/// kernel wrote.
fn get_option(fd: BorrowedFd<'_>, opt: libc::c_int, buf: &mut [u8]) -> io::Result<usize> {
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` is valid for `len` bytes and the kernel writes at most `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            SOL_MPTCP,
            opt,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((len as usize).min(buf.len()))
}

/// Reads `MPTCP_INFO` of an MPTCP socket (`struct mptcp_info`, uapi `linux/mptcp.h`:
/// `mptcpi_subflows` at byte 0, `mptcpi_flags` at 8, `mptcpi_token` at 12).
pub fn mptcp_info(fd: BorrowedFd<'_>) -> io::Result<MptcpInfo> {
    const MPTCP_INFO: libc::c_int = 1;
    const FLAG_FALLBACK: u32 = 1;
    let mut buf = [0u8; 64];
    let len = get_option(fd, MPTCP_INFO, &mut buf)?;
    if len < 16 {
        return Err(io::Error::other(
            "MPTCP_INFO shorter than 16 bytes: kernel too old",
        ));
    }
    let word = |at: usize| u32::from_ne_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
    Ok(MptcpInfo {
        token: word(12),
        subflows: buf[0],
        fallback: word(8) & FLAG_FALLBACK != 0,
    })
}

/// `MPTCP_SUBFLOW_ADDRS`: a `struct mptcp_subflow_data` header (16 bytes) followed by one
/// `struct mptcp_subflow_addrs` per subflow: local then remote, each a
/// `sockaddr_storage` (128 bytes).
const MPTCP_SUBFLOW_ADDRS: libc::c_int = 3;
const SUBFLOW_HEADER: usize = 16;
const SOCKADDR_STORAGE: usize = 128;
const SUBFLOW_ENTRY: usize = 2 * SOCKADDR_STORAGE;
/// Most subflows read at once (the kernel allows 8 per connection by default limits).
const MAX_SUBFLOWS: usize = 16;

/// The local and remote address of each subflow of an MPTCP connection (in the kernel's
/// order).
pub fn subflow_addrs(fd: BorrowedFd<'_>) -> io::Result<Vec<(SocketAddr, SocketAddr)>> {
    let mut buf = vec![0u8; SUBFLOW_HEADER + MAX_SUBFLOWS * SUBFLOW_ENTRY];
    buf[0..4].copy_from_slice(&(SUBFLOW_HEADER as u32).to_ne_bytes());
    buf[12..16].copy_from_slice(&(SUBFLOW_ENTRY as u32).to_ne_bytes());
    let len = get_option(fd, MPTCP_SUBFLOW_ADDRS, &mut buf)?;
    Ok(parse_subflow_addrs(&buf[..len]))
}

/// The (local, remote) addresses in a `MPTCP_SUBFLOW_ADDRS` answer; entries cut short or
/// of an unknown family are skipped.
fn parse_subflow_addrs(buf: &[u8]) -> Vec<(SocketAddr, SocketAddr)> {
    let word = |at: usize| {
        buf.get(at..at + 4)
            .map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    let (count, size) = (word(4), word(12));
    if size < SUBFLOW_ENTRY {
        return Vec::new();
    }
    (0..count.min(MAX_SUBFLOWS))
        .filter_map(|i| buf.get(SUBFLOW_HEADER + i * size..)?.get(..SUBFLOW_ENTRY))
        .filter_map(|e| {
            let (local, remote) = e.split_at(SOCKADDR_STORAGE);
            Some((sockaddr(local)?, sockaddr(remote)?))
        })
        .collect()
}

/// A `sockaddr_in` / `sockaddr_in6` (family in host order, port in network order).
fn sockaddr(sa: &[u8]) -> Option<SocketAddr> {
    let family = i32::from(u16::from_ne_bytes([*sa.first()?, *sa.get(1)?]));
    let port = u16::from_be_bytes([*sa.get(2)?, *sa.get(3)?]);
    let ip = if family == libc::AF_INET {
        let a: [u8; 4] = sa.get(4..8)?.try_into().ok()?;
        IpAddr::V4(Ipv4Addr::from(a))
    } else if family == libc::AF_INET6 {
        let a: [u8; 16] = sa.get(8..24)?.try_into().ok()?;
        IpAddr::V6(Ipv6Addr::from(a))
    } else {
        return None;
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(b: &mut [u8], at: usize, a: &SocketAddr) {
        b[at + 2..at + 4].copy_from_slice(&a.port().to_be_bytes());
        match a.ip() {
            IpAddr::V4(v4) => {
                b[at..at + 2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
                b[at + 4..at + 8].copy_from_slice(&v4.octets());
            }
            IpAddr::V6(v6) => {
                b[at..at + 2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
                b[at + 8..at + 24].copy_from_slice(&v6.octets());
            }
        }
    }

    fn answer(subflows: &[(SocketAddr, SocketAddr)]) -> Vec<u8> {
        let mut b = vec![0u8; SUBFLOW_HEADER + subflows.len() * SUBFLOW_ENTRY];
        b[4..8].copy_from_slice(&(subflows.len() as u32).to_ne_bytes());
        b[12..16].copy_from_slice(&(SUBFLOW_ENTRY as u32).to_ne_bytes());
        for (i, (l, r)) in subflows.iter().enumerate() {
            let at = SUBFLOW_HEADER + i * SUBFLOW_ENTRY;
            put(&mut b, at, l);
            put(&mut b, at + SOCKADDR_STORAGE, r);
        }
        b
    }

    fn two() -> Vec<(SocketAddr, SocketAddr)> {
        vec![
            (
                "10.0.1.2:40000".parse().unwrap(),
                "10.0.1.1:7000".parse().unwrap(),
            ),
            (
                "[2001:db8::2]:40001".parse().unwrap(),
                "[2001:db8::1]:7000".parse().unwrap(),
            ),
        ]
    }

    #[test]
    fn reads_the_addresses_of_each_subflow() {
        assert_eq!(parse_subflow_addrs(&answer(&two())), two());
    }

    #[test]
    fn short_or_odd_answers_yield_what_is_whole() {
        let full = answer(&two());
        assert_eq!(
            parse_subflow_addrs(&full[..SUBFLOW_HEADER + SUBFLOW_ENTRY]),
            two()[..1]
        );
        assert!(parse_subflow_addrs(&full[..10]).is_empty());
        let mut bad = full.clone();
        bad[12..16].copy_from_slice(&8u32.to_ne_bytes());
        assert!(parse_subflow_addrs(&bad).is_empty());
    }

    proptest::proptest! {
        #[test]
        fn never_panics(buf in proptest::collection::vec(proptest::num::u8::ANY, 0..600)) {
            let _ = parse_subflow_addrs(&buf);
        }
    }
}
