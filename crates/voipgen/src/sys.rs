//! The few system calls `voipgen` needs beyond std: the monotonic clock in nanoseconds
//! (comparable across network namespaces), a larger receive buffer, and an epoll set.

use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// CLOCK_MONOTONIC in nanoseconds.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write into.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A nonblocking socket bound to `addr` with a 4 MB receive buffer (bursts of answers
/// must not overflow it while the loop is sending).
pub fn socket(addr: std::net::SocketAddr) -> io::Result<UdpSocket> {
    let s = UdpSocket::bind(addr)?;
    s.set_nonblocking(true)?;
    let size: libc::c_int = 4 << 20;
    // SAFETY: setsockopt reads `size` (an int) from the pointer for its length.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(s)
}

/// An epoll set of sockets, each registered with its index as the token.
pub struct Epoll {
    fd: OwnedFd,
    events: Vec<libc::epoll_event>,
}

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: plain system call; the result is checked before use.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Epoll {
            // SAFETY: `fd` is a new descriptor we own.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            events: vec![libc::epoll_event { events: 0, u64: 0 }; 256],
        })
    }

    /// Watches `sock` for input (level-triggered), reporting it as `token`.
    pub fn add(&self, sock: &UdpSocket, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: both fds are open; `ev` is a valid event.
        let rc = unsafe {
            libc::epoll_ctl(
                self.fd.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                sock.as_raw_fd(),
                &mut ev,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits up to `timeout_ms` and calls `f` with the token of every readable socket.
    pub fn wait(&mut self, timeout_ms: i32, mut f: impl FnMut(u64)) -> io::Result<()> {
        // SAFETY: `events` has room for `len` events.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                self.events.as_mut_ptr(),
                self.events.len() as libc::c_int,
                timeout_ms,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            };
        }
        for ev in &self.events[..n as usize] {
            f(ev.u64);
        }
        Ok(())
    }
}

/// Milliseconds to wait until `due_ns` (0 when due; rounded up so the loop does not spin).
pub fn timeout_ms(due_ns: u64, now: u64) -> i32 {
    if due_ns <= now {
        0
    } else {
        (due_ns - now).div_ceil(1_000_000).min(1000) as i32
    }
}
