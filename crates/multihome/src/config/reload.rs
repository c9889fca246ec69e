//! Reloading a running client's or server's configuration (`multihome reload`, SIGHUP):
//! the new file is validated like at start, then checked against the settings in force,
//! and what changed is listed for the daemon to apply (`daemon/reload.rs`).
//!
//! What a reload may change: on a client, the links (a `[[link]]` added or removed, a
//! link's interface, server or cost changed) and the policies (`[policy]` default and
//! rules); on a server, the peers (`[[peer]]` added, removed, renamed, `allowed_ips`
//! changed; a peer is its public key), `default_policy` and the relays it hands its
//! clients (`[[relay]]`, docs/PROTOCOL.md §15.7). Everything else is fixed at start —
//! keys, the TUN device and its routes, sockets, timers, ciphers, a client's relays, name
//! resolution — and a file that changes any of it is refused, naming the key and its line,
//! and the running configuration stays in force: a reload applies all of a file or
//! nothing.
//!
//! Invariants: a link keeps its path id across reloads (matched by name), so its session
//! path, counters and estimates go on; a new link gets an id no link of the running
//! configuration holds, preferring one never used in this run, so a removed link's path
//! is not handed at once to another interface (the server follows a reused id to the new
//! address, as for detour paths, `daemon/detours.rs`). Ids stay below 16 (`MAX_PATHS`).

use super::client::{validate_with, ClientSettings, LinkSettings};
use super::server::{PeerSettings, ServerSettings};
use super::{ConfigError, Source};
use multihome_proto::path::PathId;
use multihome_proto::sched::MAX_PATHS;

/// What a reload changes in the links, by path id.
#[derive(Debug, Default)]
pub struct LinkDiff {
    /// Links new in the file.
    pub added: Vec<LinkSettings>,
    /// Links gone from the file.
    pub removed: Vec<LinkSettings>,
    /// Links whose interface or server changed (the socket is bound again), new settings.
    pub rebound: Vec<LinkSettings>,
    /// Links whose cost alone changed, new settings.
    pub recosted: Vec<LinkSettings>,
}

impl LinkDiff {
    /// Whether no link changes.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.rebound.is_empty()
            && self.recosted.is_empty()
    }
}

/// A validated reload: the new settings and what changed.
#[derive(Debug)]
pub struct ClientReload {
    /// The settings in force once it is applied.
    pub settings: ClientSettings,
    /// The links' changes.
    pub links: LinkDiff,
    /// Whether the policies changed (the classifier is replaced and stated to the server).
    pub policies_changed: bool,
}

impl ClientReload {
    /// One line per change, for the log and `multihome reload`.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        let l = &self.links;
        for x in &l.added {
            out.push(format!(
                "link `{}` added (interface {}, server {}, path {})",
                x.name, x.interface, x.server, x.id.0
            ));
        }
        for x in &l.removed {
            out.push(format!("link `{}` removed", x.name));
        }
        for x in &l.rebound {
            out.push(format!(
                "link `{}` now on interface {} to {}",
                x.name, x.interface, x.server
            ));
        }
        for x in &l.recosted {
            out.push(format!("link `{}` cost {}", x.name, x.cost));
        }
        if self.policies_changed {
            out.push(format!(
                "policies replaced ({} rules, default {})",
                self.settings.classifier.rules.len(),
                self.settings.classifier.default.name()
            ));
        }
        out
    }
}

/// Validates the new `client.toml` in `src` against `old`, the settings in force.
pub fn client(src: &Source<'_>, old: &ClientSettings) -> Result<ClientReload, ConfigError> {
    if old.naming.is_some() {
        return Err(src.err_file(
            "this client resolves its server (`servers`): its configuration cannot be reloaded",
            "restart the client to apply the new file",
        ));
    }
    let new = validate_with(src, |links| assign_ids(links, &old.links))?;
    fixed_keys(src, old, &new)?;
    let links = diff(&old.links, &new.links);
    if !links.is_empty() && !old.relays.is_empty() && links_moved(&links) {
        return Err(err_at_key(
            src,
            "link",
            "links cannot be added, removed or moved while detours through relays are \
             configured ([[relay]])"
                .into(),
            "restart the client to apply the new links (a cost may change on a reload)",
        ));
    }
    Ok(ClientReload {
        policies_changed: new.classifier != old.classifier,
        settings: new,
        links,
    })
}

/// Whether a link is added, removed or rebound (the detour manager numbers its paths after
/// the links it started with, so only costs may change under it).
fn links_moved(d: &LinkDiff) -> bool {
    !(d.added.is_empty() && d.removed.is_empty() && d.rebound.is_empty())
}

