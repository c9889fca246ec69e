//! One simulated subscriber: the real client endpoint (`multihome_proto::endpoint::Client`)
//! with its own static key and two real link sockets (`multihome_io::udp::LinkSocket`), each
//! bound to its own local address, driven by a lean loop of its own as a task of the load
//! generator's one-thread runtime.
//!
//! Why not the daemon's `Driver`: it allocates 64 datagram buffers of 64 KB per instance
//! (a daemon has one), which for thousands of sessions in one process would be the load
//! generator measuring itself. Here the buffers are shared by all sessions ([`Shared`]):
//! one task runs at a time and none holds a buffer across an `.await`. What a session does
//! with its sockets is what the daemon's loop does: drain a readable socket into
//! `handle_datagram`, run due timers, send everything `poll_transmit` builds from the
//! path's socket, take everything `poll_deliver` hands out.
//!
//! A session obeys commands from the controller (`super::plan`): leave (CLOSE, sockets
//! closed, a pause, then a fresh endpoint with the same key and new sockets: churn), roam
//! (link 0's socket replaced by one on a new port or address; the server follows) and stop.

use super::packet::{self, Kind, Tag};
use super::Shared;
use multihome_io::udp::LinkSocket;
use multihome_proto::crypto::StaticSecret;
use multihome_proto::endpoint::{Client, ClientConfig};
use multihome_proto::path::PathId;
use multihome_proto::session::SessionConfig;
use multihome_proto::Instant;
use std::cell::Cell;
use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::rc::Rc;
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::Notify;

/// Batches read from one socket per wake-up (as the daemon's `READ_BUDGET`, smaller: a
/// session's share of the load is small, and others wait).
const READ_BUDGET: usize = 8;
/// Packets a late session sends at once to catch up with its rate; beyond that the
/// schedule is reset (a stalled generator must not burst without bound).
const CATCH_UP: u32 = 64;

/// A command from the controller.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub enum Cmd {
    /// Nothing new.
    #[default]
    None,
    /// Close the session, wait this long, join again with the same key.
    Leave(Duration),
    /// Move link 0 to a new socket (new port; new address if the plan has roam addresses).
    Roam,
    /// Close the session and end the task.
    Stop,
}

/// The controller's handle on one session.
#[derive(Default)]
pub struct Control {
    cmd: Cell<Cmd>,
    notify: Notify,
}

impl Control {
    /// Gives the session `cmd` (it acts at its next wake-up, which this causes).
    pub fn send(&self, cmd: Cmd) {
        self.cmd.set(cmd);
        self.notify.notify_one();
    }
}

/// Per-session counters (kept across re-joins).
#[derive(Debug, Clone, Default)]
pub struct Counters {
    /// When the current join's session first came up (`None` while down).
    pub up_at: Option<Instant>,
    /// When the current join started.
    pub joined_at: Option<Instant>,
    /// Joins so far (1 + re-joins).
    pub joins: u32,
    /// Times the session came up.
    pub ups: u32,
    /// `Up` packets handed to the endpoint (also the next sequence number).
    pub sent: u64,
    /// Echoes delivered back.
    pub echoed: u64,
    /// Bulk packets and bytes delivered.
    pub bulk_packets: u64,
    /// Bulk bytes delivered (inner IP packet lengths).
    pub bulk_bytes: u64,
    /// Datagrams the kernel refused to send.
    pub send_errors: u64,
    /// Roams done.
    pub roams: u32,
    /// The current join's endpoint counters (cookie replies taken, late answers), for the
    /// report on a session that did not come back.
    pub client: multihome_proto::endpoint::EndpointCounters,
}

/// Why a join ended.
enum Exit {
    Leave(Duration),
    Stop,
}

/// One join: the endpoint and its two sockets.
struct Member {
    client: Client,
    socks: [AsyncFd<LinkSocket>; 2],
    next_send: Option<Instant>,
}

