//! Validation of the `[naming]` sections: the client's `servers = "resolve"` with its
//! resolvers and trusted server keys, and the server's resolver with its store.
//! Reference: docs/CONFIG.md (`[naming]`).

use super::client::{parse_addr, parse_key};
use super::raw::{ClientNamingSection, ServerNamingSection};
use super::{relative_to, ConfigError, Source};
use multihome_proto::crypto::PublicKey;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use toml::Spanned;

/// The client resolves its server (`servers = "resolve"` or a list of resolvers).
#[derive(Debug, Clone)]
pub struct ClientNaming {
    /// Resolvers asked first (servers' `[naming] listen` addresses).
    pub resolvers: Vec<SocketAddr>,
    /// Server keys the client accepts.
    pub trusted: Vec<PublicKey>,
    /// Lease of the client's own record.
    pub lease: Duration,
}

/// Where a server keeps records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSettings {
    /// A redb file.
    Embedded(PathBuf),
    /// An etcd cluster's client URLs.
    Etcd(Vec<String>),
}

/// The server's resolver.
#[derive(Debug, Clone)]
pub struct ServerNaming {
    /// The resolver's UDP socket.
    pub listen: SocketAddr,
    /// The store.
    pub store: StoreSettings,
    /// Tunnel addresses announced in the server's record.
    pub advertise: Vec<SocketAddr>,
    /// Resolver address announced.
    pub resolver_advertise: SocketAddr,
    /// Sessions this server is meant to carry.
    pub capacity: u32,
    /// Lease of the server's record.
    pub lease: Duration,
}

fn lease(
    src: &Source<'_>,
    v: Option<&Spanned<u64>>,
    default: u64,
    min: u64,
) -> Result<Duration, ConfigError> {
    match v {
        None => Ok(Duration::from_secs(default)),
        Some(v) if (min..=3600).contains(v.get_ref()) => Ok(Duration::from_secs(*v.get_ref())),
        Some(v) => Err(src.err(
            v.span().start,
            format!("lease_s = {} is out of range", v.get_ref()),
            format!("use {min} to 3600 seconds"),
        )),
    }
}

/// `servers` and `[naming]` of client.toml; `None` when the client has a fixed server.
pub(super) fn parse_client(
    src: &Source<'_>,
    servers: Option<&Spanned<toml::Value>>,
    sec: Option<&Spanned<ClientNamingSection>>,
) -> Result<Option<ClientNaming>, ConfigError> {
    let Some(servers) = servers else {
        return match sec {
            Some(n) => Err(src.err(
                n.span().start,
                "[naming] without `servers` in [client]",
                "add `servers = \"resolve\"` to [client], or remove [naming]",
            )),
            None => Ok(None),
        };
    };
    let at = servers.span().start;
    let mut resolvers = Vec::new();
    match servers.get_ref() {
        toml::Value::String(s) if s == "resolve" => {}
        toml::Value::Array(list) => {
            for v in list {
                let s = v.as_str().unwrap_or_default().to_string();
                resolvers.push(parse_addr(src, &Spanned::new(at..at, s), "servers entry")?);
            }
        }
        _ => return Err(src.err(
            at,
            "`servers` is neither \"resolve\" nor a list",
            "write servers = \"resolve\" (resolvers in [naming]) or a list of resolver addresses",
        )),
    }
    let no_naming = || {
        src.err(
            at,
            "`servers` needs a [naming] section with trusted_servers",
            "add [naming] with trusted_servers = [\"<server public key>\", ...]",
        )
    };
    let n = sec.ok_or_else(no_naming)?.get_ref();
    for r in &n.resolvers {
        resolvers.push(parse_addr(src, r, "resolver")?);
    }
    if resolvers.is_empty() {
        return Err(src.err(
            at,
            "no resolver to ask",
            "list resolver addresses in [naming] resolvers (a server's [naming] listen)",
        ));
    }
    if n.trusted_servers.is_empty() {
        return Err(no_naming());
    }
    Ok(Some(ClientNaming {
        resolvers,
        trusted: n
            .trusted_servers
            .iter()
            .map(|k| parse_key(src, k))
            .collect::<Result<_, _>>()?,
        lease: lease(src, n.lease_s.as_ref(), 30, 5)?,
    }))
}

