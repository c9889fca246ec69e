//! `multihome check-config FILE`: checks a configuration file of any multihome daemon
//! without starting it — before a restart or a reload, or in a package's tests.
//!
//! The daemon is told by the file's top-level table: `[client]`, `[server]`, `[relay]`,
//! `[race]` or `[mptcp]` (mptcp-detours). The file gets the same validation the daemon
//! runs at start (syntax, unknown keys, values, names that refer to each other), with the
//! same errors: `FILE:LINE: message` and a `fix:` line. Unless `--offline`, what the daemon
//! would find on this machine is checked too: the private key file is readable and
//! well-formed, and every interface named exists. `--offline` is for a file written for
//! another machine (examples, configuration management).
//!
//! Invariant: nothing is changed on the machine (no socket, device, route or key file).

use crate::config::{self, ConfigError, Source};
use std::path::Path;

/// The daemon a configuration file is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `multihome client` (`[client]`).
    Client,
    /// `multihome server` (`[server]`).
    Server,
    /// `multihome relay` (`[relay]`).
    Relay,
    /// `multihome race` (`[race]`).
    Race,
    /// `multihome mptcp-detours` (`[mptcp]`).
    MptcpDetours,
}

/// The top-level tables that tell the kind, in the order they are listed in messages.
const TABLES: [(&str, Kind); 5] = [
    ("client", Kind::Client),
    ("server", Kind::Server),
    ("relay", Kind::Relay),
    ("race", Kind::Race),
    ("mptcp", Kind::MptcpDetours),
];

impl Kind {
    /// Its top-level table.
    pub fn table(self) -> &'static str {
        TABLES
            .iter()
            .find(|(_, k)| *k == self)
            .map_or("", |(t, _)| t)
    }

    /// The control socket it uses when the file sets none.
    pub fn default_socket(self) -> &'static str {
        match self {
            Kind::Client => config::client_default_socket(),
            Kind::Server => config::server_default_socket(),
            Kind::Relay => multihome_relay::config::DEFAULT_RELAY_SOCKET,
            Kind::Race => multihome_race::daemon::config::DEFAULT_RACE_SOCKET,
            Kind::MptcpDetours => config::mptcp::DEFAULT_MPTCP_SOCKET,
        }
    }

    /// The command that runs it.
    pub fn command(self) -> &'static str {
        match self {
            Kind::Client => "client",
            Kind::Server => "server",
            Kind::Relay => "relay",
            Kind::Race => "race",
            Kind::MptcpDetours => "mptcp-detours",
        }
    }
}

