//! Resolver requests and responses over UDP (PROTOCOL.md §17.2).
//!
//! Role: how a client reaches the name service. A resolver (every server that has a
//! `[naming]` section) answers LOOKUP (one record by kind and name), SERVERS (the server
//! records it knows) and PUBLISH (store a signed record). Records travel as signed bytes, so
//! the resolver and the path to it need not be trusted: the client checks every record
//! itself (`signed::admit`), and a resolver can only withhold, never forge.
//!
//! Layout (big-endian): `magic "MHNR" | version 1 | op 1 | id 4 | …`. Requests other than
//! PUBLISH are padded to [`REQUEST_MIN`] bytes and responses are at most [`RESPONSE_MAX`],
//! so a spoofed source gains at most 1200 / 256 ≈ 4.7× amplification.
//! Response: `… | status 1 | responder 16 | count 1 | (len 2 | record)*`.
//!
//! Invariant: parsing never panics and refuses trailing or missing bytes.

use crate::record::{Kind, MAX_RECORD};
use multihome_proto::crypto::SessionId;

/// First bytes of every message.
pub const MAGIC: &[u8; 4] = b"MHNR";
/// Wire version.
pub const VERSION: u8 = 1;
/// Least length of a LOOKUP or SERVERS request (padding against amplification).
pub const REQUEST_MIN: usize = 256;
/// Largest response.
pub const RESPONSE_MAX: usize = 1200;
const HEAD: usize = 4 + 1 + 1 + 4;

/// A request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// One record.
    Lookup {
        /// Its kind.
        kind: Kind,
        /// Its name.
        name: SessionId,
    },
    /// The server records the resolver knows.
    Servers,
    /// Store this signed record.
    Publish(Vec<u8>),
}

/// How a request went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Done; records follow (LOOKUP, SERVERS) or the record was stored (PUBLISH).
    Ok,
    /// No such record (or only an expired one).
    NotFound,
    /// The store could not be reached.
    Unavailable,
    /// PUBLISH refused; the code is `signed::Refusal`'s (1 oversized … 7 stale).
    Refused(u8),
}

impl Status {
    fn code(self) -> u8 {
        match self {
            Status::Ok => 0,
            Status::NotFound => 1,
            Status::Unavailable => 2,
            Status::Refused(r) => 16 + r,
        }
    }
    fn from_code(c: u8) -> Option<Status> {
        Some(match c {
            0 => Status::Ok,
            1 => Status::NotFound,
            2 => Status::Unavailable,
            16..=23 => Status::Refused(c - 16),
            _ => return None,
        })
    }
}

/// A response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The request's id.
    pub id: u32,
    /// The request's op (1 LOOKUP, 2 SERVERS, 3 PUBLISH).
    pub op: u8,
    /// Outcome.
    pub status: Status,
    /// Name of the server that answered.
    pub responder: SessionId,
    /// Signed records, unchecked (the receiver admits each).
    pub records: Vec<Vec<u8>>,
}

fn head(op: u8, id: u32, out: &mut Vec<u8>) {
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.push(op);
    out.extend_from_slice(&id.to_be_bytes());
}

impl Request {
    fn op(&self) -> u8 {
        match self {
            Request::Lookup { .. } => 1,
            Request::Servers => 2,
            Request::Publish(_) => 3,
        }
    }

    /// Encodes with request id `id`.
    pub fn encode(&self, id: u32) -> Vec<u8> {
        let mut out = Vec::with_capacity(REQUEST_MIN.max(HEAD + MAX_RECORD));
        head(self.op(), id, &mut out);
        match self {
            Request::Lookup { kind, name } => {
                out.push(*kind as u8);
                out.extend_from_slice(&name.0);
            }
            Request::Servers => {}
            Request::Publish(r) => out.extend_from_slice(r),
        }
        if !matches!(self, Request::Publish(_)) {
            out.resize(REQUEST_MIN, 0);
        }
        out
    }

