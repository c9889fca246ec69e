//! Per-direction AEAD for data datagrams: ChaCha20-Poly1305 (RFC 8439) or AES-256-GCM,
//! as negotiated by the handshake (`suite.rs`).
//!
//! Nonce = 4 zero bytes ‖ 64-bit big-endian counter, the counter being the one in the
//! clear data header, which is also the associated data. The sealing side owns a strictly
//! increasing counter, so two different messages are never sealed under one nonce — also
//! for redundant copies, which are separate datagrams with separate counters.
//!
//! The ciphers are `ring`'s (BoringSSL's assembly): this runs once per datagram in each
//! direction and dominated the daemon's and the simulator's CPU time with the portable
//! implementation. The tests cross-check ChaCha20-Poly1305 against RFC 8439's vector and
//! the portable `chacha20poly1305` crate (the bytes on the wire are exactly those of
//! before), and AES-256-GCM against the GCM specification's test case 16.
//!
//! Invariant: a key never seals more messages than its cipher's
//! `reject_after_messages` (for AES-GCM that bound is what keeps its security margin).

use super::{CryptoError, DataCipher, TAG_LEN};
use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey};

fn nonce_bytes(counter: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_be_bytes());
    n
}

fn cipher(c: DataCipher, key: &[u8; 32]) -> LessSafeKey {
    // The only failure of `UnboundKey::new` is a key of the wrong length, which the type
    // rules out (both ciphers take 256-bit keys).
    LessSafeKey::new(UnboundKey::new(c.algorithm(), key).expect("32-byte key"))
}

/// Seals `buf[..len]` in place under the raw 96-bit `nonce`, writing the tag after it.
fn seal_raw(
    cipher: &LessSafeKey,
    nonce: [u8; 12],
    aad: &[u8],
    buf: &mut [u8],
    len: usize,
) -> Result<usize, CryptoError> {
    if buf.len() < len + TAG_LEN {
        return Err(CryptoError::Auth);
    }
    let tag = cipher
        .seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad),
            &mut buf[..len],
        )
        .map_err(|_| CryptoError::Auth)?;
    buf[len..len + TAG_LEN].copy_from_slice(tag.as_ref());
    Ok(len + TAG_LEN)
}

/// Opens `buf` (ciphertext ‖ tag) in place under the raw `nonce`; the plaintext length.
fn open_raw(
    cipher: &LessSafeKey,
    nonce: [u8; 12],
    aad: &[u8],
    buf: &mut [u8],
) -> Result<usize, CryptoError> {
    let len = buf.len().checked_sub(TAG_LEN).ok_or(CryptoError::Auth)?;
    let (ct, tag) = buf.split_at_mut(len);
    let tag = Tag::try_from(&tag[..]).map_err(|_| CryptoError::Auth)?;
    cipher
        .open_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad),
            tag,
            ct,
            0..,
        )
        .map_err(|_| CryptoError::Auth)?;
    Ok(len)
}

/// The sending half: a key and the next counter.
pub struct SealKey {
    cipher: LessSafeKey,
    suite: DataCipher,
    next_counter: u64,
}

/// The receiving half.
pub struct OpenKey {
    cipher: LessSafeKey,
}

impl SealKey {
    /// A sealing key for cipher `suite` starting at counter 0.
    pub fn new(suite: DataCipher, key: [u8; 32]) -> Self {
        SealKey {
            cipher: cipher(suite, &key),
            suite,
            next_counter: 0,
        }
    }

    /// The cipher it seals with.
    pub fn suite(&self) -> DataCipher {
        self.suite
    }

    /// Messages sealed so far.
    pub fn counter(&self) -> u64 {
        self.next_counter
    }

    /// Jumps the counter forward (tests of the message budget, which cannot seal 2^26
    /// datagrams). Only forward, so no nonce is ever reused.
    #[cfg(test)]
    pub(crate) fn skip_to(&mut self, counter: u64) {
        self.next_counter = self.next_counter.max(counter);
    }

