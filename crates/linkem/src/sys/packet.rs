//! AF_PACKET sockets bound to one interface, reading and writing whole L2 frames in batches.
//!
//! Every frame carries a 10-byte `virtio_net_hdr` in front (PACKET_VNET_HDR). That is what lets
//! linkem run at multi-Gbit/s with offloads left on: veth hands over 64 KB GSO super-frames
//! whose checksums are not yet filled in (CHECKSUM_PARTIAL); the header carries the GSO type,
//! segment size and checksum offsets across, so the frame is re-injected exactly as it came
//! and the kernel segments or checksums it wherever that is finally needed. Without the header
//! such frames fail on send (EMSGSIZE) or arrive with bad checksums. The header is passed
//! through untouched; [`crate::wire`] reads it to charge GSO frames per segment.
//! PACKET_IGNORE_OUTGOING keeps the socket from reading back what linkem itself sends on the
//! same interface; a promiscuous membership makes non-veth interfaces deliver frames for other
//! MACs too. PACKET_QDISC_BYPASS is deliberately not used: its direct-xmit path drops (ENOBUFS)
//! any GSO frame the output device would have to segment in software, i.e. whenever the
//! linkem-side interface has GSO/TSO turned off while the endpoints have it on.
//! Invariant: the socket is non-blocking; frames longer than [`FRAME_BUF`] are reported as
//! errors, never truncated silently.

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Size of the virtio_net_hdr prefix.
pub const VNET_HDR_LEN: usize = 10;

/// Receive buffer per frame: header + largest GSO frame (64 KB IP + Ethernet + VLAN tag).
pub const FRAME_BUF: usize = VNET_HDR_LEN + 65_535 + 14 + 4;

/// Frames read or written per system call.
pub const BATCH: usize = 32;

