//! The config parser: any text, valid TOML or not, gives settings or a located error —
//! never a panic, and an error's line number is within the file. The same holds for the
//! daemon kind `check-config` reads off the tables, and for a reload checked against a
//! running client's settings (`config/reload.rs`, which also locates keys by scanning lines).

use multihome::config::{client, reload, server, ConfigError, Source};
use std::path::Path;

/// A running client's config, for the reload check.
const RUNNING: &str = "[client]\nprivate_key_file = \"k\"\nserver_public_key = \"q5ZGxSCEYQ8aaUULUyOJXWKGjS6gtBg8GK62rzCGk0Q=\"\nserver = \"10.0.0.1:7000\"\ntun_address = \"10.200.0.2/24\"\nmtu = 1300\n[[link]]\nname = \"a\"\ninterface = \"eth0\"\n[[link]]\nname = \"b\"\ninterface = \"eth1\"\n";

/// Fuzz body: parse `data` as a client and a server config, tell its kind, and check it
/// as a reload of [`RUNNING`].
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let src = Source {
        path: Path::new("fuzz.toml"),
        text,
    };
    let lines = text.lines().count().max(1);
    let located = |e: ConfigError| assert!(e.line <= lines + 1, "line {} beyond {lines}", e.line);
    if let Err(e) = client::validate(&src) {
        located(e);
    }
    if let Err(e) = server::validate(&src) {
        located(e);
    }
    if let Err(e) = multihome::check::kind(&src) {
        located(e);
    }
    let running = Source {
        path: Path::new("running.toml"),
        text: RUNNING,
    };
    let old = client::validate(&running).expect("the running config is valid");
    match reload::client(&src, &old) {
        Err(e) => located(e),
        // A link keeps its id; ids stay below 16 and distinct.
        Ok(r) => {
            let mut ids: Vec<u8> = r.settings.links.iter().map(|l| l.id.0).collect();
            assert!(ids.iter().all(|&i| i < 16));
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len(), r.settings.links.len(), "two links share an id");
            for l in &r.settings.links {
                if let Some(o) = old.links.iter().find(|o| o.name == l.name) {
                    assert_eq!(o.id, l.id, "link {} changed id", l.name);
                }
            }
        }
    }
}
