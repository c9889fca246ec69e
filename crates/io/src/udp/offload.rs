//! UDP segmentation offload (GSO, `UDP_SEGMENT`) and receive offload (GRO, `UDP_GRO`) for
//! [`super::LinkSocket`]: which datagrams go out as one super-datagram, how a coalesced read
//! is cut back into datagrams, the control messages that carry the segment size, and the
//! per-socket switches and counters.
//!
//! A *super-datagram* is a run of datagrams to one destination, all of one length except the
//! last, which may be shorter, sent with one `sendmsg` entry and a `UDP_SEGMENT` control
//! message giving that length: the kernel builds one large skb and cuts it into ordinary
//! datagrams as late as it can (in the NIC, at the veth peer, or at the receiving socket). A
//! receiving socket with `UDP_GRO` on may get such a run back as one read, with the segment
//! size in a `UDP_GRO` control message; [`segments_mut`] cuts it up again. On the wire they
//! are ordinary datagrams either way: a peer without offloads sees no difference.
//!
//! Why our own code and not the `quinn-udp` crate, which is made for exactly this and well
//! kept: `quinn-udp`'s socket set-up (`UdpSocketState::new`) also turns on path-MTU
//! discovery (the DF bit), ECN and packet-info control messages on every socket it is given
//! — that changes how the tunnel's datagrams are fragmented and adds control messages to
//! every read — and it sends one run per `sendmsg`, where we send up to [`super::BATCH_MAX`]
//! runs (several destinations, several paths' sockets' worth) per `sendmmsg`. What it does
//! for GSO/GRO fits in this file, following it: support detected per socket (`UDP_SEGMENT`
//! readable with `getsockopt`, `UDP_GRO` settable), and a kernel that refuses a
//! super-datagram with `EIO` or `EINVAL` (a device without checksum offload) turns GSO off
//! for that socket, which then resends the run datagram by datagram.
//!
//! Invariants: a run never exceeds [`MAX_SEGMENTS`] datagrams nor [`MAX_SUPER_BYTES`] bytes
//! (the kernel's limits); the segment size is the run's first datagram's length, never 0; a
//! run of one datagram is sent without a control message.

use std::mem;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// Most datagrams in one super-datagram (the kernel's `UDP_MAX_SEGMENTS` is 64 on older
/// kernels, 128 on newer).
pub const MAX_SEGMENTS: usize = 64;
/// Most payload bytes in one super-datagram: the largest UDP payload over IPv4.
pub const MAX_SUPER_BYTES: usize = 65_507;
/// Bytes of control-message space per `msghdr`: one `cmsghdr` with an `int`, with room.
pub(super) const CMSG_BYTES: usize = 64;

/// Control-message storage, aligned as `cmsghdr` requires.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub(super) struct CmsgBuf(pub(super) [u8; CMSG_BYTES]);

impl CmsgBuf {
    pub(super) const ZERO: CmsgBuf = CmsgBuf([0; CMSG_BYTES]);
}

/// How many datagrams at the front of `msgs` go out as one super-datagram: those to the
/// first one's destination and of its length, plus possibly one shorter last one, at most
/// `max_segments` and [`MAX_SUPER_BYTES`] bytes in all. At least 1 when `msgs` is not empty
/// (a datagram of length 0 or longer than the byte limit goes alone).
pub fn run_len<D: PartialEq>(msgs: &[(D, &[u8])], max_segments: usize) -> usize {
    let Some((dst, first)) = msgs.first() else {
        return 0;
    };
    let seg = first.len();
    if seg == 0 {
        return 1;
    }
    let mut total = seg;
    let mut n = 1;
    for (d, p) in &msgs[1..] {
        if n >= max_segments || d != dst || p.len() > seg || total + p.len() > MAX_SUPER_BYTES {
            break;
        }
        // An empty datagram cannot be a segment: the receiver could not tell it was there.
        if p.is_empty() {
            break;
        }
        total += p.len();
        n += 1;
        if p.len() < seg {
            break; // a shorter one ends the run
        }
    }
    n
}

/// The datagrams of one read: `buf` cut every `stride` bytes (the last may be shorter);
/// the whole of `buf` when `stride` is 0 (not coalesced) or not smaller than it.
pub fn segments_mut(buf: &mut [u8], stride: usize) -> std::slice::ChunksMut<'_, u8> {
    let stride = if stride == 0 {
        buf.len().max(1)
    } else {
        stride
    };
    buf.chunks_mut(stride)
}

