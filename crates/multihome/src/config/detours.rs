//! `[[relay]]` sections and `detours` of `client.toml`: the relays the client may ask for
//! detour paths (docs/PROTOCOL.md §15) and how many detour paths it uses at most.
//!
//! Invariants: every relay has a distinct name and request address; links plus detours fit
//! the 16 path ids of a session (`sched::MAX_PATHS`); errors name the line and the fix.

use super::client::{parse_addr, parse_key};
use super::raw::RelaySection;
use super::{ConfigError, Source};
use multihome_proto::crypto::PublicKey;
use multihome_proto::detour::Mode;
use std::net::SocketAddr;
use toml::Spanned;

/// Default number of detour paths when relays are configured.
pub const DEFAULT_DETOURS: u32 = 2;
/// Most relays: each one is a candidate per link, probed at start.
pub const MAX_RELAYS: usize = 8;

/// One relay of the client.
#[derive(Debug, Clone, PartialEq)]
pub struct RelaySettings {
    /// Name in status and path names ("LINK via NAME"); default: the address.
    pub name: String,
    /// The relay's request address (`[relay] listen` there).
    pub address: SocketAddr,
    /// The relay's public key.
    pub public_key: PublicKey,
    /// NAT (default) or tunnel forwarding.
    pub mode: Mode,
}

/// Refuses more than [`MAX_RELAYS`] `[[relay]]` sections (`help` says what to do).
pub(super) fn check_relay_count(
    src: &Source<'_>,
    relays: &[Spanned<RelaySection>],
    help: &str,
) -> Result<(), ConfigError> {
    match relays.get(MAX_RELAYS) {
        Some(extra) => Err(src.err(
            extra.span().start,
            format!("more than {MAX_RELAYS} [[relay]] sections"),
            help.to_string(),
        )),
        None => Ok(()),
    }
}

/// A `[[relay]]`'s name (its address when unnamed) and address, refused when a relay
/// already `seen` has either.
pub(super) fn relay_name_address<'a>(
    src: &Source<'_>,
    r: &Spanned<RelaySection>,
    mut seen: impl Iterator<Item = (&'a str, SocketAddr)>,
) -> Result<(String, SocketAddr), ConfigError> {
    let address = parse_addr(src, &r.get_ref().address, "relay address")?;
    let name = r
        .get_ref()
        .name
        .clone()
        .unwrap_or_else(|| address.to_string());
    if seen.any(|(n, a)| n == name || a == address) {
        return Err(src.err(
            r.span().start,
            format!("relay `{name}` ({address}) is listed twice"),
            "give each [[relay]] its own name and address",
        ));
    }
    Ok((name, address))
}

/// Validates the relays and `detours` (links: how many `[[link]]`s there are).
pub(super) fn parse(
    src: &Source<'_>,
    relays: &[Spanned<RelaySection>],
    detours: Option<&Spanned<u32>>,
    links: usize,
) -> Result<(Vec<RelaySettings>, usize), ConfigError> {
    check_relay_count(
        src,
        relays,
        "keep the relays with the best routes; each is probed on every link",
    )?;
    let mut out: Vec<RelaySettings> = Vec::new();
    for r in relays {
        let seen = out.iter().map(|x| (x.name.as_str(), x.address));
        let (name, address) = relay_name_address(src, r, seen)?;
        let r = r.get_ref();
        let mode = match r
            .mode
            .as_ref()
            .map(|m| (m.get_ref().as_str(), m.span().start))
        {
            None | Some(("nat", _)) => Mode::Nat,
            Some(("tunnel", _)) => Mode::Tunnel,
            Some((o, at)) => {
                return Err(src.err(
                    at,
                    format!("unknown relay mode `{o}`"),
                    "use nat (kernel forwarding, the default) or tunnel",
                ))
            }
        };
        out.push(RelaySettings {
            name,
            address,
            public_key: parse_key(src, &r.public_key)?,
            mode,
        });
    }
    let room = multihome_proto::sched::MAX_PATHS - links;
    let n = match detours {
        None => DEFAULT_DETOURS as usize,
        Some(d) if (*d.get_ref() as usize) <= room => *d.get_ref() as usize,
        Some(d) => {
            return Err(src.err(
                d.span().start,
                format!(
                    "detours = {} is more than the {room} path ids left",
                    d.get_ref()
                ),
                format!("use 0 to {room}: links plus detours share 16 path ids"),
            ))
        }
    };
    let n = if out.is_empty() { 0 } else { n.min(room) };
    Ok((out, n))
}
