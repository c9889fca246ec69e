//! The daemons' side of a reload (`multihome reload`, SIGHUP): re-read the config file,
//! have `config::reload` check it against the settings in force, check the machine (a new
//! or moved link's interface must exist, as at start), then apply the changes through the
//! core's own calls — the sessions, their keys and every connection through the tunnel go
//! on.
//!
//! Client ([`ClientReloader`]):
//! - a link added: its socket is bound (`LinkBind::set_link`) and the core gets the path
//!   (`Client::add_link`, cost, usable or not); it then carries traffic as any link does;
//! - a link removed: its socket is closed (`LinkBind::retire`) and its path goes down
//!   (`ClientCore::retire_link`), so what it held is sent again over the other links;
//! - a link moved (interface or server): bound again and re-pointed (`Client::add_link`);
//! - a cost changed: `Client::set_link_cost`;
//! - policies changed: `Client::set_classifier`, stated to the server under a new epoch.
//!
//! Server ([`ServerReloader`], in the loop through [`ServerWatch`]): the peers are
//! replaced (`Server::set_peers`: a peer whose key stays keeps its session), the routes
//! of `allowed_ips` into the TUN device follow (new ones added before the core changes,
//! gone ones removed after), `Server::set_default_policy`, and the relays handed to the
//! clients (`Server::set_relays`: a new epoch, so every client that takes lists gets it and
//! retires the relays it lacks, docs/PROTOCOL.md §15.7).
//!
//! Invariant: all or nothing — anything refused (the file, a key fixed at start, a missing
//! interface) is found before the first change, and the settings in force stay as they were.

use super::client::link_usable;
use super::core::ClientCore;
use super::driver::Watch;
use super::fastpath_server::ServerFastPath;
use super::io::{LinkBind, ListenBind};
use super::shards::ShardCore;
use super::Clock;
use crate::config::reload::{ClientReload, ServerReload};
use crate::config::{self, ClientSettings, ConfigError, ServerSettings, Source};
use ipnet::IpNet;
use multihome_proto::endpoint::Server;
use std::path::{Path, PathBuf};
use std::task::{Context, Poll};

/// The config file and the settings in force.
pub struct ClientReloader {
    path: PathBuf,
    settings: ClientSettings,
}

impl ClientReloader {
    /// The settings the daemon started with, read from `path`.
    pub fn new(path: &Path, settings: ClientSettings) -> Self {
        ClientReloader {
            path: path.to_path_buf(),
            settings,
        }
    }

    /// Reads and checks the file, applies it; one line per change, or why nothing changed.
    pub fn reload(
        &mut self,
        clock: &Clock,
        core: &mut ClientCore,
        bind: &mut LinkBind,
    ) -> Result<Vec<String>, String> {
        let r = self.check().map_err(|e| e.to_string())?;
        let changes = r.describe();
        apply(clock, core, bind, &r);
        self.settings = r.settings;
        Ok(changes)
    }

    /// Everything that can refuse the new file, before anything is changed.
    fn check(&self) -> Result<ClientReload, ConfigError> {
        let text = config::read_file(&self.path)?;
        let src = Source {
            path: &self.path,
            text: &text,
        };
        let r = config::reload::client(&src, &self.settings)?;
        for l in r.links.added.iter().chain(&r.links.rebound) {
            if multihome_io::netlink::link_index(&l.interface).is_err() {
                return Err(ConfigError {
                    file: self.path.clone(),
                    line: l.interface_line,
                    message: format!(
                        "link `{}`: interface `{}` does not exist",
                        l.name, l.interface
                    ),
                    fix: "use a name shown by `ip link`, or create the interface before reloading"
                        .into(),
                });
            }
        }
        Ok(r)
    }
}

/// Applies a checked reload to the core and the sockets.
fn apply(clock: &Clock, core: &mut ClientCore, bind: &mut LinkBind, r: &ClientReload) {
    let now = clock.now();
    for l in &r.links.removed {
        bind.retire(l.id.0 as usize);
        core.retire_link(now, l.id);
    }
    for l in r.links.added.iter().chain(&r.links.rebound) {
        let i = l.id.0 as usize;
        bind.set_link(i, l.name.clone(), l.interface.clone(), l.server);
        let usable = link_usable(&l.interface, l.server, None) && bind.is_bound(i);
        core.set_link(now, l, usable, bind.links().len());
    }
    for l in &r.links.recosted {
        core.client.set_link_cost(l.id, l.cost);
    }
    if r.policies_changed {
        // The config allows no more rules than can be stated, so this cannot refuse.
        core.client.set_classifier(r.settings.classifier.clone());
    }
    core.show_policies(&r.settings.classifier);
}

