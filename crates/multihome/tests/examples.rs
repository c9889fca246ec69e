//! Every example config in `examples/` must pass `multihome check-config --offline` (the
//! daemon's own validation, told by the file's table): documentation that does not parse is
//! worse than none. The package installs these files and its install test checks them again
//! with the installed binary (scripts/test-package.sh).

use multihome::check::{check, Kind};
use std::path::Path;

#[test]
fn example_configs_are_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut kinds = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("examples/ exists") {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let (kind, _) = check(&path, true).unwrap_or_else(|e| panic!("{e}"));
        kinds.push(kind);
    }
    for k in [
        Kind::Client,
        Kind::Server,
        Kind::Relay,
        Kind::Race,
        Kind::MptcpDetours,
    ] {
        assert!(
            kinds.contains(&k),
            "no example for `multihome {}`",
            k.command()
        );
    }
}
