//! Target of the name service's parsers (`multihome_naming`): a resolver reads requests
//! from anyone, a client reads responses and the records in them, and a store reads back
//! what the database holds.

use multihome_naming::message::{Request, Response};
use multihome_naming::signed::{admit, verify};

/// Unix ms at which records are judged (records built by the smoke test expire after it).
const NOW_MS: u64 = 1_700_000_000_000;

/// Fuzz body: the input as a record, a request and a response; a parsed response's
/// records each admitted.
///
/// Checks: no panic; a record admitted re-encodes to exactly its signed bytes (it was
/// verified over those bytes, never re-encoded); no record the fuzzer wrote verifies unless
/// it carries a signature by its own key (the fuzzer holds none: the smoke test feeds
/// signed ones, mutated); a response that parses encodes back to the same bytes; a request
/// that parses encodes back to the same bytes.
pub fn naming_record(data: &[u8]) {
    if let Ok(s) = admit(data, NOW_MS) {
        assert_eq!(s.record().encode_unsigned(), &data[..data.len() - 64]);
        assert!(verify(data).is_ok());
    }
    if let Some((id, req)) = Request::parse(data) {
        assert_eq!(req.encode(id), data);
    }
    if let Some(resp) = Response::parse(data) {
        assert_eq!(resp.encode(), data);
        for r in &resp.records {
            let _ = admit(r, NOW_MS);
        }
    }
}
