//! One race carried out over sockets, and the relay of its winner.
//!
//! [`drive`] turns the core's `Race` actions into per-uplink connect tasks (each a task of
//! its own whose result comes back over a channel, so a loser can be aborted at once) and
//! feeds their results and the race's timeouts back; [`relay`] splices the client's
//! connection to the winner's. Both are used by the queue side (`held`) and by the accept
//! loop (`event_loop`); this module depends only on [`super::state`] and the socket
//! helpers ([`super::attempt`], [`super::splice`]), never on its users.
//!
//! Invariant: every socket of an attempt that is not returned as the winner is reset
//! before `drive` returns, including one that completed while the decision was being made.

use super::attempt;
use super::splice;
use super::state::Shared;
use crate::core::{Action, AttemptState, Race, UplinkId, MAX_UPLINKS};
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

type AttemptResult = (UplinkId, io::Result<TcpStream>);

/// Relays the client's connection over the chosen uplink's until both ends are done.
pub async fn relay(
    sh: &Shared,
    client: TcpStream,
    uplink: UplinkId,
    origin: TcpStream,
    src: SocketAddr,
    dst: SocketAddr,
) {
    tracing::debug!(
        "{src} -> {dst}: using uplink {}",
        sh.settings.uplinks[uplink.index()].name
    );
    sh.relaying.set(sh.relaying.get() + 1);
    let (r, res) = splice::relay(client, origin).await;
    sh.relaying.set(sh.relaying.get() - 1);
    let (up, down) = sh.relayed.get();
    sh.relayed.set((up + r.up, down + r.down));
    if let Err(e) = res {
        tracing::debug!("{src} -> {dst}: relay ended: {e}");
    }
}

/// Drives one race to its decision; returns the chosen uplink's connection.
pub async fn drive(
    sh: &Rc<Shared>,
    race: &mut Race,
    dst: SocketAddr,
) -> Option<(UplinkId, TcpStream)> {
    let (tx, mut rx) = mpsc::unbounded_channel::<AttemptResult>();
    let mut tasks: [Option<JoinHandle<()>>; MAX_UPLINKS] = Default::default();
    let mut connected: [Option<TcpStream>; MAX_UPLINKS] = Default::default();
    let mut winner = None;
    loop {
        while let Some(action) = race.poll_action() {
            match action {
                Action::Start(u) => {
                    let (sh2, tx) = (sh.clone(), tx.clone());
                    tasks[u.index()] = Some(tokio::task::spawn_local(async move {
                        let up = &sh2.settings.uplinks[u.index()];
                        let res = attempt::connect(&up.interface, sh2.addrs[u.index()], dst).await;
                        let _ = tx.send((u, res));
                    }));
                }
                Action::Close(u) => {
                    if let Some(t) = tasks[u.index()].take() {
                        t.abort(); // drops the connecting socket
                    }
                    if let Some(s) = connected[u.index()].take() {
                        attempt::reset(s);
                    }
                }
                Action::Use(u) => {
                    tasks[u.index()] = None;
                    winner = connected[u.index()].take().map(|s| (u, s));
                }
                Action::RefuseClient => {}
            }
        }
        if race.outcome().is_some() {
            break;
        }
        let deadline = sh.clock.deadline(race.poll_timeout());
        tokio::select! {
            Some((u, res)) = rx.recv() => {
                let now = sh.clock.now();
                let pending = matches!(race.state(u), Some(AttemptState::Pending(_)));
                match res {
                    Ok(s) if pending => {
                        connected[u.index()] = Some(s);
                        race.handle_connected(now, u);
                    }
                    Ok(s) => attempt::reset(s),
                    Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => race.handle_refused(now, u),
                    Err(e) => {
                        tracing::debug!("attempt over uplink {} to {dst}: {e}", u.0);
                        race.handle_failed(now, u);
                    }
                }
            }
            _ = tokio::time::sleep_until(deadline) => race.handle_timeout(sh.clock.now()),
        }
    }
    for t in tasks.iter_mut().filter_map(Option::take) {
        t.abort();
    }
    // A loser whose handshake completed while the decision was being made: reset it.
    rx.close();
    while let Ok((_, res)) = rx.try_recv() {
        if let Ok(s) = res {
            attempt::reset(s);
        }
    }
    winner
}
