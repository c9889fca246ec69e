//! Stream mode's subflows steered by the tunnel's path model: the client core publishes
//! each link's state (Up / Suspect / Down, from the tunnel's own probes), and every
//! stream connection carries out what `multihome_proto::stream::subflows::plan` says —
//! a link that leaves Up has its subflow closed (the kernel resends its data in flight
//! over the others at once), a link back Up gets a new one.
//!
//! Before a subflow is closed its address is removed from the connection
//! (`MPTCP_PM_CMD_REMOVE`, `remove_addr`): the kernel sends REMOVE_ADDR on a live
//! subflow, and the server closes its end of the dead one and resends what it had in
//! flight there (a download); our own close cannot reach the server over the dead link.
//! The order matters: the kernel forgets an added subflow's address id when the subflow
//! is destroyed, so the removal comes first.
//!
//! Kernel MPTCP alone learns that a link died from its retransmission timeouts, backed
//! off, and keeps scheduling on it meanwhile; the tunnel knows within a few round trips.
//! While stream connections are open the core keeps probing every link as while data
//! flows (`Client::keep_active`), or an idle tunnel would look at its links only every
//! keepalive.
//!
//! Invariants: each connection is steered by a task that lives exactly as long as its
//! relay (it holds a duplicate of the MPTCP socket's fd, closed with the task); a step the
//! kernel refuses is logged at debug level and tried again at the next change or tick.
//! The subflows are read from the socket (`MPTCP_SUBFLOW_ADDRS`) at each pass, so one the
//! kernel closed by itself is seen and replaced too.

use super::client::{usable_links, Ctx};
use multihome_io::mptcp::subflow_addrs;
use multihome_proto::path::PathState;
use multihome_proto::stream::subflows::{address_id, plan, Step};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;
use tokio::sync::watch;

/// The tunnel's state of each link (index = link = path id), as the client core last
/// reported it; empty until the core reports.
pub type LinkStates = watch::Receiver<Vec<PathState>>;

/// A subflow's (local, remote) addresses.
type Pair = (std::net::SocketAddr, std::net::SocketAddr);

/// How often a connection's subflows are checked without a state change (a subflow the
/// kernel closed, a create refused while an interface was coming up).
const RECHECK: Duration = Duration::from_secs(5);

/// A channel for the client core to publish link states on, and its first receiver.
pub fn link_states() -> (watch::Sender<Vec<PathState>>, LinkStates) {
    watch::channel(Vec::new())
}

/// Records link `id`'s new state in `tx` (from the core's path events).
pub fn publish(tx: &watch::Sender<Vec<PathState>>, id: usize, state: PathState) {
    tx.send_if_modified(|v| {
        if v.len() <= id {
            v.resize(id + 1, PathState::Down);
        }
        let changed = v[id] != state;
        v[id] = state;
        changed
    });
}

/// Steers the subflows of the connection `token` (its MPTCP socket duplicated in `fd`)
/// until dropped.
pub async fn run(ctx: &Ctx, token: u32, fd: OwnedFd, mut states: LinkStates) {
    let mut steps = Vec::new();
    let mut closed = Vec::new();
    loop {
        let now: Vec<PathState> = states.borrow_and_update().clone();
        apply(ctx, token, &fd, &now, &mut closed, &mut steps);
        tokio::select! {
            changed = states.changed() => {
                if changed.is_err() {
                    // The core is gone (shutdown): nothing more to steer by.
                    std::future::pending::<()>().await;
                }
            }
            () = tokio::time::sleep(RECHECK) => {}
        }
    }
}

/// One pass: the connection's subflows now, the plan, the steps carried out.
/// `closed`: subflows closed here, which the kernel may still list while their close
/// cannot complete (the link is dead): they are not counted as the link's subflow.
fn apply(
    ctx: &Ctx,
    token: u32,
    fd: &OwnedFd,
    states: &[PathState],
    closed: &mut Vec<Pair>,
    steps: &mut Vec<Step>,
) {
    if states.is_empty() {
        return;
    }
    let Ok(mut addrs) = subflow_addrs(fd.as_fd()) else {
        return;
    };
    closed.retain(|c| addrs.contains(c));
    addrs.retain(|a| !closed.contains(a));
    let usable = usable_links(&ctx.links);
    // A subflow's link is the usable link whose address it leaves from.
    let link_of = |ip: IpAddr| usable.iter().find(|u| u.local == ip).map(|u| u.index);
    let links: Vec<usize> = addrs.iter().filter_map(|(l, _)| link_of(l.ip())).collect();
    let on = |link: usize| usable.iter().find(|u| u.index == link);
    plan(states, &links, |l| on(l).is_some(), steps);
    for step in steps.iter() {
        match *step {
            Step::Close { link } => {
                let Some(u) = on(link) else { continue };
                let Some((l, r)) = addrs.iter().find(|(l, _)| l.ip() == u.local) else {
                    continue;
                };
                if ctx.remove_addr {
                    remove_addr(ctx, token, fd, link, (*l, *r));
                }
                match ctx.pm.borrow_mut().subflow_destroy(token, *l, *r) {
                    Ok(()) => {
                        closed.push((*l, *r));
                        ctx.stats.subflows_closed.fetch_add(1, Relaxed);
                    }
                    Err(e) => tracing::debug!(link = %u.link.name, "stream: {e}"),
                }
            }
            Step::Create { link } => {
                if let Some(u) = on(link) {
                    if super::client::create_subflow(ctx, token, u) {
                        ctx.stats.subflows_reopened.fetch_add(1, Relaxed);
                    }
                }
            }
        }
    }
}

/// Tells the server that the address of the subflow `pair` on `link` is gone (REMOVE_ADDR
/// with its address id: 0 if it is the initial subflow, whose ends are the MPTCP
/// socket's own).
fn remove_addr(ctx: &Ctx, token: u32, fd: &OwnedFd, link: usize, pair: Pair) {
    let sock = socket2::SockRef::from(fd);
    let own = |a: std::io::Result<socket2::SockAddr>| a.ok().and_then(|a| a.as_socket());
    let initial: Option<Pair> = own(sock.local_addr()).zip(own(sock.peer_addr()));
    let id = address_id(link, initial.is_some_and(|i| same(i, pair)));
    match ctx.pm.borrow_mut().remove_addr(token, id) {
        Ok(()) => {
            ctx.stats.addrs_removed.fetch_add(1, Relaxed);
        }
        Err(e) => tracing::debug!(link, id, "stream: {e}"),
    }
}

/// The same subflow ends, a v4-mapped IPv6 address equal to its IPv4 one.
fn same(a: Pair, b: Pair) -> bool {
    let norm = |s: SocketAddr| SocketAddr::new(s.ip().to_canonical(), s.port());
    norm(a.0) == norm(b.0) && norm(a.1) == norm(b.1)
}
