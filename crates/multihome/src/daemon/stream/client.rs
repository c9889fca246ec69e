//! Stream mode on the client: TCP from the LAN hosts to the tunnel's routes is intercepted
//! (TPROXY) and each connection carried over its own MPTCP connection to the server.
//!
//! Per connection: the first subflow leaves by the first link (config order) whose
//! interface is up with an address of the server's family, bound to that interface; the
//! handshake names the original destination; once the server answered (the connection is
//! then fully established, as the path manager requires) a subflow is added from every
//! other usable link to that link's server address, bound to its interface. A refusal or
//! failure resets the LAN host's connection.
//!
//! Invariants: the namespace uses the userspace path manager while the client runs (the
//! previous type is restored on exit); interception is removed on exit ([`ClientStream`]'s
//! drop); at most `max_connections` connections at once.

use super::held::Held;
use super::intercept::Interception;
use super::relay::{read_frame, write_frame, Relay};
use super::steer::LinkStates;
use super::{
    handshake_timestamp, spawn_runtime, StreamStats, CONNECT_STAGGER, CONNECT_TIMEOUT,
    HANDSHAKE_TIMEOUT,
};
use crate::config::ClientSettings;
use anyhow::{bail, Context, Result};
use multihome_io::mptcp::{mptcp_info, set_pm_type, set_userspace_pm, Pm};
use multihome_io::netlink::{interface_addresses, link_index, link_is_up};
use multihome_proto::crypto::{PublicKey, StaticSecret};
use multihome_proto::stream::handshake::HANDSHAKE_MAX;
use multihome_proto::stream::subflows::{address_id, tried_last};
use multihome_proto::stream::{ConnectStatus, StreamInitiator};
use multihome_race::core::Flow;
use multihome_race::daemon::attempt::{listeners, reset};
use socket2::{Domain, Protocol, Socket, Type};
use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::timeout;

/// Stream mode running; dropping it removes the interception and restores the path
/// manager type (the thread ends with the process).
pub struct ClientStream {
    /// The counters (status document).
    pub stats: Arc<StreamStats>,
    _intercept: Interception,
    old_pm: u8,
}

impl Drop for ClientStream {
    fn drop(&mut self) {
        if self.old_pm != 1 {
            let _ = set_pm_type(self.old_pm);
        }
    }
}

/// One link as stream mode uses it.
#[derive(Clone)]
pub struct Link {
    pub(super) name: String,
    interface: String,
    /// The server's address over this link; the MPTCP port is the same number (TCP).
    pub(super) server: SocketAddr,
}

/// A link usable now: its interface index and local address.
pub struct Usable<'a> {
    pub(super) link: &'a Link,
    /// Its index in the configuration (the tunnel's path id).
    pub(super) index: usize,
    ifindex: u32,
    pub(super) local: IpAddr,
}

/// What every connection's task shares.
pub struct Ctx {
    pub(super) links: Vec<Link>,
    key: StaticSecret,
    server_key: PublicKey,
    last_ts: AtomicU64,
    congestion_control: String,
    pub(super) pm: RefCell<Pm>,
    fallback_logged: std::cell::Cell<bool>,
    /// The tunnel's state of each link (`steer`).
    states: LinkStates,
    /// Tell the server (REMOVE_ADDR) when a subflow is closed by the steering.
    pub(super) remove_addr: bool,
    /// The counters.
    pub stats: Arc<StreamStats>,
    /// Held SYNs (`hold_syns`).
    pub held: Option<Held>,
}

