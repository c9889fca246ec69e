//! The server's masquerade between three namespaces:
//! client (198.51.100.2) --ctun/rtun-- router --rup/iup-- internet (203.0.113.2).
//! The internet namespace has no route back to the client's network, so a reply can only
//! arrive if the router masqueraded the request to its uplink address 203.0.113.1.
mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::wait_readable;
use multihome_io::nat::{Masquerade, NatError};
use multihome_io::netns::{run_cmd, NetNs};
use multihome_io::sysctl;
use multihome_io::udp::LinkSocket;

fn topology() -> (NetNs, NetNs, NetNs) {
    let client = NetNs::new("mhio-c").unwrap();
    let router = NetNs::new("mhio-r").unwrap();
    let inet = NetNs::new("mhio-i").unwrap();
    let r = |args: &[&str]| router.exec(args).unwrap();
    r(&[
        "ip",
        "link",
        "add",
        "rtun",
        "type",
        "veth",
        "peer",
        "name",
        "ctun",
        "netns",
        client.name(),
    ]);
    r(&[
        "ip",
        "link",
        "add",
        "rup",
        "type",
        "veth",
        "peer",
        "name",
        "iup",
        "netns",
        inet.name(),
    ]);
    r(&["ip", "addr", "add", "198.51.100.1/24", "dev", "rtun"]);
    r(&["ip", "addr", "add", "203.0.113.1/24", "dev", "rup"]);
    r(&["ip", "link", "set", "rtun", "up"]);
    r(&["ip", "link", "set", "rup", "up"]);
    let c = |args: &[&str]| client.exec(args).unwrap();
    c(&["ip", "addr", "add", "198.51.100.2/24", "dev", "ctun"]);
    c(&["ip", "link", "set", "ctun", "up"]);
    c(&["ip", "route", "add", "default", "via", "198.51.100.1"]);
    inet.exec(&["ip", "addr", "add", "203.0.113.2/24", "dev", "iup"])
        .unwrap();
    inet.exec(&["ip", "link", "set", "iup", "up"]).unwrap();
    (client, router, inet)
}

#[test]
fn masquerade_rewrites_source_and_lets_replies_back() {
    let (client, router, inet) = topology();
    let nat = router
        .run(|| Masquerade::install("mhio_nat", "rup", "rtun"))
        .unwrap()
        .unwrap();
    assert_eq!(
        router
            .run(|| sysctl::read("net.ipv4.ip_forward"))
            .unwrap()
            .unwrap(),
        "1"
    );
    assert_eq!(
        router
            .run(|| sysctl::read("net.ipv6.conf.all.forwarding"))
            .unwrap()
            .unwrap(),
        "1"
    );
    // Installing twice replaces the table instead of failing or duplicating it.
    let again = router
        .run(|| Masquerade::install("mhio_nat", "rup", "rtun"))
        .unwrap()
        .unwrap();
    std::mem::forget(again); // same table as `nat`; `nat` removes it below
    let listed = router
        .exec(&["nft", "list", "table", "inet", "mhio_nat"])
        .unwrap();
    assert_eq!(listed.matches("masquerade").count(), 1, "{listed}");

    let server = inet
        .run(|| LinkSocket::bind(None, "203.0.113.2:8000".parse().unwrap()))
        .unwrap()
        .unwrap();
    let cl = client
        .run(|| LinkSocket::bind(None, "0.0.0.0:0".parse().unwrap()))
        .unwrap()
        .unwrap();
    cl.send_to(b"hello", "203.0.113.2:8000".parse().unwrap())
        .unwrap();
    assert!(
        wait_readable(&server, Duration::from_secs(5)),
        "request not forwarded"
    );
    let mut buf = [0u8; 64];
    let (n, from) = server.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"hello");
    assert_eq!(
        from.ip().to_string(),
        "203.0.113.1",
        "source not masqueraded"
    );

    server.send_to(b"world", from).unwrap();
    assert!(
        wait_readable(&cl, Duration::from_secs(5)),
        "reply not de-NATed back"
    );
    let (n, rfrom) = cl.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"world");
    assert_eq!(rfrom, "203.0.113.2:8000".parse::<SocketAddr>().unwrap());

    router.run(|| nat.remove()).unwrap().unwrap();
    let tables = router.exec(&["nft", "list", "tables"]).unwrap();
    assert!(!tables.contains("mhio_nat"), "{tables}");
}

#[test]
fn drop_removes_the_table_and_nft_errors_carry_stderr() {
    let ns = NetNs::new("mhio").unwrap();
    ns.run(|| {
        run_cmd(&[
            "ip", "link", "add", "up0", "type", "veth", "peer", "name", "up1",
        ])
        .unwrap();
        {
            let _nat = Masquerade::install("mhio_drop", "up0", "mh0").unwrap();
            assert!(run_cmd(&["nft", "list", "tables"])
                .unwrap()
                .contains("mhio_drop"));
        }
        assert!(!run_cmd(&["nft", "list", "tables"])
            .unwrap()
            .contains("mhio_drop"));

        // Removing a table that is already gone reports nft's own complaint.
        let nat = Masquerade::install("mhio_gone", "up0", "mh0").unwrap();
        run_cmd(&["nft", "delete", "table", "inet", "mhio_gone"]).unwrap();
        match nat.remove() {
            Err(NatError::Nft { stderr, .. }) => assert!(!stderr.is_empty()),
            other => panic!("expected an nft error, got {other:?}"),
        }
    })
    .unwrap();
}
