//! Test topology: ns A ── veth ── ns L (linkem bridging la ↔ lb) ── veth ── ns B.
//!
//! Every name carries a random suffix; namespaces are deleted and the linkem process is
//! stopped (by its PID) when the guards drop, also when a test fails. Sockets for traffic are
//! opened from threads that have entered A or B with setns(2), so the measuring code shares
//! one process and one monotonic clock, which makes one-way delays directly measurable.
#![allow(dead_code)]

pub mod traffic;

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Address of A's interface.
pub const IP_A: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
/// Address of B's interface.
pub const IP_B: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
const MAC_A: &str = "02:00:4c:00:00:01";
const MAC_B: &str = "02:00:4c:00:00:02";

static SERIAL: Mutex<()> = Mutex::new(());

/// Runs tests one at a time: timing and throughput need the two cores to themselves.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn sh(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("spawn");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Three namespaces wired in a line; deleted on drop.
pub struct Topo {
    /// Endpoint namespace A.
    pub a: String,
    /// The link namespace (linkem runs here).
    pub l: String,
    /// Endpoint namespace B.
    pub b: String,
    created: Vec<String>,
}

impl Topo {
    /// Builds the topology (needs root).
    pub fn new() -> Topo {
        // SAFETY: geteuid has no preconditions.
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "netns tests need root (CI runs as root)"
        );
        let suffix = format!("{:x}{:08x}", std::process::id(), rand_suffix());
        let mut t = Topo {
            a: format!("lkA-{suffix}"),
            l: format!("lkL-{suffix}"),
            b: format!("lkB-{suffix}"),
            created: Vec::new(),
        };
        for ns in [t.a.clone(), t.l.clone(), t.b.clone()] {
            sh(&["ip", "netns", "add", &ns]);
            t.created.push(ns.clone());
            for key in ["all", "default"] {
                sh(&[
                    "ip",
                    "netns",
                    "exec",
                    &ns,
                    "sysctl",
                    "-qw",
                    &format!("net.ipv6.conf.{key}.disable_ipv6=1"),
                ]);
            }
            sh(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
        }
        sh(&[
            "ip", "-n", &t.a, "link", "add", "a0", "address", MAC_A, "type", "veth", "peer",
            "name", "la", "netns", &t.l,
        ]);
        sh(&[
            "ip", "-n", &t.b, "link", "add", "b0", "address", MAC_B, "type", "veth", "peer",
            "name", "lb", "netns", &t.l,
        ]);
        for (ns, dev, ip, peer_ip, peer_mac) in [
            (&t.a, "a0", IP_A, IP_B, MAC_B),
            (&t.b, "b0", IP_B, IP_A, MAC_A),
        ] {
            sh(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{ip}/24"),
                "dev",
                dev,
            ]);
            sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
            // Static neighbours: no ARP exchange through the emulated link during measurements.
            sh(&[
                "ip",
                "-n",
                ns,
                "neigh",
                "replace",
                &peer_ip.to_string(),
                "lladdr",
                peer_mac,
                "dev",
                dev,
                "nud",
                "permanent",
            ]);
        }
        for dev in ["la", "lb"] {
            sh(&["ip", "-n", &t.l, "link", "set", dev, "up"]);
        }
        t
    }

    /// Runs `f` on a thread inside namespace `ns`.
    pub fn spawn_in<T: Send + 'static>(
        ns: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> JoinHandle<T> {
        let path = format!("/var/run/netns/{ns}");
        std::thread::spawn(move || {
            let file = File::open(&path).expect("open netns");
            // SAFETY: setns on this thread only, with a valid netns fd.
            let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns {path}: {}", std::io::Error::last_os_error());
            f()
        })
    }

    /// Starts linkem in L with `config` (TOML text) and extra arguments.
    pub fn linkem(&self, config: &str, extra: &[&str]) -> Linkem {
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = dir.path().join("link.toml");
        std::fs::write(&cfg, config).expect("write config");
        let stats = dir.path().join("stats.json");
        let control = dir.path().join("ctl.sock");
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.l, env!("CARGO_BIN_EXE_linkem")])
            .args(["--iface-a", "la", "--iface-b", "lb", "--config"])
            .arg(&cfg)
            .arg("--stats-json")
            .arg(&stats)
            .arg("--control")
            .arg(&control)
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn linkem");
        // `ip netns exec` execs linkem in place, so this PID is linkem's own.
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let guard = Linkem {
            child,
            dir,
            stats,
            control,
        };
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("linkem did not become ready");
        assert_eq!(line.trim(), "ready", "linkem failed to start");
        guard
    }
}

