//! The Noise IK handshake (`Noise_IK_25519_ChaChaPoly_BLAKE2s`) via the `snow` crate.
//!
//! The client (initiator) knows the server's static key in advance; the server learns the
//! client's static key from message 1 and checks it against its allowed peers before it
//! answers, so an unknown client gets nothing. Message 1 carries a 12-byte payload: a
//! 64-bit timestamp (µs, client clock) that must grow from one handshake to the next, which
//! makes replayed initiations harmless (as WireGuard's TAI64N), a flags byte, the set of
//! data ciphers the client accepts (`suite.rs`; 0 from clients before negotiation, read as
//! ChaCha20-Poly1305) and 2 reserved bytes. Message 2's single payload byte is the
//! server's flags, one of which names the chosen data cipher; both payloads are encrypted
//! and authenticated by the handshake, so the choice cannot be downgraded in flight.
//!
//! The ephemeral keys come from an RNG seeded by the caller (sans-IO: no global RNG).

use super::{CipherSet, CryptoError, DataCipher, OpenKey, PublicKey, SealKey, StaticSecret};
use rand_chacha::ChaCha20Rng;
use rand_core::{CryptoRng, RngCore, SeedableRng};
use snow::params::{CipherChoice, DHChoice, HashChoice};
use snow::resolvers::{CryptoResolver, DefaultResolver};
use snow::types::{Cipher, Dh, Hash, Random};
use snow::{Builder, HandshakeState};

const PARAMS: &str = "Noise_IK_25519_ChaChaPoly_BLAKE2s";
const PROLOGUE: &[u8] = b"multihome v4";
/// Payload of message 1: timestamp u64, flags u8, cipher set u8, 2 reserved bytes.
pub const INIT_PAYLOAD_LEN: usize = 12;
/// Response flag: data is sealed with AES-256-GCM (else ChaCha20-Poly1305).
const RESP_FLAG_AES256GCM: u8 = 0x02;
/// Response flag: the server created a new session for this handshake (it had none, or
/// the client asked for a fresh one), so the client must reset its receive state too —
/// sequence numbers start again from zero on the server's side.
pub const RESP_FLAG_NEW_SESSION: u8 = 0x01;
/// Init flag: the client starts a new session (it has no state from before), so the
/// server must replace any session it holds for this key instead of rekeying it.
pub const INIT_FLAG_FRESH: u8 = 0x01;
/// Init flag: the client takes the relay lists a server hands out (RELAYS frames,
/// docs/PROTOCOL.md §15.7); a server sends none to a client without it, so a client that
/// does not know the frame never receives one.
pub const INIT_FLAG_RELAYS: u8 = 0x02;

/// The keys a finished handshake yields, one per direction.
pub struct TransportKeys {
    /// Seals what this side sends.
    pub seal: SealKey,
    /// Opens what this side receives.
    pub open: OpenKey,
}

struct SeededRng(ChaCha20Rng);

impl RngCore for SeededRng {
    fn next_u32(&mut self) -> u32 {
        self.0.next_u32()
    }
    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        self.0.fill_bytes(dest)
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.0.try_fill_bytes(dest)
    }
}
impl CryptoRng for SeededRng {}
impl Random for SeededRng {}

/// Snow's default primitives, but ephemeral randomness from our seed.
struct SeededResolver {
    seed: [u8; 32],
}

impl CryptoResolver for SeededResolver {
    fn resolve_rng(&self) -> Option<Box<dyn Random>> {
        Some(Box::new(SeededRng(ChaCha20Rng::from_seed(self.seed))))
    }
    fn resolve_dh(&self, choice: &DHChoice) -> Option<Box<dyn Dh>> {
        DefaultResolver.resolve_dh(choice)
    }
    fn resolve_hash(&self, choice: &HashChoice) -> Option<Box<dyn Hash>> {
        DefaultResolver.resolve_hash(choice)
    }
    fn resolve_cipher(&self, choice: &CipherChoice) -> Option<Box<dyn Cipher>> {
        DefaultResolver.resolve_cipher(choice)
    }
}

fn builder(seed: [u8; 32]) -> Builder<'static> {
    builder_with_prologue(seed, PROLOGUE)
}

