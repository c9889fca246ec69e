//! The config parser: any text, valid TOML or not, gives settings or a located error —
//! never a panic, and an error's line number is within the file.

use multihome::config::{client, server, Source};
use std::path::Path;

/// Fuzz body: parse `data` as both a client and a server config.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let src = Source {
        path: Path::new("fuzz.toml"),
        text,
    };
    let lines = text.lines().count().max(1);
    if let Err(e) = client::validate(&src) {
        assert!(e.line <= lines + 1, "line {} beyond {lines}", e.line);
    }
    if let Err(e) = server::validate(&src) {
        assert!(e.line <= lines + 1, "line {} beyond {lines}", e.line);
    }
}
