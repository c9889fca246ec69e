//! Tunnel detours: userspace forwarding through one relay socket per detour, for relays
//! that cannot NAT. Datagrams from the client's source go to the server, datagrams from
//! the server go to the source, anything else is dropped and counted; up to 64 reads per
//! `recvmmsg`, and up to 64 runs per `sendmmsg`. The datagrams are the tunnel's, sealed end
//! to end: they are moved, never read.
//!
//! Offloads: the socket reads with UDP GRO (a run of a peer's datagrams arrives as one read
//! where the kernel coalesced it) and sends with UDP GSO (a run of equal datagrams to one
//! destination leaves as one super-datagram), so a coalesced read goes out again as one
//! super-datagram, and single reads of equal datagrams are gathered into one: the cost per
//! datagram in the kernel, not the system calls, is what bounds forwarding on one core.

use anyhow::{Context, Result};
use multihome_io::udp::{classify, ErrorClass, LinkSocket, RecvBuf, BATCH_MAX};
use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use tokio::io::unix::AsyncFd;
use tokio::task::JoinHandle;

/// One read: with GRO, up to 64 KiB of coalesced datagrams. 64 buffers per detour: 4 MiB
/// of address space, of which only what reads have written is resident (the buffers are
/// zero-allocated, so untouched pages are never backed): without coalescing, one page per
/// buffer.
const READ_BYTES: usize = 65_536;
/// Datagrams gathered from one `recvmmsg` before a send (on the stack).
const SEND_MAX: usize = 256;

/// Forwarding counters of all tunnel detours.
#[derive(Debug, Default)]
pub struct TunnelStats {
    /// Datagrams forwarded.
    pub datagrams: Cell<u64>,
    /// Bytes forwarded.
    pub bytes: Cell<u64>,
    /// Datagrams dropped (foreign source, truncated, send errors).
    pub dropped: Cell<u64>,
}

/// A running tunnel detour; dropping it stops the task and closes the socket.
pub struct Tunnel {
    task: JoinHandle<()>,
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Tunnel {
    /// Binds `local` and forwards between `source` and `server` on a local task.
    pub fn start(
        local: SocketAddr,
        source: SocketAddr,
        server: SocketAddr,
        stats: Rc<TunnelStats>,
    ) -> Result<Tunnel> {
        let sock = LinkSocket::bind(None, local).with_context(|| format!("binding {local}"))?;
        // SAFETY: the socket owns its fd for its whole life and `as_raw_fd` always returns
        // it (LinkSocket's documented contract for tokio).
        let sock = unsafe { AsyncFd::register(sock) }.context("registering a tunnel socket")?;
        let task = tokio::task::spawn_local(async move {
            if let Err(e) = forward(sock, source, server, &stats).await {
                tracing::warn!("tunnel detour {local}: {e}");
            }
        });
        Ok(Tunnel { task })
    }
}

async fn forward(
    sock: AsyncFd<LinkSocket>,
    source: SocketAddr,
    server: SocketAddr,
    stats: &TunnelStats,
) -> std::io::Result<()> {
    sock.get_ref().set_gro(true);
    let mut bufs: Vec<RecvBuf> = (0..BATCH_MAX).map(|_| RecvBuf::new(READ_BYTES)).collect();
    loop {
        let mut guard = sock.readable().await?;
        let n = match sock.get_ref().recv_batch(&mut bufs) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                guard.clear_ready();
                continue;
            }
            Err(e) => return Err(e),
        };
        drop(guard);
        // The reads' datagrams in order, on the stack, sent whenever the array is full.
        let unset = (source, &[][..]);
        let mut msgs = [unset; SEND_MAX];
        let mut k = 0;
        for b in &bufs[..n] {
            let to = if b.source() == source {
                server
            } else if b.source() == server {
                source
            } else {
                stats
                    .dropped
                    .set(stats.dropped.get() + b.segments().count() as u64);
                continue;
            };
            if b.is_truncated() {
                stats
                    .dropped
                    .set(stats.dropped.get() + b.segments().count() as u64);
                continue;
            }
            for d in b.segments() {
                if k == SEND_MAX {
                    send_all(&sock, &msgs[..k], stats).await?;
                    k = 0;
                }
                msgs[k] = (to, d);
                k += 1;
            }
        }
        send_all(&sock, &msgs[..k], stats).await?;
    }
}

/// Sends `msgs` (runs of equal datagrams to one destination go as one super-datagram),
/// waiting while the socket buffer is full; datagrams the kernel refuses are dropped.
async fn send_all(
    sock: &AsyncFd<LinkSocket>,
    msgs: &[(SocketAddr, &[u8])],
    stats: &TunnelStats,
) -> std::io::Result<()> {
    let mut rest = msgs;
    while !rest.is_empty() {
        match sock.get_ref().send_batch(rest) {
            Ok(k) => {
                let bytes: usize = rest[..k].iter().map(|(_, p)| p.len()).sum();
                stats.datagrams.set(stats.datagrams.get() + k as u64);
                stats.bytes.set(stats.bytes.get() + bytes as u64);
                rest = &rest[k..];
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let mut w = sock.writable().await?;
                w.clear_ready();
            }
            Err(e) if classify(&e) == ErrorClass::Fatal => return Err(e),
            Err(_) => {
                // This datagram's destination is unreachable: drop it, go on.
                stats.dropped.set(stats.dropped.get() + 1);
                rest = &rest[1..];
            }
        }
    }
    Ok(())
}