    /// Parses a request and its id.
    pub fn parse(b: &[u8]) -> Option<(u32, Request)> {
        if b.len() < HEAD || &b[..4] != MAGIC || b[4] != VERSION {
            return None;
        }
        let id = u32::from_be_bytes(b[6..10].try_into().ok()?);
        let rest = &b[HEAD..];
        // The padding to REQUEST_MIN (no amplification) must be zeros, so that a request
        // has one encoding.
        let padded = |used: usize| rest.get(used..).is_some_and(|p| p.iter().all(|&x| x == 0));
        let req = match b[5] {
            1 if b.len() == REQUEST_MIN && padded(17) => Request::Lookup {
                kind: Kind::from_code(rest[0])?,
                name: SessionId(rest[1..17].try_into().ok()?),
            },
            2 if b.len() == REQUEST_MIN && padded(0) => Request::Servers,
            // Any length: a record over MAX_RECORD is refused as oversized by the store's
            // admission, which answers and counts it (the service reads at most 2 048 bytes).
            3 if !rest.is_empty() => Request::Publish(rest.to_vec()),
            _ => return None,
        };
        Some((id, req))
    }
}

impl Response {
    /// Encodes, leaving out records that would pass [`RESPONSE_MAX`] (the rest are
    /// dropped, so a SERVERS answer lists as many servers as fit).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(RESPONSE_MAX);
        head(self.op | 0x80, self.id, &mut out);
        out.push(self.status.code());
        out.extend_from_slice(&self.responder.0);
        let count_at = out.len();
        out.push(0);
        let mut n = 0u8;
        for r in &self.records {
            if out.len() + 2 + r.len() > RESPONSE_MAX || n == u8::MAX {
                break;
            }
            out.extend_from_slice(&(r.len() as u16).to_be_bytes());
            out.extend_from_slice(r);
            n += 1;
        }
        out[count_at] = n;
        out
    }

    /// Parses a response.
    pub fn parse(b: &[u8]) -> Option<Response> {
        if b.len() < HEAD + 18 || b.len() > RESPONSE_MAX || &b[..4] != MAGIC || b[4] != VERSION {
            return None;
        }
        if b[5] & 0x80 == 0 {
            return None;
        }
        let id = u32::from_be_bytes(b[6..10].try_into().ok()?);
        let status = Status::from_code(b[HEAD])?;
        let responder = SessionId(b[HEAD + 1..HEAD + 17].try_into().ok()?);
        let n = b[HEAD + 17];
        let mut rest = &b[HEAD + 18..];
        let mut records = Vec::with_capacity(usize::from(n));
        for _ in 0..n {
            if rest.len() < 2 {
                return None;
            }
            let len = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
            let r = rest.get(2..2 + len)?;
            records.push(r.to_vec());
            rest = &rest[2 + len..];
        }
        rest.is_empty().then_some(Response {
            id,
            op: b[5] & 0x7f,
            status,
            responder,
            records,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trips() {
        let name = SessionId([7; 16]);
        for r in [
            Request::Lookup {
                kind: Kind::Server,
                name,
            },
            Request::Servers,
            Request::Publish(vec![1, 2, 3]),
        ] {
            let mut b = r.encode(42);
            assert!(b.len() >= REQUEST_MIN || matches!(r, Request::Publish(_)));
            assert_eq!(Request::parse(&b), Some((42, r.clone())));
            if !matches!(r, Request::Publish(_)) {
                // One encoding only: a request with non-zero padding is refused (found by
                // the fuzz target, which checks that a parsed request encodes back).
                *b.last_mut().unwrap() = 1;
                assert_eq!(Request::parse(&b), None);
            }
        }
        let resp = Response {
            id: 9,
            op: 2,
            status: Status::Refused(7),
            responder: name,
            records: vec![vec![5; 300], vec![6; 300], vec![7; 300], vec![8; 300]],
        };
        let b = resp.encode();
        assert!(b.len() <= RESPONSE_MAX);
        let back = Response::parse(&b).unwrap();
        assert_eq!(
            back.records.len(),
            3,
            "the fourth does not fit in 1200 bytes"
        );
        assert_eq!((back.id, back.op, back.status), (9, 2, Status::Refused(7)));
    }

    proptest! {
        #[test]
        fn parsers_never_panic(b in proptest::collection::vec(any::<u8>(), 0..1300)) {
            if let Some((id, r)) = Request::parse(&b) {
                prop_assert_eq!(r.encode(id), b.clone());
            }
            if let Some(r) = Response::parse(&b) {
                prop_assert_eq!(r.encode(), b);
            }
        }
    }
}
