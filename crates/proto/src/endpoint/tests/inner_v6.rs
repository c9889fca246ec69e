//! IPv6 inside the tunnel: a peer's IPv6 `allowed_ips` carry its packets both ways (the
//! server's prefix routes and source check are family-aware), and a packet from another
//! source — the TUN device's own router solicitation from `fe80::` — is dropped at the
//! server and counted `rx_spoofed`, never delivered.

use super::*;
use std::net::Ipv6Addr;

const HOME6: &str = "fd00:200::2";
const ORIGIN6: &str = "2001:db8:50::2";

/// An IPv6/UDP packet of `size` bytes from `src` to `dst`, numbered `n`.
fn udp6(src: &str, dst: &str, n: u32, size: usize) -> Vec<u8> {
    let mut p = vec![0u8; size];
    let payload = (size - 40) as u16;
    p[0] = 0x60;
    p[4..6].copy_from_slice(&payload.to_be_bytes());
    p[6] = 17; // UDP
    p[7] = 64;
    p[8..24].copy_from_slice(&src.parse::<Ipv6Addr>().unwrap().octets());
    p[24..40].copy_from_slice(&dst.parse::<Ipv6Addr>().unwrap().octets());
    p[40..42].copy_from_slice(&5000u16.to_be_bytes());
    p[42..44].copy_from_slice(&6000u16.to_be_bytes());
    p[44..46].copy_from_slice(&payload.to_be_bytes());
    p[48..52].copy_from_slice(&n.to_be_bytes());
    p
}

/// The router solicitation a TUN device sends when it comes up: ICMPv6 type 133 from its
/// link-local address to all routers (`ff02::2`), hop limit 255.
fn router_solicitation() -> Vec<u8> {
    let mut p = udp6("fe80::3e42:5052:f838:3fd2", "ff02::2", 0, 52);
    p.truncate(48);
    p[4..6].copy_from_slice(&8u16.to_be_bytes());
    p[6] = 58; // ICMPv6
    p[7] = 255;
    p[40..48].copy_from_slice(&[133, 0, 0, 0, 0, 0, 0, 0]);
    p
}

#[test]
fn ipv6_packets_cross_both_ways_and_link_local_is_spoofed() {
    let mut p = Pair::new(vec![Link::new(10, Some(20.0))], Policy::Best, None, 61);
    let mut cfg = p.server_cfg.peers[0].clone();
    cfg.allowed_ips
        .push(format!("{HOME6}/128").parse().unwrap());
    p.server.set_peers(vec![cfg]);
    p.establish();
    let t = p.now;
    for n in 0..20 {
        p.client.handle_tun_packet(t, &udp6(HOME6, ORIGIN6, n, 400));
        p.server.handle_tun_packet(t, &udp6(ORIGIN6, HOME6, n, 400));
    }
    p.client.handle_tun_packet(t, &router_solicitation());
    p.run_until(t + Duration::from_millis(500));
    let up: Vec<&Vec<u8>> = p.delivered_up.iter().map(|(_, b)| b).collect();
    assert_eq!(
        up.len(),
        20,
        "every IPv6 packet from the client's address delivered"
    );
    assert!(
        up.iter().all(|b| b[0] >> 4 == 6 && b[6] == 17),
        "only the UDP ones"
    );
    assert_eq!(
        p.delivered_down.len(),
        20,
        "routed to the peer by its IPv6 prefix"
    );
    assert_eq!(
        p.server.counters().rx_spoofed,
        1,
        "the solicitation, counted once"
    );
    // A source outside allowed_ips of either family is spoofed too.
    let t = p.now;
    p.client
        .handle_tun_packet(t, &udp6("fd00:200::9", ORIGIN6, 99, 400));
    p.run_until(t + Duration::from_millis(500));
    assert_eq!(p.delivered_up.len(), 20);
    assert_eq!(p.server.counters().rx_spoofed, 2);
}
