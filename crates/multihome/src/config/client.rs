//! Validation of `client.toml` into `ClientSettings`.

use super::raw::{ClientFile, LinkSection, PolicySection, RuleSection};
use super::{relative_to, ConfigError, Source};
use ipnet::IpNet;
use multihome_proto::crypto::{CipherSet, DataCipher, PublicKey};
use multihome_proto::path::PathId;
use multihome_proto::policy::{Classifier, LinkRule, Policy, Rule};
use multihome_proto::session::AggregateScheduler;
use multihome_proto::wire::stated::MAX_STATED_RULES;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use toml::Spanned;

/// One link of the client.
#[derive(Debug, Clone)]
pub struct LinkSettings {
    /// The link's path id: its position in the file, or on a reload the id the running
    /// daemon gave it (`super::reload`), so a link keeps its path across reloads.
    pub id: PathId,
    /// Name shown in status.
    pub name: String,
    /// Interface the link's socket is bound to.
    pub interface: String,
    /// Line of the `interface` key (to report a missing interface).
    pub interface_line: usize,
    /// Server endpoint over this link.
    pub server: SocketAddr,
    /// Relative cost of the link (default 1): redundancy and realtime FEC parity prefer
    /// cheap links (`multihome_proto::path::PathConfig::cost`).
    pub cost: u32,
}

/// Validated client settings.
#[derive(Debug, Clone)]
pub struct ClientSettings {
    /// Private key file.
    pub private_key_file: PathBuf,
    /// Byte offset of `private_key_file` (for key errors).
    pub private_key_at: usize,
    /// Server's public key.
    pub server_public_key: PublicKey,
    /// TUN device name.
    pub tun_name: String,
    /// The TUN device's inner addresses: one IPv4 and/or one IPv6 (`super::addresses`).
    pub tun_addresses: Vec<IpNet>,
    /// Prefixes routed into the tunnel.
    pub routes: Vec<IpNet>,
    /// Control socket path.
    pub control_socket: PathBuf,
    /// Prometheus listen address.
    pub metrics_listen: Option<SocketAddr>,
    /// The web dashboard's address (`dashboard`; none: no dashboard).
    pub dashboard: Option<SocketAddr>,
    /// Dead-link detection time.
    pub detect: Duration,
    /// Probe interval of an idle session's links (`keepalive_ms`).
    pub keepalive: Duration,
    /// Failback hold of the `best` policy.
    pub failback_hold: Duration,
    /// TUN MTU.
    pub mtu: u32,
    /// Scheduler for `aggregate`.
    pub aggregate: AggregateScheduler,
    /// Data ciphers offered in the handshake.
    pub ciphers: CipherSet,
    /// Links.
    pub links: Vec<LinkSettings>,
    /// Flow classifier.
    pub classifier: Classifier,
    /// Relays offering detours (`[[relay]]`).
    pub relays: Vec<super::detours::RelaySettings>,
    /// Detour paths in use at most (`detours`), through the client's relays and those its
    /// server hands out.
    pub detours: usize,
    /// Kernel fast path for `redundant` copies (nftables `dup`; `multihome_io::dup`).
    pub kernel_copies: bool,
    /// Store-and-forward: most bytes held, and for how long, while no path is live.
    pub hold: (usize, Duration),
    /// The server is resolved (`servers`): then `server_public_key` and the links' server
    /// are placeholders until the first resolution (`daemon/naming.rs`).
    pub naming: Option<super::naming::ClientNaming>,
    /// Stream mode (`[stream]`): LAN TCP ended here and carried over kernel MPTCP.
    pub stream: Option<super::stream::StreamSettings>,
}

/// Default control socket of the client.
pub const DEFAULT_CLIENT_SOCKET: &str = "/run/multihome/client.sock";

/// TUN MTU so that a full packet plus our overhead (52 bytes; feedback is piggybacked
/// only where it fits) plus an IPv6 + UDP header (48) fits a 1500-byte link MTU.
pub const DEFAULT_MTU: u32 = 1500 - 48 - 52;

pub(super) fn parse_addr(
    src: &Source<'_>,
    s: &Spanned<String>,
    what: &str,
) -> Result<SocketAddr, ConfigError> {
    s.get_ref().parse().map_err(|_| {
        src.err(
            s.span().start,
            format!("{what} `{}` is not an IP address with a port", s.get_ref()),
            "write it as 192.0.2.1:7000 or [2001:db8::1]:7000",
        )
    })
}

