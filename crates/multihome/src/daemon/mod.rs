//! The daemons: a tokio current-thread runtime that owns the sans-IO core and feeds it
//! from the TUN device, the UDP sockets, timers, netlink and the control socket.
//!
//! One thread owns the core, so it needs no locks; every fd is nonblocking and wrapped in
//! `AsyncFd`; reads are drained in batches until the kernel says "would block"; after every
//! wake-up the loop flushes what the core wants to send and deliver. Nothing here decides
//! anything about scheduling — that is all in `proto`.

pub mod client;
pub mod server;

use anyhow::{Context, Result};
use multihome_io::tun::Tun;
use multihome_proto::Instant;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::unix::{AsyncFd, AsyncFdReadyGuard};
use tokio::io::Interest;

/// Largest datagram we build or accept.
pub const BUF_BYTES: usize = 65_536;
/// Most packets read from one fd per wake-up, so one busy fd cannot starve the others.
pub const READ_BUDGET: usize = 256;

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// Maps the monotonic clock to the core's `Instant` (µs since start).
pub struct Clock {
    start: std::time::Instant,
    tokio_start: tokio::time::Instant,
    /// Wall-clock µs at start (handshake timestamps).
    pub epoch_us: u64,
}

impl Clock {
    /// Starts the clock now.
    pub fn new() -> Self {
        Clock {
            start: std::time::Instant::now(),
            tokio_start: tokio::time::Instant::now(),
            epoch_us: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_micros() as u64)
                .unwrap_or(0),
        }
    }

    /// The core's current time.
    pub fn now(&self) -> Instant {
        Instant::from_micros(self.start.elapsed().as_micros() as u64)
    }

    /// A core deadline as a tokio instant (far future when there is none).
    pub fn deadline(&self, t: Option<Instant>) -> tokio::time::Instant {
        match t {
            Some(t) => self.tokio_start + Duration::from_micros(t.as_micros()),
            None => tokio::time::Instant::now() + Duration::from_secs(3600),
        }
    }
}

/// 32 bytes from the OS RNG: the seed of the core's RNG, which makes the handshakes'
/// ephemeral keys, so it must be unpredictable.
pub fn os_seed() -> Result<[u8; 32]> {
    let mut seed = [0u8; 32];
    getrandom::getrandom(&mut seed).map_err(|e| anyhow::anyhow!("reading the OS RNG: {e}"))?;
    Ok(seed)
}

/// Binds the optional Prometheus listener.
pub async fn bind_metrics(
    addr: Option<std::net::SocketAddr>,
) -> Result<Option<tokio::net::TcpListener>> {
    match addr {
        Some(a) => Ok(Some(
            tokio::net::TcpListener::bind(a)
                .await
                .with_context(|| format!("metrics_listen {a}"))?,
        )),
        None => Ok(None),
    }
}

/// Registers a readable fd with the runtime.
pub fn register<T: std::os::fd::AsRawFd>(inner: T) -> Result<AsyncFd<T>> {
    // SAFETY: every type registered here (Tun, LinkSocket, LinkWatcher) owns its fd and
    // closes it only in its own Drop, which runs after the AsyncFd deregisters it — the
    // contract `register` requires (see the io crate's docs on each type).
    unsafe { AsyncFd::register_with_interest(inner, Interest::READABLE) }
        .map_err(|e| anyhow::anyhow!("registering fd with the runtime: {}", e.into_parts().1))
}

/// Creates the TUN device with its address. It is opened with TSO offload: bulk TCP from
/// local applications arrives as 64 KB super-packets (one read instead of ~45), which
/// `read_tun` cuts into MTU-sized packets — the largest single saving of CPU per byte.
pub fn setup_tun(name: &str, mtu: u32, addr: ipnet::IpNet) -> Result<AsyncFd<Tun>> {
    let tun = Tun::create_with_offload(name, mtu)
        .with_context(|| format!("creating TUN device {name}"))?;
    // A longer queue than the default 500 absorbs the bursts a TCP sender puts into the
    // device while the daemon is busy sending; drops there would read as congestion.
    let _ = std::process::Command::new("ip")
        .args(["link", "set", "dev", name, "txqueuelen", "4096"])
        .status();
    tun.set_address(addr)
        .with_context(|| format!("setting {addr} on {name}"))?;
    register(tun)
}

/// Reads from a ready fd with `read` until the kernel says "would block" (which clears
/// the readiness, so the next wait blocks) or the budget is spent (readiness stays set, so
/// the loop comes back at once after serving the other fds).
pub fn drain<T: std::os::fd::AsRawFd>(
    guard: &mut AsyncFdReadyGuard<'_, T>,
    mut read: impl FnMut(&T) -> std::io::Result<()>,
) {
    for _ in 0..READ_BUDGET {
        match guard.try_io(|inner| read(inner.get_ref())) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::debug!("read error: {e}");
                break;
            }
            Err(_would_block) => break,
        }
    }
}

