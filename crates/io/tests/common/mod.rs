//! Helpers shared by the namespace integration tests: waiting on fds and building packets.
#![allow(dead_code)] // each test binary uses a different subset

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Waits until `fd` is readable or `timeout` passes; true if readable.
pub fn wait_readable(fd: &impl AsRawFd, timeout: Duration) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut p, 1, timeout.as_millis() as libc::c_int) };
    n > 0
}

/// Waits until `a` or `b` is readable or `timeout` passes.
pub fn wait_either(a: &impl AsRawFd, b: &impl AsRawFd, timeout: Duration) {
    let mut p = [a.as_raw_fd(), b.as_raw_fd()].map(|fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    });
    // SAFETY: two valid pollfds.
    unsafe { libc::poll(p.as_mut_ptr(), 2, timeout.as_millis() as libc::c_int) };
}

/// Calls `f` until it returns Some or the deadline passes.
pub fn until<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn csum(mut acc: u64, data: &[u8]) -> u64 {
    let mut it = data.chunks_exact(2);
    for w in &mut it {
        acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [b] = it.remainder() {
        acc += u64::from(*b) << 8;
    }
    acc
}

fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// An IPv4/UDP packet with valid IP and UDP checksums.
pub fn udp4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let total = 28 + payload.len();
    let mut p = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 17, 0, 0];
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    let c = !fold(csum(0, &p));
    p[10..12].copy_from_slice(&c.to_be_bytes());
    let ulen = (8 + payload.len()) as u16;
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&ulen.to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    let c = !fold(csum(csum(csum(17 + u64::from(ulen), &src), &dst), &u));
    u[6..8].copy_from_slice(&c.to_be_bytes());
    p.extend(u);
    p
}

/// An IPv6/UDP packet with a valid UDP checksum.
pub fn udp6(src: [u8; 16], dst: [u8; 16], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let ulen = (8 + payload.len()) as u16;
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&ulen.to_be_bytes());
    p.extend_from_slice(&[17, 64]);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&ulen.to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    let c = !fold(csum(csum(csum(17 + u64::from(ulen), &src), &dst), &u));
    u[6..8].copy_from_slice(&c.to_be_bytes());
    p.extend(u);
    p
}

/// (destination port, payload) of an IPv4 or IPv6 UDP packet, None for anything else.
pub fn parse_udp(pkt: &[u8]) -> Option<(u16, &[u8])> {
    let l4 = match pkt.first()? >> 4 {
        4 if pkt.get(9) == Some(&17) => usize::from(pkt[0] & 0x0f) * 4,
        6 if pkt.get(6) == Some(&17) => 40,
        _ => return None,
    };
    let u = pkt.get(l4..)?;
    if u.len() < 8 {
        return None;
    }
    Some((u16::from_be_bytes([u[2], u[3]]), &u[8..]))
}

/// Namespaces `names[0]` and `names[1]` joined by veth `devs[0]` (in the first) <->
/// `devs[1]` (in the second), with 192.0.2.1/24 + 2001:db8::1/64 on the first end and .2 /
/// ::2 on the second (no duplicate address detection), both up.
pub fn veth_pair(
    names: [&str; 2],
    devs: [&str; 2],
) -> (multihome_io::netns::NetNs, multihome_io::netns::NetNs) {
    use multihome_io::netns::NetNs;
    let a = NetNs::new(names[0]).unwrap();
    let b = NetNs::new(names[1]).unwrap();
    a.exec(&[
        "ip",
        "link",
        "add",
        devs[0],
        "type",
        "veth",
        "peer",
        "name",
        devs[1],
        "netns",
        b.name(),
    ])
    .unwrap();
    for (ns, dev, v4, v6) in [
        (&a, devs[0], "192.0.2.1/24", "2001:db8::1/64"),
        (&b, devs[1], "192.0.2.2/24", "2001:db8::2/64"),
    ] {
        ns.exec(&["ip", "addr", "add", v4, "dev", dev]).unwrap();
        ns.exec(&["ip", "addr", "add", v6, "dev", dev, "nodad"])
            .unwrap();
        ns.exec(&["ip", "link", "set", dev, "up"]).unwrap();
    }
    (a, b)
}
