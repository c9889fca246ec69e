//! The first step of the receive path: a datagram's outer header, parsed once, into what
//! the endpoint routes on (the shape of quinn-proto's `DatagramEvent`).
//!
//! Handshake messages stay with the endpoint; a data datagram becomes a `SealedData` for
//! the session its receiver index names. Invariant: nothing here authenticates anything or
//! changes state; a datagram that does not parse is the caller's to count.

use crate::path::PathId;
use crate::session::SealedData;
use crate::wire::{MessageType, OuterPacket, WireError};

/// A received datagram by what it is.
pub enum Datagram<'a> {
    /// Noise IK message 1 (client to server).
    Init(OuterPacket<&'a mut [u8]>),
    /// Noise IK message 2 (server to client).
    Resp(OuterPacket<&'a mut [u8]>),
    /// Sealed data for a session.
    Data(SealedData<'a>),
    /// A cookie for the client's source address (server to client, under load).
    CookieReply(OuterPacket<&'a mut [u8]>),
}

impl<'a> Datagram<'a> {
    /// Validates the outer header (type, reserved bits, length) and splits by type.
    pub fn parse(buf: &'a mut [u8]) -> Result<Self, WireError> {
        let p = OuterPacket::new_checked(buf)?;
        Ok(match p.kind() {
            MessageType::HandshakeInit => Datagram::Init(p),
            MessageType::HandshakeResp => Datagram::Resp(p),
            MessageType::CookieReply => Datagram::CookieReply(p),
            MessageType::Data => Datagram::Data(SealedData {
                receiver_index: p.index(),
                counter: p.counter(),
                path: PathId(p.path()),
                datagram: p.into_inner(),
            }),
        })
    }
}
