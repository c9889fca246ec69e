//! Static X25519 keys, their base64 text form, and the session identity (GUID).
//!
//! The session identity is BLAKE2s-256 of the client's static public key, truncated to
//! 16 bytes: the GUID of MobilityFirst, a name that does not depend on any
//! address, so a session survives every change of the client's addresses.

use super::CryptoError;
use base64::{engine::general_purpose::STANDARD, Engine as _};
use blake2::{Blake2s256, Digest};
use core::fmt;

/// A private X25519 key. Its `Debug` output never shows the key.
#[derive(Clone)]
pub struct StaticSecret([u8; 32]);

/// A public X25519 key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PublicKey(pub [u8; 32]);

/// A session's address-independent identity: hash of the client's public key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(pub [u8; 16]);

fn decode32(s: &str) -> Result<[u8; 32], CryptoError> {
    let bytes = STANDARD
        .decode(s.trim())
        .map_err(|e| CryptoError::MalformedKey(e.to_string()))?;
    bytes
        .try_into()
        .map_err(|v: Vec<u8>| CryptoError::MalformedKey(format!("decoded to {} bytes", v.len())))
}

impl StaticSecret {
    /// Builds a secret from 32 random bytes (clamping happens inside X25519).
    pub fn from_bytes(b: [u8; 32]) -> Self {
        StaticSecret(b)
    }

    /// Parses the base64 text form.
    pub fn from_base64(s: &str) -> Result<Self, CryptoError> {
        decode32(s).map(StaticSecret)
    }

    /// The base64 text form (for writing the key file only; never log it).
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0)
    }

    /// Raw bytes, for the handshake.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The matching public key.
    pub fn public_key(&self) -> PublicKey {
        let s = x25519_dalek::StaticSecret::from(self.0);
        PublicKey(x25519_dalek::PublicKey::from(&s).to_bytes())
    }
}

impl fmt::Debug for StaticSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StaticSecret(<redacted>)")
    }
}

impl PublicKey {
    /// Parses the base64 text form.
    pub fn from_base64(s: &str) -> Result<Self, CryptoError> {
        decode32(s).map(PublicKey)
    }

    /// The base64 text form.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0)
    }

    /// The session identity derived from this (client) key.
    pub fn session_id(&self) -> SessionId {
        let digest = Blake2s256::digest(self.0);
        let mut id = [0u8; 16];
        id.copy_from_slice(&digest[..16]);
        SessionId(id)
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.to_base64())
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trip_and_errors() {
        let s = StaticSecret::from_bytes([7; 32]);
        let back = StaticSecret::from_base64(&s.to_base64()).unwrap();
        assert_eq!(back.as_bytes(), s.as_bytes());
        assert!(PublicKey::from_base64("abc").is_err());
        assert!(PublicKey::from_base64(&STANDARD.encode([1u8; 31])).is_err());
        assert!(!format!("{s:?}").contains(&s.to_base64()));
    }

    #[test]
    fn session_id_depends_only_on_key() {
        let p = StaticSecret::from_bytes([1; 32]).public_key();
        let q = StaticSecret::from_bytes([2; 32]).public_key();
        assert_eq!(p.session_id(), p.session_id());
        assert_ne!(p.session_id(), q.session_id());
    }
}
