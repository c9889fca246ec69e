//! MAC fields of handshake messages and the cookie mechanism, as WireGuard's §5.4.4 and
//! §5.4.7 (docs/PROTOCOL.md §2.4, §3.5).
//!
//! Every handshake message ends with `mac1 || mac2` (16 bytes each):
//! - `mac1 = MAC(HASH(LABEL_MAC1 || receiver's static public key), msg up to mac1)`. Only a
//!   sender that knows the receiver's public key can write it, and checking it costs one
//!   keyed BLAKE2s over ~130 bytes, so the server refuses datagrams from anyone who does
//!   not know its key before any Diffie-Hellman.
//! - `mac2 = MAC(cookie, msg up to mac2)` when the sender holds a fresh cookie, else zeros.
//!   A cookie is `MAC(secret, source ip || source port)` under a server secret that changes
//!   every `COOKIE_SECRET_LIFETIME`: holding one proves the sender receives datagrams at that
//!   address, so a spoofed source cannot get past a server under load.
//!
//! The cookie travels in a cookie reply, sealed with XChaCha20-Poly1305 under
//! `HASH(LABEL_COOKIE || server's static public key)` with a random 24-byte nonce and the
//! answered initiation's mac1 as associated data (only the initiator that sent that mac1
//! accepts it). `MAC` is keyed BLAKE2s with a 16-byte output, `HASH` BLAKE2s-256.
//!
//! Invariants: no function here panics on any input; comparisons of MACs run in constant
//! time (`Mac::verify_slice`); the secret comes from the caller's RNG and its age from the
//! caller's clock (sans-IO).

use super::PublicKey;
use crate::Instant;
use blake2::digest::consts::U16;
use blake2::digest::{KeyInit, Mac};
use blake2::{Blake2s256, Blake2sMac, Digest};
use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{Tag, XChaCha20Poly1305, XNonce};
use core::time::Duration;
use rand_core::RngCore;
use std::net::{IpAddr, SocketAddr};

/// Length of each MAC field (and of a cookie).
pub const MAC_LEN: usize = 16;
/// Both MAC fields at the end of a handshake message.
pub const MACS_LEN: usize = 2 * MAC_LEN;
/// The nonce of a cookie reply (XChaCha20-Poly1305).
pub const COOKIE_NONCE_LEN: usize = 24;
/// The sealed cookie in a cookie reply: the 16-byte cookie and its 16-byte tag.
pub const SEALED_COOKIE_LEN: usize = MAC_LEN + 16;
/// The server's cookie secret is replaced after this long (WireGuard's
/// COOKIE_REFRESH_TIME); a cookie made under the old one no longer verifies.
pub const COOKIE_SECRET_LIFETIME: Duration = Duration::from_secs(120);
/// A client writes mac2 with a cookie younger than this, else zeros.
pub const COOKIE_LIFETIME: Duration = COOKIE_SECRET_LIFETIME;

const LABEL_MAC1: &[u8] = b"mac1----";
const LABEL_COOKIE: &[u8] = b"cookie--";

/// A 16-byte MAC or cookie.
pub type Mac16 = [u8; MAC_LEN];

fn mac_of(key: &[u8], parts: &[&[u8]]) -> Mac16 {
    // Keys are 16 or 32 bytes here, both valid BLAKE2s keys, so this cannot fail.
    let Ok(mut m) = <Blake2sMac<U16> as KeyInit>::new_from_slice(key) else {
        return [0; MAC_LEN];
    };
    for p in parts {
        Mac::update(&mut m, p);
    }
    m.finalize().into_bytes().into()
}

fn verify(key: &[u8], msg: &[u8], tag: &[u8]) -> bool {
    let Ok(mut m) = <Blake2sMac<U16> as KeyInit>::new_from_slice(key) else {
        return false;
    };
    Mac::update(&mut m, msg);
    m.verify_slice(tag).is_ok()
}

fn hash(label: &[u8], key: &PublicKey) -> [u8; 32] {
    let mut h = Blake2s256::new();
    Digest::update(&mut h, label);
    Digest::update(&mut h, key.0);
    h.finalize().into()
}

/// The keys derived from one static public key: mac1 of messages to its holder, and the
/// seal of cookie replies from it. Derived once (two hashes), kept by the endpoint.
#[derive(Clone)]
pub struct MacKeys {
    mac1: [u8; 32],
    cookie: [u8; 32],
}

impl MacKeys {
    /// The keys of messages sent to (mac1) and cookie replies sent by (seal) `key`'s holder.
    pub fn new(key: &PublicKey) -> Self {
        MacKeys {
            mac1: hash(LABEL_MAC1, key),
            cookie: hash(LABEL_COOKIE, key),
        }
    }

