//! [`LinkSocket`]'s batch calls: `recvmmsg` into [`RecvBuf`]s, and `sendmmsg` of runs of
//! datagrams, each run one super-datagram when GSO is on (see [`super::offload`]).
//!
//! Invariants: one batch call is one system call (two when the kernel refuses a
//! super-datagram and its run is resent datagram by datagram); all bookkeeping lives on the
//! stack, nothing is allocated; the datagrams a caller passes are sent in order, and the
//! count returned is of datagrams, whatever the runs.

use std::io;
use std::mem::{self, MaybeUninit};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::Relaxed;

use super::addr::{from_storage, to_storage};
use super::offload::{
    gro_segment_size, run_len, segments, segments_mut, set_segment_cmsg, CmsgBuf, Offload,
    MAX_SEGMENTS,
};
use super::{LinkSocket, BATCH_MAX};

/// Most datagrams one `sendmmsg` carries (an `iovec` each, on the stack).
const IOV_MAX: usize = 256;
/// `EINVAL` refusals of super-datagrams after which GSO is turned off for a socket: one
/// may be a datagram longer than the route's MTU (then it fails alone too), repeated ones
/// mean the kernel will not do it.
const EINVAL_LIMIT: u64 = 8;

/// A receive buffer for [`LinkSocket::recv_batch`]: storage plus what was received into it.
/// With GRO on ([`LinkSocket::set_gro`]) one read may hold several datagrams of one sender:
/// walk them with [`RecvBuf::segments`] (which also works when GRO is off).
#[derive(Debug, Clone)]
pub struct RecvBuf {
    data: Box<[u8]>,
    len: usize,
    stride: usize,
    source: SocketAddr,
    truncated: bool,
}

impl RecvBuf {
    /// A buffer that can hold a read of `capacity` bytes (with GRO on, 64 KiB, or coalesced
    /// reads are cut short).
    pub fn new(capacity: usize) -> RecvBuf {
        RecvBuf {
            data: vec![0; capacity].into_boxed_slice(),
            len: 0,
            stride: 0,
            source: SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
            truncated: false,
        }
    }

    /// The bytes received: one datagram, or with GRO several back to back.
    pub fn packet(&self) -> &[u8] {
        &self.data[..self.len]
    }

    /// The bytes received, writable (for in-place decryption).
    pub fn packet_mut(&mut self) -> &mut [u8] {
        &mut self.data[..self.len]
    }

    /// The datagrams received (one unless GRO coalesced several).
    pub fn segments(&self) -> std::slice::Chunks<'_, u8> {
        segments(self.packet(), self.stride)
    }

    /// The datagrams received, writable.
    pub fn segments_mut(&mut self) -> std::slice::ChunksMut<'_, u8> {
        segments_mut(&mut self.data[..self.len], self.stride)
    }

    /// Length of each datagram but the last (which may be shorter): the segment size of a
    /// coalesced read, else the datagram's length.
    pub fn segment_size(&self) -> usize {
        if self.stride == 0 || self.stride >= self.len {
            self.len
        } else {
            self.stride
        }
    }

    /// Bytes received.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the last receive got an empty datagram (or none yet).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The sender of the received datagram(s).
    pub fn source(&self) -> SocketAddr {
        self.source
    }

    /// True if the read was longer than the buffer and its tail was cut off.
    pub fn is_truncated(&self) -> bool {
        self.truncated
    }
}

