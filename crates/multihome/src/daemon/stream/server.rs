//! Stream mode on the server: an MPTCP listener on the tunnel's address and port (TCP);
//! per connection the client's handshake is read (its key must be a configured peer's and
//! its timestamp new), the server connects to the destination it names, answers with the
//! outcome and, if connected, relays.
//!
//! Invariants: nothing is done for a client before its message 1 authenticated and passed
//! the replay check; handshakes in progress and connections are bounded; the in-kernel path
//! manager accepts as many joins as a client has links (limit raised to
//! [`SUBFLOW_LIMIT`], never lowered).

use super::relay::{read_frame, write_frame, Relay};
use super::{spawn_runtime, StreamStats, CONNECT_TIMEOUT, HANDSHAKE_TIMEOUT};
use anyhow::{Context, Result};
use multihome_io::mptcp::Pm;
use multihome_proto::crypto::{PublicKey, StaticSecret};
use multihome_proto::stream::handshake::HANDSHAKE_MAX;
use multihome_proto::stream::{ConnectStatus, InitReplay, StreamResponder};
use multihome_race::daemon::attempt::reset;
use socket2::{Domain, Protocol, Socket, Type};
use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::timeout;

/// Subflows per connection the server accepts (the most links a client has, 16, would
/// need more; 8 covers every deployment we know).
pub const SUBFLOW_LIMIT: u32 = 8;
/// Handshakes waiting for their first message at once.
const MAX_HANDSHAKES: usize = 256;

struct Ctx {
    key: StaticSecret,
    congestion_control: String,
    replay: RefCell<HashMap<[u8; 32], InitReplay>>,
    stats: Arc<StreamStats>,
}

/// Starts the MPTCP listener on `listen` for `peers` (their keys); returns the counters.
pub fn start(
    listen: SocketAddr,
    key: &StaticSecret,
    peers: Vec<PublicKey>,
    max_connections: usize,
    congestion_control: &str,
) -> Result<Arc<StreamStats>> {
    match Pm::open().and_then(|mut pm| pm.raise_subflow_limit(SUBFLOW_LIMIT)) {
        Ok(n) => tracing::info!(subflow_limit = n, "stream mode: MPTCP joins accepted"),
        Err(e) => tracing::warn!("stream mode: raising the MPTCP subflow limit: {e}"),
    }
    let listener = mptcp_listener(listen)?;
    let stats = Arc::new(StreamStats::default());
    let replay = peers.iter().map(|p| (p.0, InitReplay::new())).collect();
    let ctx = Ctx {
        key: key.clone(),
        congestion_control: congestion_control.to_string(),
        replay: RefCell::new(replay),
        stats: stats.clone(),
    };
    spawn_runtime("stream-server", move || async move {
        let listener = TcpListener::from_std(listener)?;
        accept_loop(Rc::new(ctx), listener, max_connections).await
    })?;
    tracing::info!(%listen, "stream mode: MPTCP listener");
    Ok(stats)
}

fn mptcp_listener(listen: SocketAddr) -> Result<std::net::TcpListener> {
    let fix = "stream mode needs kernel MPTCP: sysctl net.mptcp.enabled=1 (Linux 5.6 or later)";
    let s = Socket::new(
        Domain::for_address(listen),
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::MPTCP),
    )
    .context(fix)?;
    s.set_reuse_address(true)?;
    if listen.is_ipv6() {
        s.set_only_v6(false)?;
    }
    s.bind(&listen.into())
        .with_context(|| format!("binding the stream-mode listener on TCP {listen}"))?;
    s.listen(1024)?;
    Ok(s.into())
}

async fn accept_loop(ctx: Rc<Ctx>, listener: TcpListener, max: usize) -> Result<()> {
    let slots = Arc::new(Semaphore::new(max));
    let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    loop {
        let (enc, _) = match listener.accept().await {
            Ok(c) => c,
            // Out of descriptors or similar: wait, do not spin.
            Err(_) => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let (Ok(slot), Ok(hs)) = (
            slots.clone().try_acquire_owned(),
            handshakes.clone().try_acquire_owned(),
        ) else {
            ctx.stats.over_limit.fetch_add(1, Relaxed);
            reset(enc);
            continue;
        };
        let ctx = ctx.clone();
        tokio::task::spawn_local(async move {
            serve(&ctx, enc, hs).await;
            drop(slot);
        });
    }
}

/// One client connection: handshake, connect, answer, relay.
async fn serve(ctx: &Ctx, mut enc: TcpStream, hs: tokio::sync::OwnedSemaphorePermit) {
    let _ = enc.set_nodelay(true);
    super::set_congestion_control(&enc, &ctx.congestion_control);
    let mut m1 = [0u8; HANDSHAKE_MAX];
    let resp = match timeout(HANDSHAKE_TIMEOUT, read_frame(&mut enc, &mut m1)).await {
        Ok(Ok(n)) => accept_init(ctx, &m1[..n]),
        _ => None,
    };
    drop(hs);
    let Some(resp) = resp else {
        ctx.stats.failed.fetch_add(1, Relaxed);
        reset(enc);
        return;
    };
    let target = resp.target();
    let (status, dest) = connect(target).await;
    let mut m2 = [0u8; HANDSHAKE_MAX];
    let Ok((n, sealer, opener)) = resp.answer(status, &mut m2) else {
        return;
    };
    if write_frame(&mut enc, &m2[..n]).await.is_err() {
        ctx.stats.failed.fetch_add(1, Relaxed);
        return;
    }
    let Some(dest) = dest else {
        ctx.stats.refused.fetch_add(1, Relaxed);
        return;
    };
    ctx.stats.connected.fetch_add(1, Relaxed);
    ctx.stats.active.fetch_add(1, Relaxed);
    let relay = Relay {
        stats: &ctx.stats,
        plain_is_lan: false,
    };
    ctx.stats.ended(relay.run(dest, enc, sealer, opener).await);
}

/// Message 1 authenticated, from a configured peer, not replayed.
fn accept_init(ctx: &Ctx, msg: &[u8]) -> Option<StreamResponder> {
    let seed = multihome_runtime::os_seed().ok()?;
    let resp = match StreamResponder::read(&ctx.key, seed, msg) {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!("stream: {e}");
            return None;
        }
    };
    let mut replay = ctx.replay.borrow_mut();
    let Some(history) = replay.get_mut(&resp.client().0) else {
        // debug, not warn: anyone can send these, and `failed` counts them.
        tracing::debug!(client = %resp.client().to_base64(), "stream: handshake from a key that is not a peer");
        return None;
    };
    if !history.check_and_set(resp.timestamp_us()) {
        tracing::debug!(client = %resp.client().to_base64(), "stream: replayed or stale handshake refused");
        return None;
    }
    Some(resp)
}

/// Connects to the destination; the outcome as the client will see it.
async fn connect(target: SocketAddr) -> (ConnectStatus, Option<TcpStream>) {
    match timeout(CONNECT_TIMEOUT, TcpStream::connect(target)).await {
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            (ConnectStatus::Connected, Some(s))
        }
        Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => {
            (ConnectStatus::Refused, None)
        }
        Ok(Err(_)) => (ConnectStatus::Unreachable, None),
        Err(_) => (ConnectStatus::TimedOut, None),
    }
}
