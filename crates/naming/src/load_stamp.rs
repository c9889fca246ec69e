//! The load generator's receive with the kernel's arrival time of each datagram
//! (`SO_TIMESTAMPNS`), so that a request's latency ends when its answer reached the host,
//! not when the generator — one busy process among others on a loaded machine — got round to
//! reading it. The send time is taken just before the `sendto`, while the generator runs.
//!
//! Invariant: falls back to the time of reading when the kernel gives no timestamp.

use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::Interest;
use tokio::net::UdpSocket;

/// Receive buffer asked for: answers wait there while the generator is not running
/// (the default, ~200 KB, holds a few hundred datagrams: 0.1 s at 2 000 answers/s).
pub const RCVBUF: libc::c_int = 8 << 20;

fn set(sock: &UdpSocket, opt: libc::c_int, v: libc::c_int) -> io::Result<()> {
    // SAFETY: setsockopt on a socket we own, with a c_int option of the right size.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Asks the kernel to stamp every datagram `sock` receives, and for a large receive
/// buffer (beyond `rmem_max` when run as root, as in the lab).
pub fn setup(sock: &UdpSocket) -> io::Result<()> {
    if set(sock, libc::SO_RCVBUFFORCE, RCVBUF).is_err() {
        set(sock, libc::SO_RCVBUF, RCVBUF)?;
    }
    set(sock, libc::SO_TIMESTAMPNS, 1)
}

/// One datagram into `buf`: its length and when it arrived.
pub async fn recv(sock: &UdpSocket, buf: &mut [u8]) -> io::Result<(usize, Instant)> {
    sock.async_io(Interest::READABLE, || recv_now(sock, buf))
        .await
}

fn recv_now(sock: &UdpSocket, buf: &mut [u8]) -> io::Result<(usize, Instant)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Room for one SCM_TIMESTAMPNS (a timespec) with its header, 8-aligned.
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain data; zero is a valid empty value for every field.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: the iovec and control buffers outlive the call and their lengths are theirs.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let read_at = Instant::now();
    // SAFETY: the CMSG macros walk the control buffer the kernel filled, within
    // msg_controllen; a timestamp message carries one timespec.
    let stamp = unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        let mut found = None;
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                found = Some(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
        found
    };
    // The kernel's stamp is wall-clock time: how long ago that was, on the monotonic clock.
    let at = stamp
        .and_then(|s| {
            let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?;
            read_at.checked_sub(now.saturating_sub(s))
        })
        .unwrap_or(read_at);
    Ok((n as usize, at))
}
