//! `multihome`: the command-line entry point (keygen, client, server, race, relay,
//! mptcp-detours, status, reload, check-config, resolve; `man` writes the manual pages of
//! all of them, generated from this definition).

use anyhow::Result;
use clap::{Parser, Subcommand};
use multihome::{check, daemon, keyfile, status};
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
    /// Many real client sessions in one process against one server; JSON lines on stdout
    /// (`python -m lab.bench scale`).
    #[command(hide = true, subcommand)]
    Loadgen(multihome::loadgen::LoadgenCmd),
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
    /// Make a running client or server re-read its config file, without dropping the session.
    ///
    /// A client applies added, removed or moved links and new policies; a server, added,
    /// removed or changed peers and its default policy. A file that is invalid, or changes
    /// anything fixed while the daemon runs, is refused and the configuration in force is
    /// kept. SIGHUP does the same (the outcome is logged).
    Reload {
        /// Control socket (default: the client's, else the server's).
        #[arg(long, conflicts_with = "config")]
        socket: Option<PathBuf>,
        /// The daemon's config file: its control socket is the one this file sets (what a
        /// service manager's reload command knows).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Check a configuration file of any daemon without starting it.
    ///
    /// The daemon is told by the file's table ([client], [server], [relay], [race],
    /// [mptcp]). Errors are printed as FILE:LINE: message, with a fix; the exit code is 1
    /// on any error, 0 when the daemon would accept the file.
    CheckConfig {
        /// The configuration file.
        file: PathBuf,
        /// Check only the file, not this machine (key files, interfaces): for a file
        /// written for another machine.
        #[arg(long)]
        offline: bool,
    },
    /// Write the manual pages (roff) of multihome and each command into DIR.
    #[command(hide = true)]
    Man {
        /// Output folder (created if missing).
        #[arg(long)]
        out: PathBuf,
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
        Cmd::Reload { socket, config } => multihome::reload::request(socket, config),
        Cmd::CheckConfig { file, offline } => {
            let (kind, summary) = check::check(&file, offline)?;
            let scope = if offline {
                " (offline: key files and interfaces not checked)"
            } else {
                ""
            };
            let (file, cmd) = (file.display(), kind.command());
            println!("{file}: valid `multihome {cmd}` configuration{scope}\n  {summary}");
            Ok(())
        }
        Cmd::Man { out } => write_man_pages(&out),
        Cmd::Resolve {
            identity,
            resolver,
            server,
            json,
        } => multihome::resolve::query(&identity, resolver, server, json),
        Cmd::Loadgen(c) => multihome::loadgen::main(c),
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

/// `multihome man --out DIR`: `multihome.1` and `multihome-COMMAND.1` for each visible
/// command, generated from the clap definition, so the pages always match the binary.
fn write_man_pages(out: &std::path::Path) -> Result<()> {
    use clap::CommandFactory;
    std::fs::create_dir_all(out)?;
    let cmd = Cli::command().version(env!("CARGO_PKG_VERSION"));
    let mut pages = vec![("multihome".to_string(), cmd.clone())];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("multihome-{}", sub.get_name());
        let page = sub
            .clone()
            .display_name(name.clone())
            .bin_name(format!("multihome {}", sub.get_name()));
        pages.push((name, page));
    }
    for (name, page) in pages {
        let mut roff = Vec::new();
        clap_mangen::Man::new(page).render(&mut roff)?;
        std::fs::write(out.join(format!("{name}.1")), roff)?;
    }
    Ok(())
}
