//! The far end of the load: a UDP socket in the server's network namespace (opened there by
//! a thread that entered it, then served by the load generator's own runtime), at the
//! address the sessions' inner packets go to.
//!
//! It counts every `Up` packet by session (the loss of each session is its sent minus
//! what arrived here, read after a drain period), echoes it back as `Echo` when asked (the
//! downstream direction through the server, counted by the session), and during a bulk
//! phase sends `Bulk` packets at a fixed rate to the first sessions' inner addresses (a
//! download through the server, counted by the session).

use super::packet::{self, Kind, Tag};
use super::session::inner_addr;
use super::Shared;
use multihome_io::udp::{LinkSocket, RecvBuf};
use std::net::{SocketAddr, SocketAddrV4};
use std::rc::Rc;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// Per-session counts at the sink.
#[derive(Debug, Clone, Copy, Default)]
pub struct SinkCount {
    /// `Up` packets received.
    pub received: u64,
    /// Received with a sequence number not above the highest seen (reordered or repeated).
    pub late: u64,
    /// Highest sequence number seen + 1.
    pub next_seq: u64,
}

/// Opens the sink's socket at `at` inside namespace `netns` (or here, if none).
pub fn open(netns: Option<&str>, at: SocketAddrV4) -> anyhow::Result<AsyncFd<LinkSocket>> {
    let bind = move || LinkSocket::bind(None, SocketAddr::V4(at));
    let sock = match netns {
        Some(ns) => multihome_io::netns::run_in(ns, bind)??,
        None => bind()?,
    };
    let _ = sock.set_buffer_sizes(8 << 20);
    crate::daemon::register(sock)
}

/// Serves the sink until the runtime ends.
pub async fn run(sh: Rc<Shared>, sock: AsyncFd<LinkSocket>) {
    let mut bufs: Vec<RecvBuf> = (0..32).map(|_| RecvBuf::new(2048)).collect();
    let mut bulk_buf = Vec::new();
    let mut next_bulk = None;
    let mut bulk_seq = 0u64;
    loop {
        let sleep = tokio::time::sleep_until(sh.clock.deadline(next_bulk));
        tokio::select! {
            _ = sock.readable() => drain(&sh, &sock, &mut bufs),
            _ = sleep => {},
            _ = sh.bulk_changed.notified() => {},
        }
        if !sh.bulk.get() {
            next_bulk = None;
            continue;
        }
        let now = sh.clock.now();
        let mut next = next_bulk.unwrap_or(now);
        let mut rounds = 0;
        while next <= now && rounds < 64 {
            send_bulk_round(&sh, &sock, &mut bulk_buf, bulk_seq);
            bulk_seq += 1;
            next = next + sh.plan.bulk_gap;
            rounds += 1;
        }
        if next <= now {
            next = now; // a stalled sender does not burst without bound
        }
        next_bulk = Some(next);
    }
}

/// One bulk packet to each bulk session.
fn send_bulk_round(sh: &Shared, sock: &AsyncFd<LinkSocket>, buf: &mut Vec<u8>, seq: u64) {
    let size = sh.plan.bulk_bytes - packet::HEADERS;
    buf.resize(size, 0);
    for i in 0..sh.plan.bulk_sessions.min(sh.plan.sessions) {
        let tag = Tag {
            kind: Kind::Bulk,
            session: i as u32,
            seq,
        };
        packet::write_tag(buf, tag);
        let to = SocketAddr::V4(inner_addr(sh.plan.inner_base, i));
        if sock.get_ref().send_to(buf, to).is_err() {
            sh.sink_send_errors.set(sh.sink_send_errors.get() + 1);
        }
    }
}

/// Counts (and echoes) everything waiting.
fn drain(sh: &Shared, sock: &AsyncFd<LinkSocket>, bufs: &mut [RecvBuf]) {
    for _ in 0..64 {
        let Ok(n) = sock.try_io(Interest::READABLE, |s| s.recv_batch(bufs)) else {
            return;
        };
        let mut counts = sh.sink.borrow_mut();
        for rb in &mut bufs[..n] {
            let Some(tag) = packet::read_tag(rb.packet()) else {
                continue;
            };
            let Some(c) = counts.get_mut(tag.session as usize) else {
                continue;
            };
            if tag.kind != Kind::Up {
                continue;
            }
            c.received += 1;
            if tag.seq < c.next_seq {
                c.late += 1;
            } else {
                c.next_seq = tag.seq + 1;
            }
            if sh.plan.echo {
                let from = rb.source();
                let p = rb.packet_mut();
                packet::write_tag(
                    p,
                    Tag {
                        kind: Kind::Echo,
                        ..tag
                    },
                );
                if sock.get_ref().send_to(p, from).is_err() {
                    sh.sink_send_errors.set(sh.sink_send_errors.get() + 1);
                }
            }
        }
    }
}
