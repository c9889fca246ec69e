//! `multihome server`: set-up of the UDP port for all clients (one socket per thread), a
//! TUN device (one queue per thread), routes to the peers' prefixes, NAT to the uplink and
//! one `multihome_proto::Server` core per thread (`super::shards`), then one
//! [`super::driver::Driver`] per thread runs them (the first on the calling thread, with
//! the control socket and the other services); a reload (SIGHUP, `multihome reload`) replaces the
//! peers and the default policy (`super::reload`). The NAT rules and the kernel fast
//! path's table ([`super::fastpath_server`], watched by the loop with the reloads) live
//! exactly as long as the loop. A thread of its own returns freed heap to the kernel
//! ([`super::heap`]).

use super::driver::{Driver, NoWatch, Services};
use super::fastpath_server::ServerFastPath;
use super::io::ListenBind;
use super::reload::{ServerReloader, ServerWatch};
use super::shards::{Mesh, ShardCore, ShardWatch};
use super::{block_on, create_tun, register, shutdown_signal, Clock};
use crate::config::{self, ConfigError, ServerSettings, Source};
use crate::control::ControlSocket;
use anyhow::{Context, Result};
use multihome_io::udp::LinkSocket;
use multihome_proto::endpoint::{PeerConfig, Server, ServerConfig, Shard};
use multihome_proto::session::SessionConfig;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

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
    block_on(run_loop(path, s, key))
}

async fn run_loop(
    path: &Path,
    s: ServerSettings,
    key: multihome_proto::crypto::StaticSecret,
) -> Result<()> {
    let clock = Clock::new();
    let threads = s.threads;
    let socks = multihome_io::udp::steer::bind_group(s.listen, threads)
        .with_context(|| format!("listening on {}", s.listen))?;
    let tuns = create_tun(&s.tun_name, s.mtu, &s.tun_addresses, usize::from(threads))?;
    add_routes(&s)?;
    // Removes the NAT rules when dropped, at the end of this function.
    let _nat = match &s.uplink {
        Some((up, _)) => Some(
            multihome_io::nat::Masquerade::install("multihome", up, &s.tun_name)
                .with_context(|| format!("installing NAT out of {up}"))?,
        ),
        None => None,
    };
    let resolver = super::naming::serve(&s, &key)?;
    let stream = match s.stream {
        true => {
            let peers = s.peers.iter().map(|p| p.public_key).collect();
            let max = super::stream::STREAM_MAX_CONNECTIONS;
            let cc = &s.stream_congestion_control;
            Some(super::stream::server::start(
                s.listen, &key, peers, max, cc,
            )?)
        }
        false => None,
    };
    let mut shards = Vec::new();
    for ((i, sock), (tun, mesh)) in socks
        .into_iter()
        .enumerate()
        .zip(tuns.into_iter().zip(Mesh::build(usize::from(threads))))
    {
        shards.push((sock, tun, ShardCore::new(shard_server(&s, &key, i)?, mesh)));
    }
    let mut shards = shards.into_iter();
    let (sock, tun, mut core) = shards.next().context("no server thread")?;
    // Set when the daemon stops, or when a thread fails: every loop then ends.
    let stop = Arc::new(tokio::sync::watch::channel(false).0);
    let mut others = Vec::new();
    for (i, (sock, tun, core)) in shards.enumerate() {
        let stop = stop.clone();
        let run = move || {
            let r = block_on(run_shard(sock, tun, core, stop.subscribe()));
            stop.send_replace(true);
            r
        };
        let name = format!("multihome-{}", i + 1);
        others.push(std::thread::Builder::new().name(name).spawn(run)?);
    }
    let trim_stop = Arc::new(AtomicBool::new(false));
    let trimmer = super::heap::start(trim_stop.clone())?;
    let services = Services {
        control: Some(ControlSocket::bind(&s.control_socket)?),
        metrics: super::bind_metrics(s.metrics_listen).await?,
        resolver,
        live: Some(super::live("server", s.dashboard).await?),
        stream,
        ..Services::default()
    };
    tracing::info!(listen = %s.listen, tun = %s.tun_name, peers = s.peers.len(), relays = s.relays.len(), threads, "server running");
    let mut bind = ListenBind::new(register(sock)?);
    if s.kernel_copies {
        // Same address, its own port: the fast path's rules match on the port.
        let at = SocketAddr::new(s.listen.ip(), 0);
        let copy = LinkSocket::bind(None, at).context("binding the copy socket")?;
        bind = bind.with_copy_socket(register(copy)?);
    }
    // Removes the fast path's table when dropped, at the end of this function.
    let server_watch = ServerWatch {
        fast: ServerFastPath::start(s.kernel_copies, &bind)?,
        reloader: ServerReloader::new(path, s.clone()),
    };
    let mut watch = ShardWatch::new(server_watch, &mut core);
    let device = super::io::TunDevice::new(register(tun)?);
    let mut driver = Driver::new(core, device, bind, clock).reload_on_hangup()?;
    let mut stopped = stop.subscribe();
    let shutdown = async move {
        tokio::select! {
            () = shutdown_signal() => {}
            _ = stopped.wait_for(|s| *s) => tracing::error!("a server thread stopped"),
        }
    };
    let mut result = driver.run(&services, &mut watch, shutdown).await;
    stop.send_replace(true);
    trim_stop.store(true, Ordering::Relaxed);
    if let Some(t) = trimmer {
        t.thread().unpark();
        let _ = t.join();
    }
    for t in others {
        match t.join() {
            Ok(Err(e)) if result.is_ok() => result = Err(e.context("a server thread failed")),
            Err(_) if result.is_ok() => result = Err(anyhow::anyhow!("a server thread panicked")),
            _ => {}
        }
    }
    tracing::info!("shutting down (removing NAT)");
    result
}

