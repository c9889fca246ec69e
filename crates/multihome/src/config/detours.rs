//! `[[relay]]` sections and `detours` of `client.toml`: the relays the client may ask for
//! detour paths (docs/PROTOCOL.md §15) and how many detour paths it uses at most; and the
//! `[[relay]]` sections of `server.toml`, the relays the server hands its clients
//! (§15.7), validated the same way and then as the wire carries them.
//!
//! Invariants: every relay has a distinct name and request address; links plus detours fit
//! the 16 path ids of a session (`sched::MAX_PATHS`); a server's list is one its clients
//! accept (`wire::relays::is_handable`) and fits one datagram; errors name the line and the
//! fix.

use super::client::{parse_addr, parse_key};
use super::raw::RelaySection;
use super::{ConfigError, Source};
use multihome_proto::crypto::PublicKey;
use multihome_proto::crypto::TAG_LEN;
use multihome_proto::detour::{Mode, RelaySpec};
use multihome_proto::wire::relays::{self, MAX_HANDED_RELAYS, MAX_NAME_LEN};
use multihome_proto::wire::stated::POLICY_ACK_LEN;
use multihome_proto::wire::{AckFrame, InnerHeader, PairFrame, DATA_HEADER_LEN, OVERHEAD_BYTES};
use std::net::SocketAddr;
use toml::Spanned;

/// Default number of detour paths when relays are configured.
pub const DEFAULT_DETOURS: u32 = 2;
/// Most relays: each one is a candidate per link, probed at start (a client's own and
/// those its server hands out count together).
pub const MAX_RELAYS: usize = MAX_HANDED_RELAYS;

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

impl RelaySettings {
    /// The relay as the path manager and the wire know it.
    pub fn spec(&self) -> RelaySpec {
        RelaySpec {
            name: self.name.clone(),
            address: self.address,
            key: self.public_key,
            mode: self.mode,
        }
    }
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

/// Validates `[[relay]]` sections: at most [`MAX_RELAYS`] (`help` says what to do beyond),
/// distinct names and addresses, known modes.
fn parse_relays(
    src: &Source<'_>,
    relays: &[Spanned<RelaySection>],
    help: &str,
) -> Result<Vec<RelaySettings>, ConfigError> {
    check_relay_count(src, relays, help)?;
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
    Ok(out)
}

/// The relays a server hands its clients (`[[relay]]` of server.toml): as a client's, and
/// each one as the wire carries it (a name of 1–32 bytes without control characters, an
/// address clients can send to), the whole list small enough to ride in one datagram of
/// `mtu` beside a PING's feedback.
pub(super) fn parse_server(
    src: &Source<'_>,
    relays: &[Spanned<RelaySection>],
    mtu: u32,
) -> Result<Vec<RelaySettings>, ConfigError> {
    let out = parse_relays(src, relays, "a client uses at most 8 relays in all")?;
    for (r, spanned) in out.iter().zip(relays) {
        if !relays::is_handable(&r.spec()) {
            return Err(src.err(
                spanned.span().start,
                format!(
                    "relay `{}` ({}) cannot be handed to clients",
                    r.name, r.address
                ),
                format!(
                    "give it a name of 1 to {MAX_NAME_LEN} bytes without control characters \
                     and the relay's own address with its port (not 0.0.0.0 or port 0)"
                ),
            ));
        }
    }
    let specs: Vec<RelaySpec> = out.iter().map(RelaySettings::spec).collect();
    let frame = relays::encode(&specs).map_or(0, |(_, b)| relays::RELAYS_HEADER_LEN + b.len());
    let room = (mtu as usize).saturating_sub(HANDED_LIST_MARGIN);
    if let (Some(first), true) = (relays.first(), frame > room) {
        return Err(src.err(
            first.span().start,
            format!("the [[relay]] list takes {frame} bytes, more than a datagram of mtu = {mtu} holds ({room})"),
            format!("raise [server] mtu to {} or more, or shorten the relay names", frame + HANDED_LIST_MARGIN),
        ));
    }
    Ok(out)
}

/// What a PING datagram carries beside a relay list: its ACK, PAIR report, POLICY_ACK and
/// the PING itself, less what the datagram's frames may take beyond the mtu (its overhead
/// but the headers, inner header and tag: 12 bytes; docs/PROTOCOL.md §11). 26 bytes.
const HANDED_LIST_MARGIN: usize = AckFrame::LEN + PairFrame::LEN + POLICY_ACK_LEN + 1
    - (OVERHEAD_BYTES - DATA_HEADER_LEN - TAG_LEN - InnerHeader::LEN);

/// Validates the client's relays and `detours` (links: how many `[[link]]`s there are).
pub(super) fn parse(
    src: &Source<'_>,
    relays: &[Spanned<RelaySection>],
    detours: Option<&Spanned<u32>>,
    links: usize,
) -> Result<(Vec<RelaySettings>, usize), ConfigError> {
    let out = parse_relays(
        src,
        relays,
        "keep the relays with the best routes; each is probed on every link",
    )?;
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
    // Without relays of its own the client still takes those its server hands out.
    Ok((out, n.min(room)))
}
