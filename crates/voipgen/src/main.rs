//! `voipgen`: full-duplex VoIP-like UDP load for the lab's CPU benchmark (the CPU
//! experiment of *On Redundant Multipath Operating System Support for Wireless Mesh
//! Networks*: 160-byte UDP packets, 64 kbit/s per one-way stream, a rising number of
//! full-duplex streams).
//!
//! - `voipgen answer --bind ADDR:PORT`: one socket; every new source address is a stream,
//!   answered by a stream of its own (same size and rate, `--count` packets) sent back to
//!   it — so the far end can sit behind NAT, as a phone behind a router does.
//! - `voipgen call --to ADDR:PORT --streams N`: N sockets, one per stream, each sending
//!   `--count` packets at `--pps`, the streams' packets spread evenly in time, and
//!   counting the answers.
//!
//! Each side prints one line `RESULT {json}`: packets sent, distinct packets received,
//! duplicates, one-way latency percentiles (CLOCK_MONOTONIC, shared by all network
//! namespaces of a host), and how far its own sending fell behind the schedule (`lag_ms`)
//! — the generator must reach the rate it is asked for, or say it did not.
//!
//! Invariants: one thread, nonblocking sockets and one epoll set; nothing allocates per
//! packet; sends follow an absolute schedule, so a late wake-up sends what is due at once
//! instead of drifting.

mod answer;
mod call;
mod sys;
mod tally;

use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::process::ExitCode;

#[derive(Parser)]
#[command(about = "full-duplex VoIP-like UDP load with per-stream loss accounting")]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

/// What both ends share.
#[derive(clap::Args, Clone, Copy)]
pub struct Stream {
    /// Packets per stream.
    #[arg(long, default_value_t = 500)]
    pub count: u32,
    /// Packets per second of each one-way stream (64 kbit/s of 160-byte payloads: 50).
    #[arg(long, default_value_t = 50.0)]
    pub pps: f64,
    /// UDP payload bytes (at least 20: magic, stream, sequence number, send time).
    #[arg(long, default_value_t = 160)]
    pub size: usize,
}

#[derive(Subcommand)]
enum Mode {
    /// Answer every calling stream with a stream of its own.
    Answer {
        #[arg(long)]
        bind: SocketAddr,
        #[command(flatten)]
        stream: Stream,
        /// Stop this long after the last packet received once every stream is answered.
        #[arg(long, default_value_t = 2.0)]
        idle: f64,
        /// Stop at the latest after this many seconds.
        #[arg(long, default_value_t = 600.0)]
        deadline: f64,
    },
    /// Place N streams and count their answers.
    Call {
        #[arg(long)]
        to: SocketAddr,
        #[arg(long)]
        streams: u32,
        #[command(flatten)]
        stream: Stream,
        /// Seconds to keep listening after the last packet sent.
        #[arg(long, default_value_t = 3.0)]
        linger: f64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let res = match cli.mode {
        Mode::Answer {
            bind,
            stream,
            idle,
            deadline,
        } => answer::run(bind, stream, idle, deadline),
        Mode::Call {
            to,
            streams,
            stream,
            linger,
        } => call::run(to, streams, stream, linger),
    };
    match res {
        Ok(v) => {
            println!("RESULT {v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("voipgen: {e}");
            ExitCode::FAILURE
        }
    }
}
