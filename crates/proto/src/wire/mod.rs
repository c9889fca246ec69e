//! Wire format: the cleartext outer header of every UDP datagram and the frames carried
//! inside the sealed part. Layouts are specified in `docs/PROTOCOL.md`.
//!
//! Style of smoltcp's `wire` module: a zero-copy view (`OuterPacket<T: AsRef<[u8]>>`) whose
//! `new_checked` validates lengths once, so accessors never panic, plus owned `Repr`
//! types with `parse`/`emit` where that is clearer. Invariant: no function in this module
//! panics or allocates unboundedly on any input; all multi-byte fields are big-endian.

mod flags;
mod frame;
pub(crate) mod outer;
pub mod relays;
pub mod stated;

pub use flags::{DataFlags, OrderMode, DEADLINE_LEN, PRED_GAP_LEN, REALTIME_CODE};
pub use frame::{
    AckFrame, CompressedFrame, DataFrame, FecFrame, Frame, FrameReader, FrameWriter, InnerHeader,
    NackFrame, PairFrame,
};
pub use outer::{
    MessageType, OuterPacket, DATA_HEADER_LEN, HANDSHAKE_INIT_LEN, HANDSHAKE_RESP_LEN,
};

/// Bytes added by encapsulation before the IP/UDP headers: outer data header, inner
/// header, DATA frame header and the AEAD tag.
pub const OVERHEAD_BYTES: usize =
    DATA_HEADER_LEN + InnerHeader::LEN + DataFrame::HEADER_LEN + crate::crypto::TAG_LEN;

/// Why a datagram or frame could not be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The buffer is shorter than the fixed part of the message.
    #[error("truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes required.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// The message type byte is not one we know.
    #[error("unknown message type {0}")]
    UnknownType(u8),
    /// A reserved field was not zero (a later version, or garbage).
    #[error("reserved bits set")]
    Reserved,
    /// A frame type inside the sealed part is not one we know.
    #[error("unknown frame type {0}")]
    UnknownFrame(u8),
    /// The output buffer is too small for what is being written.
    #[error("output buffer too small")]
    BufferTooSmall,
}
