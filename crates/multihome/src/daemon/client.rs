//! `multihome client`: set-up of the TUN device, one UDP socket per link and the
//! `multihome_proto::Client` core, then [`super::driver::Driver`] runs them.
//!
//! Links are watched with netlink: a link whose interface goes down is marked unavailable
//! at once (failover does not wait for the detection timer), and one that comes up — or
//! appears later — is (re)bound and used without a restart. A link is usable only while its
//! interface also has an address of the server's family (not IPv6 link-local): without one
//! the kernel sends from another interface's address, which the server would follow and
//! answer where nobody listens (a Wi-Fi interface between association and DHCP). The
//! address's arrival makes the link usable at once, so the first probe leaves right then.

use super::core::ClientCore;
use super::driver::{Driver, Services, Watch};
use super::fastpath::FastPath;
use super::io::LinkBind;
use super::reload::ClientReloader;
use super::{block_on, register, setup_tun, shutdown_signal, Clock};
use crate::config::{self, ClientSettings, ConfigError, Source};
use crate::control::ControlSocket;
use anyhow::{Context, Result};
use multihome_io::netlink::{LinkEvent, LinkWatcher};
use multihome_proto::endpoint::{Client, ClientConfig};
use multihome_proto::path::PathId;
use multihome_proto::session::SessionConfig;
use std::io;
use std::path::Path;
use std::task::{ready, Context as TaskContext, Poll};
use tokio::io::unix::AsyncFd;

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
    block_on(run_loop(path, s, key))
}

async fn run_loop(
    path: &Path,
    mut s: ClientSettings,
    key: multihome_proto::crypto::StaticSecret,
) -> Result<()> {
    // A resolved server (`servers`) is known before anything else is set up.
    let naming = super::naming::start(&mut s, &key).await?;
    let clock = Clock::new();
    let tun = setup_tun(&s.tun_name, s.mtu, &s.tun_addresses)?;
    add_routes(&s)?;
    // Removes the interception when dropped, at the end of this function.
    let (states_tx, states_rx) = super::stream::steer::link_states();
    // Without `follow_tunnel` nothing publishes: the subflows are the kernel's alone.
    let follow = s.stream.as_ref().is_some_and(|st| st.follow_tunnel);
    let stream = super::stream::client::start(&s, &key, states_rx)?;
    let detours = super::detours::Detours::new(&s, key.clone(), clock.epoch_us, super::os_seed()?);
    let base = client_config(&s, key, &clock);
    let mut client = Client::with_rng_seed(base.clone(), super::os_seed()?);
    let naming = naming.map(|n| {
        n.with_factory(Box::new(move |server_key| {
            let cfg = ClientConfig {
                server_key,
                ..base.clone()
            };
            Ok(Client::with_rng_seed(cfg, super::os_seed()?))
        }))
    });
    let links = s.links.iter();
    let mut bind = LinkBind::new(links.map(|l| (l.name.clone(), l.interface.clone(), l.server)));
    if s.kernel_copies {
        bind = bind.with_copy_sockets();
    }
    for i in 0..bind.links().len() {
        bind.rebind(i);
        let l = &bind.links()[i];
        client.add_link(clock.now(), PathId(i as u8), l.server);
        client.set_link_cost(PathId(i as u8), s.links[i].cost);
        warn_family(&l.name, &l.interface, l.server);
        warn_mtu(&l.name, &l.interface, l.server, s.mtu);
        let up = link_usable(&l.interface, l.server, None) && bind.is_bound(i);
        client.set_link_available(clock.now(), PathId(i as u8), up);
        tracing::info!(link = %l.name, interface = %l.interface, server = %l.server, up, cost = s.links[i].cost, "link configured");
    }
    let names: Vec<String> = bind.links().iter().map(|l| l.name.clone()).collect();
    let links = LinkWatch {
        fd: register(LinkWatcher::new().context("opening netlink")?)?,
        events: Vec::new(),
        fast: FastPath::start(s.kernel_copies, &bind)?,
        reloader: ClientReloader::new(path, s.clone()),
    };
    let mut watch = super::naming::Watches::new(links, naming);
    let services = Services {
        control: Some(ControlSocket::bind(&s.control_socket)?),
        metrics: super::bind_metrics(s.metrics_listen).await?,
        resolver: None,
        live: Some(super::live("client", s.dashboard).await?),
        stream: stream.as_ref().map(|s| s.stats.clone()),
        ..Services::default()
    };
    tracing::info!(tun = %s.tun_name, mtu = s.mtu, "client running");
    let core = ClientCore::new(client, names)
        .with_detours(detours)
        .with_policies(&s.classifier)
        .with_stream(
            stream
                .as_ref()
                .filter(|_| follow)
                .map(|st| super::core::StreamLinks {
                    states: states_tx,
                    stats: st.stats.clone(),
                    next_check: clock.now(),
                }),
        );
    let mut driver = Driver::new(core, tun, bind, clock).reload_on_hangup()?;
    driver.run(&services, &mut watch, shutdown_signal()).await?;
    tracing::info!("shutting down");
    driver.close();
    Ok(())
}