/// The server's config file and the settings in force.
pub struct ServerReloader {
    path: PathBuf,
    settings: ServerSettings,
}

impl ServerReloader {
    /// The settings the daemon started with, read from `path`.
    pub fn new(path: &Path, settings: ServerSettings) -> Self {
        ServerReloader {
            path: path.to_path_buf(),
            settings,
        }
    }

    /// Reads and checks the file, applies it to `core`; one line per change and what was
    /// applied (for the server's other threads, [`apply_server`]), or why nothing changed.
    pub fn reload(&mut self, core: &mut Server) -> Result<(Vec<String>, ServerReload), String> {
        let text = config::read_file(&self.path).map_err(|e| e.to_string())?;
        let src = Source {
            path: &self.path,
            text: &text,
        };
        let r = config::reload::server(&src, &self.settings).map_err(|e| e.to_string())?;
        let (old, new) = (routed(&self.settings), routed(&r.settings));
        let tun = &self.settings.tun_name;
        let added: Vec<IpNet> = new.iter().filter(|n| !old.contains(n)).copied().collect();
        for (i, net) in added.iter().enumerate() {
            if let Err(e) = multihome_io::netlink::add_route(*net, tun) {
                // All or nothing: the routes added so far go again, the core is untouched.
                for done in &added[..i] {
                    let _ = multihome_io::netlink::del_route(*done, tun);
                }
                return Err(format!(
                    "routing {net} into {tun}: {e}; nothing was changed"
                ));
            }
        }
        apply_server(core, &r);
        for net in old.iter().filter(|n| !new.contains(n)) {
            if let Err(e) = multihome_io::netlink::del_route(*net, tun) {
                tracing::warn!("removing the route {net} from {tun}: {e}");
            }
        }
        let changes = r.describe();
        self.settings = r.settings.clone();
        Ok((changes, r))
    }
}

/// The peers' prefixes routed into the TUN device (those outside its own subnet, which is
/// routed already), as the server adds them at start.
fn routed(s: &ServerSettings) -> Vec<IpNet> {
    let mut nets: Vec<IpNet> = s
        .peers
        .iter()
        .flat_map(|p| p.allowed_ips.iter().copied())
        .filter(|n| !super::server::on_tun_subnet(s, n))
        .collect();
    nets.sort_unstable();
    nets.dedup();
    nets
}

/// Applies a checked reload to one server core (each thread's, `super::shards`).
pub fn apply_server(core: &mut Server, r: &ServerReload) {
    if !(r.added.is_empty() && r.removed.is_empty() && r.changed.is_empty()) {
        core.set_peers(super::server::peer_configs(&r.settings));
    }
    if r.default_changed {
        core.set_default_policy(r.settings.default_policy);
    }
    if r.relays_changed {
        let relays: Vec<_> = r.settings.relays.iter().map(|r| r.spec()).collect();
        // Validated like at start (`config::detours::parse_server`): it can be handed out.
        if !core.set_relays(&relays) {
            tracing::warn!("the new [[relay]] list cannot be handed out; the old one stays");
        }
    }
}

/// The server's watch: the kernel fast path's refresh timer, and reloads.
pub struct ServerWatch {
    /// The fast path (inert when off).
    pub fast: ServerFastPath,
    /// The config file and the settings in force.
    pub reloader: ServerReloader,
}

impl Watch<ShardCore, ListenBind> for ServerWatch {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.fast.poll_ready(cx)
    }

    fn handle(&mut self, clock: &Clock, core: &mut ShardCore, bind: &mut ListenBind) {
        self.fast.handle(clock, &mut core.server, bind);
    }

    /// Applied here, then on the server's other threads (each applies it to its core).
    fn reload(
        &mut self,
        _clock: &Clock,
        core: &mut ShardCore,
        _bind: &mut ListenBind,
    ) -> Result<Vec<String>, String> {
        let (changes, r) = self.reloader.reload(&mut core.server)?;
        core.spread_reload(r);
        Ok(changes)
    }
}
