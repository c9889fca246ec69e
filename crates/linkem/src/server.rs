//! The control socket: a Unix stream socket speaking the line protocol of [`crate::control`].
//!
//! Any number of clients, one thread each (commands are rare; simplicity wins). A client
//! sends lines and reads one reply line per command, so a script can hold a connection open
//! and time its changes, or use `linkem ctl` for one-shot commands.
//! Invariant: a bad command gets an `error: …` reply and changes nothing; the socket file is
//! created fresh (a stale one from a killed run is replaced) and removed on drop.

use crate::bridge::Link;
use crate::control::{parse, Command, HELP};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Executes one control line against `link`, returning the reply (without newline).
pub fn execute(link: &Link, line: &str) -> String {
    let cmd = match parse(line) {
        Ok(c) => c,
        Err(e) => return format!("error: {e}"),
    };
    match cmd {
        Command::Set(dir, patch) => {
            // Trace paths in live commands are relative to linkem's working directory.
            match patch.to_changes(Path::new(".")) {
                Ok(changes) => {
                    link.apply(dir, &changes);
                    "ok".into()
                }
                Err(e) => format!("error: {e}"),
            }
        }
        Command::Down(dir) => {
            link.apply(dir, &[crate::pipeline::Change::Down(true)]);
            "ok".into()
        }
        Command::Up(dir) => {
            link.apply(dir, &[crate::pipeline::Change::Down(false)]);
            "ok".into()
        }
        Command::Stats => {
            serde_json::to_string(&link.stats()).unwrap_or_else(|e| format!("error: {e}"))
        }
        Command::Show => link.show().to_string(),
        Command::Help => HELP.into(),
    }
}

/// A listening control socket; removes its file when dropped.
pub struct ControlServer {
    path: PathBuf,
}

impl ControlServer {
    /// Binds `path` and serves `link` from a background thread.
    pub fn start(path: &Path, link: Arc<Link>) -> io::Result<ControlServer> {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let listener = UnixListener::bind(path)?;
        std::thread::Builder::new()
            .name("linkem-control".into())
            .spawn(move || {
                for stream in listener.incoming().flatten() {
                    let link = Arc::clone(&link);
                    let _ = std::thread::Builder::new()
                        .name("linkem-client".into())
                        .spawn(move || serve_client(&link, stream));
                }
            })?;
        Ok(ControlServer {
            path: path.to_owned(),
        })
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn serve_client(link: &Link, stream: UnixStream) -> io::Result<()> {
    let mut out = stream.try_clone()?;
    for line in BufReader::new(stream).lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        writeln!(out, "{}", execute(link, &line))?;
    }
    Ok(())
}

/// Sends one command to a control socket and returns the reply line (the `linkem ctl` client).
pub fn send_command(path: &Path, command: &str) -> io::Result<String> {
    let mut s = UnixStream::connect(path)?;
    writeln!(s, "{command}")?;
    s.shutdown(std::net::Shutdown::Write)?;
    let mut reply = String::new();
    BufReader::new(s).read_line(&mut reply)?;
    Ok(reply.trim_end().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LinkConfig;

    #[test]
    fn commands_change_and_report_the_link() {
        let link = Link::new(LinkConfig::default(), 1).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("ctl.sock");
        let server = ControlServer::start(&sock, Arc::clone(&link)).unwrap();
        assert_eq!(
            send_command(&sock, "set a2b rate=5mbit delay=7ms").unwrap(),
            "ok"
        );
        assert_eq!(send_command(&sock, "down b2a").unwrap(), "ok");
        let show: serde_json::Value =
            serde_json::from_str(&send_command(&sock, "show").unwrap()).unwrap();
        assert_eq!(show["a2b"]["rate"], "5mbit");
        assert_eq!(show["a2b"]["delay_us"], 7000);
        assert_eq!(show["b2a"]["rate"], "unlimited");
        assert_eq!(show["b2a"]["down"], true);
        let stats: serde_json::Value =
            serde_json::from_str(&send_command(&sock, "stats").unwrap()).unwrap();
        assert_eq!(stats["b2a"]["down"], true);
        assert_eq!(stats["a2b"]["in"]["frames"], 0);
        assert!(send_command(&sock, "set a2b rate=warp")
            .unwrap()
            .starts_with("error:"));
        assert!(send_command(&sock, "set both rate=trace:/nonexistent")
            .unwrap()
            .starts_with("error:"));
        assert!(send_command(&sock, "help")
            .unwrap()
            .starts_with("commands:"));
        drop(server);
        assert!(!sock.exists());
    }
}
