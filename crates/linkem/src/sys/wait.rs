//! Precise sleeping: ppoll with a nanosecond timeout, an eventfd to interrupt it, and a 1 ns
//! timer slack so the kernel does not round our wake-ups by its default 50 µs.
//!
//! Why not a busy loop: two cores are shared with the endpoints; hrtimer wake-ups measured
//! here are tens of microseconds late, far inside the ±1 ms delay budget, and cost no CPU.
//! Invariant: `wait_readable` returns on readiness, timeout or signal, never blocks longer
//! than the timeout it was given.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// Sets this thread's timer slack, the rounding the kernel may apply to its timed sleeps.
pub fn set_timer_slack(ns: u64) -> io::Result<()> {
    // SAFETY: prctl(PR_SET_TIMERSLACK) takes one integer argument and touches no memory.
    let r = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn ppoll(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> io::Result<usize> {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `fds` is a valid slice of pollfd and `ts_ptr` is null or points at `ts`.
    let r = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            ts_ptr,
            std::ptr::null(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(0)
        } else {
            Err(e)
        };
    }
    Ok(r as usize)
}

/// Sleeps until one of `fds` is readable or `timeout` passes (`None`: no limit).
pub fn wait_readable(fds: &[BorrowedFd<'_>], timeout: Option<Duration>) -> io::Result<()> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    ppoll(&mut pfds, timeout).map(drop)
}

/// Waits up to `timeout` for `fd` to accept writes; `true` if it does.
pub fn wait_writable(fd: BorrowedFd<'_>, timeout: Duration) -> bool {
    let mut pfd = [libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    }];
    matches!(ppoll(&mut pfd, Some(timeout)), Ok(1))
}

/// An eventfd used to wake a sleeping thread.
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A non-blocking eventfd.
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: plain eventfd(2) call; the fd is owned right below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh fd we own.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Wakes whoever polls this fd.
    pub fn notify(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64; failure (counter full) still leaves it
        // readable, which is all a wake-up needs.
        unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Clears pending wake-ups.
    pub fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64; EAGAIN when nothing is pending is fine.
        unsafe { libc::read(self.0.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn timed_wait_is_precise_and_eventfd_wakes() {
        set_timer_slack(1).unwrap();
        let ev = EventFd::new().unwrap();
        let mut late = Vec::new();
        for _ in 0..50 {
            let t0 = Instant::now();
            wait_readable(&[ev.as_fd()], Some(Duration::from_micros(2000))).unwrap();
            late.push(t0.elapsed().saturating_sub(Duration::from_micros(2000)));
        }
        late.sort();
        assert!(
            late[25] < Duration::from_micros(500),
            "median oversleep {:?}",
            late[25]
        );
        ev.notify();
        let t0 = Instant::now();
        wait_readable(&[ev.as_fd()], Some(Duration::from_secs(5))).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(1));
        ev.drain();
    }
}
