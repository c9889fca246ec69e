//! `multihome-sim`: run scenario sweeps (`run`) or the speed benchmark (`bench`).
//!
//! `run FILE` expands the file's sweep, runs every point × seed on all cores and writes
//! `sim/results/<name>/` (one JSON per run, `summary.csv`, `meta.json`); `--point` and
//! `--seed` narrow it to one run (what a failure message tells you to type); `--shard i/n`
//! runs one n-th of the sweep. `bench` writes `sim/results/bench/<revision>.json`.
//! Exit status: 0 when every run succeeded, 1 when some failed, 2 on a usage error.

use clap::{Parser, Subcommand};
use multihome_sim::{bench, runner, sweep};

/// mimalloc: the simulator allocates and frees a few buffers per simulated packet (the
/// core's queues hold packets as `Arc`s and hands delivered ones over as `Vec`s), and
/// glibc's malloc took ~4.5 % of its CPU. Only this binary's allocator; the daemon and
/// the tests keep the system's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "multihome-sim",
    about = "deterministic simulator of the multihome tunnel"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a scenario file (all its sweep points and seeds).
    Run {
        /// Scenario TOML.
        file: PathBuf,
        /// Results root; the scenario's name is appended.
        #[arg(long, default_value = "sim/results")]
        out: PathBuf,
        /// Only this sweep point id (as printed in failures and file names).
        #[arg(long)]
        point: Option<String>,
        /// Only this seed.
        #[arg(long)]
        seed: Option<u64>,
        /// Run shard i of n (0-based), e.g. 0/4.
        #[arg(long)]
        shard: Option<sweep::Shard>,
        /// Worker threads (default: all cores).
        #[arg(long)]
        jobs: Option<usize>,
    },
    /// Speed benchmark.
    Bench {
        /// Client sessions.
        #[arg(long, default_value_t = 1000)]
        sessions: u32,
        /// Links per session.
        #[arg(long, default_value_t = 3)]
        links: u32,
        /// Simulated seconds.
        #[arg(long, default_value_t = 60)]
        seconds: u32,
        /// Rate of each link, Mbit/s.
        #[arg(long, default_value_t = 10.0)]
        link_mbit: f64,
        /// Offered load per session, Mbit/s.
        #[arg(long, default_value_t = 10.0)]
        session_mbit: f64,
        /// Sessions sharing one server.
        #[arg(long, default_value_t = 1)]
        clients_per_server: u32,
        /// Results directory.
        #[arg(long, default_value = "sim/results/bench")]
        out: PathBuf,
        /// Worker threads (default: all cores).
        #[arg(long)]
        jobs: Option<usize>,
    },
}

fn threads(jobs: Option<usize>) {
    if let Some(n) = jobs {
        // Only fails if a pool already exists, which cannot happen before this point.
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global();
    }
}

/// What `run` is asked for: the scenario file, where results go, and which runs of it.
struct RunArgs {
    file: PathBuf,
    out: PathBuf,
    point: Option<String>,
    seed: Option<u64>,
    shard: Option<sweep::Shard>,
}

fn run(a: RunArgs) -> ExitCode {
    let started = Instant::now();
    let runs = match sweep::load(&a.file) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{}: {e}", a.file.display());
            return ExitCode::from(2);
        }
    };
    let runs: Vec<_> = sweep::select(runs, a.shard)
        .into_iter()
        .filter(|r| a.point.as_ref().is_none_or(|p| *p == r.point_id))
        .filter(|r| a.seed.is_none_or(|s| s == r.seed))
        .collect();
    if runs.is_empty() {
        eprintln!("no run matches");
        return ExitCode::from(2);
    }
    let name = runs[0].scenario.name.clone();
    let base = a
        .file
        .parent()
        .unwrap_or(std::path::Path::new("."))
        .to_owned();
    eprintln!(
        "{name}: {} runs on {} threads",
        runs.len(),
        rayon::current_num_threads()
    );
    let outcomes = runner::run_all(runs, &base);
    let dir = a.out.join(&name);
    match runner::write_results(&dir, &outcomes, a.shard, &a.file, started) {
        Ok(0) => {
            eprintln!(
                "{name}: done in {:.1} s -> {}",
                started.elapsed().as_secs_f64(),
                dir.display()
            );
            ExitCode::SUCCESS
        }
        Ok(n) => {
            eprintln!("{name}: {n} of {} runs failed", outcomes.len());
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    }
}

fn run_bench(p: bench::BenchParams, out: &std::path::Path) -> ExitCode {
    let r = match bench::run(p) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("bench failed (seed {}): {e}", p.seed);
            return ExitCode::from(1);
        }
    };
    let json = serde_json::to_string_pretty(&r).expect("plain data serialises");
    println!("{json}");
    let name = format!(
        "{}_{}x{}x{}s_cps{}.json",
        r.git_revision, p.sessions, p.links, p.seconds, p.clients_per_server
    );
    let path = out.join(name);
    if let Err(e) = std::fs::create_dir_all(out).and_then(|()| std::fs::write(&path, json + "\n")) {
        eprintln!("cannot write {}: {e}", path.display());
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    match Cli::parse().cmd {
        Cmd::Run {
            file,
            out,
            point,
            seed,
            shard,
            jobs,
        } => {
            threads(jobs);
            run(RunArgs {
                file,
                out,
                point,
                seed,
                shard,
            })
        }
        Cmd::Bench {
            sessions,
            links,
            seconds,
            link_mbit,
            session_mbit,
            clients_per_server,
            out,
            jobs,
        } => {
            threads(jobs);
            let p = bench::BenchParams {
                sessions,
                links,
                seconds,
                link_mbit,
                session_mbit,
                clients_per_server,
                seed: 1,
            };
            run_bench(p, &out)
        }
    }
}
