//! The cleartext outer header (see `docs/PROTOCOL.md` §2).
//!
//! ```text
//! HandshakeInit: type=1 | path u8 | 0u16 | sender_index u32 | noise IK message 1 (108 B) | mac1 | mac2
//! HandshakeResp: type=2 | path u8 | 0u16 | sender_index u32 | receiver_index u32 | noise msg 2 (49 B) | mac1 | mac2
//! Data:          type=3 | path u8 | 0u16 | receiver_index u32 | counter u64 | sealed payload + tag
//! CookieReply:   type=4 | path u8 | 0u16 | receiver_index u32 | nonce (24 B) | sealed cookie (32 B)
//! ```
//! The whole 16-byte data header is the AEAD's associated data, so the path id and the
//! counter are authenticated although they travel in clear. The MAC fields (16 bytes
//! each, `crypto/cookie.rs`) end every handshake message.

use super::WireError;
use crate::crypto::cookie::{COOKIE_NONCE_LEN, MACS_LEN, SEALED_COOKIE_LEN};

/// Length of the data header (also the AEAD associated data).
pub const DATA_HEADER_LEN: usize = 16;
/// Length of the Noise IK first message with our 12-byte payload: e, s (+tag), payload (+tag).
pub const NOISE_INIT_LEN: usize = 32 + 48 + 12 + 16;
/// Length of the Noise IK second message with its 1-byte flags payload: e, payload, tag.
pub const NOISE_RESP_LEN: usize = 32 + 1 + 16;
/// Full length of a handshake initiation datagram.
pub const HANDSHAKE_INIT_LEN: usize = 8 + NOISE_INIT_LEN + MACS_LEN;
/// Full length of a handshake response datagram.
pub const HANDSHAKE_RESP_LEN: usize = 12 + NOISE_RESP_LEN + MACS_LEN;
/// Full length of a cookie reply datagram.
pub const COOKIE_REPLY_LEN: usize = 8 + COOKIE_NONCE_LEN + SEALED_COOKIE_LEN;

/// The first byte of every datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageType {
    /// Noise IK message 1, client to server.
    HandshakeInit = 1,
    /// Noise IK message 2, server to client.
    HandshakeResp = 2,
    /// Transport data sealed with the session keys.
    Data = 3,
    /// A cookie for the initiator's source address, server to client (under load).
    CookieReply = 4,
}

impl MessageType {
    fn from_byte(b: u8) -> Result<Self, WireError> {
        match b {
            1 => Ok(MessageType::HandshakeInit),
            2 => Ok(MessageType::HandshakeResp),
            3 => Ok(MessageType::Data),
            4 => Ok(MessageType::CookieReply),
            other => Err(WireError::UnknownType(other)),
        }
    }
}

/// A validated view of a datagram's outer header. Accessors never panic once
/// `new_checked` has succeeded.
#[derive(Debug, Clone, Copy)]
pub struct OuterPacket<T: AsRef<[u8]>> {
    buf: T,
    kind: MessageType,
}

