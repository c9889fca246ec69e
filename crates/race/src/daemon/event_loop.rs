//! The racing gateway's event loop: it owns the state ([`Shared`]), starts the tasks (the
//! accept loop, the queue reader of [`super::held`], the probe loop), answers the
//! control socket and the dashboard and samples the status for it once a second, until
//! SIGINT/SIGTERM removes the interception.
//!
//! One current-thread tokio runtime; the shared state (the core's `Gateway`, the SYN
//! table, counters) sits in `RefCell`s borrowed only between awaits, so it needs no locks.
//! With `hold_syns`, a connection starts from its SYN in the netfilter queue ([`super::held`]):
//! the race runs while the client waits for a SYN-ACK, and the client's connection, once
//! accepted, is paired with the winner by its 4-tuple. A connection accepted without a held
//! SYN (`hold_syns = false`, or the kernel queue overflowed and let the SYN pass, fail-open)
//! is raced after the accept, as [`connection`] does; its refusal can then only be a reset.
//! Each race is carried out by [`super::drive`], then relayed with splice. The gateway's
//! `max_connections` bound covers the whole life of a connection (race, wait for the
//! client's handshake, relay): past it new connections are refused at once and a
//! rate-limited log line says so.
//!
//! This is the top of the daemon's dependency order: it uses [`super::held`],
//! [`super::status`], [`super::drive`] and [`super::state`]; none of them uses it.

use super::attempt;
use super::config::{Mode, RaceSettings};
use super::drive::{drive, relay};
use super::held;
use super::nfqueue::NfQueue;
use super::setup::{self, Interception};
use super::state::{Shared, Slot};
use crate::core::{Flow, Gateway, RaceError};
use anyhow::{Context, Result};
use multihome_runtime::control::{self, ControlSocket};
use multihome_runtime::dashboard::Live;
use multihome_runtime::{block_on, os_seed, shutdown_signal, Clock};
use std::rc::Rc;
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Bytes of each queued packet copied to the daemon: IPv6 plus a few extension headers
/// plus the TCP header's first 14 bytes fit.
const COPY_RANGE: u16 = 256;

/// Runs the gateway until SIGINT/SIGTERM.
pub fn run(settings: RaceSettings) -> Result<()> {
    raise_fd_limit();
    block_on(async move {
        let addrs = setup::uplink_addresses(&settings.uplinks)?;
        let nat_mode = settings.mode == Mode::Nat;
        // NAT mode diverts nothing to a listener.
        let listeners = if nat_mode {
            Vec::new()
        } else {
            attempt::listeners(settings.listen_port).with_context(|| {
                format!(
                    "opening the transparent listener on port {}",
                    settings.listen_port
                )
            })?
        };
        let nat = if nat_mode {
            Some(super::nat::open(&settings, &addrs).context("opening NAT mode's raw sockets")?)
        } else {
            None
        };
        // Bound before the rules that feed it exist, so no SYN is queued to nobody.
        let queue = open_queue(&settings)?;
        if (settings.udp_flows || nat_mode) && !ipv4_forwarding() {
            tracing::warn!(
                "net.ipv4.ip_forward is 0: UDP flows from the LAN will not be forwarded; \
                 enable it (sysctl -w net.ipv4.ip_forward=1) or set udp_flows = false"
            );
        }
        let interception = Interception::install(&settings, &addrs)?;
        let control = ControlSocket::bind(&settings.control_socket)?;
        let seed = match settings.seed {
            Some(s) => s,
            None => {
                let s = os_seed()?;
                u64::from_le_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]])
            }
        };
        let clock = Clock::new();
        let gw = Gateway::new(settings.gateway.clone(), seed, clock.now())?;
        let sh = Rc::new(Shared::new(gw, clock, settings, addrs, queue, nat));
        tracing::info!(
            "racing TCP from {:?} over {} uplinks with predictor {} ({:?} mode, listener port {}, \
             SYNs held: {}, UDP flows routed: {}, queue {})",
            sh.settings.lan_interfaces,
            sh.settings.uplinks.len(),
            sh.settings.gateway.predictor.name(),
            sh.settings.mode,
            sh.settings.listen_port,
            sh.settings.hold_syns,
            sh.settings.udp_flows,
            sh.settings.queue_num
        );
        for l in listeners {
            tokio::task::spawn_local(accept_loop(sh.clone(), l));
        }
        if sh.queue.is_some() {
            tokio::task::spawn_local(held::queue_loop(sh.clone()));
        }
        if sh.settings.probe_target.is_some() {
            tokio::task::spawn_local(probe_loop(sh.clone()));
        }
        let live = Live::new(
            "race",
            sh.settings.dashboard,
            super::status::snapshot,
            Some(super::metrics::render),
        )
        .await?;
        let mut tick = Live::tick();
        let stop = shutdown_signal();
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => break,
                conn = control.accept() => {
                    if let Ok(stream) = conn {
                        let doc = live.document(super::status::document(&sh));
                        control::reply(stream, doc.to_string());
                    }
                }
                conn = live.accept() => {
                    if let Ok(stream) = conn {
                        live.serve(stream, live.document(super::status::document(&sh)));
                    }
                }
                _ = tick.tick() => live.sample(&super::status::document(&sh)),
            }
        }
        tracing::info!("stopping: removing interception");
        drop(interception);
        Ok(())
    })
}

