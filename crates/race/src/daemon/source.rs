//! The text of race.toml with its path, and configuration errors located by file and line.
//!
//! Every error names the file, the line and the fix (`ConfigError`'s Display, the same
//! format as the tunnel's config errors in `crates/multihome/src/config/mod.rs`), because a
//! daemon that will not start must say exactly why. Repeated rather than shared because
//! `multihome` depends on this crate, not the other way.

use std::path::{Path, PathBuf};

/// A configuration problem, located.
#[derive(Debug, thiserror::Error)]
#[error("{file}:{line}: {message}\n  fix: {fix}")]
pub struct ConfigError {
    /// The config file.
    pub file: PathBuf,
    /// 1-based line (0 when the whole file is concerned).
    pub line: usize,
    /// What is wrong.
    pub message: String,
    /// What to do about it.
    pub fix: String,
}

/// Source text plus its path, for turning byte spans into line numbers.
pub struct Source<'a> {
    /// File path (for messages).
    pub path: &'a Path,
    /// File contents.
    pub text: &'a str,
}

impl Source<'_> {
    /// An error at byte offset `at`.
    pub fn err(
        &self,
        at: usize,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> ConfigError {
        let line = self.text[..at.min(self.text.len())].matches('\n').count() + 1;
        ConfigError {
            file: self.path.to_path_buf(),
            line,
            message: message.into(),
            fix: fix.into(),
        }
    }

    /// An error about the file as a whole.
    pub fn err_file(&self, message: impl Into<String>, fix: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.path.to_path_buf(),
            line: 0,
            message: message.into(),
            fix: fix.into(),
        }
    }

    /// Parses TOML into `T`, turning syntax and schema errors into located errors.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, ConfigError> {
        toml::from_str(self.text).map_err(|e| {
            let at = e.span().map_or(0, |s| s.start);
            let msg = e.message().to_string();
            let fix = if msg.contains("unknown field") {
                "remove or correct the key; docs/CONFIG.md lists every key".to_string()
            } else if msg.contains("missing field") {
                "add the key; see the examples in examples/".to_string()
            } else {
                "correct the value's syntax or type (see docs/CONFIG.md)".to_string()
            };
            self.err(at, msg, fix)
        })
    }
}

/// Reads a config file, with a located error if it cannot be read.
pub fn read_file(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: path.to_path_buf(),
        line: 0,
        message: format!("cannot read the config file: {e}"),
        fix: "check the path given to --config and its permissions".into(),
    })
}
