//! One UDP socket per local link, with batched `recvmmsg`/`sendmmsg` I/O and UDP
//! segmentation and receive offloads (GSO on by default where the kernel has it, GRO when
//! the reader asks for it: [`LinkSocket::set_gro`]).
//!
//! Role: carries the tunnel's encrypted datagrams. A client opens one [`LinkSocket`] per
//! uplink, pinned to that uplink's interface with `SO_BINDTODEVICE` so its traffic leaves by
//! that interface whatever the routing table says; the server opens one unpinned socket.
//!
//! Invariants:
//! - Sockets are nonblocking and close-on-exec; wrap them in `AsyncFd` for readiness.
//! - An IPv6 socket is dual-stack (`IPV6_V6ONLY` off, whatever the system default): IPv4
//!   peers are reported as plain IPv4 addresses and may be given as such to the send calls
//!   (they are mapped to `::ffff:a.b.c.d` internally).
//! - One batch call is one system call and handles at most [`BATCH_MAX`] reads or runs of
//!   datagrams ([`batch`]); a run to one destination goes out as one super-datagram when
//!   GSO is on ([`offload`]), which the wire never sees: it carries ordinary datagrams.
//! - With GRO on, one read may hold several datagrams of one sender ([`RecvBuf::segments`]);
//!   readers that turn it on give 64 KiB buffers. `recv_from` must not be used then.
//!
//! # Errors the caller should expect, and what they mean
//! All I/O methods return `std::io::Error`; [`classify`] sorts one into an [`ErrorClass`]:
//! - `EAGAIN` ([`io::ErrorKind::WouldBlock`]): nothing to read / send queue full; wait for
//!   readiness. ([`ErrorClass::WouldBlock`])
//! - `ENOBUFS`: a local queue (qdisc, device) is full; the datagram was dropped; retry later
//!   or count it as lost. ([`ErrorClass::NoBuffers`])
//! - `ENETUNREACH`, `EHOSTUNREACH`, `ENETDOWN`, `EADDRNOTAVAIL`, `EPERM`/`EACCES` (a local
//!   firewall rule): this link cannot reach that peer now; treat the path as down.
//!   ([`ErrorClass::Unreachable`])
//! - `ENODEV`, `ENXIO`: the pinned interface disappeared; rebind when it returns.
//!   ([`ErrorClass::DeviceGone`])
//! - `EMSGSIZE`: datagram larger than the path allows. ([`ErrorClass::TooBig`])

mod addr;
pub mod batch;
pub mod offload;
pub mod steer;

use std::io;
use std::mem;
use std::net::{SocketAddr, SocketAddrV6, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::Ordering::Relaxed;

use socket2::{Domain, Protocol, SockRef, Socket, Type};

use addr::canonical;
pub use batch::RecvBuf;
use offload::Offload;
pub use offload::OffloadStats;

/// Most reads handled by one `recv_batch`, and runs (each one datagram, or a super-datagram
/// of up to [`offload::MAX_SEGMENTS`]) by one `sendmmsg`.
pub const BATCH_MAX: usize = 64;
/// Socket buffer size asked for at bind time (per direction). Bursts of a fast link outrun
/// the default ~200 KiB while the daemon is busy elsewhere on its single thread.
pub const DEFAULT_BUFFER_BYTES: usize = 4 << 20;

/// Errors creating a [`LinkSocket`]. (I/O on an existing socket returns `io::Error`.)
#[derive(Debug, thiserror::Error)]
pub enum UdpError {
    /// The socket could not be created (file descriptor limit or no IPv6 in this kernel).
    #[error("cannot create UDP socket for {local}: {source}; check the fd limit and IPv6 support")]
    Socket {
        /// The requested local address.
        local: SocketAddr,
        /// Underlying error.
        source: io::Error,
    },
    /// Pinning to the interface failed: it does not exist (`ENODEV`) or we lack CAP_NET_RAW.
    #[error("cannot bind UDP socket to interface {interface:?}: {source}; check the interface exists (`ip link`) and run as root")]
    BindDevice {
        /// The interface name.
        interface: String,
        /// Underlying error.
        source: io::Error,
    },
    /// Binding the address failed: port in use, or address not on this host.
    #[error(
        "cannot bind UDP socket to {local}: {source}; pick a free port or an address of this host"
    )]
    Bind {
        /// The requested local address.
        local: SocketAddr,
        /// Underlying error.
        source: io::Error,
    },
}

/// How a caller should react to an I/O error; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// `EAGAIN`: wait for readiness and retry.
    WouldBlock,
    /// `EINTR`: retry at once.
    Interrupted,
    /// `ENOBUFS`: local queue full, datagram dropped; transient.
    NoBuffers,
    /// No route / link down / firewall: the path is unusable for now.
    Unreachable,
    /// The pinned interface vanished: rebind when it reappears.
    DeviceGone,
    /// `EMSGSIZE`: datagram too large.
    TooBig,
    /// Anything else: a bug or a broken socket; close it.
    Fatal,
}

