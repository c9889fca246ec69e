//! Per-direction ChaCha20-Poly1305 for data datagrams.
//!
//! Nonce = 4 zero bytes ‖ 64-bit big-endian counter, the counter being the one in the
//! clear data header, which is also the associated data. The sealing side owns a strictly
//! increasing counter, so two different messages are never sealed under one nonce — also
//! for redundant copies, which are separate datagrams with separate counters.

use super::{CryptoError, TAG_LEN};
use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{ChaCha20Poly1305, Key, KeyInit, Nonce, Tag};

/// After this many messages a key is retired (far below 2^64, as in WireGuard).
pub const REJECT_AFTER_MESSAGES: u64 = u64::MAX - (1 << 13);

fn nonce(counter: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_be_bytes());
    Nonce::from(n)
}

/// The sending half: a key and the next counter.
pub struct SealKey {
    cipher: ChaCha20Poly1305,
    next_counter: u64,
}

/// The receiving half.
pub struct OpenKey {
    cipher: ChaCha20Poly1305,
}

impl SealKey {
    /// A sealing key starting at counter 0.
    pub fn new(key: [u8; 32]) -> Self {
        SealKey {
            cipher: ChaCha20Poly1305::new(Key::from_slice(&key)),
            next_counter: 0,
        }
    }

    /// Messages sealed so far.
    pub fn counter(&self) -> u64 {
        self.next_counter
    }

    /// Takes the next counter value; the caller writes it into the header before sealing.
    pub fn next_counter(&mut self) -> Result<u64, CryptoError> {
        if self.next_counter >= REJECT_AFTER_MESSAGES {
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
        if buf.len() < len + TAG_LEN {
            return Err(CryptoError::Auth);
        }
        let tag = self
            .cipher
            .encrypt_in_place_detached(&nonce(counter), aad, &mut buf[..len])
            .map_err(|_| CryptoError::Auth)?;
        buf[len..len + TAG_LEN].copy_from_slice(&tag);
        Ok(len + TAG_LEN)
    }
}

impl OpenKey {
    /// An opening key.
    pub fn new(key: [u8; 32]) -> Self {
        OpenKey {
            cipher: ChaCha20Poly1305::new(Key::from_slice(&key)),
        }
    }

    /// Opens `buf` (ciphertext ‖ tag) in place; returns the plaintext length.
    pub fn open(&self, counter: u64, aad: &[u8], buf: &mut [u8]) -> Result<usize, CryptoError> {
        let len = buf.len().checked_sub(TAG_LEN).ok_or(CryptoError::Auth)?;
        let (ct, tag) = buf.split_at_mut(len);
        self.cipher
            .decrypt_in_place_detached(&nonce(counter), aad, ct, Tag::from_slice(tag))
            .map_err(|_| CryptoError::Auth)?;
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_open_and_tamper() {
        let mut s = SealKey::new([3; 32]);
        let o = OpenKey::new([3; 32]);
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
        let mut copy = buf;
        assert!(o.open(c, b"hdX", &mut copy[..n]).is_err());
        let mut copy = buf;
        assert!(o.open(c + 1, b"hdr", &mut copy[..n]).is_err());
        assert_eq!(s.next_counter().unwrap(), 1);
    }
}
