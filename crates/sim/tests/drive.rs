//! The `[drive]` feature (issue 16): a fixed drive (APs 400 m apart, 100 m range, 10 m/s,
//! DHCP 1.5 s: connected [0, 20) s and [41.5, 60) s, the address changing at 41.5 s) and
//! a 60 MB download started at 2 s over a 20 Mbit/s hop (10 ms one way).
//!
//! Arithmetic for the bounds: TCP goodput is at most 20 Mbit/s × 1448/1514 (MSS over
//! frame) = 2.39 MB/s directly, × 1368/1514 = 2.26 MB/s through the tunnel (1420 MTU).
//! The first AP carries at most 18 s of it (43 MB), so the file needs the second AP and
//! cannot end before 41.5 s + 17 MB / 2.39 MB/s = 48.6 s of the drive, 46.6 s after its
//! start; allow 4 s for slow start, the reconnection and the tunnel's lower goodput.

use multihome_sim::runner::run_one;
use multihome_sim::sweep::expand;
use multihome_sim::world::RunReport;
use std::path::Path;

fn run(tunnel: bool, resume: bool) -> RunReport {
    let text = format!(
        r#"
name = "t"
duration = "90s"
[tunnel]
enabled = {tunnel}
policy = "best"
mtu = 1420
[drive]
gap_m = [400.0, 400.0]
dhcp_s = [1.5, 1.5]
[[links]]
hops = [{{ both = {{ rate = "20mbit", delay = "10ms", queue_bytes = 250000 }} }}]
[[flows]]
kind = "bulk"
direction = "down"
cc = "cubic"
bytes = 60000000
start = "2s"
resume = {resume}
"#
    );
    let runs = expand(toml::from_str(&text).unwrap()).unwrap();
    run_one(&runs[0], Path::new(".")).unwrap()
}

/// Plain TCP/IP: the address change kills the connection; the resuming application
/// reconnects once and gets every byte, within the bound; without resuming it stops.
#[test]
fn plain_tcp_resumes_once_per_new_address() {
    let r = run(false, true);
    let f = &r.flows[0];
    assert_eq!(f.reconnects, Some(1), "{f:?}");
    assert_eq!(f.bytes_delivered, 60_000_000, "{f:?}");
    let done = f.completion_s.expect("completed");
    assert!((46.6..50.6).contains(&done), "{done}");
    let stopped = run(false, false);
    let f = &stopped.flows[0];
    assert_eq!(f.completion_s, None, "a dead connection finished: {f:?}");
    assert!(f.bytes_delivered < 45_000_000, "{f:?}");
}

/// Through the tunnel one connection carries the whole file across the gap and the new
/// address (the server follows it), within the same bound.
#[test]
fn tunnel_carries_one_connection_across_the_gap() {
    let r = run(true, false);
    let f = &r.flows[0];
    assert_eq!(f.bytes_delivered, 60_000_000, "{f:?}");
    let done = f.completion_s.expect("completed");
    assert!((46.6..50.6).contains(&done), "{done}");
}
