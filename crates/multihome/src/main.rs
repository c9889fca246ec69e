//! `multihome`: the command-line entry point (keygen, client, server, race, relay,
//! mptcp-detours, status, resolve).

use anyhow::Result;
use clap::{Parser, Subcommand};
use multihome::{daemon, keyfile, status};
use std::path::PathBuf;

/// Use all of a host's internet links at once.
#[derive(Parser)]
#[command(name = "multihome", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Generate a key pair: private key to FILE (mode 0600), public key on stdout.
    Keygen {
        /// Where to write the private key.
        #[arg(long)]
        private_key_file: PathBuf,
    },
    /// Print the public key of an existing private key file.
    Pubkey {
        /// The private key file.
        #[arg(long)]
        private_key_file: PathBuf,
    },
    /// Run the client: a TUN device whose traffic goes over every configured link.
    Client {
        /// Path of client.toml.
        #[arg(long)]
        config: PathBuf,
    },
    /// Run the server: the aggregation point for many clients.
    Server {
        /// Path of server.toml.
        #[arg(long)]
        config: PathBuf,
    },
    /// Run the racing gateway: each new TCP connection from the LAN raced over every uplink.
    Race(multihome_race::daemon::RaceArgs),
    /// Run a relay: extra paths ("detours") for multihome clients' tunnel paths.
    Relay {
        /// Path of relay.toml.
        #[arg(long)]
        config: PathBuf,
    },
    /// Add subflows through relays to this host's kernel MPTCP connections.
    MptcpDetours {
        /// Path of mptcp-detours.toml.
        #[arg(long)]
        config: PathBuf,
    },
    /// Print a record (an identity's, or a server's) as a resolver serves it, verified.
    Resolve {
        /// A public key (base64, as `multihome keygen` prints) or a name (32 hex digits).
        identity: String,
        /// The resolver to ask (a server's `[naming] listen` address).
        #[arg(long)]
        resolver: std::net::SocketAddr,
        /// Look up a server's record instead of a client identity's.
        #[arg(long)]
        server: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Load a resolver with records, updates and lookups; print latencies as JSON
    /// (`python -m lab.bench naming`).
    #[command(hide = true)]
    NamingLoad(NamingLoadArgs),
    /// Show sessions and links of a running client or server.
    Status {
        /// Control socket (default: the client's, else the server's).
        #[arg(long)]
        socket: Option<PathBuf>,
        /// Read a daemon's dashboard instead (`http://HOST:PORT`, its `dashboard` address).
        #[arg(long, conflicts_with = "socket")]
        url: Option<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// `multihome naming-load` (see `multihome_naming::load`).
#[derive(clap::Args)]
struct NamingLoadArgs {
    #[arg(long)]
    resolver: std::net::SocketAddr,
    #[arg(long, default_value_t = 10_000)]
    records: u32,
    #[arg(long, default_value_t = 1_000)]
    rate: u32,
    #[arg(long, default_value_t = 1_000)]
    lookup_rate: u32,
    #[arg(long, default_value_t = 10)]
    seconds: u32,
    #[arg(long, default_value_t = 120_000)]
    lease_ms: u64,
    /// Look names up in this etcd cluster directly (comma-separated client URLs) instead of
    /// through the resolver.
    #[arg(long, value_delimiter = ',')]
    etcd: Vec<String>,
    /// Send lookups to this resolver instead (another server sharing the store).
    #[arg(long)]
    lookup_resolver: Option<std::net::SocketAddr>,
    /// Direct etcd lookups: `linearizable` (quorum-confirmed) or `serializable`.
    #[arg(long, default_value = "linearizable", value_parser = ["linearizable", "serializable"])]
    etcd_read: String,
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Err(e) = run(Cli::parse()) {
        eprintln!("multihome: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::Keygen { private_key_file } => {
            let public = keyfile::generate(&private_key_file)?;
            println!("{}", public.to_base64());
            Ok(())
        }
        Cmd::Pubkey { private_key_file } => {
            println!(
                "{}",
                keyfile::read(&private_key_file)?.public_key().to_base64()
            );
            Ok(())
        }
        Cmd::Client { config } => daemon::client::run(&config),
        Cmd::Server { config } => daemon::server::run(&config),
        Cmd::Race(args) => multihome_race::daemon::run(args),
        Cmd::Relay { config } => multihome_relay::run(&config),
        Cmd::MptcpDetours { config } => daemon::mptcp::run(&config),
        Cmd::Status { socket, url, json } => status::query(socket, url.as_deref(), json),
        Cmd::Resolve {
            identity,
            resolver,
            server,
            json,
        } => multihome::resolve::query(&identity, resolver, server, json),
        Cmd::NamingLoad(a) => {
            let cfg = multihome_naming::load::LoadConfig {
                resolver: a.resolver,
                records: a.records,
                rate: a.rate,
                lookup_rate: a.lookup_rate,
                seconds: a.seconds,
                lease_ms: a.lease_ms,
                timeout: std::time::Duration::from_secs(1),
                etcd: (!a.etcd.is_empty()).then(|| multihome_naming::load::EtcdLookups {
                    endpoints: a.etcd.clone(),
                    serializable: a.etcd_read == "serializable",
                }),
                lookup_resolver: a.lookup_resolver,
            };
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            println!("{}", rt.block_on(multihome_naming::load::run(cfg))?);
            Ok(())
        }
    }
}