    /// Writes mac1 and mac2 into the last `MACS_LEN` bytes of `msg` (a whole handshake
    /// message): mac2 under `cookie`, or zeros without one. Returns mac1 (the associated
    /// data of a cookie reply to this message). Does nothing on a message too short.
    pub fn seal(&self, msg: &mut [u8], cookie: Option<&Mac16>) -> Mac16 {
        let Some(at) = msg.len().checked_sub(MACS_LEN) else {
            return [0; MAC_LEN];
        };
        let mac1 = mac_of(&self.mac1, &[&msg[..at]]);
        msg[at..at + MAC_LEN].copy_from_slice(&mac1);
        let mac2 = cookie.map_or([0; MAC_LEN], |c| mac_of(c, &[&msg[..at + MAC_LEN]]));
        msg[at + MAC_LEN..].copy_from_slice(&mac2);
        mac1
    }

    /// Whether the message's mac1 is right (one keyed hash; no Diffie-Hellman).
    pub fn mac1_ok(&self, msg: &[u8]) -> bool {
        let Some(at) = msg.len().checked_sub(MACS_LEN) else {
            return false;
        };
        verify(&self.mac1, &msg[..at], &msg[at..at + MAC_LEN])
    }

    /// Opens the sealed cookie of a cookie reply answering the message whose mac1 was
    /// `mac1`; None if it does not verify (forged, or for another message).
    pub fn open_cookie(
        &self,
        mac1: &Mac16,
        nonce: &[u8; COOKIE_NONCE_LEN],
        sealed: &[u8; SEALED_COOKIE_LEN],
    ) -> Option<Mac16> {
        let aead = XChaCha20Poly1305::new((&self.cookie).into());
        let mut cookie: Mac16 = sealed[..MAC_LEN].try_into().ok()?;
        let tag = Tag::from_slice(&sealed[MAC_LEN..]);
        aead.decrypt_in_place_detached(XNonce::from_slice(nonce), mac1, &mut cookie, tag)
            .ok()?;
        Some(cookie)
    }
}

/// The mac1 field of a whole handshake message (zeros if it is too short).
pub fn mac1_of(msg: &[u8]) -> Mac16 {
    let at = msg.len().saturating_sub(MACS_LEN);
    msg.get(at..at + MAC_LEN)
        .and_then(|s| s.try_into().ok())
        .unwrap_or([0; MAC_LEN])
}

/// The server's side: makes cookies for source addresses, checks mac2, seals replies.
pub struct CookieChecker {
    keys: MacKeys,
    secret: [u8; 32],
    /// When the secret was drawn; None before the first use.
    born: Option<Instant>,
}

impl CookieChecker {
    /// A checker for the server whose static public key is `key`; its secret is drawn at
    /// first use.
    pub fn new(key: &PublicKey) -> Self {
        CookieChecker {
            keys: MacKeys::new(key),
            secret: [0; 32],
            born: None,
        }
    }

    /// The MAC keys of messages to this server.
    pub fn keys(&self) -> &MacKeys {
        &self.keys
    }

    /// Replaces the secret if it is older than `COOKIE_SECRET_LIFETIME` (or unset).
    fn rotate(&mut self, now: Instant, rng: &mut impl RngCore) {
        let stale = self
            .born
            .is_none_or(|b| now.saturating_since(b) >= COOKIE_SECRET_LIFETIME);
        if stale {
            rng.fill_bytes(&mut self.secret);
            self.born = Some(now);
        }
    }

    /// The cookie of source address `from` under the current secret.
    pub fn cookie(&mut self, now: Instant, rng: &mut impl RngCore, from: SocketAddr) -> Mac16 {
        self.rotate(now, rng);
        let port = from.port().to_be_bytes();
        match from.ip() {
            IpAddr::V4(a) => mac_of(&self.secret, &[&a.octets(), &port]),
            IpAddr::V6(a) => mac_of(&self.secret, &[&a.octets(), &port]),
        }
    }

    /// Whether the message's mac2 was made with the cookie of `from` under the current
    /// secret (a cookie from another address, or from before a rotation, is refused).
    pub fn mac2_ok(
        &mut self,
        now: Instant,
        rng: &mut impl RngCore,
        from: SocketAddr,
        msg: &[u8],
    ) -> bool {
        let Some(at) = msg.len().checked_sub(MAC_LEN) else {
            return false;
        };
        let cookie = self.cookie(now, rng, from);
        verify(&cookie, &msg[..at], &msg[at..])
    }