pub(super) fn parse_net(
    src: &Source<'_>,
    s: &Spanned<String>,
    what: &str,
) -> Result<IpNet, ConfigError> {
    s.get_ref().parse().map_err(|_| {
        src.err(
            s.span().start,
            format!(
                "{what} `{}` is not an address with a prefix length",
                s.get_ref()
            ),
            "write it as 10.200.0.2/24 or 2001:db8::/64",
        )
    })
}

pub(super) fn parse_key(src: &Source<'_>, s: &Spanned<String>) -> Result<PublicKey, ConfigError> {
    PublicKey::from_base64(s.get_ref()).map_err(|e| {
        src.err(
            s.span().start,
            format!("public key is malformed: {e}"),
            "paste the line printed by `multihome keygen` (44 base64 characters)",
        )
    })
}

pub(super) fn parse_policy(
    src: &Source<'_>,
    s: &Spanned<String>,
    copies: Option<u8>,
) -> Result<Policy, ConfigError> {
    match s.get_ref().as_str() {
        "best" => Ok(Policy::Best),
        "redundant" => Ok(Policy::Redundant { copies }),
        "aggregate" => Ok(Policy::Aggregate),
        "realtime" => Ok(Policy::realtime(multihome_proto::policy::DEFAULT_DEADLINE)),
        other
            if LINK_KINDS
                .iter()
                .any(|k| other.starts_with(&format!("{k}:"))) =>
        {
            Err(src.err(
                s.span().start,
                format!("`{other}`: a link policy is the client's"),
                "the server does not know the client's links: write it in the client's \
                 [policy] (the client states it to the server)",
            ))
        }
        other => Err(src.err(
            s.span().start,
            format!("unknown policy `{other}`"),
            "use one of: best, redundant, aggregate, realtime, only:LINK, prefer:LINK, \
             backup:LINK",
        )),
    }
}

/// The link policies, written `KIND:LINK` with a `[[link]]` name.
const LINK_KINDS: [&str; 3] = ["only", "prefer", "backup"];

/// A rule's (or the default) policy on the client: `parse_policy`'s, or a link policy
/// `only:`, `prefer:` or `backup:` naming one of `links` (its path id, `LinkSettings::id`).
fn parse_client_policy(
    src: &Source<'_>,
    s: &Spanned<String>,
    copies: Option<u8>,
    links: &[LinkSettings],
) -> Result<Policy, ConfigError> {
    let Some((kind, name)) = s.get_ref().split_once(':') else {
        return parse_policy(src, s, copies);
    };
    if !LINK_KINDS.contains(&kind) {
        return parse_policy(src, s, copies);
    }
    let Some(link) = links.iter().find(|l| l.name == name) else {
        let names: Vec<&str> = links.iter().map(|l| l.name.as_str()).collect();
        return Err(src.err(
            s.span().start,
            format!(
                "`{}` names no link: there is no [[link]] `{name}`",
                s.get_ref()
            ),
            format!("use one of the [[link]] names: {}", names.join(", ")),
        ));
    };
    let link = link.id;
    Ok(Policy::Link(match kind {
        "only" => LinkRule::Only(link),
        "prefer" => LinkRule::Prefer(link),
        _ => LinkRule::Backup(link),
    }))
}

pub(super) fn check_ifname(src: &Source<'_>, s: &Spanned<String>) -> Result<String, ConfigError> {
    let n = s.get_ref();
    if n.is_empty() || n.len() > 15 || n.contains(['/', ' ', '\t']) {
        return Err(src.err(
            s.span().start,
            format!("`{n}` is not a valid interface name"),
            "use 1 to 15 characters without '/' or spaces (see `ip link`)",
        ));
    }
    Ok(n.clone())
}

pub(super) fn parse_detect(
    src: &Source<'_>,
    d: Option<&Spanned<u64>>,
) -> Result<Duration, ConfigError> {
    match d {
        None => Ok(Duration::from_secs(1)),
        Some(v) if (100..=60_000).contains(v.get_ref()) => Ok(Duration::from_millis(*v.get_ref())),
        Some(v) => Err(src.err(
            v.span().start,
            format!("detect_ms = {} is out of range", v.get_ref()),
            "use a value from 100 to 60000 milliseconds",
        )),
    }
}

