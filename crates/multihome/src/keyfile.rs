//! Private key files: base64 text, created with mode 0600 and never overwritten.

use anyhow::{bail, Context, Result};
use multihome_proto::crypto::{PublicKey, StaticSecret};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Creates a new key file (refusing to overwrite one) and returns the public key.
pub fn generate(path: &Path) -> Result<PublicKey> {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes).map_err(|e| anyhow::anyhow!("reading the OS RNG: {e}"))?;
    let secret = StaticSecret::from_bytes(bytes);
    if path.exists() {
        bail!(
            "{} exists; refusing to overwrite a private key (remove it first)",
            path.display()
        );
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    writeln!(f, "{}", secret.to_base64()).context("writing the key")?;
    Ok(secret.public_key())
}

/// Reads a key file.
pub fn read(path: &Path) -> Result<StaticSecret> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    StaticSecret::from_base64(&text)
        .with_context(|| format!("{} is not a multihome private key", path.display()))
}
