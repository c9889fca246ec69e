//! cargo-fuzz entry point; the body and its invariants are in `multihome_fuzz::cookie_reply`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| multihome_fuzz::cookie_reply(data));
