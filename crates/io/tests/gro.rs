//! TCP through two offload TUNs joined by a userspace relay that cuts the sender's
//! super-packets with `split_gso` and merges the segments again with `GroBatch`, as the
//! tunnel's receive side will. A wrong length, sequence number or checksum in a merged frame
//! would make the receiving kernel drop or corrupt data; the relay must also really have
//! written super-frames.
mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use multihome_io::netns::NetNs;
use multihome_io::tun::{split_gso, GroBatch, Tun, VNET_HDR_LEN};

const BYTES: usize = 9 << 20;

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(2654435761) >> 13) as u8
}

/// Counters of what the relay wrote.
#[derive(Default)]
struct Written {
    packets: AtomicUsize,
    frames: AtomicUsize,
    supers: AtomicUsize,
}

/// Moves every frame queued on `from` to `to`: split into packets, coalesced, written as
/// frames with their own virtio header.
fn pump(
    from: &Tun,
    to: &Tun,
    buf: &mut [u8],
    scratch: &mut Vec<u8>,
    gro: &mut GroBatch,
    w: &Written,
) {
    let mut write = |frame: &[u8]| {
        assert_eq!(to.send_frame(frame).expect("tun write"), frame.len());
        w.frames.fetch_add(1, Ordering::Relaxed);
        if frame[1] != 0 {
            w.supers.fetch_add(1, Ordering::Relaxed);
        }
    };
    loop {
        let n = match from.recv(buf) {
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("tun read: {e}"),
        };
        split_gso(&buf[..n], scratch, |pkt| {
            w.packets.fetch_add(1, Ordering::Relaxed);
            if gro.push(pkt).is_err() {
                gro.flush(&mut write);
                gro.push(pkt).expect("room after flush");
            }
        })
        .expect("split_gso");
    }
    gro.flush(&mut write);
}

#[test]
fn tcp_through_a_coalescing_relay_arrives_intact() {
    let a = NetNs::new("mhio-ga").unwrap();
    let b = NetNs::new("mhio-gb").unwrap();
    let tun_a = a
        .run(|| Tun::create_with_offload("mhga", 1400))
        .unwrap()
        .unwrap();
    let tun_b = b
        .run(|| Tun::create_with_offload("mhgb", 1400))
        .unwrap()
        .unwrap();
    a.run(|| tun_a.set_address("198.51.100.1/24".parse().unwrap()))
        .unwrap()
        .unwrap();
    b.run(|| tun_b.set_address("198.51.100.2/24".parse().unwrap()))
        .unwrap()
        .unwrap();
    let listener = b
        .run(|| TcpListener::bind("198.51.100.2:9000"))
        .unwrap()
        .unwrap();

    let stop = AtomicBool::new(false);
    let written = Written::default();
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut buf = vec![0u8; 65536 + VNET_HDR_LEN];
            let mut scratch = Vec::new();
            let (mut gro_ab, mut gro_ba) = (GroBatch::new(), GroBatch::new());
            while !stop.load(Ordering::Relaxed) {
                common::wait_either(&tun_a, &tun_b, Duration::from_millis(50));
                pump(
                    &tun_a,
                    &tun_b,
                    &mut buf,
                    &mut scratch,
                    &mut gro_ab,
                    &written,
                );
                pump(
                    &tun_b,
                    &tun_a,
                    &mut buf,
                    &mut scratch,
                    &mut gro_ba,
                    &written,
                );
            }
        });
        let server = s.spawn(|| {
            let (mut conn, _) = listener.accept().unwrap();
            conn.set_read_timeout(Some(Duration::from_secs(20)))
                .unwrap();
            let mut got = Vec::with_capacity(BYTES);
            conn.read_to_end(&mut got).unwrap();
            got
        });
        let client = a
            .run(|| {
                let mut c = TcpStream::connect("198.51.100.2:9000")?;
                c.set_write_timeout(Some(Duration::from_secs(20)))?;
                let data: Vec<u8> = (0..BYTES).map(pattern).collect();
                // Uneven writes, so that PSH and short segments occur mid-stream.
                for chunk in data.chunks(100_003) {
                    c.write_all(chunk)?;
                }
                c.shutdown(std::net::Shutdown::Write)
            })
            .unwrap();
        let got = server.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        client.unwrap();
        assert_eq!(got.len(), BYTES, "transfer incomplete");
        assert!(
            got.iter().enumerate().all(|(i, b)| *b == pattern(i)),
            "data corrupted"
        );
    });
    let (packets, frames, supers) = (
        written.packets.load(Ordering::Relaxed),
        written.frames.load(Ordering::Relaxed),
        written.supers.load(Ordering::Relaxed),
    );
    eprintln!("relay: {packets} packets written as {frames} frames, {supers} of them super-frames");
    assert!(supers > 0, "the relay never wrote a super-frame");
    assert!(
        frames * 4 < packets,
        "too little coalescing: {packets} packets in {frames} frames"
    );
}

#[test]
fn send_frame_needs_an_offload_tun() {
    let ns = NetNs::new("mhio-gc").unwrap();
    let tun = ns.run(|| Tun::create("mhgc", 1400)).unwrap().unwrap();
    let err = tun.send_frame(&[0; VNET_HDR_LEN + 20]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
}
