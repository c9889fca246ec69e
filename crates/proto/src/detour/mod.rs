//! Detours: a client asks a relay, in an authenticated request, to forward one of its
//! tunnel paths to a server; the relay forwards the path's UDP datagrams (kernel NAT or a
//! userspace tunnel socket) and answers with the port to use. The relay only moves the
//! tunnel's datagrams: it can neither read nor forge them (they stay sealed end to end).
//!
//! The exchange is one Noise IK handshake (`Noise_IK_25519_ChaChaPoly_BLAKE2s`, prologue
//! `multihome relay v1`) whose first message carries the request and whose second carries
//! the answer, so both are authenticated by the static keys the project already uses
//! (Brennan's "custom protocol for arranging NAT detours", made authenticated). Wire
//! format in `wire.rs` and docs/PROTOCOL.md §15; the client's state machine in `client.rs`;
//! the relay's admission, bounded table and expiry in `relay.rs`; the client's path manager
//! (which detours the tunnel uses) in `manager.rs`; which kernel MPTCP connections get
//! subflows through which relays in `mptcp.rs`.

mod client;
mod manager;
mod manager_types;
mod mptcp;
mod mptcp_types;
mod relay;
pub(crate) mod wire;

pub use client::{ClientConfig, ClientCounters, ClientEvent, DetourClient, RequestId, MAX_PENDING};
pub use manager::{
    Action as ManagerAction, CandidateStatus, DetourManager, ManagerConfig, ManagerCounters,
    PathObs, RelayListing, RelaySource, RelaySpec, Transmit as ManagerTransmit, TICK,
};
pub use mptcp::{
    DetourId, DetourStatus, MptcpAction, MptcpConfig, MptcpCounters, MptcpManager, RelayStatus,
    Target,
};
pub use relay::{
    is_request, Action, Admitted, DetourRelay, Entry, ModeSet, RelayConfig, RelayCounters,
};
pub use wire::{
    emit_answer_payload, emit_header, emit_request_payload, parse_answer_payload, parse_header,
    parse_request_payload, Answer, DetourError, Header, Mode, Request, Status, ANSWER_LEN,
    ANSWER_PAYLOAD_LEN, HEADER_LEN, PROLOGUE, REQUEST_LEN, REQUEST_PAYLOAD_LEN, TYPE_ANSWER,
    TYPE_REQUEST,
};

#[cfg(test)]
mod manager_tests;
#[cfg(test)]
mod mptcp_tests;
#[cfg(test)]
mod tests;
