//! Cryptography: static keys and the session identity, the Noise IK handshake, and the
//! per-direction AEAD used for data.
//!
//! Invariants: private keys are never formatted by `Debug`/`Display`; every nonce is used
//! once per key (the sender's counter only goes up, and a keypair is retired before its
//! counter could wrap); nothing is decrypted into session state before its tag verified.

mod aead;
mod keys;
pub(crate) mod noise;
mod suite;

pub use aead::{OpenKey, SealKey};
pub use keys::{PublicKey, SessionId, StaticSecret};
pub use noise::{
    Initiator, Responder, TransportKeys, INIT_FLAG_FRESH, INIT_FLAG_RELAYS, RESP_FLAG_NEW_SESSION,
};
pub use suite::{CipherSet, DataCipher};

/// Length of the tag appended to every sealed payload (16 bytes for either data cipher).
pub const TAG_LEN: usize = 16;

/// Errors of the crypto layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CryptoError {
    /// A key string is not valid base64 of exactly 32 bytes.
    #[error("malformed key: expected 44 characters of base64 encoding 32 bytes ({0})")]
    MalformedKey(String),
    /// The Noise handshake failed (wrong key, corrupted or forged message).
    #[error("handshake failed: {0}")]
    Handshake(String),
    /// Authentication of a sealed payload failed.
    #[error("authentication failed")]
    Auth,
    /// The responder accepts none of the data ciphers the initiator offered.
    #[error("no data cipher in common with the peer")]
    NoCommonCipher,
    /// The key has sealed the maximum number of messages and must be replaced.
    #[error("key exhausted; rekey required")]
    Exhausted,
}