/// `keepalive_ms`, 1000–25000, default 5000: how often an idle session probes each link
/// (`session/keepalive.rs`). At most 25 s: UDP bindings of NATs last 30 s at least for most
/// middleboxes, and the probes are what keeps them.
pub(super) fn parse_keepalive(
    src: &Source<'_>,
    k: Option<&Spanned<u64>>,
) -> Result<Duration, ConfigError> {
    match k {
        None => Ok(multihome_proto::session::DEFAULT_KEEPALIVE),
        Some(v) if (1_000..=25_000).contains(v.get_ref()) => {
            Ok(Duration::from_millis(*v.get_ref()))
        }
        Some(v) => Err(src.err(
            v.span().start,
            format!("keepalive_ms = {} is out of range", v.get_ref()),
            "use a value from 1000 to 25000 milliseconds",
        )),
    }
}

/// Store-and-forward limits (`hold_max_mb`, 1–1024, default 16; `hold_max_s`, 1–3600,
/// default 60): what a session holds while it has no live path (`session/store.rs`).
pub(super) fn parse_hold(
    src: &Source<'_>,
    mb: Option<&Spanned<u64>>,
    secs: Option<&Spanned<u64>>,
) -> Result<(usize, Duration), ConfigError> {
    let bounded = |v: Option<&Spanned<u64>>, key: &str, max: u64, default: u64| match v {
        None => Ok(default),
        Some(v) if (1..=max).contains(v.get_ref()) => Ok(*v.get_ref()),
        Some(v) => Err(src.err(
            v.span().start,
            format!("{key} = {} is out of range", v.get_ref()),
            format!("use a value from 1 to {max}"),
        )),
    };
    let mb = bounded(mb, "hold_max_mb", 1024, 16)?;
    let secs = bounded(secs, "hold_max_s", 3600, 60)?;
    Ok(((mb as usize) << 20, Duration::from_secs(secs)))
}

/// `cipher`: which data ciphers this side offers (client) or accepts (server). `auto`
/// offers AES-256-GCM only where this CPU has AES instructions; ChaCha20-Poly1305 is
/// always in the set, so two sides always agree on something.
pub(super) fn parse_cipher(
    src: &Source<'_>,
    c: Option<&Spanned<String>>,
) -> Result<CipherSet, ConfigError> {
    match c.map(|c| (c.get_ref().as_str(), c.span().start)) {
        None | Some(("auto", _)) => Ok(CipherSet::hardware()),
        Some((name, at)) => name
            .parse::<DataCipher>()
            .map(CipherSet::with)
            .map_err(|e| {
                src.err(
                    at,
                    e,
                    "use auto (the default), chacha20-poly1305 or aes-256-gcm",
                )
            }),
    }
}

pub(super) fn parse_mtu(src: &Source<'_>, m: Option<&Spanned<u32>>) -> Result<u32, ConfigError> {
    match m {
        None => Ok(DEFAULT_MTU),
        Some(v) if (576..=9000).contains(v.get_ref()) => Ok(*v.get_ref()),
        Some(v) => Err(src.err(
            v.span().start,
            format!("mtu = {} is out of range", v.get_ref()),
            "use 576 to 9000",
        )),
    }
}

fn parse_classifier(
    src: &Source<'_>,
    p: &PolicySection,
    links: &[LinkSettings],
) -> Result<Classifier, ConfigError> {
    let default = match &p.default {
        Some(d) => parse_client_policy(src, d, None, links)?,
        None => Policy::Best,
    };
    // The rules are stated to the server (`session/stated.rs`), which takes so many.
    if let Some(r) = p.rule.get(MAX_STATED_RULES) {
        return Err(src.err(
            r.policy.span().start,
            format!("more than {MAX_STATED_RULES} [[policy.rule]] sections"),
            format!("use at most {MAX_STATED_RULES} rules (merge port ranges)"),
        ));
    }
    let mut rules = Vec::new();
    for r in &p.rule {
        let copies = r.copies.as_ref().map(|c| *c.get_ref());
        if let Some(c) = &r.copies {
            if !(1..=16).contains(c.get_ref()) {
                return Err(src.err(
                    c.span().start,
                    format!("copies = {}", c.get_ref()),
                    "use 1 to 16 (there are at most 16 links), or omit for all links",
                ));
            }
        }
        let protocol = match r
            .protocol
            .as_ref()
            .map(|p| (p.get_ref().as_str(), p.span().start))
        {
            None | Some(("any", _)) => None,
            Some(("tcp", _)) => Some(6),
            Some(("udp", _)) => Some(17),
            Some(("icmp", _)) => Some(1),
            Some((other, at)) => {
                return Err(src.err(
                    at,
                    format!("unknown protocol `{other}`"),
                    "use tcp, udp, icmp or any",
                ))
            }
        };
        let ports = match &r.ports {
            None => None,
            Some(s) => Some(parse_ports(s.get_ref()).ok_or_else(|| {
                src.err(
                    s.span().start,
                    format!("bad port range `{}`", s.get_ref()),
                    "write \"5060\" or \"5000-5999\" (low ≤ high)",
                )
            })?),
        };
        let dscp = match &r.dscp {
            Some(d) if *d.get_ref() > 63 => {
                return Err(src.err(
                    d.span().start,
                    "dscp above 63",
                    "DSCP is 6 bits: use 0..=63 (EF is 46)",
                ))
            }
            d => d.as_ref().map(|d| *d.get_ref()),
        };
        let policy = realtime_keys(src, r, parse_client_policy(src, &r.policy, copies, links)?)?;
        rules.push(Rule {
            name: r.name.clone(),
            protocol,
            ports,
            dscp,
            policy,
        });
    }
    Ok(Classifier { rules, default })
}