/// One of the other threads' loops, until `stop`.
async fn run_shard(
    sock: LinkSocket,
    tun: multihome_io::tun::Tun,
    mut core: ShardCore,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    let bind = ListenBind::new(register(sock)?);
    let device = super::io::TunDevice::new(register(tun)?);
    let mut watch = ShardWatch::new(NoWatch, &mut core);
    let mut driver = Driver::new(core, device, bind, Clock::new());
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    driver.run(&Services::default(), &mut watch, stopped).await
}

/// Thread `i`'s server: the whole peer list, the sessions of its shard.
fn shard_server(
    s: &ServerSettings,
    key: &multihome_proto::crypto::StaticSecret,
    i: usize,
) -> Result<Server> {
    let mut core = Server::with_rng_seed(server_config(s, key.clone()), super::os_seed()?);
    let shard = u16::try_from(i)
        .ok()
        .and_then(|i| Shard::new(i, s.threads))
        .context("threads out of range")?;
    core.set_shard(shard);
    let relays: Vec<_> = s.relays.iter().map(|r| r.spec()).collect();
    // The config's validation made sure the list can be handed out.
    anyhow::ensure!(
        core.set_relays(&relays),
        "the [[relay]] list cannot be handed out"
    );
    Ok(core)
}

/// Routes each peer's allowed prefixes into the TUN device (those outside the device's
/// own subnets, which are routed already), IPv4 and IPv6 alike.
fn add_routes(s: &ServerSettings) -> Result<()> {
    for p in &s.peers {
        for net in &p.allowed_ips {
            if !on_tun_subnet(s, net) {
                multihome_io::netlink::add_route(*net, &s.tun_name).with_context(|| {
                    format!("routing {net} (peer {}) into {}", p.name, s.tun_name)
                })?;
            }
        }
    }
    Ok(())
}

/// Whether `net` lies in the subnet of one of the TUN device's addresses (the kernel routes
/// those with the address).
pub(super) fn on_tun_subnet(s: &ServerSettings, net: &ipnet::IpNet) -> bool {
    s.tun_addresses.iter().any(|t| t.trunc().contains(net))
}

/// The core's view of the configured peers.
pub(super) fn peer_configs(s: &ServerSettings) -> Vec<PeerConfig> {
    s.peers
        .iter()
        .map(|p| PeerConfig {
            name: p.name.clone(),
            public_key: p.public_key,
            allowed_ips: p.allowed_ips.clone(),
        })
        .collect()
}

fn server_config(s: &ServerSettings, key: multihome_proto::crypto::StaticSecret) -> ServerConfig {
    ServerConfig {
        local_key: key,
        peers: peer_configs(s),
        session: SessionConfig {
            detect: s.detect,
            keepalive: s.keepalive,
            max_datagram: s.mtu as usize + multihome_proto::wire::OVERHEAD_BYTES,
            hold_max_bytes: s.hold.0,
            hold_max_age: s.hold.1,
            kernel_copies: s.kernel_copies,
            ..SessionConfig::default()
        },
        default_policy: s.default_policy,
        downstream_copies: s.redundant_copies,
        ciphers: s.ciphers,
    }
}
