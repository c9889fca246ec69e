//! Micro-benchmark: TCP segments per second written into an offload TUN, one `write` per
//! segment versus batches of 32 merged by `GroBatch` into super-frames (`Tun::send_frame`).
//!
//! Run as root: `cargo run --release -p multihome-io --example tun_gro_bench [SEGMENTS]`.
//! In a throw-away namespace the benchmark plays the remote TCP peer itself, as the tunnel's
//! receive side does: it handshakes with a local listener through the TUN, streams SEGMENTS
//! segments of 1400 bytes within the advertised window, and stops the clock when the last
//! byte is acknowledged, while a thread reads the data. So the kernel's whole TCP receive
//! path is measured, not only the `write` calls.

use std::io::{ErrorKind, Read};
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use multihome_io::netns::NetNs;
use multihome_io::tun::{GroBatch, Tun, VNET_HDR_LEN};

const PAYLOAD: usize = 1400;
const BATCH: usize = 32;
const LOCAL: [u8; 4] = [10, 77, 0, 1];
const PEER: [u8; 4] = [10, 77, 0, 2];
const PORT: u16 = 5001;
const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const FIN: u8 = 0x01;

fn sum(mut acc: u64, data: &[u8]) -> u64 {
    for w in data.chunks(2) {
        acc += u64::from(w[0]) << 8 | u64::from(*w.get(1).unwrap_or(&0));
    }
    acc
}

fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// Our side of one TCP connection, spoken through the TUN.
struct Peer<'a> {
    tun: &'a Tun,
    sport: u16,
    id: u16,
    snd_nxt: u32,
    snd_una: u32,
    /// Next sequence number expected from the kernel (0 until the SYN-ACK).
    rcv_nxt: u32,
    /// The kernel's receive window in bytes, and its window-scale shift.
    wnd: u64,
    ws: u8,
    rx: Vec<u8>,
}

impl Peer<'_> {
    /// An IPv4/TCP packet from us with valid checksums; `payload_sum` is `sum(0, payload)`,
    /// computed once for the constant data payload so that building costs little.
    fn packet(&mut self, flags: u8, opts: &[u8], payload: &[u8], payload_sum: u64) -> Vec<u8> {
        let tcp_len = 20 + opts.len() + payload.len();
        let mut p = Vec::with_capacity(20 + tcp_len);
        p.extend_from_slice(&[0x45, 0]);
        p.extend_from_slice(&((20 + tcp_len) as u16).to_be_bytes());
        p.extend_from_slice(&self.id.to_be_bytes());
        p.extend_from_slice(&[0x40, 0, 64, 6, 0, 0]);
        p.extend_from_slice(&PEER);
        p.extend_from_slice(&LOCAL);
        let c = !fold(sum(0, &p));
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p.extend_from_slice(&self.sport.to_be_bytes());
        p.extend_from_slice(&PORT.to_be_bytes());
        p.extend_from_slice(&self.snd_nxt.to_be_bytes());
        p.extend_from_slice(&self.rcv_nxt.to_be_bytes());
        p.extend_from_slice(&[
            ((20 + opts.len()) as u8 / 4) << 4,
            flags,
            0xff,
            0xff,
            0,
            0,
            0,
            0,
        ]);
        p.extend_from_slice(opts);
        let head = sum(sum(6 + tcp_len as u64, &p[12..20]), &p[20..]);
        p[36..38].copy_from_slice(&(!fold(head + payload_sum)).to_be_bytes());
        p.extend_from_slice(payload);
        self.id = self.id.wrapping_add(1);
        let advance = payload.len() + usize::from(flags & (SYN | FIN) != 0);
        self.snd_nxt = self.snd_nxt.wrapping_add(advance as u32);
        p
    }

    /// Reads every frame the kernel queued and takes in the ACKs of our connection.
    fn drain(&mut self) {
        loop {
            let n = match self.tun.recv(&mut self.rx) {
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) => panic!("tun read: {e}"),
            };
            let p = &self.rx[VNET_HDR_LEN..n];
            if p.len() < 40 || p[0] != 0x45 || p[9] != 6 || p[22..24] != self.sport.to_be_bytes() {
                continue;
            }
            let t = &p[20..];
            let ack = u32::from_be_bytes([t[8], t[9], t[10], t[11]]);
            let window = u64::from(u16::from_be_bytes([t[14], t[15]]));
            if t[13] & (SYN | ACK) == SYN | ACK {
                self.rcv_nxt = u32::from_be_bytes([t[4], t[5], t[6], t[7]]).wrapping_add(1);
                let opts = &t[20..usize::from(t[12] >> 4) * 4];
                let mut i = 0;
                while i + 1 < opts.len() && opts[i] != 0 {
                    match opts[i] {
                        1 => i += 1,
                        3 => {
                            self.ws = opts[i + 2].min(14);
                            i += 3
                        }
                        _ => i += usize::from(opts[i + 1]).max(2),
                    }
                }
                self.wnd = window; // a SYN's window is never scaled
            } else {
                self.wnd = window << self.ws;
            }
            if ack.wrapping_sub(self.snd_una) as i32 > 0 {
                self.snd_una = ack;
            }
        }
    }

    /// Drains ACKs until `done` holds; panics when the kernel stops acknowledging.
    fn wait(&mut self, done: impl Fn(&Peer) -> bool) {
        let mut last = (Instant::now(), self.snd_una);
        loop {
            self.drain();
            if done(self) {
                return;
            }
            if last.1 != self.snd_una {
                last = (Instant::now(), self.snd_una);
            }
            assert!(
                last.0.elapsed() < Duration::from_secs(3),
                "kernel stopped acknowledging"
            );
            let mut pfd = libc::pollfd {
                fd: self.tun.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut pfd, 1, 10) };
        }
    }
}

