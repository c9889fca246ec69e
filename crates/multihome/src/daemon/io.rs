//! The driver's two I/O interfaces and their real implementations — the shape of
//! wireguard-go's `tun.Device` and `conn.Bind`, so the one loop in [`super::driver`] is
//! written against interfaces and tests substitute the in-memory
//! ones in [`super::mem`].
//!
//! - [`PacketDevice`]: IP packets in and out of the host — the TUN device, which cuts TSO
//!   super-frames into packets on read (GSO split) and coalesces TCP segments on write
//!   (GRO).
//! - [`DatagramBind`]: the tunnel's UDP datagrams, each tagged with the socket it came on
//!   (the client has one per link, index = the link's `PathId`; the server has one, index 0)
//!   and its peer address. The real sockets send runs of equal datagrams to one peer as
//!   one super-datagram (UDP GSO) and read a peer's runs back in one read (UDP GRO), cut
//!   here into datagrams before the core sees them (`multihome_io::udp::offload`).
//!
//! Why synchronous calls with readiness exposed, not `async fn`s: the hot path drains an fd
//! with nonblocking batch calls (one `read` of a 64 KB frame, one `recvmmsg` of up to 32
//! datagrams, one `sendmmsg` per socket) until the kernel says "would block", with a budget
//! so one busy fd cannot starve the others. An async read would have to either await per
//! batch (one extra trip through the runtime for every batch) or hide that drain loop
//! inside the I/O type. With `poll_readable` + a `WouldBlock`-on-empty read the loop keeps
//! that policy in one place, the buffers stay owned by the implementation (allocated
//! once, reused for ever), and received bytes are handed to the core by reference, in
//! place — the core decrypts datagrams in the receive buffer. Sends never wait: UDP drops
//! on a full socket buffer, as the kernel would.
//!
//! Invariants every implementation keeps: a read that finds nothing returns `WouldBlock`
//! and clears the readiness (the next `poll_readable` then registers the waker); nothing
//! allocates per packet after start-up; nothing is held across a `flush`.

use super::{register, BUF_BYTES};
use multihome_io::tun::{split_gso, GroBatch, Tun, VNET_HDR_LEN};
use multihome_io::udp::{classify, ErrorClass, LinkSocket, RecvBuf};
use std::io;
use std::net::SocketAddr;
use std::task::{Context, Poll};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// Datagrams one `recvmmsg` may return: enough to amortise the system call over many
/// datagrams, while the buffers of one bind stay at 2 MB (32 × 64 KB).
pub const RECV_BATCH: usize = 32;

/// IP packets in and out of the host (wireguard-go's `tun.Device`).
pub trait PacketDevice {
    /// Ready when packets may be waiting; otherwise registers `cx`'s waker.
    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    /// Reads one batch (a TUN frame: one packet, or a super-frame cut into packets) and
    /// hands each IP packet to `f`. `WouldBlock` when nothing is waiting, which clears the
    /// readiness.
    fn read_packets(&mut self, f: impl FnMut(&[u8])) -> io::Result<()>;
    /// As [`Self::read_packets`], but tries the read even when no readiness was reported
    /// (just after a write, to pick up what the host's stack answered at once).
    fn read_packets_now(&mut self, f: impl FnMut(&[u8])) -> io::Result<()> {
        self.read_packets(f)
    }
    /// Queues one IP packet for the host; it may be coalesced with the next ones.
    fn write_packet(&mut self, packet: &[u8]);
    /// Writes everything queued since the last flush.
    fn flush(&mut self);
}

/// The tunnel's UDP datagrams (wireguard-go's `conn.Bind`). Sockets are numbered; a
/// number may have no socket at the moment (a client link whose interface is down).
pub trait DatagramBind {
    /// Ready with the number of a socket that may have datagrams waiting (scanning in
    /// order); otherwise registers `cx`'s waker on all of them.
    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<usize>;
    /// Receives one batch on socket `sock` and hands each datagram to `f` with its
    /// sender, writable so it can be decrypted in place; returns how many datagrams.
    /// `WouldBlock` when none is waiting (or the socket is gone), which clears readiness.
    fn recv(&mut self, sock: usize, f: impl FnMut(SocketAddr, &mut [u8])) -> io::Result<usize>;
    /// Sends datagrams from socket `sock`; same contract as `LinkSocket::send_batch`
    /// (returns how many from the front were sent; `Err` means `msgs[0]` was not).
    /// Datagrams for a socket that does not exist are dropped (counted as sent): UDP.
    fn send(&mut self, sock: usize, msgs: &[(SocketAddr, &[u8])]) -> io::Result<usize>;
    /// Hears that `send` failed on `sock` (the datagram is dropped) and logs it as the
    /// role wants; true when the socket is gone for good (its interface vanished), which
    /// the driver then reports to the core.
    fn send_failed(&mut self, sock: usize, e: &io::Error) -> bool;
}

