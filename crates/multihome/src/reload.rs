//! `multihome reload`: asks a running client or server, over its control socket, to
//! re-read its configuration file and apply what changed without dropping the session
//! (the daemon's side: `daemon/reload.rs`; what may change: `config/reload.rs`). Prints
//! the changes; a refused reload (the file is invalid, or changes something fixed while
//! the daemon runs) is an error, and the daemon keeps the configuration in force.

use crate::check::{self, Kind};
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// Sends `reload` to the daemon at `socket`, or at the control socket `config` names
/// (`--config`: what a service manager knows), or else at `status::default_socket`, and
/// prints what it changed.
pub fn request(socket: Option<PathBuf>, config: Option<PathBuf>) -> Result<()> {
    let socket = match (socket, config) {
        (Some(s), _) => s,
        (None, Some(c)) => socket_of(&c)?,
        (None, None) => crate::status::default_socket(),
    };
    let v = ask(&socket)?;
    match v["reloaded"].as_bool() {
        Some(true) => {
            let changes = v["changes"].as_array().cloned().unwrap_or_default();
            if changes.is_empty() {
                println!("reloaded: nothing changed");
            }
            for c in changes {
                println!("reloaded: {}", c.as_str().unwrap_or("?"));
            }
            Ok(())
        }
        Some(false) => bail!(
            "reload refused; the configuration in force is kept:\n{}",
            v["error"].as_str().unwrap_or("(no reason given)")
        ),
        None => bail!(
            "the daemon at {} cannot reload its configuration (only the client and the \
             server can); restart it to apply a new file",
            socket.display()
        ),
    }
}

/// The control socket of the daemon `config` configures (its `control_socket`, else the
/// default of its kind). Only the client and the server reload.
fn socket_of(config: &Path) -> Result<PathBuf> {
    let text = crate::config::read_file(config)?;
    let src = crate::config::Source {
        path: config,
        text: &text,
    };
    let kind = check::kind(&src)?;
    if !matches!(kind, Kind::Client | Kind::Server) {
        bail!(
            "`multihome {}` cannot reload its configuration; restart it to apply {}",
            kind.command(),
            config.display()
        );
    }
    let doc: toml::Table = src.parse()?;
    let set = doc[kind.table()]
        .get("control_socket")
        .and_then(|v| v.as_str());
    Ok(PathBuf::from(set.unwrap_or(kind.default_socket())))
}

fn ask(socket: &Path) -> Result<Value> {
    let mut s = UnixStream::connect(socket).with_context(|| {
        format!(
            "connecting to {} (is the daemon running? try --socket)",
            socket.display()
        )
    })?;
    s.write_all(b"reload\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    serde_json::from_str(&text).context("the daemon's answer is not JSON")
}