/// Starts stream mode if `[stream]` is configured; `states` are the tunnel's link states
/// its subflows are steered by.
pub fn start(
    s: &ClientSettings,
    key: &StaticSecret,
    states: LinkStates,
) -> Result<Option<ClientStream>> {
    let Some(cfg) = s.stream.clone() else {
        return Ok(None);
    };
    if s.naming.is_some() {
        bail!("[stream] needs the server's address and key in the file: it cannot be used with servers = \"resolve\"");
    }
    let pm = Pm::open().context("stream mode needs kernel MPTCP (net.mptcp.enabled = 1)")?;
    let old_pm = set_userspace_pm().context("switching to the userspace MPTCP path manager")?;
    let intercept = Interception::install(
        &cfg.lan,
        &s.routes,
        cfg.listen_port,
        cfg.table,
        cfg.hold_syns,
    )?;
    let stats = Arc::new(StreamStats::default());
    // From here on, an error drops this: interception removed, path manager type restored.
    let running = ClientStream {
        stats: stats.clone(),
        _intercept: intercept,
        old_pm,
    };
    let links = s
        .links
        .iter()
        .map(|l| Link {
            name: l.name.clone(),
            interface: l.interface.clone(),
            server: l.server,
        })
        .collect();
    let (key, server_key, st) = (key.clone(), s.server_public_key, stats.clone());
    let max = cfg.max_connections as usize;
    let port = cfg.listen_port;
    let queue = cfg.hold_syns;
    let cc = cfg.congestion_control.clone();
    let remove_addr = cfg.remove_addr;
    // The thread reports whether its queue and listener opened: without them the
    // interception would divert LAN TCP into nothing, so the client must not start.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
    spawn_runtime("stream-client", move || async move {
        let opened = queue.map(|q| Held::bind(q, max)).transpose().and_then(|h| {
            Ok((
                h,
                listeners(port).context("opening the transparent listener")?,
            ))
        });
        let _ = ready_tx.send(opened.as_ref().map(|_| ()).map_err(|e| format!("{e:#}")));
        let (held, listeners) = opened?;
        let ctx = Rc::new(Ctx {
            links,
            key,
            server_key,
            stats: st,
            last_ts: AtomicU64::new(0),
            congestion_control: cc,
            pm: RefCell::new(pm),
            fallback_logged: Default::default(),
            states,
            remove_addr,
            held,
        });
        tokio::task::spawn_local(super::held::queue_loop(ctx.clone()));
        accept_loop(ctx, listeners, max).await
    })?;
    match ready_rx.recv_timeout(std::time::Duration::from_secs(10)) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => bail!("stream mode: {e}"),
        Err(_) => bail!("stream mode: its thread did not start"),
    }
    tracing::info!(lan = ?cfg.lan, port, "stream mode: LAN TCP to the routes is carried over MPTCP");
    Ok(Some(running))
}

async fn accept_loop(
    ctx: Rc<Ctx>,
    listeners: Vec<tokio::net::TcpListener>,
    max: usize,
) -> Result<()> {
    let slots = Arc::new(Semaphore::new(max));
    // The peer address as accept(2) gave it: getpeername fails on a connection the
    // application reset before we accepted it, whose held stream must still be found.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(TcpStream, SocketAddr)>(64);
    for l in listeners {
        let tx = tx.clone();
        tokio::task::spawn_local(async move {
            while let Ok(accepted) = l.accept().await {
                if tx.send(accepted).await.is_err() {
                    break;
                }
            }
        });
    }
    while let Some((lan, client)) = rx.recv().await {
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            ctx.stats.over_limit.fetch_add(1, Relaxed);
            reset(lan);
            continue;
        };
        let ctx = ctx.clone();
        tokio::task::spawn_local(async move {
            serve(&ctx, lan, client).await;
            drop(permit);
        });
    }
    Ok(())
}

