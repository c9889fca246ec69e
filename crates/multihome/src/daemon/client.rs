//! `multihome client`: TUN device + one UDP socket per link, driving `multihome_proto::Client`.
//!
//! Links are watched with netlink: a link whose interface goes down is marked unavailable
//! at once (failover does not wait for the detection timer), and one that comes up — or
//! appears later — is (re)bound and used without a restart.

use super::{
    block_on, drain, read_tun, register, setup_tun, shutdown_signal, Clock, TunWriter, TxBatch,
    BUF_BYTES,
};
use crate::config::{self, ClientSettings, ConfigError, Source};
use crate::control::ControlSocket;
use anyhow::{Context, Result};
use multihome_io::netlink::{LinkEvent, LinkWatcher};
use multihome_io::udp::{classify, ErrorClass, LinkSocket, RecvBuf};
use multihome_proto::endpoint::{Client, ClientConfig};
use multihome_proto::path::PathId;
use multihome_proto::session::SessionConfig;
use std::net::SocketAddr;
use std::path::Path;
use std::task::Poll;
use tokio::io::unix::AsyncFd;

struct LinkRt {
    name: String,
    interface: String,
    server: SocketAddr,
    sock: Option<AsyncFd<LinkSocket>>,
}

impl LinkRt {
    fn bind(&mut self) {
        let local: SocketAddr = if self.server.is_ipv4() {
            "0.0.0.0:0".parse().expect("literal")
        } else {
            "[::]:0".parse().expect("literal")
        };
        self.sock = match LinkSocket::bind(Some(&self.interface), local)
            .map_err(anyhow::Error::from)
            .and_then(register)
        {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(link = %self.name, "cannot bind a socket on {}: {e:#}", self.interface);
                None
            }
        };
    }
}

/// Loads and checks the config, then runs until SIGINT/SIGTERM.
pub fn run(path: &Path) -> Result<()> {
    let text = config::read_file(path)?;
    let src = Source { path, text: &text };
    let s = config::client::validate(&src)?;
    let key = config::read_private_key(&src, s.private_key_at, &s.private_key_file)?;
    for l in &s.links {
        if multihome_io::netlink::link_index(&l.interface).is_err() {
            return Err(ConfigError {
                file: path.to_path_buf(),
                line: l.interface_line,
                message: format!(
                    "link `{}`: interface `{}` does not exist",
                    l.name, l.interface
                ),
                fix: "use a name shown by `ip link`, or create the interface before starting"
                    .into(),
            }
            .into());
        }
    }
    block_on(run_loop(s, key))
}

