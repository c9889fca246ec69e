//! The RELAYS and RELAYS_ACK frames: the server hands a client the detour relays it may use
//! (docs/PROTOCOL.md §4.3, §15.7), and the client acknowledges the list it applies.
//!
//! ```text
//! RELAYS     (0x0C): epoch u32 | count u8 | count × relay
//! relay:             address (family u8 | 0 u8 | port u16 | address 16 B) |
//!                    public key (32 B) | mode u8 | name_len u8 | name (name_len B, UTF-8)
//! RELAYS_ACK (0x0D): epoch u32
//! family: 4 (IPv4 in the first 4 address bytes, the rest zero) or 6 — the relay request's
//! address block (§15.1); mode: 1 NAT, 2 tunnel
//! ```
//!
//! Invariants: the frame parser never panics and reads only within the buffer (any count
//! up to 255 parses); `decode` accepts exactly what `encode` produces for a list of at most
//! `MAX_HANDED_RELAYS` relays with distinct names and addresses (the encoding is
//! canonical), so what a client applies is bounded whatever an authenticated server sends.

use super::frame::{FrameReader, FrameWriter};
use super::WireError;
use crate::crypto::PublicKey;
use crate::detour::wire::{emit_addr, parse_addr};
use crate::detour::{Mode, RelaySpec};

/// Most relays in a list (a client's configured ones count towards the same bound).
pub const MAX_HANDED_RELAYS: usize = 8;
/// Longest relay name, bytes.
pub const MAX_NAME_LEN: usize = 32;
/// Bytes of a RELAYS frame before its relays, type byte included.
pub const RELAYS_HEADER_LEN: usize = 1 + 4 + 1;
/// Bytes of one relay before its name.
pub const RELAY_FIXED_LEN: usize = 20 + 32 + 1 + 1;
/// Bytes of a RELAYS_ACK frame, type byte included.
pub const RELAYS_ACK_LEN: usize = 1 + 4;
/// The longest RELAYS frame `encode` makes (8 relays with 32-byte names): 694 bytes.
pub const MAX_RELAYS_FRAME_LEN: usize =
    RELAYS_HEADER_LEN + MAX_HANDED_RELAYS * (RELAY_FIXED_LEN + MAX_NAME_LEN);

/// A RELAYS frame as it was on the wire (not yet validated: see `decode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelaysFrame<'a> {
    /// Which list this is; a newer one replaces an older one.
    pub epoch: u32,
    /// How many relays `relays` holds.
    pub count: u8,
    /// The relays, back to back.
    pub relays: &'a [u8],
}

/// Why a list was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RelaysError {
    /// More relays than `MAX_HANDED_RELAYS`.
    #[error("too many relays: {0}")]
    TooMany(usize),
    /// Relay `0` is malformed (address, mode, name) or repeats another's name or address.
    #[error("bad relay {0}")]
    BadRelay(usize),
}

impl<'a> FrameReader<'a> {
    /// The fields of a RELAYS frame after its type byte.
    pub(super) fn relays(&mut self) -> Result<RelaysFrame<'a>, WireError> {
        let h = self.take(RELAYS_HEADER_LEN - 1)?;
        let start = self.rest();
        for _ in 0..h[4] {
            let fixed = self.take(RELAY_FIXED_LEN)?;
            self.take(usize::from(fixed[RELAY_FIXED_LEN - 1]))?;
        }
        let used = start.len() - self.rest().len();
        Ok(RelaysFrame {
            epoch: u32::from_be_bytes([h[0], h[1], h[2], h[3]]),
            count: h[4],
            relays: &start[..used],
        })
    }
}

