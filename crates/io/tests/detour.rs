//! The relay's NAT detours between three namespaces:
//! client (198.51.100.2) --cr/rc-- relay (198.51.100.1, 203.0.113.1) --rs/sr-- server (203.0.113.2).
//! The server has no route to the client's network, so a reply can only come back if the
//! relay rewrote the request's source to its own address. UDP detours carry tunnel paths,
//! TCP detours kernel MPTCP subflows.
mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::wait_readable;
use multihome_io::detour::{NatDetour, Proto, RelayTable};
use multihome_io::netns::NetNs;
use multihome_io::udp::LinkSocket;

fn topology() -> (NetNs, NetNs, NetNs) {
    let client = NetNs::new("mhdt-c").unwrap();
    let relay = NetNs::new("mhdt-r").unwrap();
    let server = NetNs::new("mhdt-s").unwrap();
    let r = |args: &[&str]| relay.exec(args).unwrap();
    for (here, there, ns) in [("rc", "cr", &client), ("rs", "sr", &server)] {
        r(&[
            "ip",
            "link",
            "add",
            here,
            "type",
            "veth",
            "peer",
            "name",
            there,
            "netns",
            ns.name(),
        ]);
        r(&["ip", "link", "set", here, "up"]);
    }
    r(&["ip", "addr", "add", "198.51.100.1/24", "dev", "rc"]);
    r(&["ip", "addr", "add", "203.0.113.1/24", "dev", "rs"]);
    client
        .exec(&["ip", "addr", "add", "198.51.100.2/24", "dev", "cr"])
        .unwrap();
    client.exec(&["ip", "link", "set", "cr", "up"]).unwrap();
    server
        .exec(&["ip", "addr", "add", "203.0.113.2/24", "dev", "sr"])
        .unwrap();
    server.exec(&["ip", "link", "set", "sr", "up"]).unwrap();
    (client, relay, server)
}

fn bind(ns: &NetNs, addr: &str) -> LinkSocket {
    let a: SocketAddr = addr.parse().unwrap();
    ns.run(move || LinkSocket::bind(None, a)).unwrap().unwrap()
}

fn recv(s: &LinkSocket) -> Option<(Vec<u8>, SocketAddr)> {
    if !wait_readable(s, Duration::from_millis(500)) {
        return None;
    }
    let mut buf = [0u8; 256];
    let (n, from) = s.recv_from(&mut buf).unwrap();
    Some((buf[..n].to_vec(), from))
}

#[test]
fn nat_detour_forwards_both_ways_until_removed() {
    let (client, relay, server) = topology();
    let table = relay
        .run(|| RelayTable::install("t1", (40000, 40099)))
        .unwrap()
        .unwrap();
    // Installing again (a crashed relay's leftover) replaces the table.
    let again = relay
        .run(|| RelayTable::install("t1", (40000, 40099)))
        .unwrap()
        .unwrap();
    std::mem::forget(again);
    let srv = bind(&server, "203.0.113.2:9000");
    let cl = bind(&client, "198.51.100.2:4000");
    let other = bind(&client, "198.51.100.2:4001");
    let d = NatDetour {
        proto: Proto::Udp,
        source: "198.51.100.2:4000".parse().unwrap(),
        relay_port: 40001,
        server: "203.0.113.2:9000".parse().unwrap(),
    };
    let relay_addr: SocketAddr = "198.51.100.1:40001".parse().unwrap();
    relay
        .run(|| table.add(&d, Duration::from_secs(60)))
        .unwrap()
        .unwrap();
    relay
        .run(|| table.renew(&d, Duration::from_secs(90)))
        .unwrap()
        .unwrap();

    cl.send_to(b"hello", relay_addr).unwrap();
    let (got, from) = recv(&srv).expect("request not forwarded");
    assert_eq!(got, b"hello");
    assert_eq!(from.ip().to_string(), "203.0.113.1", "source not rewritten");
    srv.send_to(b"world", from).unwrap();
    let (got, rfrom) = recv(&cl).expect("reply not forwarded back");
    assert_eq!(got, b"world");
    assert_eq!(rfrom, relay_addr);

    // Another source port of the same client is not forwarded.
    other.send_to(b"stranger", relay_addr).unwrap();
    assert!(
        recv(&srv).is_none(),
        "a source without a detour was forwarded"
    );

    // After removal nothing is forwarded, although conntrack still holds the flow.
    relay.run(|| table.remove(&d)).unwrap().unwrap();
    cl.send_to(b"again", relay_addr).unwrap();
    assert!(recv(&srv).is_none(), "forwarded after removal");
    srv.send_to(b"late", from).unwrap();
    assert!(recv(&cl).is_none(), "reply forwarded after removal");

    relay.run(|| table.remove_table()).unwrap().unwrap();
    let tables = relay.exec(&["nft", "list", "tables"]).unwrap();
    assert!(!tables.contains("multihome_relay_t1"), "{tables}");
}