    /// Seals the cookie of `from` for a reply to the message whose mac1 is `mac1`: the
    /// nonce (fresh from `rng`) and the sealed cookie.
    pub fn seal_reply(
        &mut self,
        now: Instant,
        rng: &mut impl RngCore,
        from: SocketAddr,
        mac1: &Mac16,
    ) -> ([u8; COOKIE_NONCE_LEN], [u8; SEALED_COOKIE_LEN]) {
        let cookie = self.cookie(now, rng, from);
        let mut nonce = [0u8; COOKIE_NONCE_LEN];
        rng.fill_bytes(&mut nonce);
        let aead = XChaCha20Poly1305::new((&self.keys.cookie).into());
        let mut sealed = [0u8; SEALED_COOKIE_LEN];
        sealed[..MAC_LEN].copy_from_slice(&cookie);
        // Sealing 16 bytes into a fixed buffer cannot fail (the length limit is 2^38).
        if let Ok(tag) =
            aead.encrypt_in_place_detached(XNonce::from_slice(&nonce), mac1, &mut sealed[..MAC_LEN])
        {
            sealed[MAC_LEN..].copy_from_slice(&tag);
        }
        (nonce, sealed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;

    fn key(b: u8) -> PublicKey {
        PublicKey([b; 32])
    }

    #[test]
    fn mac1_binds_key_and_bytes() {
        let k = MacKeys::new(&key(1));
        let mut m = [7u8; 100];
        k.seal(&mut m, None);
        assert!(k.mac1_ok(&m));
        assert_eq!(&m[100 - MAC_LEN..], &[0; MAC_LEN], "no cookie: mac2 zero");
        assert!(!MacKeys::new(&key(2)).mac1_ok(&m), "another server's key");
        m[3] ^= 1;
        assert!(!k.mac1_ok(&m), "a changed byte");
        assert!(!k.mac1_ok(&m[..10]));
        assert!(!k.mac1_ok(&[]));
    }

    /// Known answers from an independent implementation (Python's `hashlib.blake2s` with
    /// `key=` and `digest_size=16`): MAC is keyed BLAKE2s-128 and the mac1 key is
    /// BLAKE2s-256 of the label and the public key, as WireGuard specifies.
    #[test]
    fn known_answers() {
        let k: Vec<u8> = (0u8..32).collect();
        let a = mac_of(&k, &[b"a", b"bc"]);
        assert_eq!(hex(&a), "61ba5f165c194692e09d12520cc4c74a");
        assert_eq!(
            hex(&MacKeys::new(&key(9)).mac1),
            "248139402e7359c192c496c58a8397a55274981f3bd3f714ac08105ee678c8c7"
        );
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn cookie_round_trip_and_address_binding() {
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let server = key(9);
        let mut checker = CookieChecker::new(&server);
        let client_side = MacKeys::new(&server);
        let now = Instant::from_micros(5_000_000);
        let from: SocketAddr = "192.0.2.7:4000".parse().unwrap();
        let mut msg = [3u8; 148];
        let mac1 = client_side.seal(&mut msg, None);
        assert!(
            !checker.mac2_ok(now, &mut rng, from, &msg),
            "zeros are no mac2"
        );
        let (nonce, sealed) = checker.seal_reply(now, &mut rng, from, &mac1);
        let cookie = client_side.open_cookie(&mac1, &nonce, &sealed).unwrap();
        assert!(client_side.open_cookie(&[1; 16], &nonce, &sealed).is_none());
        let mut bad = sealed;
        bad[0] ^= 1;
        assert!(client_side.open_cookie(&mac1, &nonce, &bad).is_none());
        client_side.seal(&mut msg, Some(&cookie));
        assert!(checker.mac2_ok(now, &mut rng, from, &msg));
        let other: SocketAddr = "192.0.2.8:4000".parse().unwrap();
        assert!(
            !checker.mac2_ok(now, &mut rng, other, &msg),
            "other address"
        );
        let port: SocketAddr = "192.0.2.7:4001".parse().unwrap();
        assert!(!checker.mac2_ok(now, &mut rng, port, &msg), "other port");
        // The secret rotates: the same cookie stops working.
        let later = now + COOKIE_SECRET_LIFETIME;
        assert!(
            !checker.mac2_ok(later, &mut rng, from, &msg),
            "after rotation"
        );
        let just_before = later + COOKIE_SECRET_LIFETIME - Duration::from_micros(1);
        let c2 = checker.cookie(later, &mut rng, from);
        assert_eq!(
            c2,
            checker.cookie(just_before, &mut rng, from),
            "stable meanwhile"
        );
        assert_ne!(c2, cookie);
    }
}