/// Routes the configured prefixes into the TUN device.
fn add_routes(s: &ClientSettings) -> Result<()> {
    for r in &s.routes {
        if r.prefix_len() == 0 {
            // A default route would capture the tunnel's own datagrams on hosts that do not
            // bind links to devices; two /1 routes override the default without replacing it.
            let halves = match r {
                ipnet::IpNet::V4(_) => ["0.0.0.0/1", "128.0.0.0/1"],
                ipnet::IpNet::V6(_) => ["::/1", "8000::/1"],
            };
            for half in halves {
                multihome_io::netlink::add_route(half.parse()?, &s.tun_name)
                    .with_context(|| format!("routing {half} (of {r}) into {}", s.tun_name))?;
            }
        } else {
            multihome_io::netlink::add_route(*r, &s.tun_name)
                .with_context(|| format!("routing {r} into {}", s.tun_name))?;
        }
    }
    Ok(())
}

fn client_config(
    s: &ClientSettings,
    key: multihome_proto::crypto::StaticSecret,
    clock: &Clock,
) -> ClientConfig {
    ClientConfig {
        local_key: key,
        server_key: s.server_public_key,
        session: SessionConfig {
            detect: s.detect,
            keepalive: s.keepalive,
            failback_hold: s.failback_hold,
            aggregate: s.aggregate,
            max_datagram: s.mtu as usize + multihome_proto::wire::OVERHEAD_BYTES,
            kernel_copies: s.kernel_copies,
            hold_max_bytes: s.hold.0,
            hold_max_age: s.hold.1,
            ..SessionConfig::default()
        },
        classifier: s.classifier.clone(),
        epoch_us: clock.epoch_us,
        ciphers: s.ciphers,
    }
}

/// The links' watcher: interfaces going down or coming up (netlink), and the config file
/// re-read on a reload (links added, removed or moved; policies).
struct LinkWatch {
    fd: AsyncFd<LinkWatcher>,
    /// The events of the last wake-up.
    events: Vec<LinkEvent>,
    /// The kernel fast path's table (removed when the watch is dropped, at exit).
    fast: FastPath,
    /// The config file and the settings in force.
    reloader: ClientReloader,
}

impl Watch<ClientCore, LinkBind> for LinkWatch {
    /// Reads the events here: `poll_events` drains until "would block", and only the
    /// readiness guard can then clear the readiness. select! takes the first ready branch,
    /// so events read here are always handled.
    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        let mut g = ready!(self.fd.poll_read_ready_mut(cx))?;
        self.events.clear();
        if let Err(e) = g.get_inner_mut().poll_events(&mut self.events) {
            tracing::debug!("netlink: {e}");
        }
        g.clear_ready();
        Poll::Ready(Ok(()))
    }

    fn handle(&mut self, clock: &Clock, core: &mut ClientCore, bind: &mut LinkBind) {
        on_link_events(clock, core, bind, &self.events);
        self.fast.refresh(bind);
    }

    fn reload(
        &mut self,
        clock: &Clock,
        core: &mut ClientCore,
        bind: &mut LinkBind,
    ) -> Result<Vec<String>, String> {
        let r = self.reloader.reload(clock, core, bind);
        self.fast.refresh(bind);
        r
    }
}

