//! `multihome loadgen` (hidden): many real clients in one process against one real server,
//! for `python -m lab.bench scale` and `lab/tests/test_scale_e2e.py`.
//!
//! Architecture: this is a *client-side* tool built on the real client code path — each
//! simulated subscriber ([`session`]) is a `multihome_proto::endpoint::Client` with its own
//! static key and two real UDP link sockets (`multihome_io::udp::LinkSocket`) bound to its
//! own local addresses; only the application above the tunnel is synthetic ([`packet`]:
//! numbered inner UDP packets), and the far end ([`sink`]) is a socket in the server's
//! namespace. The sessions run on one current-thread tokio runtime, one task per session,
//! sharing the datagram buffers (nothing is held across an `.await`), so a process holds
//! thousands of sessions; the sink has a thread of its own, so that what it measures is
//! not its wait for the sessions' thread. [`plan`] runs the phases and prints one JSON line per phase.
//!
//! - `loadgen keys`: N fresh key pairs: the private keys (one base64 line each) for `run`,
//!   and the server's `[[peer]]` entries (one per key, inner address `inner_base + i`/32).
//! - `loadgen run`: the phases (`--phases up,idle:5,steady:10,churn:10,roam:10,bulk:10`).
//!
//! Invariants: session `i` always has key `i`, inner address `inner_base + i`, and link
//! `l`'s local address `local_base[l] + i / per_address`; loss is counted per session by
//! sequence number at the sink, never inferred from totals.

pub mod packet;
pub mod plan;
pub mod session;
pub mod sink;

use anyhow::{Context, Result};
use multihome_io::udp::RecvBuf;
use multihome_proto::crypto::PublicKey;
use multihome_proto::policy::Policy;
use session::{Control, Counters};
use std::cell::{Cell, RefCell};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

/// `multihome loadgen`.
#[derive(clap::Subcommand)]
pub enum LoadgenCmd {
    /// Write N key pairs: private keys to OUT/keys, the server's peers to OUT/peers.toml.
    Keys(KeysArgs),
    /// Run the sessions through the phases; JSON lines on stdout, progress on stderr.
    Run(Box<RunArgs>),
}

/// `loadgen keys`.
#[derive(clap::Args)]
pub struct KeysArgs {
    /// Sessions.
    #[arg(long)]
    pub sessions: usize,
    /// Output folder.
    #[arg(long)]
    pub out: PathBuf,
    /// Inner address of session 0 (session i: this + i).
    #[arg(long, default_value = "10.200.1.0")]
    pub inner_base: Ipv4Addr,
}

/// `loadgen run`.
#[derive(clap::Args, Clone)]
pub struct RunArgs {
    /// Private keys, one base64 line per session (`loadgen keys`).
    #[arg(long)]
    pub keys: PathBuf,
    /// Sessions to run (the first N keys; default all).
    #[arg(long)]
    pub sessions: Option<usize>,
    /// The server's public key (base64).
    #[arg(long)]
    pub server_key: String,
    /// The server's address on link 0 and on link 1.
    #[arg(long, value_delimiter = ',', required = true)]
    pub servers: Vec<SocketAddr>,
    /// First local address of link 0 and of link 1.
    #[arg(long, value_delimiter = ',', required = true)]
    pub locals: Vec<Ipv4Addr>,
    /// Sessions sharing one local address per link (subscribers behind one address).
    #[arg(long, default_value_t = 1)]
    pub per_address: usize,
    /// First local address a roaming session moves link 0 to (default: its own, new port).
    #[arg(long)]
    pub roam_base: Option<Ipv4Addr>,
    /// Inner address of session 0.
    #[arg(long, default_value = "10.200.1.0")]
    pub inner_base: Ipv4Addr,
    /// Where inner packets go (the sink, in the server's namespace).
    #[arg(long, default_value = "10.200.0.1:9000")]
    pub sink: SocketAddrV4,
    /// Open the sink in this named network namespace (`ip netns`).
    #[arg(long)]
    pub sink_netns: Option<String>,
    /// The sink echoes every packet back (downstream traffic too).
    #[arg(long)]
    pub echo: bool,
    /// Steady traffic per session, kbit/s (inner IP bytes).
    #[arg(long, default_value_t = 256.0)]
    pub rate_kbit: f64,
    /// Inner IP packet size of the steady traffic, bytes.
    #[arg(long, default_value_t = 500)]
    pub packet_bytes: usize,
    /// Sessions that download in a bulk phase (the first ones).
    #[arg(long, default_value_t = 50)]
    pub bulk_sessions: usize,
    /// Bulk rate per downloading session, Mbit/s.
    #[arg(long, default_value_t = 4.0)]
    pub bulk_mbit: f64,
    /// Share of sessions that leave and re-join in a churn (and bulk) phase, or roam in a
    /// roam phase.
    #[arg(long, default_value_t = 0.1)]
    pub fraction: f64,
    /// Phases, in order: up, idle:S, steady:S, churn:S, roam:S, bulk:S; a traffic phase
    /// may set its own rate per session, `steady:S@KBIT`.
    #[arg(long, value_delimiter = ',', default_value = "up,steady:10")]
    pub phases: Vec<String>,
    /// Seconds the `up` phase waits for every session.
    #[arg(long, default_value_t = 30.0)]
    pub up_timeout: f64,
    /// Tunnel MTU (the server's `mtu`).
    #[arg(long, default_value_t = 1420)]
    pub mtu: usize,
    /// Failure detection time of every session (a client's `detect_ms`); paths are probed
    /// every quarter of it while idle.
    #[arg(long, default_value_t = 1000)]
    pub detect_ms: u64,
}