/// `[naming]` of server.toml; `tunnel` is `[server] listen`.
pub(super) fn parse_server(
    src: &Source<'_>,
    sec: Option<&Spanned<ServerNamingSection>>,
    tunnel: SocketAddr,
) -> Result<Option<ServerNaming>, ConfigError> {
    let Some(sec) = sec else { return Ok(None) };
    let (at, n) = (sec.span().start, sec.get_ref());
    let listen = parse_addr(src, &n.listen, "naming listen")?;
    let store = match n.store.get_ref().as_str() {
        "embedded" => {
            let p = n.path.as_ref().ok_or_else(|| {
                src.err(
                    n.store.span().start,
                    "store = \"embedded\" needs `path`",
                    "add path = \"/var/lib/multihome/naming.redb\"",
                )
            })?;
            StoreSettings::Embedded(relative_to(src.path, p.get_ref()))
        }
        "etcd" => {
            let eps: Vec<String> = n.etcd.iter().map(|e| e.get_ref().clone()).collect();
            if let Some(bad) = n.etcd.iter().find(|e| !e.get_ref().starts_with("http://")) {
                return Err(src.err(
                    bad.span().start,
                    format!("etcd endpoint `{}` is not an http:// URL", bad.get_ref()),
                    "write it as http://192.0.2.10:2379",
                ));
            }
            if eps.is_empty() {
                return Err(src.err(
                    n.store.span().start,
                    "store = \"etcd\" needs `etcd` endpoints",
                    "add etcd = [\"http://192.0.2.10:2379\", ...] (every member's client URL)",
                ));
            }
            StoreSettings::Etcd(eps)
        }
        other => {
            return Err(src.err(
                n.store.span().start,
                format!("unknown store `{other}`"),
                "use embedded (one server) or etcd (several servers)",
            ))
        }
    };
    let mut advertise = n
        .advertise
        .iter()
        .map(|a| parse_addr(src, a, "advertise entry"))
        .collect::<Result<Vec<_>, _>>()?;
    super::addresses::check_advertised(src, tunnel, &n.advertise, &advertise)?;
    if advertise.is_empty() {
        advertise.push(tunnel);
    }
    let resolver_advertise = match &n.resolver_advertise {
        Some(a) => parse_addr(src, a, "resolver_advertise")?,
        None => listen,
    };
    if advertise.len() > 4
        || advertise
            .iter()
            .chain([&resolver_advertise])
            .any(|a| a.ip().is_unspecified())
    {
        return Err(src.err(
            at,
            "the addresses announced to clients must be 1 to 4 specific addresses",
            "set advertise = [\"IP:PORT\"] (tunnel) and resolver_advertise = \"IP:PORT\" when listening on 0.0.0.0",
        ));
    }
    let capacity = match &n.capacity {
        None => 1000,
        Some(c) if (1..=1_000_000).contains(c.get_ref()) => *c.get_ref(),
        Some(c) => {
            return Err(src.err(
                c.span().start,
                format!("capacity = {} is out of range", c.get_ref()),
                "use 1 to 1000000 sessions",
            ))
        }
    };
    Ok(Some(ServerNaming {
        listen,
        store,
        advertise,
        resolver_advertise,
        capacity,
        lease: lease(src, n.lease_s.as_ref(), 10, 2)?,
    }))
}

/// The address links start with while their server is resolved (replaced before use).
pub const UNRESOLVED: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0);

/// With `servers`, the server is resolved: a fixed `server` or `server_public_key` (in
/// [client] or a [[link]]) contradicts it, and relays and kernel copies, which are set up
/// for one fixed server, are not combined with it yet.
pub(super) fn check_resolved(
    src: &Source<'_>,
    f: &super::raw::ClientFile,
) -> Result<(), ConfigError> {
    let c = &f.client;
    let fixed = c
        .server
        .as_ref()
        .map(|s| s.span().start)
        .or(c.server_public_key.as_ref().map(|s| s.span().start))
        .or(f
            .link
            .iter()
            .find_map(|l| l.get_ref().server.as_ref().map(|s| s.span().start)));
    if let Some(at) = fixed {
        return Err(src.err(
            at,
            "a fixed server together with `servers`",
            "remove server and server_public_key: with servers the server is resolved",
        ));
    }
    if let Some(r) = f.relay.first() {
        return Err(src.err(
            r.span().start,
            "[[relay]] together with `servers`",
            "relays need a fixed server for now: remove [[relay]] or `servers`",
        ));
    }
    if c.kernel_copies {
        return Err(src.err_file(
            "kernel_copies together with `servers`",
            "kernel copies need a fixed server for now: remove one of them",
        ));
    }
    Ok(())
}
