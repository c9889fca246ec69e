//! Throw-away named network namespaces for tests, benchmarks and the lab.
//!
//! Role: every test that touches interfaces, routes or nftables runs in a namespace of its
//! own, so it cannot disturb the host or another test running in parallel.
//!
//! Invariants:
//! - The name is `<prefix>-<8 random hex digits>`, visible to `ip netns list`.
//! - [`NetNs`] deletes its namespace on drop, also while unwinding from a panic; interfaces
//!   inside (veth ends, dummies, TUNs whose fd is closed) disappear with it.
//! - [`NetNs::run`] executes code on a *fresh thread* that entered the namespace, so the
//!   caller's thread never changes namespace. Sockets and fds opened there stay bound to the
//!   namespace after the thread ends and may be used from any thread.
//! - The loopback interface of a new namespace is brought up.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::process::Command;

/// Errors of namespace management.
#[derive(Debug, thiserror::Error)]
pub enum NetNsError {
    /// A helper command could not be started (is iproute2's `ip` installed?).
    #[error("cannot run {cmd:?}: {source}; install iproute2 and run as root")]
    Spawn {
        /// The command line.
        cmd: String,
        /// Underlying error.
        source: io::Error,
    },
    /// A helper command failed; its stderr says why.
    #[error("{cmd:?} failed ({status}): {stderr}")]
    Command {
        /// The command line.
        cmd: String,
        /// Exit status as text.
        status: String,
        /// What the command printed on stderr.
        stderr: String,
    },
    /// The namespace could not be entered (needs CAP_SYS_ADMIN).
    #[error("cannot enter network namespace {name}: {source}; run as root")]
    Enter {
        /// Namespace name.
        name: String,
        /// Underlying error.
        source: io::Error,
    },
}

/// A named network namespace that is deleted on drop.
#[derive(Debug)]
pub struct NetNs {
    name: String,
}

impl NetNs {
    /// Creates `<prefix>-<random>` and brings its loopback up.
    pub fn new(prefix: &str) -> Result<NetNs, NetNsError> {
        let mut rnd = [0u8; 4];
        File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut rnd))
            .map_err(|source| NetNsError::Spawn {
                cmd: "read /dev/urandom".into(),
                source,
            })?;
        let name = format!("{prefix}-{:08x}", u32::from_ne_bytes(rnd));
        run_cmd(&["ip", "netns", "add", &name])?;
        let ns = NetNs { name };
        ns.exec(&["ip", "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name (for `ip netns exec NAME ...` or `ip link set X netns NAME`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `f` on a new thread inside the namespace and returns its result. A panic in `f`
    /// is propagated to the caller.
    pub fn run<T, F>(&self, f: F) -> Result<T, NetNsError>
    where
        T: Send,
        F: FnOnce() -> T + Send,
    {
        run_in(&self.name, f)
    }

    /// Runs a command inside the namespace (`ip netns exec`) and returns its stdout.
    pub fn exec(&self, args: &[&str]) -> Result<String, NetNsError> {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        run_cmd(&full)
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        if let Err(e) = run_cmd(&["ip", "netns", "del", &self.name]) {
            // Cannot propagate from drop; say loudly which namespace leaked.
            eprintln!("multihome-io: could not delete network namespace: {e}");
        }
    }
}

/// Runs `f` on a new thread inside the existing named namespace `name` (`ip netns add`'s
/// `/run/netns/NAME`) and returns its result; the caller's thread never changes namespace.
/// A panic in `f` is propagated to the caller.
pub fn run_in<T, F>(name: &str, f: F) -> Result<T, NetNsError>
where
    T: Send,
    F: FnOnce() -> T + Send,
{
    let path = format!("/run/netns/{name}");
    let enter_err = |source| NetNsError::Enter {
        name: name.to_owned(),
        source,
    };
    let file = File::open(&path).map_err(enter_err)?;
    std::thread::scope(|s| {
        let handle = s.spawn(move || {
            // SAFETY: plain syscall on an fd we own; only this thread changes namespace.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
            drop(file);
            Ok(f())
        });
        match handle.join() {
            Ok(r) => r.map_err(enter_err),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// Runs a command to completion; non-zero exit becomes [`NetNsError::Command`].
pub fn run_cmd(args: &[&str]) -> Result<String, NetNsError> {
    let cmd = args.join(" ");
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|source| NetNsError::Spawn {
            cmd: cmd.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(NetNsError::Command {
            cmd,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failing_command_reports_its_stderr() {
        let e = run_cmd(&["ip", "link", "show", "mhio-no-such-dev"]).unwrap_err();
        let NetNsError::Command { stderr, .. } = &e else {
            panic!("unexpected {e:?}")
        };
        assert!(stderr.contains("mhio-no-such-dev"), "{stderr}");
    }

    #[test]
    fn missing_program_is_a_spawn_error() {
        assert!(matches!(
            run_cmd(&["/nonexistent/mhio-tool"]),
            Err(NetNsError::Spawn { .. })
        ));
    }
}
