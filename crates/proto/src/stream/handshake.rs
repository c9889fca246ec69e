//! Stream mode's handshake: `Noise_IK_25519_ChaChaPoly_BLAKE2s` with its own prologue (a
//! tunnel or relay message can never be read as a stream one), the tunnel's static keys.
//!
//! - Message 1 (client → server) carries: version (1), the client's timestamp (µs, for
//!   [`super::InitReplay`]) and the destination the LAN host asked for.
//! - Message 2 (server → client) is written only once the server's own connect to that
//!   destination finished, and carries its outcome ([`ConnectStatus`]), so a refusal
//!   reaches the client as one byte.
//!
//! Both payloads are encrypted and authenticated by the handshake. The split keys seal the
//! records that follow (ChaCha20-Poly1305, one counter per direction from 0).

use super::record::{RecordOpener, RecordSealer};
use super::StreamError;
use crate::crypto::noise::builder_with_prologue;
use crate::crypto::{PublicKey, StaticSecret};
use snow::HandshakeState;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

const PROLOGUE: &[u8] = b"multihome stream v1";
const VERSION: u8 = 1;
/// Longest message 1 payload: version, timestamp, family, IPv6 address, port.
pub const INIT_PAYLOAD_MAX: usize = 1 + 8 + 1 + 16 + 2;
/// Room for either handshake message (Noise IK message 1 is 96 bytes + payload + tag).
pub const HANDSHAKE_MAX: usize = 256;

/// The destination of a stream: the address and port the LAN host connected to.
pub type Target = SocketAddr;

/// The server's outcome of its connect to the destination (message 2's payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectStatus {
    /// Connected: records follow.
    Connected,
    /// The destination refused (it answered the SYN with a reset).
    Refused,
    /// No route, host or network unreachable, or another error.
    Unreachable,
    /// No answer within the server's connect timeout.
    TimedOut,
}

impl ConnectStatus {
    fn to_wire(self) -> u8 {
        match self {
            ConnectStatus::Connected => 0,
            ConnectStatus::Refused => 1,
            ConnectStatus::Unreachable => 2,
            ConnectStatus::TimedOut => 3,
        }
    }

    fn from_wire(b: u8) -> Result<Self, StreamError> {
        Ok(match b {
            0 => ConnectStatus::Connected,
            1 => ConnectStatus::Refused,
            2 => ConnectStatus::Unreachable,
            3 => ConnectStatus::TimedOut,
            _ => return Err(StreamError::Payload("unknown connect status")),
        })
    }
}

fn herr(e: snow::Error) -> StreamError {
    StreamError::Handshake(e.to_string())
}

/// Encodes message 1's payload into `out`; returns its length.
pub fn encode_init(timestamp_us: u64, target: Target, out: &mut [u8; INIT_PAYLOAD_MAX]) -> usize {
    out[0] = VERSION;
    out[1..9].copy_from_slice(&timestamp_us.to_be_bytes());
    let n = match target.ip() {
        IpAddr::V4(a) => {
            out[9] = 4;
            out[10..14].copy_from_slice(&a.octets());
            14
        }
        IpAddr::V6(a) => {
            out[9] = 6;
            out[10..26].copy_from_slice(&a.octets());
            26
        }
    };
    out[n..n + 2].copy_from_slice(&target.port().to_be_bytes());
    n + 2
}

/// Decodes message 1's payload: (timestamp, target).
pub fn decode_init(p: &[u8]) -> Result<(u64, Target), StreamError> {
    if p.len() < 10 {
        return Err(StreamError::Payload("short"));
    }
    if p[0] != VERSION {
        return Err(StreamError::Payload("unknown version"));
    }
    let ts = u64::from_be_bytes(
        p[1..9]
            .try_into()
            .map_err(|_| StreamError::Payload("short"))?,
    );
    let (ip, rest): (IpAddr, &[u8]) = match (p[9], &p[10..]) {
        (4, r) if r.len() == 6 => {
            let a: [u8; 4] = r[..4]
                .try_into()
                .map_err(|_| StreamError::Payload("short"))?;
            (Ipv4Addr::from(a).into(), &r[4..])
        }
        (6, r) if r.len() == 18 => {
            let a: [u8; 16] = r[..16]
                .try_into()
                .map_err(|_| StreamError::Payload("short"))?;
            (Ipv6Addr::from(a).into(), &r[16..])
        }
        _ => return Err(StreamError::Payload("bad address family or length")),
    };
    let port = u16::from_be_bytes([rest[0], rest[1]]);
    if port == 0 || ip.is_unspecified() {
        return Err(StreamError::Payload("unspecified destination"));
    }
    Ok((ts, SocketAddr::new(ip, port)))
}

