//! cargo-fuzz entry point; the body and its invariants are in `multihome_fuzz::stream`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| multihome_fuzz::stream(data));
