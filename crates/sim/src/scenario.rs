//! Scenarios as data: the TOML schema of one simulated run, and its validation.
//!
//! A scenario names the links of each client (each a chain of hops, every hop one linkem
//! direction pair so the simulator and the lab emulate links with the same model), the
//! tunnel's configuration (or no tunnel at all, for baselines), the traffic, and the run
//! length and seeds. Sweeps (`[[sweep]]` axes) are expanded by `sweep.rs` before this
//! schema sees the table, so a `Scenario` is always one concrete run.
//!
//! Invariants: unknown keys are errors; every link has at least one hop; every flow's
//! parameters are checked here, so the world never meets an impossible configuration.

use linkem::config::DirectionPatch;
use linkem::units::{serde_duration, Bandwidth};
use linkem::DirectionParams;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Errors from reading or checking a scenario.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The TOML is malformed, has unknown keys or values of the wrong type.
    #[error("scenario: {0}")]
    Toml(#[from] toml::de::Error),
    /// A hop's link parameters are invalid (bad trace file, outage window, …).
    #[error("link {link} hop {hop}: {source}")]
    Link {
        /// Link index.
        link: usize,
        /// Hop index (after `count` expansion).
        hop: usize,
        /// linkem's complaint.
        source: linkem::config::ConfigError,
    },
    /// A value is out of range or inconsistent; the text says which and why.
    #[error("scenario: {0}")]
    Invalid(String),
}

fn default_seeds() -> Vec<u64> {
    vec![1]
}
fn one() -> u32 {
    1
}
fn yes() -> bool {
    true
}
fn default_detect() -> Duration {
    Duration::from_secs(1)
}
fn default_failback() -> Duration {
    Duration::from_secs(3)
}
fn default_start() -> Duration {
    Duration::from_millis(500)
}
fn default_mtu() -> usize {
    DEFAULT_TUN_MTU
}

/// The daemon's default TUN MTU (docs/PROTOCOL.md §11: 1500 − 48 − 52).
pub const DEFAULT_TUN_MTU: usize = 1400;
/// Largest TUN MTU whose datagrams fit the simulated links' 1500-byte IPv4 MTU.
pub const MAX_TUN_MTU: usize = 1500 - 28 - multihome_proto::wire::OVERHEAD_BYTES;

/// One concrete run.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Name (results go to `sim/results/<name>/`).
    pub name: String,
    /// What the scenario studies.
    #[serde(default)]
    pub description: String,
    /// Simulated time.
    #[serde(deserialize_with = "serde_duration::required")]
    pub duration: Duration,
    /// Seeds; each is one run per sweep point.
    #[serde(default = "default_seeds")]
    pub seeds: Vec<u64>,
    /// Number of clients (each gets every link and every flow), served by one server.
    #[serde(default = "one")]
    pub clients: u32,
    /// The tunnel.
    #[serde(default)]
    pub tunnel: TunnelSpec,
    /// Links of each client, in path-id order.
    pub links: Vec<LinkSpec>,
    /// Traffic.
    #[serde(default)]
    pub flows: Vec<FlowSpec>,
    /// Optional measurements.
    #[serde(default)]
    pub metrics: MetricsSpec,
    /// A drive past Wi-Fi access points applied to one link (`drive.rs`): outages, carrier
    /// events and a new client address at each association.
    pub drive: Option<crate::drive::DriveSpec>,
}

/// Which aggregate scheduler the core runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SchedulerSpec {
    /// Earliest expected arrival (the core's default).
    #[default]
    Earliest,
    /// Weighted round-robin by bandwidth (the baseline).
    Weighted,
}

/// In which order the receiver releases striped packets (`SessionConfig::flow_order`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ReorderSpec {
    /// Each flow in its own order (the core's default).
    #[default]
    Flow,
    /// Every striped packet after all earlier ones (the baseline).
    Session,
}

/// A flow policy as written: `aggregate`, `best`, `redundant`, `realtime`, or a link
/// policy `only:N`, `prefer:N`, `backup:N` naming link N (its index in `links`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(try_from = "String")]
pub enum PolicySpec {
    /// Striped over all paths.
    #[default]
    Aggregate,
    /// One path, the best.
    Best,
    /// Copies on every path.
    Redundant,
    /// Deadline-driven with FEC (`deadline`, default 150 ms).
    Realtime,
    /// `only:`, `prefer:` or `backup:` link N.
    Link(LinkRuleSpec, u8),
}

/// The kind of a link policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkRuleSpec {
    /// `only:N`.
    Only,
    /// `prefer:N`.
    Prefer,
    /// `backup:N`.
    Backup,
}

