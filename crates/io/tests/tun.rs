//! TUN devices inside a throw-away network namespace.
mod common;

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use common::{parse_udp, udp4, udp6, until, wait_readable};
use multihome_io::netlink::{self, NetlinkError};
use multihome_io::netns::{run_cmd, NetNs};
use multihome_io::tun::{Tun, TunError};

/// Reads from the TUN until a UDP packet to `port` shows up; returns its payload.
fn read_udp_to(tun: &Tun, port: u16) -> Vec<u8> {
    let mut buf = vec![0u8; 2048];
    until(Duration::from_secs(5), || {
        wait_readable(tun, Duration::from_millis(100));
        // Other traffic (IPv6 router solicitations, MLD) may come first: skip it.
        let n = tun.recv(&mut buf).ok()?;
        match parse_udp(&buf[..n]) {
            Some((p, payload)) if p == port => Some(payload.to_vec()),
            _ => None,
        }
    })
    .expect("packet never came out of the TUN")
}

#[test]
fn tun_carries_ipv4_and_ipv6_both_ways() {
    let ns = NetNs::new("mhio").unwrap();
    ns.run(|| {
        let tun = Tun::create("mhtun%d", 1380).unwrap();
        assert!(
            tun.name().starts_with("mhtun"),
            "kernel-chosen name {}",
            tun.name()
        );
        assert!(netlink::link_is_up(tun.name()).unwrap());
        let show = run_cmd(&["ip", "link", "show", tun.name()]).unwrap();
        assert!(show.contains("mtu 1380"), "{show}");

        tun.set_address("198.51.100.1/24".parse().unwrap()).unwrap();
        tun.set_address("2001:db8:1::1/64".parse().unwrap())
            .unwrap();
        // Setting the same address again is harmless (replace, not duplicate).
        tun.set_address("198.51.100.1/24".parse().unwrap()).unwrap();
        let addrs = netlink::interface_addresses(tun.name()).unwrap();
        assert!(
            addrs.contains(&"198.51.100.1/24".parse().unwrap()),
            "{addrs:?}"
        );
        assert!(
            addrs.contains(&"2001:db8:1::1/64".parse().unwrap()),
            "{addrs:?}"
        );

        for (local, peer, raw) in [
            ("198.51.100.1:5000", "198.51.100.2:6000", false),
            ("[2001:db8:1::1]:5001", "[2001:db8:1::2]:6001", true),
        ] {
            let local: SocketAddr = local.parse().unwrap();
            let peer: SocketAddr = peer.parse().unwrap();
            let sock = UdpSocket::bind(local).unwrap();
            sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();

            // Kernel to TUN: the route of the TUN's prefix sends the datagram to us.
            sock.send_to(b"to-tun", peer).unwrap();
            assert_eq!(read_udp_to(&tun, peer.port()), b"to-tun");

            // TUN to kernel: a packet we write is delivered to the local socket.
            let pkt = match (peer, local, raw) {
                (SocketAddr::V6(p), SocketAddr::V6(l), true) => udp6(
                    p.ip().octets(),
                    l.ip().octets(),
                    p.port(),
                    l.port(),
                    b"from-tun",
                ),
                (SocketAddr::V4(p), SocketAddr::V4(l), false) => udp4(
                    p.ip().octets(),
                    l.ip().octets(),
                    p.port(),
                    l.port(),
                    b"from-tun",
                ),
                _ => unreachable!(),
            };
            assert_eq!(tun.send(&pkt).unwrap(), pkt.len());
            let mut buf = [0u8; 64];
            let (n, from) = sock.recv_from(&mut buf).unwrap();
            assert_eq!((&buf[..n], from), (&b"from-tun"[..], peer));
        }
    })
    .unwrap();
}

#[test]
fn dropping_the_tun_removes_the_interface() {
    let ns = NetNs::new("mhio").unwrap();
    ns.run(|| {
        let tun = Tun::create("mhgone0", 1400).unwrap();
        assert!(netlink::link_index("mhgone0").is_ok());
        drop(tun);
        let gone = until(Duration::from_secs(2), || {
            matches!(
                netlink::link_index("mhgone0"),
                Err(NetlinkError::NoSuchInterface { .. })
            )
            .then_some(())
        });
        assert!(gone.is_some(), "interface survived its Tun");
    })
    .unwrap();
}

#[test]
fn bad_names_and_taken_names_are_refused() {
    assert!(matches!(
        Tun::create("a-name-far-too-long", 1400),
        Err(TunError::InvalidName { .. })
    ));
    let ns = NetNs::new("mhio").unwrap();
    ns.run(|| {
        let _first = Tun::create("mhdup0", 1400).unwrap();
        let e = Tun::create("mhdup0", 1400).unwrap_err();
        assert!(matches!(e, TunError::Create { .. }), "{e}");
        // A non-TUN interface of that name is refused too.
        run_cmd(&[
            "ip", "link", "add", "mhveth0", "type", "veth", "peer", "name", "mhveth1",
        ])
        .unwrap();
        assert!(matches!(
            Tun::create("mhveth0", 1400),
            Err(TunError::Create { .. })
        ));
    })
    .unwrap();
}
