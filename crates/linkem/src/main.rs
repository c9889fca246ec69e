//! The `linkem` command: run the emulator, generate traces, or send control commands.
//!
//! ```text
//! linkem --iface-a X --iface-b Y [--config link.toml] [--control SOCK] [--seed N] [--stats-json FILE]
//! linkem trace-gen --kind dsl|wifi|lte --mean-mbit 20 --seconds 60 [--seed 1] > file
//! linkem ctl --control SOCK <command…>
//! ```
//! Running prints `ready` on stdout once both interfaces are bound (scripts wait for it),
//! stops on SIGINT/SIGTERM, and then writes the final counters to `--stats-json`.

use clap::{Args, Parser, Subcommand};
use linkem::bridge::Link;
use linkem::config::LinkConfig;
use linkem::server::{send_command, ControlServer};
use linkem::tracegen::{generate, TraceKind};
use signal_hook::consts::{SIGINT, SIGTERM};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc;

#[derive(Parser)]
#[command(
    name = "linkem",
    version,
    about = "Userspace link emulator between two interfaces"
)]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Args)]
struct RunArgs {
    /// First interface; frames entering here form direction a2b.
    #[arg(long)]
    iface_a: Option<String>,
    /// Second interface; frames entering here form direction b2a.
    #[arg(long)]
    iface_b: Option<String>,
    /// Link configuration (TOML). Without it the link is unimpaired.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Unix socket for live control commands.
    #[arg(long)]
    control: Option<PathBuf>,
    /// Seed of the loss and jitter randomness.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write final counters here (JSON) on exit.
    #[arg(long)]
    stats_json: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print a synthetic Mahimahi trace.
    TraceGen {
        /// dsl (constant), wifi (fades) or lte (variation and short outages).
        #[arg(long)]
        kind: String,
        /// Mean rate in Mbit/s.
        #[arg(long)]
        mean_mbit: f64,
        /// Length (the trace loops on it).
        #[arg(long, default_value_t = 60)]
        seconds: u32,
        /// Seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Send one command to a running linkem and print the reply.
    Ctl {
        /// The control socket.
        #[arg(long)]
        control: PathBuf,
        /// The command, e.g. `set a2b rate=10mbit`, `down`, `stats`.
        #[arg(required = true, trailing_var_arg = true)]
        words: Vec<String>,
    },
}

enum Event {
    Signal,
    Failed(String),
}

fn run(args: RunArgs) -> Result<(), String> {
    let (Some(a), Some(b)) = (args.iface_a, args.iface_b) else {
        return Err(
            "--iface-a and --iface-b are required (or use a subcommand; see --help)".into(),
        );
    };
    let cfg = match &args.config {
        Some(p) => LinkConfig::load(p).map_err(|e| e.to_string())?,
        None => LinkConfig::default(),
    };
    let link = Link::new(cfg, args.seed).map_err(|e| e.to_string())?;
    let (tx, rx) = mpsc::channel();
    let mut signals =
        signal_hook::iterator::Signals::new([SIGINT, SIGTERM]).map_err(|e| e.to_string())?;
    let sig_tx = tx.clone();
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            let _ = sig_tx.send(Event::Signal);
        }
    });
    let handles = link.start(&a, &b).map_err(|e| e.to_string())?;
    let _server = match &args.control {
        Some(p) => Some(
            ControlServer::start(p, link.clone()).map_err(|e| format!("control socket: {e}"))?,
        ),
        None => None,
    };
    // Watchers turn a forwarding thread's exit into an event for the main thread.
    for h in handles {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let why = match h.join() {
                Ok(Ok(())) => return,
                Ok(Err(e)) => e.to_string(),
                Err(_) => "forwarding thread panicked".into(),
            };
            let _ = tx.send(Event::Failed(why));
        });
    }
    println!("ready");
    let _ = std::io::stdout().flush();
    let outcome = match rx.recv() {
        Ok(Event::Failed(why)) => Err(why),
        _ => Ok(()),
    };
    link.stop();
    if let Some(path) = &args.stats_json {
        let json = serde_json::to_string_pretty(&link.stats()).map_err(|e| e.to_string())?;
        std::fs::write(path, json + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    }
    outcome
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        None => run(cli.run),
        Some(Cmd::TraceGen {
            kind,
            mean_mbit,
            seconds,
            seed,
        }) => kind
            .parse::<TraceKind>()
            .and_then(|k| generate(k, mean_mbit, seconds, seed))
            .map_err(|e| e.to_string())
            .and_then(|t| {
                std::io::stdout()
                    .write_all(t.to_text().as_bytes())
                    .map_err(|e| e.to_string())
            }),
        Some(Cmd::Ctl { control, words }) => send_command(&control, &words.join(" "))
            .map_err(|e| format!("{}: {e}", control.display()))
            .and_then(|reply| {
                println!("{reply}");
                if reply.starts_with("error:") {
                    Err("command refused".into())
                } else {
                    Ok(())
                }
            }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("linkem: {e}");
            ExitCode::FAILURE
        }
    }
}