/// Which daemon `src` configures: exactly one of the tables in [`TABLES`] (a client's
/// `[[relay]]` list is an array, not the relay's `[relay]` table).
pub fn kind(src: &Source<'_>) -> Result<Kind, ConfigError> {
    let doc: toml::Table = src.parse()?;
    let found: Vec<(&str, Kind)> = TABLES
        .into_iter()
        .filter(|(name, _)| doc.get(*name).is_some_and(toml::Value::is_table))
        .collect();
    let names = || TABLES.map(|(n, _)| format!("[{n}]")).join(", ");
    match found.as_slice() {
        [(_, k)] => Ok(*k),
        [] => Err(src.err_file(
            format!(
                "not a multihome configuration: none of the tables {}",
                names()
            ),
            "start the file with the table of the daemon it configures (see the examples)",
        )),
        many => Err(src.err_file(
            format!(
                "tables of several daemons: {}",
                many.iter()
                    .map(|(n, _)| format!("[{n}]"))
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
            "use one file per daemon",
        )),
    }
}

/// Checks the file at `path`: the daemon it configures and a one-line summary of it, or
/// the first error.
pub fn check(path: &Path, offline: bool) -> Result<(Kind, String), ConfigError> {
    let text = config::read_file(path)?;
    let src = Source { path, text: &text };
    let kind = kind(&src)?;
    let summary = match kind {
        Kind::Client => client(&src, offline)?,
        Kind::Server => server(&src, offline)?,
        Kind::Relay => multihome_relay::config::check(path, &text, !offline)?,
        Kind::Race => race(&src, offline)?,
        Kind::MptcpDetours => config::mptcp::check(path, &text, !offline)?,
    };
    Ok((kind, summary))
}

/// An interface named at `line` must exist (unless offline).
fn interface(src: &Source<'_>, offline: bool, name: &str, line: usize) -> Result<(), ConfigError> {
    if offline || multihome_io::netlink::link_index(name).is_ok() {
        return Ok(());
    }
    Err(ConfigError {
        file: src.path.to_path_buf(),
        line,
        message: format!("interface `{name}` does not exist on this machine"),
        fix: "use a name shown by `ip link`, create the interface first, or check the file \
              for another machine with --offline"
            .into(),
    })
}

fn client(src: &Source<'_>, offline: bool) -> Result<String, ConfigError> {
    let s = config::client::validate(src)?;
    if !offline {
        config::read_private_key(src, s.private_key_at, &s.private_key_file)?;
        for l in &s.links {
            interface(src, offline, &l.interface, l.interface_line)?;
        }
    }
    let links: Vec<String> = s
        .links
        .iter()
        .map(|l| format!("{} on {}", l.name, l.interface))
        .collect();
    let server = match &s.naming {
        Some(_) => "resolved by name".to_string(),
        None => s.links[0].server.to_string(),
    };
    Ok(format!(
        "{} link(s) ({}), server {server}, {} policy rule(s), default {}",
        s.links.len(),
        links.join(", "),
        s.classifier.rules.len(),
        s.classifier.default.name()
    ))
}

fn server(src: &Source<'_>, offline: bool) -> Result<String, ConfigError> {
    let s = config::server::validate(src)?;
    if !offline {
        config::read_private_key(src, s.private_key_at, &s.private_key_file)?;
        if let Some((up, line)) = &s.uplink {
            interface(src, offline, up, *line)?;
        }
    }
    let peers: Vec<&str> = s.peers.iter().map(|p| p.name.as_str()).collect();
    Ok(format!(
        "listen {}, {} peer(s) ({}), NAT {}, default policy {}",
        s.listen,
        s.peers.len(),
        peers.join(", "),
        s.uplink
            .as_ref()
            .map_or("off".to_string(), |(u, _)| format!("out of {u}")),
        s.default_policy.name()
    ))
}

fn race(src: &Source<'_>, offline: bool) -> Result<String, ConfigError> {
    let s = multihome_race::daemon::config::validate(src)?;
    let names = s
        .uplinks
        .iter()
        .map(|u| u.interface.as_str())
        .chain(s.lan_interfaces.iter().map(String::as_str));
    for name in names {
        // The race config keeps no line per interface: the first line naming it.
        let line = src
            .text
            .lines()
            .position(|l| l.contains(&format!("\"{name}\"")))
            .map_or(0, |i| i + 1);
        interface(src, offline, name, line)?;
    }
    let uplinks: Vec<String> = s
        .uplinks
        .iter()
        .map(|u| format!("{} on {}", u.name, u.interface))
        .collect();
    Ok(format!(
        "{} uplink(s) ({}), mode {}",
        s.uplinks.len(),
        uplinks.join(", "),
        format!("{:?}", s.mode).to_lowercase()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples")
            .join(name)
    }

    /// Every example is valid and is told apart by its table (the client's `[[relay]]`
    /// list is not the relay's `[relay]` table).
    #[test]
    fn every_example_is_valid_offline_and_of_its_kind() {
        for (file, kind) in [
            ("client.toml", Kind::Client),
            ("server.toml", Kind::Server),
            ("relay.toml", Kind::Relay),
            ("race.toml", Kind::Race),
            ("mptcp-detours.toml", Kind::MptcpDetours),
        ] {
            let (k, summary) = check(&example(file), true).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(k, kind, "{file}");
            assert!(!summary.is_empty());
        }
    }

    #[test]
    fn the_machine_is_checked_unless_offline() {
        let dir = tempfile::tempdir().unwrap();
        let text = std::fs::read_to_string(example("relay.toml")).unwrap();
        let path = dir.path().join("relay.toml");
        std::fs::write(&path, &text).unwrap();
        // No relay.key beside it: an error on the key's line, unless offline.
        let e = check(&path, false).unwrap_err();
        let line = 1 + text
            .lines()
            .position(|l| l.starts_with("private_key_file"))
            .unwrap();
        assert_eq!(e.line, line, "{e}");
        assert!(e.fix.contains("keygen"), "{e}");
        assert!(check(&path, true).is_ok());
        // An interface that does not exist, on its line.
        let text = std::fs::read_to_string(example("server.toml")).unwrap();
        let path = dir.path().join("server.toml");
        let key = crate::keyfile::generate(&dir.path().join("server.key"));
        key.unwrap();
        std::fs::write(&path, text.replace("\"eth0\"", "\"nosuchif0\"")).unwrap();
        let e = check(&path, false).unwrap_err();
        let line = 1 + text.lines().position(|l| l.starts_with("uplink")).unwrap();
        assert_eq!(e.line, line, "{e}");
        assert!(e.message.contains("`nosuchif0` does not exist"), "{e}");
    }

    #[test]
    fn a_file_of_no_daemon_or_of_several_is_refused() {
        let src = |text: &'static str| Source {
            path: Path::new("x.toml"),
            text,
        };
        let e = kind(&src("[clint]\nx = 1\n")).unwrap_err();
        assert!(e.message.contains("not a multihome configuration"), "{e}");
        assert_eq!(e.line, 0);
        let e = kind(&src("[client]\n[server]\n")).unwrap_err();
        assert!(e.message.contains("[client] and [server]"), "{e}");
        let e = kind(&src("[client\n")).unwrap_err();
        assert_eq!(e.line, 1, "{e}");
    }

    /// An error inside the file is the daemon's own, with its line.
    #[test]
    fn errors_are_located_as_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let text = std::fs::read_to_string(example("client.toml")).unwrap();
        let path = dir.path().join("client.toml");
        std::fs::write(&path, text.replace("detect_ms = 1000", "detect_ms = 5")).unwrap();
        let e = check(&path, true).unwrap_err();
        let line = 1 + text
            .lines()
            .position(|l| l.starts_with("detect_ms"))
            .unwrap();
        assert_eq!(e.line, line, "{e}");
        assert!(e.message.contains("detect_ms = 5 is out of range"), "{e}");
    }
}
