//! Running sweeps: every run of a scenario file on all cores (rayon), one JSON report per
//! run and one CSV row per run, plus a `meta.json` with the git revision.
//!
//! A run that fails — an error or a panic anywhere in the core or the simulator — does not
//! stop the others; it is reported with the exact command that reproduces it (file,
//! point and seed), because the same seed gives the same run, bit for bit.
//!
//! Invariant: the files a run writes depend only on (scenario, point, seed); wall-clock
//! figures go to `meta.json` and the terminal, never into a run's report.

use crate::sweep::{Run, Shard};
use crate::world::{RunReport, World, WorldError};
use rayon::prelude::*;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Errors of writing results.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// A results file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The CSV writer failed.
    #[error("csv: {0}")]
    Csv(#[from] csv::Error),
    /// JSON serialisation failed.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
}

/// One run's outcome.
pub struct Outcome {
    /// The run.
    pub run: Run,
    /// Its report, or why it failed.
    pub result: Result<RunReport, String>,
}

fn point_map(run: &Run) -> serde_json::Map<String, serde_json::Value> {
    run.point
        .iter()
        .map(|(k, v)| {
            let j = serde_json::to_value(v).unwrap_or(serde_json::Value::Null);
            (k.clone(), j)
        })
        .collect()
}

/// Runs one run to completion.
pub fn run_one(run: &Run, base: &Path) -> Result<RunReport, WorldError> {
    let mut w = World::new(&run.scenario, run.seed, base)?;
    w.run()?;
    Ok(w.report(&run.scenario.name, point_map(run), run.seed))
}

/// Runs every run in parallel; failures (errors and panics) are captured per run.
pub fn run_all(runs: Vec<Run>, base: &Path) -> Vec<Outcome> {
    runs.into_par_iter()
        .map(|run| {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_one(&run, base)));
            let result = match r {
                Ok(Ok(rep)) => Ok(rep),
                Ok(Err(e)) => Err(e.to_string()),
                Err(p) => Err(p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "panic".into())),
            };
            Outcome { run, result }
        })
        .collect()
}

/// The short git revision of the tree (with `+dirty` when tracked files changed), or
/// `unknown`.
pub fn git_revision() -> String {
    let out = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    match out(&["rev-parse", "--short", "HEAD"]) {
        Some(rev) => {
            let dirty = out(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{rev}+dirty")
            } else {
                rev
            }
        }
        None => "unknown".into(),
    }
}

const CSV_FIXED: [&str; 20] = [
    "seed",
    "goodput_mbit",
    "jain",
    "completion_s",
    "retransmits",
    "timeouts",
    "cbr_loss",
    "cbr_p50_ms",
    "cbr_p99_ms",
    "web_p50_s",
    "reorder_down_mean_occ",
    "reorder_down_max_occ",
    "reorder_down_mean_occ_bytes",
    "reorder_down_displaced",
    "core_down_mean_occ",
    "core_down_skipped",
    "core_down_late",
    "queue_drops_down",
    "cbr_late",
    "up_bytes_per_delivered",
];

fn opt(x: Option<f64>) -> String {
    x.map_or_else(String::new, |v| format!("{v:.6}"))
}

fn csv_row(point_names: &[String], r: &RunReport) -> Vec<String> {
    let mut row: Vec<String> = point_names
        .iter()
        .map(|n| match r.point.get(n) {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
            None => String::new(),
        })
        .collect();
    let bulk = r.flows.iter().find(|f| f.tcp.is_some());
    let cbr = r
        .flows
        .iter()
        .find(|f| f.latency_ms.is_some() || f.sent.is_some());
    let web = r.flows.iter().find_map(|f| f.object_s);
    let tcp_sum = |g: fn(&crate::tcp::TcpStats) -> u64| {
        r.flows
            .iter()
            .filter_map(|f| f.tcp.as_ref().map(g))
            .sum::<u64>()
    };
    let ro = r.reorder.as_ref().map(|p| &p.down);
    let core = r.tunnel_counters.as_ref();
    row.extend([
        r.seed.to_string(),
        format!("{:.6}", r.summary.goodput_mbit),
        opt(r.summary.jain),
        opt(bulk.and_then(|f| f.completion_s)),
        tcp_sum(|t| t.retransmits).to_string(),
        tcp_sum(|t| t.timeouts).to_string(),
        opt(cbr.and_then(|f| f.loss)),
        opt(cbr.and_then(|f| f.latency_ms.map(|l| l.p50))),
        opt(cbr.and_then(|f| f.latency_ms.map(|l| l.p99))),
        opt(web.map(|w| w.p50)),
        opt(ro.map(|x| x.mean_occupancy)),
        opt(ro.map(|x| x.max_occupancy as f64)),
        opt(ro.map(|x| x.mean_occupancy_bytes)),
        opt(ro.map(|x| x.displaced)),
        opt(core.map(|c| c.reorder[1].mean_occupancy)),
        opt(core.map(|c| c.reorder[1].skipped_gaps as f64)),
        opt(core.map(|c| c.reorder[1].late as f64)),
        opt(core.map(|c| c.queue_drops[1] as f64)),
        cbr.and_then(|f| f.late)
            .map_or_else(String::new, |n| n.to_string()),
        opt(r.summary.up_bytes_per_delivered),
    ]);
    row
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), RunnerError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| RunnerError::Write {
            path: dir.to_owned(),
            source,
        })?;
    }
    std::fs::write(path, bytes).map_err(|source| RunnerError::Write {
        path: path.to_owned(),
        source,
    })
}