/// A builder for `Noise_IK_25519_ChaChaPoly_BLAKE2s` with ephemeral randomness from `seed`
/// and the given prologue (the relay protocol, `detour/`, uses its own, so a message of
/// one protocol can never be read as the other's).
pub(crate) fn builder_with_prologue(seed: [u8; 32], prologue: &'static [u8]) -> Builder<'static> {
    let params = PARAMS
        .parse()
        .expect("static Noise parameter string is valid");
    Builder::with_resolver(params, Box::new(SeededResolver { seed })).prologue(prologue)
}

fn herr(e: snow::Error) -> CryptoError {
    CryptoError::Handshake(e.to_string())
}

fn split(mut hs: HandshakeState, initiator: bool, suite: DataCipher) -> TransportKeys {
    let (i2r, r2i) = hs.dangerously_get_raw_split();
    let (seal, open) = if initiator { (i2r, r2i) } else { (r2i, i2r) };
    TransportKeys {
        seal: SealKey::new(suite, seal),
        open: OpenKey::new(suite, open),
    }
}

/// Client side of one handshake attempt.
pub struct Initiator {
    hs: HandshakeState,
    offered: CipherSet,
}

impl Initiator {
    /// Starts a handshake towards `server` with fresh ephemeral randomness `seed`.
    pub fn new(
        local: &StaticSecret,
        server: &PublicKey,
        seed: [u8; 32],
    ) -> Result<Self, CryptoError> {
        let hs = builder(seed)
            .local_private_key(local.as_bytes())
            .remote_public_key(&server.0)
            .build_initiator()
            .map_err(herr)?;
        Ok(Initiator {
            hs,
            offered: CipherSet::CHACHA20_POLY1305,
        })
    }

    /// Writes message 1 carrying `timestamp_us`, `flags` and the data ciphers we accept;
    /// returns its length.
    pub fn write_init(
        &mut self,
        timestamp_us: u64,
        flags: u8,
        ciphers: CipherSet,
        out: &mut [u8],
    ) -> Result<usize, CryptoError> {
        let mut payload = [0u8; INIT_PAYLOAD_LEN];
        payload[..8].copy_from_slice(&timestamp_us.to_be_bytes());
        payload[8] = flags;
        payload[9] = ciphers.to_wire();
        self.offered = ciphers;
        self.hs.write_message(&payload, out).map_err(herr)
    }

    /// Reads message 2 and finishes the handshake; returns the keys (for the cipher the
    /// server chose, which must be one we offered) and the server's flags byte
    /// (`RESP_FLAG_NEW_SESSION`).
    pub fn read_resp(mut self, msg: &[u8]) -> Result<(TransportKeys, u8), CryptoError> {
        let mut payload = [0u8; 64];
        let n = self.hs.read_message(msg, &mut payload).map_err(herr)?;
        if !self.hs.is_handshake_finished() || n != 1 {
            return Err(CryptoError::Handshake("malformed message 2".into()));
        }
        let flags = payload[0];
        let suite = if flags & RESP_FLAG_AES256GCM != 0 {
            DataCipher::Aes256Gcm
        } else {
            DataCipher::ChaCha20Poly1305
        };
        if !self.offered.contains(suite) {
            return Err(CryptoError::NoCommonCipher);
        }
        Ok((split(self.hs, true, suite), flags))
    }
}

/// Server side: reads message 1, and on approval of the client's key writes message 2.
pub struct Responder {
    hs: HandshakeState,
    remote: PublicKey,
    timestamp_us: u64,
    flags: u8,
    offered: CipherSet,
}

impl Responder {
    /// Reads message 1. The caller must check `remote()` against its allowed peers and
    /// `timestamp_us()` against the last one seen before calling `write_resp`.
    pub fn read_init(
        local: &StaticSecret,
        seed: [u8; 32],
        msg: &[u8],
    ) -> Result<Self, CryptoError> {
        let mut hs = builder(seed)
            .local_private_key(local.as_bytes())
            .build_responder()
            .map_err(herr)?;
        let mut payload = [0u8; 64];
        let n = hs.read_message(msg, &mut payload).map_err(herr)?;
        if n != INIT_PAYLOAD_LEN {
            return Err(CryptoError::Handshake(format!("init payload of {n} bytes")));
        }
        let remote_bytes: [u8; 32] = hs
            .get_remote_static()
            .and_then(|r| r.try_into().ok())
            .ok_or_else(|| CryptoError::Handshake("no remote static key".into()))?;
        let timestamp_us = u64::from_be_bytes(payload[..8].try_into().unwrap_or([0; 8]));
        Ok(Responder {
            hs,
            remote: PublicKey(remote_bytes),
            timestamp_us,
            flags: payload[8],
            offered: CipherSet::from_wire(payload[9]),
        })
    }

    /// The client's static public key, authenticated by message 1.
    pub fn remote(&self) -> PublicKey {
        self.remote
    }

    /// The client's handshake timestamp.
    pub fn timestamp_us(&self) -> u64 {
        self.timestamp_us
    }

    /// The client's handshake flags (`INIT_FLAG_FRESH`).
    pub fn flags(&self) -> u8 {
        self.flags
    }

    /// The data ciphers the client accepts.
    pub fn offered(&self) -> CipherSet {
        self.offered
    }

    /// Picks the data cipher from `accepted` (ours) and the client's offer, writes message
    /// 2 carrying `flags` and the choice, and finishes the handshake. Fails with
    /// `NoCommonCipher` (writing nothing) when the two sets do not meet.
    pub fn write_resp(
        mut self,
        flags: u8,
        accepted: CipherSet,
        out: &mut [u8],
    ) -> Result<(usize, TransportKeys), CryptoError> {
        let suite = accepted
            .choose(self.offered)
            .ok_or(CryptoError::NoCommonCipher)?;
        let flags = match suite {
            DataCipher::Aes256Gcm => flags | RESP_FLAG_AES256GCM,
            DataCipher::ChaCha20Poly1305 => flags & !RESP_FLAG_AES256GCM,
        };
        let n = self.hs.write_message(&[flags], out).map_err(herr)?;
        Ok((n, split(self.hs, false, suite)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::TAG_LEN;
    use crate::wire::{HANDSHAKE_INIT_LEN, HANDSHAKE_RESP_LEN};

    /// One handshake: client offering `offer`, server accepting `accept`.
    fn handshake(
        offer: CipherSet,
        accept: CipherSet,
    ) -> Result<(TransportKeys, TransportKeys, u8), CryptoError> {
        let c = StaticSecret::from_bytes([1; 32]);
        let s = StaticSecret::from_bytes([2; 32]);
        let mut i = Initiator::new(&c, &s.public_key(), [3; 32]).unwrap();
        let mut m1 = [0u8; 256];
        let n1 = i.write_init(42, INIT_FLAG_FRESH, offer, &mut m1).unwrap();
        assert_eq!(n1, HANDSHAKE_INIT_LEN - 8);
        let r = Responder::read_init(&s, [4; 32], &m1[..n1]).unwrap();
        assert_eq!(r.remote(), c.public_key());
        assert_eq!(r.timestamp_us(), 42);
        assert_eq!(r.flags(), INIT_FLAG_FRESH);
        assert_eq!(r.offered(), offer);
        let mut m2 = [0u8; 256];
        let (n2, skeys) = r.write_resp(RESP_FLAG_NEW_SESSION, accept, &mut m2)?;
        assert_eq!(n2, HANDSHAKE_RESP_LEN - 12);
        let (ckeys, flags) = i.read_resp(&m2[..n2])?;
        Ok((ckeys, skeys, flags))
    }

    #[test]
    fn handshake_yields_matching_keys() {
        use DataCipher::*;
        for (offer, accept, expect) in [
            (CipherSet::ALL, CipherSet::ALL, Aes256Gcm),
            (
                CipherSet::ALL,
                CipherSet::CHACHA20_POLY1305,
                ChaCha20Poly1305,
            ),
            (
                CipherSet::CHACHA20_POLY1305,
                CipherSet::ALL,
                ChaCha20Poly1305,
            ),
            (
                CipherSet::CHACHA20_POLY1305,
                CipherSet::CHACHA20_POLY1305,
                ChaCha20Poly1305,
            ),
        ] {
            let (mut ckeys, mut skeys, flags) = handshake(offer, accept).unwrap();
            assert_eq!(flags & RESP_FLAG_NEW_SESSION, RESP_FLAG_NEW_SESSION);
            assert_eq!(ckeys.seal.suite(), expect);
            assert_eq!(skeys.seal.suite(), expect);
            let mut buf = [0u8; 32];
            buf[..3].copy_from_slice(b"abc");
            let ctr = ckeys.seal.next_counter().unwrap();
            let n = ckeys.seal.seal(ctr, b"", &mut buf, 3).unwrap();
            assert_eq!(n, 3 + TAG_LEN);
            assert_eq!(skeys.open.open(ctr, b"", &mut buf[..n]).unwrap(), 3);
            assert_eq!(&buf[..3], b"abc");
            let ctr = skeys.seal.next_counter().unwrap();
            let mut buf2 = [9u8; 20];
            let n = skeys.seal.seal(ctr, b"x", &mut buf2, 4).unwrap();
            assert!(ckeys.open.open(ctr, b"x", &mut buf2[..n]).is_ok());
        }
    }

    /// A server that accepts nothing the client offers refuses without writing message 2.
    #[test]
    fn no_common_cipher_refuses() {
        let aes_only = CipherSet::from_wire(0x02);
        assert!(matches!(
            handshake(CipherSet::CHACHA20_POLY1305, aes_only),
            Err(CryptoError::NoCommonCipher)
        ));
    }

    #[test]
    fn wrong_server_key_fails() {
        let c = StaticSecret::from_bytes([1; 32]);
        let s = StaticSecret::from_bytes([2; 32]);
        let other = StaticSecret::from_bytes([5; 32]);
        let mut i = Initiator::new(&c, &other.public_key(), [3; 32]).unwrap();
        let mut m1 = [0u8; 256];
        let n1 = i.write_init(1, 0, CipherSet::ALL, &mut m1).unwrap();
        assert!(Responder::read_init(&s, [4; 32], &m1[..n1]).is_err());
        let garbage = [0x55u8; 108];
        assert!(Responder::read_init(&s, [4; 32], &garbage).is_err());
    }
}