/// Reads one frame from the TUN device and hands each IP packet in it to `f`.
pub fn read_tun(
    tun: &Tun,
    frame: &mut [u8],
    scratch: &mut Vec<u8>,
    mut f: impl FnMut(&[u8]),
) -> std::io::Result<()> {
    let n = tun.recv(frame)?;
    if let Err(e) = multihome_io::tun::split_gso(&frame[..n], scratch, &mut f) {
        tracing::debug!("dropping a TUN frame: {e}");
    }
    Ok(())
}

/// Datagrams built but not yet sent, sent with one `sendmmsg` per socket.
pub struct TxBatch {
    bufs: Vec<Vec<u8>>,
    meta: Vec<(usize, std::net::SocketAddr, usize)>,
}

impl TxBatch {
    /// Room for `BATCH` datagrams.
    pub fn new() -> Self {
        TxBatch {
            bufs: (0..multihome_io::udp::BATCH_MAX)
                .map(|_| vec![0u8; BUF_BYTES])
                .collect(),
            meta: Vec::with_capacity(multihome_io::udp::BATCH_MAX),
        }
    }

    /// Builds datagrams with `build` (which writes one into the buffer it is given and
    /// says for which socket and destination) until it has none or the batch is full;
    /// returns true when it stopped because the batch is full.
    pub fn fill(
        &mut self,
        mut build: impl FnMut(&mut [u8]) -> Option<(usize, std::net::SocketAddr, usize)>,
    ) -> bool {
        while let Some(buf) = self.bufs.get_mut(self.meta.len()) {
            match build(buf) {
                Some(m) => self.meta.push(m),
                None => return false,
            }
        }
        true
    }

    /// Sends everything, grouping consecutive datagrams of one socket into one call;
    /// `on_error(sock, err)` hears about failures (the datagrams are dropped: UDP).
    pub fn send<'a>(
        &mut self,
        socket: impl Fn(usize) -> Option<&'a multihome_io::udp::LinkSocket>,
        mut on_error: impl FnMut(usize, std::io::Error),
    ) {
        let mut start = 0;
        while start < self.meta.len() {
            let sock_idx = self.meta[start].0;
            let end = self.meta[start..]
                .iter()
                .position(|m| m.0 != sock_idx)
                .map_or(self.meta.len(), |p| start + p);
            if let Some(sock) = socket(sock_idx) {
                let msgs: Vec<(std::net::SocketAddr, &[u8])> = (start..end)
                    .map(|i| (self.meta[i].1, &self.bufs[i][..self.meta[i].2]))
                    .collect();
                let mut sent = 0;
                while sent < msgs.len() {
                    match sock.send_batch(&msgs[sent..]) {
                        Ok(0) => break,
                        Ok(n) => sent += n,
                        Err(e) => {
                            on_error(sock_idx, e);
                            sent += 1; // skip the datagram that failed
                        }
                    }
                }
            }
            start = end;
        }
        self.meta.clear();
    }
}

impl Default for TxBatch {
    fn default() -> Self {
        Self::new()
    }
}

/// Writes decrypted packets to the TUN device, coalescing consecutive TCP segments of a
/// flow into super-packets (GRO) so the kernel runs its TCP receive path once per 64 KB
/// instead of once per packet. Nothing is held across calls but the reused buffer the core
/// copies each packet into.
pub struct TunWriter {
    gro: multihome_io::tun::GroBatch,
    packet: Vec<u8>,
}

impl Default for TunWriter {
    fn default() -> Self {
        TunWriter {
            gro: multihome_io::tun::GroBatch::default(),
            packet: vec![0u8; BUF_BYTES],
        }
    }
}

impl TunWriter {
    /// Writes every packet `next` copies into the buffer it is given (returning its length).
    pub fn write_all(
        &mut self,
        tun: &AsyncFd<Tun>,
        mut next: impl FnMut(&mut [u8]) -> Option<usize>,
    ) {
        let mut write = |f: &[u8]| {
            // A full TUN queue drops the frame; the inner TCP recovers.
            if let Err(e) = tun.get_ref().send_frame(f) {
                tracing::debug!("writing to the TUN device: {e}");
            }
        };
        while let Some(n) = next(&mut self.packet) {
            let p = &self.packet[..n];
            if self.gro.push(p).is_err() {
                self.gro.flush(&mut write);
                if self.gro.push(p).is_err() {
                    tracing::debug!("dropping a packet the GRO batch cannot take");
                }
            }
        }
        self.gro.flush(&mut write);
    }
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("installing the SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Builds the current-thread runtime and runs `fut` on a LocalSet.
pub fn block_on<F: std::future::Future<Output = Result<()>>>(fut: F) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    tokio::task::LocalSet::new().block_on(&rt, fut)
}
