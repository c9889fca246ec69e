//! Signatures by the X25519 key that names a record (XEdDSA's construction, deterministic).
//!
//! Role: a record is named by the hash of its owner's X25519 public key (the session id,
//! MobilityFirst's GUID), so the signature must verify against that key and nothing else —
//! a separate Ed25519 key would need its own certificate binding it to the name. XEdDSA
//! (Signal's specification) signs with an X25519 key: the Montgomery u-coordinate maps to
//! exactly one Edwards point with sign bit 0, `A = to_edwards(u, 0)`; the signer's scalar
//! is the clamped X25519 secret `k`, negated when `k·B` has sign bit 1, so that `a·B = A`.
//! The signature is then an ordinary Ed25519 signature under `A`, checked here with
//! ed25519-dalek's `verify_strict` (no small-order keys, no malleable `s`).
//!
//! Why this is sound: verification needs only the public key the name is the hash of, so
//! a record signed by any other key never verifies (property-tested in `tests`). Reusing
//! the DH key for signatures is what Signal does with its identity keys; the two uses
//! cannot be confused because Noise never signs and every signed message here starts with
//! [`CONTEXT`], which no handshake message does. Unlike XEdDSA the nonce is derived
//! deterministically (as in Ed25519: from a secret prefix and the message) instead of from
//! fresh randomness, so signing needs no RNG — the core takes none — and a repeated nonce
//! for two messages is impossible.
//!
//! Invariant: `verify(pk, m, sign(sk, m))` holds for every secret (both sign-bit cases are
//! tested), and fails for every other public key, message or signature.

use curve25519_dalek::montgomery::MontgomeryPoint;
use curve25519_dalek::scalar::{clamp_integer, Scalar};
use curve25519_dalek::EdwardsPoint;
use ed25519_dalek::hazmat::{raw_sign, ExpandedSecretKey};
use ed25519_dalek::{Signature, VerifyingKey};
use multihome_proto::crypto::{PublicKey, StaticSecret};
use sha2::{Digest, Sha512};

/// Domain separation: the first bytes of every signed message.
pub const CONTEXT: &[u8] = b"multihome-naming-v1\0";

/// Length of a signature.
pub const SIG_LEN: usize = 64;

/// The Ed25519 verifying key of an X25519 public key (sign bit 0); `None` for a
/// u-coordinate that is no point of the curve's Edwards form (u = -1).
fn edwards_key(pk: &PublicKey) -> Option<VerifyingKey> {
    let a = MontgomeryPoint(pk.0).to_edwards(0)?;
    VerifyingKey::from_bytes(&a.compress().to_bytes()).ok()
}

/// Signs `CONTEXT || msg` with the X25519 secret `sk`.
pub fn sign(sk: &StaticSecret, msg: &[u8]) -> [u8; SIG_LEN] {
    let k = Scalar::from_bytes_mod_order(clamp_integer(*sk.as_bytes()));
    let e = EdwardsPoint::mul_base(&k).compress();
    // a·B must have sign bit 0, the point the verifier derives from u.
    let a = if e.as_bytes()[31] & 0x80 != 0 { -k } else { k };
    let mut h = Sha512::new();
    h.update(b"multihome-naming-nonce");
    h.update(sk.as_bytes());
    let mut hash_prefix = [0u8; 32];
    hash_prefix.copy_from_slice(&h.finalize()[..32]);
    let esk = ExpandedSecretKey {
        scalar: a,
        hash_prefix,
    };
    let vk = VerifyingKey::from(&esk);
    let mut m = Vec::with_capacity(CONTEXT.len() + msg.len());
    m.extend_from_slice(CONTEXT);
    m.extend_from_slice(msg);
    raw_sign::<Sha512>(&esk, &m, &vk).to_bytes()
}

/// True when `sig` is `pk`'s signature of `CONTEXT || msg`.
pub fn verify(pk: &PublicKey, msg: &[u8], sig: &[u8; SIG_LEN]) -> bool {
    let Some(vk) = edwards_key(pk) else {
        return false;
    };
    let mut m = Vec::with_capacity(CONTEXT.len() + msg.len());
    m.extend_from_slice(CONTEXT);
    m.extend_from_slice(msg);
    vk.verify_strict(&m, &Signature::from_bytes(sig)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(b: [u8; 32]) -> (StaticSecret, PublicKey) {
        let s = StaticSecret::from_bytes(b);
        let p = s.public_key();
        (s, p)
    }

    #[test]
    fn both_sign_bits_verify() {
        // Find one secret of each case: k·B with sign bit 0 and with sign bit 1.
        let mut seen = [false; 2];
        for i in 0..64u8 {
            let (s, p) = key([i; 32]);
            let k = Scalar::from_bytes_mod_order(clamp_integer(*s.as_bytes()));
            let bit = EdwardsPoint::mul_base(&k).compress().as_bytes()[31] >> 7;
            seen[bit as usize] = true;
            assert!(verify(&p, b"m", &sign(&s, b"m")), "secret {i}");
        }
        assert_eq!(seen, [true, true]);
    }

    #[test]
    fn deterministic_and_context_bound() {
        let (s, p) = key([9; 32]);
        assert_eq!(sign(&s, b"x"), sign(&s, b"x"));
        assert!(!verify(&p, b"y", &sign(&s, b"x")));
        // u = -1 has no Edwards form: never verifies.
        let mut bad = [0u8; 32];
        bad[0] = 0xec;
        bad[1..31].fill(0xff);
        bad[31] = 0x7f;
        assert!(!verify(&PublicKey(bad), b"x", &[0; 64]));
    }

    proptest! {
        #[test]
        fn another_key_never_verifies(a in any::<[u8; 32]>(), b in any::<[u8; 32]>(),
                                      msg in proptest::collection::vec(any::<u8>(), 0..200)) {
            let (sa, pa) = key(a);
            let (_, pb) = key(b);
            let sig = sign(&sa, &msg);
            prop_assert!(verify(&pa, &msg, &sig));
            if pa != pb {
                prop_assert!(!verify(&pb, &msg, &sig));
            }
        }

        #[test]
        fn flipped_bit_never_verifies(a in any::<[u8; 32]>(), bit in 0usize..512) {
            let (s, p) = key(a);
            let mut sig = sign(&s, b"record");
            sig[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(!verify(&p, b"record", &sig));
        }
    }
}
