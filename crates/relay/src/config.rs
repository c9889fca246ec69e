//! `relay.toml`, parsed and validated into [`RelaySettings`]. Unknown keys are errors;
//! every error names the file, the line and the fix (`multihome_runtime::config`, as for
//! every daemon). Reference: docs/CONFIG.md.

use ipnet::IpNet;
use multihome_proto::crypto::{PublicKey, StaticSecret};
use multihome_proto::detour::{Mode, ModeSet};
use multihome_runtime::config::{read_file, relative_to, ConfigError, Source};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RelayFile {
    relay: RelaySection,
    #[serde(default)]
    client: Vec<Spanned<ClientSection>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RelaySection {
    listen: Spanned<String>,
    private_key_file: Spanned<String>,
    #[serde(default = "default_name")]
    name: Spanned<String>,
    modes: Option<Spanned<Vec<String>>>,
    ports: Option<Spanned<String>>,
    lifetime_s: Option<Spanned<u64>>,
    max_per_client: Option<Spanned<usize>>,
    max_entries: Option<Spanned<usize>>,
    max_requests_per_s: Option<Spanned<u32>>,
    #[serde(default)]
    allowed_destinations: Vec<Spanned<String>>,
    control_socket: Option<String>,
    dashboard: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientSection {
    name: String,
    public_key: Spanned<String>,
}

fn default_name() -> Spanned<String> {
    Spanned::new(0..0, "main".to_string())
}

/// One allowed client.
#[derive(Debug, Clone)]
pub struct ClientSettings {
    /// Name (logs).
    pub name: String,
    /// Its public key.
    pub public_key: PublicKey,
}

/// Validated relay settings.
#[derive(Debug, Clone)]
pub struct RelaySettings {
    /// UDP address of the request socket (tunnel sockets bind its IP too).
    pub listen: SocketAddr,
    /// The relay's private key.
    pub private_key: StaticSecret,
    /// Name of this relay: the nftables table is `multihome_relay_<name>`.
    pub name: String,
    /// Modes offered.
    pub modes: ModeSet,
    /// Relay ports handed out (inclusive).
    pub ports: (u16, u16),
    /// Life of a detour from its last request.
    pub lifetime: Duration,
    /// Detours per client.
    pub max_per_client: usize,
    /// Detours in all.
    pub max_entries: usize,
    /// Requests verified per second.
    pub max_requests_per_s: u32,
    /// Allowed server prefixes (empty: any public address).
    pub allowed_destinations: Vec<IpNet>,
    /// Control socket.
    pub control_socket: PathBuf,
    /// The web dashboard's address (none: no dashboard).
    pub dashboard: Option<SocketAddr>,
    /// Allowed clients.
    pub clients: Vec<ClientSettings>,
}

/// Default control socket of the relay.
pub const DEFAULT_RELAY_SOCKET: &str = "/run/multihome/relay.sock";

/// Reads and validates `path`.
pub fn load(path: &Path) -> Result<RelaySettings, ConfigError> {
    let text = read_file(path)?;
    parse(path, &text)
}

/// Validates the text of a relay config (`path` for messages and relative key paths).
pub fn parse(path: &Path, text: &str) -> Result<RelaySettings, ConfigError> {
    parse_with(path, text, private_key)
}

/// Validates a relay config as [`parse`] does, the key file too unless `read_key` is false
/// (`multihome check-config --offline`: a file written for another machine); returns a
/// one-line summary. The settings are not returned: without the key they cannot run.
pub fn check(path: &Path, text: &str, read_key: bool) -> Result<String, ConfigError> {
    let s = if read_key {
        parse(path, text)?
    } else {
        parse_with(path, text, |_, _| Ok(StaticSecret::from_bytes([1; 32])))?
    };
    let modes: Vec<&str> = [Mode::Nat, Mode::Tunnel, Mode::NatTcp]
        .into_iter()
        .filter(|m| s.modes.contains(*m))
        .map(|m| m.name())
        .collect();
    Ok(format!(
        "name `{}`, listen {}, {} client(s), ports {}-{}, modes {}",
        s.name,
        s.listen,
        s.clients.len(),
        s.ports.0,
        s.ports.1,
        modes.join("+")
    ))
}

type KeyReader = fn(&Source<'_>, &Spanned<String>) -> Result<StaticSecret, ConfigError>;

fn parse_with(path: &Path, text: &str, key: KeyReader) -> Result<RelaySettings, ConfigError> {
    let src = Source { path, text };
    let f: RelayFile = src.parse()?;
    let r = &f.relay;
    let listen: SocketAddr = r.listen.get_ref().parse().map_err(|_| {
        src.err(
            r.listen.span().start,
            format!("listen `{}` is not an address:port", r.listen.get_ref()),
            "write e.g. \"0.0.0.0:51900\" or \"[::]:51900\"",
        )
    })?;
    let positive = |v: &Option<Spanned<usize>>, default: usize, what: &str| match v {
        None => Ok(default),
        Some(s) if *s.get_ref() > 0 => Ok(*s.get_ref()),
        Some(s) => Err(src.err(
            s.span().start,
            format!("{what} must be at least 1"),
            "raise it",
        )),
    };
    Ok(RelaySettings {
        listen,
        private_key: key(&src, &r.private_key_file)?,
        name: table_name(&src, &r.name)?,
        modes: modes(&src, r.modes.as_ref())?,
        ports: ports(&src, r.ports.as_ref(), listen)?,
        lifetime: lifetime(&src, r.lifetime_s.as_ref())?,
        max_per_client: positive(&r.max_per_client, 16, "max_per_client")?,
        max_entries: positive(&r.max_entries, 1024, "max_entries")?,
        max_requests_per_s: max_requests_per_s(&src, r.max_requests_per_s.as_ref())?,
        allowed_destinations: destinations(&src, &r.allowed_destinations)?,
        control_socket: r
            .control_socket
            .as_deref()
            .unwrap_or(DEFAULT_RELAY_SOCKET)
            .into(),
        dashboard: multihome_runtime::config::dashboard_addr(&src, r.dashboard.as_ref())?,
        clients: clients(&src, &f.client)?,
    })
}

/// The relay's private key, from its file (relative to the config's folder).
fn private_key(src: &Source<'_>, file: &Spanned<String>) -> Result<StaticSecret, ConfigError> {
    let key_path = relative_to(src.path, file.get_ref());
    let at = file.span().start;
    let key_text = std::fs::read_to_string(&key_path).map_err(|e| {
        src.err(
            at,
            format!("cannot read private key file {}: {e}", key_path.display()),
            "create it with `multihome keygen --private-key-file FILE`",
        )
    })?;
    StaticSecret::from_base64(&key_text).map_err(|e| {
        src.err(
            at,
            format!("private key file {} is malformed: {e}", key_path.display()),
            "regenerate it with `multihome keygen --private-key-file FILE`",
        )
    })
}

/// The relay's name, which names its nftables table.
fn table_name(src: &Source<'_>, name: &Spanned<String>) -> Result<String, ConfigError> {
    let n = name.get_ref();
    let ok =
        !n.is_empty() && n.len() <= 32 && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ok {
        return Err(src.err(
            name.span().start,
            format!("name `{n}` is not usable in an nftables table name"),
            "use 1 to 32 letters, digits or _",
        ));
    }
    Ok(n.clone())
}

/// The modes offered (both unless listed).
fn modes(src: &Source<'_>, m: Option<&Spanned<Vec<String>>>) -> Result<ModeSet, ConfigError> {
    let Some(m) = m else {
        return Ok(ModeSet {
            nat: true,
            tunnel: true,
        });
    };
    let mut set = ModeSet {
        nat: false,
        tunnel: false,
    };
    for x in m.get_ref() {
        match x.as_str() {
            "nat" => set.nat = true,
            "tunnel" => set.tunnel = true,
            other => {
                return Err(src.err(
                    m.span().start,
                    format!("unknown mode `{other}`"),
                    "use \"nat\" and/or \"tunnel\"",
                ))
            }
        }
    }
    if !set.nat && !set.tunnel {
        return Err(src.err(
            m.span().start,
            "no mode offered",
            "list \"nat\" and/or \"tunnel\"",
        ));
    }
    Ok(set)
}

/// The relay ports handed out: `LOW-HIGH`, not containing the listen port.
fn ports(
    src: &Source<'_>,
    p: Option<&Spanned<String>>,
    listen: SocketAddr,
) -> Result<(u16, u16), ConfigError> {
    let Some(p) = p else {
        return Ok((40000, 40999));
    };
    let bad = || {
        src.err(
            p.span().start,
            format!("ports `{}` is not a range LOW-HIGH", p.get_ref()),
            "write e.g. \"40000-40999\" (1..65535, LOW <= HIGH)",
        )
    };
    let (lo, hi) = p.get_ref().split_once('-').ok_or_else(bad)?;
    let lo: u16 = lo.trim().parse().map_err(|_| bad())?;
    let hi: u16 = hi.trim().parse().map_err(|_| bad())?;
    if lo == 0 || hi < lo {
        return Err(bad());
    }
    if (lo..=hi).contains(&listen.port()) {
        return Err(src.err(
            p.span().start,
            "the port range contains the listen port",
            "move the range or the listen port apart",
        ));
    }
    Ok((lo, hi))
}

/// A detour's life from its last request (10 s to a day; 300 s by default).
fn lifetime(src: &Source<'_>, l: Option<&Spanned<u64>>) -> Result<Duration, ConfigError> {
    match l {
        None => Ok(Duration::from_secs(300)),
        Some(l) if (10..=86_400).contains(l.get_ref()) => Ok(Duration::from_secs(*l.get_ref())),
        Some(l) => Err(src.err(
            l.span().start,
            format!("lifetime_s {} is out of range", l.get_ref()),
            "use 10 to 86400 seconds",
        )),
    }
}

/// Requests verified per second (2000 by default).
fn max_requests_per_s(src: &Source<'_>, m: Option<&Spanned<u32>>) -> Result<u32, ConfigError> {
    match m {
        None => Ok(2000),
        Some(m) if *m.get_ref() > 0 => Ok(*m.get_ref()),
        Some(m) => Err(src.err(
            m.span().start,
            "max_requests_per_s must be at least 1",
            "raise it",
        )),
    }
}

/// Allowed server prefixes.
fn destinations(src: &Source<'_>, list: &[Spanned<String>]) -> Result<Vec<IpNet>, ConfigError> {
    list.iter()
        .map(|d| {
            d.get_ref().parse::<IpNet>().map_err(|_| {
                src.err(
                    d.span().start,
                    format!("`{}` is not a prefix", d.get_ref()),
                    "write e.g. \"203.0.113.0/24\"",
                )
            })
        })
        .collect()
}

/// The allowed clients: at least one, each with its own key.
fn clients(
    src: &Source<'_>,
    list: &[Spanned<ClientSection>],
) -> Result<Vec<ClientSettings>, ConfigError> {
    let mut clients: Vec<ClientSettings> = Vec::new();
    for c in list {
        let at = c.span().start;
        let c = c.get_ref();
        let key = PublicKey::from_base64(c.public_key.get_ref()).map_err(|e| {
            src.err(
                c.public_key.span().start,
                format!("public_key of client `{}`: {e}", c.name),
                "paste the output of `multihome pubkey --private-key-file FILE` of that client",
            )
        })?;
        if clients.iter().any(|x| x.public_key == key) {
            return Err(src.err(
                at,
                format!("client `{}` repeats another client's key", c.name),
                "each [[client]] needs its own key",
            ));
        }
        clients.push(ClientSettings {
            name: c.name.clone(),
            public_key: key,
        });
    }
    if clients.is_empty() {
        return Err(src.err_file(
            "no [[client]] is configured",
            "add a [[client]] with name and public_key per allowed client",
        ));
    }
    Ok(clients)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_key(body: &str) -> (tempfile::TempDir, Result<RelaySettings, ConfigError>) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("relay.key"),
            StaticSecret::from_bytes([1; 32]).to_base64(),
        )
        .unwrap();
        let path = dir.path().join("relay.toml");
        let r = parse(&path, body);
        (dir, r)
    }

    const CLIENT: &str =
        "[[client]]\nname = \"a\"\npublic_key = \"AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=\"\n";

    #[test]
    fn example_parses_with_defaults() {
        let text = format!(
            "[relay]\nlisten = \"0.0.0.0:51900\"\nprivate_key_file = \"relay.key\"\n{CLIENT}"
        );
        let (_d, r) = with_key(&text);
        let s = r.unwrap();
        assert_eq!(s.ports, (40000, 40999));
        assert!(s.modes.nat && s.modes.tunnel);
        assert_eq!(s.max_per_client, 16);
        assert_eq!(s.name, "main");
    }

    #[test]
    fn shipped_example_parses() {
        let text = include_str!("../../../examples/relay.toml");
        let (_d, r) = with_key(text);
        let s = r.unwrap();
        assert_eq!(s.clients.len(), 1);
        assert_eq!(s.allowed_destinations.len(), 1);
        assert_eq!(s.lifetime, Duration::from_secs(300));
    }

    #[test]
    fn errors_are_located() {
        for (body, line, needle) in [
            ("[relay]\nlisten = \"0.0.0.0:51900\"\nprivate_key_file = \"relay.key\"\nbogus = 1\n", 4, "unknown field"),
            ("[relay]\nlisten = \"nowhere\"\nprivate_key_file = \"relay.key\"\n", 2, "not an address"),
            ("[relay]\nlisten = \"0.0.0.0:51900\"\nprivate_key_file = \"relay.key\"\nports = \"5-2\"\n", 4, "range"),
            ("[relay]\nlisten = \"0.0.0.0:51900\"\nprivate_key_file = \"relay.key\"\nmodes = [\"vpn\"]\n", 4, "unknown mode"),
            ("[relay]\nlisten = \"0.0.0.0:51900\"\nprivate_key_file = \"missing.key\"\n", 3, "cannot read"),
            ("[relay]\nlisten = \"0.0.0.0:51900\"\nprivate_key_file = \"relay.key\"\nname = \"a b\"\n", 4, "name"),
        ] {
            let (_d, r) = with_key(&format!("{body}{CLIENT}"));
            let e = r.unwrap_err();
            assert_eq!(e.line, line, "{e}");
            assert!(e.to_string().contains(needle), "{e}");
        }
        let (_d, r) =
            with_key("[relay]\nlisten = \"0.0.0.0:51900\"\nprivate_key_file = \"relay.key\"\n");
        assert!(r.unwrap_err().message.contains("no [[client]]"));
    }
}
