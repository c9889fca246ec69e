//! Sweeps: one scenario file, many runs.
//!
//! A scenario file may carry `[[sweep]]` axes. Each axis has a `name`, a list of `values`
//! and optionally `set = { "dotted.path" = [one value per axis value], … }` naming the
//! scenario keys it changes (without `set`, the axis name itself is the path and the
//! values are assigned to it). Paths walk tables by key and arrays by index
//! (`links.1.hops.0.both.rate`). The runs are the cartesian product of the axes (first
//! axis outermost) times the scenario's seeds, numbered in that order; `--shard i/n`
//! keeps the runs whose number is `i` modulo `n`, so shards on several machines together
//! cover the sweep exactly once.
//!
//! Invariant: a run is fully described by (file, point id, seed): re-running it alone
//! gives the same bytes as inside the sweep.

use crate::scenario::{read_table, Scenario, ScenarioError};
use std::path::Path;
use toml::Value;

/// Errors from expanding a sweep.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// The scenario itself is wrong.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// An axis is malformed (the text says how).
    #[error("sweep: {0}")]
    Axis(String),
    /// `--shard` is not `i/n` with `i < n`.
    #[error("bad shard {0:?}: expected i/n with 0 <= i < n")]
    Shard(String),
}

/// One axis of a sweep.
#[derive(Debug, Clone)]
pub struct Axis {
    /// Name (a column of the results).
    pub name: String,
    /// The axis values, as reported.
    pub values: Vec<Value>,
    /// (path, value per axis value) assignments.
    pub set: Vec<(String, Vec<Value>)>,
}

/// One run of a sweep.
#[derive(Debug, Clone)]
pub struct Run {
    /// Position in the sweep (for sharding and ordering).
    pub index: usize,
    /// (axis name, value) of this point.
    pub point: Vec<(String, Value)>,
    /// File-name-safe id of the point (`base` without axes).
    pub point_id: String,
    /// Seed of this run.
    pub seed: u64,
    /// The concrete scenario.
    pub scenario: Scenario,
}

/// A shard selector `i/n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This shard.
    pub index: usize,
    /// Number of shards.
    pub count: usize,
}

