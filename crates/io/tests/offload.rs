//! TCP through two offload TUNs joined by a userspace relay that cuts super-packets with
//! `split_gso`: if a segment had a wrong length, sequence number or checksum, the receiving
//! kernel would drop it and the transfer would stall or corrupt.
mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use multihome_io::netns::NetNs;
use multihome_io::tun::{split_gso, Tun, VNET_HDR_LEN};

const BYTES: usize = 8 << 20;

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(2654435761) >> 13) as u8
}

/// Moves every frame queued on `from` to `to`, split into MTU-sized packets, counting the
/// super-packets (frames that were split into more than one packet).
fn pump(from: &Tun, to: &Tun, buf: &mut [u8], scratch: &mut Vec<u8>, supers: &AtomicUsize) {
    loop {
        let n = match from.recv(buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
            Err(e) => panic!("tun read: {e}"),
        };
        let count = split_gso(&buf[..n], scratch, |pkt| {
            to.send(pkt).expect("tun write");
        })
        .expect("split_gso");
        if count > 1 {
            supers.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[test]
fn tcp_through_offload_tuns_arrives_intact() {
    let a = NetNs::new("mhio-oa").unwrap();
    let b = NetNs::new("mhio-ob").unwrap();
    let tun_a = a
        .run(|| Tun::create_with_offload("mhoa", 1400))
        .unwrap()
        .unwrap();
    let tun_b = b
        .run(|| Tun::create_with_offload("mhob", 1400))
        .unwrap()
        .unwrap();
    assert!(tun_a.has_vnet_hdr());
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
    let supers = AtomicUsize::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut buf = vec![0u8; 65536 + VNET_HDR_LEN];
            let mut scratch = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                common::wait_either(&tun_a, &tun_b, Duration::from_millis(50));
                pump(&tun_a, &tun_b, &mut buf, &mut scratch, &supers);
                pump(&tun_b, &tun_a, &mut buf, &mut scratch, &supers);
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
                c.write_all(&data)?;
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
    assert!(
        supers.load(Ordering::Relaxed) > 0,
        "the kernel never handed over a super-packet: offload not in effect"
    );
}
