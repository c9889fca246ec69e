//! The daemons' runtime: one current-thread tokio runtime with a `LocalSet` (the core is
//! owned by one thread, so it needs no locks, and tasks may share `Rc` state), and the
//! signal that ends a daemon.

use anyhow::{Context, Result};

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
