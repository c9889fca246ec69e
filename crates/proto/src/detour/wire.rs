//! Wire format of the relay protocol (docs/PROTOCOL.md §15): the cleartext 8-byte header
//! and the two Noise payloads. Parsing never panics and never reads past the input.
//!
//! ```text
//! Request: type=8 | version=1 | 0u16 | request_id u32 | Noise IK message 1 (132 B, payload 36 B)
//! Answer:  type=9 | version=1 | 0u16 | request_id u32 | Noise IK message 2 (80 B, payload 32 B)
//! ```

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Noise prologue of the relay protocol (the tunnel's is `multihome v2`).
pub const PROLOGUE: &[u8] = b"multihome relay v1";
/// First byte of a relay request (never a tunnel message type, so one socket can carry both).
pub const TYPE_REQUEST: u8 = 8;
/// First byte of a relay answer.
pub const TYPE_ANSWER: u8 = 9;
/// Version byte of this format.
pub const VERSION: u8 = 1;
/// Length of the cleartext header.
pub const HEADER_LEN: usize = 8;
/// Plaintext payload of the request (inside Noise message 1).
pub const REQUEST_PAYLOAD_LEN: usize = 36;
/// Plaintext payload of the answer (inside Noise message 2).
pub const ANSWER_PAYLOAD_LEN: usize = 32;
/// Noise IK message 1 with the request: e, s (+tag), payload (+tag).
pub const NOISE_REQUEST_LEN: usize = 32 + 48 + REQUEST_PAYLOAD_LEN + 16;
/// Noise IK message 2 with the answer: e, payload (+tag).
pub const NOISE_ANSWER_LEN: usize = 32 + ANSWER_PAYLOAD_LEN + 16;
/// Full request datagram.
pub const REQUEST_LEN: usize = HEADER_LEN + NOISE_REQUEST_LEN;
/// Full answer datagram (smaller than the request: the relay amplifies nothing).
pub const ANSWER_LEN: usize = HEADER_LEN + NOISE_ANSWER_LEN;

/// Request flag: remove the detour instead of creating or renewing it.
pub const FLAG_RELEASE: u8 = 0x01;

/// Errors of the relay protocol's parsers and state machines.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DetourError {
    /// Wrong length, type, version or a reserved field not zero.
    #[error("malformed relay message: {0}")]
    Malformed(&'static str),
    /// The Noise handshake failed (wrong key, forged or corrupted message).
    #[error("relay handshake failed")]
    Handshake,
    /// Too many requests are waiting for an answer.
    #[error("too many pending relay requests")]
    TooManyPending,
}

/// How the relay forwards a detour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    /// Kernel forwarding: nftables DNAT + SNAT, no per-packet work in the relay process.
    Nat = 1,
    /// Userspace forwarding through a relay socket (batched), for relays that cannot NAT.
    Tunnel = 2,
    /// Kernel forwarding of TCP (nftables DNAT + SNAT): a kernel MPTCP subflow from the
    /// request's source address and port (the client binds its TCP subflow to the port its
    /// request came from). Offered with `Nat`.
    NatTcp = 3,
}

impl Mode {
    pub(crate) fn from_byte(b: u8) -> Result<Mode, DetourError> {
        match b {
            1 => Ok(Mode::Nat),
            2 => Ok(Mode::Tunnel),
            3 => Ok(Mode::NatTcp),
            _ => Err(DetourError::Malformed("unknown mode")),
        }
    }

    /// The name used in configs and logs.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Nat => "nat",
            Mode::Tunnel => "tunnel",
            Mode::NatTcp => "nat-tcp",
        }
    }
}

/// What the relay answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// The detour exists (created or renewed): send to the relay port.
    Ok = 0,
    /// The detour was removed (answer to a release).
    Released = 1,
    /// The relay does not offer this mode.
    ModeNotOffered = 2,
    /// This client has as many detours as it may have.
    ClientLimit = 3,
    /// The relay has as many detours as it may have, or no free port.
    RelayFull = 4,
    /// The relay does not forward to that server (address class, family, or its list).
    DestinationRefused = 5,
    /// The relay could not install the forwarding (see its log).
    Failed = 6,
    /// A release named no detour of this client.
    NotFound = 7,
}

impl Status {
    fn from_byte(b: u8) -> Result<Status, DetourError> {
        Ok(match b {
            0 => Status::Ok,
            1 => Status::Released,
            2 => Status::ModeNotOffered,
            3 => Status::ClientLimit,
            4 => Status::RelayFull,
            5 => Status::DestinationRefused,
            6 => Status::Failed,
            7 => Status::NotFound,
            _ => return Err(DetourError::Malformed("unknown status")),
        })
    }
}

/// A client's request: forward its datagrams (from the UDP source the relay sees) to
/// `server`, or stop doing so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Request {
    /// The server the relay forwards to.
    pub server: SocketAddr,
    /// NAT or tunnel.
    pub mode: Mode,
    /// Remove the detour instead.
    pub release: bool,
}

/// The relay's answer to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// Echo of the request's id.
    pub request_id: u32,
    /// Outcome.
    pub status: Status,
    /// The mode of the detour.
    pub mode: Mode,
    /// Port of the relay to send to (0 unless `status` is `Ok`).
    pub relay_port: u16,
    /// Seconds the detour lives unless renewed by a repeated request (0 unless `Ok`).
    pub lifetime_s: u32,
    /// The client's address and port as the relay saw them: the source the detour is for.
    pub observed: SocketAddr,
}

/// The cleartext header: message type and request id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// `TYPE_REQUEST` or `TYPE_ANSWER`.
    pub kind: u8,
    /// The request id (chosen by the client, echoed by the relay).
    pub request_id: u32,
}

