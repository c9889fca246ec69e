//! Per-link UDP sockets between two namespaces joined by a veth pair.
mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{until, wait_readable};
use multihome_io::netns::{run_cmd, NetNs};
use multihome_io::udp::{classify, ErrorClass, LinkSocket, RecvBuf};

/// Namespaces `a` and `b` joined by veth `va` (in a) <-> `vb` (in b), with
/// 192.0.2.1/24 + 2001:db8::1/64 on `va` and .2 / ::2 on `vb`.
fn pair() -> (NetNs, NetNs) {
    common::veth_pair(["mhio-a", "mhio-b"], ["va", "vb"])
}

/// Receives exactly `count` datagrams (or panics after 5 s).
fn recv_n(sock: &LinkSocket, count: usize) -> Vec<(Vec<u8>, SocketAddr)> {
    let mut bufs: Vec<RecvBuf> = (0..count).map(|_| RecvBuf::new(2048)).collect();
    let mut got = 0;
    until(Duration::from_secs(5), || {
        wait_readable(sock, Duration::from_millis(100));
        match sock.recv_batch(&mut bufs[got..]) {
            Ok(n) => got += n,
            Err(e) => assert_eq!(classify(&e), ErrorClass::WouldBlock, "{e}"),
        }
        (got == count).then_some(())
    })
    .unwrap_or_else(|| panic!("received {got} of {count} datagrams"));
    bufs.iter()
        .map(|b| (b.packet().to_vec(), b.source()))
        .collect()
}

#[test]
fn batch_of_64_datagrams_crosses_intact_both_families() {
    let (a, b) = pair();
    for (la, lb) in [
        ("192.0.2.1:0", "192.0.2.2:7000"),
        ("[2001:db8::1]:0", "[2001:db8::2]:7001"),
    ] {
        let sa = a
            .run(|| LinkSocket::bind(Some("va"), la.parse().unwrap()))
            .unwrap()
            .unwrap();
        let sb = b
            .run(|| LinkSocket::bind(Some("vb"), lb.parse().unwrap()))
            .unwrap()
            .unwrap();
        assert_eq!(sa.interface(), Some("va"));
        let (rcv, snd) = sa.buffer_sizes().unwrap();
        assert!(
            rcv >= 1 << 20 && snd >= 1 << 20,
            "buffers not enlarged: {rcv} {snd}"
        );

        let dst = sb.local_addr().unwrap();
        let payloads: Vec<Vec<u8>> = (0..64u32)
            .map(|i| (0..(40 + i * 20)).map(|j| (i * 31 + j) as u8).collect())
            .collect();
        let msgs: Vec<(SocketAddr, &[u8])> = payloads.iter().map(|p| (dst, &p[..])).collect();
        assert_eq!(sa.send_batch(&msgs).unwrap(), 64);
        let got = recv_n(&sb, 64);
        for (i, (data, from)) in got.iter().enumerate() {
            assert_eq!(data, &payloads[i], "datagram {i} changed or reordered");
            assert_eq!(*from, sa.local_addr().unwrap());
        }
        // And back with the single-datagram calls.
        sb.send_to(b"ack", sa.local_addr().unwrap()).unwrap();
        assert!(wait_readable(&sa, Duration::from_secs(5)));
        let mut buf = [0u8; 16];
        let (n, from) = sa.recv_from(&mut buf).unwrap();
        assert_eq!((&buf[..n], from), (&b"ack"[..], dst));
    }
}

/// The routing table of `a` sends 203.0.113.0/24 out of a black-hole device; a socket pinned
/// to `va` must still deliver through `va` (SO_BINDTODEVICE beats the routing table), while
/// an unpinned socket follows the table and its datagram never reaches `b`.
#[test]
fn pinned_socket_leaves_by_its_interface_whatever_the_routes_say() {
    let (a, b) = pair();
    a.exec(&[
        "ip",
        "link",
        "add",
        "hole",
        "type",
        "veth",
        "peer",
        "name",
        "hole-peer",
    ])
    .unwrap();
    a.exec(&["ip", "link", "set", "hole", "up"]).unwrap();
    a.exec(&["ip", "link", "set", "hole-peer", "up"]).unwrap();
    a.exec(&["ip", "route", "add", "203.0.113.0/24", "dev", "hole"])
        .unwrap();
    b.exec(&["ip", "addr", "add", "203.0.113.9/32", "dev", "vb"])
        .unwrap();

    let rx = b
        .run(|| LinkSocket::bind(Some("vb"), "203.0.113.9:7100".parse().unwrap()))
        .unwrap()
        .unwrap();
    let dst = rx.local_addr().unwrap();
    let unpinned = a
        .run(|| LinkSocket::bind(None, "0.0.0.0:0".parse().unwrap()))
        .unwrap()
        .unwrap();
    unpinned.send_to(b"via-routes", dst).unwrap();
    let pinned = a
        .run(|| LinkSocket::bind(Some("va"), "0.0.0.0:0".parse().unwrap()))
        .unwrap()
        .unwrap();
    pinned.send_to(b"via-va", dst).unwrap();

    let got = recv_n(&rx, 1);
    assert_eq!(got[0].0, b"via-va");
    assert_eq!(
        got[0].1.ip(),
        "192.0.2.1".parse::<std::net::IpAddr>().unwrap()
    );
    assert!(
        !wait_readable(&rx, Duration::from_millis(300)),
        "unpinned datagram leaked via va"
    );
}

#[test]
fn unreachable_and_vanished_interface_errors_are_classified() {
    let (a, _b) = pair();
    a.run(|| {
        // No route at all to this destination from an unpinned socket.
        let s = LinkSocket::bind(None, "0.0.0.0:0".parse().unwrap()).unwrap();
        let e = s
            .send_to(b"x", "198.51.100.1:9".parse().unwrap())
            .unwrap_err();
        assert_eq!(classify(&e), ErrorClass::Unreachable, "{e}");
        let e = s
            .send_batch(&[("198.51.100.1:9".parse().unwrap(), b"x")])
            .unwrap_err();
        assert_eq!(classify(&e), ErrorClass::Unreachable, "{e}");

        // The pinned interface disappears under the socket.
        run_cmd(&[
            "ip", "link", "add", "gone0", "type", "veth", "peer", "name", "gone1",
        ])
        .unwrap();
        run_cmd(&["ip", "link", "set", "gone0", "up"]).unwrap();
        let s = LinkSocket::bind(Some("gone0"), "0.0.0.0:0".parse().unwrap()).unwrap();
        run_cmd(&["ip", "link", "del", "gone0"]).unwrap();
        let e = s.send_to(b"x", "192.0.2.2:9".parse().unwrap()).unwrap_err();
        assert_eq!(classify(&e), ErrorClass::DeviceGone, "{e}");
    })
    .unwrap();
}
