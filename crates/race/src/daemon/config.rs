//! `race.toml`: the racing gateway's configuration, parsed and validated into
//! [`RaceSettings`] with located errors (file, line, fix), like the other daemons' configs.
//!
//! ```toml
//! [race]
//! lan_interfaces = ["lan0"]      # where intercepted connections come from
//! predictor = "avmet"            # race | avmet | static | probe | stagger
//! avmet_profile = "wired"        # the thesis's defaults: wired (α 0.99, 100 ms) or wireless (α 0.999, 4.5 s)
//! avmet_alpha = 0.99             # overrides the profile
//! avmet_delay_ms = 100
//! static_uplink = "dsl"          # for predictor = "static"
//! stagger_delay_ms = 250         # for predictor = "stagger" (RFC 8305)
//! probe_target = "192.0.2.1:443" # TCP handshake probes, for predictor = "probe"
//! probe_interval_ms = 1000
//! scope = "global"               # or "destination": predictor state per destination address
//! connect_timeout_ms = 10000
//! max_connections = 512
//! listen_port = 7070             # the TPROXY listener (local only)
//! mode = "proxy"                # or "nat": forward the client's own SYN over every uplink and
//!                                # hand the winner to kernel NAT (IPv4; needs hold_syns)
//! hold_syns = true               # hold each client SYN in netfilter queue `queue_num` while racing,
//!                                # so a refusal reaches the client as a refusal (needs iptables)
//! udp_flows = true               # give each new UDP flow from the LAN one uplink (same predictor)
//! queue_num = 7070               # the NFQUEUE number (0..=65535) for held SYNs and new UDP flows
//! table_base = 7070              # routing tables table_base (TPROXY) and table_base+1+i (uplink i)
//! control_socket = "/run/multihome/race.sock"
//! dashboard = "127.0.0.1:8080"   # optional: the web dashboard and JSON API (docs/API.md)
//!
//! [[uplink]]
//! name = "dsl"
//! interface = "eth1"
//! gateway = "192.168.1.1"        # next hop; replies return by the uplink's own address
//! dscp = 10                      # optional: SYNs with this DSCP use only this uplink
//! ```
//!
//! Invariant: everything that can be checked without the machine is checked here; the
//! daemon checks interfaces and addresses at start-up.

use crate::core::{GatewayConfig, PredictorConfig, Scope, UplinkId, MAX_UPLINKS};
use multihome_runtime::config::{ConfigError, Source};
use serde::Deserialize;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;
use toml::Spanned;