/// The TUN device, opened with offloads (see [`super::setup_tun`]).
pub struct TunDevice {
    fd: AsyncFd<Tun>,
    /// One read: a `virtio_net_hdr` plus up to 64 KB of (super-)packet.
    frame: Box<[u8]>,
    /// `split_gso`'s reusable output buffer.
    scratch: Vec<u8>,
    /// Packets written since the last flush, coalesced per TCP flow.
    gro: GroBatch,
}

impl TunDevice {
    /// Wraps a registered TUN device.
    pub fn new(fd: AsyncFd<Tun>) -> Self {
        TunDevice {
            fd,
            frame: vec![0u8; BUF_BYTES + VNET_HDR_LEN].into_boxed_slice(),
            scratch: Vec::new(),
            gro: GroBatch::default(),
        }
    }

    /// Writes one frame. A full TUN queue drops it; the inner TCP recovers.
    fn send_frame(fd: &AsyncFd<Tun>, frame: &[u8]) {
        if let Err(e) = fd.get_ref().send_frame(frame) {
            tracing::debug!("writing to the TUN device: {e}");
        }
    }
}

impl TunDevice {
    /// Hands the packets of the frame read (`n` bytes) to `f`.
    fn split(&mut self, n: usize, mut f: impl FnMut(&[u8])) {
        if let Err(e) = split_gso(&self.frame[..n], &mut self.scratch, &mut f) {
            tracing::debug!("dropping a TUN frame: {e}");
        }
    }
}

impl PacketDevice for TunDevice {
    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // The guard is dropped without clearing: `read_packets` clears on "would block".
        self.fd.poll_read_ready(cx).map_ok(drop)
    }

    fn read_packets(&mut self, f: impl FnMut(&[u8])) -> io::Result<()> {
        let frame = &mut self.frame;
        let n = self.fd.try_io(Interest::READABLE, |t| t.recv(frame))?;
        self.split(n, f);
        Ok(())
    }

    fn read_packets_now(&mut self, f: impl FnMut(&[u8])) -> io::Result<()> {
        // Past tokio's readiness (which only epoll sets): the frame is there or not. The
        // readiness left set by its epoll event later costs one "would block" read.
        let n = self.fd.get_ref().recv(&mut self.frame)?;
        self.split(n, f);
        Ok(())
    }

    fn write_packet(&mut self, packet: &[u8]) {
        if self.gro.push(packet).is_err() {
            // Full: write what is pending and start a new batch with this packet.
            let fd = &self.fd;
            self.gro.flush(|f| Self::send_frame(fd, f));
            if self.gro.push(packet).is_err() {
                tracing::debug!("dropping a packet the GRO batch cannot take");
            }
        }
    }

    fn flush(&mut self) {
        let fd = &self.fd;
        self.gro.flush(|f| Self::send_frame(fd, f));
    }
}

/// Receive buffers for one `recvmmsg`, allocated once.
fn recv_bufs() -> Vec<RecvBuf> {
    (0..RECV_BATCH).map(|_| RecvBuf::new(BUF_BYTES)).collect()
}