fn keys(mut hs: HandshakeState, initiator: bool) -> (RecordSealer, RecordOpener) {
    let (i2r, r2i) = hs.dangerously_get_raw_split();
    let (seal, open) = if initiator { (i2r, r2i) } else { (r2i, i2r) };
    (RecordSealer::new(seal), RecordOpener::new(open))
}

/// The client's side of one stream's handshake.
pub struct StreamInitiator {
    hs: HandshakeState,
}

impl StreamInitiator {
    /// Writes message 1 for `target` into `out` (at least [`HANDSHAKE_MAX`] bytes); returns
    /// the initiator and the message's length. `seed` is fresh randomness (ephemeral key).
    pub fn start(
        local: &StaticSecret,
        server: &PublicKey,
        seed: [u8; 32],
        timestamp_us: u64,
        target: Target,
        out: &mut [u8],
    ) -> Result<(Self, usize), StreamError> {
        let mut hs = builder_with_prologue(seed, PROLOGUE)
            .local_private_key(local.as_bytes())
            .remote_public_key(&server.0)
            .build_initiator()
            .map_err(herr)?;
        let mut payload = [0u8; INIT_PAYLOAD_MAX];
        let n = encode_init(timestamp_us, target, &mut payload);
        let len = hs.write_message(&payload[..n], out).map_err(herr)?;
        Ok((StreamInitiator { hs }, len))
    }

    /// Reads message 2: the server's connect outcome and, if connected, the record keys.
    pub fn finish(
        mut self,
        msg: &[u8],
    ) -> Result<(ConnectStatus, RecordSealer, RecordOpener), StreamError> {
        let mut payload = [0u8; HANDSHAKE_MAX];
        let n = self.hs.read_message(msg, &mut payload).map_err(herr)?;
        if n != 1 || !self.hs.is_handshake_finished() {
            return Err(StreamError::Payload("message 2 must carry one byte"));
        }
        let status = ConnectStatus::from_wire(payload[0])?;
        let (s, o) = keys(self.hs, true);
        Ok((status, s, o))
    }
}

/// The server's side: message 1 read and authenticated, message 2 not yet written.
pub struct StreamResponder {
    hs: HandshakeState,
    client: PublicKey,
    timestamp_us: u64,
    target: Target,
}

impl StreamResponder {
    /// Reads message 1. The caller checks [`Self::client`] against its peers and
    /// [`Self::timestamp_us`] with that peer's [`super::InitReplay`] before connecting.
    pub fn read(local: &StaticSecret, seed: [u8; 32], msg: &[u8]) -> Result<Self, StreamError> {
        let mut hs = builder_with_prologue(seed, PROLOGUE)
            .local_private_key(local.as_bytes())
            .build_responder()
            .map_err(herr)?;
        let mut payload = [0u8; HANDSHAKE_MAX];
        let n = hs.read_message(msg, &mut payload).map_err(herr)?;
        let (timestamp_us, target) = decode_init(&payload[..n])?;
        let client = hs
            .get_remote_static()
            .and_then(|r| <[u8; 32]>::try_from(r).ok())
            .map(PublicKey)
            .ok_or_else(|| StreamError::Handshake("no client static key".into()))?;
        Ok(StreamResponder {
            hs,
            client,
            timestamp_us,
            target,
        })
    }

    /// The client's static key (authenticated by message 1).
    pub fn client(&self) -> PublicKey {
        self.client
    }

