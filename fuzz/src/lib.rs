//! Bodies of the fuzz targets of the sans-IO core and of the daemons' parsers, one function
//! per target, each taking the fuzzer's bytes. They live in a library (the `fuzz_targets/`
//! binaries are one-line wrappers) so stable `cargo test` can run them too, over seeded
//! random inputs.
//!
//! Invariant of every body: it panics only when the code under test breaks a documented
//! property — a panic inside it, a parse that does not round-trip, a state change caused by
//! unauthenticated input — never on input merely being invalid.

mod config;
mod cookie;
mod detour;
mod endpoint;
mod http;
mod naming;
mod race;
mod stream;
mod wire;

pub use config::config;
pub use cookie::cookie_reply;
pub use detour::relay_request;
pub use endpoint::{handshake, session_data};
pub use http::http_request;
pub use naming::naming_record;
pub use race::{nfqueue, race_packet};
pub use stream::stream;
pub use wire::{frames, outer_header};

/// Splits fuzzer bytes into records: `[tag u8][len u16 BE][len bytes]`, the last one cut
/// short if the input ends. Lets one input describe a sequence of datagrams and events.
pub(crate) fn records(mut data: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    std::iter::from_fn(move || {
        let (&tag, rest) = data.split_first()?;
        // With under two bytes left for the length, what is left is the body.
        let (len, rest) = match rest {
            [a, b, rest @ ..] => (usize::from(u16::from_be_bytes([*a, *b])), rest),
            _ => (rest.len(), rest),
        };
        let (body, tail) = rest.split_at(len.min(rest.len()));
        data = tail;
        Some((tag, body))
    })
}

#[cfg(test)]
mod smoke;
