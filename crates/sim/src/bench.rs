//! Speed benchmark: how fast the simulator runs the real core.
//!
//! `sessions` client sessions, each with `links` links of `link_mbit` (10/20/30… ms
//! one-way) and one downstream constant-rate UDP flow of `session_mbit` striped by the
//! `aggregate` policy, for `seconds` of simulated time. Sessions are grouped
//! `clients_per_server` to a world (1 = independent client–server pairs, the default;
//! more = one Server holding many peers, which exercises the server's per-peer loops);
//! worlds run in parallel on all cores. Every datagram is sealed and opened with the real
//! data cipher the daemon would negotiate on this machine (AES-256-GCM where the CPU has AES
//! instructions, else ChaCha20-Poly1305). The result records wall time, simulated packets
//! per wall second and the real-time factor, with the git revision; and, because the
//! machine is shared, the CPU time the run took and the load average around it (Linux's
//! /proc), whence the real-time factor the same run would have on idle cores.
//!
//! Invariant: benchmark figures are never mixed into run reports (they depend on the
//! machine); the simulated results of each world stay deterministic.

use crate::runner::git_revision;
use crate::scenario::Scenario;
use crate::world::{RunReport, World, WorldError};
use rayon::prelude::*;
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

/// Benchmark parameters.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct BenchParams {
    /// Client sessions in all.
    pub sessions: u32,
    /// Links per session.
    pub links: u32,
    /// Simulated seconds.
    pub seconds: u32,
    /// Rate of each link, Mbit/s.
    pub link_mbit: f64,
    /// Offered downstream load per session, Mbit/s.
    pub session_mbit: f64,
    /// Sessions per server (per world).
    pub clients_per_server: u32,
    /// Seed.
    pub seed: u64,
}

/// Benchmark outcome.
#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    /// What was run.
    pub params: BenchParams,
    /// Git revision of the tree.
    pub git_revision: String,
    /// Worker threads.
    pub threads: usize,
    /// Wall time, s.
    pub wall_s: f64,
    /// Simulated session-seconds per wall second ÷ sessions: > 1 is faster than real time.
    pub realtime_factor: f64,
    /// Tunnel datagrams sent by the endpoints.
    pub datagrams: u64,
    /// Packets offered to hops.
    pub hop_packets: u64,
    /// Inner IP packets.
    pub inner_packets: u64,
    /// Events processed.
    pub events: u64,
    /// Datagrams per wall second.
    pub datagrams_per_s: f64,
    /// Hop packets per wall second.
    pub hop_packets_per_s: f64,
    /// Mean delivered goodput per session, Mbit/s (sanity: near `session_mbit`).
    pub mean_session_goodput_mbit: f64,
    /// CPU time of all threads, s (`None` off Linux).
    pub cpu_s: Option<f64>,
    /// Real-time factor on `threads` otherwise idle cores: seconds × threads / `cpu_s`.
    pub realtime_factor_idle: Option<f64>,
    /// Tunnel datagrams per CPU second.
    pub datagrams_per_cpu_s: Option<f64>,
    /// 1-minute load average before and after the run.
    pub loadavg: Option<(f64, f64)>,
}

/// CPU time of this process's threads so far, s: the sum of their scheduler run times
/// (/proc/self/task/*/schedstat, ns; no clock-tick assumption).
fn cpu_time() -> Option<f64> {
    let mut ns = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        ns += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(ns as f64 * 1e-9)
}

fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn scenario(p: &BenchParams, clients: u32) -> Result<Scenario, WorldError> {
    let links: String = (0..p.links)
        .map(|l| {
            format!(
                "[[links]]\nhops = [{{ both = {{ rate = \"{}kbit\", delay = \"{}ms\", queue_bytes = 150000 }} }}]\n",
                (p.link_mbit * 1000.0).round() as u64,
                10 * (l + 1)
            )
        })
        .collect();
    let text = format!(
        "name = \"bench\"\nduration = \"{}s\"\nclients = {clients}\n{links}\
         [[flows]]\nkind = \"cbr\"\ndirection = \"down\"\nrate = \"{}kbit\"\npacket_bytes = 1374\n",
        p.seconds,
        (p.session_mbit * 1000.0).round() as u64
    );
    let table: toml::Table =
        toml::from_str(&text).map_err(|e| WorldError::Build(format!("bench scenario: {e}")))?;
    Ok(Scenario::from_table(table)?)
}

/// Runs the benchmark.
pub fn run(p: BenchParams) -> Result<BenchResult, WorldError> {
    let per = p.clients_per_server.max(1);
    let worlds: Vec<u32> = (0..p.sessions.div_ceil(per))
        .map(|w| per.min(p.sessions - w * per))
        .collect();
    // Start the worker pool first, so its threads are counted from before the run.
    rayon::broadcast(|_| ());
    let (cpu0, load0) = (cpu_time(), loadavg());
    let started = Instant::now();
    let reports: Vec<RunReport> = worlds
        .par_iter()
        .enumerate()
        .map(|(i, &clients)| {
            let scn = scenario(&p, clients)?;
            let mut w = World::new(&scn, p.seed + i as u64, Path::new("."))?;
            w.run()?;
            Ok(w.report("bench", serde_json::Map::new(), p.seed + i as u64))
        })
        .collect::<Result<_, WorldError>>()?;
    let wall_s = started.elapsed().as_secs_f64();
    let cpu_s = cpu_time().zip(cpu0).map(|(b, a)| b - a);
    let threads = rayon::current_num_threads();
    let sum = |f: fn(&RunReport) -> u64| reports.iter().map(f).sum::<u64>();
    let datagrams = sum(|r| r.sim.datagrams);
    let hop_packets = sum(|r| r.sim.hop_packets);
    let goodput: f64 = reports.iter().map(|r| r.summary.goodput_mbit).sum();
    Ok(BenchResult {
        params: p,
        git_revision: git_revision(),
        threads,
        wall_s,
        realtime_factor: f64::from(p.seconds) / wall_s,
        datagrams,
        hop_packets,
        inner_packets: sum(|r| r.sim.inner_packets),
        events: sum(|r| r.sim.events),
        datagrams_per_s: datagrams as f64 / wall_s,
        hop_packets_per_s: hop_packets as f64 / wall_s,
        mean_session_goodput_mbit: goodput / f64::from(p.sessions.max(1)),
        cpu_s,
        realtime_factor_idle: cpu_s.map(|c| f64::from(p.seconds) * threads as f64 / c),
        datagrams_per_cpu_s: cpu_s.map(|c| datagrams as f64 / c),
        loadavg: load0.zip(loadavg()),
    })
}