/// Parses the header of a request or answer datagram of exactly the right length.
pub fn parse_header(data: &[u8]) -> Result<Header, DetourError> {
    let [kind, version, r0, r1, i0, i1, i2, i3, ..] = *data else {
        return Err(DetourError::Malformed("shorter than the header"));
    };
    let want = match kind {
        TYPE_REQUEST => REQUEST_LEN,
        TYPE_ANSWER => ANSWER_LEN,
        _ => return Err(DetourError::Malformed("not a relay message type")),
    };
    if version != VERSION {
        return Err(DetourError::Malformed("unknown version"));
    }
    if (r0, r1) != (0, 0) {
        return Err(DetourError::Malformed("reserved bytes not zero"));
    }
    if data.len() != want {
        return Err(DetourError::Malformed("wrong length"));
    }
    Ok(Header {
        kind,
        request_id: u32::from_be_bytes([i0, i1, i2, i3]),
    })
}

/// Writes the header into `out[..HEADER_LEN]`.
pub fn emit_header(out: &mut [u8], kind: u8, request_id: u32) {
    out[0] = kind;
    out[1] = VERSION;
    out[2..4].fill(0);
    out[4..8].copy_from_slice(&request_id.to_be_bytes());
}

/// Writes family, port and a 16-byte address field: `family u8 | reserved | port u16 | addr`.
pub(crate) fn emit_addr(out: &mut [u8; 20], a: SocketAddr) {
    out.fill(0);
    out[0] = if a.is_ipv4() { 4 } else { 6 };
    out[2..4].copy_from_slice(&a.port().to_be_bytes());
    match a.ip() {
        IpAddr::V4(v4) => out[4..8].copy_from_slice(&v4.octets()),
        IpAddr::V6(v6) => out[4..20].copy_from_slice(&v6.octets()),
    }
}

pub(crate) fn parse_addr(b: &[u8; 20]) -> Result<SocketAddr, DetourError> {
    if b[1] != 0 {
        return Err(DetourError::Malformed("reserved byte not zero"));
    }
    let port = u16::from_be_bytes([b[2], b[3]]);
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[4..20]);
    let ip = match b[0] {
        4 if a[4..].iter().all(|&x| x == 0) => IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3])),
        4 => return Err(DetourError::Malformed("IPv4 address with trailing bytes")),
        6 => IpAddr::V6(Ipv6Addr::from(a)),
        _ => return Err(DetourError::Malformed("unknown address family")),
    };
    Ok(SocketAddr::new(ip, port))
}

/// The request payload: `timestamp u64 | request_id u32 | mode u8 | flags u8 | 0u16 |
/// server (family u8 | 0 | port u16 | address 16 B)`.
pub fn emit_request_payload(timestamp_us: u64, request_id: u32, req: &Request) -> [u8; 36] {
    let mut p = [0u8; REQUEST_PAYLOAD_LEN];
    p[..8].copy_from_slice(&timestamp_us.to_be_bytes());
    p[8..12].copy_from_slice(&request_id.to_be_bytes());
    p[12] = req.mode as u8;
    p[13] = if req.release { FLAG_RELEASE } else { 0 };
    let mut a = [0u8; 20];
    emit_addr(&mut a, req.server);
    p[16..36].copy_from_slice(&a);
    p
}

/// Parses a request payload: (timestamp, request id, request).
pub fn parse_request_payload(p: &[u8]) -> Result<(u64, u32, Request), DetourError> {
    let p: &[u8; REQUEST_PAYLOAD_LEN] = p
        .try_into()
        .map_err(|_| DetourError::Malformed("request payload length"))?;
    let ts = u64::from_be_bytes(p[..8].try_into().expect("8 bytes"));
    let id = u32::from_be_bytes(p[8..12].try_into().expect("4 bytes"));
    let mode = Mode::from_byte(p[12])?;
    if p[13] & !FLAG_RELEASE != 0 || p[14..16] != [0, 0] {
        return Err(DetourError::Malformed("unknown flags or reserved bytes"));
    }
    let server = parse_addr(p[16..36].try_into().expect("20 bytes"))?;
    Ok((
        ts,
        id,
        Request {
            server,
            mode,
            release: p[13] & FLAG_RELEASE != 0,
        },
    ))
}

/// The answer payload: `request_id u32 | status u8 | mode u8 | relay_port u16 |
/// lifetime_s u32 | observed (family u8 | 0 | port u16 | address 16 B)`.
pub fn emit_answer_payload(a: &Answer) -> [u8; 32] {
    let mut p = [0u8; ANSWER_PAYLOAD_LEN];
    p[..4].copy_from_slice(&a.request_id.to_be_bytes());
    p[4] = a.status as u8;
    p[5] = a.mode as u8;
    p[6..8].copy_from_slice(&a.relay_port.to_be_bytes());
    p[8..12].copy_from_slice(&a.lifetime_s.to_be_bytes());
    let mut o = [0u8; 20];
    emit_addr(&mut o, a.observed);
    p[12..32].copy_from_slice(&o);
    p
}

/// Parses an answer payload.
pub fn parse_answer_payload(p: &[u8]) -> Result<Answer, DetourError> {
    let p: &[u8; ANSWER_PAYLOAD_LEN] = p
        .try_into()
        .map_err(|_| DetourError::Malformed("answer payload length"))?;
    Ok(Answer {
        request_id: u32::from_be_bytes(p[..4].try_into().expect("4 bytes")),
        status: Status::from_byte(p[4])?,
        mode: Mode::from_byte(p[5])?,
        relay_port: u16::from_be_bytes([p[6], p[7]]),
        lifetime_s: u32::from_be_bytes(p[8..12].try_into().expect("4 bytes")),
        observed: parse_addr(p[12..32].try_into().expect("20 bytes"))?,
    })
}
