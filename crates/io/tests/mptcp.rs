//! Kernel MPTCP's userspace path manager between two namespaces:
//! client (10.9.0.2 and 10.9.0.3, `pm_type = 1`) --c0/s0-- server (10.9.0.1, in-kernel PM).
//! The events arrive decoded, and a subflow is created from a chosen local address *and
//! port* (the one a detour's relay entry is for), then destroyed.
mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use common::{until, wait_readable};
use multihome_io::mptcp::{
    bind_detour_socket, pm_type, set_userspace_pm, MptcpEvent, Pm, PmEvents,
};
use multihome_io::netns::NetNs;

const IPPROTO_MPTCP: i32 = 262;

fn mptcp_socket() -> socket2::Socket {
    socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::STREAM,
        Some(socket2::Protocol::from(IPPROTO_MPTCP)),
    )
    .expect("an MPTCP socket (is MPTCP in this kernel?)")
}

/// Waits for the first event `pick` accepts.
fn next<T>(ev: &mut PmEvents, mut pick: impl FnMut(&MptcpEvent) -> Option<T>) -> T {
    let mut seen = Vec::new();
    until(Duration::from_secs(5), || {
        wait_readable(ev, Duration::from_millis(100));
        let start = seen.len();
        ev.poll_events(&mut seen).unwrap();
        seen[start..].iter().find_map(&mut pick)
    })
    .unwrap_or_else(|| panic!("event not seen; got {seen:?}"))
}

#[test]
fn subflow_from_a_chosen_port_joins_and_is_destroyed() {
    let client = NetNs::new("mhmp-c").unwrap();
    let server = NetNs::new("mhmp-s").unwrap();
    let c = |args: &[&str]| client.exec(args).unwrap();
    c(&[
        "ip",
        "link",
        "add",
        "c0",
        "type",
        "veth",
        "peer",
        "name",
        "s0",
        "netns",
        server.name(),
    ]);
    c(&["ip", "addr", "add", "10.9.0.2/24", "dev", "c0"]);
    c(&["ip", "addr", "add", "10.9.0.3/24", "dev", "c0"]);
    c(&["ip", "link", "set", "c0", "up"]);
    let s = |args: &[&str]| server.exec(args).unwrap();
    s(&["ip", "addr", "add", "10.9.0.1/24", "dev", "s0"]);
    s(&["ip", "link", "set", "s0", "up"]);
    s(&["ip", "mptcp", "limits", "set", "subflow", "2"]);

    let (mut pm, mut ev, old) = client
        .run(|| {
            let old = set_userspace_pm().unwrap();
            assert_eq!(pm_type().unwrap(), 1);
            let pm = Pm::open().unwrap();
            let ev = pm.events().unwrap();
            (pm, ev, old)
        })
        .unwrap();
    assert_eq!(
        old, 0,
        "a fresh namespace starts with the in-kernel path manager"
    );

    let srv: SocketAddr = "10.9.0.1:9100".parse().unwrap();
    let listener = server
        .run(|| {
            let l = mptcp_socket();
            l.bind(&srv.into()).unwrap();
            l.listen(4).unwrap();
            l
        })
        .unwrap();
    let reader = std::thread::spawn(move || {
        let (a, _) = listener.accept().unwrap();
        let mut a = std::net::TcpStream::from(a);
        let mut all = Vec::new();
        a.read_to_end(&mut all).unwrap();
        all.len()
    });
    let mut conn = client
        .run(|| {
            let s = mptcp_socket();
            s.connect(&srv.into()).unwrap();
            std::net::TcpStream::from(s)
        })
        .unwrap();
    conn.write_all(&[1u8; 4096]).unwrap();

    let (token, first) = next(&mut ev, |e| match e {
        MptcpEvent::Established {
            token,
            local,
            remote,
            server_side: false,
        } if *remote == srv => Some((*token, *local)),
        _ => None,
    });
    assert_eq!(first.ip().to_string(), "10.9.0.2");

    // The detour's way: a UDP socket picks the port, the subflow binds the same one.
    let udp = client
        .run(|| bind_detour_socket("10.9.0.3".parse().unwrap()).unwrap())
        .unwrap();
    let local = udp.local_addr().unwrap();
    pm.subflow_create(token, 1, local, srv).unwrap();
    next(&mut ev, |e| match e {
        MptcpEvent::SubEstablished {
            token: t,
            local: l,
            remote,
        } if *t == token && *l == local && *remote == srv => Some(()),
        _ => None,
    });
    conn.write_all(&[2u8; 65536]).unwrap();

    pm.subflow_destroy(token, local, srv).unwrap();
    next(&mut ev, |e| match e {
        MptcpEvent::SubClosed {
            token: t, local: l, ..
        } if *t == token && *l == local => Some(()),
        _ => None,
    });
    // The connection goes on over its first subflow.
    conn.write_all(&[3u8; 65536]).unwrap();
    drop(conn);
    next(&mut ev, |e| match e {
        MptcpEvent::Closed { token: t } if *t == token => Some(()),
        _ => None,
    });
    assert_eq!(reader.join().unwrap(), 4096 + 2 * 65536);
    // Unknown token: the kernel refuses.
    assert!(pm.subflow_create(token ^ 1, 2, local, srv).is_err());
}