/// Gives each link of the new file its running id (same name), and each new one an id no
/// running link holds, preferring one no link of the old file held either.
pub(super) fn assign_ids(links: &mut [LinkSettings], old: &[LinkSettings]) {
    let held = |id: u8, links: &[LinkSettings]| links.iter().any(|l| l.id.0 == id);
    for l in links.iter_mut() {
        l.id = match old.iter().find(|o| o.name == l.name) {
            Some(o) => o.id,
            None => PathId(u8::MAX),
        };
    }
    for i in 0..links.len() {
        if links[i].id.0 != u8::MAX {
            continue;
        }
        let free = |avoid_old: bool| {
            (0..MAX_PATHS as u8).find(|&id| !(held(id, links) || avoid_old && held(id, old)))
        };
        // At most 16 links, all ids below 16: an id not taken by the new file exists.
        let id = free(true).or_else(|| free(false)).unwrap_or(i as u8);
        links[i].id = PathId(id);
    }
}

/// The links' changes from `old` to `new` (both with their ids assigned).
pub fn diff(old: &[LinkSettings], new: &[LinkSettings]) -> LinkDiff {
    let mut d = LinkDiff::default();
    for n in new {
        match old.iter().find(|o| o.id == n.id && o.name == n.name) {
            None => d.added.push(n.clone()),
            Some(o) if o.interface != n.interface || o.server != n.server => {
                d.rebound.push(n.clone())
            }
            Some(o) if o.cost != n.cost => d.recosted.push(n.clone()),
            Some(_) => {}
        }
    }
    for o in old {
        if !new.iter().any(|n| n.id == o.id && n.name == o.name) {
            d.removed.push(o.clone());
        }
    }
    d
}

/// Refuses a change of anything fixed at start, naming the first such key.
fn fixed_keys(
    src: &Source<'_>,
    old: &ClientSettings,
    new: &ClientSettings,
) -> Result<(), ConfigError> {
    refuse_first(
        src,
        "client",
        "[[link]] and [policy]",
        &[
            (
                "private_key_file",
                "private_key_file",
                old.private_key_file != new.private_key_file,
            ),
            (
                "server_public_key",
                "server_public_key",
                old.server_public_key != new.server_public_key,
            ),
            ("tun_name", "tun_name", old.tun_name != new.tun_name),
            (
                "tun_address",
                "tun_address",
                old.tun_addresses != new.tun_addresses,
            ),
            ("routes", "routes", old.routes != new.routes),
            (
                "control_socket",
                "control_socket",
                old.control_socket != new.control_socket,
            ),
            (
                "metrics_listen",
                "metrics_listen",
                old.metrics_listen != new.metrics_listen,
            ),
            ("detect_ms", "detect_ms", old.detect != new.detect),
            (
                "keepalive_ms",
                "keepalive_ms",
                old.keepalive != new.keepalive,
            ),
            (
                "failback_hold_ms",
                "failback_hold_ms",
                old.failback_hold != new.failback_hold,
            ),
            ("mtu", "mtu", old.mtu != new.mtu),
            (
                "aggregate_scheduler",
                "aggregate_scheduler",
                old.aggregate != new.aggregate,
            ),
            ("cipher", "cipher", old.ciphers != new.ciphers),
            ("[[relay]]", "relay", old.relays != new.relays),
            ("detours", "detours", old.detours != new.detours),
            (
                "kernel_copies",
                "kernel_copies",
                old.kernel_copies != new.kernel_copies,
            ),
            ("stream", "stream", old.stream != new.stream),
            ("hold_max_mb/hold_max_s", "hold_max_", old.hold != new.hold),
        ],
    )
}

/// The first of `changed` — (what the message names, the key located in the file, whether
/// it changed) — as an error, if any changed.
fn refuse_first(
    src: &Source<'_>,
    role: &str,
    may_change: &str,
    changed: &[(&str, &str, bool)],
) -> Result<(), ConfigError> {
    match changed.iter().find(|c| c.2) {
        Some((name, key, _)) => Err(err_at_key(
            src,
            key,
            format!("`{name}` changed: it is fixed while the {role} runs"),
            &format!(
                "restart the {role} to apply it (a reload changes {may_change} only), or put \
                 the old value back"
            ),
        )),
        None => Ok(()),
    }
}

/// An error on the first line that sets `key` (`key... =`, or the table `[key]` /
/// `[[key]]`), or on the file when no line does (the key was removed: its default applies).
fn err_at_key(src: &Source<'_>, key: &str, message: String, fix: &str) -> ConfigError {
    let mut at = 0;
    for line in src.text.split_inclusive('\n') {
        let t = line.trim_start();
        let name = t.trim_start_matches('[');
        let is_table =
            t.starts_with('[') && name.starts_with(key) && name[key.len()..].starts_with(']');
        let sets = !t.starts_with('[') && t.starts_with(key) && t[key.len()..].contains('=');
        if is_table || sets {
            return src.err(at + (line.len() - t.len()), message, fix);
        }
        at += line.len();
    }
    src.err_file(message, fix)
}

