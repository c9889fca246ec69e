//! Micro-benchmark: datagrams per second through loopback in a throw-away namespace, with
//! one `sendmmsg`/`recvmmsg` per 64 datagrams versus one `sendto`/`recvfrom` per datagram.
//!
//! Run as root: `cargo run --release -p multihome-io --example udp_batch_bench [ROUNDS]`.
//! Each round sends 64 datagrams of 1200 bytes and receives them back on the same thread, so
//! both directions' system-call cost is measured and nothing is lost to queue overflow.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use multihome_io::netns::NetNs;
use multihome_io::udp::{classify, ErrorClass, LinkSocket, RecvBuf, BATCH_MAX};

const SIZE: usize = 1200;

fn recv_all_single(rx: &LinkSocket, want: usize, buf: &mut [u8]) -> usize {
    let mut got = 0;
    while got < want {
        match rx.recv_from(buf) {
            Ok(_) => got += 1,
            Err(e) if classify(&e) == ErrorClass::WouldBlock => std::hint::spin_loop(),
            Err(e) => panic!("recv_from: {e}"),
        }
    }
    got
}

fn run_single(tx: &LinkSocket, rx: &LinkSocket, dst: SocketAddr, rounds: usize) -> Duration {
    let payload = [0xa5u8; SIZE];
    let mut buf = [0u8; 2048];
    let start = Instant::now();
    for _ in 0..rounds {
        for _ in 0..BATCH_MAX {
            tx.send_to(&payload, dst).expect("send_to");
        }
        recv_all_single(rx, BATCH_MAX, &mut buf);
    }
    start.elapsed()
}

fn run_batch(tx: &LinkSocket, rx: &LinkSocket, dst: SocketAddr, rounds: usize) -> Duration {
    let payload = [0x5au8; SIZE];
    let msgs: Vec<(SocketAddr, &[u8])> = (0..BATCH_MAX).map(|_| (dst, &payload[..])).collect();
    let mut bufs: Vec<RecvBuf> = (0..BATCH_MAX).map(|_| RecvBuf::new(2048)).collect();
    let start = Instant::now();
    for _ in 0..rounds {
        let mut sent = 0;
        while sent < msgs.len() {
            sent += tx.send_batch(&msgs[sent..]).expect("send_batch");
        }
        let mut got = 0;
        while got < BATCH_MAX {
            match rx.recv_batch(&mut bufs[got..]) {
                Ok(n) => got += n,
                Err(e) if classify(&e) == ErrorClass::WouldBlock => std::hint::spin_loop(),
                Err(e) => panic!("recv_batch: {e}"),
            }
        }
        assert!(bufs.iter().all(|b| b.len() == SIZE), "short datagram");
    }
    start.elapsed()
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("ROUNDS must be a number"))
        .unwrap_or(2000);
    let ns = NetNs::new("mhio-bench").expect("create namespace (run as root)");
    let (single, batch) = ns
        .run(|| {
            let rx = LinkSocket::bind(Some("lo"), "127.0.0.1:0".parse().unwrap()).unwrap();
            let tx = LinkSocket::bind(Some("lo"), "127.0.0.1:0".parse().unwrap()).unwrap();
            let dst = rx.local_addr().unwrap();
            // Warm up caches and the socket buffers before timing.
            run_single(&tx, &rx, dst, rounds / 10 + 1);
            run_batch(&tx, &rx, dst, rounds / 10 + 1);
            (
                run_single(&tx, &rx, dst, rounds),
                run_batch(&tx, &rx, dst, rounds),
            )
        })
        .expect("run in namespace");
    let n = (rounds * BATCH_MAX) as f64;
    let pps = |d: Duration| n / d.as_secs_f64();
    println!(
        "datagrams per mode: {} x {SIZE} bytes (send + receive, one thread)",
        n as u64
    );
    println!("send_to/recv_from:     {:>12.0} datagrams/s", pps(single));
    println!("send_batch/recv_batch: {:>12.0} datagrams/s", pps(batch));
    println!("batch / single ratio:  {:>12.2}", pps(batch) / pps(single));
}
