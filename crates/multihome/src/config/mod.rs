//! Configuration files (TOML), parsed and validated into typed settings.
//!
//! Every error names the file, the line and the fix (`ConfigError`'s Display), because a
//! daemon that will not start must say exactly why. Unknown keys are errors (a typo must
//! not silently mean "default"). Validation that needs the machine (does an interface
//! exist?) happens at start-up but still reports the line, via the spans kept here.
//! Reference: docs/CONFIG.md.

mod addresses;
pub mod client;
pub mod detours;
pub mod mptcp;
pub mod naming;
mod raw;
pub mod reload;
pub mod server;
pub mod stream;

pub use client::ClientSettings;
pub use server::ServerSettings;

pub use multihome_runtime::config::{read_file, relative_to, ConfigError, Source};

use std::path::Path;

/// Reads a base64 private key file (as written by `multihome keygen`).
pub fn read_private_key(
    src: &Source<'_>,
    at: usize,
    file: &Path,
) -> Result<multihome_proto::crypto::StaticSecret, ConfigError> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        src.err(
            at,
            format!("cannot read private key file {}: {e}", file.display()),
            "create it with `multihome keygen --private-key-file FILE`",
        )
    })?;
    multihome_proto::crypto::StaticSecret::from_base64(&text).map_err(|e| {
        src.err(
            at,
            format!("private key file {} is malformed: {e}", file.display()),
            "regenerate it with `multihome keygen --private-key-file FILE`",
        )
    })
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod ipv6_tests;

#[cfg(test)]
mod naming_tests;

#[cfg(test)]
mod reload_tests;

/// The client's default control socket.
pub fn client_default_socket() -> &'static str {
    client::DEFAULT_CLIENT_SOCKET
}

/// The server's default control socket.
pub fn server_default_socket() -> &'static str {
    server::DEFAULT_SERVER_SOCKET
}