/// Carries one LAN connection to its end: with its stream opened while its SYN was held,
/// or opened now.
async fn serve(ctx: &Ctx, lan: TcpStream, client: SocketAddr) {
    let Ok(target) = lan.local_addr() else { return };
    let _ = lan.set_nodelay(true);
    let flow = Flow {
        client,
        dst: target,
    };
    let claimed = ctx.held.as_ref().and_then(|h| h.claim(flow));
    let opened = match claimed {
        Some(o) => Ok(o),
        None => open(ctx, target).await,
    };
    match opened {
        Ok((ConnectStatus::Connected, enc, sealer, opener)) => {
            ctx.stats.connected.fetch_add(1, Relaxed);
            ctx.stats.active.fetch_add(1, Relaxed);
            let relay = Relay {
                stats: &ctx.stats,
                plain_is_lan: true,
            };
            // The subflows are steered while the relay runs, and no longer: the steering
            // task's duplicate of the socket closes with it.
            let steering = steer_target(&enc);
            let run = relay.run(lan, enc, sealer, opener);
            let outcome = match steering {
                Some((token, fd)) => {
                    tokio::select! {
                        o = run => o,
                        () = super::steer::run(ctx, token, fd, ctx.states.clone()) => unreachable!(),
                    }
                }
                None => run.await,
            };
            ctx.stats.ended(outcome);
        }
        Ok((status, ..)) => {
            tracing::debug!(%target, ?status, "stream: destination did not connect");
            ctx.stats.refused.fetch_add(1, Relaxed);
            reset(lan);
        }
        Err(e) => {
            tracing::warn!(%target, "stream: {e:#}");
            ctx.stats.failed.fetch_add(1, Relaxed);
            reset(lan);
        }
    }
}

/// The token and a duplicate fd of an MPTCP connection to steer (none after a fallback to
/// plain TCP).
fn steer_target(enc: &TcpStream) -> Option<(u32, std::os::fd::OwnedFd)> {
    let info = mptcp_info(enc.as_fd()).ok().filter(|i| !i.fallback)?;
    Some((info.token, enc.as_fd().try_clone_to_owned().ok()?))
}

/// A stream's outcome, its MPTCP connection and record keys.
pub type Opened = (
    ConnectStatus,
    TcpStream,
    multihome_proto::stream::RecordSealer,
    multihome_proto::stream::RecordOpener,
);

/// The MPTCP connection and its handshake; subflows once the server answered.
pub async fn open(ctx: &Ctx, target: SocketAddr) -> Result<Opened> {
    let usable = ordered(ctx, usable_links(&ctx.links));
    anyhow::ensure!(!usable.is_empty(), "no link is usable (up with an address)");
    let (won, mut enc) = race_connect(&usable, &ctx.congestion_control).await?;
    let _ = enc.set_nodelay(true);
    let ts = handshake_timestamp(&ctx.last_ts);
    let mut m1 = [0u8; HANDSHAKE_MAX];
    let seed = multihome_runtime::os_seed()?;
    let (init, n) = StreamInitiator::start(&ctx.key, &ctx.server_key, seed, ts, target, &mut m1)?;
    write_frame(&mut enc, &m1[..n]).await?;
    let mut m2 = [0u8; HANDSHAKE_MAX];
    let len = timeout(HANDSHAKE_TIMEOUT, read_frame(&mut enc, &mut m2))
        .await
        .context("no answer from the server")?
        .context("reading the server's answer")?;
    let (status, sealer, opener) = init.finish(&m2[..len])?;
    if status == ConnectStatus::Connected {
        let others: Vec<&Usable<'_>> = (0..usable.len())
            .filter(|&i| i != won)
            .map(|i| &usable[i])
            .collect();
        add_subflows(ctx, &enc, &others);
    }
    Ok((status, enc, sealer, opener))
}

