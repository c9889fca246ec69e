//! Sockets of the racing gateway: the transparent listener, one outgoing connection attempt
//! over a given uplink, probes, and reading a client's DSCP.
//!
//! An attempt's socket is bound to the uplink's device (SO_BINDTODEVICE) *and* address, so
//! it leaves by that uplink (the `from ADDR` rule picks the uplink's table) and replies
//! come back to it. `IP_BIND_ADDRESS_NO_PORT` defers the port choice to `connect`, so
//! ports are shared across destinations instead of one per socket at `bind`.

use super::setup::UplinkAddrs;
use socket2::{Domain, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::Duration;
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// Opens the transparent listener for TPROXY'd connections on `port` (IPv4 and, when the
/// host has it, IPv6).
pub fn listeners(port: u16) -> io::Result<Vec<TcpListener>> {
    let mut out = Vec::new();
    for v6 in [false, true] {
        let res = (|| {
            let (dom, addr): (Domain, SocketAddr) = if v6 {
                (Domain::IPV6, (std::net::Ipv6Addr::UNSPECIFIED, port).into())
            } else {
                (Domain::IPV4, (std::net::Ipv4Addr::UNSPECIFIED, port).into())
            };
            let s = Socket::new(dom, Type::STREAM.cloexec(), None)?;
            s.set_reuse_address(true)?;
            if v6 {
                s.set_only_v6(true)?;
                s.set_ip_transparent_v6(true)?;
            } else {
                s.set_ip_transparent_v4(true)?;
                // Accepted sockets inherit IP_RECVTOS, which lets `client_dscp` read the
                // DSCP of the client's handshake.
                set_int(&s, libc::SOL_IP, libc::IP_RECVTOS, 1)?;
            }
            s.bind(&addr.into())?;
            s.listen(1024)?;
            s.set_nonblocking(true)?;
            TcpListener::from_std(s.into())
        })();
        match res {
            Ok(l) => out.push(l),
            Err(e) if v6 => tracing::warn!("no IPv6 listener: {e}"),
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

fn set_int(s: &impl AsRawFd, level: i32, opt: i32, v: i32) -> io::Result<()> {
    // SAFETY: `v` outlives the call and its size is passed; the fd is open (borrowed).
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            level,
            opt,
            (&v as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Connects to `dst` over the uplink with device `interface` and addresses `addrs`.
pub async fn connect(
    interface: &str,
    addrs: UplinkAddrs,
    dst: SocketAddr,
) -> io::Result<TcpStream> {
    let Some(src) = addrs.for_dst(dst.ip()) else {
        return Err(io::Error::new(
            io::ErrorKind::AddrNotAvailable,
            "the uplink has no address of the destination's family",
        ));
    };
    let sock = if dst.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    sock.bind_device(Some(interface.as_bytes()))?;
    // Linux reads IP_BIND_ADDRESS_NO_PORT at SOL_IP for IPv6 sockets too. An old kernel
    // without it only costs ports, so a failure is ignored.
    let _ = set_int(&sock, libc::SOL_IP, libc::IP_BIND_ADDRESS_NO_PORT, 1);
    sock.bind(SocketAddr::new(src, 0))?;
    sock.connect(dst).await
}

/// A raw IPv4 socket that sends NAT mode's SYN copies out of one uplink.
///
/// Why `IPPROTO_RAW` (header included) rather than `AF_PACKET`: the copy still goes through
/// the kernel's routing (the uplink's table, picked by the bound source address and device),
/// neighbour resolution of the uplink's gateway, netfilter (the `notrack` by mark) and the
/// uplink's qdisc (shaping applies), where an `AF_PACKET` send would need the next hop's MAC
/// address and bypass all of it.
#[derive(Debug)]
pub struct RawSender {
    sock: Socket,
}

impl RawSender {
    /// Opens the socket bound to the uplink's device and IPv4 address, marked `mark`.
    pub fn open(interface: &str, addr: std::net::Ipv4Addr, mark: u32) -> io::Result<RawSender> {
        let sock = Socket::new(
            Domain::IPV4,
            Type::RAW.cloexec(),
            Some(socket2::Protocol::from(libc::IPPROTO_RAW)),
        )?;
        sock.bind_device(Some(interface.as_bytes()))?;
        sock.bind(&SocketAddr::new(IpAddr::V4(addr), 0).into())?;
        sock.set_mark(mark)?;
        sock.set_nonblocking(true)?;
        Ok(RawSender { sock })
    }

    /// Sends one whole IPv4 packet (its header included) to `dst`.
    pub fn send(&self, packet: &[u8], dst: std::net::Ipv4Addr) -> io::Result<()> {
        let to = SocketAddr::new(IpAddr::V4(dst), 0);
        self.sock.send_to(packet, &to.into()).map(|_| ())
    }
}

/// Closes `s` with an RST (SO_LINGER 0): a loser of a race, or a finished probe. The thesis
/// resets losers so the server keeps no state for them (§3.1).
pub fn reset(s: TcpStream) {
    // Linger 0 never blocks: the close is an immediate RST.
    let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
    drop(s);
}

/// One probe: a TCP handshake to `target` over the uplink, timed; `None` if it failed or
/// took longer than `timeout`.
pub async fn probe(
    interface: &str,
    addrs: UplinkAddrs,
    target: SocketAddr,
    timeout: Duration,
) -> Option<Duration> {
    let start = std::time::Instant::now();
    match tokio::time::timeout(timeout, connect(interface, addrs, target)).await {
        Ok(Ok(s)) => {
            let rtt = start.elapsed();
            reset(s);
            Some(rtt)
        }
        _ => None,
    }
}

/// The DSCP of the client's handshake (IPv4 only): with IP_RECVTOS set, IP_PKTOPTIONS
/// returns the TOS byte the kernel saw on the connection's handshake as a control message.
pub fn client_dscp(s: &TcpStream) -> Option<u8> {
    let peer: IpAddr = s.peer_addr().ok()?.ip();
    if !peer.is_ipv4() {
        return None;
    }
    let mut buf = [0u8; 256];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `buf` and updates `len`.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_IP,
            libc::IP_PKTOPTIONS,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r != 0 {
        return None;
    }
    tos_from_cmsgs(&buf[..len as usize]).map(|tos| tos >> 2)
}

/// Finds the IP_TOS control message in a cmsg buffer (parsed by hand: bounds-checked
/// reads of the native `cmsghdr` layout, never past the buffer).
fn tos_from_cmsgs(buf: &[u8]) -> Option<u8> {
    let hdr = std::mem::size_of::<libc::cmsghdr>();
    let word = std::mem::size_of::<usize>();
    let mut off = 0;
    while off + hdr <= buf.len() {
        let len = usize::from_ne_bytes(buf[off..off + word].try_into().ok()?);
        let level = i32::from_ne_bytes(buf[off + word..off + word + 4].try_into().ok()?);
        let kind = i32::from_ne_bytes(buf[off + word + 4..off + word + 8].try_into().ok()?);
        if len < hdr || off + len > buf.len() {
            return None;
        }
        if level == libc::SOL_IP && kind == libc::IP_TOS && len > hdr {
            return Some(buf[off + hdr]);
        }
        off += len.div_ceil(word) * word;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmsg_parsing() {
        let hdr = std::mem::size_of::<libc::cmsghdr>();
        let mut b = vec![0u8; 2 * (hdr + 8)];
        // First: IP_TTL, 4 bytes of data; second: IP_TOS = 0x28 (DSCP 10).
        let put = |b: &mut [u8], off: usize, kind: i32, data: u8| {
            b[off..off + 8].copy_from_slice(&(hdr + 4).to_ne_bytes());
            b[off + 8..off + 12].copy_from_slice(&libc::SOL_IP.to_ne_bytes());
            b[off + 12..off + 16].copy_from_slice(&kind.to_ne_bytes());
            b[off + hdr] = data;
        };
        put(&mut b, 0, libc::IP_TTL, 64);
        put(&mut b, hdr + 8, libc::IP_TOS, 0x28);
        assert_eq!(tos_from_cmsgs(&b), Some(0x28));
        assert_eq!(tos_from_cmsgs(&b[..hdr + 8]), None);
        assert_eq!(
            tos_from_cmsgs(&[0xff; 40]),
            None,
            "garbage lengths are refused"
        );
    }
}