impl LinkSocket {
    /// Receives up to `min(bufs.len(), BATCH_MAX)` reads with one `recvmmsg` call and returns
    /// how many there were; `bufs[..n]` then hold them (with GRO on, each may hold several
    /// datagrams: see [`RecvBuf::segments`]). `WouldBlock` if none.
    pub fn recv_batch(&self, bufs: &mut [RecvBuf]) -> io::Result<usize> {
        let n = bufs.len().min(BATCH_MAX);
        if n == 0 {
            return Ok(0);
        }
        // Only the `n` slots passed to the kernel are initialised: zeroing all BATCH_MAX of
        // each array (some 15 KB) on every call showed up as a few µs per idle wake-up.
        let mut names = [const { MaybeUninit::<libc::sockaddr_storage>::uninit() }; BATCH_MAX];
        let mut iovs = [const { MaybeUninit::<libc::iovec>::uninit() }; BATCH_MAX];
        let mut hdrs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; BATCH_MAX];
        let mut cmsgs = [const { MaybeUninit::<CmsgBuf>::uninit() }; BATCH_MAX];
        let gro = self.offload.gro.load(Relaxed);
        for i in 0..n {
            // SAFETY: all-zero is a valid value for these plain C structs.
            let name = names[i].write(unsafe { mem::zeroed() });
            let iov = iovs[i].write(libc::iovec {
                iov_base: bufs[i].data.as_mut_ptr().cast(),
                iov_len: bufs[i].data.len(),
            });
            // SAFETY: as above.
            let h = &mut hdrs[i].write(unsafe { mem::zeroed() }).msg_hdr;
            h.msg_name = (name as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = iov;
            h.msg_iovlen = 1;
            if gro {
                let c = cmsgs[i].write(CmsgBuf::ZERO);
                h.msg_control = c.0.as_mut_ptr().cast();
                h.msg_controllen = c.0.len() as _;
            }
        }
        // SAFETY: the first `n` headers are initialised and point at live storage (`names`,
        // `iovs`, `cmsgs`, the buffers) that outlives the call, with lengths that match it.
        let r = unsafe {
            libc::recvmmsg(
                self.as_raw_fd(),
                hdrs.as_mut_ptr().cast(),
                n as libc::c_uint,
                0,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let r = r as usize;
        for i in 0..r {
            let b = &mut bufs[i];
            // SAFETY: r <= n, and the first n slots were initialised above.
            let (hdr, name) = unsafe { (hdrs[i].assume_init_ref(), names[i].assume_init_ref()) };
            b.len = (hdr.msg_len as usize).min(b.data.len());
            b.truncated = hdr.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            b.source = from_storage(name).unwrap_or(b.source);
            b.stride = if gro {
                gro_segment_size(&hdr.msg_hdr)
            } else {
                0
            };
            if b.stride != 0 && b.stride < b.len {
                Offload::add(&self.offload.gro_reads, 1);
                Offload::add(&self.offload.gro_segments, b.len.div_ceil(b.stride));
            }
        }
        Ok(r)
    }

    /// Sends datagrams, runs of them as super-datagrams when GSO is on, up to
    /// [`BATCH_MAX`] runs per `sendmmsg`, and returns how many datagrams from the front of
    /// `msgs` were sent.
    ///
    /// A return smaller than `msgs.len()` means the next datagram hit an error; call again
    /// with the rest to get that error. `Err` means `msgs[0]` was not sent (with GSO, nor
    /// the rest of its run: a caller that drops `msgs[0]` and calls again with the rest
    /// gets the others sent or their error): after `WouldBlock` wait for writability; after
    /// `Unreachable`-class errors the caller may drop that datagram and continue.
    pub fn send_batch(&self, msgs: &[(SocketAddr, &[u8])]) -> io::Result<usize> {
        let mut sent = 0;
        while sent < msgs.len() {
            let max = if self.offload.gso.load(Relaxed) {
                MAX_SEGMENTS
            } else {
                1
            };
            match self.sendmmsg(&msgs[sent..], max) {
                Ok((k, complete)) => {
                    sent += k;
                    if !complete {
                        break;
                    }
                }
                // Report progress now; the error comes back on the caller's next call.
                Err(_) if sent > 0 => break,
                Err(e) => return Err(e),
            }
        }
        Ok(sent)
    }

    /// One `sendmmsg` of runs of at most `max_segments` datagrams: (datagrams sent, whether
    /// every run built was sent). A super-datagram refused at the front is resent datagram
    /// by datagram at once.
    fn sendmmsg(
        &self,
        msgs: &[(SocketAddr, &[u8])],
        max_segments: usize,
    ) -> io::Result<(usize, bool)> {
        // Only the slots passed to the kernel are initialised (see `recv_batch`): a lone
        // datagram costs one header, not some 19 KB of zeroing.
        let mut names = [const { MaybeUninit::<libc::sockaddr_storage>::uninit() }; BATCH_MAX];
        let mut iovs = [const { MaybeUninit::<libc::iovec>::uninit() }; IOV_MAX];
        let mut hdrs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; BATCH_MAX];
        let mut cmsgs = [const { MaybeUninit::<CmsgBuf>::uninit() }; BATCH_MAX];
        let mut runs = [0usize; BATCH_MAX];
        let (mut h, mut at) = (0, 0);
        // Runs until the headers or the iovecs are used up.
        while h < BATCH_MAX && at < msgs.len().min(IOV_MAX) {
            let n = run_len(&msgs[at..], max_segments.min(IOV_MAX - at));
            // SAFETY: all-zero is a valid value for these plain C structs.
            let name = names[h].write(unsafe { mem::zeroed() });
            let len = to_storage(self.outgoing(msgs[at].0), name);
            for (iov, (_, data)) in iovs[at..at + n].iter_mut().zip(&msgs[at..at + n]) {
                iov.write(libc::iovec {
                    iov_base: data.as_ptr() as *mut libc::c_void, // the kernel only reads it
                    iov_len: data.len(),
                });
            }
            // SAFETY: as above.
            let hdr = &mut hdrs[h].write(unsafe { mem::zeroed() }).msg_hdr;
            hdr.msg_name = (name as *mut libc::sockaddr_storage).cast();
            hdr.msg_namelen = len;
            hdr.msg_iov = iovs[at].as_mut_ptr();
            hdr.msg_iovlen = n as _;
            if n > 1 {
                // run_len keeps a segment within MAX_SUPER_BYTES, so it fits a u16.
                set_segment_cmsg(hdr, cmsgs[h].write(CmsgBuf::ZERO), msgs[at].1.len() as u16);
            }
            runs[h] = n;
            (h, at) = (h + 1, at + n);
        }
        // SAFETY: the first `h` headers are initialised and point at initialised, live,
        // correctly sized storage for the whole call.
        let r = unsafe {
            libc::sendmmsg(
                self.as_raw_fd(),
                hdrs.as_mut_ptr().cast(),
                h as libc::c_uint,
                0,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if runs[0] > 1 && self.gso_refused(&e) {
                let (k, _) = self.sendmmsg(&msgs[..runs[0]], 1)?;
                return Ok((k, k == runs[0]));
            }
            return Err(e);
        }
        let k = r as usize;
        let supers = runs[..k].iter().filter(|&&n| n > 1);
        Offload::add(&self.offload.gso_sends, supers.clone().count());
        Offload::add(&self.offload.gso_segments, supers.sum());
        Ok((runs[..k].iter().sum(), k == h))
    }

    /// Whether `e` is the kernel refusing a super-datagram (`EIO`: no checksum offload on
    /// the device; `EINVAL`: a segment longer than the route's MTU, or a kernel that will
    /// not); counts it and turns GSO off for this socket where that is lasting.
    fn gso_refused(&self, e: &io::Error) -> bool {
        let o = &self.offload;
        match e.raw_os_error() {
            Some(libc::EIO) => {
                o.gso.store(false, Relaxed);
            }
            Some(libc::EINVAL) => {
                if o.gso_fallbacks.load(Relaxed) + 1 >= EINVAL_LIMIT {
                    o.gso.store(false, Relaxed);
                }
            }
            _ => return false,
        }
        Offload::add(&o.gso_fallbacks, 1);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::{classify, ErrorClass};
    use super::*;

    fn recv_all(s: &LinkSocket, bufs: &mut [RecvBuf], want: usize) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while got.len() < want && std::time::Instant::now() < deadline {
            match s.recv_batch(bufs) {
                Ok(n) => got.extend(
                    bufs[..n]
                        .iter()
                        .flat_map(|b| b.segments().map(<[u8]>::to_vec)),
                ),
                Err(e) if classify(&e) == ErrorClass::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        got
    }

    /// Loopback (no checksum work, a 64 KiB MTU) takes super-datagrams whole: a run of
    /// equal datagrams with a short tail is one GSO send and arrives as the same datagrams,
    /// coalesced into one read with GRO on, one read each with GRO off.
    #[test]
    fn a_gso_run_arrives_as_its_datagrams_with_and_without_gro() {
        for gro in [true, false] {
            let a = LinkSocket::bind(None, "[::]:0".parse().unwrap()).unwrap();
            let b = LinkSocket::bind(None, "127.0.0.1:0".parse().unwrap()).unwrap();
            assert_eq!(a.set_gro(gro), gro);
            let dst: SocketAddr = (Ipv4Addr::LOCALHOST, a.local_addr().unwrap().port()).into();
            let mut payloads: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; 1200]).collect();
            payloads.push(vec![99; 300]);
            let msgs: Vec<(SocketAddr, &[u8])> = payloads.iter().map(|p| (dst, &p[..])).collect();
            assert_eq!(b.send_batch(&msgs).unwrap(), 21);
            let st = b.offload_stats();
            assert!(st.gso, "loopback supports UDP_SEGMENT");
            assert_eq!(
                (st.gso_sends, st.gso_segments, st.gso_fallbacks),
                (1, 21, 0)
            );
            let mut bufs: Vec<RecvBuf> = (0..32).map(|_| RecvBuf::new(65_536)).collect();
            assert_eq!(recv_all(&a, &mut bufs, 21), payloads, "gro {gro}");
            let rs = a.offload_stats();
            assert_eq!(rs.gro, gro);
            // With GRO the super-datagram stays whole from sender to reader.
            assert_eq!(
                (rs.gro_reads, rs.gro_segments),
                if gro { (1, 21) } else { (0, 0) }
            );
        }
    }

    #[test]
    fn without_gso_runs_go_datagram_by_datagram() {
        let a = LinkSocket::bind(None, "127.0.0.1:0".parse().unwrap()).unwrap();
        a.set_gso(false);
        let dst = a.local_addr().unwrap();
        let payloads: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 500]).collect();
        let msgs: Vec<(SocketAddr, &[u8])> = payloads.iter().map(|p| (dst, &p[..])).collect();
        assert_eq!(a.send_batch(&msgs).unwrap(), 5);
        assert_eq!(a.offload_stats().gso_sends, 0);
        let mut bufs: Vec<RecvBuf> = (0..8).map(|_| RecvBuf::new(2048)).collect();
        assert_eq!(recv_all(&a, &mut bufs, 5), payloads);
    }
}
