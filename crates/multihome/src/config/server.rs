//! Validation of `server.toml` into `ServerSettings`.

use super::client::{
    check_ifname, parse_addr, parse_cipher, parse_detect, parse_hold, parse_keepalive, parse_key,
    parse_mtu, parse_net, parse_policy,
};
use super::raw::ServerFile;
use super::{relative_to, ConfigError, Source};
use ipnet::IpNet;
use multihome_proto::crypto::{CipherSet, PublicKey};
use multihome_proto::policy::Policy;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use toml::Spanned;

/// One allowed client.
#[derive(Debug, Clone)]
pub struct PeerSettings {
    /// Name.
    pub name: String,
    /// Its public key.
    pub public_key: PublicKey,
    /// Inner prefixes routed to it.
    pub allowed_ips: Vec<IpNet>,
}

/// Validated server settings.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// UDP listen address.
    pub listen: SocketAddr,
    /// Private key file.
    pub private_key_file: PathBuf,
    /// Byte offset of `private_key_file`.
    pub private_key_at: usize,
    /// TUN name.
    pub tun_name: String,
    /// The TUN device's inner addresses: one IPv4 and/or one IPv6 (`super::addresses`).
    pub tun_addresses: Vec<IpNet>,
    /// NAT uplink interface, and the line of its key.
    pub uplink: Option<(String, usize)>,
    /// Control socket.
    pub control_socket: PathBuf,
    /// Prometheus listen address.
    pub metrics_listen: Option<SocketAddr>,
    /// The web dashboard's address (`dashboard`; none: no dashboard).
    pub dashboard: Option<SocketAddr>,
    /// Detection time.
    pub detect: Duration,
    /// Probe interval of idle sessions (`keepalive_ms`).
    pub keepalive: Duration,
    /// TUN MTU.
    pub mtu: u32,
    /// Policy for downstream flows not yet seen from the client.
    pub default_policy: Policy,
    /// Data ciphers accepted in handshakes.
    pub ciphers: CipherSet,
    /// Allowed clients.
    pub peers: Vec<PeerSettings>,
    /// Store-and-forward: most bytes held per client, and for how long, while it has no
    /// live path.
    pub hold: (usize, Duration),
    /// Kernel fast path for downstream `redundant` copies (nftables `dup`;
    /// `multihome_io::dup_server`).
    pub kernel_copies: bool,
    /// Stream mode (`stream = true`): an MPTCP listener on `listen`'s address and port.
    pub stream: bool,
    /// Congestion control of stream mode's MPTCP subflows (`stream_congestion_control`).
    pub stream_congestion_control: String,
    /// Copies of a downstream `redundant` packet (`redundant_copies`; adaptive if unset).
    pub redundant_copies: Option<u8>,
    /// The resolver and its store (`[naming]`).
    pub naming: Option<super::naming::ServerNaming>,
    /// Relays handed to the clients (`[[relay]]`, docs/PROTOCOL.md §15.7).
    pub relays: Vec<super::detours::RelaySettings>,
    /// Data-path threads, each owning a share of the sessions (`threads`; default: one
    /// per core, one with `kernel_copies`).
    pub threads: u16,
}

/// Default control socket of the server.
pub const DEFAULT_SERVER_SOCKET: &str = "/run/multihome/server.sock";