fn rand_suffix() -> u32 {
    let mut b = [0u8; 4];
    File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .expect("urandom");
    u32::from_ne_bytes(b)
}

impl Drop for Topo {
    fn drop(&mut self) {
        for ns in &self.created {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// A running linkem; SIGTERM on drop (SIGKILL if it lingers).
pub struct Linkem {
    child: Child,
    dir: tempfile::TempDir,
    stats: PathBuf,
    /// Its control socket.
    pub control: PathBuf,
}

impl Linkem {
    /// Stops it and returns the final `--stats-json` contents.
    pub fn stop(mut self) -> serde_json::Value {
        self.terminate();
        let text = std::fs::read_to_string(&self.stats).expect("stats json written on exit");
        serde_json::from_str(&text).expect("stats json parses")
    }

    /// Temporary directory of this run (for traces etc.).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn terminate(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        // SAFETY: signalling our own child by its PID.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Linkem {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// A child process (iperf3 etc.) killed by PID on drop.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Turns TSO/GSO/GRO (and UDP segmentation) on or off for `dev` in namespace `ns`.
pub fn set_offloads(ns: &str, dev: &str, on: bool) {
    let v = if on { "on" } else { "off" };
    sh(&[
        "ip", "netns", "exec", ns, "ethtool", "-K", dev, "tso", v, "gso", v, "gro", v,
    ]);
    // Not every kernel exposes this feature; ignore a refusal.
    let _ = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "ethtool",
            "-K",
            dev,
            "tx-udp-segmentation",
            v,
        ])
        .output();
}

/// One CUBIC TCP flow A → B for `secs` with iperf3; returns received bit/s.
pub fn iperf3(topo: &Topo, secs: u32) -> f64 {
    let _server = Proc(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &topo.b,
                "iperf3",
                "-s",
                "-B",
                &IP_B.to_string(),
            ])
            .stdout(Stdio::null())
            .spawn()
            .expect("iperf3 -s"),
    );
    for _attempt in 0..20 {
        std::thread::sleep(Duration::from_millis(200));
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &topo.a,
                "iperf3",
                "-c",
                &IP_B.to_string(),
                "-C",
                "cubic",
                "-J",
            ])
            .args(["-t", &secs.to_string()])
            .output()
            .expect("iperf3 -c");
        if !out.status.success() {
            continue; // the server was not listening yet
        }
        // iperf3 can exit 0 with a JSON report that holds an "error" and no totals (seen once
        // in CI right after the previous server was killed); show it and try again rather than
        // fail on a harness hiccup. Twenty failures in a row still fail the test.
        let v: serde_json::Value = match serde_json::from_slice(&out.stdout) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("iperf3 output is not JSON ({e}); retrying");
                continue;
            }
        };
        match v["end"]["sum_received"]["bits_per_second"].as_f64() {
            Some(bps) => return bps,
            None => {
                eprintln!("iperf3 report without totals, retrying: {}", v["error"]);
                continue;
            }
        }
    }
    panic!("iperf3 never produced a report");
}

/// Sends one control command through the `linkem ctl` client.
pub fn ctl(control: &Path, command: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .arg("ctl")
        .arg("--control")
        .arg(control)
        .args(command.split_whitespace())
        .output()
        .expect("run linkem ctl");
    assert!(
        out.status.success(),
        "ctl {command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf8")
        .trim()
        .to_owned()
}

/// A UDP socket bound in the calling thread's namespace.
pub fn udp(ip: Ipv4Addr, port: u16) -> UdpSocket {
    let s = UdpSocket::bind(SocketAddr::from((ip, port))).expect("bind udp");
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    s
}

/// Sorted-copy percentile (p in 0..=100).
pub fn percentile(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s[((s.len() - 1) as f64 * p / 100.0).round() as usize]
}
