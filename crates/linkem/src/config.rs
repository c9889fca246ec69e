//! Link configuration: a TOML file with a `[both]` table and per-direction overrides.
//!
//! ```toml
//! [both]                       # applies to both directions
//! delay = "20ms"
//! jitter = "2ms"               # uniform ±2 ms (jitter_dist = "normal": σ = 2 ms)
//! rate = "20mbit"              # or "unlimited", or "trace:lte.trace" (relative to this file)
//! loss = 0.01                  # or { p = 0.01, r = 0.3, loss_bad = 1.0, loss_good = 0.0 }
//! queue_bytes = 150000         # and/or queue_packets = 100; "unlimited" lifts a limit
//! outages = [{ start = "10s", end = "12s" }]
//!
//! [a2b]                        # frames entering on --iface-a; overrides [both] key by key
//! rate = "10mbit"
//! [b2a]
//! delay = "30ms"
//! ```
//! The same key=value grammar is used by the control socket's `set` command, so every value
//! also has a string form. Invariant: a [`DirectionPatch`] holds only validated values; the
//! only I/O here is reading trace files, at load time, relative to the config's directory.

use crate::delay::JitterDist;
use crate::loss::{LossError, LossSpec};
use crate::outage::{Outage, OutageError, OutageSchedule};
use crate::pipeline::{Change, DirectionParams};
use crate::rate::RateModel;
use crate::trace::{Trace, TraceError};
use crate::units::{parse_duration, serde_duration, Bandwidth, UnitError};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// Errors from reading a configuration or a `set` command.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The TOML is malformed or has unknown keys or bad values.
    #[error("config: {0}")]
    Toml(#[from] toml::de::Error),
    /// A trace file is not a valid Mahimahi trace.
    #[error("trace {path}: {source}")]
    Trace {
        /// The trace file.
        path: PathBuf,
        /// What is wrong with it.
        source: TraceError,
    },
    /// A rate or duration value is malformed.
    #[error(transparent)]
    Unit(#[from] UnitError),
    /// A loss value is malformed.
    #[error(transparent)]
    Loss(#[from] LossError),
    /// An outage window is empty.
    #[error(transparent)]
    Outage(#[from] OutageError),
    /// A `key=value` names no setting, or its value is malformed.
    #[error("bad setting {0:?}")]
    BadSetting(String),
    /// Outages are a schedule from start-up; live changes use `down`/`up`.
    #[error("outages can only be set in the config file (use down/up live)")]
    OutagesLive,
}

/// How fast a direction is, as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum RateSpec {
    /// `unlimited`.
    Unlimited,
    /// e.g. `20mbit`.
    Constant(Bandwidth),
    /// `trace:PATH`, a Mahimahi trace.
    Trace(PathBuf),
}

impl FromStr for RateSpec {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        match s.trim() {
            "unlimited" => Ok(RateSpec::Unlimited),
            t => match t.strip_prefix("trace:") {
                Some(path) => Ok(RateSpec::Trace(PathBuf::from(path))),
                None => t.parse().map(RateSpec::Constant),
            },
        }
    }
}

impl TryFrom<String> for RateSpec {
    type Error = UnitError;
    fn try_from(s: String) -> Result<Self, UnitError> {
        s.parse()
    }
}

impl RateSpec {
    /// The rate model, reading a trace relative to `base`.
    pub fn load(&self, base: &Path) -> Result<RateModel, ConfigError> {
        Ok(match self {
            RateSpec::Unlimited => RateModel::Unlimited,
            RateSpec::Constant(b) => RateModel::Constant(*b),
            RateSpec::Trace(p) => {
                let path = base.join(p);
                let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
                    path: path.clone(),
                    source,
                })?;
                let trace =
                    Trace::parse(&text).map_err(|source| ConfigError::Trace { path, source })?;
                RateModel::Trace(Arc::new(trace))
            }
        })
    }
}

/// A queue limit: a count, or `unlimited`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "LimitRepr")]
pub struct Limit(pub Option<u64>);

#[derive(Deserialize)]
#[serde(untagged)]
enum LimitRepr {
    Count(u64),
    Text(String),
}

impl TryFrom<LimitRepr> for Limit {
    type Error = String;
    fn try_from(r: LimitRepr) -> Result<Self, String> {
        match r {
            LimitRepr::Count(n) if n > 0 => Ok(Limit(Some(n))),
            LimitRepr::Count(_) => Err("a queue limit must be > 0 (or \"unlimited\")".into()),
            LimitRepr::Text(t) => t.parse(),
        }
    }
}