async fn run_loop(s: ClientSettings, key: multihome_proto::crypto::StaticSecret) -> Result<()> {
    let clock = Clock::new();
    let tun = setup_tun(&s.tun_name, s.mtu, s.tun_address)?;
    for r in &s.routes {
        if r.prefix_len() == 0 && r.addr().is_ipv4() {
            // A default route would capture the tunnel's own datagrams on hosts that do not
            // bind links to devices; two /1 routes override the default without replacing it.
            for half in ["0.0.0.0/1", "128.0.0.0/1"] {
                multihome_io::netlink::add_route(half.parse()?, &s.tun_name)?;
            }
        } else {
            multihome_io::netlink::add_route(*r, &s.tun_name)
                .with_context(|| format!("routing {r} into {}", s.tun_name))?;
        }
    }
    let mut core = Client::with_rng_seed(
        ClientConfig {
            local_key: key,
            server_key: s.server_public_key,
            session: SessionConfig {
                detect: s.detect,
                failback_hold: s.failback_hold,
                aggregate: s.aggregate,
                max_datagram: s.mtu as usize + multihome_proto::wire::OVERHEAD_BYTES,
                ..SessionConfig::default()
            },
            classifier: s.classifier.clone(),
            epoch_us: clock.epoch_us,
            ciphers: s.ciphers,
        },
        super::os_seed()?,
    );
    let mut links: Vec<LinkRt> = s
        .links
        .iter()
        .map(|l| LinkRt {
            name: l.name.clone(),
            interface: l.interface.clone(),
            server: l.server,
            sock: None,
        })
        .collect();
    for (i, l) in links.iter_mut().enumerate() {
        l.bind();
        core.add_link(clock.now(), PathId(i as u8), l.server);
        let up =
            multihome_io::netlink::link_is_up(&l.interface).unwrap_or(false) && l.sock.is_some();
        core.set_link_available(clock.now(), PathId(i as u8), up);
        tracing::info!(link = %l.name, interface = %l.interface, server = %l.server, up, "link configured");
    }
    let names: Vec<String> = links.iter().map(|l| l.name.clone()).collect();
    let mut watcher = register(LinkWatcher::new().context("opening netlink")?)?;
    let control = ControlSocket::bind(&s.control_socket)?;
    let metrics = super::bind_metrics(s.metrics_listen).await?;
    tracing::info!(tun = %s.tun_name, mtu = s.mtu, "client running");
    let mut batch = TxBatch::new();
    let mut tun_writer = TunWriter::default();
    let mut frame = vec![0u8; BUF_BYTES + multihome_io::tun::VNET_HDR_LEN];
    let mut scratch = Vec::new();
    let mut rbufs: Vec<RecvBuf> = (0..32).map(|_| RecvBuf::new(BUF_BYTES)).collect();
    let mut events = Vec::new();
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    let mut was_established = false;
    loop {
        flush(
            &clock,
            &mut core,
            &mut links,
            &tun,
            &mut batch,
            &mut tun_writer,
        );
        if core.is_established() != was_established {
            was_established = core.is_established();
            tracing::info!(established = was_established, "session");
        }
        let sleep = tokio::time::sleep_until(clock.deadline(core.poll_timeout()));
        let link_ready = std::future::poll_fn(|cx| {
            for (i, l) in links.iter().enumerate() {
                if let Some(sock) = &l.sock {
                    if let Poll::Ready(Ok(g)) = sock.poll_read_ready(cx) {
                        return Poll::Ready((i, g));
                    }
                }
            }
            Poll::Pending
        });
        tokio::select! {
            _ = &mut shutdown => break,
            _ = sleep => core.handle_timeout(clock.now()),
            g = tun.readable() => {
                let mut g = g?;
                drain(&mut g, |t| {
                    let now = clock.now();
                    read_tun(t, &mut frame, &mut scratch, |p| core.handle_tun_packet(now, p))
                });
            }
            (i, mut g) = link_ready => {
                drain(&mut g, |sock| {
                    let n = sock.recv_batch(&mut rbufs)?;
                    let now = clock.now();
                    for rb in &mut rbufs[..n] {
                        let from = rb.source();
                        core.handle_datagram(now, PathId(i as u8), from, rb.packet_mut());
                    }
                    Ok(())
                });
            }
            g = watcher.readable_mut() => {
                let mut g = g?;
                events.clear();
                // poll_events drains until "would block", so readiness can be cleared.
                if let Err(e) = g.get_inner_mut().poll_events(&mut events) {
                    tracing::debug!("netlink: {e}");
                }
                g.clear_ready();
                on_link_events(&clock, &mut core, &mut links, &events);
            }
            c = control.accept() => {
                if let Ok(stream) = c {
                    let doc = crate::status::client_status(&core, &names);
                    crate::control::reply(stream, doc.to_string());
                }
            }
            m = async { metrics.as_ref().expect("guarded").accept().await }, if metrics.is_some() => {
                if let Ok((stream, _)) = m {
                    crate::metrics::reply(stream, crate::metrics::render(&crate::status::client_status(&core, &names)));
                }
            }
        }
    }
    tracing::info!("shutting down");
    core.close();
    flush(
        &clock,
        &mut core,
        &mut links,
        &tun,
        &mut batch,
        &mut tun_writer,
    );
    Ok(())
}

fn on_link_events(clock: &Clock, core: &mut Client, links: &mut [LinkRt], events: &[LinkEvent]) {
    for e in events {
        let (name, up) = match e {
            LinkEvent::Up { name, .. } => (name, true),
            LinkEvent::Down { name, .. } => (name, false),
            _ => continue,
        };
        for (i, l) in links
            .iter_mut()
            .enumerate()
            .filter(|(_, l)| &l.interface == name)
        {
            if up && l.sock.is_none() {
                l.bind();
            }
            let usable = up && l.sock.is_some();
            tracing::info!(link = %l.name, interface = %name, up = usable, "link changed");
            core.set_link_available(clock.now(), PathId(i as u8), usable);
        }
    }
}

/// Sends everything the core has queued (batched per link socket) and delivers
/// everything it has received.
fn flush(
    clock: &Clock,
    core: &mut Client,
    links: &mut [LinkRt],
    tun: &AsyncFd<multihome_io::tun::Tun>,
    batch: &mut TxBatch,
    tun_writer: &mut TunWriter,
) {
    let now = clock.now();
    let mut gone = Vec::new();
    let mut build = |buf: &mut [u8]| {
        core.poll_transmit(now, buf)
            .map(|t| (t.path.0 as usize, t.dst, t.len))
    };
    while batch.fill(&mut build) {
        send_batch(batch, links, &mut gone);
    }
    send_batch(batch, links, &mut gone);
    for i in gone {
        if let Some(link) = links.get_mut(i) {
            tracing::warn!(link = %link.name, "interface vanished");
            link.sock = None;
            core.set_link_available(now, PathId(i as u8), false);
        }
    }
    tun_writer.write_all(tun, |buf| core.poll_deliver(buf));
    while let Some(e) = core.poll_event() {
        tracing::info!(event = ?e, "session event");
    }
}

fn send_batch(batch: &mut TxBatch, links: &[LinkRt], gone: &mut Vec<usize>) {
    batch.send(
        |i| {
            links
                .get(i)
                .and_then(|l| l.sock.as_ref())
                .map(|s| s.get_ref())
        },
        |i, e| match classify(&e) {
            ErrorClass::DeviceGone => gone.push(i),
            ErrorClass::WouldBlock | ErrorClass::NoBuffers => {}
            _ => tracing::debug!(link = i, "send: {e}"),
        },
    );
}