/// One `recvmmsg` on a ready socket, each datagram handed to `f` (a read GRO coalesced is
/// cut back into its datagrams, in place); returns how many datagrams.
fn recv_on(
    sock: &AsyncFd<LinkSocket>,
    bufs: &mut [RecvBuf],
    mut f: impl FnMut(SocketAddr, &mut [u8]),
) -> io::Result<usize> {
    let mut n = 0;
    let r = sock.try_io(Interest::READABLE, |s| {
        n = s.recv_batch(bufs)?;
        if n < bufs.len().min(multihome_io::udp::BATCH_MAX) {
            // A short batch means recvmmsg found the queue empty: say "would block", which
            // clears the readiness, so the drain does not spend another system call to
            // learn it. tokio clears only if no newer event came in, and with edge-triggered
            // epoll a datagram arriving after the recvmmsg is a newer event.
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(())
    });
    if n == 0 {
        r?;
    }
    let mut datagrams = 0;
    for rb in &mut bufs[..n] {
        let from = rb.source();
        for d in rb.segments_mut() {
            f(from, d);
            datagrams += 1;
        }
    }
    Ok(datagrams)
}

/// `send_batch` on `sock`, with a warning when the kernel's refusals turn its GSO off
/// (then the socket sends datagram by datagram: correct, at more CPU per byte).
fn send_on(sock: &AsyncFd<LinkSocket>, msgs: &[(SocketAddr, &[u8])]) -> io::Result<usize> {
    let s = sock.get_ref();
    let had_gso = s.offload_stats().gso;
    let r = s.send_batch(msgs);
    if had_gso && !s.offload_stats().gso {
        tracing::warn!(
            interface = s.interface().unwrap_or("-"),
            "the kernel refused UDP GSO super-datagrams: sending datagram by datagram"
        );
    }
    r
}

/// Turns GRO on for a socket read with [`recv_bufs`] (64 KiB each, so a coalesced read is
/// never cut short): the datagrams of a peer's GSO send then arrive in one read, without
/// being cut up in the kernel on the way.
fn with_gro(sock: AsyncFd<LinkSocket>) -> AsyncFd<LinkSocket> {
    if !sock.get_ref().set_gro(true) {
        tracing::debug!("UDP GRO unavailable: datagrams are read one by one");
    }
    sock
}

/// One client link: a socket pinned to the link's interface, towards the server.
pub struct Link {
    /// The link's name in the config (logs, status).
    pub name: String,
    /// The interface the socket is bound to.
    pub interface: String,
    /// The server's address on this link.
    pub server: SocketAddr,
    sock: Option<AsyncFd<LinkSocket>>,
    /// The copy socket (kernel fast path, `multihome_io::dup`): what leaves it is copied
    /// onto the other links by the kernel. Never read: replies come to `sock`.
    copy: Option<AsyncFd<LinkSocket>>,
    /// Removed by a reload: never bound again, its interface's events ignored (its number
    /// stays taken until a reload gives it to a new link).
    retired: bool,
}

impl Link {
    /// Ports of the link's socket and copy socket, when both are bound.
    pub fn ports(&self) -> Option<(u16, u16)> {
        let port = |s: &Option<AsyncFd<LinkSocket>>| {
            s.as_ref()
                .and_then(|s| s.get_ref().local_addr().ok())
                .map(|a| a.port())
        };
        Some((port(&self.sock)?, port(&self.copy)?))
    }
}

/// The client's sockets, one per link, numbered by the link's `PathId`. A link's socket
/// is dropped when its interface vanishes and bound again when it comes back. With copy
/// sockets, socket number `n + i` (n links) is link i's copy socket.
pub struct LinkBind {
    links: Vec<Link>,
    bufs: Vec<RecvBuf>,
    copy_sockets: bool,
}

impl LinkBind {
    /// Links without sockets yet (bind them with [`LinkBind::rebind`]).
    pub fn new(links: impl IntoIterator<Item = (String, String, SocketAddr)>) -> Self {
        let links = links
            .into_iter()
            .map(|(name, interface, server)| Link {
                name,
                interface,
                server,
                sock: None,
                copy: None,
                retired: false,
            })
            .collect();
        LinkBind {
            links,
            bufs: recv_bufs(),
            copy_sockets: false,
        }
    }

    /// Also binds a copy socket per link (the kernel fast path).
    pub fn with_copy_sockets(mut self) -> Self {
        self.copy_sockets = true;
        self
    }

    /// The links, in `PathId` order.
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// Whether link `i` has a socket.
    pub fn is_bound(&self, i: usize) -> bool {
        self.links.get(i).is_some_and(|l| l.sock.is_some())
    }

    /// Whether link `i` is configured (exists and was not removed by a reload).
    pub fn is_active(&self, i: usize) -> bool {
        self.links.get(i).is_some_and(|l| !l.retired)
    }

    /// Sets link `i` (a reload: a new link, or one moved to another interface or server),
    /// numbering slots up to it, and binds it. Slots created on the way are retired.
    pub fn set_link(&mut self, i: usize, name: String, interface: String, server: SocketAddr) {
        while self.links.len() <= i {
            self.links.push(Link {
                name: String::new(),
                interface: String::new(),
                server,
                sock: None,
                copy: None,
                retired: true,
            });
        }
        let l = &mut self.links[i];
        (l.name, l.interface, l.server, l.retired) = (name, interface, server, false);
        (l.sock, l.copy) = (None, None);
        self.rebind(i);
    }

    /// Removes link `i` (a reload): its sockets are closed and it is never bound again.
    pub fn retire(&mut self, i: usize) {
        if let Some(l) = self.links.get_mut(i) {
            (l.sock, l.copy, l.retired) = (None, None, true);
        }
    }

    /// Binds a new socket for link `i` on its interface (a wildcard address of the
    /// server's family; the kernel picks the source on that device). A failure is logged
    /// and leaves the link without a socket.
    pub fn rebind(&mut self, i: usize) {
        let Some(l) = self.links.get_mut(i).filter(|l| !l.retired) else {
            return;
        };
        let local: SocketAddr = if l.server.is_ipv4() {
            "0.0.0.0:0".parse().expect("literal")
        } else {
            "[::]:0".parse().expect("literal")
        };
        let bind = |what: &str| match LinkSocket::bind(Some(&l.interface), local)
            .map_err(anyhow::Error::from)
            .and_then(register)
        {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(link = %l.name, "cannot bind a {what} on {}: {e:#}", l.interface);
                None
            }
        };
        l.sock = bind("socket").map(with_gro);
        l.copy = if self.copy_sockets && l.sock.is_some() {
            // The kernel copies and rewrites what leaves it (nftables `dup`, then NAT in
            // `postrouting`): one datagram at a time keeps that path as it was tested.
            bind("copy socket").inspect(|c| {
                c.get_ref().set_gso(false);
            })
        } else {
            None
        };
    }
}

