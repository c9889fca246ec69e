//! The two kinds of record and their signed wire encoding (PROTOCOL.md §17.1).
//!
//! Role: what the name service maps a name to. An identity (a client, named by its session
//! id) maps to the server it is attached through, its addresses per link and its policy —
//! MobilityFirst's GUID → network addresses + policy; a server maps to its tunnel address,
//! its resolver address, its public key (the record's own key) and its load.
//!
//! Encoding (big-endian): `version 1 | kind 1 | key 32 | seq 8 | expires_ms 8 | body_len 2 |
//! body | signature 64`, the signature (`sign.rs`) covering everything before it. The name
//! is never sent: it is computed from `key`, so a record cannot claim a name it does not
//! own.
//!
//! Invariants: `decode(encode(r)) == r` for every record within the limits; decoding never
//! panics, never reads past the input and refuses trailing bytes; no encoding exceeds
//! [`MAX_RECORD`].

use multihome_proto::crypto::{PublicKey, SessionId};
use std::net::{IpAddr, SocketAddr};

/// Wire version of records.
pub const VERSION: u8 = 1;
/// Largest encoded record accepted or produced (signature included).
pub const MAX_RECORD: usize = 700;
/// Links in one identity record at most (as many as a client has).
pub const MAX_LINKS: usize = 16;
/// Longest link name (an interface name's limit).
pub const MAX_LINK_NAME: usize = 15;
/// Tunnel addresses in one server record at most.
pub const MAX_SERVER_ADDRS: usize = 4;
/// Bytes before the body.
pub const HEADER_LEN: usize = 1 + 1 + 32 + 8 + 8 + 2;

/// What a record names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A client identity (session id).
    Identity = 1,
    /// A server.
    Server = 2,
}

impl Kind {
    /// From its wire code.
    pub fn from_code(c: u8) -> Option<Kind> {
        match c {
            1 => Some(Kind::Identity),
            2 => Some(Kind::Server),
            _ => None,
        }
    }
}

/// One link of an identity: its name and the address it is reached at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkAddr {
    /// The link's name (1–15 bytes, as in client.toml).
    pub name: String,
    /// Its address (the interface's; port 0 when not known).
    pub addr: SocketAddr,
}

/// Where an identity is attached and how it wants its traffic carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityBody {
    /// Name of the server it is attached through (`None`: not attached).
    pub server: Option<SessionId>,
    /// Default policy code (0 best, 1 redundant, 2 aggregate, 3 realtime).
    pub policy: u8,
    /// Its links that are up.
    pub links: Vec<LinkAddr>,
}

/// A server's addresses and load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerBody {
    /// Where clients send tunnel datagrams (1–4).
    pub tunnel: Vec<SocketAddr>,
    /// Where resolver requests go.
    pub resolver: SocketAddr,
    /// Sessions served now.
    pub load: u32,
    /// Sessions it is meant to serve (load / capacity ranks servers; never 0).
    pub capacity: u32,
}

/// The body, by kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// An identity's.
    Identity(IdentityBody),
    /// A server's.
    Server(ServerBody),
}

/// A record before signing (or after verification).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The owner's X25519 public key; the name is its hash.
    pub key: PublicKey,
    /// Higher replaces lower; never reused by the owner.
    pub seq: u64,
    /// End of the lease (Unix time, ms): after it the record is gone.
    pub expires_ms: u64,
    /// What the name maps to.
    pub body: Body,
}

/// Why bytes are not a record (the codec's part of the refusals).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// Longer than [`MAX_RECORD`].
    Oversized,
    /// No room for a signature.
    Unsigned,
    /// Anything else malformed.
    Malformed,
}

impl Record {
    /// The name: the session id of `key` (BLAKE2s of the key, as the tunnel computes it).
    pub fn name(&self) -> SessionId {
        self.key.session_id()
    }

    /// Its kind.
    pub fn kind(&self) -> Kind {
        match self.body {
            Body::Identity(_) => Kind::Identity,
            Body::Server(_) => Kind::Server,
        }
    }

    /// The signed part: header and body (the signature is appended by `SignedRecord`).
    pub fn encode_unsigned(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(64);
        match &self.body {
            Body::Identity(b) => encode_identity(b, &mut body),
            Body::Server(b) => encode_server(b, &mut body),
        }
        let mut out = Vec::with_capacity(HEADER_LEN + body.len() + 64);
        out.push(VERSION);
        out.push(self.kind() as u8);
        out.extend_from_slice(&self.key.0);
        out.extend_from_slice(&self.seq.to_be_bytes());
        out.extend_from_slice(&self.expires_ms.to_be_bytes());
        out.extend_from_slice(&(body.len() as u16).to_be_bytes());
        out.extend_from_slice(&body);
        out
    }

