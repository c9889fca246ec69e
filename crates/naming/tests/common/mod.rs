//! A real etcd cluster for tests: three members of Debian's `etcd-server` in a throw-away
//! network namespace (on its loopback, distinct ports), each a child process killed by PID.
//! Tests that need it are skipped with a message when `etcd` is not installed
//! (`scripts/setup.sh` installs it).

#![allow(dead_code)]

use multihome_io::netns::NetNs;
use std::process::{Child, Command, Stdio};

/// Three etcd members; dropped: every member killed by PID, the namespace deleted.
pub struct EtcdCluster {
    pub ns: NetNs,
    members: Vec<Option<Child>>,
    _dir: tempfile::TempDir,
}

fn port(i: usize, peer: bool) -> u16 {
    23_000 + 10 * i as u16 + u16::from(peer)
}

impl EtcdCluster {
    /// Starts three members, or `None` when `etcd` is missing.
    pub fn start() -> Option<EtcdCluster> {
        if Command::new("etcd").arg("--version").output().is_err() {
            eprintln!("etcd not installed: skipping (scripts/setup.sh installs etcd-server)");
            return None;
        }
        let ns = NetNs::new("mhetcd").expect("network namespace (run as root)");
        let dir = tempfile::tempdir().unwrap();
        let cluster: Vec<String> = (0..3)
            .map(|i| format!("m{i}=http://127.0.0.1:{}", port(i, true)))
            .collect();
        let members = (0..3)
            .map(|i| {
                let client = format!("http://127.0.0.1:{}", port(i, false));
                let peer = format!("http://127.0.0.1:{}", port(i, true));
                let data = dir.path().join(format!("m{i}"));
                Some(
                    Command::new("ip")
                        .args(["netns", "exec", ns.name(), "etcd", "--name"])
                        .arg(format!("m{i}"))
                        .arg("--data-dir")
                        .arg(&data)
                        .args([
                            "--listen-client-urls",
                            &client,
                            "--advertise-client-urls",
                            &client,
                        ])
                        .args([
                            "--listen-peer-urls",
                            &peer,
                            "--initial-advertise-peer-urls",
                            &peer,
                        ])
                        .args(["--initial-cluster", &cluster.join(",")])
                        .args([
                            "--initial-cluster-state",
                            "new",
                            "--initial-cluster-token",
                            "mhtest",
                        ])
                        .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
                        .args(["--logger", "zap", "--log-level", "error"])
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .spawn()
                        .expect("starting etcd"),
                )
            })
            .collect();
        Some(EtcdCluster {
            ns,
            members,
            _dir: dir,
        })
    }

    /// Client URLs of the members.
    pub fn endpoints(&self) -> Vec<String> {
        (0..3)
            .map(|i| format!("http://127.0.0.1:{}", port(i, false)))
            .collect()
    }

    /// Member `i`'s PID (`ip netns exec` execs etcd in place), while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].as_ref().map(|c| c.id())
    }

    /// Kills member `i` (SIGKILL by its PID; `ip netns exec` execs etcd in place).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
