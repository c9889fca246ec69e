//! Address families in the configs: the TUN device's own addresses (`tun_address`, one
//! IPv4 and/or one IPv6), the client's routes against them, and the server's listening
//! socket against the tunnel addresses it announces to resolving clients.
//!
//! Invariants of what validation returns:
//! - `tun_address` holds one or two prefixes, at most one per family (the device has one
//!   inner address per family; a second one of a family would make the kernel's choice of
//!   source address, and so the server's spoofing check, depend on prefix order);
//! - every client route has a TUN address of its family: without one the kernel gives the
//!   host's own packets into that route the source address of another interface (a link's
//!   global IPv6 address), which the server drops as spoofed;
//! - a server listening on an IPv4 address announces only IPv4 tunnel addresses, and one
//!   listening on a specific IPv6 address only IPv6 ones: only `[::]` takes both families
//!   (an IPv6 socket is dual-stack, `multihome_io::udp`).

use super::client::parse_net;
use super::{ConfigError, Source};
use ipnet::IpNet;
use std::net::SocketAddr;
use toml::Spanned;

/// What the fixes below suggest.
const TUN_EXAMPLE: &str = "tun_address = [\"10.200.0.2/24\", \"fd00:200::2/64\"]";

/// `tun_address`: a prefix (`"10.200.0.2/24"`) or a list of one IPv4 and one IPv6 prefix.
pub(super) fn parse_tun_addresses(
    src: &Source<'_>,
    v: &Spanned<toml::Value>,
) -> Result<Vec<IpNet>, ConfigError> {
    let at = v.span().start;
    let texts: Vec<&str> = match v.get_ref() {
        toml::Value::String(s) => vec![s.as_str()],
        toml::Value::Array(a) => a.iter().filter_map(|e| e.as_str()).collect(),
        _ => Vec::new(),
    };
    let well_formed = match v.get_ref() {
        toml::Value::Array(a) => texts.len() == a.len() && (1..=2).contains(&a.len()),
        other => other.is_str(),
    };
    if !well_formed {
        return Err(src.err(
            at,
            "tun_address is neither an address with a prefix length nor a list of one or two",
            format!("write tun_address = \"10.200.0.2/24\", or {TUN_EXAMPLE}"),
        ));
    }
    let mut nets: Vec<IpNet> = Vec::new();
    for t in texts {
        let net = parse_net(src, &Spanned::new(v.span(), t.to_owned()), "tun_address")?;
        if nets
            .iter()
            .any(|n| n.addr().is_ipv4() == net.addr().is_ipv4())
        {
            return Err(src.err(
                at,
                format!("tun_address has two {} addresses", family(&net)),
                format!("give the device at most one address per family: {TUN_EXAMPLE}"),
            ));
        }
        nets.push(net);
    }
    Ok(nets)
}

/// Every route has a TUN address of its family (`routes` and `parsed` in file order).
pub(super) fn check_route_families(
    src: &Source<'_>,
    routes: &[Spanned<String>],
    parsed: &[IpNet],
    tun: &[IpNet],
) -> Result<(), ConfigError> {
    for (raw, net) in routes.iter().zip(parsed) {
        if !tun
            .iter()
            .any(|t| t.addr().is_ipv4() == net.addr().is_ipv4())
        {
            return Err(src.err(
                raw.span().start,
                format!(
                    "route `{net}` is {} but tun_address has no {} address",
                    family(net),
                    family(net)
                ),
                format!(
                    "add one to tun_address (and to the server's allowed_ips for this client), \
                     e.g. {TUN_EXAMPLE}"
                ),
            ));
        }
    }
    Ok(())
}

/// The server's `listen` socket can take datagrams to each announced tunnel address.
pub(super) fn check_advertised(
    src: &Source<'_>,
    listen: SocketAddr,
    advertise: &[Spanned<String>],
    parsed: &[SocketAddr],
) -> Result<(), ConfigError> {
    let dual_stack = listen.ip().is_unspecified() && listen.is_ipv6();
    for (raw, a) in advertise.iter().zip(parsed) {
        if dual_stack || a.is_ipv4() == listen.is_ipv4() {
            continue;
        }
        return Err(src.err(
            raw.span().start,
            format!(
                "advertise entry `{a}` is {} but [server] listen = \"{listen}\" takes only {}",
                family_ip(a.ip()),
                family_ip(listen.ip())
            ),
            format!(
                "listen on [::]:{} (IPv4 and IPv6 on one socket), or announce only {} addresses",
                listen.port(),
                family_ip(listen.ip())
            ),
        ));
    }
    Ok(())
}

fn family(net: &IpNet) -> &'static str {
    family_ip(net.addr())
}

fn family_ip(ip: std::net::IpAddr) -> &'static str {
    if ip.is_ipv4() {
        "IPv4"
    } else {
        "IPv6"
    }
}