    /// Decodes the signed part (`bytes` without the signature); refuses trailing bytes.
    pub fn decode_unsigned(bytes: &[u8]) -> Result<Record, DecodeError> {
        let mut r = Reader(bytes);
        if r.u8()? != VERSION {
            return Err(DecodeError::Malformed);
        }
        let kind = Kind::from_code(r.u8()?).ok_or(DecodeError::Malformed)?;
        let key = PublicKey(r.array()?);
        let seq = r.u64()?;
        let expires_ms = r.u64()?;
        let len = usize::from(r.u16()?);
        let mut b = Reader(r.take(len)?);
        let body = match kind {
            Kind::Identity => Body::Identity(decode_identity(&mut b)?),
            Kind::Server => Body::Server(decode_server(&mut b)?),
        };
        if !b.0.is_empty() || !r.0.is_empty() {
            return Err(DecodeError::Malformed);
        }
        Ok(Record {
            key,
            seq,
            expires_ms,
            body,
        })
    }
}

fn encode_addr(a: &SocketAddr, out: &mut Vec<u8>) {
    match a.ip() {
        IpAddr::V4(ip) => {
            out.push(4);
            out.extend_from_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            out.push(6);
            out.extend_from_slice(&ip.octets());
        }
    }
    out.extend_from_slice(&a.port().to_be_bytes());
}

fn encode_identity(b: &IdentityBody, out: &mut Vec<u8>) {
    out.extend_from_slice(&b.server.map_or([0; 16], |s| s.0));
    out.push(b.policy);
    out.push(b.links.len() as u8);
    for l in &b.links {
        out.push(l.name.len() as u8);
        out.extend_from_slice(l.name.as_bytes());
        encode_addr(&l.addr, out);
    }
}

fn encode_server(b: &ServerBody, out: &mut Vec<u8>) {
    out.extend_from_slice(&b.load.to_be_bytes());
    out.extend_from_slice(&b.capacity.to_be_bytes());
    encode_addr(&b.resolver, out);
    out.push(b.tunnel.len() as u8);
    for a in &b.tunnel {
        encode_addr(a, out);
    }
}

fn decode_identity(r: &mut Reader<'_>) -> Result<IdentityBody, DecodeError> {
    let server: [u8; 16] = r.array()?;
    let policy = r.u8()?;
    if policy > 3 {
        return Err(DecodeError::Malformed);
    }
    let n = usize::from(r.u8()?);
    if n > MAX_LINKS {
        return Err(DecodeError::Malformed);
    }
    let mut links = Vec::with_capacity(n);
    for _ in 0..n {
        let len = usize::from(r.u8()?);
        if len == 0 || len > MAX_LINK_NAME {
            return Err(DecodeError::Malformed);
        }
        let name = std::str::from_utf8(r.take(len)?).map_err(|_| DecodeError::Malformed)?;
        let addr = r.addr()?;
        links.push(LinkAddr {
            name: name.to_owned(),
            addr,
        });
    }
    Ok(IdentityBody {
        server: (server != [0; 16]).then_some(SessionId(server)),
        policy,
        links,
    })
}

fn decode_server(r: &mut Reader<'_>) -> Result<ServerBody, DecodeError> {
    let load = r.u32()?;
    let capacity = r.u32()?;
    let resolver = r.addr()?;
    let n = usize::from(r.u8()?);
    if n == 0 || n > MAX_SERVER_ADDRS || capacity == 0 {
        return Err(DecodeError::Malformed);
    }
    let tunnel = (0..n).map(|_| r.addr()).collect::<Result<_, _>>()?;
    Ok(ServerBody {
        tunnel,
        resolver,
        load,
        capacity,
    })
}

/// A cursor that refuses to read past its input.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.0.len() < n {
            return Err(DecodeError::Malformed);
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        Ok(self.take(N)?.try_into().expect("length checked"))
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.array()?))
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.array()?))
    }
    fn addr(&mut self) -> Result<SocketAddr, DecodeError> {
        let ip: IpAddr = match self.u8()? {
            4 => IpAddr::from(self.array::<4>()?),
            6 => IpAddr::from(self.array::<16>()?),
            _ => return Err(DecodeError::Malformed),
        };
        Ok(SocketAddr::new(ip, self.u16()?))
    }
}