/// Default control socket of the racing gateway.
pub const DEFAULT_RACE_SOCKET: &str = "/run/multihome/race.sock";
/// Bound on remembered destinations with `scope = "destination"`.
const DESTINATIONS: usize = 4096;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RaceFile {
    race: RaceSection,
    #[serde(default)]
    uplink: Vec<Spanned<UplinkSection>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RaceSection {
    #[serde(default)]
    lan_interfaces: Vec<Spanned<String>>,
    predictor: Spanned<String>,
    avmet_profile: Option<Spanned<String>>,
    avmet_alpha: Option<Spanned<f64>>,
    avmet_delay_ms: Option<u64>,
    static_uplink: Option<Spanned<String>>,
    stagger_delay_ms: Option<u64>,
    probe_target: Option<Spanned<String>>,
    probe_interval_ms: Option<Spanned<u64>>,
    scope: Option<Spanned<String>>,
    connect_timeout_ms: Option<Spanned<u64>>,
    max_connections: Option<Spanned<usize>>,
    listen_port: Option<u16>,
    hold_syns: Option<bool>,
    mode: Option<Spanned<String>>,
    udp_flows: Option<bool>,
    queue_num: Option<u16>,
    table_base: Option<Spanned<u32>>,
    control_socket: Option<String>,
    dashboard: Option<Spanned<String>>,
    seed: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UplinkSection {
    name: String,
    interface: String,
    gateway: Option<Spanned<String>>,
    dscp: Option<Spanned<u8>>,
}

/// One uplink.
#[derive(Debug, Clone, PartialEq)]
pub struct UplinkSettings {
    /// Name shown in status.
    pub name: String,
    /// Interface the uplink's sockets are bound to.
    pub interface: String,
    /// Next hop for the uplink's routing table (`None`: on-link, point-to-point).
    pub gateway: Option<IpAddr>,
}

/// How a won connection is carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Terminated at the gateway (TPROXY) and relayed with splice(2) over the winner's
    /// own connection.
    Proxy,
    /// The client's SYN copied out on every uplink; the first SYN-ACK passed back; the
    /// connection then goes through the kernel's NAT over the winner (the thesis's MultiNAT).
    Nat,
}

/// Validated settings.
#[derive(Debug, Clone, PartialEq)]
pub struct RaceSettings {
    /// Interfaces whose TCP connections are intercepted.
    pub lan_interfaces: Vec<String>,
    /// Uplinks, in configuration order (`UplinkId(i)` is the i-th).
    pub uplinks: Vec<UplinkSettings>,
    /// The core's settings.
    pub gateway: GatewayConfig,
    /// Probe destination (predictor `probe`).
    pub probe_target: Option<SocketAddr>,
    /// TPROXY listener port.
    pub listen_port: u16,
    /// Hold each client's SYN in the netfilter queue while its connection is raced.
    pub hold_syns: bool,
    /// Proxy (relay) or NAT (kernel data path).
    pub mode: Mode,
    /// Route each new UDP flow from the LAN over one uplink chosen by the predictor.
    pub udp_flows: bool,
    /// The netfilter queue number for held SYNs and new UDP flows.
    pub queue_num: u16,
    /// First routing table number.
    pub table_base: u32,
    /// Control socket path.
    pub control_socket: PathBuf,
    /// The web dashboard's address (none: no dashboard).
    pub dashboard: Option<SocketAddr>,
    /// RNG seed (probe jitter); `None`: from the OS.
    pub seed: Option<u64>,
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// Parses and validates `race.toml`.
pub fn validate(src: &Source<'_>) -> Result<RaceSettings, ConfigError> {
    let f: RaceFile = src.parse()?;
    let r = &f.race;
    let (uplinks, pins) = uplinks(src, &f.uplink)?;
    let predictor = predictor(src, r, &uplinks)?;
    let scope = scope(src, r)?;
    let (probe_target, probe_interval) = probe(src, r, &predictor)?;
    let Limits {
        connect_timeout,
        max_connections,
        table_base,
    } = limits(src, r)?;
    check_lan_interfaces(src, r)?;
    let mode = mode(src, r)?;
    let gateway = GatewayConfig {
        n_uplinks: uplinks.len(),
        predictor,
        scope,
        connect_timeout: ms(connect_timeout),
        max_connections,
        probe_interval: probe_target.map(|_| ms(probe_interval)),
        dscp_pins: pins,
    };
    gateway
        .validate()
        .map_err(|e| src.err_file(e.to_string(), "see docs/CONFIG.md, section race"))?;
    Ok(RaceSettings {
        lan_interfaces: r
            .lan_interfaces
            .iter()
            .map(|s| s.get_ref().clone())
            .collect(),
        uplinks,
        gateway,
        probe_target,
        listen_port: r.listen_port.unwrap_or(7070),
        hold_syns: r.hold_syns.unwrap_or(true),
        mode,
        udp_flows: r.udp_flows.unwrap_or(true),
        queue_num: r.queue_num.unwrap_or(7070),
        table_base,
        control_socket: PathBuf::from(r.control_socket.as_deref().unwrap_or(DEFAULT_RACE_SOCKET)),
        dashboard: multihome_runtime::config::dashboard_addr(src, r.dashboard.as_ref())?,
        seed: r.seed,
    })
}

/// `probe_target` and `probe_interval_ms` (the probe predictor needs a target).
fn probe(
    src: &Source<'_>,
    r: &RaceSection,
    predictor: &PredictorConfig,
) -> Result<(Option<SocketAddr>, u64), ConfigError> {
    let probe_target = match &r.probe_target {
        None => None,
        Some(p) => Some(p.get_ref().parse::<SocketAddr>().map_err(|_| {
            src.err(
                p.span().start,
                format!("probe_target `{}` is not ADDRESS:PORT", p.get_ref()),
                "e.g. \"192.0.2.1:443\" (a server that answers TCP handshakes)",
            )
        })?),
    };
    let probe_interval = r.probe_interval_ms.as_ref().map_or(1000, |v| *v.get_ref());
    if probe_interval < 10 {
        let at = r.probe_interval_ms.as_ref().map_or(0, |v| v.span().start);
        return Err(src.err(
            at,
            "probe_interval_ms below 10",
            "probe at most every 10 ms",
        ));
    }
    if matches!(predictor, PredictorConfig::Probe) && probe_target.is_none() {
        return Err(src.err(
            r.predictor.span().start,
            "predictor \"probe\" needs probe_target",
            "add probe_target = \"ADDRESS:PORT\" to [race]",
        ));
    }
    Ok((probe_target, probe_interval))
}

/// The gateway's numeric limits, checked.
struct Limits {
    connect_timeout: u64,
    max_connections: usize,
    table_base: u32,
}

fn limits(src: &Source<'_>, r: &RaceSection) -> Result<Limits, ConfigError> {
    let connect_timeout = r
        .connect_timeout_ms
        .as_ref()
        .map_or(10_000, |v| *v.get_ref());
    if !(100..=600_000).contains(&connect_timeout) {
        let at = r.connect_timeout_ms.as_ref().map_or(0, |v| v.span().start);
        return Err(src.err(
            at,
            format!("connect_timeout_ms {connect_timeout} out of range"),
            "use 100 to 600000",
        ));
    }
    let max_connections = r.max_connections.as_ref().map_or(512, |v| *v.get_ref());
    if !(1..=100_000).contains(&max_connections) {
        let at = r.max_connections.as_ref().map_or(0, |v| v.span().start);
        return Err(src.err(at, "max_connections out of range", "use 1 to 100000"));
    }
    let table_base = r.table_base.as_ref().map_or(7070, |v| *v.get_ref());
    if !(1..=0x7fff_0000).contains(&table_base) || (253..=255).contains(&table_base) {
        let at = r.table_base.as_ref().map_or(0, |v| v.span().start);
        return Err(src.err(
            at,
            "table_base collides with a reserved routing table",
            "pick e.g. 7070",
        ));
    }
    Ok(Limits {
        connect_timeout,
        max_connections,
        table_base,
    })
}

/// DSCP values that pin a connection to an uplink.
type DscpPins = Vec<(u8, UplinkId)>;

/// The `[[uplink]]` sections: names, interfaces, next hops and DSCP pins.
fn uplinks(
    src: &Source<'_>,
    sections: &[Spanned<UplinkSection>],
) -> Result<(Vec<UplinkSettings>, DscpPins), ConfigError> {
    let mut uplinks: Vec<UplinkSettings> = Vec::new();
    let mut pins = Vec::new();
    if sections.is_empty() || sections.len() > MAX_UPLINKS {
        return Err(src.err_file(
            format!("{} [[uplink]] sections", sections.len()),
            format!("configure 1 to {MAX_UPLINKS} uplinks (2 or more to race)"),
        ));
    }
    for (i, u) in sections.iter().enumerate() {
        let at = u.span().start;
        let u = u.get_ref();
        if uplinks.iter().any(|x| x.name == u.name) {
            return Err(src.err(
                at,
                format!("uplink name `{}` repeats", u.name),
                "give each [[uplink]] its own name",
            ));
        }
        if u.interface.is_empty() || u.interface.len() > 15 || u.interface.contains(['"', ' ', '/'])
        {
            return Err(src.err(
                at,
                format!("interface `{}` is not a valid name", u.interface),
                "use the name `ip link` shows",
            ));
        }
        let gateway = match &u.gateway {
            None => None,
            Some(g) => Some(g.get_ref().parse::<IpAddr>().map_err(|_| {
                src.err(
                    g.span().start,
                    format!("gateway `{}` is not an IP address", g.get_ref()),
                    "write the next hop's address, e.g. \"192.168.1.1\"",
                )
            })?),
        };
        if let Some(d) = &u.dscp {
            if *d.get_ref() > 63 || pins.iter().any(|(p, _)| p == d.get_ref()) {
                return Err(src.err(
                    d.span().start,
                    format!("dscp {} is out of range or pins two uplinks", d.get_ref()),
                    "use a DSCP value 0..=63, once",
                ));
            }
            pins.push((*d.get_ref(), UplinkId(i as u8)));
        }
        uplinks.push(UplinkSettings {
            name: u.name.clone(),
            interface: u.interface.clone(),
            gateway,
        });
    }
    Ok((uplinks, pins))
}

/// Whether the predictor learns once for all destinations or per destination.
fn scope(src: &Source<'_>, r: &RaceSection) -> Result<Scope, ConfigError> {
    Ok(
        match r
            .scope
            .as_ref()
            .map(|s| (s.get_ref().as_str(), s.span().start))
        {
            None | Some(("global", _)) => Scope::Global,
            Some(("destination", _)) => Scope::Destination {
                max_entries: DESTINATIONS,
            },
            Some((other, at)) => {
                return Err(src.err(
                    at,
                    format!("unknown scope `{other}`"),
                    "use \"global\" or \"destination\"",
                ))
            }
        },
    )
}

/// The LAN interfaces must be names `ip link` could show (they are written into rules).
fn mode(src: &Source<'_>, r: &RaceSection) -> Result<Mode, ConfigError> {
    let Some(m) = &r.mode else {
        return Ok(Mode::Proxy);
    };
    let at = m.span().start;
    match m.get_ref().as_str() {
        "proxy" => Ok(Mode::Proxy),
        // NAT mode forwards the held SYN's copies: without holding there is nothing to copy.
        "nat" if r.hold_syns == Some(false) => Err(src.err(
            at,
            "mode \"nat\" needs hold_syns",
            "remove hold_syns = false, or use mode = \"proxy\"",
        )),
        "nat" => Ok(Mode::Nat),
        other => Err(src.err(
            at,
            format!("unknown mode `{other}`"),
            "use \"proxy\" or \"nat\"",
        )),
    }
}

fn check_lan_interfaces(src: &Source<'_>, r: &RaceSection) -> Result<(), ConfigError> {
    for l in &r.lan_interfaces {
        if l.get_ref().is_empty() || l.get_ref().len() > 15 || l.get_ref().contains(['"', ' ', '/'])
        {
            return Err(src.err(
                l.span().start,
                format!("interface `{}` is not a valid name", l.get_ref()),
                "use the name `ip link` shows",
            ));
        }
    }
    Ok(())
}

fn predictor(
    src: &Source<'_>,
    r: &RaceSection,
    uplinks: &[UplinkSettings],
) -> Result<PredictorConfig, ConfigError> {
    let at = r.predictor.span().start;
    Ok(match r.predictor.get_ref().as_str() {
        "race" => PredictorConfig::Race,
        "avmet" => avmet(src, r)?,
        "static" => static_uplink(src, r, uplinks)?,
        "probe" => PredictorConfig::Probe,
        "stagger" => PredictorConfig::Stagger {
            delay: ms(r.stagger_delay_ms.unwrap_or(250)),
        },
        other => {
            return Err(src.err(
                at,
                format!("unknown predictor `{other}`"),
                "use race, avmet, static, probe or stagger",
            ))
        }
    })
}

/// AvMet's α and delay: a profile's, overridden by `avmet_alpha` / `avmet_delay_ms`.
fn avmet(src: &Source<'_>, r: &RaceSection) -> Result<PredictorConfig, ConfigError> {
    use crate::core::avmet::{WIRED_ALPHA, WIRED_DELAY_MS, WIRELESS_ALPHA, WIRELESS_DELAY_MS};
    let profile = r
        .avmet_profile
        .as_ref()
        .map(|p| (p.get_ref().as_str(), p.span().start));
    let (mut alpha, mut delay) = match profile {
        None | Some(("wired", _)) => (WIRED_ALPHA, WIRED_DELAY_MS),
        Some(("wireless", _)) => (WIRELESS_ALPHA, WIRELESS_DELAY_MS),
        Some((other, at)) => {
            return Err(src.err(
                at,
                format!("unknown avmet_profile `{other}`"),
                "use \"wired\" or \"wireless\"",
            ))
        }
    };
    if let Some(a) = &r.avmet_alpha {
        if !(0.0..1.0).contains(a.get_ref()) {
            return Err(src.err(
                a.span().start,
                format!("avmet_alpha {} is outside [0, 1)", a.get_ref()),
                "0.99 remembers ~100 connections, 0.999 ~1000",
            ));
        }
        alpha = *a.get_ref();
    }
    if let Some(d) = r.avmet_delay_ms {
        delay = d;
    }
    Ok(PredictorConfig::AvMet {
        alpha,
        delay: ms(delay),
    })
}

/// The static predictor's uplink, named by `static_uplink`.
fn static_uplink(
    src: &Source<'_>,
    r: &RaceSection,
    uplinks: &[UplinkSettings],
) -> Result<PredictorConfig, ConfigError> {
    let Some(name) = &r.static_uplink else {
        return Err(src.err(
            r.predictor.span().start,
            "predictor \"static\" needs static_uplink",
            "add static_uplink = \"NAME\" naming an [[uplink]]",
        ));
    };
    let i = uplinks
        .iter()
        .position(|u| &u.name == name.get_ref())
        .ok_or_else(|| {
            src.err(
                name.span().start,
                format!(
                    "static_uplink `{}` is not an [[uplink]] name",
                    name.get_ref()
                ),
                "use one of the uplink names",
            )
        })?;
    Ok(PredictorConfig::Static {
        uplink: UplinkId(i as u8),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn parse(text: &str) -> Result<RaceSettings, ConfigError> {
        validate(&Source {
            path: Path::new("race.toml"),
            text,
        })
    }

    const UPLINKS: &str = "[[uplink]]\nname = \"a\"\ninterface = \"u0\"\ngateway = \"10.61.0.1\"\n\
                           [[uplink]]\nname = \"b\"\ninterface = \"u1\"\ndscp = 10\n";

    #[test]
    fn defaults_and_profiles() {
        let s = parse(&format!(
            "[race]\npredictor = \"avmet\"\navmet_profile = \"wireless\"\n{UPLINKS}"
        ))
        .unwrap();
        assert_eq!(s.gateway.predictor, PredictorConfig::avmet_wireless());
        assert_eq!(s.gateway.dscp_pins, vec![(10, UplinkId(1))]);
        assert_eq!(s.uplinks[0].gateway, Some("10.61.0.1".parse().unwrap()));
        assert_eq!(s.gateway.max_connections, 512);
        assert_eq!(s.gateway.probe_interval, None);
        assert!(s.hold_syns && s.udp_flows);
        assert_eq!(s.queue_num, 7070);
        assert_eq!(s.mode, Mode::Proxy);
        let s = parse(&format!(
            "[race]\npredictor = \"race\"\nmode = \"nat\"\n{UPLINKS}"
        ))
        .unwrap();
        assert_eq!(s.mode, Mode::Nat);
        let e = parse(&format!(
            "[race]\npredictor = \"race\"\nhold_syns = false\nmode = \"nat\"\n{UPLINKS}"
        ))
        .unwrap_err();
        assert_eq!(e.line, 4, "{e}");
        let s = parse(&format!(
            "[race]\npredictor = \"static\"\nstatic_uplink = \"b\"\n{UPLINKS}"
        ))
        .unwrap();
        assert_eq!(
            s.gateway.predictor,
            PredictorConfig::Static {
                uplink: UplinkId(1)
            }
        );
    }

    #[test]
    fn errors_are_located() {
        let e = parse(&format!("[race]\npredictor = \"fastest\"\n{UPLINKS}")).unwrap_err();
        assert_eq!(e.line, 2, "{e}");
        let e = parse(&format!("[race]\npredictor = \"probe\"\n{UPLINKS}")).unwrap_err();
        assert!(e.message.contains("probe_target"), "{e}");
        let e = parse(&format!(
            "[race]\npredictor = \"static\"\nstatic_uplink = \"c\"\n{UPLINKS}"
        ))
        .unwrap_err();
        assert_eq!(e.line, 3, "{e}");
        let e = parse(&format!(
            "[race]\npredictor = \"race\"\ncolour = 1\n{UPLINKS}"
        ))
        .unwrap_err();
        assert!(e.message.contains("unknown field"), "{e}");
        let e = parse(&format!(
            "[race]\npredictor = \"race\"\nqueue_num = 70000\n{UPLINKS}"
        ))
        .unwrap_err();
        assert_eq!(e.line, 3, "{e}");
        let e = parse("[race]\npredictor = \"race\"\n").unwrap_err();
        assert!(e.fix.contains("uplinks"), "{e}");
        let e = parse(&format!(
            "[race]\npredictor = \"avmet\"\navmet_alpha = 1.5\n{UPLINKS}"
        ))
        .unwrap_err();
        assert_eq!(e.line, 3, "{e}");
    }
}
