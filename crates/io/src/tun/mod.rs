//! The TUN device: IP packets between the kernel's routing and the tunnel.
//!
//! Role: the client reads the packets its applications send from the TUN and writes back
//! the ones arriving through the tunnel; the server does the same towards the Internet.
//!
//! Invariants:
//! - The device is created with `IFF_TUN | IFF_NO_PI`: every `recv`/`send` is exactly one IP
//!   packet (IPv4 or IPv6, told apart by the version nibble), no extra header. With offload
//!   ([`Tun::create_with_offload`]) a 10-byte `virtio_net_hdr` precedes every packet read,
//!   see [`gso`]. Frames written with [`Tun::send_frame`] carry their own header, e.g. the
//!   TCP super-packets built by [`gro::GroBatch`].
//! - The device is not persistent: it exists exactly as long as the [`Tun`] (its fd).
//! - The fd is nonblocking and close-on-exec: wrap it in `AsyncFd` for readiness.
//! - After `create*` returns, the link has the requested MTU and is up.

pub mod gro;
pub mod gso;

use std::ffi::CStr;
use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

use ipnet::IpNet;

use crate::netlink::{self, NetlinkError};
pub use gro::{GroBatch, GroError};
pub use gso::{split_gso, GsoError, VNET_HDR_LEN};

/// Errors creating or configuring a [`Tun`]. (Packet I/O returns `io::Error`.)
#[derive(Debug, thiserror::Error)]
pub enum TunError {
    /// The name is too long (15 bytes at most) or contains a NUL byte.
    #[error("invalid TUN name {name:?}: at most 15 bytes, no NUL; use e.g. \"mh0\" or \"mh%d\"")]
    InvalidName {
        /// The name as given.
        name: String,
    },
    /// `/dev/net/tun` could not be opened.
    #[error("cannot open /dev/net/tun: {source}; load the tun module (`modprobe tun`), give a container the device, run as root")]
    Open {
        /// Underlying error.
        source: io::Error,
    },
    /// `TUNSETIFF` failed: `EPERM` needs CAP_NET_ADMIN, `EBUSY` means another process owns a
    /// TUN of that name, `EINVAL` that a non-TUN interface has that name.
    #[error("cannot create TUN device {name:?}: {source}; run as root and choose a name not used by another interface")]
    Create {
        /// The requested name.
        name: String,
        /// Underlying error.
        source: io::Error,
    },
    /// `TUNSETOFFLOAD` failed (kernel without TSO support on TUN).
    #[error("cannot enable offload on TUN {name}: {source}; use Tun::create without offload")]
    Offload {
        /// Device name.
        name: String,
        /// Underlying error.
        source: io::Error,
    },
    /// Setting the MTU, the link state or an address failed.
    #[error("cannot configure TUN {name}: {source}")]
    Configure {
        /// Device name.
        name: String,
        /// Underlying error.
        source: NetlinkError,
    },
}

/// Offload features asked of the kernel: checksum offload and TCP segmentation offload for
/// IPv4 and IPv6 (the kernel then hands us TCP super-packets of up to 64 KiB).
const OFFLOADS: libc::c_uint = libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6;

/// An open TUN device; closing it (drop) deletes the interface.
///
/// With tokio: `unsafe { AsyncFd::register_with_interest(tun, Interest::READABLE) }`. Its safety
/// contract holds: the device owns its fd for its whole life and `as_raw_fd` always returns it.
#[derive(Debug)]
pub struct Tun {
    fd: OwnedFd,
    name: String,
    mtu: u32,
    offload: bool,
}

impl Tun {
    /// Creates TUN device `name` (a `%d` in it lets the kernel pick a number), sets `mtu`
    /// and brings it up.
    pub fn create(name: &str, mtu: u32) -> Result<Tun, TunError> {
        Self::open(name, mtu, false, false)
    }

    /// Like [`Tun::create`] but with `IFF_VNET_HDR` and TSO/checksum offload: the kernel may
    /// hand over TCP super-packets larger than the MTU, each read preceded by a
    /// `virtio_net_hdr`. Cut them into packets with [`split_gso`]. Fewer, larger reads cut the
    /// per-packet cost of bulk TCP through the tunnel.
    pub fn create_with_offload(name: &str, mtu: u32) -> Result<Tun, TunError> {
        Self::open(name, mtu, true, false)
    }

    /// [`Tun::create_with_offload`] with `queues` queues (`IFF_MULTI_QUEUE`), one per
    /// thread: each reads the packets the kernel queues on it and may write any packet.
    /// The kernel queues a packet on the queue that last wrote a packet of the same flow
    /// (its flow table), else by the flow's hash. One queue: a plain device, as
    /// `create_with_offload`.
    pub fn create_queues(name: &str, mtu: u32, queues: usize) -> Result<Vec<Tun>, TunError> {
        if queues <= 1 {
            return Ok(vec![Self::open(name, mtu, true, false)?]);
        }
        let first = Self::open(name, mtu, true, true)?;
        let actual = first.name.clone();
        let mut all = vec![first];
        for _ in 1..queues {
            all.push(Self::open(&actual, mtu, true, true)?);
        }
        Ok(all)
    }