impl<T: AsRef<[u8]>> OuterPacket<T> {
    /// Validates type, reserved bits and the length required by the type.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        let first = *b.first().ok_or(WireError::Truncated { need: 1, have: 0 })?;
        let kind = MessageType::from_byte(first)?;
        let need = match kind {
            MessageType::HandshakeInit => HANDSHAKE_INIT_LEN,
            MessageType::HandshakeResp => HANDSHAKE_RESP_LEN,
            MessageType::Data => DATA_HEADER_LEN + crate::crypto::TAG_LEN,
            MessageType::CookieReply => COOKIE_REPLY_LEN,
        };
        if b.len() < need {
            return Err(WireError::Truncated {
                need,
                have: b.len(),
            });
        }
        if kind != MessageType::Data && b.len() != need {
            // Handshakes and cookie replies have a fixed size; anything else is not ours.
            return Err(WireError::Truncated {
                need,
                have: b.len(),
            });
        }
        if b[2] != 0 || b[3] != 0 {
            return Err(WireError::Reserved);
        }
        Ok(OuterPacket { buf, kind })
    }

    /// The message type.
    pub fn kind(&self) -> MessageType {
        self.kind
    }

    /// The path (link) id the sender put the datagram on.
    pub fn path(&self) -> u8 {
        self.buf.as_ref()[1]
    }

    /// Sender's index (handshake messages); receiver's index (data, cookie reply).
    pub fn index(&self) -> u32 {
        read_u32(self.buf.as_ref(), 4)
    }

    /// Receiver index of a handshake response.
    pub fn resp_receiver_index(&self) -> u32 {
        read_u32(self.buf.as_ref(), 8)
    }

    /// The AEAD nonce counter of a data message.
    pub fn counter(&self) -> u64 {
        let b = self.buf.as_ref();
        u64::from_be_bytes(b[8..16].try_into().unwrap_or([0; 8]))
    }

    /// The Noise message carried by a handshake (without the MAC fields).
    pub fn noise(&self) -> &[u8] {
        let b = self.buf.as_ref();
        match self.kind {
            MessageType::HandshakeInit => &b[8..8 + NOISE_INIT_LEN],
            MessageType::HandshakeResp => &b[12..12 + NOISE_RESP_LEN],
            MessageType::Data | MessageType::CookieReply => &[],
        }
    }

    /// The whole datagram (a handshake's MACs cover it, `crypto::cookie`).
    pub fn bytes(&self) -> &[u8] {
        self.buf.as_ref()
    }

    /// The nonce and the sealed cookie of a cookie reply (zeros for other types).
    pub fn cookie_reply(&self) -> ([u8; COOKIE_NONCE_LEN], [u8; SEALED_COOKIE_LEN]) {
        let b = self.buf.as_ref();
        let field = |at: usize, n: usize| {
            b.get(at..at + n)
                .filter(|_| self.kind == MessageType::CookieReply)
        };
        (
            field(8, COOKIE_NONCE_LEN)
                .and_then(|s| s.try_into().ok())
                .unwrap_or([0; COOKIE_NONCE_LEN]),
            field(8 + COOKIE_NONCE_LEN, SEALED_COOKIE_LEN)
                .and_then(|s| s.try_into().ok())
                .unwrap_or([0; SEALED_COOKIE_LEN]),
        )
    }

    /// The data header (associated data) and the sealed payload with its tag.
    pub fn split_data(&self) -> (&[u8], &[u8]) {
        self.buf.as_ref().split_at(DATA_HEADER_LEN)
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buf
    }
}

fn read_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]))
}

/// Writes a cookie reply (`COOKIE_REPLY_LEN` bytes into `out`).
pub fn emit_cookie_reply(
    out: &mut [u8; COOKIE_REPLY_LEN],
    path: u8,
    receiver_index: u32,
    nonce: &[u8; COOKIE_NONCE_LEN],
    sealed: &[u8; SEALED_COOKIE_LEN],
) {
    out[0] = MessageType::CookieReply as u8;
    out[1] = path;
    out[2..4].fill(0);
    out[4..8].copy_from_slice(&receiver_index.to_be_bytes());
    out[8..8 + COOKIE_NONCE_LEN].copy_from_slice(nonce);
    out[8 + COOKIE_NONCE_LEN..].copy_from_slice(sealed);
}

/// Writes a handshake initiation header; the caller appends the Noise message at `[8..]`.
pub fn emit_init_header(out: &mut [u8], path: u8, sender_index: u32) {
    out[0] = MessageType::HandshakeInit as u8;
    out[1] = path;
    out[2..4].fill(0);
    out[4..8].copy_from_slice(&sender_index.to_be_bytes());
}

/// Writes a handshake response header; the caller appends the Noise message at `[12..]`.
pub fn emit_resp_header(out: &mut [u8], path: u8, sender_index: u32, receiver_index: u32) {
    out[0] = MessageType::HandshakeResp as u8;
    out[1] = path;
    out[2..4].fill(0);
    out[4..8].copy_from_slice(&sender_index.to_be_bytes());
    out[8..12].copy_from_slice(&receiver_index.to_be_bytes());
}