/// A rule's `deadline_ms` and `fec` keys applied to its `policy` (both are errors on a
/// rule that is not `realtime`).
fn realtime_keys(
    src: &Source<'_>,
    r: &RuleSection,
    mut policy: Policy,
) -> Result<Policy, ConfigError> {
    if let Some(d) = &r.deadline_ms {
        let ms = *d.get_ref();
        if !matches!(policy, Policy::Realtime { .. }) {
            return Err(src.err(
                d.span().start,
                "deadline_ms on a rule whose policy is not realtime",
                "remove it, or set policy = \"realtime\"",
            ));
        }
        if !(10..=10_000).contains(&ms) {
            return Err(src.err(
                d.span().start,
                format!("deadline_ms = {ms} is out of range"),
                "use 10 to 10000 (voice: 150, interactive video: 200-400)",
            ));
        }
        policy = Policy::realtime(Duration::from_millis(u64::from(ms)));
    }
    if let Some(f) = &r.fec {
        let Policy::Realtime { deadline, .. } = policy else {
            return Err(src.err(
                f.span().start,
                "fec on a rule whose policy is not realtime",
                "remove it, or set policy = \"realtime\"",
            ));
        };
        policy = Policy::Realtime {
            deadline,
            fec: *f.get_ref(),
        };
    }
    Ok(policy)
}

fn parse_ports(s: &str) -> Option<(u16, u16)> {
    let (lo, hi) = match s.split_once('-') {
        Some((a, b)) => (a.trim().parse().ok()?, b.trim().parse().ok()?),
        None => {
            let p = s.trim().parse().ok()?;
            (p, p)
        }
    };
    (lo <= hi).then_some((lo, hi))
}

/// Validates a parsed client file.
pub fn validate(src: &Source<'_>) -> Result<ClientSettings, ConfigError> {
    validate_with(src, |_| {})
}