impl FromStr for Limit {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "unlimited" => Ok(Limit(None)),
            t => match t.parse::<u64>() {
                Ok(n) if n > 0 => Ok(Limit(Some(n))),
                _ => Err(format!("bad queue limit {t:?}")),
            },
        }
    }
}

/// Settings for one direction, each optional so layers can override key by key.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectionPatch {
    /// Rate.
    pub rate: Option<RateSpec>,
    /// Fixed one-way delay.
    #[serde(default, deserialize_with = "serde_duration::option")]
    pub delay: Option<Duration>,
    /// Jitter amount.
    #[serde(default, deserialize_with = "serde_duration::option")]
    pub jitter: Option<Duration>,
    /// Jitter shape.
    pub jitter_dist: Option<JitterDist>,
    /// Whether jitter may reorder frames.
    pub reorder: Option<bool>,
    /// Loss model.
    pub loss: Option<LossSpec>,
    /// Byte limit of the queue.
    pub queue_bytes: Option<Limit>,
    /// Frame limit of the queue.
    pub queue_packets: Option<Limit>,
    /// Outage schedule (config file only).
    pub outages: Option<Vec<Outage>>,
}

impl DirectionPatch {
    /// Parses one `key=value` of a `set` command into this patch.
    pub fn set(&mut self, kv: &str) -> Result<(), ConfigError> {
        let bad = || ConfigError::BadSetting(kv.to_owned());
        let (k, v) = kv.split_once('=').ok_or_else(bad)?;
        match k {
            "rate" => self.rate = Some(v.parse()?),
            "delay" => self.delay = Some(parse_duration(v)?),
            "jitter" => self.jitter = Some(parse_duration(v)?),
            "jitter_dist" => self.jitter_dist = Some(v.parse().map_err(|_| bad())?),
            "reorder" => self.reorder = Some(v.parse().map_err(|_| bad())?),
            "loss" => self.loss = Some(v.parse()?),
            "queue_bytes" => self.queue_bytes = Some(v.parse().map_err(|_| bad())?),
            "queue_packets" => self.queue_packets = Some(v.parse().map_err(|_| bad())?),
            "outages" => return Err(ConfigError::OutagesLive),
            _ => return Err(bad()),
        }
        Ok(())
    }

    /// The live changes this patch makes (traces read relative to `base`).
    pub fn to_changes(&self, base: &Path) -> Result<Vec<Change>, ConfigError> {
        if self.outages.is_some() {
            return Err(ConfigError::OutagesLive);
        }
        let mut c = Vec::new();
        if let Some(r) = &self.rate {
            c.push(Change::Rate(r.load(base)?));
        }
        c.extend(self.delay.map(Change::Delay));
        c.extend(self.jitter.map(Change::Jitter));
        c.extend(self.jitter_dist.map(Change::JitterDist));
        c.extend(self.reorder.map(Change::Reorder));
        c.extend(self.loss.map(|l| Change::Loss(Some(l))));
        c.extend(self.queue_bytes.map(|l| Change::QueueBytes(l.0)));
        c.extend(self.queue_packets.map(|l| Change::QueuePackets(l.0)));
        Ok(c)
    }

    /// Applies this patch on top of `params`.
    pub fn apply_to(&self, params: &mut DirectionParams, base: &Path) -> Result<(), ConfigError> {
        let mut live = self.clone();
        if let Some(o) = live.outages.take() {
            params.outages = OutageSchedule::new(o)?;
        }
        for change in live.to_changes(base)? {
            match change {
                Change::Rate(r) => params.rate = r,
                Change::Delay(d) => params.delay.delay = d,
                Change::Jitter(j) => params.delay.jitter = j,
                Change::JitterDist(d) => params.delay.dist = d,
                Change::Reorder(r) => params.delay.reorder = r,
                Change::Loss(l) => params.loss = l,
                Change::QueueBytes(b) => params.queue.bytes = b,
                Change::QueuePackets(p) => params.queue.packets = p,
                Change::Down(_) => unreachable!("patches never take a link down"),
            }
        }
        Ok(())
    }
}

/// The whole config file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Settings for both directions.
    #[serde(default)]
    pub both: DirectionPatch,
    /// Overrides for A → B.
    #[serde(default)]
    pub a2b: DirectionPatch,
    /// Overrides for B → A.
    #[serde(default)]
    pub b2a: DirectionPatch,
}