    /// The client's timestamp.
    pub fn timestamp_us(&self) -> u64 {
        self.timestamp_us
    }

    /// Where the client wants to connect.
    pub fn target(&self) -> Target {
        self.target
    }

    /// Writes message 2 carrying `status` into `out`; returns its length and the keys.
    pub fn answer(
        mut self,
        status: ConnectStatus,
        out: &mut [u8],
    ) -> Result<(usize, RecordSealer, RecordOpener), StreamError> {
        let n = self
            .hs
            .write_message(&[status.to_wire()], out)
            .map_err(herr)?;
        let (s, o) = keys(self.hs, false);
        Ok((n, s, o))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::Record;

    fn pair(
        target: Target,
        status: ConnectStatus,
    ) -> (
        ConnectStatus,
        (RecordSealer, RecordOpener),
        (RecordSealer, RecordOpener),
    ) {
        let c = StaticSecret::from_bytes([1; 32]);
        let s = StaticSecret::from_bytes([2; 32]);
        let mut m1 = [0u8; HANDSHAKE_MAX];
        let (init, n1) =
            StreamInitiator::start(&c, &s.public_key(), [3; 32], 77, target, &mut m1).unwrap();
        let r = StreamResponder::read(&s, [4; 32], &m1[..n1]).unwrap();
        assert_eq!(r.client(), c.public_key());
        assert_eq!(r.timestamp_us(), 77);
        assert_eq!(r.target(), target);
        let mut m2 = [0u8; HANDSHAKE_MAX];
        let (n2, ss, so) = r.answer(status, &mut m2).unwrap();
        let (got, cs, co) = init.finish(&m2[..n2]).unwrap();
        (got, (cs, co), (ss, so))
    }

    #[test]
    fn target_and_status_travel_and_records_open_both_ways() {
        for target in ["10.50.0.9:80", "[2001:db8::7]:443"] {
            let target: Target = target.parse().unwrap();
            let (status, (mut cs, co), (mut ss, so)) = pair(target, ConnectStatus::Refused);
            assert_eq!(status, ConnectStatus::Refused);
            let mut buf = vec![0u8; 64];
            let n = cs.seal(Record::Data(b"hello"), &mut buf).unwrap();
            let got = so.open(&mut buf[2..n]).unwrap();
            assert_eq!(got, Record::Data(b"hello"));
            let n = ss.seal(Record::Fin, &mut buf).unwrap();
            assert_eq!(co.open(&mut buf[2..n]).unwrap(), Record::Fin);
        }
    }

    #[test]
    fn a_tampered_message_1_or_a_wrong_server_key_fails() {
        let c = StaticSecret::from_bytes([1; 32]);
        let s = StaticSecret::from_bytes([2; 32]);
        let other = StaticSecret::from_bytes([9; 32]);
        let t: Target = "10.0.0.1:22".parse().unwrap();
        let mut m1 = [0u8; HANDSHAKE_MAX];
        let (_, n1) = StreamInitiator::start(&c, &s.public_key(), [3; 32], 1, t, &mut m1).unwrap();
        assert!(StreamResponder::read(&other, [4; 32], &m1[..n1]).is_err());
        m1[n1 - 1] ^= 1;
        assert!(StreamResponder::read(&s, [4; 32], &m1[..n1]).is_err());
    }

    #[test]
    fn malformed_payloads_are_errors() {
        assert!(decode_init(&[]).is_err());
        assert!(decode_init(&[2; 16]).is_err());
        let mut p = [0u8; INIT_PAYLOAD_MAX];
        let n = encode_init(5, "10.1.2.3:9".parse().unwrap(), &mut p);
        assert_eq!(
            decode_init(&p[..n]).unwrap(),
            (5, "10.1.2.3:9".parse().unwrap())
        );
        assert!(decode_init(&p[..n - 1]).is_err());
        let n0 = encode_init(5, "10.1.2.3:0".parse().unwrap(), &mut p);
        assert!(decode_init(&p[..n0]).is_err(), "port 0");
    }
}