/// Whether `interface` can reach `server`: up and running (`carrier`, when an event just
/// said so, else asked) with an address of the server's family.
pub(super) fn link_usable(
    interface: &str,
    server: std::net::SocketAddr,
    carrier: Option<bool>,
) -> bool {
    let up =
        carrier.unwrap_or_else(|| multihome_io::netlink::link_is_up(interface).unwrap_or(false));
    up && has_family_address(interface, server)
}

/// Whether `interface` has an address of `server`'s family (IPv6: not link-local, which
/// cannot reach a server off the link). A failed address query counts as having one (the
/// behaviour before addresses were watched).
pub(super) fn has_family_address(interface: &str, server: std::net::SocketAddr) -> bool {
    multihome_io::netlink::interface_addresses(interface).map_or(true, |addrs| {
        addrs.iter().any(|a| match (a.addr(), server) {
            (std::net::IpAddr::V4(_), std::net::SocketAddr::V4(_)) => true,
            (std::net::IpAddr::V6(v6), std::net::SocketAddr::V6(_)) => !v6.is_unicast_link_local(),
            _ => false,
        })
    })
}

/// Says at start-up why a link whose interface lacks an address of its server's family
/// stays down (an IPv6 server on an IPv4-only interface, or the reverse): it is used as
/// soon as such an address appears (SLAAC, DHCP), so this is a warning, not an error.
fn warn_family(link: &str, interface: &str, server: std::net::SocketAddr) {
    if !has_family_address(interface, server) {
        let family = if server.is_ipv4() { "IPv4" } else { "IPv6" };
        tracing::warn!(
            "link `{link}`: interface `{interface}` has no {family} address to reach server \
             {server}; the link stays down until it gets one (or give the link a server of \
             the family its interface has)"
        );
    }
}

/// Says at start-up when a full datagram (`mtu` + the tunnel's overhead + the outer IP/UDP
/// header of the server's family) exceeds `interface`'s MTU: the kernel then fragments
/// every full-size datagram (an `mtu` sized for IPv4 links used over an IPv6 one, which
/// takes 20 bytes more).
fn warn_mtu(link: &str, interface: &str, server: std::net::SocketAddr, mtu: u32) {
    let (outer, family) = if server.is_ipv4() {
        (28, "IPv4")
    } else {
        (48, "IPv6")
    };
    let need = mtu as usize + multihome_proto::wire::OVERHEAD_BYTES + outer;
    let path = format!("/sys/class/net/{interface}/mtu");
    let Some(have) = std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.trim().parse::<usize>().ok())
    else {
        return;
    };
    if have < need {
        let fit = have - (need - mtu as usize).min(have);
        tracing::warn!(
            "link `{link}`: a full datagram over {family} takes {need} bytes, more than \
             interface `{interface}`'s MTU {have}: each one will be fragmented; set mtu = \
             {fit} or less (docs/CONFIG.md)"
        );
    }
}

/// Marks links whose interface went down unavailable at once, and (re)binds and uses
/// those whose interface came up.
fn on_link_events(clock: &Clock, core: &mut ClientCore, bind: &mut LinkBind, events: &[LinkEvent]) {
    for e in events {
        let (name, carrier) = match e {
            LinkEvent::Up { name, .. } => (name, Some(true)),
            LinkEvent::Down { name, .. } => (name, Some(false)),
            LinkEvent::AddrAdded { name, .. } | LinkEvent::AddrRemoved { name, .. } => (name, None),
        };
        for i in 0..bind.links().len() {
            if &bind.links()[i].interface != name || !bind.is_active(i) {
                continue;
            }
            let up = link_usable(name, bind.links()[i].server, carrier);
            if up && !bind.is_bound(i) {
                bind.rebind(i);
            }
            let usable = up && bind.is_bound(i);
            let link = &bind.links()[i].name;
            tracing::info!(link = %link, interface = %name, up = usable, "link changed");
            core.set_link_up(clock.now(), PathId(i as u8), usable);
        }
    }
}
