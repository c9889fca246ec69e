//! The daemons: a tokio current-thread runtime that owns the sans-IO core and feeds it
//! from the TUN device, the UDP sockets, timers, netlink and the control socket.
//!
//! - [`driver`]: the one event loop, shared by both roles, written against
//! - [`io`]: the packet-device and datagram-bind traits and their real implementations
//!   (TUN device; client link sockets, server listening socket), and
//! - [`core`]: the trait over the client and server endpoints;
//! - [`detours`]: the client's detour paths through relays (carrying out the sans-IO
//!   path manager's decisions);
//! - [`heap`]: the server's thread that returns freed heap to the kernel;
//! - [`mem`]: in-memory devices and binds (tests);
//! - [`mptcp`]: `multihome mptcp-detours`, subflows through relays for kernel MPTCP
//!   connections (carrying out the sans-IO MPTCP detour manager's decisions);
//! - [`naming`]: the client resolving its server, the server's resolver thread;
//! - [`reload`]: the client re-reading its config file (`multihome reload`, SIGHUP);
//! - [`shards`]: the server's data path on every core (one loop and core per thread,
//!   sessions sharded by key, what reaches the wrong thread handed over);
//! - [`client`], [`server`]: each role's set-up (config to core, routes, NAT, the client's
//!   netlink link watching) before handing over to the driver.
//!
//! One thread owns each core, so it needs no locks; every fd is nonblocking and wrapped in
//! `AsyncFd`; reads are drained in batches until the kernel says "would block"; after every
//! wake-up the loop flushes what the core wants to send and deliver. Nothing here decides
//! anything about scheduling — that is all in `multihome_proto`.

pub mod client;
pub mod core;
pub mod detours;
pub mod driver;
pub mod fastpath;
pub mod fastpath_server;
pub mod heap;
pub mod io;
pub mod mem;
pub mod mptcp;
pub mod naming;
pub mod reload;
pub mod server;
pub mod shards;
pub mod stream;

use anyhow::{Context, Result};
use multihome_io::tun::Tun;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// Largest datagram we build or accept.
pub const BUF_BYTES: usize = 65_536;
/// Most packets read from one fd per wake-up, so one busy fd cannot starve the others.
pub const READ_BUDGET: usize = 256;

pub use multihome_runtime::{block_on, os_seed, shutdown_signal, Clock};

/// Binds the optional Prometheus listener.
pub async fn bind_metrics(
    addr: Option<std::net::SocketAddr>,
) -> Result<Option<multihome_runtime::http::HttpListener>> {
    match addr {
        Some(a) => Ok(Some(
            multihome_runtime::http::HttpListener::bind(a, "metrics_listen").await?,
        )),
        None => Ok(None),
    }
}

/// The history behind the status document's events and the dashboard (bound on
/// `dashboard` if set) of a tunnel role.
pub async fn live(
    role: &str,
    dashboard: Option<std::net::SocketAddr>,
) -> Result<multihome_runtime::dashboard::Live> {
    multihome_runtime::dashboard::Live::new(
        role,
        dashboard,
        crate::dashboard::snapshot,
        Some(crate::metrics::render),
    )
    .await
}

/// Registers a readable fd with the runtime.
pub fn register<T: std::os::fd::AsRawFd>(inner: T) -> Result<AsyncFd<T>> {
    // SAFETY: every type registered here (Tun, LinkSocket, LinkWatcher) owns its fd and
    // closes it only in its own Drop, which runs after the AsyncFd deregisters it — the
    // contract `register` requires (see the io crate's docs on each type).
    unsafe { AsyncFd::register_with_interest(inner, Interest::READABLE) }
        .map_err(|e| anyhow::anyhow!("registering fd with the runtime: {}", e.into_parts().1))
}

/// Creates the TUN device with its addresses (one per family). It is opened with TSO offload: bulk TCP from
/// local applications arrives as 64 KB super-packets (one read instead of ~45), which
/// [`io::TunDevice`] cuts into MTU-sized packets — the largest single saving of CPU per byte.
pub fn setup_tun(name: &str, mtu: u32, addrs: &[ipnet::IpNet]) -> Result<io::TunDevice> {
    let tun = create_tun(name, mtu, addrs, 1)?.remove(0);
    Ok(io::TunDevice::new(register(tun)?))
}

/// [`setup_tun`] with `queues` queues (the server's threads, each registers its own).
pub fn create_tun(name: &str, mtu: u32, addrs: &[ipnet::IpNet], queues: usize) -> Result<Vec<Tun>> {
    let tuns = Tun::create_queues(name, mtu, queues)
        .with_context(|| format!("creating TUN device {name}"))?;
    let tun = &tuns[0];
    // A longer queue than the default 500 absorbs the bursts a TCP sender puts into the
    // device while the daemon is busy sending; drops there would read as congestion.
    let _ = std::process::Command::new("ip")
        .args(["link", "set", "dev", name, "txqueuelen", "4096"])
        .status();
    for addr in addrs {
        tun.set_address(*addr)
            .with_context(|| format!("setting {addr} on {name}"))?;
    }
    Ok(tuns)
}
