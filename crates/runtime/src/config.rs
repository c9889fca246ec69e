//! Configuration files read as TOML, with every error located: each names the file, the
//! line and the fix (`ConfigError`'s Display), because a daemon that will not start must say
//! exactly why. Unknown keys are errors (a typo must not silently mean "default"); each
//! daemon's schema and validation live in its own crate and use `Source` to locate spans.

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

/// The optional `dashboard` key every daemon's main section has: the web dashboard's
/// address (`multihome_runtime::dashboard`).
pub fn dashboard_addr(
    src: &Source<'_>,
    key: Option<&toml::Spanned<String>>,
) -> Result<Option<std::net::SocketAddr>, ConfigError> {
    let Some(k) = key else { return Ok(None) };
    k.get_ref().parse().map(Some).map_err(|_| {
        src.err(
            k.span().start,
            format!(
                "dashboard `{}` is not an IP address with a port",
                k.get_ref()
            ),
            "write it as \"127.0.0.1:8080\" (this host only) or \"[::]:8080\"",
        )
    })
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

/// Resolves a path in the config relative to the config file's folder.
pub fn relative_to(config: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        config.parent().unwrap_or(Path::new(".")).join(p)
    }
}