const ETH_P_ALL: u16 = 0x0003;
const SOCKET_BUF_BYTES: libc::c_int = 32 << 20;

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn setsockopt<T>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    val: &T,
) -> io::Result<()> {
    // SAFETY: `val` points to a live T of the size we pass.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (val as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// A packet socket bound to one interface.
pub struct PacketSocket {
    fd: OwnedFd,
}

impl PacketSocket {
    /// Opens and binds a socket on `ifname` (needs CAP_NET_RAW).
    pub fn open(ifname: &str) -> io::Result<PacketSocket> {
        let name =
            CString::new(ifname).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: `name` is a valid NUL-terminated string.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no interface {ifname}"),
            ));
        }
        // Protocol 0 at creation: nothing is received until bind() names the interface, so no
        // frame of another interface slips in between.
        // SAFETY: plain socket(2) call; the fd is owned right below.
        let raw = check(unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        })?;
        // SAFETY: `raw` is a fresh fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let one: libc::c_int = 1;
        setsockopt(fd.as_fd(), libc::SOL_PACKET, libc::PACKET_VNET_HDR, &one)?;
        setsockopt(
            fd.as_fd(),
            libc::SOL_PACKET,
            libc::PACKET_IGNORE_OUTGOING,
            &one,
        )?;
        // FORCE variants exceed rmem_max (we are root); fall back if they are refused.
        for (force, plain) in [
            (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
            (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
        ] {
            if setsockopt(fd.as_fd(), libc::SOL_SOCKET, force, &SOCKET_BUF_BYTES).is_err() {
                setsockopt(fd.as_fd(), libc::SOL_SOCKET, plain, &SOCKET_BUF_BYTES)?;
            }
        }
        // SAFETY: sockaddr_ll is plain data; all-zero is a valid starting value.
        let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ETH_P_ALL.to_be();
        sll.sll_ifindex = ifindex as libc::c_int;
        // SAFETY: `sll` is a valid sockaddr_ll of the size given.
        check(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })?;
        // SAFETY: packet_mreq is plain data.
        let mut mreq: libc::packet_mreq = unsafe { zeroed() };
        mreq.mr_ifindex = ifindex as libc::c_int;
        mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
        setsockopt(
            fd.as_fd(),
            libc::SOL_PACKET,
            libc::PACKET_ADD_MEMBERSHIP,
            &mreq,
        )?;
        Ok(PacketSocket { fd })
    }

    /// Reads up to [`BATCH`] frames without blocking into `batch`; returns how many were read
    /// (0 when nothing is waiting) and how many were malformed (skipped).
    pub fn recv_batch(&self, batch: &mut RecvBatch) -> io::Result<(usize, u64)> {
        batch.count = 0;
        for (i, (hdr, iov)) in batch.hdrs.iter_mut().zip(batch.iovs.iter_mut()).enumerate() {
            iov.iov_base = batch.bufs[i].as_mut_ptr().cast();
            iov.iov_len = FRAME_BUF;
            // SAFETY: mmsghdr is plain data.
            *hdr = unsafe { zeroed() };
            hdr.msg_hdr.msg_iov = iov;
            hdr.msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: each header points at one iovec that points at a FRAME_BUF-sized buffer, all
        // owned by `batch` and alive for the call.
        let n = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                batch.hdrs.as_mut_ptr(),
                BATCH as libc::c_uint,
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok((0, 0)),
                _ => Err(e),
            };
        }
        let n = n as usize;
        let mut bad = 0;
        for i in 0..n {
            let len = batch.hdrs[i].msg_len as usize;
            let truncated = batch.hdrs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            batch.lens[i] = if truncated || len <= VNET_HDR_LEN || len > FRAME_BUF {
                bad += 1;
                0
            } else {
                len
            };
        }
        batch.count = n;
        Ok((n, bad))
    }

    /// Sends frames (each with its vnet header); returns how many the kernel refused.
    pub fn send_all(&self, frames: &[Vec<u8>]) -> u64 {
        let mut refused = 0;
        let mut sent = 0;
        while sent < frames.len() {
            let chunk = &frames[sent..(sent + BATCH).min(frames.len())];
            let mut iovs: Vec<libc::iovec> = chunk
                .iter()
                .map(|f| libc::iovec {
                    iov_base: f.as_ptr() as *mut _,
                    iov_len: f.len(),
                })
                .collect();
            let mut hdrs: Vec<libc::mmsghdr> = iovs
                .iter_mut()
                .map(|iov| {
                    // SAFETY: mmsghdr is plain data.
                    let mut h: libc::mmsghdr = unsafe { zeroed() };
                    h.msg_hdr.msg_iov = iov;
                    h.msg_hdr.msg_iovlen = 1;
                    h
                })
                .collect();
            // SAFETY: headers point at iovecs that point at the frames, all alive for the call;
            // the kernel only reads the buffers.
            let n = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    hdrs.as_mut_ptr(),
                    hdrs.len() as libc::c_uint,
                    0,
                )
            };
            if n > 0 {
                sent += n as usize;
                continue;
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => {}
                io::ErrorKind::WouldBlock => {
                    // The send buffer is full: wait briefly for room rather than drop.
                    if !crate::sys::wait::wait_writable(
                        self.fd.as_fd(),
                        std::time::Duration::from_millis(5),
                    ) {
                        refused += 1;
                        sent += 1;
                    }
                }
                _ => {
                    // The first frame of the chunk was refused (too big, no buffer): skip it.
                    refused += 1;
                    sent += 1;
                }
            }
        }
        refused
    }

    /// Frames dropped by the kernel for want of buffer space since the last call.
    pub fn take_kernel_drops(&self) -> u64 {
        // SAFETY: tpacket_stats is plain data.
        let mut st: libc::tpacket_stats = unsafe { zeroed() };
        let mut len = size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: `st` and `len` are valid for the getsockopt call.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        };
        if r < 0 {
            0
        } else {
            u64::from(st.tp_drops)
        }
    }
}

impl AsFd for PacketSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Reusable buffers for [`PacketSocket::recv_batch`].
pub struct RecvBatch {
    bufs: Vec<Vec<u8>>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    lens: [usize; BATCH],
    count: usize,
}

// SAFETY: the raw pointers inside iovecs/mmsghdrs only ever point into `bufs`/`iovs` of the
// same RecvBatch and are rewritten before each use; nothing is shared across threads.
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    /// Allocates [`BATCH`] buffers of [`FRAME_BUF`] bytes.
    pub fn new() -> RecvBatch {
        RecvBatch {
            bufs: (0..BATCH).map(|_| vec![0u8; FRAME_BUF]).collect(),
            // SAFETY: iovec and mmsghdr are plain data; they are filled before each use.
            iovs: (0..BATCH).map(|_| unsafe { zeroed() }).collect(),
            hdrs: (0..BATCH).map(|_| unsafe { zeroed() }).collect(),
            lens: [0; BATCH],
            count: 0,
        }
    }

    /// The well-formed frames of the last read, each with its vnet header.
    pub fn frames(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.count)
            .filter(|&i| self.lens[i] > 0)
            .map(|i| &self.bufs[i][..self.lens[i]])
    }
}

impl Default for RecvBatch {
    fn default() -> Self {
        RecvBatch::new()
    }
}