impl std::str::FromStr for Shard {
    type Err = SweepError;
    fn from_str(s: &str) -> Result<Self, SweepError> {
        let bad = || SweepError::Shard(s.to_owned());
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count) = (
            i.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

fn parse_axes(raw: Option<Value>) -> Result<Vec<Axis>, SweepError> {
    let Some(raw) = raw else {
        return Ok(vec![]);
    };
    let bad = |m: String| SweepError::Axis(m);
    let Value::Array(items) = raw else {
        return Err(bad("`sweep` must be an array of tables ([[sweep]])".into()));
    };
    let mut axes = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let Value::Table(mut t) = item else {
            return Err(bad(format!("axis {i} is not a table")));
        };
        let name = match t.remove("name") {
            Some(Value::String(s)) => s,
            _ => return Err(bad(format!("axis {i} needs a string `name`"))),
        };
        let values = match t.remove("values") {
            Some(Value::Array(v)) if !v.is_empty() => v,
            _ => return Err(bad(format!("axis {name} needs a non-empty `values` array"))),
        };
        let set = match t.remove("set") {
            None => vec![(name.clone(), values.clone())],
            Some(Value::Table(s)) => {
                let mut set = Vec::new();
                for (path, v) in s {
                    match v {
                        Value::Array(a) if a.len() == values.len() => set.push((path, a)),
                        _ => {
                            return Err(bad(format!(
                                "axis {name}: set.{path:?} must be an array of {} values",
                                values.len()
                            )))
                        }
                    }
                }
                set
            }
            Some(_) => return Err(bad(format!("axis {name}: `set` must be a table"))),
        };
        if let Some(k) = t.keys().next() {
            return Err(bad(format!("axis {name}: unknown key {k:?}")));
        }
        axes.push(Axis { name, values, set });
    }
    Ok(axes)
}

/// Assigns `value` at the dotted `path` inside `table`.
pub fn set_path(table: &mut toml::Table, path: &str, value: Value) -> Result<(), SweepError> {
    let bad = |m: &str| SweepError::Axis(format!("path {path:?}: {m}"));
    let parts: Vec<&str> = path.split('.').collect();
    let (last, init) = parts.split_last().ok_or_else(|| bad("empty"))?;
    let mut cur: &mut Value = table
        .entry(init.first().copied().unwrap_or(last).to_owned())
        .or_insert_with(|| Value::Table(toml::Table::new()));
    if init.is_empty() {
        *cur = value;
        return Ok(());
    }
    for seg in init.iter().skip(1).chain(std::iter::once(last)) {
        cur = match cur {
            Value::Table(t) => t
                .entry((*seg).to_owned())
                .or_insert_with(|| Value::Table(toml::Table::new())),
            Value::Array(a) => {
                let i: usize = seg.parse().map_err(|_| bad("array index expected"))?;
                let n = a.len();
                a.get_mut(i)
                    .ok_or_else(|| bad(&format!("index {i} out of {n}")))?
            }
            _ => return Err(bad("walks into a value that is neither table nor array")),
        };
    }
    *cur = value;
    Ok(())
}

fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn point_id(point: &[(String, Value)]) -> String {
    if point.is_empty() {
        return "base".into();
    }
    point
        .iter()
        .map(|(k, v)| format!("{k}={}", value_text(v)))
        .collect::<Vec<_>>()
        .join("_")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._=-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Expands a scenario table with its sweep into concrete runs.
pub fn expand(mut table: toml::Table) -> Result<Vec<Run>, SweepError> {
    let axes = parse_axes(table.remove("sweep"))?;
    let sizes: Vec<usize> = axes.iter().map(|a| a.values.len()).collect();
    let total: usize = sizes.iter().product();
    let mut runs = Vec::new();
    for p in 0..total {
        // Mixed-radix digits of p, first axis most significant.
        let mut rem = p;
        let mut digits = vec![0; axes.len()];
        for (d, n) in digits.iter_mut().zip(&sizes).rev() {
            *d = rem % n;
            rem /= n;
        }
        let mut t = table.clone();
        let mut point = Vec::new();
        for (axis, &k) in axes.iter().zip(&digits) {
            for (path, vals) in &axis.set {
                set_path(&mut t, path, vals[k].clone())?;
            }
            point.push((axis.name.clone(), axis.values[k].clone()));
        }
        let scenario = Scenario::from_table(t)?;
        let id = point_id(&point);
        for &seed in &scenario.seeds {
            runs.push(Run {
                index: runs.len(),
                point: point.clone(),
                point_id: id.clone(),
                seed,
                scenario: scenario.clone(),
            });
        }
    }
    Ok(runs)
}

/// Loads a scenario file and expands it.
pub fn load(path: &Path) -> Result<Vec<Run>, SweepError> {
    expand(read_table(path)?)
}

/// The runs of `shard` (all runs without one).
pub fn select(runs: Vec<Run>, shard: Option<Shard>) -> Vec<Run> {
    match shard {
        None => runs,
        Some(s) => runs
            .into_iter()
            .filter(|r| r.index % s.count == s.index)
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
        name = "t"
        duration = "1s"
        seeds = [1, 2]
        [[links]]
        hops = [{ both = { rate = "10mbit", delay = "5ms" } }, { count = 2 }]
        [[sweep]]
        name = "ratio"
        values = [1, 2, 3]
        set = { "links.0.hops.0.both.rate" = ["10mbit", "5mbit", "3mbit"] }
        [[sweep]]
        name = "tunnel.scheduler"
        values = ["earliest", "weighted"]
    "#;

    #[test]
    fn cartesian_product_times_seeds_in_order() {
        let runs = expand(toml::from_str(BASE).unwrap()).unwrap();
        assert_eq!(runs.len(), 3 * 2 * 2);
        assert_eq!(runs[0].point_id, "ratio=1_tunnel.scheduler=earliest");
        assert_eq!(runs[3].point_id, "ratio=1_tunnel.scheduler=weighted");
        assert_eq!(runs[3].seed, 2);
        let r = &runs[11];
        assert_eq!(r.point_id, "ratio=3_tunnel.scheduler=weighted");
        assert_eq!(
            r.scenario.tunnel.scheduler,
            crate::scenario::SchedulerSpec::Weighted
        );
        let rate = r.scenario.links[0].hops[0].both.rate.clone();
        assert_eq!(rate, Some("3mbit".parse().unwrap()));
    }

    #[test]
    fn shards_partition_the_runs() {
        let runs = expand(toml::from_str(BASE).unwrap()).unwrap();
        let mut seen: Vec<usize> = (0..3)
            .flat_map(|i| select(runs.clone(), Some(Shard { index: i, count: 3 })))
            .map(|r| r.index)
            .collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..runs.len()).collect::<Vec<_>>());
        assert!("3/3".parse::<Shard>().is_err());
        assert!("1/4".parse::<Shard>().is_ok());
    }

    #[test]
    fn bad_axes_are_refused() {
        let mut t: toml::Table = toml::from_str(BASE).unwrap();
        set_path(
            &mut t,
            "sweep.0.set",
            toml::from_str::<toml::Table>("a = [1]").unwrap().into(),
        )
        .unwrap();
        assert!(matches!(expand(t), Err(SweepError::Axis(_))));
        let mut t: toml::Table = toml::from_str(BASE).unwrap();
        assert!(set_path(&mut t, "links.7.hops", Value::Integer(1)).is_err());
    }

    #[test]
    fn link_policies_name_a_link_that_exists() {
        let with_policy = |p: &str| {
            let mut t: toml::Table = toml::from_str(BASE).unwrap();
            let tunnel = toml::from_str::<toml::Table>(&format!("policy = {p:?}")).unwrap();
            t.insert("tunnel".into(), tunnel.into());
            expand(t)
        };
        let runs = with_policy("prefer:0").unwrap();
        assert_eq!(
            runs[0].scenario.tunnel.policy,
            crate::scenario::PolicySpec::Link(crate::scenario::LinkRuleSpec::Prefer, 0)
        );
        for bad in ["only:1", "prefer:x", "backup:", "sometimes:0", "fastest"] {
            assert!(with_policy(bad).is_err(), "{bad} accepted");
        }
    }
}