impl TryFrom<String> for PolicySpec {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        let link = |kind, n: &str| {
            n.parse::<u8>()
                .map(|n| PolicySpec::Link(kind, n))
                .map_err(|_| format!("policy {s:?}: the link must be a link index (0, 1, ...)"))
        };
        match s.split_once(':') {
            None => match s.as_str() {
                "aggregate" => Ok(PolicySpec::Aggregate),
                "best" => Ok(PolicySpec::Best),
                "redundant" => Ok(PolicySpec::Redundant),
                "realtime" => Ok(PolicySpec::Realtime),
                _ => Err(format!(
                    "unknown policy {s:?}: aggregate, best, redundant, realtime, only:N, \
                     prefer:N or backup:N"
                )),
            },
            Some(("only", n)) => link(LinkRuleSpec::Only, n),
            Some(("prefer", n)) => link(LinkRuleSpec::Prefer, n),
            Some(("backup", n)) => link(LinkRuleSpec::Backup, n),
            Some(_) => Err(format!(
                "unknown link policy {s:?}: only:N, prefer:N or backup:N"
            )),
        }
    }
}

impl PolicySpec {
    /// The core's policy; `deadline` is realtime's (default `DEFAULT_DEADLINE`).
    pub fn to_proto(self, deadline: Option<Duration>) -> multihome_proto::policy::Policy {
        use multihome_proto::path::PathId;
        use multihome_proto::policy::{LinkRule, Policy, DEFAULT_DEADLINE};
        match self {
            PolicySpec::Aggregate => Policy::Aggregate,
            PolicySpec::Best => Policy::Best,
            PolicySpec::Redundant => Policy::Redundant { copies: None },
            PolicySpec::Realtime => Policy::realtime(deadline.unwrap_or(DEFAULT_DEADLINE)),
            PolicySpec::Link(kind, n) => Policy::Link(match kind {
                LinkRuleSpec::Only => LinkRule::Only(PathId(n)),
                LinkRuleSpec::Prefer => LinkRule::Prefer(PathId(n)),
                LinkRuleSpec::Backup => LinkRule::Backup(PathId(n)),
            }),
        }
    }
}

/// The tunnel's configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TunnelSpec {
    /// `false`: flows use link 0 directly, without the tunnel (baseline).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Aggregate scheduler.
    #[serde(default)]
    pub scheduler: SchedulerSpec,
    /// Release order of striped packets at the receiver.
    #[serde(default)]
    pub reorder: ReorderSpec,
    /// Default policy (flows may override theirs).
    #[serde(default)]
    pub policy: PolicySpec,
    /// Dead-path detection time.
    #[serde(
        default = "default_detect",
        deserialize_with = "serde_duration::required"
    )]
    pub detect: Duration,
    /// `best` failback hold.
    #[serde(
        default = "default_failback",
        deserialize_with = "serde_duration::required"
    )]
    pub failback_hold: Duration,
    /// TUN MTU: the largest inner packet (the lab runs 1420 on its IPv4 links).
    #[serde(default = "default_mtu")]
    pub mtu: usize,
}

impl Default for TunnelSpec {
    fn default() -> Self {
        TunnelSpec {
            enabled: true,
            scheduler: SchedulerSpec::Earliest,
            reorder: ReorderSpec::Flow,
            policy: PolicySpec::Aggregate,
            detect: default_detect(),
            failback_hold: default_failback(),
            mtu: DEFAULT_TUN_MTU,
        }
    }
}

impl TunnelSpec {
    /// Largest inner IP packet the flows may send: the TUN MTU, or a bare 1500-byte link.
    pub fn inner_mtu(&self) -> usize {
        if self.enabled {
            self.mtu
        } else {
            1500
        }
    }
}

/// One link: a chain of hops from the client to the server.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// Name for reports.
    #[serde(default)]
    pub name: String,
    /// Hops, client side first.
    pub hops: Vec<HopSpec>,
}

/// One hop (or `count` identical hops): linkem parameters, `up` = client → server.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HopSpec {
    /// How many identical hops this entry stands for.
    #[serde(default = "one")]
    pub count: u32,
    /// Both directions.
    #[serde(default)]
    pub both: DirectionPatch,
    /// Client → server overrides.
    #[serde(default)]
    pub up: DirectionPatch,
    /// Server → client overrides.
    #[serde(default)]
    pub down: DirectionPatch,
}

/// Congestion control of a TCP-like flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum CcSpec {
    /// NewReno (RFC 5681/6582): the baseline of Magalhães, "A Transport Layer Approach to
    /// Host Mobility".
    #[default]
    Newreno,
    /// CUBIC (RFC 9438), Linux's default: for comparisons with the lab.
    Cubic,
}