/// The task of session `i`: joins, runs, leaves and joins again as commanded, until
/// stopped.
pub async fn run(sh: Rc<Shared>, i: usize, key: StaticSecret, ctl: Rc<Control>) {
    loop {
        let mut m = match Member::join(&sh, i, key.clone()) {
            Ok(m) => m,
            Err(e) => {
                sh.log_error(i, &format!("join: {e:#}"));
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let exit = m.run(&sh, i, &ctl).await;
        m.client.close();
        m.flush(&sh, i, sh.clock.now());
        sh.counters.borrow_mut()[i].up_at = None;
        drop(m);
        match exit {
            Exit::Stop => return,
            Exit::Leave(pause) => tokio::time::sleep(pause).await,
        }
    }
}

/// Binds a link socket at `ip` (any port) and registers it with the runtime.
fn bind(ip: IpAddr) -> anyhow::Result<AsyncFd<LinkSocket>> {
    let s = LinkSocket::bind(None, SocketAddr::new(ip, 0))?;
    // Thousands of sockets: a modest buffer each (the daemon's 4 MB is for one busy link).
    let _ = s.set_buffer_sizes(256 << 10);
    crate::daemon::register(s)
}

impl Member {
    fn join(sh: &Shared, i: usize, key: StaticSecret) -> anyhow::Result<Member> {
        let p = &sh.plan;
        let socks = [bind(p.local(i, 0, false))?, bind(p.local(i, 1, false))?];
        let cfg = ClientConfig {
            local_key: key,
            server_key: p.server_key,
            session: SessionConfig {
                max_datagram: p.mtu + multihome_proto::wire::OVERHEAD_BYTES,
                detect: p.detect,
                ..SessionConfig::default()
            },
            classifier: multihome_proto::policy::Classifier::uniform(p.policy),
            epoch_us: sh.clock.epoch_us,
            ciphers: multihome_proto::crypto::CipherSet::hardware(),
        };
        let mut client = Client::with_rng_seed(cfg, crate::daemon::os_seed()?);
        let now = sh.clock.now();
        for (l, server) in p.servers.iter().enumerate() {
            client.add_link(now, PathId(l as u8), *server);
            client.set_link_available(now, PathId(l as u8), true);
        }
        let mut c = sh.counters.borrow_mut();
        c[i].joins += 1;
        c[i].joined_at = Some(now);
        Ok(Member {
            client,
            socks,
            next_send: None,
        })
    }

    async fn run(&mut self, sh: &Shared, i: usize, ctl: &Control) -> Exit {
        self.flush(sh, i, sh.clock.now());
        loop {
            let wake = [self.client.poll_timeout(), self.next_send]
                .into_iter()
                .flatten()
                .min();
            let sleep = tokio::time::sleep_until(sh.clock.deadline(wake));
            let mut ready = None;
            tokio::select! {
                _ = self.socks[0].readable() => ready = Some(0),
                _ = self.socks[1].readable() => ready = Some(1),
                _ = sleep => {}
                _ = ctl.notify.notified() => match ctl.cmd.take() {
                    Cmd::Leave(pause) => return Exit::Leave(pause),
                    Cmd::Stop => return Exit::Stop,
                    Cmd::Roam => self.roam(sh, i),
                    Cmd::None => {}
                },
            }
            if let Some(l) = ready {
                self.drain(sh, l);
            }
            let now = sh.clock.now();
            if self.client.poll_timeout().is_some_and(|t| t <= now) {
                self.client.handle_timeout(now);
            }
            self.send_due(sh, i, now);
            self.flush(sh, i, now);
        }
    }

    /// Replaces link 0's socket: what a NAT rebinding or an address change looks like to
    /// the server. The endpoint is not told, as a client behind a NAT is not.
    fn roam(&mut self, sh: &Shared, i: usize) {
        match bind(sh.plan.local(i, 0, true)) {
            Ok(s) => {
                self.socks[0] = s;
                sh.counters.borrow_mut()[i].roams += 1;
            }
            Err(e) => sh.log_error(i, &format!("roam: {e:#}")),
        }
    }

    /// Reads socket `l` into the endpoint until it would block (or the budget is spent).
    fn drain(&mut self, sh: &Shared, l: usize) {
        let mut scratch = sh.scratch.borrow_mut();
        for _ in 0..READ_BUDGET {
            let sock = &self.socks[l];
            let Ok(n) = sock.try_io(Interest::READABLE, |s| s.recv_batch(&mut scratch.recv)) else {
                return;
            };
            let now = sh.clock.now();
            for rb in &mut scratch.recv[..n] {
                let from = rb.source();
                self.client
                    .handle_datagram(now, PathId(l as u8), from, rb.packet_mut());
            }
        }
    }

    /// Hands the endpoint the `Up` packets due by `now` (only while the plan sends and the
    /// session is up: a deliberate leave is not loss).
    fn send_due(&mut self, sh: &Shared, i: usize, now: Instant) {
        if !sh.sending.get() || !self.client.is_established() {
            self.next_send = None;
            return;
        }
        let p = &sh.plan;
        let gap = sh.send_gap.get();
        // Spread the sessions' first packets over one gap, so they do not all send at once.
        let mut next = self.next_send.unwrap_or_else(|| {
            now + Duration::from_micros(gap.as_micros() as u64 * i as u64 / p.sessions as u64)
        });
        let mut scratch = sh.scratch.borrow_mut();
        let mut c = sh.counters.borrow_mut();
        let mut n = 0;
        while next <= now {
            if n == CATCH_UP {
                next = now;
                break;
            }
            let tag = Tag {
                kind: Kind::Up,
                session: i as u32,
                seq: c[i].sent,
            };
            packet::build(&mut scratch.packet, p.inner(i), p.sink, tag, p.packet_bytes);
            self.client.handle_tun_packet(now, &scratch.packet);
            c[i].sent += 1;
            next = next + gap;
            n += 1;
        }
        self.next_send = Some(next);
    }

    /// Sends what the endpoint built, takes what it delivered, notes coming up.
    fn flush(&mut self, sh: &Shared, i: usize, now: Instant) {
        let mut scratch = sh.scratch.borrow_mut();
        let scratch = &mut *scratch;
        let mut c = sh.counters.borrow_mut();
        let c = &mut c[i];
        while let Some(t) = self.client.poll_transmit(now, &mut scratch.datagram) {
            let sock = &self.socks[usize::from(t.path.0).min(1)];
            if sock
                .get_ref()
                .send_to(&scratch.datagram[..t.len], t.dst)
                .is_err()
            {
                c.send_errors += 1;
            }
        }
        while let Some(n) = self.client.poll_deliver(&mut scratch.deliver) {
            let Some((_, payload)) = packet::udp_payload(&scratch.deliver[..n]) else {
                continue;
            };
            match packet::read_tag(payload) {
                Some(t) if t.kind == Kind::Echo => c.echoed += 1,
                Some(t) if t.kind == Kind::Bulk => {
                    c.bulk_packets += 1;
                    c.bulk_bytes += n as u64;
                }
                _ => {}
            }
        }
        while self.client.poll_event().is_some() {}
        c.client = self.client.counters();
        if c.up_at.is_none() && self.client.is_established() {
            c.up_at = Some(now);
            c.ups += 1;
        }
    }
}

/// The inner address of session `i`: `base + i`.
pub fn inner_ip(base: std::net::Ipv4Addr, i: usize) -> std::net::Ipv4Addr {
    (u32::from(base) + i as u32).into()
}

/// Session `i`'s inner UDP source (address and a port of its own, for the sink's echo).
pub fn inner_addr(base: std::net::Ipv4Addr, i: usize) -> SocketAddrV4 {
    SocketAddrV4::new(inner_ip(base, i), 10_000 + (i % 50_000) as u16)
}