/// The first subflow, raced over the usable links as Happy Eyeballs does (and the racing
/// gateway, after MultiNAT): link i's attempt starts i × [`CONNECT_STAGGER`] after the first
/// (config order), the first to connect wins and the others are dropped. A link that is up
/// but delivers nothing (a cellular outage) thus costs one stagger, not a connect timeout.
/// Returns the winner's index in `usable`.
async fn race_connect(usable: &[Usable<'_>], cc: &str) -> Result<(usize, TcpStream)> {
    let mut attempts = tokio::task::JoinSet::new();
    for (i, u) in usable.iter().enumerate() {
        let (name, iface, local, dst) = (
            u.link.name.clone(),
            u.link.interface.clone(),
            u.local,
            u.link.server,
        );
        let cc = cc.to_string();
        attempts.spawn_local(async move {
            tokio::time::sleep(CONNECT_STAGGER * i as u32).await;
            (i, connect(&name, &iface, local, dst, &cc).await)
        });
    }
    let mut last = None;
    while let Some(done) = attempts.join_next().await {
        match done {
            Ok((i, Ok(s))) => return Ok((i, s)),
            Ok((_, Err(e))) => last = Some(e),
            Err(e) => last = Some(anyhow::anyhow!("connect attempt: {e}")),
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("no link is usable")))
}

/// One attempt at the first subflow: an MPTCP socket bound to the link's interface and
/// address.
async fn connect(
    name: &str,
    iface: &str,
    local: IpAddr,
    dst: SocketAddr,
    cc: &str,
) -> Result<TcpStream> {
    let sock = Socket::new(
        Domain::for_address(dst),
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::MPTCP),
    )
    .context("opening an MPTCP socket (is net.mptcp.enabled = 1?)")?;
    sock.bind_device(Some(iface.as_bytes()))?;
    sock.bind(&SocketAddr::new(local, 0).into())?;
    let _ = sock.set_keepalive(true);
    super::set_congestion_control(&sock, cc);
    let tcp = TcpSocket::from_std_stream(sock.into());
    timeout(CONNECT_TIMEOUT, tcp.connect(dst))
        .await
        .with_context(|| format!("connecting to {dst} over link {name}: timed out"))?
        .with_context(|| format!("connecting to {dst} over link {name}"))
}

/// One subflow per other usable link (local address id = link index + 1).
fn add_subflows(ctx: &Ctx, enc: &TcpStream, others: &[&Usable<'_>]) {
    let info = match mptcp_info(enc.as_fd()) {
        Ok(i) if !i.fallback => i,
        Ok(_) => {
            if !ctx.fallback_logged.replace(true) {
                tracing::warn!(
                    "stream: the server answered in plain TCP (no MPTCP there): one link only"
                );
            }
            return;
        }
        Err(e) => {
            tracing::warn!("stream: reading MPTCP_INFO: {e}");
            return;
        }
    };
    for l in others {
        create_subflow(ctx, info.token, l);
    }
}

/// Adds a subflow over `l` to connection `token` (local address id = link index + 1);
/// whether the kernel took it.
pub(super) fn create_subflow(ctx: &Ctx, token: u32, l: &Usable<'_>) -> bool {
    let id = address_id(l.index, false);
    let local = SocketAddr::new(l.local, 0);
    let res =
        ctx.pm
            .borrow_mut()
            .subflow_create_on(token, id, local, Some(l.ifindex), l.link.server);
    match res {
        Ok(()) => {
            ctx.stats.subflows.fetch_add(1, Relaxed);
            true
        }
        Err(e) => {
            tracing::warn!(link = %l.link.name, "stream: adding a subflow: {e}");
            false
        }
    }
}

/// The usable links in the order the first subflow tries them: links the tunnel holds
/// Down last, config order otherwise.
fn ordered<'a>(ctx: &Ctx, mut usable: Vec<Usable<'a>>) -> Vec<Usable<'a>> {
    let states = ctx.states.borrow();
    usable.sort_by_key(|u| tried_last(&states, u.index));
    usable
}

/// Links whose interface is up with an address of the server's family (not link-local).
pub(super) fn usable_links(links: &[Link]) -> Vec<Usable<'_>> {
    links
        .iter()
        .enumerate()
        .filter_map(|(index, link)| {
            if !link_is_up(&link.interface).unwrap_or(false) {
                return None;
            }
            let ifindex = link_index(&link.interface).ok()?;
            let local = interface_addresses(&link.interface)
                .ok()?
                .into_iter()
                .map(|n| n.addr())
                .find(|a| a.is_ipv4() == link.server.is_ipv4() && !is_link_local(a))?;
            Some(Usable {
                link,
                index,
                ifindex,
                local,
            })
        })
        .collect()
}

fn is_link_local(a: &IpAddr) -> bool {
    match a {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    }
}