/// Direction of a flow's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Client → origin (upload).
    Up,
    /// Origin → client (download).
    #[default]
    Down,
}

/// What a flow is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum FlowKind {
    /// One TCP-like transfer (`bytes`, or until the end).
    #[default]
    Bulk,
    /// Sequential TCP-like object fetches with think time.
    Web,
    /// Constant-rate UDP (VoIP-like).
    Cbr,
    /// Constant-rate UDP without inner transport, meant to keep the tunnel backlogged
    /// (offered above capacity): the source that always has chunks of Mukherjee,
    /// "Network-Assisted Multihoming".
    Saturate,
}

/// Object size distribution of web flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SizeDist {
    /// Every object has the mean size.
    #[default]
    Fixed,
    /// Exponential.
    Exp,
    /// Pareto with shape `pareto_shape`.
    Pareto,
}

/// One flow (every client runs each flow once).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowSpec {
    /// Name for reports (default: kind and index).
    #[serde(default)]
    pub name: String,
    /// What it is.
    pub kind: FlowKind,
    /// Where its data goes.
    pub direction: Direction,
    /// Start time.
    #[serde(
        default = "default_start",
        deserialize_with = "serde_duration::required"
    )]
    pub start: Duration,
    /// Bulk: bytes to transfer (`None`: until the end of the run).
    pub bytes: Option<u64>,
    /// Bulk: with `bytes`, the size is uniform in [bytes, bytes_max] (drawn per run).
    pub bytes_max: Option<u64>,
    /// Start uniform in [start, start_max] (drawn per run).
    #[serde(default, deserialize_with = "serde_duration::option")]
    pub start_max: Option<Duration>,
    /// Bulk without the tunnel, under a `[drive]`: when the client's address changes the
    /// connection is dead; `true` reconnects (handshake, then a request for the rest, as an
    /// HTTP Range request) — the resuming application of Mukherjee §4.2.1 — `false` stops.
    #[serde(default)]
    pub resume: bool,
    /// CBR / saturate: rate, e.g. `"64kbit"`.
    pub rate: Option<String>,
    /// CBR / saturate: IP packet size.
    pub packet_bytes: Option<usize>,
    /// Policy of this flow (default: the tunnel's).
    pub policy: Option<PolicySpec>,
    /// CBR: how long after sending a packet is of use: the `realtime` policy's deadline,
    /// and under any policy the bound past which a received packet counts `late`.
    #[serde(default, deserialize_with = "serde_duration::option")]
    pub deadline: Option<Duration>,
    /// TCP maximum segment size (default: what fits the tunnel MTU with 52 bytes of
    /// IPv4 + TCP headers, timestamps included; 1448 direct).
    pub mss: Option<u32>,
    /// Bulk and web: congestion control.
    #[serde(default)]
    pub cc: CcSpec,
    /// Web: number of objects.
    pub objects: Option<u32>,
    /// Web: mean object size.
    pub object_bytes: Option<u64>,
    /// Web: size distribution.
    #[serde(default)]
    pub size_dist: SizeDist,
    /// Web: Pareto shape (> 1).
    pub pareto_shape: Option<f64>,
    /// Web: mean think time between objects (exponential).
    #[serde(default, deserialize_with = "serde_duration::option")]
    pub think: Option<Duration>,
}

/// Optional measurements (each costs memory or time).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsSpec {
    /// Record the arrival order of striped packets at each receiver (reorder density and
    /// buffer occupancy as in Mukherjee, "Network-Assisted Multihoming", §4.3). Only
    /// meaningful for single-copy policies.
    #[serde(default)]
    pub reorder_trace: bool,
}

/// The linkem parameters of every hop of a link, `count` expanded: (up, down) per hop,
/// client side first.
pub fn hop_params(
    link_idx: usize,
    link: &LinkSpec,
    base: &Path,
) -> Result<Vec<(DirectionParams, DirectionParams)>, ScenarioError> {
    let mut out = Vec::new();
    for spec in &link.hops {
        for _ in 0..spec.count {
            let hop = out.len();
            let err = |source| ScenarioError::Link {
                link: link_idx,
                hop,
                source,
            };
            let mut up = DirectionParams::default();
            let mut down = DirectionParams::default();
            spec.both.apply_to(&mut up, base).map_err(err)?;
            spec.both.apply_to(&mut down, base).map_err(err)?;
            spec.up.apply_to(&mut up, base).map_err(err)?;
            spec.down.apply_to(&mut down, base).map_err(err)?;
            out.push((up, down));
        }
    }
    Ok(out)
}

/// Parses a rate string such as `"10mbit"`.
pub fn parse_rate(s: &str) -> Result<Bandwidth, ScenarioError> {
    s.parse()
        .map_err(|e| ScenarioError::Invalid(format!("rate {s:?}: {e}")))
}