impl DatagramBind for LinkBind {
    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<usize> {
        for (i, l) in self.links.iter().enumerate() {
            if let Some(sock) = &l.sock {
                if let Poll::Ready(Ok(_)) = sock.poll_read_ready(cx) {
                    return Poll::Ready(i);
                }
            }
        }
        Poll::Pending
    }

    fn recv(&mut self, sock: usize, f: impl FnMut(SocketAddr, &mut [u8])) -> io::Result<usize> {
        match self.links.get(sock).and_then(|l| l.sock.as_ref()) {
            Some(s) => recv_on(s, &mut self.bufs, f),
            None => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn send(&mut self, sock: usize, msgs: &[(SocketAddr, &[u8])]) -> io::Result<usize> {
        let n = self.links.len();
        let s = match self.links.get(sock % n.max(1)) {
            // A copy socket, or the link's own when it has none (then no kernel copies).
            Some(l) if sock >= n => l.copy.as_ref().or(l.sock.as_ref()),
            Some(l) => l.sock.as_ref(),
            None => None,
        };
        match s {
            Some(s) => send_on(s, msgs),
            None => Ok(msgs.len()),
        }
    }

    fn send_failed(&mut self, sock: usize, e: &io::Error) -> bool {
        let n = self.links.len();
        if sock >= n {
            // A copy socket: dropped; the link's own socket reports the link's fate.
            if let (Some(l), ErrorClass::DeviceGone) = (self.links.get_mut(sock - n), classify(e)) {
                l.copy = None;
            }
            return false;
        }
        match classify(e) {
            ErrorClass::DeviceGone => match self.links.get_mut(sock) {
                Some(link) if link.sock.is_some() => {
                    tracing::warn!(link = %link.name, "interface vanished");
                    link.sock = None;
                    true
                }
                _ => false,
            },
            // Transient and expected under load: the loss detector sees the drop.
            ErrorClass::WouldBlock | ErrorClass::NoBuffers => false,
            _ => {
                tracing::debug!(link = sock, "send: {e}");
                false
            }
        }
    }
}

/// The server's one socket, shared by all clients (number 0), and with the kernel fast
/// path its copy socket (number 1, `multihome_io::dup_server`): what leaves it is copied
/// onto the session's other paths by the kernel. Never read: replies come to the first.
pub struct ListenBind {
    sock: AsyncFd<LinkSocket>,
    copy: Option<AsyncFd<LinkSocket>>,
    bufs: Vec<RecvBuf>,
}

impl ListenBind {
    /// Wraps a registered socket.
    pub fn new(sock: AsyncFd<LinkSocket>) -> Self {
        ListenBind {
            sock: with_gro(sock),
            copy: None,
            bufs: recv_bufs(),
        }
    }

    /// Also sends from `copy` what the kernel is to copy.
    pub fn with_copy_socket(mut self, copy: AsyncFd<LinkSocket>) -> Self {
        // As the client's copy sockets: the kernel rewrites what leaves it.
        copy.get_ref().set_gso(false);
        self.copy = Some(copy);
        self
    }

    /// The listening socket's address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.get_ref().local_addr()
    }

    /// The copy socket's port, if there is one.
    pub fn copy_port(&self) -> Option<u16> {
        let c = self.copy.as_ref()?;
        c.get_ref().local_addr().ok().map(|a| a.port())
    }
}

impl DatagramBind for ListenBind {
    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<usize> {
        match self.sock.poll_read_ready(cx) {
            Poll::Ready(Ok(_)) => Poll::Ready(0),
            _ => Poll::Pending,
        }
    }

    fn recv(&mut self, _sock: usize, f: impl FnMut(SocketAddr, &mut [u8])) -> io::Result<usize> {
        recv_on(&self.sock, &mut self.bufs, f)
    }

    fn send(&mut self, sock: usize, msgs: &[(SocketAddr, &[u8])]) -> io::Result<usize> {
        // Socket 1 is the copy socket, or the listening one without it (then no copies).
        let s = match (sock, &self.copy) {
            (1, Some(c)) => c,
            _ => &self.sock,
        };
        send_on(s, msgs)
    }

    fn send_failed(&mut self, _sock: usize, e: &io::Error) -> bool {
        // The listening socket is bound to no device, so it cannot vanish.
        tracing::debug!("send: {e}");
        false
    }
}
