//! Which AEAD seals data datagrams: the two ciphers, the sets a side offers or accepts,
//! the responder's choice, and each cipher's message limits.
//!
//! Both are 256-bit-key AEADs with a 96-bit nonce and a 16-byte tag, so the wire format
//! (header, nonce layout, lengths) is the same whichever is chosen; only the bytes differ.
//! ChaCha20-Poly1305 is the baseline every peer must accept. AES-256-GCM is offered where
//! the CPU has AES and carry-less-multiply instructions: there it seals 3.9 GB/s per core
//! against ChaCha's 1.5 (ring, this machine's EPYC), and per-datagram sealing is most of
//! the data path's CPU. Without those instructions AES-GCM falls back to slow constant-time
//! software, which is why a side offers it only when its own CPU runs it fast.
//!
//! Negotiation (docs/PROTOCOL.md §3): the initiator lists its set in handshake message 1,
//! the responder picks AES-256-GCM if both sets hold it, else ChaCha20-Poly1305, and says
//! which in message 2's flags. An initiator that predates negotiation sends an empty set,
//! read as ChaCha20-Poly1305 alone.

/// A data cipher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataCipher {
    /// RFC 8439, the default everywhere.
    ChaCha20Poly1305,
    /// AES-256 in Galois/Counter Mode (NIST SP 800-38D).
    Aes256Gcm,
}

impl DataCipher {
    /// Its name in configuration files and status output.
    pub fn name(self) -> &'static str {
        match self {
            DataCipher::ChaCha20Poly1305 => "chacha20-poly1305",
            DataCipher::Aes256Gcm => "aes-256-gcm",
        }
    }

    /// The `ring` algorithm.
    pub(super) fn algorithm(self) -> &'static ring::aead::Algorithm {
        match self {
            DataCipher::ChaCha20Poly1305 => &ring::aead::CHACHA20_POLY1305,
            DataCipher::Aes256Gcm => &ring::aead::AES_256_GCM,
        }
    }

    /// Messages one key may seal before the initiator starts a new handshake.
    ///
    /// ChaCha20-Poly1305 has no practical limit below its 64-bit counter (WireGuard's
    /// REKEY_AFTER_MESSAGES, 2^60). AES-GCM's confidentiality bound degrades with the
    /// number of blocks sealed under one key (draft-irtf-cfrg-aead-limits §5.1): with
    /// datagrams of at most 95 blocks, 2^27 of them keep the distinguishing advantage
    /// below 2^-60, so a new handshake starts at 2^26, leaving half the budget for it to
    /// complete. At the daemon's rates the 120-s time-based rekey comes first anyway.
    pub fn rekey_after_messages(self) -> u64 {
        match self {
            DataCipher::ChaCha20Poly1305 => 1 << 60,
            DataCipher::Aes256Gcm => 1 << 26,
        }
    }

    /// Messages after which a key refuses to seal (the hard stop behind the rekey).
    pub fn reject_after_messages(self) -> u64 {
        match self {
            DataCipher::ChaCha20Poly1305 => u64::MAX - (1 << 13),
            DataCipher::Aes256Gcm => 1 << 27,
        }
    }
}

impl core::str::FromStr for DataCipher {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "chacha20-poly1305" => Ok(DataCipher::ChaCha20Poly1305),
            "aes-256-gcm" => Ok(DataCipher::Aes256Gcm),
            other => Err(format!(
                "unknown cipher {other:?} (expected chacha20-poly1305 or aes-256-gcm)"
            )),
        }
    }
}

/// A set of data ciphers, as offered in handshake message 1 (one bit each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CipherSet(u8);

const BIT_CHACHA: u8 = 0x01;
const BIT_AES256GCM: u8 = 0x02;

impl CipherSet {
    /// ChaCha20-Poly1305 only.
    pub const CHACHA20_POLY1305: CipherSet = CipherSet(BIT_CHACHA);
    /// Both ciphers.
    pub const ALL: CipherSet = CipherSet(BIT_CHACHA | BIT_AES256GCM);

