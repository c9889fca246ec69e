//! `multihome server`: one UDP socket for all clients, a TUN device, NAT to the uplink,
//! driving `multihome_proto::Server`.

use super::{
    block_on, drain, read_tun, register, setup_tun, shutdown_signal, Clock, TunWriter, TxBatch,
    BUF_BYTES,
};
use crate::config::{self, ConfigError, ServerSettings, Source};
use crate::control::ControlSocket;
use anyhow::{Context, Result};
use multihome_io::udp::{LinkSocket, RecvBuf};
use multihome_proto::endpoint::{PeerConfig, Server, ServerConfig};
use multihome_proto::session::SessionConfig;
use std::path::Path;
use tokio::io::unix::AsyncFd;

/// Loads and checks the config, then runs until SIGINT/SIGTERM.
pub fn run(path: &Path) -> Result<()> {
    let text = config::read_file(path)?;
    let src = Source { path, text: &text };
    let s = config::server::validate(&src)?;
    let key = config::read_private_key(&src, s.private_key_at, &s.private_key_file)?;
    if let Some((up, line)) = &s.uplink {
        if multihome_io::netlink::link_index(up).is_err() {
            return Err(ConfigError {
                file: path.to_path_buf(),
                line: *line,
                message: format!("uplink interface `{up}` does not exist"),
                fix: "use a name shown by `ip link`, or remove `uplink` to disable NAT".into(),
            }
            .into());
        }
    }
    block_on(run_loop(s, key))
}

async fn run_loop(s: ServerSettings, key: multihome_proto::crypto::StaticSecret) -> Result<()> {
    let clock = Clock::new();
    let sock = register(
        LinkSocket::bind(None, s.listen).with_context(|| format!("listening on {}", s.listen))?,
    )?;
    let tun = setup_tun(&s.tun_name, s.mtu, s.tun_address)?;
    let tun_net = s.tun_address.trunc();
    for p in &s.peers {
        for net in &p.allowed_ips {
            if !tun_net.contains(net) {
                multihome_io::netlink::add_route(*net, &s.tun_name).with_context(|| {
                    format!("routing {net} (peer {}) into {}", p.name, s.tun_name)
                })?;
            }
        }
    }
    let _nat = match &s.uplink {
        Some((up, _)) => Some(
            multihome_io::nat::Masquerade::install("multihome", up, &s.tun_name)
                .with_context(|| format!("installing NAT out of {up}"))?,
        ),
        None => None,
    };
    let mut core = Server::with_rng_seed(
        ServerConfig {
            local_key: key,
            peers: s
                .peers
                .iter()
                .map(|p| PeerConfig {
                    name: p.name.clone(),
                    public_key: p.public_key,
                    allowed_ips: p.allowed_ips.clone(),
                })
                .collect(),
            session: SessionConfig {
                detect: s.detect,
                max_datagram: s.mtu as usize + multihome_proto::wire::OVERHEAD_BYTES,
                ..SessionConfig::default()
            },
            default_policy: s.default_policy,
            ciphers: s.ciphers,
        },
        super::os_seed()?,
    );
    let control = ControlSocket::bind(&s.control_socket)?;
    let metrics = super::bind_metrics(s.metrics_listen).await?;
    tracing::info!(listen = %s.listen, tun = %s.tun_name, peers = s.peers.len(), "server running");
    let mut batch = TxBatch::new();
    let mut tun_writer = TunWriter::default();
    let mut frame = vec![0u8; BUF_BYTES + multihome_io::tun::VNET_HDR_LEN];
    let mut scratch = Vec::new();
    let mut rbufs: Vec<RecvBuf> = (0..32).map(|_| RecvBuf::new(BUF_BYTES)).collect();
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        flush(&clock, &mut core, &sock, &tun, &mut batch, &mut tun_writer);
        let sleep = tokio::time::sleep_until(clock.deadline(core.poll_timeout()));
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
            g = sock.readable() => {
                let mut g = g?;
                drain(&mut g, |sock| {
                    let n = sock.recv_batch(&mut rbufs)?;
                    let now = clock.now();
                    for rb in &mut rbufs[..n] {
                        let from = rb.source();
                        core.handle_datagram(now, from, rb.packet_mut());
                    }
                    Ok(())
                });
            }
            c = control.accept() => {
                if let Ok(stream) = c {
                    crate::control::reply(stream, crate::status::server_status(&core).to_string());
                }
            }
            m = async { metrics.as_ref().expect("guarded").accept().await }, if metrics.is_some() => {
                if let Ok((stream, _)) = m {
                    crate::metrics::reply(stream, crate::metrics::render(&crate::status::server_status(&core)));
                }
            }
        }
    }
    tracing::info!("shutting down (removing NAT)");
    Ok(())
}

fn flush(
    clock: &Clock,
    core: &mut Server,
    sock: &AsyncFd<LinkSocket>,
    tun: &AsyncFd<multihome_io::tun::Tun>,
    batch: &mut TxBatch,
    tun_writer: &mut TunWriter,
) {
    let now = clock.now();
    let send = |b: &mut TxBatch| {
        b.send(
            |_| Some(sock.get_ref()),
            |_, e| tracing::debug!("send: {e}"),
        );
    };
    let mut build = |buf: &mut [u8]| core.poll_transmit(now, buf).map(|t| (0, t.dst, t.len));
    while batch.fill(&mut build) {
        send(batch);
    }
    send(batch);
    tun_writer.write_all(tun, |buf| core.poll_deliver(buf));
    while let Some((peer, e)) = core.poll_event() {
        tracing::info!(peer, event = ?e, "session event");
    }
}