#[test]
fn kernel_timeout_expires_a_detour_and_drop_removes_the_table() {
    let (client, relay, server) = topology();
    let srv = bind(&server, "203.0.113.2:9000");
    let cl = bind(&client, "198.51.100.2:4000");
    let d = NatDetour {
        proto: Proto::Udp,
        source: "198.51.100.2:4000".parse().unwrap(),
        relay_port: 40002,
        server: "203.0.113.2:9000".parse().unwrap(),
    };
    relay
        .run(|| {
            let table = RelayTable::install("t2", (40000, 40099)).unwrap();
            table.add(&d, Duration::from_secs(1)).unwrap();
            cl.send_to(b"one", "198.51.100.1:40002".parse().unwrap())
                .unwrap();
            assert!(recv(&srv).is_some(), "not forwarded before the timeout");
            std::thread::sleep(Duration::from_millis(1600));
            cl.send_to(b"two", "198.51.100.1:40002".parse().unwrap())
                .unwrap();
            assert!(recv(&srv).is_none(), "forwarded after the kernel timeout");
        })
        .unwrap();
    let tables = relay.exec(&["nft", "list", "tables"]).unwrap();
    assert!(!tables.contains("multihome_relay_t2"), "{tables}");
}

/// A TCP connection from `from` to `to`, made inside `ns`.
fn tcp_connect(ns: &NetNs, from: &str, to: &str) -> std::io::Result<std::net::TcpStream> {
    let (from, to): (SocketAddr, SocketAddr) = (from.parse().unwrap(), to.parse().unwrap());
    ns.run(move || {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        s.bind(&from.into())?;
        s.connect_timeout(&to.into(), Duration::from_secs(2))?;
        Ok(std::net::TcpStream::from(s))
    })
    .unwrap()
}

#[test]
fn tcp_detour_forwards_exactly_its_source_until_removed() {
    use std::io::{Read, Write};
    let (client, relay, server) = topology();
    let table = relay
        .run(|| RelayTable::install("t3", (40000, 40099)))
        .unwrap()
        .unwrap();
    let listener = server
        .run(|| std::net::TcpListener::bind("203.0.113.2:9000"))
        .unwrap()
        .unwrap();
    let d = NatDetour {
        proto: Proto::Tcp,
        source: "198.51.100.2:5000".parse().unwrap(),
        relay_port: 40003,
        server: "203.0.113.2:9000".parse().unwrap(),
    };
    relay
        .run(|| table.add(&d, Duration::from_secs(60)))
        .unwrap()
        .unwrap();
    let mut c = tcp_connect(&client, "198.51.100.2:5000", "198.51.100.1:40003").unwrap();
    let (mut a, peer) = listener.accept().unwrap();
    assert_eq!(peer.ip().to_string(), "203.0.113.1", "source not rewritten");
    c.write_all(b"subflow").unwrap();
    let mut buf = [0u8; 7];
    a.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"subflow");
    a.write_all(b"ack").unwrap();
    let mut back = [0u8; 3];
    c.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"ack");

    // Another source port reaches the relay itself, where nothing listens.
    assert!(
        tcp_connect(&client, "198.51.100.2:5001", "198.51.100.1:40003").is_err(),
        "a source without a detour was forwarded"
    );
    // The UDP detour of the same source and port is a different detour.
    let cl = bind(&client, "198.51.100.2:5000");
    let srv_udp = bind(&server, "203.0.113.2:9000");
    cl.send_to(b"udp", "198.51.100.1:40003".parse().unwrap())
        .unwrap();
    assert!(recv(&srv_udp).is_none(), "a TCP detour forwarded UDP");

    // After removal the established connection's packets are dropped at the relay.
    relay.run(|| table.remove(&d)).unwrap().unwrap();
    c.write_all(b"late").unwrap();
    a.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut late = [0u8; 4];
    assert!(a.read(&mut late).is_err(), "forwarded after removal");
    relay.run(|| table.remove_table()).unwrap().unwrap();
}