/// Writes a data header (16 bytes).
pub fn emit_data_header(out: &mut [u8], path: u8, receiver_index: u32, counter: u64) {
    out[0] = MessageType::Data as u8;
    out[1] = path;
    out[2..4].fill(0);
    out[4..8].copy_from_slice(&receiver_index.to_be_bytes());
    out[8..16].copy_from_slice(&counter.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn data_header_fixture() {
        let mut b = [0u8; 32];
        emit_data_header(&mut b, 7, 0x0102_0304, 0x1122_3344_5566_7788);
        assert_eq!(
            &b[..16],
            &[3, 7, 0, 0, 1, 2, 3, 4, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]
        );
        let p = OuterPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.kind(), MessageType::Data);
        assert_eq!(p.path(), 7);
        assert_eq!(p.index(), 0x0102_0304);
        assert_eq!(p.counter(), 0x1122_3344_5566_7788);
    }

    #[test]
    fn rejects_bad_input() {
        assert!(OuterPacket::new_checked(&[][..]).is_err());
        assert_eq!(
            OuterPacket::new_checked(&[9u8; 40][..]).unwrap_err(),
            WireError::UnknownType(9)
        );
        let mut b = [0u8; 40];
        emit_data_header(&mut b, 0, 1, 1);
        b[2] = 1;
        assert_eq!(
            OuterPacket::new_checked(&b[..]).unwrap_err(),
            WireError::Reserved
        );
        assert!(OuterPacket::new_checked(&b[..20]).is_err());
        let mut h = [0u8; HANDSHAKE_INIT_LEN + 1];
        emit_init_header(&mut h, 0, 5);
        assert!(OuterPacket::new_checked(&h[..]).is_err());
        assert!(OuterPacket::new_checked(&h[..HANDSHAKE_INIT_LEN]).is_ok());
        let mut c = [0u8; COOKIE_REPLY_LEN + 1];
        c[0] = 4;
        assert!(OuterPacket::new_checked(&c[..]).is_err());
        assert!(OuterPacket::new_checked(&c[..COOKIE_REPLY_LEN - 1]).is_err());
        assert!(OuterPacket::new_checked(&c[..COOKIE_REPLY_LEN]).is_ok());
    }

    #[test]
    fn sizes_and_cookie_reply_fixture() {
        assert_eq!((HANDSHAKE_INIT_LEN, HANDSHAKE_RESP_LEN), (148, 93));
        assert_eq!(COOKIE_REPLY_LEN, 64);
        let mut b = [0u8; COOKIE_REPLY_LEN];
        emit_cookie_reply(&mut b, 1, 0x0a0b_0c0d, &[5; 24], &[6; 32]);
        assert_eq!(&b[..8], &[4, 1, 0, 0, 0x0a, 0x0b, 0x0c, 0x0d]);
        let p = OuterPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.kind(), MessageType::CookieReply);
        assert_eq!((p.path(), p.index()), (1, 0x0a0b_0c0d));
        assert_eq!(p.cookie_reply(), ([5; 24], [6; 32]));
        assert!(p.noise().is_empty());
    }

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(p) = OuterPacket::new_checked(&data[..]) {
                let _ = (p.path(), p.index(), p.counter(), p.noise(), p.split_data());
                let _ = (p.bytes(), p.cookie_reply());
                if p.kind() == MessageType::HandshakeResp { let _ = p.resp_receiver_index(); }
            }
        }

        #[test]
        fn resp_round_trip(path: u8, s: u32, r: u32) {
            let mut b = [0u8; HANDSHAKE_RESP_LEN];
            emit_resp_header(&mut b, path, s, r);
            let p = OuterPacket::new_checked(&b[..]).unwrap();
            prop_assert_eq!((p.path(), p.index(), p.resp_receiver_index()), (path, s, r));
        }
    }
}
