//! The control socket: a Unix stream socket (mode 0600, so only root reads the status)
//! answering one request per connection with the status document.

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
