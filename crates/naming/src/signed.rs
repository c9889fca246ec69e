//! A record with its signature, and the checks every received record passes (admission).
//!
//! Role: the only way to a [`SignedRecord`] is signing with the owner's secret or
//! [`admit`], which refuses — and names why — oversized, unsigned, malformed, wrongly
//! signed, expired and over-long leases. Whether a record may replace the one stored under
//! its name (a higher sequence number) is [`supersedes`]; stores call it inside their
//! transaction. [`RefusalCounts`] counts refusals by reason for status and metrics.
//!
//! Invariants: a `SignedRecord`'s bytes are exactly what was verified (the record is
//! decoded from them, never re-encoded); `admit` reads no clock (`now_ms` is given) and
//! never panics on any input (fuzzed: `fuzz/fuzz_targets/naming_record.rs`).

use crate::record::{DecodeError, Kind, Record, HEADER_LEN, MAX_RECORD};
use crate::sign::{self, SIG_LEN};
use multihome_proto::crypto::{SessionId, StaticSecret};

/// Longest lease accepted: a dead attachment must vanish within this (1 hour).
pub const MAX_LEASE_MS: u64 = 3_600_000;

/// Why a record was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Longer than `MAX_RECORD`.
    #[error("record larger than {MAX_RECORD} bytes")]
    Oversized,
    /// No signature (too short to hold one, or all zeros).
    #[error("record is not signed")]
    Unsigned,
    /// Not a record of this version.
    #[error("malformed record")]
    Malformed,
    /// The signature is not its key's.
    #[error("signature does not verify against the record's key")]
    BadSignature,
    /// Its lease has ended.
    #[error("record expired")]
    Expired,
    /// A lease longer than `MAX_LEASE_MS` from now.
    #[error("lease longer than {MAX_LEASE_MS} ms")]
    LeaseTooLong,
    /// A sequence number not above the stored record's (a replay or an old copy).
    #[error("sequence number not above the stored record's")]
    Stale,
}

/// Refusals by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RefusalCounts {
    /// Too large.
    pub oversized: u64,
    /// No signature.
    pub unsigned: u64,
    /// Malformed.
    pub malformed: u64,
    /// Wrong signature.
    pub bad_signature: u64,
    /// Lease over.
    pub expired: u64,
    /// Lease too long.
    pub lease_too_long: u64,
    /// Sequence not higher.
    pub stale: u64,
}

impl RefusalCounts {
    /// Counts one refusal.
    pub fn count(&mut self, r: Refusal) {
        let c = match r {
            Refusal::Oversized => &mut self.oversized,
            Refusal::Unsigned => &mut self.unsigned,
            Refusal::Malformed => &mut self.malformed,
            Refusal::BadSignature => &mut self.bad_signature,
            Refusal::Expired => &mut self.expired,
            Refusal::LeaseTooLong => &mut self.lease_too_long,
            Refusal::Stale => &mut self.stale,
        };
        *c += 1;
    }

    /// All refusals.
    pub fn total(&self) -> u64 {
        self.oversized
            + self.unsigned
            + self.malformed
            + self.bad_signature
            + self.expired
            + self.lease_too_long
            + self.stale
    }
}

/// A record whose signature verified (or that we signed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedRecord {
    bytes: Vec<u8>,
    record: Record,
}

impl SignedRecord {
    /// Signs `record` with `sk`, which must be the secret of `record.key`. Fails when the
    /// record breaks a limit of the encoding (too many links, a long name, too large).
    pub fn sign(record: Record, sk: &StaticSecret) -> Result<SignedRecord, DecodeError> {
        debug_assert_eq!(sk.public_key(), record.key, "signing another key's record");
        let mut bytes = record.encode_unsigned();
        if bytes.len() + SIG_LEN > MAX_RECORD {
            return Err(DecodeError::Oversized);
        }
        // The encoder writes what it is given; refuse what a receiver would refuse.
        if Record::decode_unsigned(&bytes)? != record {
            return Err(DecodeError::Malformed);
        }
        let sig = sign::sign(sk, &bytes);
        bytes.extend_from_slice(&sig);
        Ok(SignedRecord { bytes, record })
    }

    /// Bytes read back from a store's own file, admitted when they were written (the
    /// embedded store only: `store::read_local`).
    pub(crate) fn trusted(bytes: Vec<u8>, record: Record) -> SignedRecord {
        SignedRecord { bytes, record }
    }

    /// The wire bytes (signature included).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The record.
    pub fn record(&self) -> &Record {
        &self.record
    }

    /// Its name.
    pub fn name(&self) -> SessionId {
        self.record.name()
    }

    /// Its kind.
    pub fn kind(&self) -> Kind {
        self.record.kind()
    }
}

/// Checks received bytes: size, signature present, format, signature, lease (`now_ms`,
/// Unix ms). Does not know the stored record: see [`supersedes`].
pub fn admit(bytes: &[u8], now_ms: u64) -> Result<SignedRecord, Refusal> {
    let record = verify(bytes)?;
    if record.expires_ms <= now_ms {
        return Err(Refusal::Expired);
    }
    if record.expires_ms - now_ms > MAX_LEASE_MS {
        return Err(Refusal::LeaseTooLong);
    }
    Ok(SignedRecord {
        bytes: bytes.to_vec(),
        record,
    })
}

/// Size, format and signature, without the lease (a store reading back what it kept).
pub fn verify(bytes: &[u8]) -> Result<Record, Refusal> {
    if bytes.len() > MAX_RECORD {
        return Err(Refusal::Oversized);
    }
    if bytes.len() < HEADER_LEN + SIG_LEN {
        return Err(Refusal::Unsigned);
    }
    let (signed, sig) = bytes.split_at(bytes.len() - SIG_LEN);
    let sig: &[u8; SIG_LEN] = sig.try_into().expect("split at SIG_LEN");
    if sig == &[0; SIG_LEN] {
        return Err(Refusal::Unsigned);
    }
    let record = Record::decode_unsigned(signed).map_err(|e| match e {
        DecodeError::Oversized => Refusal::Oversized,
        DecodeError::Unsigned => Refusal::Unsigned,
        DecodeError::Malformed => Refusal::Malformed,
    })?;
    if !sign::verify(&record.key, signed, sig) {
        return Err(Refusal::BadSignature);
    }
    Ok(record)
}

/// May `new` replace `old` (the record stored under the same name, if any)? Only with a
/// higher sequence number: a replayed or older copy never goes back in.
pub fn supersedes(new: &Record, old: Option<&Record>) -> Result<(), Refusal> {
    match old {
        Some(o) if new.seq <= o.seq => Err(Refusal::Stale),
        _ => Ok(()),
    }
}

#[cfg(test)]
#[path = "signed_tests.rs"]
mod tests;
