//! Reading and writing kernel parameters through `/proc/sys`.
//!
//! Role: the server enables `net.ipv4.ip_forward` / `net.ipv6.conf.all.forwarding` before it
//! installs its NAT, and tests read them back. A sysctl is named either the `sysctl(8)` way
//! (`net.ipv4.ip_forward`) or as a path below `/proc/sys` (`net/ipv4/ip_forward`).
//!
//! Invariants: names are validated before any file is touched (no `..`, no absolute paths,
//! only `[A-Za-z0-9_.-/]`), so a name from a config file cannot reach outside `/proc/sys`.
//! `net.*` values are per network namespace: the namespace is the one of the *calling
//! thread* when the file is opened. This is a plain file write on purpose: the `sysctl`
//! crate does the same thing behind more API than these two functions need.

use std::fs;
use std::io;
use std::path::PathBuf;

/// Errors from [`read()`] and [`write()`].
#[derive(Debug, thiserror::Error)]
pub enum SysctlError {
    /// The name has characters or components that cannot name a sysctl.
    #[error("invalid sysctl name {name:?}: use dotted form like net.ipv4.ip_forward")]
    InvalidName {
        /// The name as given.
        name: String,
    },
    /// The file under `/proc/sys` could not be read (usually: no such sysctl on this kernel).
    #[error("cannot read sysctl {}: {source}; check the name exists on this kernel", path.display())]
    Read {
        /// File that was read.
        path: PathBuf,
        /// Underlying error.
        source: io::Error,
    },
    /// The value was refused (permission: run as root; EINVAL: value out of range).
    #[error("cannot set sysctl {} to {value:?}: {source}; run as root (CAP_NET_ADMIN/CAP_SYS_ADMIN) and check the value is valid", path.display())]
    Write {
        /// File that was written.
        path: PathBuf,
        /// Value that was refused.
        value: String,
        /// Underlying error.
        source: io::Error,
    },
}

/// Maps a sysctl name to its file under `/proc/sys`, refusing anything that could escape it.
pub fn path_of(name: &str) -> Result<PathBuf, SysctlError> {
    let invalid = || SysctlError::InvalidName {
        name: name.to_owned(),
    };
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'));
    if name.is_empty() || !ok_chars || name.starts_with('/') {
        return Err(invalid());
    }
    // The dotted form uses '.' as separator; a path form may contain dots inside components
    // (interface names such as "eth0.100"), so only translate dots when there is no slash.
    let rel = if name.contains('/') {
        name.to_owned()
    } else {
        name.replace('.', "/")
    };
    if rel
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(invalid());
    }
    Ok(PathBuf::from("/proc/sys").join(rel))
}

/// Reads a sysctl, returning its value with surrounding whitespace removed.
pub fn read(name: &str) -> Result<String, SysctlError> {
    let path = path_of(name)?;
    match fs::read_to_string(&path) {
        Ok(v) => Ok(v.trim().to_owned()),
        Err(source) => Err(SysctlError::Read { path, source }),
    }
}

/// Writes a sysctl. The kernel validates the value; a refused value is a [`SysctlError::Write`].
pub fn write(name: &str, value: &str) -> Result<(), SysctlError> {
    let path = path_of(name)?;
    fs::write(&path, value.as_bytes()).map_err(|source| SysctlError::Write {
        path,
        value: value.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotted_and_slashed_names_map_to_proc_sys() {
        assert_eq!(
            path_of("net.ipv4.ip_forward").unwrap(),
            PathBuf::from("/proc/sys/net/ipv4/ip_forward")
        );
        assert_eq!(
            path_of("net/ipv4/conf/eth0.100/forwarding").unwrap(),
            PathBuf::from("/proc/sys/net/ipv4/conf/eth0.100/forwarding")
        );
    }

    #[test]
    fn names_that_escape_proc_sys_are_refused() {
        for bad in [
            "",
            "/etc/passwd",
            "net/../../etc/passwd",
            "net..ipv4",
            "net.ipv4.ip_forward ",
            "net;rm",
            "net//x",
        ] {
            assert!(
                matches!(path_of(bad), Err(SysctlError::InvalidName { .. })),
                "{bad:?} accepted"
            );
        }
    }

    #[test]
    fn reads_a_sysctl_present_on_every_kernel() {
        let v = read("kernel.ostype").unwrap();
        assert_eq!(v, "Linux");
    }

    #[test]
    fn missing_sysctl_is_a_read_error() {
        assert!(matches!(
            read("net.ipv4.no_such_knob_mhio"),
            Err(SysctlError::Read { .. })
        ));
    }
}
