//! Stream mode's records: after the handshake, each direction is a sequence of frames
//! `len (u16, big-endian) ‖ ChaCha20-Poly1305(kind ‖ data) ‖ tag`, sealed under that
//! direction's key with the record's number (from 0) as nonce and `len` as associated data.
//! A stream is reliable and ordered (MPTCP), so the receiver counts records itself: a
//! dropped, repeated or reordered record fails to open.
//!
//! Kinds: `Data` (1..=[`MAX_DATA`] bytes), `Fin` (the sender will send no more: the far
//! end half-closes its TCP connection) and `Reset` (abort: the far end resets its TCP
//! connection). Invariant: a record is parsed only after it authenticated.

use super::StreamError;
use crate::crypto::{DataCipher, OpenKey, SealKey, TAG_LEN};
use std::cell::Cell;

/// Most application bytes per record (as TLS: small enough that a record is a few
/// packets, large enough that the 19 bytes of framing and tag cost ~0.1 %).
pub const MAX_DATA: usize = 16 * 1024;
/// Framing added to a record's data: length, kind, tag.
pub const OVERHEAD: usize = 2 + 1 + TAG_LEN;

const KIND_DATA: u8 = 0;
const KIND_FIN: u8 = 1;
const KIND_RESET: u8 = 2;

/// One record's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record<'a> {
    /// Application bytes.
    Data(&'a [u8]),
    /// End of this direction.
    Fin,
    /// Abort the connection.
    Reset,
}

/// Seals the records this side sends.
pub struct RecordSealer {
    key: SealKey,
}

impl RecordSealer {
    pub(super) fn new(key: [u8; 32]) -> Self {
        RecordSealer {
            key: SealKey::new(DataCipher::ChaCha20Poly1305, key),
        }
    }

    /// Writes the frame of `record` into `out` (at least data length + [`OVERHEAD`]
    /// bytes); returns the frame's length. Data must be 1..=[`MAX_DATA`] bytes.
    pub fn seal(&mut self, record: Record<'_>, out: &mut [u8]) -> Result<usize, StreamError> {
        let (kind, data): (u8, &[u8]) = match record {
            Record::Data(d) if !d.is_empty() && d.len() <= MAX_DATA => (KIND_DATA, d),
            Record::Data(_) => return Err(StreamError::Record("data of 0 or too many bytes")),
            Record::Fin => (KIND_FIN, &[]),
            Record::Reset => (KIND_RESET, &[]),
        };
        let body = 1 + data.len() + TAG_LEN;
        if out.len() < 2 + body {
            return Err(StreamError::Record("output buffer too small"));
        }
        let len = (body as u16).to_be_bytes();
        out[..2].copy_from_slice(&len);
        out[2] = kind;
        out[3..3 + data.len()].copy_from_slice(data);
        let counter = self.key.next_counter().map_err(|_| StreamError::Auth)?;
        self.key
            .seal(counter, &len, &mut out[2..2 + body], 1 + data.len())
            .map_err(|_| StreamError::Auth)?;
        Ok(2 + body)
    }
}

/// Opens the records this side receives, in order.
pub struct RecordOpener {
    key: OpenKey,
    next: Cell<u64>,
}

impl RecordOpener {
    pub(super) fn new(key: [u8; 32]) -> Self {
        RecordOpener {
            key: OpenKey::new(DataCipher::ChaCha20Poly1305, key),
            next: Cell::new(0),
        }
    }

    /// Opens one frame's body (what follows its 2-byte length, decrypted in place) and
    /// returns the record, which borrows from `body`.
    pub fn open<'a>(&self, body: &'a mut [u8]) -> Result<Record<'a>, StreamError> {
        let len = u16::try_from(body.len())
            .map_err(|_| StreamError::Record("frame too long"))?
            .to_be_bytes();
        let counter = self.next.get();
        let n = self
            .key
            .open(counter, &len, body)
            .map_err(|_| StreamError::Auth)?;
        self.next.set(counter + 1);
        match (body.first(), n) {
            (Some(&KIND_DATA), 2..) if n - 1 <= MAX_DATA => Ok(Record::Data(&body[1..n])),
            (Some(&KIND_FIN), 1) => Ok(Record::Fin),
            (Some(&KIND_RESET), 1) => Ok(Record::Reset),
            _ => Err(StreamError::Record("unknown kind or bad length")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn keys() -> (RecordSealer, RecordOpener) {
        (RecordSealer::new([7; 32]), RecordOpener::new([7; 32]))
    }

    #[test]
    fn reordered_or_repeated_records_fail() {
        let (mut s, o) = keys();
        let mut a = vec![0u8; 64];
        let mut b = vec![0u8; 64];
        let na = s.seal(Record::Data(b"first"), &mut a).unwrap();
        let nb = s.seal(Record::Reset, &mut b).unwrap();
        assert_eq!(o.open(&mut b.clone()[2..nb]), Err(StreamError::Auth));
        assert_eq!(o.open(&mut a[2..na]).unwrap(), Record::Data(b"first"));
        assert_eq!(o.open(&mut b[2..nb]).unwrap(), Record::Reset);
    }

    #[test]
    fn empty_or_oversized_data_is_refused() {
        let (mut s, _) = keys();
        let mut out = vec![0u8; MAX_DATA + OVERHEAD + 1];
        assert!(s.seal(Record::Data(&[]), &mut out).is_err());
        assert!(s.seal(Record::Data(&[1; MAX_DATA + 1]), &mut out).is_err());
        assert_eq!(
            s.seal(Record::Data(&[1; MAX_DATA]), &mut out).unwrap(),
            MAX_DATA + OVERHEAD
        );
    }

    proptest! {
        /// Any data survives a seal/open round trip; a flipped bit anywhere is caught.
        #[test]
        fn round_trip_and_tamper(data in proptest::collection::vec(any::<u8>(), 1..2000),
                                 flip in any::<usize>()) {
            let (mut s, o) = keys();
            let mut out = vec![0u8; data.len() + OVERHEAD];
            let n = s.seal(Record::Data(&data), &mut out).unwrap();
            prop_assert_eq!(usize::from(u16::from_be_bytes([out[0], out[1]])), n - 2);
            let mut bad = out.clone();
            let i = 2 + flip % (n - 2);
            bad[i] ^= 1;
            prop_assert!(RecordOpener::new([7; 32]).open(&mut bad[2..n]).is_err());
            prop_assert_eq!(o.open(&mut out[2..n]).unwrap(), Record::Data(&data[..]));
        }

        /// Opening arbitrary bytes never panics.
        #[test]
        fn arbitrary_bodies_never_panic(body in proptest::collection::vec(any::<u8>(), 0..200)) {
            let (_, o) = keys();
            let mut body = body;
            let _ = o.open(&mut body);
        }
    }
}