/// What every session and the sink read: the run's fixed parameters.
pub struct Plan {
    /// Sessions.
    pub sessions: usize,
    /// Server addresses per link.
    pub servers: Vec<SocketAddr>,
    /// The server's static key.
    pub server_key: PublicKey,
    local_base: [Ipv4Addr; 2],
    roam_base: Option<Ipv4Addr>,
    per_address: usize,
    /// Inner address of session 0.
    pub inner_base: Ipv4Addr,
    /// The sink.
    pub sink: SocketAddrV4,
    /// The sink echoes.
    pub echo: bool,
    /// Tunnel MTU.
    pub mtu: usize,
    /// Policy of every flow.
    pub policy: Policy,
    /// Steady packet size.
    pub packet_bytes: usize,
    /// Failure detection time.
    pub detect: Duration,
    /// Sessions downloading in a bulk phase.
    pub bulk_sessions: usize,
    /// Bulk packet size (inner IP bytes).
    pub bulk_bytes: usize,
    /// Time between bulk rounds (one packet to each bulk session).
    pub bulk_gap: Duration,
}

impl Plan {
    /// Link `l`'s local address for session `i` (`roam`: where link 0 moves to).
    pub fn local(&self, i: usize, l: usize, roam: bool) -> IpAddr {
        let base = match (roam, self.roam_base) {
            (true, Some(r)) => r,
            _ => self.local_base[l],
        };
        IpAddr::V4((u32::from(base) + (i / self.per_address) as u32).into())
    }

    /// Session `i`'s inner UDP address.
    pub fn inner(&self, i: usize) -> SocketAddrV4 {
        session::inner_addr(self.inner_base, i)
    }
}

/// Buffers shared by all sessions (one task runs at a time; none holds them across an
/// `.await`).
pub struct Scratch {
    /// `poll_transmit`'s output.
    pub datagram: Box<[u8]>,
    /// `poll_deliver`'s output.
    pub deliver: Box<[u8]>,
    /// One `recvmmsg`.
    pub recv: Vec<RecvBuf>,
    /// An inner packet being built.
    pub packet: Vec<u8>,
}

/// The state all tasks share.
pub struct Shared {
    /// Fixed parameters.
    pub plan: Plan,
    /// The clock of every endpoint.
    pub clock: crate::daemon::Clock,
    /// Shared buffers.
    pub scratch: RefCell<Scratch>,
    /// Per-session counters.
    pub counters: RefCell<Vec<Counters>>,
    /// The sink (its own thread) and its per-session counts.
    pub sink: std::sync::Arc<sink::Sink>,
    /// Sessions send steady traffic.
    pub sending: Cell<bool>,
    /// Time between a session's steady packets (set per phase).
    pub send_gap: Cell<Duration>,
    errors: Cell<u64>,
}

impl Shared {
    /// Logs a session's error (the first few; all are counted).
    pub fn log_error(&self, i: usize, e: &str) {
        let n = self.errors.get() + 1;
        self.errors.set(n);
        if n <= 10 {
            eprintln!("loadgen: session {i}: {e}");
        }
    }

    /// Errors so far.
    pub fn errors(&self) -> u64 {
        self.errors.get()
    }
}

