//! `mptcp-detours.toml`: settings of `multihome mptcp-detours`, which adds subflows through
//! relays' NAT detours to this host's kernel MPTCP connections (docs/CONFIG.md).
//!
//! Invariants: unknown keys are errors; every error names the line and the fix; relays have
//! distinct names and addresses (at most `MAX_RELAYS`); durations are within sane bounds.

use super::client::parse_key;
use super::detours::{check_relay_count, relay_name_address};
use super::raw::RelaySection;
use super::{read_file, read_private_key, relative_to, ConfigError, Source};
use ipnet::IpNet;
use multihome_proto::crypto::StaticSecret;
use multihome_proto::detour::{RelaySpec, Target};
use serde::Deserialize;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

/// Default control socket of `multihome mptcp-detours`.
pub const DEFAULT_MPTCP_SOCKET: &str = "/run/multihome/mptcp.sock";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MptcpFile {
    mptcp: MptcpSection,
    #[serde(default)]
    relay: Vec<Spanned<RelaySection>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MptcpSection {
    private_key_file: Spanned<String>,
    detours: Option<Spanned<u32>>,
    #[serde(default)]
    servers: Vec<Spanned<String>>,
    max_connections: Option<Spanned<usize>>,
    check_interval_s: Option<Spanned<u64>>,
    join_timeout_s: Option<Spanned<u64>>,
    backoff_s: Option<Spanned<u64>>,
    max_failures: Option<Spanned<usize>>,
    control_socket: Option<String>,
}

/// Validated settings.
#[derive(Debug, Clone)]
pub struct MptcpSettings {
    /// Our key (relays list its public half).
    pub private_key: StaticSecret,
    /// Subflows through relays per connection (N).
    pub detours: usize,
    /// Servers whose connections get detours (empty: all).
    pub targets: Vec<Target>,
    /// Connections served at once.
    pub max_connections: usize,
    /// Relay liveness check interval.
    pub check_interval: Duration,
    /// Subflow join deadline.
    pub join_timeout: Duration,
    /// Rest of a relay that stopped answering.
    pub backoff: Duration,
    /// Failures per (connection, relay) before giving the relay up for that connection.
    pub max_failures: u32,
    /// Status socket.
    pub control_socket: PathBuf,
    /// The relays.
    pub relays: Vec<RelaySpec>,
}

/// Reads and validates `path`.
pub fn load(path: &Path) -> Result<MptcpSettings, ConfigError> {
    let text = read_file(path)?;
    parse(path, &text)
}

/// Validates the text of an `mptcp-detours.toml` (`path` for messages and the key path).
pub fn parse(path: &Path, text: &str) -> Result<MptcpSettings, ConfigError> {
    parse_with(path, text, true)
}

/// Validates as [`parse`] does, the key file too unless `read_key` is false (`multihome
/// check-config --offline`); returns a one-line summary. The settings are not returned:
/// without the key they cannot run.
pub fn check(path: &Path, text: &str, read_key: bool) -> Result<String, ConfigError> {
    let s = parse_with(path, text, read_key)?;
    Ok(format!(
        "{} relay(s), {} detour(s) per connection, {}",
        s.relays.len(),
        s.detours,
        if s.targets.is_empty() {
            "every outgoing MPTCP connection".to_string()
        } else {
            format!("{} server target(s)", s.targets.len())
        }
    ))
}

fn parse_with(path: &Path, text: &str, read_key: bool) -> Result<MptcpSettings, ConfigError> {
    let src = Source { path, text };
    let f: MptcpFile = src.parse()?;
    let m = &f.mptcp;
    let key_path = relative_to(path, m.private_key_file.get_ref());
    let private_key = if read_key {
        read_private_key(&src, m.private_key_file.span().start, &key_path)?
    } else {
        StaticSecret::from_bytes([1; 32])
    };
    let relays = relays(&src, &f.relay)?;
    let ranged = |v: &Option<Spanned<u64>>, default: u64, lo: u64, hi: u64, what: &str| match v {
        None => Ok(Duration::from_secs(default)),
        Some(s) if (lo..=hi).contains(s.get_ref()) => Ok(Duration::from_secs(*s.get_ref())),
        Some(s) => Err(src.err(
            s.span().start,
            format!("{what} = {} is out of range", s.get_ref()),
            format!("use {lo} to {hi} seconds"),
        )),
    };
    let detours = match &m.detours {
        None => 2,
        Some(d) if (1..=8).contains(d.get_ref()) => *d.get_ref() as usize,
        Some(d) => {
            return Err(src.err(
                d.span().start,
                format!("detours = {} is out of range", d.get_ref()),
                "use 1 to 8 subflows through relays per connection (Brennan's default is 2)",
            ))
        }
    };
    Ok(MptcpSettings {
        private_key,
        detours,
        targets: m
            .servers
            .iter()
            .map(|s| target(&src, s))
            .collect::<Result<_, _>>()?,
        max_connections: positive(&src, &m.max_connections, 1024, "max_connections")?,
        check_interval: ranged(&m.check_interval_s, 5, 1, 3600, "check_interval_s")?,
        join_timeout: ranged(&m.join_timeout_s, 5, 1, 120, "join_timeout_s")?,
        backoff: ranged(&m.backoff_s, 30, 1, 86_400, "backoff_s")?,
        max_failures: positive(&src, &m.max_failures, 2, "max_failures")?.min(1000) as u32,
        control_socket: m
            .control_socket
            .as_deref()
            .unwrap_or(DEFAULT_MPTCP_SOCKET)
            .into(),
        relays,
    })
}

fn positive(
    src: &Source<'_>,
    v: &Option<Spanned<usize>>,
    default: usize,
    what: &str,
) -> Result<usize, ConfigError> {
    match v {
        None => Ok(default),
        Some(s) if *s.get_ref() > 0 => Ok(*s.get_ref()),
        Some(s) => Err(src.err(
            s.span().start,
            format!("{what} must be at least 1"),
            "raise it",
        )),
    }
}

/// `"203.0.113.0/24"`, `"203.0.113.7"`, `"203.0.113.7:5201"` or `"[2001:db8::1]:443"`.
fn target(src: &Source<'_>, s: &Spanned<String>) -> Result<Target, ConfigError> {
    let t = s.get_ref().as_str();
    let parsed = if let Ok(a) = t.parse::<SocketAddr>() {
        Some(Target {
            net: IpNet::from(a.ip()),
            port: Some(a.port()),
        })
    } else if let Ok(n) = t.parse::<IpNet>() {
        Some(Target { net: n, port: None })
    } else {
        t.parse::<IpAddr>().ok().map(|ip| Target {
            net: IpNet::from(ip),
            port: None,
        })
    };
    parsed.ok_or_else(|| {
        src.err(
            s.span().start,
            format!("server `{t}` is not an address, address:port or prefix"),
            "write e.g. \"203.0.113.0/24\", \"203.0.113.7\" or \"203.0.113.7:5201\"",
        )
    })
}

fn relays(src: &Source<'_>, list: &[Spanned<RelaySection>]) -> Result<Vec<RelaySpec>, ConfigError> {
    if list.is_empty() {
        return Err(src.err_file(
            "no [[relay]] is configured",
            "add a [[relay]] with address and public_key (the relay's `listen` and key)",
        ));
    }
    check_relay_count(src, list, "keep the relays with the best routes")?;
    let mut out: Vec<RelaySpec> = Vec::new();
    for spanned in list {
        let r = spanned.get_ref();
        if let Some(m) = r.mode.as_ref().filter(|m| m.get_ref() != "nat") {
            return Err(src.err(
                m.span().start,
                format!("relay mode `{}` cannot carry MPTCP subflows", m.get_ref()),
                "remove `mode` (subflows always use the relay's kernel NAT)",
            ));
        }
        let seen = out.iter().map(|x| (x.name.as_str(), x.address));
        let (name, address) = relay_name_address(src, spanned, seen)?;
        out.push(RelaySpec {
            name,
            address,
            key: parse_key(src, &r.public_key)?,
            mode: multihome_proto::detour::Mode::NatTcp,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RELAY: &str = "[[relay]]\nname = \"r\"\naddress = \"192.0.2.1:51900\"\npublic_key = \"AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=\"\n";

    fn with_key(body: &str) -> (tempfile::TempDir, Result<MptcpSettings, ConfigError>) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("c.key"),
            StaticSecret::from_bytes([1; 32]).to_base64(),
        )
        .unwrap();
        let r = parse(&dir.path().join("m.toml"), body);
        (dir, r)
    }

    #[test]
    fn defaults_and_targets() {
        let (_d, r) = with_key(&format!(
            "[mptcp]\nprivate_key_file = \"c.key\"\nservers = [\"203.0.113.0/24\", \"198.51.100.7:5201\", \"2001:db8::1\"]\n{RELAY}"
        ));
        let s = r.unwrap();
        assert_eq!(s.detours, 2);
        assert_eq!(s.check_interval, Duration::from_secs(5));
        assert_eq!(s.targets.len(), 3);
        assert!(s.targets[1].matches("198.51.100.7:5201".parse().unwrap()));
        assert!(!s.targets[1].matches("198.51.100.7:80".parse().unwrap()));
        assert!(s.targets[0].matches("203.0.113.9:1".parse().unwrap()));
        assert_eq!(s.relays[0].mode, multihome_proto::detour::Mode::NatTcp);
    }

    #[test]
    fn shipped_example_parses() {
        let (_d, r) = with_key(
            &include_str!("../../../../examples/mptcp-detours.toml").replace("client.key", "c.key"),
        );
        let s = r.unwrap();
        assert_eq!(s.relays.len(), 2);
        assert_eq!(s.detours, 2);
    }

    #[test]
    fn errors_are_located() {
        for (body, line, needle) in [
            (
                "[mptcp]\nprivate_key_file = \"c.key\"\nbogus = 1\n",
                3,
                "unknown field",
            ),
            (
                "[mptcp]\nprivate_key_file = \"c.key\"\ndetours = 0\n",
                3,
                "out of range",
            ),
            (
                "[mptcp]\nprivate_key_file = \"c.key\"\nservers = [\"x\"]\n",
                3,
                "not an address",
            ),
            (
                "[mptcp]\nprivate_key_file = \"c.key\"\njoin_timeout_s = 0\n",
                3,
                "out of range",
            ),
            (
                "[mptcp]\nprivate_key_file = \"nope.key\"\n",
                2,
                "cannot read",
            ),
        ] {
            let (_d, r) = with_key(&format!("{body}{RELAY}"));
            let e = r.unwrap_err();
            assert_eq!(e.line, line, "{e}");
            assert!(e.to_string().contains(needle), "{e}");
        }
        let (_d, r) = with_key("[mptcp]\nprivate_key_file = \"c.key\"\n");
        assert!(r.unwrap_err().message.contains("no [[relay]]"));
        let (_d, r) = with_key(&format!(
            "[mptcp]\nprivate_key_file = \"c.key\"\n{RELAY}mode = \"tunnel\"\n"
        ));
        assert!(r.unwrap_err().message.contains("cannot carry"));
    }
}
