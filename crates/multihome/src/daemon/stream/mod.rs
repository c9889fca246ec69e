//! Stream mode (docs/STREAM.md): the client ends the LAN hosts' TCP connections to the
//! tunnel's routes and carries each byte stream, encrypted, over one kernel MPTCP
//! connection with a subflow per link; the server opens the TCP connection to the
//! destination. The kernel does per-subflow congestion control, retransmission and
//! scheduling; the inner TCP no longer sees the links' reordering or loss.
//!
//! - [`client`]: interception ([`intercept`]), the transparent listener, the MPTCP
//!   connection (first subflow on the first usable link, one more per other link through
//!   the userspace path manager), the handshake, then [`relay`];
//! - [`server`]: the MPTCP listener on the tunnel's own address and port (TCP), the
//!   handshake (peer key and replay checked before anything is done), the connect to the
//!   destination, its outcome sent back, then [`relay`].
//!
//! Each role runs stream mode on a thread of its own with its own current-thread runtime,
//! so the packet path's thread is never slowed by it. Invariants: connections are bounded
//! (`max_connections`; beyond, new ones are reset), as are handshakes in progress on the
//! server; every wait has a timeout; the wire protocol is `multihome_proto::stream`.

pub mod client;
pub mod held;
pub mod intercept;
pub mod relay;
pub mod server;
pub mod steer;

use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Longest wait for the MPTCP connection (client) or the destination (server).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Delay between the starts of the first subflow's attempts over successive links.
pub const CONNECT_STAGGER: Duration = Duration::from_millis(250);
/// Longest wait for a handshake message once the MPTCP connection is up (the server's
/// answer waits for its own connect, hence more than `CONNECT_TIMEOUT`).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(15);

/// Most stream connections a server relays at once (each holds two sockets and ~35 KiB
/// of buffers besides the kernel's).
pub const STREAM_MAX_CONNECTIONS: usize = 16_384;

/// Counters of stream mode, shown under `stream` in the status document.
#[derive(Debug, Default)]
pub struct StreamStats {
    /// Connections being relayed now.
    pub active: AtomicU64,
    /// Connections whose destination answered.
    pub connected: AtomicU64,
    /// Relayed connections that ended cleanly (both directions finished).
    pub closed: AtomicU64,
    /// Relayed connections that ended by a reset (either side, or the MPTCP connection).
    pub reset: AtomicU64,
    /// Connections whose destination refused, was unreachable or did not answer.
    pub refused: AtomicU64,
    /// Connections that failed before an answer (no usable link, MPTCP connect or
    /// handshake failed, unknown client key, replayed handshake).
    pub failed: AtomicU64,
    /// Connections reset at once because `max_connections` were open.
    pub over_limit: AtomicU64,
    /// Application bytes from the LAN towards destinations.
    pub bytes_up: AtomicU64,
    /// Application bytes from destinations to the LAN.
    pub bytes_down: AtomicU64,
    /// Subflows added (client) over links other than the first.
    pub subflows: AtomicU64,
    /// Subflows closed because the tunnel saw their link leave Up (client).
    pub subflows_closed: AtomicU64,
    /// Subflows opened on a link back Up that had none (client; also in `subflows`).
    pub subflows_reopened: AtomicU64,
    /// REMOVE_ADDRs the kernel took for a closed subflow's address (client), telling the
    /// server to close its end of the subflow.
    pub addrs_removed: AtomicU64,
}

impl StreamStats {
    /// The counters as JSON.
    pub fn to_json(&self) -> Value {
        let g = |c: &AtomicU64| c.load(Relaxed);
        json!({
            "active": g(&self.active),
            "connected": g(&self.connected),
            "closed": g(&self.closed),
            "reset": g(&self.reset),
            "refused": g(&self.refused),
            "failed": g(&self.failed),
            "over_limit": g(&self.over_limit),
            "bytes_up": g(&self.bytes_up),
            "bytes_down": g(&self.bytes_down),
            "subflows": g(&self.subflows),
            "subflows_closed": g(&self.subflows_closed),
            "subflows_reopened": g(&self.subflows_reopened),
            "addrs_removed": g(&self.addrs_removed),
        })
    }

    /// Counts a relayed connection's end.
    pub fn ended(&self, outcome: relay::Outcome) {
        self.active.fetch_sub(1, Relaxed);
        match outcome {
            relay::Outcome::Closed => &self.closed,
            relay::Outcome::Reset => &self.reset,
        }
        .fetch_add(1, Relaxed);
    }
}

/// Microseconds since the Unix epoch, strictly growing within this process (the server
/// refuses a handshake timestamp it has seen: two connections opened in the same
/// microsecond must still differ).
pub fn handshake_timestamp(last: &AtomicU64) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    let mut prev = last.load(Relaxed);
    loop {
        let ts = now.max(prev + 1);
        match last.compare_exchange(prev, ts, Relaxed, Relaxed) {
            Ok(_) => return ts,
            Err(p) => prev = p,
        }
    }
}

/// Sets the MPTCP socket's congestion control (kept on its subflows, present and future).
/// A name the kernel does not have is reported once per process and the default kept.
pub fn set_congestion_control(s: &impl std::os::fd::AsFd, name: &str) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if let Err(e) = socket2::SockRef::from(s).set_tcp_congestion(name.as_bytes()) {
        if !WARNED.swap(true, Relaxed) {
            tracing::warn!(
                "stream mode: congestion control `{name}`: {e}; the system default is used \
                 (see /proc/sys/net/ipv4/tcp_available_congestion_control)"
            );
        }
    }
}

/// Runs `f` on a new thread named `name` inside its own current-thread runtime (the
/// daemons' `block_on`).
pub fn spawn_runtime<F, Fut>(name: &str, f: F) -> anyhow::Result<()>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let label = name.to_string();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            if let Err(e) = multihome_runtime::block_on(f()) {
                tracing::error!("{label} stopped: {e:#}");
            }
        })?;
    Ok(())
}