/// Where a run's JSON report goes inside `dir`.
pub fn report_path(dir: &Path, run: &Run) -> PathBuf {
    dir.join(format!("{}_s{}.json", run.point_id, run.seed))
}

/// Writes each successful run's JSON, the CSV of all of them (sorted by run index) and
/// `meta.json`; returns the number of failed runs.
pub fn write_results(
    dir: &Path,
    outcomes: &[Outcome],
    shard: Option<Shard>,
    source: &Path,
    started: Instant,
) -> Result<usize, RunnerError> {
    let mut sorted: Vec<&Outcome> = outcomes.iter().collect();
    sorted.sort_by_key(|o| o.run.index);
    let names: Vec<String> = sorted
        .first()
        .map(|o| o.run.point.iter().map(|(k, _)| k.clone()).collect())
        .unwrap_or_default();
    let mut csv = csv::Writer::from_writer(Vec::new());
    let header: Vec<String> = names
        .iter()
        .cloned()
        .chain(CSV_FIXED.iter().map(|s| s.to_string()))
        .collect();
    csv.write_record(&header)?;
    let mut failed = 0;
    for o in &sorted {
        match &o.result {
            Ok(r) => {
                let mut json = serde_json::to_vec_pretty(r)?;
                json.push(b'\n');
                write(&report_path(dir, &o.run), &json)?;
                csv.write_record(csv_row(&names, r))?;
            }
            Err(e) => {
                failed += 1;
                eprintln!(
                    "FAILED {} point {} seed {}: {e}\n  reproduce: multihome-sim run {} --point {} --seed {}",
                    o.run.scenario.name,
                    o.run.point_id,
                    o.run.seed,
                    source.display(),
                    o.run.point_id,
                    o.run.seed
                );
            }
        }
    }
    let csv_name = match shard {
        Some(s) => format!("summary.shard-{}-of-{}.csv", s.index, s.count),
        None => "summary.csv".into(),
    };
    let bytes = csv
        .into_inner()
        .map_err(|e| RunnerError::Csv(e.into_error().into()))?;
    write(&dir.join(csv_name), &bytes)?;
    let meta = serde_json::json!({
        "scenario_file": source.display().to_string(),
        "git_revision": git_revision(),
        "runs": outcomes.len(),
        "failed": failed,
        "shard": shard.map(|s| format!("{}/{}", s.index, s.count)),
        "threads": rayon::current_num_threads(),
        "wall_s": started.elapsed().as_secs_f64(),
    });
    let meta_name = match shard {
        Some(s) => format!("meta.shard-{}-of-{}.json", s.index, s.count),
        None => "meta.json".into(),
    };
    write(&dir.join(meta_name), &serde_json::to_vec_pretty(&meta)?)?;
    Ok(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run that cannot be built is reported as failed (with its seed), and the other
    /// runs of the sweep still produce their results.
    #[test]
    fn failed_runs_are_counted_and_others_written() {
        let text = r#"
            name = "failing"
            duration = "1s"
            seeds = [5]
            [[links]]
            hops = [{ both = { rate = "10mbit", delay = "5ms" } }]
            [[sweep]]
            name = "rate"
            values = ["ok", "missing"]
            set = { "links.0.hops.0.both.rate" = ["10mbit", "trace:does-not-exist.trace"] }
        "#;
        let runs = crate::sweep::expand(toml::from_str(text).unwrap()).unwrap();
        let outcomes = run_all(runs, Path::new("."));
        let bad: Vec<&Outcome> = outcomes.iter().filter(|o| o.result.is_err()).collect();
        assert_eq!(bad.len(), 1);
        assert_eq!(
            (bad[0].run.point_id.as_str(), bad[0].run.seed),
            ("rate=missing", 5)
        );
        let dir = std::env::temp_dir().join(format!("mhsim-runner-test-{}", std::process::id()));
        let failed =
            write_results(&dir, &outcomes, None, Path::new("x.toml"), Instant::now()).unwrap();
        assert_eq!(failed, 1);
        assert!(dir.join("rate=ok_s5.json").exists());
        assert!(!dir.join("rate=missing_s5.json").exists());
        let csv = std::fs::read_to_string(dir.join("summary.csv")).unwrap();
        assert_eq!(csv.lines().count(), 2, "header + the one good run:\n{csv}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