    /// Takes the next counter value; the caller writes it into the header before sealing.
    pub fn next_counter(&mut self) -> Result<u64, CryptoError> {
        if self.next_counter >= self.suite.reject_after_messages() {
            return Err(CryptoError::Exhausted);
        }
        let c = self.next_counter;
        self.next_counter += 1;
        Ok(c)
    }

    /// Seals `buf[..len]` in place under `counter` with `aad`, appending the tag.
    /// `buf` must have `TAG_LEN` spare bytes after `len`.
    pub fn seal(
        &self,
        counter: u64,
        aad: &[u8],
        buf: &mut [u8],
        len: usize,
    ) -> Result<usize, CryptoError> {
        seal_raw(&self.cipher, nonce_bytes(counter), aad, buf, len)
    }
}

impl OpenKey {
    /// An opening key for cipher `suite`.
    pub fn new(suite: DataCipher, key: [u8; 32]) -> Self {
        OpenKey {
            cipher: cipher(suite, &key),
        }
    }

    /// Opens `buf` (ciphertext ‖ tag) in place; returns the plaintext length.
    pub fn open(&self, counter: u64, aad: &[u8], buf: &mut [u8]) -> Result<usize, CryptoError> {
        open_raw(&self.cipher, nonce_bytes(counter), aad, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chacha20poly1305::aead::AeadInPlace;
    use chacha20poly1305::{ChaCha20Poly1305, KeyInit};

    #[test]
    fn seal_open_and_tamper() {
        for suite in [DataCipher::ChaCha20Poly1305, DataCipher::Aes256Gcm] {
            seal_open_and_tamper_with(suite);
        }
    }

    fn seal_open_and_tamper_with(suite: DataCipher) {
        let mut s = SealKey::new(suite, [3; 32]);
        let o = OpenKey::new(suite, [3; 32]);
        let c = s.next_counter().unwrap();
        let mut buf = [0u8; 64];
        buf[..5].copy_from_slice(b"hello");
        let n = s.seal(c, b"hdr", &mut buf, 5).unwrap();
        let mut copy = buf;
        assert_eq!(o.open(c, b"hdr", &mut copy[..n]).unwrap(), 5);
        assert_eq!(&copy[..5], b"hello");
        let mut bad = buf;
        bad[0] ^= 1;
        assert!(o.open(c, b"hdr", &mut bad[..n]).is_err());
        let mut bad = buf;
        bad[n - 1] ^= 1;
        assert!(o.open(c, b"hdr", &mut bad[..n]).is_err(), "tag checked");
        let mut copy = buf;
        assert!(o.open(c, b"hdX", &mut copy[..n]).is_err());
        let mut copy = buf;
        assert!(o.open(c + 1, b"hdr", &mut copy[..n]).is_err());
        assert!(o.open(c, b"hdr", &mut copy[..TAG_LEN - 1]).is_err());
        assert_eq!(s.next_counter().unwrap(), 1);
        assert!(
            s.seal(1, b"", &mut [0u8; 20], 5).is_err(),
            "no room for the tag"
        );
    }

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Seals `plain` through the same code path as `seal`/`open`, expects `expected`
    /// (ciphertext ‖ tag), and opens it back.
    fn check_vector(
        suite: DataCipher,
        key: &[u8; 32],
        nonce: [u8; 12],
        aad: &[u8],
        plain: &[u8],
        expected: &[u8],
    ) {
        let mut buf = vec![0u8; plain.len() + TAG_LEN];
        buf[..plain.len()].copy_from_slice(plain);
        let c = cipher(suite, key);
        let n = seal_raw(&c, nonce, aad, &mut buf, plain.len()).unwrap();
        assert_eq!(buf[..n], expected[..]);
        assert_eq!(open_raw(&c, nonce, aad, &mut buf).unwrap(), plain.len());
        assert_eq!(buf[..plain.len()], plain[..]);
    }

    /// RFC 8439 §2.8.2: the AEAD test vector, through the same code path as `seal`/`open`.
    #[test]
    fn rfc8439_vector() {
        let key: [u8; 32] = hex("808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f")
            .try_into()
            .unwrap();
        let nonce: [u8; 12] = hex("070000004041424344454647").try_into().unwrap();
        let aad = hex("50515253c0c1c2c3c4c5c6c7");
        let plain = b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.";
        let expected = hex(
            "d31a8d34648e60db7b86afbc53ef7ec2a4aded51296e08fea9e2b5a736ee62d6
             3dbea45e8ca9671282fafb69da92728b1a71de0a9e060b2905d6a5b67ecd3b36
             92ddbd7f2d778b8c9803aee328091b58fab324e4fad675945585808b4831d7bc
             3ff4def08e4b7a9de576d26586cec64b6116
             1ae10b594f09e26a7e902ecbd0600691",
        );
        check_vector(
            DataCipher::ChaCha20Poly1305,
            &key,
            nonce,
            &aad,
            plain,
            &expected,
        );
    }

    /// Sealed by us, opened by the portable crate with the documented nonce layout, and
    /// back: the wire format is the one peers built before the cipher was swapped.
    #[test]
    fn interoperates_with_portable_implementation() {
        let key = [0x42u8; 32];
        let other = ChaCha20Poly1305::new(&key.into());
        let aad = [7u8; 16];
        for (counter, len) in [
            (0u64, 0usize),
            (1, 1),
            (0x0102_0304_0506_0708, 1374),
            (u64::MAX >> 1, 63),
        ] {
            let plain: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let mut nonce = [0u8; 12];
            nonce[4..].copy_from_slice(&counter.to_be_bytes());

            let mut ours = vec![0u8; len + TAG_LEN];
            ours[..len].copy_from_slice(&plain);
            SealKey::new(DataCipher::ChaCha20Poly1305, key)
                .seal(counter, &aad, &mut ours, len)
                .unwrap();
            let mut theirs = plain.clone();
            let tag = other
                .encrypt_in_place_detached(&nonce.into(), &aad, &mut theirs)
                .unwrap();
            theirs.extend_from_slice(&tag);
            assert_eq!(ours, theirs, "counter {counter}, {len} bytes");

            assert_eq!(
                OpenKey::new(DataCipher::ChaCha20Poly1305, key)
                    .open(counter, &aad, &mut theirs)
                    .unwrap(),
                len
            );
            assert_eq!(theirs[..len], plain[..]);
        }
    }

    /// The GCM specification's test case 16 (AES-256, 60 bytes, 20 bytes of AAD), through
    /// the same code path as `seal`/`open`.
    #[test]
    fn aes256gcm_spec_vector() {
        let key: [u8; 32] = hex("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308")
            .try_into()
            .unwrap();
        let nonce: [u8; 12] = hex("cafebabefacedbaddecaf888").try_into().unwrap();
        let aad = hex("feedfacedeadbeeffeedfacedeadbeefabaddad2");
        let plain = hex(
            "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72
             1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39",
        );
        let expected = hex(
            "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa
             8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662
             76fc6ece0f4e1768cddf8853bb2d551b",
        );
        check_vector(DataCipher::Aes256Gcm, &key, nonce, &aad, &plain, &expected);
    }

    /// An AES-GCM key stops sealing at its message bound; a ChaCha key is far from it.
    #[test]
    fn aes_key_refuses_past_its_bound() {
        let mut s = SealKey::new(DataCipher::Aes256Gcm, [1; 32]);
        s.next_counter = DataCipher::Aes256Gcm.reject_after_messages() - 1;
        assert!(s.next_counter().is_ok());
        assert_eq!(s.next_counter(), Err(CryptoError::Exhausted));
    }
}
