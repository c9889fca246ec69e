//! Every example config in `examples/` must pass validation: documentation that does not
//! parse is worse than none.

use multihome::config::{client, server, Source};
use std::path::Path;

#[test]
fn example_configs_are_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("examples/ exists") {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        // relay.toml (its `[[client]]` contains "[client]") is the relay crate's: its own
        // unit test parses it (crates/relay/src/config.rs).
        if text.lines().any(|l| l.trim() == "[relay]") {
            continue;
        }
        // mptcp-detours.toml is parsed by its own unit test (config/mptcp.rs).
        if text.lines().any(|l| l.trim() == "[mptcp]") {
            continue;
        }
        let src = Source {
            path: &path,
            text: &text,
        };
        if text.contains("[client]") {
            client::validate(&src).unwrap_or_else(|e| panic!("{e}"));
        } else {
            server::validate(&src).unwrap_or_else(|e| panic!("{e}"));
        }
        checked += 1;
    }
    assert!(
        checked >= 2,
        "expected a client and a server example, found {checked}"
    );
}
