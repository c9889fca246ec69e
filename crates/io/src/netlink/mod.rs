//! rtnetlink: watching links and addresses, and changing links, addresses and routes.
//!
//! Role: the daemon learns that an uplink went down or got a new address from
//! [`LinkWatcher`] (multicast groups `RTNLGRP_LINK`, `RTNLGRP_IPV4_IFADDR`,
//! `RTNLGRP_IPV6_IFADDR`), and configures its TUN device and routes with the request
//! functions ([`set_link_up`], [`set_mtu`], [`add_address`], [`add_route`], ...).
//!
//! Invariants:
//! - Every request opens its own short-lived `NETLINK_ROUTE` socket, so the call acts in the
//!   network namespace of the *calling thread* and never sees another request's replies.
//! - Requests wait for the kernel's acknowledgement; a refusal is a [`NetlinkError::Kernel`]
//!   carrying the errno (match with [`NetlinkError::errno`]).
//! - Adding an address or a route replaces an identical existing one (`NLM_F_REPLACE`), so
//!   repeating a configuration step is harmless.
//! - The watcher reports transitions only (never the same `Up` twice in a row), and resyncs
//!   from a full dump when the kernel reports that its queue overflowed.
//!
//! Messages are built and parsed with `netlink-packet-route`; the socket is `netlink-sys`.

mod request;
mod watch;

use std::io;

pub use request::{
    add_address, add_route, del_address, del_route, interface_addresses, link_index, link_is_up,
    set_link_up, set_mtu,
};
pub use watch::{LinkEvent, LinkWatcher};

/// Errors of the netlink module.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    /// No interface has this name in the calling thread's network namespace.
    #[error("no network interface named {name:?}; check `ip link` and the configured name")]
    NoSuchInterface {
        /// The name looked up.
        name: String,
    },
    /// Opening, binding or using the netlink socket failed locally.
    #[error("netlink socket error while trying to {op}: {source}; is this Linux with rtnetlink available?")]
    Socket {
        /// What was being done.
        op: String,
        /// Underlying error.
        source: io::Error,
    },
    /// The kernel refused a request (the errno is in `source`).
    #[error("the kernel refused to {op}: {source}{}", hint(source))]
    Kernel {
        /// What was requested, e.g. "add address 10.0.0.1/24 to mh0".
        op: String,
        /// The kernel's errno as an io::Error.
        source: io::Error,
    },
    /// A reply could not be decoded: a bug here or a kernel this crate does not understand.
    #[error("could not decode the kernel's netlink reply to {op}: {detail}; please report this with the kernel version")]
    Decode {
        /// What was requested.
        op: String,
        /// Decoder message.
        detail: String,
    },
}

impl NetlinkError {
    /// The errno behind a [`NetlinkError::Kernel`] or [`NetlinkError::Socket`] error, if any.
    pub fn errno(&self) -> Option<i32> {
        match self {
            NetlinkError::Kernel { source, .. } | NetlinkError::Socket { source, .. } => {
                source.raw_os_error()
            }
            _ => None,
        }
    }
}

/// A short "what to do" for the errnos an operator can act on.
fn hint(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => "; run as root or grant CAP_NET_ADMIN",
        Some(libc::ENODEV) => "; the interface disappeared, check `ip link`",
        Some(libc::EEXIST) => "; it already exists with different parameters",
        Some(libc::EINVAL) => "; the kernel found a parameter invalid (MTU, prefix or family)",
        _ => "",
    }
}