/// Runs `multihome loadgen`.
pub fn main(cmd: LoadgenCmd) -> Result<()> {
    match cmd {
        LoadgenCmd::Keys(a) => keys(&a),
        LoadgenCmd::Run(a) => crate::daemon::block_on(run(*a)),
    }
}

fn keys(a: &KeysArgs) -> Result<()> {
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let (mut private, mut peers) = (String::new(), String::new());
    for i in 0..a.sessions {
        let key = multihome_proto::crypto::StaticSecret::from_bytes(crate::daemon::os_seed()?);
        let _ = writeln!(private, "{}", key.to_base64());
        let inner = session::inner_ip(a.inner_base, i);
        let _ = write!(
            peers,
            "[[peer]]\nname = \"lg{i}\"\npublic_key = \"{}\"\nallowed_ips = [\"{inner}/32\"]\n\n",
            key.public_key().to_base64()
        );
    }
    let write = |name: &str, text: &str| {
        let p = a.out.join(name);
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))
    };
    write("keys", &private)?;
    write("peers.toml", &peers)
}

async fn run(a: RunArgs) -> Result<()> {
    let text = std::fs::read_to_string(&a.keys)
        .with_context(|| format!("reading {}", a.keys.display()))?;
    let keys = text
        .lines()
        .map(|l| multihome_proto::crypto::StaticSecret::from_base64(l.trim()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.keys.display()))?;
    let n = a.sessions.unwrap_or(keys.len()).min(keys.len());
    anyhow::ensure!(n > 0, "no sessions: {} has no keys", a.keys.display());
    raise_fd_limit(4 * n as u64 + 256);
    let sh = Rc::new(shared(&a, n)?);
    sink::start(a.sink_netns.as_deref(), a.sink, sh.sink.clone())?;
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async move {
            let ctls: Vec<Rc<Control>> = (0..n).map(|_| Rc::new(Control::default())).collect();
            let phases = plan::parse(&a.phases)?;
            plan::run(sh, keys, ctls, phases, &a).await
        })
        .await
}

fn shared(a: &RunArgs, n: usize) -> Result<Shared> {
    anyhow::ensure!(
        a.rate_kbit > 0.0 && a.bulk_mbit > 0.0,
        "rates must be positive"
    );
    anyhow::ensure!(
        a.servers.len() == 2 && a.locals.len() == 2,
        "--servers and --locals take two addresses each (link 0, link 1)"
    );
    let gap =
        |bytes: usize, bit_per_s: f64| Duration::from_secs_f64(bytes as f64 * 8.0 / bit_per_s);
    let bulk_bytes = a.mtu.min(1400);
    let plan = Plan {
        sessions: n,
        servers: a.servers.clone(),
        server_key: PublicKey::from_base64(&a.server_key)
            .map_err(|e| anyhow::anyhow!("--server-key: {e}"))?,
        local_base: [a.locals[0], a.locals[1]],
        roam_base: a.roam_base,
        per_address: a.per_address.max(1),
        inner_base: a.inner_base,
        sink: a.sink,
        echo: a.echo,
        mtu: a.mtu,
        policy: Policy::Best,
        packet_bytes: a.packet_bytes.clamp(64, a.mtu),
        detect: Duration::from_millis(a.detect_ms),
        bulk_sessions: a.bulk_sessions,
        bulk_bytes,
        bulk_gap: gap(bulk_bytes, a.bulk_mbit * 1e6),
    };
    let buf = || vec![0u8; crate::daemon::BUF_BYTES].into_boxed_slice();
    let sink = std::sync::Arc::new(sink::Sink::new(&plan));
    Ok(Shared {
        plan,
        clock: crate::daemon::Clock::new(),
        scratch: RefCell::new(Scratch {
            datagram: buf(),
            deliver: buf(),
            recv: (0..32)
                .map(|_| RecvBuf::new(crate::daemon::BUF_BYTES))
                .collect(),
            packet: Vec::new(),
        }),
        counters: RefCell::new(vec![Counters::default(); n]),
        sink,
        sending: Cell::new(false),
        send_gap: Cell::new(send_gap(a.packet_bytes, a.rate_kbit)),
        errors: Cell::new(0),
    })
}

/// Time between packets of `bytes` at `kbit` kbit/s.
pub fn send_gap(bytes: usize, kbit: f64) -> Duration {
    Duration::from_secs_f64(bytes as f64 * 8.0 / (kbit.max(0.001) * 1e3))
}

/// Two sockets per session (three while roaming): raise the soft limit on open files.
fn raise_fd_limit(want: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
