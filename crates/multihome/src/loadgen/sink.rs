//! The far end of the load: a UDP socket in the server's network namespace (opened there by
//! a thread that entered it), at the address the sessions' inner packets go to, served by
//! a thread and runtime of its own: on the sessions' thread it could read only between
//! their sends, and at a thousand sessions x 256 kbit/s its buffer overflowed while the
//! server's sockets stayed nearly empty, so the loss measured was the harness's own.
//!
//! It counts every `Up` packet by session (the loss of each session is its sent minus
//! what arrived here, read after a drain period), echoes it back as `Echo` when asked (the
//! downstream direction through the server, counted by the session), and during a bulk
//! phase sends `Bulk` packets at a fixed rate to the first sessions' inner addresses (a
//! download through the server, counted by the session).

use super::packet::{self, Kind, Tag};
use super::session::inner_addr;
use multihome_io::udp::{LinkSocket, RecvBuf};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// What the sink's thread and the sessions' thread share.
pub struct Sink {
    /// Per-session counts, read by the phases.
    pub counts: Mutex<Vec<SinkCount>>,
    /// A bulk phase is on.
    pub bulk: AtomicBool,
    /// Wakes the sink when `bulk` changes.
    pub bulk_changed: tokio::sync::Notify,
    /// Sends the sink's kernel refused.
    pub send_errors: AtomicU64,
    /// Echo every packet back.
    pub echo: bool,
    /// Sessions, and the first ones that download in a bulk phase.
    pub sessions: usize,
    bulk_sessions: usize,
    bulk_bytes: usize,
    bulk_gap: Duration,
    inner_base: Ipv4Addr,
}

impl Sink {
    /// The sink of `plan`'s sessions.
    pub fn new(plan: &super::Plan) -> Self {
        Sink {
            counts: Mutex::new(vec![SinkCount::default(); plan.sessions]),
            bulk: AtomicBool::new(false),
            bulk_changed: tokio::sync::Notify::new(),
            send_errors: AtomicU64::new(0),
            echo: plan.echo,
            sessions: plan.sessions,
            bulk_sessions: plan.bulk_sessions,
            bulk_bytes: plan.bulk_bytes,
            bulk_gap: plan.bulk_gap,
            inner_base: plan.inner_base,
        }
    }

    /// Starts or stops the bulk download.
    pub fn set_bulk(&self, on: bool) {
        self.bulk.store(on, Ordering::Relaxed);
        self.bulk_changed.notify_one();
    }

    /// The per-session counts (a poisoned lock still holds counts).
    pub fn counts(&self) -> std::sync::MutexGuard<'_, Vec<SinkCount>> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn send_failed(&self) {
        self.send_errors.fetch_add(1, Ordering::Relaxed);
    }
}

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

/// Opens the sink's socket at `at` inside namespace `netns` (or here, if none) and serves
/// it on a thread of its own until the process ends.
pub fn start(netns: Option<&str>, at: SocketAddrV4, sink: Arc<Sink>) -> anyhow::Result<()> {
    let bind = move || LinkSocket::bind(None, SocketAddr::V4(at));
    let sock = match netns {
        Some(ns) => multihome_io::netns::run_in(ns, bind)??,
        None => bind()?,
    };
    let _ = sock.set_buffer_sizes(8 << 20);
    std::thread::Builder::new()
        .name("loadgen-sink".into())
        .spawn(move || {
            crate::daemon::block_on(async move {
                run(&sink, crate::daemon::register(sock)?).await;
                Ok(())
            })
        })?;
    Ok(())
}

/// Serves the sink.
async fn run(sh: &Sink, sock: AsyncFd<LinkSocket>) {
    let clock = crate::daemon::Clock::new();
    let mut bufs: Vec<RecvBuf> = (0..32).map(|_| RecvBuf::new(2048)).collect();
    let mut bulk_buf = Vec::new();
    let mut next_bulk = None;
    let mut bulk_seq = 0u64;
    loop {
        let sleep = tokio::time::sleep_until(clock.deadline(next_bulk));
        tokio::select! {
            _ = sock.readable() => drain(sh, &sock, &mut bufs),
            _ = sleep => {},
            _ = sh.bulk_changed.notified() => {},
        }
        if !sh.bulk.load(Ordering::Relaxed) {
            next_bulk = None;
            continue;
        }
        let now = clock.now();
        let mut next = next_bulk.unwrap_or(now);
        let mut rounds = 0;
        while next <= now && rounds < 64 {
            send_bulk_round(sh, &sock, &mut bulk_buf, bulk_seq);
            bulk_seq += 1;
            next = next + sh.bulk_gap;
            rounds += 1;
        }
        if next <= now {
            next = now; // a stalled sender does not burst without bound
        }
        next_bulk = Some(next);
    }
}

/// One bulk packet to each bulk session.
fn send_bulk_round(sh: &Sink, sock: &AsyncFd<LinkSocket>, buf: &mut Vec<u8>, seq: u64) {
    let size = sh.bulk_bytes - packet::HEADERS;
    buf.resize(size, 0);
    for i in 0..sh.bulk_sessions.min(sh.sessions) {
        let tag = Tag {
            kind: Kind::Bulk,
            session: i as u32,
            seq,
        };
        packet::write_tag(buf, tag);
        let to = SocketAddr::V4(inner_addr(sh.inner_base, i));
        if sock.get_ref().send_to(buf, to).is_err() {
            sh.send_failed();
        }
    }
}

/// Counts (and echoes) everything waiting.
fn drain(sh: &Sink, sock: &AsyncFd<LinkSocket>, bufs: &mut [RecvBuf]) {
    for _ in 0..64 {
        let Ok(n) = sock.try_io(Interest::READABLE, |s| s.recv_batch(bufs)) else {
            return;
        };
        let mut counts = sh.counts();
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
            if sh.echo {
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
                    sh.send_failed();
                }
            }
        }
    }
}
