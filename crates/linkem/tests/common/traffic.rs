//! Traffic for the netns tests: timestamped UDP probes echoed by B, and a paced UDP blast.
//!
//! Probes carry (seq, A's send time, B's echo time) measured on one monotonic clock (all
//! threads are in this process), so each direction's one-way delay is measured directly,
//! not inferred from a round trip.

use super::{udp, Topo, IP_A, IP_B};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const STOP: u64 = u64::MAX;

/// What a probe run saw.
#[derive(Debug, Default)]
pub struct Probes {
    /// (seq, one-way A→B ms) in arrival order at B.
    pub a2b: Vec<(u64, f64)>,
    /// (seq, one-way B→A ms) in arrival order at A.
    pub b2a: Vec<(u64, f64)>,
}

impl Probes {
    /// Just the delays of one direction.
    pub fn ms(v: &[(u64, f64)]) -> Vec<f64> {
        v.iter().map(|&(_, d)| d).collect()
    }

    /// Whether arrival order equals send order.
    pub fn in_order(v: &[(u64, f64)]) -> bool {
        v.windows(2).all(|w| w[0].0 < w[1].0)
    }
}

fn ns_since(epoch: Instant) -> u64 {
    epoch.elapsed().as_nanos() as u64
}

fn word(buf: &[u8], i: usize) -> u64 {
    u64::from_be_bytes(buf[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
}

/// Sends `count` probes from A to B's echo, one every `interval`, and collects delays.
pub fn probe(topo: &Topo, count: u64, interval: Duration) -> Probes {
    let epoch = Instant::now();
    let run_for = interval * count as u32 + Duration::from_millis(800);
    let echo = Topo::spawn_in(&topo.b, move || {
        let s = udp(IP_B, 7000);
        let mut seen = Vec::new();
        let mut buf = [0u8; 64];
        let deadline = Instant::now() + run_for + Duration::from_secs(1);
        while Instant::now() < deadline {
            let Ok((n, from)) = s.recv_from(&mut buf) else {
                continue;
            };
            let now = ns_since(epoch);
            let seq = word(&buf, 0);
            if seq == STOP {
                break;
            }
            seen.push((seq, (now - word(&buf, 1)) as f64 / 1e6));
            buf[16..24].copy_from_slice(&ns_since(epoch).to_be_bytes());
            let _ = s.send_to(&buf[..n], from);
        }
        seen
    });
    // The echo socket must exist before the first probe arrives.
    std::thread::sleep(Duration::from_millis(50));
    let prober = Topo::spawn_in(&topo.a, move || {
        let s = Arc::new(udp(IP_A, 7001));
        let rx = Arc::clone(&s);
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut buf = [0u8; 64];
            let deadline = Instant::now() + run_for;
            while Instant::now() < deadline {
                if let Ok((_, _)) = rx.recv_from(&mut buf) {
                    let now = ns_since(epoch);
                    got.push((word(&buf, 0), (now - word(&buf, 2)) as f64 / 1e6));
                }
            }
            got
        });
        let to = SocketAddr::from((IP_B, 7000));
        let start = Instant::now();
        for seq in 0..count {
            let due = start + interval * seq as u32;
            if let Some(d) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(d);
            }
            let mut buf = [0u8; 64];
            buf[0..8].copy_from_slice(&seq.to_be_bytes());
            buf[8..16].copy_from_slice(&ns_since(epoch).to_be_bytes());
            s.send_to(&buf, to).expect("send probe");
        }
        let got = reader.join().expect("reader");
        let mut stop = [0u8; 64];
        stop[0..8].copy_from_slice(&STOP.to_be_bytes());
        let _ = s.send_to(&stop, to);
        got
    });
    let b2a = prober.join().expect("prober");
    let a2b = echo.join().expect("echo");
    Probes { a2b, b2a }
}

/// Ethernet + IPv4 + UDP header bytes around a UDP payload (the size linkem charges).
pub const WIRE_OVERHEAD: usize = 14 + 20 + 8;

/// Sends `payload`-byte UDP datagrams from A to B at `mbit` (of wire bytes) for `secs`;
/// returns B's arrivals as (seconds since the first arrival, wire bytes).
pub fn blast(topo: &Topo, payload: usize, mbit: f64, secs: f64) -> Vec<(f64, usize)> {
    let send_for = Duration::from_secs_f64(secs);
    let recv = Topo::spawn_in(&topo.b, move || {
        let s = udp(IP_B, 7100);
        let mut got = Vec::new();
        let mut first: Option<Instant> = None;
        let mut buf = vec![0u8; 65536];
        let deadline = Instant::now() + send_for + Duration::from_secs(4);
        let mut last = Instant::now();
        while Instant::now() < deadline {
            match s.recv_from(&mut buf) {
                Ok((n, _)) => {
                    let now = Instant::now();
                    let t0 = *first.get_or_insert(now);
                    got.push(((now - t0).as_secs_f64(), n + WIRE_OVERHEAD));
                    last = now;
                }
                // Stop once the link has drained (no arrival for 1 s after the first).
                Err(_) if first.is_some() && last.elapsed() > Duration::from_secs(1) => break,
                Err(_) => {}
            }
        }
        got
    });
    std::thread::sleep(Duration::from_millis(50));
    let send = Topo::spawn_in(&topo.a, move || {
        let s = udp(IP_A, 7101);
        let to = SocketAddr::from((IP_B, 7100));
        let buf = vec![0x5au8; payload];
        let per_sec = mbit * 1e6 / 8.0 / (payload + WIRE_OVERHEAD) as f64;
        let start = Instant::now();
        let mut sent = 0u64;
        while start.elapsed() < send_for {
            let due = (start.elapsed().as_secs_f64() * per_sec) as u64;
            while sent < due {
                let _ = s.send_to(&buf, to);
                sent += 1;
            }
            std::thread::sleep(Duration::from_micros(500));
        }
    });
    send.join().expect("sender");
    recv.join().expect("receiver")
}

/// Mean rate, in bit/s, of arrivals within [from, from + len) seconds.
pub fn rate_in(arrivals: &[(f64, usize)], from: f64, len: f64) -> f64 {
    let bytes: usize = arrivals
        .iter()
        .filter(|(t, _)| *t >= from && *t < from + len)
        .map(|(_, b)| b)
        .sum();
    bytes as f64 * 8.0 / len
}
