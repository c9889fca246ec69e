//! UDP GSO and GRO on link sockets between two namespaces joined by a veth pair (MTU 1500,
//! offloads as the kernel sets them): runs of datagrams sent as super-datagrams arrive as
//! the same datagrams, in order, whether the reader coalesces (GRO on) or not; a kernel
//! that refuses super-datagrams makes the socket fall back without losing any.
mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{until, wait_readable};
use multihome_io::netns::NetNs;
use multihome_io::udp::{classify, ErrorClass, LinkSocket, RecvBuf};

/// Namespaces joined by veth `ga` (192.0.2.1, 2001:db8::1) <-> `gb` (.2, ::2).
fn pair() -> (NetNs, NetNs) {
    common::veth_pair(["mhgso-a", "mhgso-b"], ["ga", "gb"])
}

/// 3 runs as the tunnel makes them: 45 datagrams of 1400 bytes and a 700-byte tail (each
/// datagram numbered in its bytes, so order and integrity are checked).
fn payloads() -> Vec<Vec<u8>> {
    (0..3)
        .flat_map(|run| (0..46).map(move |i| (run, i)))
        .map(|(run, i)| {
            let len = if i == 45 { 700 } else { 1400 };
            let tag = (run * 46 + i) as u8;
            (0..len).map(|j| tag.wrapping_add(j as u8)).collect()
        })
        .collect()
}

/// Reads datagrams until `count` arrived (or 5 s passed), cutting coalesced reads.
fn recv_datagrams(sock: &LinkSocket, count: usize) -> Vec<(Vec<u8>, SocketAddr)> {
    let mut bufs: Vec<RecvBuf> = (0..16).map(|_| RecvBuf::new(65_536)).collect();
    let mut got = Vec::new();
    until(Duration::from_secs(5), || {
        wait_readable(sock, Duration::from_millis(100));
        match sock.recv_batch(&mut bufs) {
            Ok(n) => {
                for b in &bufs[..n] {
                    assert!(!b.is_truncated());
                    got.extend(b.segments().map(|d| (d.to_vec(), b.source())));
                }
            }
            Err(e) => assert_eq!(classify(&e), ErrorClass::WouldBlock, "{e}"),
        }
        (got.len() >= count).then_some(())
    });
    got
}

fn sockets(a: &NetNs, b: &NetNs, la: &str, lb: &str) -> (LinkSocket, LinkSocket) {
    let sa = a.run(|| LinkSocket::bind(Some("ga"), la.parse().unwrap()));
    let sb = b.run(|| LinkSocket::bind(Some("gb"), lb.parse().unwrap()));
    (sa.unwrap().unwrap(), sb.unwrap().unwrap())
}

#[test]
fn gso_runs_arrive_as_their_datagrams_with_gro_on_and_off() {
    let (a, b) = pair();
    let want = payloads();
    for (la, lb) in [
        ("192.0.2.1:0", "[::]:7100"), // IPv4 into a dual-stack reader
        ("[2001:db8::1]:0", "[2001:db8::2]:7101"),
    ] {
        for gro in [true, false] {
            let (sa, sb) = sockets(&a, &b, la, lb);
            assert_eq!(sb.set_gro(gro), gro);
            let dst: SocketAddr = match sa.local_addr().unwrap() {
                SocketAddr::V4(_) => "192.0.2.2:7100".parse().unwrap(),
                SocketAddr::V6(_) => lb.parse().unwrap(),
            };
            let msgs: Vec<(SocketAddr, &[u8])> = want.iter().map(|p| (dst, &p[..])).collect();
            assert_eq!(sa.send_batch(&msgs).unwrap(), want.len());
            let st = sa.offload_stats();
            assert_eq!(
                (st.gso_sends, st.gso_segments, st.gso_fallbacks),
                (3, 138, 0)
            );
            let got = recv_datagrams(&sb, want.len());
            let from = sa.local_addr().unwrap();
            assert!(got.iter().all(|(_, src)| *src == from), "{la} gro {gro}");
            let data: Vec<Vec<u8>> = got.into_iter().map(|(d, _)| d).collect();
            assert!(data == want, "{la} gro {gro}: datagrams differ");
            let rs = sb.offload_stats();
            if gro {
                // veth hands the super-datagram on whole: it reaches the reader coalesced.
                assert!(rs.gro_reads >= 1, "{la}: {rs:?}");
            } else {
                assert_eq!(rs.gro_reads, 0, "{la}");
            }
        }
    }
}

/// A kernel that refuses super-datagrams (here because the socket sends without UDP
/// checksums, `SO_NO_CHECK`, which GSO cannot do: `EINVAL`; a device without checksum
/// offload gives `EIO` on older kernels): each refused run is resent datagram by datagram
/// at once, and after repeated refusals the socket stops trying.
#[test]
fn refused_super_datagrams_are_resent_one_by_one_then_gso_is_off() {
    let (a, b) = pair();
    let (sa, sb) = sockets(&a, &b, "192.0.2.1:0", "192.0.2.2:7102");
    let one: libc::c_int = 1;
    // SAFETY: passes a live c_int and its exact size.
    let rc = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&sa),
            libc::SOL_SOCKET,
            libc::SO_NO_CHECK,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0);
    sb.set_gro(true);
    let want: Vec<Vec<u8>> = (0..3).flat_map(|_| payloads()).collect();
    let dst: SocketAddr = "192.0.2.2:7102".parse().unwrap();
    let msgs: Vec<(SocketAddr, &[u8])> = want.iter().map(|p| (dst, &p[..])).collect();
    let mut sent = 0;
    while sent < msgs.len() {
        sent += sa.send_batch(&msgs[sent..]).unwrap();
    }
    let st = sa.offload_stats();
    // 9 runs: the first 8 refused and resent, then GSO off and the 9th sent plainly.
    assert!(!st.gso, "{st:?}");
    assert_eq!((st.gso_fallbacks, st.gso_sends), (8, 0));
    let data: Vec<Vec<u8>> = recv_datagrams(&sb, want.len())
        .into_iter()
        .map(|(d, _)| d)
        .collect();
    assert!(data == want, "datagrams lost or reordered in the fallback");
}