/// Immutable [`segments_mut`].
pub fn segments(buf: &[u8], stride: usize) -> std::slice::Chunks<'_, u8> {
    let stride = if stride == 0 {
        buf.len().max(1)
    } else {
        stride
    };
    buf.chunks(stride)
}

/// Writes a `UDP_SEGMENT` control message of `seg` bytes into `buf` and points `hdr` at it.
pub(super) fn set_segment_cmsg(hdr: &mut libc::msghdr, buf: &mut CmsgBuf, seg: u16) {
    hdr.msg_control = buf.0.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is a pure computation.
    hdr.msg_controllen = unsafe { libc::CMSG_SPACE(mem::size_of::<u16>() as u32) } as _;
    // SAFETY: `hdr` points at `buf`, which is aligned for cmsghdr and larger than
    // CMSG_SPACE(2), so the first header and its data lie inside it.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(hdr);
        (*c).cmsg_level = libc::SOL_UDP;
        (*c).cmsg_type = libc::UDP_SEGMENT;
        (*c).cmsg_len = libc::CMSG_LEN(mem::size_of::<u16>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
    }
}

/// The segment size of a read, from its `UDP_GRO` control message (0 if there is none).
pub(super) fn gro_segment_size(hdr: &libc::msghdr) -> usize {
    let mut stride = 0;
    // SAFETY: the kernel filled `msg_control` up to `msg_controllen`; the CMSG macros stay
    // within it, and the UDP_GRO payload is an int.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(hdr);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                stride = usize::try_from(v).unwrap_or(0);
            }
            c = libc::CMSG_NXTHDR(hdr, c);
        }
    }
    stride
}

/// Whether the kernel knows `UDP_SEGMENT` for this socket.
pub(super) fn gso_supported(fd: RawFd) -> bool {
    let mut v: libc::c_int = 0;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: passes a live c_int and its exact size.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    rc == 0
}