/// Streams `segments` data segments on a new connection; returns the time until all were
/// acknowledged and the number of frames written.
fn run(
    tun: &Tun,
    listener: &TcpListener,
    sport: u16,
    segments: usize,
    gro: bool,
) -> (Duration, usize) {
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let (mut conn, _) = listener.accept().expect("accept");
            let mut buf = vec![0u8; 1 << 18];
            let mut total = 0usize;
            loop {
                match conn.read(&mut buf).expect("read") {
                    0 => return total,
                    n => total += n,
                }
            }
        });
        let mut peer = Peer {
            tun,
            sport,
            id: 1,
            snd_nxt: 1_000_000,
            snd_una: 1_000_000,
            rcv_nxt: 0,
            wnd: 0,
            ws: 0,
            rx: vec![0u8; 65536 + VNET_HDR_LEN],
        };
        // MSS 1460, NOP, window scale 7.
        let syn = peer.packet(SYN, &[2, 4, 0x05, 0xb4, 1, 3, 3, 7], &[], 0);
        tun.send(&syn).expect("send SYN");
        peer.wait(|p| p.rcv_nxt != 0);
        let ack = peer.packet(ACK, &[], &[], 0);
        tun.send(&ack).expect("send ACK");

        let payload = [0x5au8; PAYLOAD];
        let payload_sum = sum(0, &payload);
        let mut batch = GroBatch::new();
        let mut frames = 0;
        let start = Instant::now();
        let mut sent = 0;
        while sent < segments {
            let k = BATCH.min(segments - sent);
            let need = (k * PAYLOAD) as u64;
            peer.wait(|p| u64::from(p.snd_nxt.wrapping_sub(p.snd_una)) + need <= p.wnd);
            for _ in 0..k {
                let seg = peer.packet(ACK, &[], &payload, payload_sum);
                if gro {
                    batch.push(&seg).expect("a batch of 32 fits");
                } else {
                    tun.send(&seg).expect("tun write");
                    frames += 1;
                }
            }
            batch.flush(|frame| {
                tun.send_frame(frame).expect("tun write");
                frames += 1;
            });
            sent += k;
        }
        peer.wait(|p| p.snd_una == p.snd_nxt);
        let elapsed = start.elapsed();
        let fin = peer.packet(FIN | ACK, &[], &[], 0);
        tun.send(&fin).expect("send FIN");
        assert_eq!(
            reader.join().expect("reader"),
            segments * PAYLOAD,
            "bytes lost"
        );
        (elapsed, frames)
    })
}

fn main() {
    let segments: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("SEGMENTS must be a number"))
        .unwrap_or(200_000);
    let ns = NetNs::new("mhio-grob").expect("create namespace (run as root)");
    let (tun, listener) = ns
        .run(|| {
            let tun = Tun::create_with_offload("mhgro0", 1500).expect("create TUN");
            tun.set_address("10.77.0.1/24".parse().unwrap())
                .expect("address");
            let l = TcpListener::bind(("10.77.0.1", PORT)).expect("listen");
            (tun, l)
        })
        .expect("run in namespace");
    let mut best = [Duration::MAX; 2];
    let mut frames = [0; 2];
    // Alternate the modes twice so that warm-up and noise hit both alike; keep the best.
    for round in 0..4u16 {
        let gro = round % 2 == 1;
        let (d, f) = run(&tun, &listener, 40000 + round, segments, gro);
        best[usize::from(gro)] = best[usize::from(gro)].min(d);
        frames[usize::from(gro)] = f;
    }
    let pps = |d: Duration| segments as f64 / d.as_secs_f64();
    let gbps = |d: Duration| pps(d) * (PAYLOAD * 8) as f64 / 1e9;
    println!("{segments} TCP segments of {PAYLOAD} bytes per run, best of 2 runs per mode");
    for (name, i) in [("one write per segment", 0), ("GroBatch super-frames", 1)] {
        println!(
            "{name:<22} {:>10.0} segments/s {:>6.2} Gbit/s {:>8} frames",
            pps(best[i]),
            gbps(best[i]),
            frames[i]
        );
    }
    println!(
        "coalesced / plain:     {:>10.2}",
        pps(best[1]) / pps(best[0])
    );
}