/// Sorts an I/O error from this module into what the caller should do.
pub fn classify(e: &io::Error) -> ErrorClass {
    if e.kind() == io::ErrorKind::WouldBlock {
        return ErrorClass::WouldBlock;
    }
    match e.raw_os_error() {
        Some(libc::EINTR) => ErrorClass::Interrupted,
        Some(libc::ENOBUFS) => ErrorClass::NoBuffers,
        Some(
            libc::ENETUNREACH
            | libc::EHOSTUNREACH
            | libc::ENETDOWN
            | libc::EADDRNOTAVAIL
            | libc::EPERM
            | libc::EACCES,
        ) => ErrorClass::Unreachable,
        Some(libc::ENODEV | libc::ENXIO) => ErrorClass::DeviceGone,
        Some(libc::EMSGSIZE) => ErrorClass::TooBig,
        _ => ErrorClass::Fatal,
    }
}

/// A nonblocking UDP socket, optionally pinned to one network interface.
///
/// With tokio: `unsafe { AsyncFd::register(sock) }` (readable and writable interest). Its
/// safety contract holds: the socket owns its fd for its whole life and `as_raw_fd` always
/// returns it.
#[derive(Debug)]
pub struct LinkSocket {
    udp: UdpSocket,
    interface: Option<String>,
    v6: bool,
    offload: Offload,
}

impl LinkSocket {
    /// Creates a socket bound to `local`, pinned to `interface` if given, with
    /// [`DEFAULT_BUFFER_BYTES`] buffers (best effort: see [`LinkSocket::set_buffer_sizes`]).
    pub fn bind(interface: Option<&str>, local: SocketAddr) -> Result<LinkSocket, UdpError> {
        Self::bind_with(interface, local, false)
    }

    /// [`LinkSocket::bind`], with `SO_REUSEPORT` set before binding when `reuse_port`
    /// (a socket of a group sharing one port, [`steer`]).
    fn bind_with(
        interface: Option<&str>,
        local: SocketAddr,
        reuse_port: bool,
    ) -> Result<LinkSocket, UdpError> {
        let sock_err = |source| UdpError::Socket { local, source };
        let sock = Socket::new(
            Domain::for_address(local),
            Type::DGRAM.nonblocking().cloexec(),
            Some(Protocol::UDP),
        )
        .map_err(sock_err)?;
        if let Some(name) = interface {
            sock.bind_device(Some(name.as_bytes()))
                .map_err(|source| UdpError::BindDevice {
                    interface: name.to_owned(),
                    source,
                })?;
        }
        if local.is_ipv6() {
            sock.set_only_v6(false).map_err(sock_err)?;
        }
        if reuse_port {
            sock.set_reuse_port(true).map_err(sock_err)?;
        }
        sock.bind(&local.into())
            .map_err(|source| UdpError::Bind { local, source })?;
        let s = LinkSocket {
            udp: sock.into(),
            interface: interface.map(str::to_owned),
            v6: local.is_ipv6(),
            offload: Offload::default(),
        };
        s.set_gso(true);
        // A smaller buffer still works, only with more drops under bursts.
        let _ = s.set_buffer_sizes(DEFAULT_BUFFER_BYTES);
        Ok(s)
    }

    /// The interface this socket is pinned to.
    pub fn interface(&self) -> Option<&str> {
        self.interface.as_deref()
    }

    /// The bound local address (with the port the kernel chose if 0 was asked).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.udp.local_addr().map(canonical)
    }

    /// Sets both socket buffers to `bytes`, with `SO_RCVBUFFORCE`/`SO_SNDBUFFORCE` (root may
    /// exceed `net.core.rmem_max`/`wmem_max`), else the plain options (capped by the sysctls).
    pub fn set_buffer_sizes(&self, bytes: usize) -> io::Result<()> {
        let val = libc::c_int::try_from(bytes / 2).unwrap_or(libc::c_int::MAX);
        for (force, plain) in [
            (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
            (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
        ] {
            // The kernel doubles the value for bookkeeping overhead, hence bytes / 2 above.
            if setsockopt_int(self.as_raw_fd(), force, val).is_err() {
                setsockopt_int(self.as_raw_fd(), plain, val)?;
            }
        }
        Ok(())
    }

    /// (receive, send) buffer sizes as the kernel reports them.
    pub fn buffer_sizes(&self) -> io::Result<(usize, usize)> {
        let s = SockRef::from(&self.udp);
        Ok((s.recv_buffer_size()?, s.send_buffer_size()?))
    }

    /// Sends one datagram to `dst`.
    pub fn send_to(&self, buf: &[u8], dst: SocketAddr) -> io::Result<usize> {
        self.udp.send_to(buf, self.outgoing(dst))
    }

    /// Receives one datagram: (length, sender).
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.udp.recv_from(buf).map(|(n, a)| (n, canonical(a)))
    }

    /// Sends runs of datagrams as super-datagrams (`UDP_SEGMENT`), if the kernel has it:
    /// on by default. Returns whether it is on.
    pub fn set_gso(&self, on: bool) -> bool {
        let on = on && offload::gso_supported(self.as_raw_fd());
        self.offload.gso.store(on, Relaxed);
        on
    }

    /// Lets reads coalesce datagrams of one sender (`UDP_GRO`): off by default, as it needs
    /// 64 KiB receive buffers. Returns whether it is on.
    pub fn set_gro(&self, on: bool) -> bool {
        let ok = offload::set_gro(self.as_raw_fd(), on);
        let now = on && ok;
        self.offload.gro.store(now, Relaxed);
        now
    }

    /// The offloads' state and counters.
    pub fn offload_stats(&self) -> OffloadStats {
        self.offload.stats()
    }

    /// IPv4 destinations must be IPv4-mapped on an IPv6 socket.
    fn outgoing(&self, dst: SocketAddr) -> SocketAddr {
        match dst {
            SocketAddr::V4(a) if self.v6 => {
                SocketAddr::V6(SocketAddrV6::new(a.ip().to_ipv6_mapped(), a.port(), 0, 0))
            }
            other => other,
        }
    }
}

