//! `[stream]` of client.toml and `stream` of server.toml: stream mode, in which the client
//! ends the LAN hosts' TCP connections to the tunnel's routes (TPROXY) and carries each as
//! an encrypted byte stream over one kernel MPTCP connection with a subflow per link to
//! the server, which opens the TCP connection to the destination (docs/STREAM.md).
//!
//! Invariants: unknown keys are errors; `lan` names 1..=16 valid interfaces; ports and
//! tables are non-zero; the connection limit is within 1..=65536; every error names the
//! line and the fix.

use super::client::check_ifname;
use super::{ConfigError, Source};
use serde::Deserialize;
use toml::Spanned;

/// Default port of the client's transparent listener.
pub const DEFAULT_LISTEN_PORT: u16 = 7070;
/// Default routing table (and `ip rule` preference) of the TPROXY'd connections.
pub const DEFAULT_TABLE: u32 = 7070;
/// Default congestion control of stream mode's MPTCP subflows, on both sides: BBR rides out
/// random and bursty loss that makes loss-based algorithms collapse (docs/STREAM.md).
pub const DEFAULT_CONGESTION_CONTROL: &str = "bbr";
/// Default netfilter queue of the held SYNs.
pub const DEFAULT_QUEUE_NUM: u16 = 7070;
/// Default most stream connections at once (per client, and per server).
pub const DEFAULT_MAX_CONNECTIONS: u32 = 4096;
const MAX_LAN: usize = 16;

/// `[stream]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamSection {
    #[serde(default)]
    lan: Vec<Spanned<String>>,
    listen_port: Option<Spanned<u16>>,
    table: Option<Spanned<u32>>,
    max_connections: Option<Spanned<u32>>,
    hold_syns: Option<bool>,
    queue_num: Option<Spanned<u16>>,
    congestion_control: Option<Spanned<String>>,
    follow_tunnel: Option<bool>,
    remove_addr: Option<bool>,
}

/// Stream mode of the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSettings {
    /// Interfaces whose TCP connections to the tunnel's routes are ended here.
    pub lan: Vec<String>,
    /// Port of the transparent listener (local to this host).
    pub listen_port: u16,
    /// Routing table and rule preference of the diverted packets.
    pub table: u32,
    /// Most connections at once; more are reset.
    pub max_connections: u32,
    /// Hold each SYN in netfilter queue `queue_num` until the server answered, so a refusal
    /// reaches the application as a refused connect (`None`: accept at once).
    pub hold_syns: Option<u16>,
    /// Congestion control of the MPTCP subflows (`TCP_CONGESTION`).
    pub congestion_control: String,
    /// Steer the subflows by the tunnel's link states: close a link's subflow when the
    /// tunnel no longer holds it Up, open one when it is Up again (docs/STREAM.md).
    pub follow_tunnel: bool,
    /// With `follow_tunnel`: before closing a subflow, remove its address from the
    /// connection (REMOVE_ADDR over a live subflow), so the server closes its end and
    /// resends its data in flight at once (downloads).
    pub remove_addr: bool,
}

/// Validates `[stream]`.
pub fn parse(
    src: &Source<'_>,
    s: Option<&Spanned<StreamSection>>,
) -> Result<Option<StreamSettings>, ConfigError> {
    let Some(s) = s else { return Ok(None) };
    let at = s.span().start;
    let s = s.get_ref();
    if s.lan.is_empty() || s.lan.len() > MAX_LAN {
        return Err(src.err(
            at,
            format!("[stream] lists {} `lan` interfaces", s.lan.len()),
            "set lan = [\"eth1\"] to the 1 to 16 interfaces the LAN hosts' TCP arrives on",
        ));
    }
    let lan = s
        .lan
        .iter()
        .map(|l| check_ifname(src, l))
        .collect::<Result<Vec<_>, _>>()?;
    let nonzero = |v: Option<&Spanned<u32>>, default: u32, key: &str, max: u32| match v {
        None => Ok(default),
        Some(v) if (1..=max).contains(v.get_ref()) => Ok(*v.get_ref()),
        Some(v) => Err(src.err(
            v.span().start,
            format!("[stream] {key} = {} is out of range", v.get_ref()),
            format!("use 1 to {max}"),
        )),
    };
    let listen_port = match &s.listen_port {
        Some(p) if *p.get_ref() == 0 => {
            return Err(src.err(
                p.span().start,
                "[stream] listen_port = 0",
                "use a free TCP port, e.g. 7070",
            ))
        }
        Some(p) => *p.get_ref(),
        None => DEFAULT_LISTEN_PORT,
    };
    Ok(Some(StreamSettings {
        lan,
        listen_port,
        table: nonzero(s.table.as_ref(), DEFAULT_TABLE, "table", 0x7fff_ffff)?,
        max_connections: nonzero(
            s.max_connections.as_ref(),
            DEFAULT_MAX_CONNECTIONS,
            "max_connections",
            65_536,
        )?,
        hold_syns: match (s.hold_syns.unwrap_or(true), &s.queue_num) {
            (false, _) => None,
            (true, None) => Some(DEFAULT_QUEUE_NUM),
            (true, Some(q)) => Some(*q.get_ref()),
        },
        congestion_control: parse_congestion_control(src, s.congestion_control.as_ref())?,
        follow_tunnel: s.follow_tunnel.unwrap_or(true),
        remove_addr: s.remove_addr.unwrap_or(true),
    }))
}

/// A congestion-control name as `TCP_CONGESTION` takes it: 1 to 15 of `[a-z0-9_]`.
pub fn parse_congestion_control(
    src: &Source<'_>,
    v: Option<&Spanned<String>>,
) -> Result<String, ConfigError> {
    let Some(v) = v else {
        return Ok(DEFAULT_CONGESTION_CONTROL.into());
    };
    let name = v.get_ref();
    let ok = (1..=15).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !ok {
        return Err(src.err(
            v.span().start,
            format!("`{name}` is not a congestion-control name"),
            "use one of /proc/sys/net/ipv4/tcp_available_congestion_control, e.g. \"bbr\" or \"cubic\"",
        ));
    }
    Ok(name.clone())
}