/// Validates a parsed client file; `assign_ids` may renumber the links (a reload keeps
/// each link's running path id) before the policies that name links are resolved.
pub(super) fn validate_with(
    src: &Source<'_>,
    assign_ids: impl FnOnce(&mut [LinkSettings]),
) -> Result<ClientSettings, ConfigError> {
    let f: ClientFile = src.parse()?;
    let c = &f.client;
    let naming = super::naming::parse_client(src, c.servers.as_ref(), f.naming.as_ref())?;
    if naming.is_some() {
        super::naming::check_resolved(src, &f)?;
    }
    let default_server = match naming {
        Some(_) => Some(super::naming::UNRESOLVED),
        None => c
            .server
            .as_ref()
            .map(|s| parse_addr(src, s, "server"))
            .transpose()?,
    };
    let server_public_key = match (&naming, &c.server_public_key) {
        (Some(_), _) => PublicKey([0; 32]),
        (None, Some(k)) => parse_key(src, k)?,
        (None, None) => {
            return Err(src.err_file(
                "[client] has no server_public_key",
                "paste the server's public key (`multihome pubkey`), or resolve it with servers = \"resolve\"",
            ))
        }
    };
    let mut links = parse_links(src, &f.link, default_server)?;
    assign_ids(&mut links);
    let classifier = parse_classifier(src, &f.policy, &links)?;
    let aggregate = parse_scheduler(src, c.aggregate_scheduler.as_ref())?;
    let (relays, detours) = super::detours::parse(src, &f.relay, c.detours.as_ref(), links.len())?;
    let tun_addresses = super::addresses::parse_tun_addresses(src, &c.tun_address)?;
    let routes: Vec<IpNet> = c
        .routes
        .iter()
        .map(|r| parse_net(src, r, "route"))
        .collect::<Result<_, _>>()?;
    super::addresses::check_route_families(src, &c.routes, &routes, &tun_addresses)?;
    Ok(ClientSettings {
        private_key_file: relative_to(src.path, c.private_key_file.get_ref()),
        private_key_at: c.private_key_file.span().start,
        server_public_key,
        tun_name: check_ifname(src, &c.tun_name)?,
        tun_addresses,
        routes,
        control_socket: c
            .control_socket
            .as_deref()
            .unwrap_or(DEFAULT_CLIENT_SOCKET)
            .into(),
        metrics_listen: c
            .metrics_listen
            .as_ref()
            .map(|m| parse_addr(src, m, "metrics_listen"))
            .transpose()?,
        dashboard: c
            .dashboard
            .as_ref()
            .map(|m| parse_addr(src, m, "dashboard"))
            .transpose()?,
        detect: parse_detect(src, c.detect_ms.as_ref())?,
        keepalive: parse_keepalive(src, c.keepalive_ms.as_ref())?,
        failback_hold: Duration::from_millis(c.failback_hold_ms.unwrap_or(3000)),
        mtu: parse_mtu(src, c.mtu.as_ref())?,
        aggregate,
        ciphers: parse_cipher(src, c.cipher.as_ref())?,
        links,
        classifier,
        relays,
        detours,
        kernel_copies: c.kernel_copies,
        hold: parse_hold(src, c.hold_max_mb.as_ref(), c.hold_max_s.as_ref())?,
        naming,
        stream: super::stream::parse(src, f.stream.as_ref())?,
    })
}

/// The `[[link]]` sections: at least one, at most 16, each named once, each with a server
/// (its own or `[client]`'s) and a cost in 1..=1000.
fn parse_links(
    src: &Source<'_>,
    raw: &[Spanned<LinkSection>],
    default_server: Option<SocketAddr>,
) -> Result<Vec<LinkSettings>, ConfigError> {
    if raw.is_empty() {
        return Err(src.err_file(
            "no [[link]] is configured",
            "add a [[link]] with name and interface for each uplink",
        ));
    }
    let mut links = Vec::new();
    for l in raw {
        let at = l.span().start;
        let l = l.get_ref();
        let server = match &l.server {
            Some(s) => parse_addr(src, s, "server")?,
            None => default_server.ok_or_else(|| {
                src.err(
                    at,
                    format!("link `{}` has no server address", l.name),
                    "set `server = \"IP:PORT\"` in [client] or in this [[link]]",
                )
            })?,
        };
        if links.iter().any(|x: &LinkSettings| x.name == l.name) {
            return Err(src.err(
                at,
                format!("link name `{}` is used twice", l.name),
                "give each [[link]] its own name",
            ));
        }
        links.push(LinkSettings {
            id: PathId(links.len() as u8),
            name: l.name.clone(),
            interface: check_ifname(src, &l.interface)?,
            interface_line: src.err(l.interface.span().start, "", "").line,
            server,
            cost: match &l.cost {
                None => 1,
                Some(c) if (1..=1000).contains(c.get_ref()) => *c.get_ref(),
                Some(c) => {
                    return Err(src.err(
                        c.span().start,
                        format!("cost = {} is out of range", c.get_ref()),
                        "use 1 (the default) to 1000: a relative price per byte",
                    ))
                }
            },
        });
    }
    if links.len() > 16 {
        return Err(src.err_file("more than 16 links", "use at most 16 [[link]] sections"));
    }
    Ok(links)
}

/// `aggregate_scheduler`: earliest (default) or weighted.
fn parse_scheduler(
    src: &Source<'_>,
    s: Option<&Spanned<String>>,
) -> Result<AggregateScheduler, ConfigError> {
    match s.map(|s| (s.get_ref().as_str(), s.span().start)) {
        None | Some(("earliest", _)) => Ok(AggregateScheduler::Earliest),
        Some(("weighted", _)) => Ok(AggregateScheduler::Weighted),
        Some((o, at)) => Err(src.err(
            at,
            format!("unknown scheduler `{o}`"),
            "use earliest or weighted",
        )),
    }
}
