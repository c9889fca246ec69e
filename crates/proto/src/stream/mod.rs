//! Stream mode's wire protocol (docs/PROTOCOL.md §17): a LAN host's TCP connection, ended
//! at the client, carried as an encrypted byte stream over one kernel MPTCP connection
//! (a subflow per link) to the server, which opens the TCP connection to the destination.
//!
//! Sans-IO: [`handshake`] builds and reads the two Noise IK messages (the destination
//! travels in message 1, the server's connect result in message 2); [`record`] seals and
//! opens the records that follow (data, half-close, reset), each with its own nonce
//! counter per direction; [`replay`] refuses a message 1 seen before. The daemon's
//! `stream/` module does the sockets.
//!
//! Invariants: nothing from the peer is acted on before it authenticated (message 1 is
//! only read after its Noise tags verified; a record is opened before its kind is looked
//! at); every frame has a 2-byte length so a reader knows how much to wait for, and
//! lengths beyond [`MAX_FRAME`] are refused, not buffered; parsers never panic.

pub mod handshake;
pub mod record;
pub mod replay;
pub mod subflows;

pub use handshake::{ConnectStatus, StreamInitiator, StreamResponder, Target};
pub use record::{Record, RecordOpener, RecordSealer, MAX_DATA};
pub use replay::InitReplay;

/// Largest frame body after the 2-byte length (a record's ciphertext and tag, or a
/// handshake message).
pub const MAX_FRAME: usize = u16::MAX as usize;

/// Errors of the stream protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// The Noise handshake failed (unknown key, forged or corrupted message).
    #[error("stream handshake failed: {0}")]
    Handshake(String),
    /// A handshake payload is malformed (after it authenticated).
    #[error("malformed stream handshake payload: {0}")]
    Payload(&'static str),
    /// A record did not authenticate (corrupted, forged, replayed or reordered).
    #[error("stream record failed authentication")]
    Auth,
    /// A record authenticated but its content is malformed.
    #[error("malformed stream record: {0}")]
    Record(&'static str),
}