/// Opens the netfilter queue when SYNs are held or UDP flows routed, registered with the
/// runtime.
fn open_queue(settings: &RaceSettings) -> Result<Option<AsyncFd<NfQueue>>> {
    if !(settings.hold_syns || settings.udp_flows) {
        return Ok(None);
    }
    let cap = settings.gateway.max_connections;
    // Held SYNs stay in the kernel's queue: room for all of them plus a burst.
    let max_len = u32::try_from(cap).unwrap_or(u32::MAX).saturating_add(1024);
    let q = NfQueue::bind(settings.queue_num, COPY_RANGE, max_len)
        .with_context(|| format!("opening netfilter queue {}", settings.queue_num))?;
    // SAFETY: NfQueue owns its netlink socket for its whole life and `as_raw_fd` always
    // returns that fd; it is closed only by NfQueue's drop, after the AsyncFd has
    // deregistered it.
    let afd = unsafe { AsyncFd::register_with_interest(q, Interest::READABLE) }
        .map_err(|e| anyhow::anyhow!("registering the netfilter queue: {}", e.into_parts().1))?;
    Ok(Some(afd))
}

fn ipv4_forwarding() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").is_ok_and(|v| v.trim() == "1")
}

/// Lets hundreds of races (N+1 sockets and 4 pipe ends each) have their descriptors.
fn raise_fd_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
        }
    }
}

async fn accept_loop(sh: Rc<Shared>, listener: tokio::net::TcpListener) {
    loop {
        match listener.accept().await {
            Ok((client, peer)) => {
                let flow = client
                    .local_addr()
                    .ok()
                    .map(|dst| Flow { client: peer, dst });
                let waiter = flow.and_then(|f| sh.waiting.borrow_mut().remove(&f));
                match waiter {
                    // Its race is won already: hand it to the task holding the winner (a
                    // task that gave up waiting has dropped its receiver: reset the client).
                    Some(tx) => {
                        if let Err(client) = tx.send(client) {
                            attempt::reset(client);
                        }
                    }
                    None => {
                        sh.unheld.set(sh.unheld.get() + 1);
                        tokio::task::spawn_local(connection(sh.clone(), client));
                    }
                }
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// A connection accepted without a held SYN: race now; refusing it can only be a reset.
async fn connection(sh: Rc<Shared>, client: TcpStream) {
    let (Ok(dst), Ok(src)) = (client.local_addr(), client.peer_addr()) else {
        return;
    };
    let dscp = attempt::client_dscp(&client);
    let begun = sh.gw.borrow_mut().begin(sh.clock.now(), dst.ip(), dscp);
    let mut race = match begun {
        Ok(r) => r,
        Err(RaceError::Busy { limit }) => {
            sh.log_busy(limit);
            attempt::reset(client);
            return;
        }
        Err(e) => {
            tracing::warn!("{src} -> {dst}: {e}");
            attempt::reset(client);
            return;
        }
    };
    let _slot = Slot(sh.clone());
    let winner = drive(&sh, &mut race, dst).await;
    sh.gw.borrow_mut().end_race(sh.clock.now(), dst.ip(), &race);
    let Some((uplink, origin)) = winner else {
        tracing::debug!(
            "{src} -> {dst}: every uplink failed ({:?}); resetting the client",
            race.outcome()
        );
        attempt::reset(client);
        return;
    };
    relay(&sh, client, uplink, origin, src, dst).await;
}

async fn probe_loop(sh: Rc<Shared>) {
    let Some(target) = sh.settings.probe_target else {
        return;
    };
    let interval = sh
        .settings
        .gateway
        .probe_interval
        .unwrap_or(Duration::from_secs(1));
    // A probe slower than the period (or 3 s) counts as lost: the next one is due anyway.
    let timeout = interval.min(Duration::from_secs(3));
    loop {
        let next = sh.gw.borrow().probe_timeout();
        tokio::time::sleep_until(sh.clock.deadline(next)).await;
        loop {
            let due = sh.gw.borrow_mut().poll_probe(sh.clock.now());
            let Some(u) = due else { break };
            let sh2 = sh.clone();
            tokio::task::spawn_local(async move {
                let up = &sh2.settings.uplinks[u.index()];
                let rtt =
                    attempt::probe(&up.interface, sh2.addrs[u.index()], target, timeout).await;
                sh2.gw.borrow_mut().handle_probe(u, rtt);
            });
        }
    }
}