/// Both directions' parameters, resolved.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LinkConfig {
    /// A → B.
    pub a2b: DirectionParams,
    /// B → A.
    pub b2a: DirectionParams,
}

impl LinkConfig {
    /// Resolves TOML text; relative trace paths are taken from `base`.
    pub fn from_toml(text: &str, base: &Path) -> Result<LinkConfig, ConfigError> {
        let file: ConfigFile = toml::from_str(text)?;
        let mut cfg = LinkConfig::default();
        for (params, over) in [(&mut cfg.a2b, &file.a2b), (&mut cfg.b2a, &file.b2a)] {
            file.both.apply_to(params, base)?;
            over.apply_to(params, base)?;
        }
        Ok(cfg)
    }

    /// Reads and resolves a config file.
    pub fn load(path: &Path) -> Result<LinkConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        LinkConfig::from_toml(&text, path.parent().unwrap_or(Path::new(".")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::GilbertElliott;

    #[test]
    fn layered_config_resolves() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("t.trace"), "1\n2\n5\n").unwrap();
        let cfg = LinkConfig::from_toml(
            r#"
            [both]
            delay = "20ms"
            rate = "20mbit"
            loss = 0.01
            queue_bytes = 150000
            outages = [{ start = "10s", end = "12s" }]
            [a2b]
            rate = "trace:t.trace"
            loss = { p = 0.01, r = 0.3 }
            queue_packets = "unlimited"
            [b2a]
            delay = "30ms"
            jitter = "1ms"
            jitter_dist = "normal"
            queue_bytes = "unlimited"
            "#,
            dir.path(),
        )
        .unwrap();
        assert!(matches!(cfg.a2b.rate, RateModel::Trace(ref t) if t.millis() == [1, 2, 5]));
        assert_eq!(cfg.a2b.delay.delay, Duration::from_millis(20));
        assert_eq!(
            cfg.a2b.loss,
            Some(LossSpec::GilbertElliott(GilbertElliott {
                p: 0.01,
                r: 0.3,
                loss_bad: 1.0,
                loss_good: 0.0
            }))
        );
        assert_eq!(cfg.a2b.queue.bytes, Some(150_000));
        assert_eq!(cfg.a2b.queue.packets, None);
        assert_eq!(cfg.b2a.rate, RateModel::Constant("20mbit".parse().unwrap()));
        assert_eq!(cfg.b2a.delay.delay, Duration::from_millis(30));
        assert_eq!(cfg.b2a.delay.dist, JitterDist::Normal);
        assert_eq!(cfg.b2a.queue.bytes, None);
        assert_eq!(cfg.b2a.queue.packets, Some(1000));
        assert_eq!(cfg.b2a.outages.windows().len(), 1);
    }

    #[test]
    fn rejects_mistakes() {
        let base = Path::new(".");
        for bad in [
            "[both]\nrat = \"1mbit\"",
            "[both]\nrate = \"1mbps\"",
            "[both]\ndelay = \"soon\"",
            "[both]\nloss = 1.5",
            "[both]\nqueue_bytes = 0",
            "[both]\noutages = [{ start = \"2s\", end = \"1s\" }]",
            "[up]\ndelay = \"1ms\"",
            "[both]\nrate = \"trace:/nonexistent/file\"",
        ] {
            assert!(LinkConfig::from_toml(bad, base).is_err(), "{bad}");
        }
        assert_eq!(
            LinkConfig::from_toml("", base).unwrap(),
            LinkConfig::default()
        );
    }

    #[test]
    fn set_grammar_matches_toml() {
        let mut p = DirectionPatch::default();
        for kv in [
            "rate=5mbit",
            "delay=15ms",
            "jitter=0",
            "reorder=true",
            "loss=ge:0.1,0.5,1,0",
            "queue_packets=50",
        ] {
            p.set(kv).unwrap();
        }
        let changes = p.to_changes(Path::new(".")).unwrap();
        assert_eq!(changes.len(), 6);
        assert!(changes.contains(&Change::QueuePackets(Some(50))));
        for bad in [
            "rate",
            "speed=1mbit",
            "reorder=maybe",
            "outages=1s",
            "queue_bytes=-3",
        ] {
            assert!(DirectionPatch::default().set(bad).is_err(), "{bad}");
        }
    }
}