    fn open(name: &str, mtu: u32, offload: bool, multi_queue: bool) -> Result<Tun, TunError> {
        let invalid = || TunError::InvalidName {
            name: name.to_owned(),
        };
        if name.len() >= libc::IFNAMSIZ || name.contains('\0') {
            return Err(invalid());
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")
            .map_err(|source| TunError::Open { source })?;
        let fd: OwnedFd = file.into();

        // SAFETY: all-zero is a valid ifreq.
        let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
        for (dst, src) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
            *dst = src as libc::c_char;
        }
        let mut flags = libc::IFF_TUN | libc::IFF_NO_PI;
        if offload {
            flags |= libc::IFF_VNET_HDR;
        }
        if multi_queue {
            flags |= libc::IFF_MULTI_QUEUE;
        }
        ifr.ifr_ifru.ifru_flags = flags as libc::c_short;
        // SAFETY: TUNSETIFF reads and writes one ifreq, which lives across the call.
        if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut ifr) } < 0 {
            return Err(TunError::Create {
                name: name.to_owned(),
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: the kernel wrote back the NUL-terminated name it chose.
        let actual = unsafe { CStr::from_ptr(ifr.ifr_name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        if offload {
            // SAFETY: TUNSETOFFLOAD takes its flags by value.
            if unsafe {
                libc::ioctl(
                    fd.as_raw_fd(),
                    libc::TUNSETOFFLOAD,
                    OFFLOADS as libc::c_ulong,
                )
            } < 0
            {
                return Err(TunError::Offload {
                    name: actual,
                    source: io::Error::last_os_error(),
                });
            }
        }
        let tun = Tun {
            fd,
            name: actual,
            mtu,
            offload,
        };
        tun.configure(|n| netlink::set_mtu(n, mtu))?;
        tun.configure(|n| netlink::set_link_up(n, true))?;
        Ok(tun)
    }

    fn configure(&self, f: impl FnOnce(&str) -> Result<(), NetlinkError>) -> Result<(), TunError> {
        f(&self.name).map_err(|source| TunError::Configure {
            name: self.name.clone(),
            source,
        })
    }

    /// The interface name the kernel gave the device.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The MTU set at creation.
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// Whether reads carry a `virtio_net_hdr` (created with offload).
    pub fn has_vnet_hdr(&self) -> bool {
        self.offload
    }

    /// Adds an IPv4 or IPv6 address with its prefix (the prefix route comes with it).
    pub fn set_address(&self, cidr: IpNet) -> Result<(), TunError> {
        self.configure(|n| netlink::add_address(n, cidr))
    }

    /// Reads one packet (with offload: one `virtio_net_hdr` plus packet). `WouldBlock` when
    /// none is queued. A buffer smaller than the packet truncates it: use at least MTU bytes,
    /// or 65 536 + [`VNET_HDR_LEN`] with offload.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: reads at most buf.len() bytes into buf.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// Writes one IP packet to the kernel; returns `pkt.len()`. With offload a zero
    /// `virtio_net_hdr` (no GSO, checksum complete) is prepended for the caller.
    pub fn send(&self, pkt: &[u8]) -> io::Result<usize> {
        let n = if self.offload {
            let hdr = [0u8; VNET_HDR_LEN];
            let iov = [
                libc::iovec {
                    iov_base: hdr.as_ptr() as *mut libc::c_void,
                    iov_len: hdr.len(),
                },
                libc::iovec {
                    iov_base: pkt.as_ptr() as *mut libc::c_void,
                    iov_len: pkt.len(),
                },
            ];
            // SAFETY: both iovecs point at live buffers that the kernel only reads.
            let n = unsafe { libc::writev(self.fd.as_raw_fd(), iov.as_ptr(), 2) };
            if n >= 0 {
                (n as usize).saturating_sub(VNET_HDR_LEN) as isize
            } else {
                n
            }
        } else {
            // SAFETY: the kernel reads at most pkt.len() bytes from pkt.
            unsafe { libc::write(self.fd.as_raw_fd(), pkt.as_ptr().cast(), pkt.len()) }
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// Writes one frame that starts with its own `virtio_net_hdr` (as emitted by
    /// [`GroBatch::flush`]); returns the bytes written, header included. Only for a device
    /// created with offload: `InvalidInput` otherwise, since the kernel would take the header
    /// for the start of an IP packet.
    pub fn send_frame(&self, frame: &[u8]) -> io::Result<usize> {
        if !self.offload {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "send_frame needs a TUN created with offload (virtio_net_hdr)",
            ));
        }
        // SAFETY: the kernel reads at most frame.len() bytes from frame.
        let n = unsafe { libc::write(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len()) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}

impl AsRawFd for Tun {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for Tun {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
