//! The daemon's runtime plumbing: the current-thread tokio runtime, the shutdown signal,
//! the clock that feeds the core's injected time, and the OS seed of the core's RNG.
//!
//! The tunnel's daemons (`crates/multihome/src/daemon/mod.rs`) have the same few helpers;
//! they are repeated here rather than shared because the `multihome` crate depends on this
//! one (not the other way) and they are too small to be a crate of their own.
//! Invariant: [`Clock::now`] never goes backwards (it reads the monotonic clock).

use anyhow::{Context, Result};
use multihome_proto::Instant;
use std::time::Duration;

/// Maps the monotonic clock to the core's `Instant` (µs since the daemon started).
pub struct Clock {
    start: std::time::Instant,
    tokio_start: tokio::time::Instant,
}

impl Clock {
    /// Starts the clock now.
    pub fn new() -> Self {
        Clock {
            start: std::time::Instant::now(),
            tokio_start: tokio::time::Instant::now(),
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

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// A seed from the OS RNG for the gateway's RNG (a predictor's random choices must not be
/// guessable from outside, nor repeat across restarts).
pub fn os_seed() -> Result<u64> {
    let mut seed = [0u8; 8];
    getrandom::getrandom(&mut seed).map_err(|e| anyhow::anyhow!("reading the OS RNG: {e}"))?;
    Ok(u64::from_le_bytes(seed))
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

/// Builds the current-thread runtime and runs `fut` on a LocalSet (the connection tasks
/// share `Rc` state, so they are local tasks of one thread).
pub fn block_on<F: std::future::Future<Output = Result<()>>>(fut: F) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    tokio::task::LocalSet::new().block_on(&rt, fut)
}