/// A validated server reload: the new settings and what changed.
#[derive(Debug)]
pub struct ServerReload {
    /// The settings in force once it is applied.
    pub settings: ServerSettings,
    /// Peers whose key is new.
    pub added: Vec<PeerSettings>,
    /// Peers whose key is gone (their sessions end).
    pub removed: Vec<PeerSettings>,
    /// Peers whose key stays but whose name or `allowed_ips` changed (new settings).
    pub changed: Vec<PeerSettings>,
    /// Whether `default_policy` changed.
    pub default_changed: bool,
    /// Whether the `[[relay]]` list handed to the clients changed.
    pub relays_changed: bool,
}

impl ServerReload {
    /// One line per change, for the log and `multihome reload`.
    pub fn describe(&self) -> Vec<String> {
        let nets = |p: &PeerSettings| {
            let v: Vec<String> = p.allowed_ips.iter().map(|n| n.to_string()).collect();
            v.join(", ")
        };
        let mut out: Vec<String> = Vec::new();
        out.extend(
            self.added
                .iter()
                .map(|p| format!("peer `{}` added ({})", p.name, nets(p))),
        );
        out.extend(
            self.removed
                .iter()
                .map(|p| format!("peer `{}` removed", p.name)),
        );
        out.extend(
            self.changed
                .iter()
                .map(|p| format!("peer `{}` now {}", p.name, nets(p))),
        );
        if self.default_changed {
            out.push(format!(
                "default_policy {}",
                self.settings.default_policy.name()
            ));
        }
        if self.relays_changed {
            let names: Vec<&str> = self
                .settings
                .relays
                .iter()
                .map(|r| r.name.as_str())
                .collect();
            out.push(match names.is_empty() {
                true => "relays handed out: none".to_string(),
                false => format!("relays handed out: {}", names.join(", ")),
            });
        }
        out
    }
}

fn specs(relays: &[super::detours::RelaySettings]) -> Vec<multihome_proto::detour::RelaySpec> {
    relays.iter().map(|r| r.spec()).collect()
}

/// Validates the new `server.toml` in `src` against `old`, the settings in force. Peers
/// are matched by public key (a key is the peer's identity; its session goes on).
pub fn server(src: &Source<'_>, old: &ServerSettings) -> Result<ServerReload, ConfigError> {
    if old.naming.is_some() {
        return Err(src.err_file(
            "this server runs a resolver ([naming]): its configuration cannot be reloaded",
            "restart the server to apply the new file",
        ));
    }
    let new = super::server::validate(src)?;
    let uplink = |s: &ServerSettings| s.uplink.as_ref().map(|u| u.0.clone());
    refuse_first(
        src,
        "server",
        "[[peer]], default_policy and [[relay]]",
        &[
            ("listen", "listen", old.listen != new.listen),
            (
                "private_key_file",
                "private_key_file",
                old.private_key_file != new.private_key_file,
            ),
            ("tun_name", "tun_name", old.tun_name != new.tun_name),
            (
                "tun_address",
                "tun_address",
                old.tun_addresses != new.tun_addresses,
            ),
            ("uplink", "uplink", uplink(old) != uplink(&new)),
            (
                "control_socket",
                "control_socket",
                old.control_socket != new.control_socket,
            ),
            (
                "metrics_listen",
                "metrics_listen",
                old.metrics_listen != new.metrics_listen,
            ),
            ("detect_ms", "detect_ms", old.detect != new.detect),
            (
                "keepalive_ms",
                "keepalive_ms",
                old.keepalive != new.keepalive,
            ),
            ("mtu", "mtu", old.mtu != new.mtu),
            ("cipher", "cipher", old.ciphers != new.ciphers),
            ("hold_max_mb/hold_max_s", "hold_max_", old.hold != new.hold),
            (
                "kernel_copies",
                "kernel_copies",
                old.kernel_copies != new.kernel_copies,
            ),
            ("stream", "stream", old.stream != new.stream),
            ("threads", "threads", old.threads != new.threads),
            (
                "redundant_copies",
                "redundant_copies",
                old.redundant_copies != new.redundant_copies,
            ),
            ("[naming]", "naming", new.naming.is_some()),
        ],
    )?;
    let find = |v: &[PeerSettings], p: &PeerSettings| {
        v.iter().find(|o| o.public_key == p.public_key).cloned()
    };
    Ok(ServerReload {
        added: new
            .peers
            .iter()
            .filter(|p| find(&old.peers, p).is_none())
            .cloned()
            .collect(),
        removed: old
            .peers
            .iter()
            .filter(|p| find(&new.peers, p).is_none())
            .cloned()
            .collect(),
        changed: new
            .peers
            .iter()
            .filter(|p| {
                find(&old.peers, p)
                    .is_some_and(|o| o.name != p.name || o.allowed_ips != p.allowed_ips)
            })
            .cloned()
            .collect(),
        default_changed: old.default_policy != new.default_policy,
        relays_changed: specs(&old.relays) != specs(&new.relays),
        settings: new,
    })
}
