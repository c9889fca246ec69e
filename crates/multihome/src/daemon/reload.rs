//! The client daemon's side of a reload (`multihome reload`, SIGHUP): re-read the config
//! file, have `config::reload` check it against the settings in force, check the machine
//! (a new or moved link's interface must exist, as at start), then apply the changes
//! through the core's own calls — the session, its keys and every connection through the
//! tunnel go on.
//!
//! - a link added: its socket is bound (`LinkBind::set_link`) and the core gets the path
//!   (`Client::add_link`, cost, usable or not); it then carries traffic as any link does;
//! - a link removed: its socket is closed (`LinkBind::retire`) and its path goes down
//!   (`ClientCore::retire_link`), so what it held is sent again over the other links;
//! - a link moved (interface or server): bound again and re-pointed (`Client::add_link`);
//! - a cost changed: `Client::set_link_cost`;
//! - policies changed: `Client::set_classifier`, stated to the server under a new epoch.
//!
//! Invariant: all or nothing — anything refused (the file, a key fixed at start, a missing
//! interface) is found before the first change, and the settings in force stay as they were.

use super::client::link_usable;
use super::core::ClientCore;
use super::io::LinkBind;
use super::Clock;
use crate::config::reload::ClientReload;
use crate::config::{self, ClientSettings, ConfigError, Source};
use std::path::{Path, PathBuf};

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
}