/// Turns `UDP_GRO` on or off; false if the kernel refuses.
pub(super) fn set_gro(fd: RawFd, on: bool) -> bool {
    let v = libc::c_int::from(on);
    // SAFETY: passes a live c_int and its exact size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_UDP,
            libc::UDP_GRO,
            (&v as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    rc == 0
}

/// A socket's offload switches and counters. Atomics (relaxed) only so a socket stays
/// `Sync`; each socket is driven by one thread.
#[derive(Debug, Default)]
pub(super) struct Offload {
    pub(super) gso: AtomicBool,
    pub(super) gro: AtomicBool,
    pub(super) gso_sends: AtomicU64,
    pub(super) gso_segments: AtomicU64,
    pub(super) gso_fallbacks: AtomicU64,
    pub(super) gro_reads: AtomicU64,
    pub(super) gro_segments: AtomicU64,
}

impl Offload {
    pub(super) fn stats(&self) -> OffloadStats {
        OffloadStats {
            gso: self.gso.load(Relaxed),
            gro: self.gro.load(Relaxed),
            gso_sends: self.gso_sends.load(Relaxed),
            gso_segments: self.gso_segments.load(Relaxed),
            gso_fallbacks: self.gso_fallbacks.load(Relaxed),
            gro_reads: self.gro_reads.load(Relaxed),
            gro_segments: self.gro_segments.load(Relaxed),
        }
    }

    pub(super) fn add(counter: &AtomicU64, n: usize) {
        counter.fetch_add(n as u64, Relaxed);
    }
}

/// What a socket's offloads are doing ([`super::LinkSocket::offload_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OffloadStats {
    /// Runs are sent as super-datagrams (supported and not turned off by a refusal).
    pub gso: bool,
    /// Reads may return coalesced datagrams.
    pub gro: bool,
    /// Super-datagrams sent.
    pub gso_sends: u64,
    /// Datagrams sent inside them.
    pub gso_segments: u64,
    /// Super-datagrams the kernel refused, resent datagram by datagram (the first also
    /// turned GSO off).
    pub gso_fallbacks: u64,
    /// Reads that returned more than one datagram.
    pub gro_reads: u64,
    /// Datagrams in those reads.
    pub gro_segments: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn runs(msgs: &[(u8, &[u8])], max: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let mut rest = msgs;
        while !rest.is_empty() {
            let n = run_len(rest, max);
            out.push(n);
            rest = &rest[n..];
        }
        out
    }

    #[test]
    fn runs_split_on_destination_length_and_short_tail() {
        let (a, b, c) = (&[0u8; 100][..], &[0u8; 60][..], &[0u8; 120][..]);
        let msgs = [(1, a), (1, a), (1, b), (1, a), (2, a), (2, c), (2, c)];
        // 100,100,60 | 100 | 100 (other dst) | 120 longer: new run | 120
        assert_eq!(runs(&msgs, 64), vec![3, 1, 1, 2]);
        assert_eq!(runs(&msgs[..2], 1), vec![1, 1]);
        assert_eq!(run_len::<u8>(&[], 64), 0);
    }

    #[test]
    fn runs_respect_the_byte_limit() {
        let p = [0u8; 1400];
        let msgs: Vec<(u8, &[u8])> = (0..64).map(|_| (0, &p[..])).collect();
        // 46 * 1400 = 64400 <= 65507 < 47 * 1400
        assert_eq!(runs(&msgs, 64), vec![46, 18]);
    }

    #[test]
    fn a_read_is_cut_at_the_stride() {
        let mut buf: Vec<u8> = (0..10).collect();
        let segs: Vec<Vec<u8>> = segments_mut(&mut buf, 4).map(|s| s.to_vec()).collect();
        assert_eq!(segs, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]]);
        assert_eq!(segments(&buf, 0).count(), 1);
        assert_eq!(segments(&buf, 64).count(), 1);
        assert_eq!(segments(&[], 0).count(), 0);
    }

    #[test]
    fn segment_cmsg_is_read_back_as_written() {
        // SAFETY: all-zero is a valid msghdr.
        let mut hdr: libc::msghdr = unsafe { mem::zeroed() };
        let mut buf = CmsgBuf::ZERO;
        set_segment_cmsg(&mut hdr, &mut buf, 1234);
        // The same layout with type UDP_GRO and an int is what the kernel writes on reads.
        // SAFETY: `hdr` points at `buf` with a valid first header.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&hdr);
            assert_eq!((*c).cmsg_type, libc::UDP_SEGMENT);
            assert_eq!(
                std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<u16>()),
                1234
            );
            (*c).cmsg_type = libc::UDP_GRO;
            (*c).cmsg_len = libc::CMSG_LEN(4) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), 1234);
        }
        hdr.msg_controllen = unsafe { libc::CMSG_SPACE(4) } as _;
        assert_eq!(gro_segment_size(&hdr), 1234);
        hdr.msg_controllen = 0;
        assert_eq!(gro_segment_size(&hdr), 0);
    }

    proptest! {
        /// Runs cover the batch in order; each is one destination, segments of the first's
        /// length but a shorter last one, within the limits; cutting the concatenation at
        /// the segment size gives the datagrams back (what GSO then GRO do).
        #[test]
        fn runs_are_valid_and_cut_back_into_the_datagrams(
            spec in proptest::collection::vec((0u8..3, 0usize..1500), 0..200),
            max in 1usize..80,
        ) {
            let data: Vec<(u8, Vec<u8>)> = spec
                .iter()
                .enumerate()
                .map(|(i, &(d, len))| (d, (0..len).map(|j| (i * 7 + j) as u8).collect()))
                .collect();
            let msgs: Vec<(u8, &[u8])> = data.iter().map(|(d, p)| (*d, &p[..])).collect();
            let mut at = 0;
            for n in runs(&msgs, max) {
                let run = &msgs[at..at + n];
                prop_assert!(n >= 1 && n <= max.max(1));
                let seg = run[0].1.len();
                let total: usize = run.iter().map(|m| m.1.len()).sum();
                if n > 1 {
                    prop_assert!(seg > 0 && total <= MAX_SUPER_BYTES);
                    prop_assert!(run.iter().all(|m| m.0 == run[0].0));
                    prop_assert!(run[..n - 1].iter().all(|m| m.1.len() == seg));
                    prop_assert!(run[n - 1].1.len() <= seg && !run[n - 1].1.is_empty());
                }
                let mut joined: Vec<u8> = run.iter().flat_map(|m| m.1.iter().copied()).collect();
                let back: Vec<Vec<u8>> =
                    segments_mut(&mut joined, seg).map(|s| s.to_vec()).collect();
                let want: Vec<Vec<u8>> =
                    run.iter().filter(|m| !m.1.is_empty()).map(|m| m.1.to_vec()).collect();
                prop_assert_eq!(back, want);
                at += n;
            }
            prop_assert_eq!(at, msgs.len());
        }
    }
}