    /// A set holding exactly `c` and the mandatory ChaCha20-Poly1305.
    pub fn with(c: DataCipher) -> CipherSet {
        match c {
            DataCipher::ChaCha20Poly1305 => Self::CHACHA20_POLY1305,
            DataCipher::Aes256Gcm => Self::ALL,
        }
    }

    /// What this machine runs fast: always ChaCha20-Poly1305, and AES-256-GCM when the
    /// CPU has AES and carry-less-multiply instructions (a CPUID read, not I/O; the same
    /// answer every call on one machine).
    pub fn hardware() -> CipherSet {
        if aes_in_hardware() {
            Self::ALL
        } else {
            Self::CHACHA20_POLY1305
        }
    }

    /// Whether `c` is in the set.
    pub fn contains(self, c: DataCipher) -> bool {
        let bit = match c {
            DataCipher::ChaCha20Poly1305 => BIT_CHACHA,
            DataCipher::Aes256Gcm => BIT_AES256GCM,
        };
        self.0 & bit != 0
    }

    /// The byte in handshake message 1.
    pub fn to_wire(self) -> u8 {
        self.0
    }

    /// Reads the byte of message 1. Zero (an initiator from before negotiation) means
    /// ChaCha20-Poly1305; unknown bits are ignored, so a later cipher can be added.
    pub fn from_wire(b: u8) -> CipherSet {
        let known = b & (BIT_CHACHA | BIT_AES256GCM);
        if known == 0 {
            Self::CHACHA20_POLY1305
        } else {
            CipherSet(known)
        }
    }

    /// The responder's choice between its own set and the one offered: AES-256-GCM when
    /// both hold it, else ChaCha20-Poly1305 when both hold that, else none.
    pub fn choose(self, offered: CipherSet) -> Option<DataCipher> {
        [DataCipher::Aes256Gcm, DataCipher::ChaCha20Poly1305]
            .into_iter()
            .find(|&c| self.contains(c) && offered.contains(c))
    }
}

#[cfg(target_arch = "x86_64")]
fn aes_in_hardware() -> bool {
    std::is_x86_feature_detected!("aes") && std::is_x86_feature_detected!("pclmulqdq")
}

#[cfg(target_arch = "aarch64")]
fn aes_in_hardware() -> bool {
    std::arch::is_aarch64_feature_detected!("aes")
        && std::arch::is_aarch64_feature_detected!("pmull")
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn aes_in_hardware() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responder_prefers_aes_only_when_both_offer_it() {
        use DataCipher::*;
        let chacha = CipherSet::CHACHA20_POLY1305;
        let all = CipherSet::ALL;
        assert_eq!(all.choose(all), Some(Aes256Gcm));
        assert_eq!(all.choose(chacha), Some(ChaCha20Poly1305));
        assert_eq!(chacha.choose(all), Some(ChaCha20Poly1305));
        assert_eq!(chacha.choose(chacha), Some(ChaCha20Poly1305));
        let aes_only = CipherSet(BIT_AES256GCM);
        assert_eq!(aes_only.choose(chacha), None);
        assert_eq!(aes_only.choose(all), Some(Aes256Gcm));
    }

    #[test]
    fn wire_byte_round_trips_and_old_initiators_mean_chacha() {
        for s in [CipherSet::CHACHA20_POLY1305, CipherSet::ALL] {
            assert_eq!(CipherSet::from_wire(s.to_wire()), s);
        }
        assert_eq!(CipherSet::from_wire(0), CipherSet::CHACHA20_POLY1305);
        assert_eq!(CipherSet::from_wire(0xF0), CipherSet::CHACHA20_POLY1305);
        assert_eq!(CipherSet::from_wire(0xF2), CipherSet(BIT_AES256GCM));
    }

    #[test]
    fn names_parse_back() {
        for c in [DataCipher::ChaCha20Poly1305, DataCipher::Aes256Gcm] {
            assert_eq!(c.name().parse::<DataCipher>(), Ok(c));
        }
        assert!("aes-128-gcm".parse::<DataCipher>().is_err());
    }

    #[test]
    fn limits_leave_room_to_rekey() {
        for c in [DataCipher::ChaCha20Poly1305, DataCipher::Aes256Gcm] {
            assert!(c.rekey_after_messages() < c.reject_after_messages());
        }
    }
}