impl AsRawFd for LinkSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.udp.as_raw_fd()
    }
}

impl AsFd for LinkSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.udp.as_fd()
    }
}

fn setsockopt_int(fd: RawFd, opt: libc::c_int, val: libc::c_int) -> io::Result<()> {
    // SAFETY: passes a pointer to a live c_int with its exact size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&val as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn errors_are_classified_for_the_caller() {
        let c = |errno| classify(&io::Error::from_raw_os_error(errno));
        assert_eq!(c(libc::EAGAIN), ErrorClass::WouldBlock);
        assert_eq!(c(libc::ENOBUFS), ErrorClass::NoBuffers);
        assert_eq!(c(libc::ENETUNREACH), ErrorClass::Unreachable);
        assert_eq!(c(libc::ENODEV), ErrorClass::DeviceGone);
        assert_eq!(c(libc::EMSGSIZE), ErrorClass::TooBig);
        assert_eq!(c(libc::EBADF), ErrorClass::Fatal);
    }

    // Loopback in the host namespace is enough to exercise the batch syscalls themselves;
    // the namespace tests in tests/ cover interfaces.
    #[test]
    fn dual_stack_socket_batches_with_ipv4_peer() {
        let a = LinkSocket::bind(None, "[::]:0".parse().unwrap()).unwrap();
        let b = LinkSocket::bind(None, "127.0.0.1:0".parse().unwrap()).unwrap();
        let a_port = a.local_addr().unwrap().port();
        let a_dst: SocketAddr = (Ipv4Addr::LOCALHOST, a_port).into();
        let payloads: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 100 + i as usize]).collect();
        let msgs: Vec<(SocketAddr, &[u8])> = payloads.iter().map(|p| (a_dst, &p[..])).collect();
        assert_eq!(b.send_batch(&msgs).unwrap(), 10);
        let mut bufs: Vec<RecvBuf> = (0..16).map(|_| RecvBuf::new(2048)).collect();
        let mut got = 0;
        while got < 10 {
            match a.recv_batch(&mut bufs[got..]) {
                Ok(n) => got += n,
                Err(e) if classify(&e) == ErrorClass::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        for (i, b2) in bufs[..10].iter().enumerate() {
            assert_eq!(b2.packet(), &payloads[i][..]);
            assert_eq!(b2.source(), b.local_addr().unwrap(), "plain IPv4 source");
            assert!(!b2.is_truncated());
        }
        // Reply to the IPv4 peer from the IPv6 socket.
        a.send_to(b"pong", bufs[0].source()).unwrap();
        let mut buf = [0u8; 16];
        let (n, from) = loop {
            match b.recv_from(&mut buf) {
                Ok(r) => break r,
                Err(e) if classify(&e) == ErrorClass::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!((&buf[..n], from), (&b"pong"[..], a_dst));
    }

    #[test]
    fn truncation_is_reported() {
        let a = LinkSocket::bind(None, "127.0.0.1:0".parse().unwrap()).unwrap();
        a.send_to(&[7u8; 300], a.local_addr().unwrap()).unwrap();
        let mut bufs = vec![RecvBuf::new(100)];
        let n = loop {
            match a.recv_batch(&mut bufs) {
                Ok(n) => break n,
                Err(e) if classify(&e) == ErrorClass::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(n, 1);
        assert!(bufs[0].is_truncated());
        assert_eq!(bufs[0].len(), 100);
    }

    #[test]
    fn missing_interface_is_a_bind_device_error() {
        let e = LinkSocket::bind(Some("mhio-nope0"), "0.0.0.0:0".parse().unwrap()).unwrap_err();
        assert!(matches!(e, UdpError::BindDevice { .. }), "{e}");
    }
}