impl FrameWriter<'_> {
    /// Writes a RELAYS frame (its relays as they are: `encode` makes valid ones).
    pub fn relays(&mut self, f: &RelaysFrame<'_>) -> Result<(), WireError> {
        if self.remaining() < RELAYS_HEADER_LEN + f.relays.len() {
            return Err(WireError::BufferTooSmall);
        }
        self.put(&[0x0C])?;
        self.put(&f.epoch.to_be_bytes())?;
        self.put(&[f.count])?;
        self.put(f.relays)
    }

    /// Writes a RELAYS_ACK frame.
    pub fn relays_ack(&mut self, epoch: u32) -> Result<(), WireError> {
        if self.remaining() < RELAYS_ACK_LEN {
            return Err(WireError::BufferTooSmall);
        }
        self.put(&[0x0D])?;
        self.put(&epoch.to_be_bytes())
    }
}

/// Whether `r` can be handed out: a NAT or tunnel relay at a usable address (not
/// unspecified, port not 0) with a name of 1–32 bytes and no control characters.
pub fn is_handable(r: &RelaySpec) -> bool {
    matches!(r.mode, Mode::Nat | Mode::Tunnel)
        && !r.address.ip().is_unspecified()
        && r.address.port() != 0
        && (1..=MAX_NAME_LEN).contains(&r.name.len())
        && !r.name.chars().any(char::is_control)
}

/// The relays of `list` encoded for a `RelaysFrame` (with their count); `None` if there are
/// more than `MAX_HANDED_RELAYS`, one cannot be handed out (`is_handable`) or two share a
/// name or an address.
pub fn encode(list: &[RelaySpec]) -> Option<(u8, Vec<u8>)> {
    if list.len() > MAX_HANDED_RELAYS || !distinct(list) {
        return None;
    }
    let mut out = Vec::with_capacity(list.len() * (RELAY_FIXED_LEN + MAX_NAME_LEN));
    for r in list {
        if !is_handable(r) {
            return None;
        }
        let mut addr = [0u8; 20];
        emit_addr(&mut addr, r.address);
        out.extend_from_slice(&addr);
        out.extend_from_slice(&r.key.0);
        out.push(r.mode as u8);
        out.push(r.name.len() as u8);
        out.extend_from_slice(r.name.as_bytes());
    }
    Some((list.len() as u8, out))
}

/// The relays a RELAYS frame lists, if every one is valid and the list within the bounds.
pub fn decode(f: &RelaysFrame<'_>) -> Result<Vec<RelaySpec>, RelaysError> {
    let count = usize::from(f.count);
    if count > MAX_HANDED_RELAYS {
        return Err(RelaysError::TooMany(count));
    }
    let mut out: Vec<RelaySpec> = Vec::with_capacity(count);
    let mut rest = f.relays;
    for i in 0..count {
        let bad = RelaysError::BadRelay(i);
        let fixed = rest.get(..RELAY_FIXED_LEN).ok_or(bad)?;
        let name_len = usize::from(fixed[RELAY_FIXED_LEN - 1]);
        let name = rest
            .get(RELAY_FIXED_LEN..RELAY_FIXED_LEN + name_len)
            .ok_or(bad)?;
        rest = &rest[RELAY_FIXED_LEN + name_len..];
        let addr: &[u8; 20] = fixed[..20].try_into().map_err(|_| bad)?;
        let key: [u8; 32] = fixed[20..52].try_into().map_err(|_| bad)?;
        let r = RelaySpec {
            name: core::str::from_utf8(name).map_err(|_| bad)?.to_string(),
            address: parse_addr(addr).map_err(|_| bad)?,
            key: PublicKey(key),
            mode: Mode::from_byte(fixed[52]).map_err(|_| bad)?,
        };
        out.push(r);
        if !is_handable(&out[i]) || !distinct(&out) {
            return Err(bad);
        }
    }
    if !rest.is_empty() {
        // The frame parser hands exactly `count` relays; anything else is not a frame.
        return Err(RelaysError::BadRelay(count));
    }
    Ok(out)
}

/// Whether no two relays of `list` share a name or an address.
fn distinct(list: &[RelaySpec]) -> bool {
    list.iter().enumerate().all(|(i, a)| {
        list[..i]
            .iter()
            .all(|b| a.name != b.name && a.address != b.address)
    })
}

#[cfg(test)]
#[path = "relays_tests.rs"]
mod tests;