impl Scenario {
    /// Parses and checks one concrete scenario from a TOML table.
    pub fn from_table(table: toml::Table) -> Result<Scenario, ScenarioError> {
        let s: Scenario = toml::Value::Table(table).try_into()?;
        s.validate()?;
        Ok(s)
    }

    fn validate(&self) -> Result<(), ScenarioError> {
        let bad = |m: String| Err(ScenarioError::Invalid(m));
        if self.links.is_empty() || self.links.len() > multihome_proto::sched::MAX_PATHS {
            return bad(format!(
                "{} links; need 1..={}",
                self.links.len(),
                multihome_proto::sched::MAX_PATHS
            ));
        }
        if let Some(i) = self.links.iter().position(|l| l.hops.is_empty()) {
            return bad(format!("link {i} has no hops"));
        }
        if self
            .links
            .iter()
            .flat_map(|l| &l.hops)
            .any(|h| h.count == 0)
        {
            return bad("a hop has count = 0".into());
        }
        if self.clients == 0 || self.clients > 60_000 {
            return bad(format!("clients = {}; need 1..=60000", self.clients));
        }
        if self.seeds.is_empty() {
            return bad("seeds is empty".into());
        }
        if !(576..=MAX_TUN_MTU).contains(&self.tunnel.mtu) {
            return bad(format!(
                "tunnel.mtu = {}; need 576..={MAX_TUN_MTU}",
                self.tunnel.mtu
            ));
        }
        for (i, f) in self.flows.iter().enumerate() {
            self.validate_flow(i, f)?;
        }
        let policies = self.flows.iter().filter_map(|f| f.policy);
        for p in policies.chain([self.tunnel.policy]) {
            if let PolicySpec::Link(_, n) = p {
                if usize::from(n) >= self.links.len() {
                    return bad(format!("policy {p:?} names link {n}: no such link"));
                }
            }
        }
        if let Some(d) = &self.drive {
            d.validate().map_err(ScenarioError::Invalid)?;
            if d.link >= self.links.len() || (!self.tunnel.enabled && d.link != 0) {
                return bad(format!(
                    "drive.link = {}: no such link (without the tunnel only link 0 is used)",
                    d.link
                ));
            }
        }
        Ok(())
    }

    fn validate_flow(&self, i: usize, f: &FlowSpec) -> Result<(), ScenarioError> {
        let bad = |m: &str| Err(ScenarioError::Invalid(format!("flow {i}: {m}")));
        match f.kind {
            FlowKind::Cbr | FlowKind::Saturate => {
                let Some(rate) = &f.rate else {
                    return bad("needs rate");
                };
                parse_rate(rate)?;
                let size = f.packet_bytes.unwrap_or(200);
                // 28 bytes of headers + 16 of sequence number and send time.
                if !(44..=self.tunnel.inner_mtu()).contains(&size) {
                    return bad("packet_bytes must be 44..=MTU (the tunnel's, or 1500 direct)");
                }
            }
            FlowKind::Web => {
                if f.objects.unwrap_or(0) == 0 || f.objects.unwrap_or(0) > 10_000 {
                    return bad("web needs objects in 1..=10000");
                }
                if f.object_bytes.unwrap_or(0) == 0 {
                    return bad("web needs object_bytes > 0");
                }
                if f.pareto_shape.is_some_and(|a| a <= 1.0) {
                    return bad("pareto_shape must be > 1 (finite mean)");
                }
            }
            FlowKind::Bulk => {
                if f.bytes == Some(0) {
                    return bad("bytes must be > 0");
                }
                if f.bytes_max.is_some_and(|m| f.bytes.is_none_or(|b| m < b)) {
                    return bad("bytes_max needs bytes <= bytes_max");
                }
            }
        }
        if f.start_max.is_some_and(|m| m < f.start) {
            return bad("start_max must be >= start");
        }
        if f.resume && f.kind != FlowKind::Bulk {
            return bad("resume applies to bulk flows");
        }
        let max_mss = self.tunnel.inner_mtu() - crate::packet::TCP_HEADERS;
        if f.mss.is_some_and(|m| !(100..=max_mss as u32).contains(&m)) {
            return bad("mss must be 100..=MTU - 52 (the tunnel's MTU, or 1500 direct)");
        }
        Ok(())
    }
}

/// Reads a scenario file into a TOML table (sweeps not expanded yet).
pub fn read_table(path: &Path) -> Result<toml::Table, ScenarioError> {
    let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
        path: path.to_owned(),
        source,
    })?;
    Ok(toml::from_str(&text)?)
}
