//! The control socket: a Unix stream socket (mode 0600, so only root reads the status or
//! reloads) answering one request per connection: `status` (the status document) or, for
//! the daemons that can, `reload` (re-read the config file; the answer says what changed or
//! why nothing did).
//!
//! Two ways to serve it: [`reply`] answers every connection with the status document taken
//! at accept (daemons with only `status`); [`Requests`] reads each request line in a local
//! task and hands the connection back to the loop with its [`Request`], so the loop answers
//! with the state it owns (the tunnel's daemons, which reload). Either way a slow or silent
//! client never blocks the loop.

use anyhow::{Context, Result};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use tokio::io::AsyncWriteExt;
use tokio::net::{UnixListener, UnixStream};

/// The listening socket; removes its file when dropped.
pub struct ControlSocket {
    listener: UnixListener,
    path: PathBuf,
}

impl ControlSocket {
    /// Binds `path` (creating its folder, replacing a stale socket) with mode 0600.
    pub fn bind(path: &Path) -> Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        if path.exists() {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                anyhow::bail!(
                    "{} is in use by a running daemon; stop it or set control_socket",
                    path.display()
                );
            }
            std::fs::remove_file(path).ok();
        }
        let listener =
            UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        Ok(ControlSocket {
            listener,
            path: path.to_path_buf(),
        })
    }

    /// Waits for the next connection.
    pub async fn accept(&self) -> std::io::Result<UnixStream> {
        self.listener.accept().await.map(|(s, _)| s)
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        std::fs::remove_file(&self.path).ok();
    }
}

/// Reads the request line and writes `doc` in the background (a slow peer never blocks
/// the data path). The only request is `status`; the document is taken when the
/// connection is accepted.
pub fn reply(mut stream: UnixStream, doc: String) {
    tokio::task::spawn_local(async move {
        let mut req = [0u8; 64];
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(2),
            tokio::io::AsyncReadExt::read(&mut stream, &mut req),
        )
        .await;
        let _ = stream.write_all(doc.as_bytes()).await;
        let _ = stream.shutdown().await;
    });
}

/// What a control connection asks for: its first line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// The status document (also what an empty or unreadable request gets).
    Status,
    /// Re-read the configuration file and apply what changed (`multihome reload`).
    Reload,
    /// The dashboard's sample of the status document: the sessions, their links' state,
    /// bytes, RTT and loss, the counters — what a poller that runs every second needs, at
    /// a fraction of the whole document's cost on a server with many sessions.
    Sample,
    /// Anything else (answered with an error, so a newer CLI talking to an older daemon
    /// learns why).
    Unknown(String),
}

impl Request {
    /// Parses a request line.
    pub fn parse(line: &str) -> Request {
        match line.trim() {
            "" | "status" => Request::Status,
            "reload" => Request::Reload,
            "sample" => Request::Sample,
            other => Request::Unknown(other.chars().take(32).collect()),
        }
    }
}

/// A connection whose request has been read, waiting for its answer.
pub struct Pending {
    /// What it asks for.
    pub request: Request,
    stream: UnixStream,
}

impl Pending {
    /// Writes `answer` in the background and closes the connection.
    pub fn answer(self, answer: String) {
        reply_now(self.stream, answer);
    }
}

/// Connections whose request is being read (each in its own local task, so a slow
/// client never blocks the loop), handed back to the loop once read.
pub struct Requests {
    tx: tokio::sync::mpsc::UnboundedSender<Pending>,
    rx: std::cell::RefCell<tokio::sync::mpsc::UnboundedReceiver<Pending>>,
}

impl Default for Requests {
    fn default() -> Self {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        Requests {
            tx,
            rx: std::cell::RefCell::new(rx),
        }
    }
}

impl Requests {
    /// Waits for the next connection on `socket` whose request line has arrived (within
    /// [`REQUEST_TIMEOUT`]; a connection that says nothing asks for the status).
    /// Cancel-safe: a request read but not yet taken stays queued.
    pub async fn next(&self, socket: &ControlSocket) -> Pending {
        loop {
            let accepted = std::future::poll_fn(|cx| {
                if let std::task::Poll::Ready(Some(p)) = self.rx.borrow_mut().poll_recv(cx) {
                    return std::task::Poll::Ready(Ok(Ok(p)));
                }
                socket
                    .listener
                    .poll_accept(cx)
                    .map(|r| r.map(|(s, _)| Err(s)))
            })
            .await;
            match accepted {
                Ok(Ok(pending)) => return pending,
                Ok(Err(stream)) => {
                    let tx = self.tx.clone();
                    tokio::task::spawn_local(async move {
                        let (request, stream) = read_request(stream).await;
                        let _ = tx.send(Pending { request, stream });
                    });
                }
                // Out of fds, say: not fatal, the next accept retries.
                Err(e) => tracing::warn!("control socket: accept failed: {e}"),
            }
        }
    }
}

/// How long a client may take to send its request line.
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

async fn read_request(mut stream: UnixStream) -> (Request, UnixStream) {
    let mut req = [0u8; 64];
    let mut n = 0;
    let read = async {
        while n < req.len() {
            match tokio::io::AsyncReadExt::read(&mut stream, &mut req[n..]).await {
                Ok(0) | Err(_) => break,
                Ok(k) => n += k,
            }
            if req[..n].contains(&b'\n') {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(REQUEST_TIMEOUT, read).await;
    let line = String::from_utf8_lossy(&req[..n]);
    (Request::parse(line.lines().next().unwrap_or("")), stream)
}

fn reply_now(mut stream: UnixStream, doc: String) {
    tokio::task::spawn_local(async move {
        let _ = stream.write_all(doc.as_bytes()).await;
        let _ = stream.shutdown().await;
    });
}

#[cfg(test)]
mod tests {
    use super::Request;

    #[test]
    fn a_request_line_is_read_whatever_the_whitespace() {
        assert_eq!(Request::parse(""), Request::Status);
        assert_eq!(Request::parse("status\n"), Request::Status);
        assert_eq!(Request::parse(" reload \r\n"), Request::Reload);
        assert_eq!(Request::parse("sample\n"), Request::Sample);
        let long = "x".repeat(100);
        assert_eq!(Request::parse(&long), Request::Unknown("x".repeat(32)));
    }
}