/// Validates a parsed server file.
pub fn validate(src: &Source<'_>) -> Result<ServerSettings, ConfigError> {
    let f: ServerFile = src.parse()?;
    let s = &f.server;
    let mut peers: Vec<PeerSettings> = Vec::new();
    // A set, not a scan of the list so far: a server may list thousands of peers.
    let mut keys = std::collections::HashSet::new();
    for p in &f.peer {
        let at = p.span().start;
        let p = p.get_ref();
        let key = parse_key(src, &p.public_key)?;
        if !keys.insert(key) {
            return Err(src.err(
                at,
                format!("peer `{}` repeats another peer's key", p.name),
                "each [[peer]] needs its own key",
            ));
        }
        if p.allowed_ips.is_empty() {
            return Err(src.err(
                at,
                format!("peer `{}` has no allowed_ips", p.name),
                "list at least the client's tunnel address, e.g. [\"10.200.0.2/32\"]",
            ));
        }
        peers.push(PeerSettings {
            name: p.name.clone(),
            public_key: key,
            allowed_ips: p
                .allowed_ips
                .iter()
                .map(|a| parse_net(src, a, "allowed_ips entry"))
                .collect::<Result<_, _>>()?,
        });
    }
    if peers.is_empty() {
        return Err(src.err_file(
            "no [[peer]] is configured",
            "add a [[peer]] with name, public_key and allowed_ips per client",
        ));
    }
    let uplink = match &s.uplink {
        Some(u) => Some((check_ifname(src, u)?, src.err(u.span().start, "", "").line)),
        None => None,
    };
    let listen = parse_addr(src, &s.listen, "listen")?;
    let mtu = parse_mtu(src, s.mtu.as_ref())?;
    Ok(ServerSettings {
        listen,
        private_key_file: relative_to(src.path, s.private_key_file.get_ref()),
        private_key_at: s.private_key_file.span().start,
        tun_name: check_ifname(src, &s.tun_name)?,
        tun_addresses: super::addresses::parse_tun_addresses(src, &s.tun_address)?,
        uplink,
        control_socket: s
            .control_socket
            .as_deref()
            .unwrap_or(DEFAULT_SERVER_SOCKET)
            .into(),
        metrics_listen: s
            .metrics_listen
            .as_ref()
            .map(|m| parse_addr(src, m, "metrics_listen"))
            .transpose()?,
        dashboard: s
            .dashboard
            .as_ref()
            .map(|m| parse_addr(src, m, "dashboard"))
            .transpose()?,
        detect: parse_detect(src, s.detect_ms.as_ref())?,
        keepalive: parse_keepalive(src, s.keepalive_ms.as_ref())?,
        mtu,
        default_policy: match &s.default_policy {
            Some(p) => parse_policy(src, p, None)?,
            None => Policy::Best,
        },
        ciphers: parse_cipher(src, s.cipher.as_ref())?,
        peers,
        hold: parse_hold(src, s.hold_max_mb.as_ref(), s.hold_max_s.as_ref())?,
        kernel_copies: s.kernel_copies,
        stream: s.stream,
        stream_congestion_control: super::stream::parse_congestion_control(
            src,
            s.stream_congestion_control.as_ref(),
        )?,
        redundant_copies: match &s.redundant_copies {
            Some(c) if *c.get_ref() == 0 => {
                return Err(src.err(
                    c.span().start,
                    "redundant_copies = 0",
                    "use 1 or more, or omit it for adaptive copies",
                ))
            }
            c => c.as_ref().map(|c| *c.get_ref()),
        },
        naming: super::naming::parse_server(src, f.naming.as_ref(), listen)?,
        relays: super::detours::parse_server(src, &f.relay, mtu)?,
        threads: parse_threads(src, s.threads.as_ref(), s.kernel_copies)?,
    })
}

/// `threads`: 1 to `MAX_SHARDS`; unset, one per core (one with `kernel_copies`, whose
/// nftables table describes one socket's sessions).
fn parse_threads(
    src: &Source<'_>,
    threads: Option<&Spanned<u16>>,
    kernel_copies: bool,
) -> Result<u16, ConfigError> {
    use multihome_proto::endpoint::MAX_SHARDS;
    let Some(t) = threads else {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let cores = u16::try_from(cores).unwrap_or(MAX_SHARDS).min(MAX_SHARDS);
        return Ok(if kernel_copies { 1 } else { cores });
    };
    let n = *t.get_ref();
    if n == 0 || n > MAX_SHARDS {
        return Err(src.err(
            t.span().start,
            format!("threads = {n}"),
            format!("use 1 to {MAX_SHARDS}, or omit it for one per core"),
        ));
    }
    if n > 1 && kernel_copies {
        return Err(src.err(
            t.span().start,
            format!("threads = {n} together with kernel_copies"),
            "the kernel fast path serves one thread: set threads = 1, or turn kernel_copies off",
        ));
    }
    Ok(n)
}
