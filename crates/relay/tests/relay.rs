//! `multihome relay` end to end between three namespaces:
//! client (198.51.100.2) --cr/rc-- relay (198.51.100.1, 203.0.113.1) --rs/sr-- server (203.0.113.2).
//! The server has no route to the client's network: a reply reaches the client only through
//! the relay. The client side is the real `DetourClient` over a real UDP socket.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::Duration;

use multihome_io::netns::NetNs;
use multihome_io::udp::LinkSocket;
use multihome_proto::crypto::StaticSecret;
use multihome_proto::detour::{
    Answer, ClientConfig, ClientEvent, DetourClient, Mode, Request, Status,
};
use multihome_proto::Instant;

const RELAY: &str = "198.51.100.1:51900";
const SERVER: &str = "203.0.113.2:9000";

fn wait_readable(fd: &impl AsRawFd, timeout: Duration) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, timeout.as_millis() as libc::c_int) > 0 }
}

fn topology() -> (NetNs, NetNs, NetNs) {
    let client = NetNs::new("mhrl-c").unwrap();
    let relay = NetNs::new("mhrl-r").unwrap();
    let server = NetNs::new("mhrl-s").unwrap();
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
    for (ns, dev, addr) in [
        (&client, "cr", "198.51.100.2/24"),
        (&server, "sr", "203.0.113.2/24"),
    ] {
        ns.exec(&["ip", "addr", "add", addr, "dev", dev]).unwrap();
        ns.exec(&["ip", "link", "set", dev, "up"]).unwrap();
    }
    (client, relay, server)
}

struct RunningRelay {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
    control: PathBuf,
    _dir: tempfile::TempDir,
}

impl RunningRelay {
    /// Starts the relay inside `ns` with `extra` config lines; the client key 1 is listed.
    fn start(ns: &NetNs, name: &str, extra: &str) -> RunningRelay {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("relay.key"), relay_key().to_base64()).unwrap();
        let control = dir.path().join("relay.sock");
        let cfg = format!(
            "[relay]\nlisten = \"0.0.0.0:51900\"\nprivate_key_file = \"relay.key\"\n\
             name = \"{name}\"\nports = \"40000-40999\"\ncontrol_socket = \"{}\"\n{extra}\n\
             [[client]]\nname = \"laptop\"\npublic_key = \"{}\"\n",
            control.display(),
            client_key(1).public_key().to_base64()
        );
        let path = dir.path().join("relay.toml");
        std::fs::write(&path, cfg).unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = ns
            .run(move || {
                std::thread::spawn(move || {
                    multihome_relay::run_until(&path, async move {
                        let _ = rx.await;
                    })
                })
            })
            .unwrap();
        for _ in 0..200 {
            if control.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(control.exists(), "relay did not start");
        RunningRelay {
            stop: Some(tx),
            thread: Some(thread),
            control,
            _dir: dir,
        }
    }

    fn status(&self) -> serde_json::Value {
        let mut s = std::os::unix::net::UnixStream::connect(&self.control).unwrap();
        // The request line `multihome status` sends; the daemon answers it at once.
        s.write_all(b"status\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.thread.take().unwrap().join().unwrap().unwrap();
    }
}

impl Drop for RunningRelay {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The relay's dashboard (on the relay's loopback): the page, the status document with the
/// detours installed as events, the tunnel forwarding plotted.
fn dashboard_shows_the_detours(ns: &NetNs) {
    // The history is sampled once a second: wait for a sample after the exchanges above.
    std::thread::sleep(Duration::from_millis(1100));
    let get = |path: &'static str| {
        ns.run(move || {
            let addr = "127.0.0.1:8089".parse().unwrap();
            multihome_runtime::http::get(addr, path, Duration::from_secs(5)).unwrap()
        })
        .unwrap()
    };
    let (code, page) = get("/");
    assert_eq!(code, 200);
    assert!(String::from_utf8_lossy(&page).contains("uPlot.iife.min.js"));
    let doc: serde_json::Value = serde_json::from_slice(&get("/api/status").1).unwrap();
    assert_eq!(doc["role"], "relay", "{doc}");
    let texts: Vec<&str> = doc["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["text"].as_str())
        .collect();
    assert_eq!(texts[0], "relay started", "{doc}");
    assert!(
        texts.iter().any(|t| t.starts_with("detours installed")),
        "{texts:?}"
    );
    let hist: serde_json::Value = serde_json::from_slice(&get("/api/history").1).unwrap();
    assert_eq!(hist["links"][0]["key"], "e2e1/tunnel detours", "{hist}");
    // The tunnel exchange's two datagrams were forwarded: "via tunnel" and "reply".
    assert_eq!(hist["links"][0]["tx_bytes"], 10 + 5, "{hist}");
    // Read-only: anything but GET and HEAD is refused.
    let post = ns
        .run(|| {
            let mut s = std::net::TcpStream::connect("127.0.0.1:8089").unwrap();
            s.write_all(b"POST /api/status HTTP/1.1\r\n\r\n").unwrap();
            let mut reply = String::new();
            s.read_to_string(&mut reply).unwrap();
            reply
        })
        .unwrap();
    assert!(post.starts_with("HTTP/1.1 405 "), "{post}");
}

fn relay_key() -> StaticSecret {
    StaticSecret::from_bytes([42; 32])
}

fn client_key(i: u8) -> StaticSecret {
    StaticSecret::from_bytes([i; 32])
}

fn detour_client(key: u8) -> DetourClient {
    let mut cfg = ClientConfig::new(client_key(key), relay_key().public_key(), 1 << 50);
    cfg.attempts = 1;
    DetourClient::new(cfg, [key; 32])
}

fn bind(ns: &NetNs, addr: &str) -> LinkSocket {
    let a: SocketAddr = addr.parse().unwrap();
    ns.run(move || LinkSocket::bind(None, a)).unwrap().unwrap()
}

fn recv(s: &LinkSocket, wait: Duration) -> Option<(Vec<u8>, SocketAddr)> {
    if !wait_readable(s, wait) {
        return None;
    }
    let mut buf = [0u8; 2048];
    let (n, from) = s.recv_from(&mut buf).unwrap();
    Some((buf[..n].to_vec(), from))
}

/// Sends `req` from `sock` and waits up to `wait` for the answer.
fn ask(dc: &mut DetourClient, sock: &LinkSocket, req: Request, wait: Duration) -> Option<Answer> {
    dc.request(Instant::ZERO, req).unwrap();
    let msg = dc.poll_transmit().unwrap();
    sock.send_to(&msg, RELAY.parse().unwrap()).unwrap();
    let (data, _) = recv(sock, wait)?;
    assert!(dc.handle_datagram(Instant::ZERO, &data));
    match dc.poll_event() {
        Some(ClientEvent::Answered { answer, .. }) => Some(answer),
        other => panic!("{other:?}"),
    }
}

fn req(mode: Mode) -> Request {
    Request {
        server: SERVER.parse().unwrap(),
        mode,
        release: false,
    }
}

fn map_elements(relay: &NetNs, name: &str) -> usize {
    let out = relay
        .exec(&[
            "nft",
            "-j",
            "list",
            "map",
            "inet",
            &format!("multihome_relay_{name}"),
            "dnat4",
        ])
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|x| x["map"]["elem"].as_array())
        .map(|e| e.len())
        .sum()
}

fn tables(relay: &NetNs) -> String {
    relay.exec(&["nft", "list", "tables"]).unwrap()
}

/// One UDP exchange through the detour on `port`: returns the source the server saw.
fn exchange(cl: &LinkSocket, srv: &LinkSocket, port: u16, tag: &[u8]) -> SocketAddr {
    let via: SocketAddr = format!("198.51.100.1:{port}").parse().unwrap();
    cl.send_to(tag, via).unwrap();
    let (got, from) = recv(srv, Duration::from_secs(2)).expect("not forwarded to the server");
    assert_eq!(got, tag);
    assert_eq!(
        from.ip().to_string(),
        "203.0.113.1",
        "source not the relay's"
    );
    srv.send_to(b"reply", from).unwrap();
    let (got, rfrom) = recv(cl, Duration::from_secs(2)).expect("reply not forwarded back");
    assert_eq!(got, b"reply");
    assert_eq!(rfrom, via);
    from
}

#[test]
fn nat_and_tunnel_detours_forward_both_ways_and_the_relay_cleans_up() {
    let (client, relay_ns, server) = topology();
    let relay = RunningRelay::start(&relay_ns, "e2e1", "dashboard = \"127.0.0.1:8089\"");
    let srv = bind(&server, SERVER);
    let cl = bind(&client, "198.51.100.2:4000");
    let mut dc = detour_client(1);

    let a = ask(&mut dc, &cl, req(Mode::Nat), Duration::from_secs(2)).expect("no answer");
    assert_eq!(a.status, Status::Ok);
    assert_eq!(
        a.observed,
        "198.51.100.2:4000".parse::<SocketAddr>().unwrap()
    );
    assert_eq!(map_elements(&relay_ns, "e2e1"), 1);
    exchange(&cl, &srv, a.relay_port, b"via nat");
    // Renewal keeps the port.
    let again = ask(&mut dc, &cl, req(Mode::Nat), Duration::from_secs(2)).unwrap();
    assert_eq!(again.relay_port, a.relay_port);

    // A tunnel detour from another socket of the client.
    let cl2 = bind(&client, "198.51.100.2:4001");
    let t = ask(&mut dc, &cl2, req(Mode::Tunnel), Duration::from_secs(2)).unwrap();
    assert_eq!(t.status, Status::Ok);
    assert_ne!(t.relay_port, a.relay_port);
    let seen = exchange(&cl2, &srv, t.relay_port, b"via tunnel");
    assert_eq!(
        seen.port(),
        t.relay_port,
        "tunnel detour sends from its own port"
    );
    // Datagrams from anyone else to the tunnel port go nowhere.
    let stranger = bind(&client, "198.51.100.2:4002");
    stranger
        .send_to(
            b"x",
            format!("198.51.100.1:{}", t.relay_port).parse().unwrap(),
        )
        .unwrap();
    assert!(recv(&srv, Duration::from_millis(300)).is_none());

    let st = relay.status();
    assert_eq!(st["detours"], 2, "{st}");
    assert_eq!(st["tunnel_forwarded_datagrams"], 2, "{st}");
    assert_eq!(st["tunnel_dropped"], 1, "{st}");
    assert_eq!(st["counters"]["renewed"], 1, "{st}");
    dashboard_shows_the_detours(&relay_ns);

    // Release the NAT detour: nothing forwarded any more.
    let mut rel = req(Mode::Nat);
    rel.release = true;
    let r = ask(&mut dc, &cl, rel, Duration::from_secs(2)).unwrap();
    assert_eq!(r.status, Status::Released);
    assert_eq!(map_elements(&relay_ns, "e2e1"), 0);
    cl.send_to(
        b"late",
        format!("198.51.100.1:{}", a.relay_port).parse().unwrap(),
    )
    .unwrap();
    assert!(recv(&srv, Duration::from_millis(300)).is_none());

    assert!(tables(&relay_ns).contains("multihome_relay_e2e1"));
    relay.stop();
    assert!(!tables(&relay_ns).contains("multihome_relay_e2e1"));
    // The tunnel socket is closed with the relay.
    cl2.send_to(
        b"after",
        format!("198.51.100.1:{}", t.relay_port).parse().unwrap(),
    )
    .unwrap();
    assert!(recv(&srv, Duration::from_millis(300)).is_none());
}

#[test]
fn unknown_clients_get_nothing_and_floods_stay_bounded() {
    let (client, relay_ns, _server) = topology();
    let relay = RunningRelay::start(
        &relay_ns,
        "e2e2",
        "max_per_client = 8\nmax_entries = 64\nmax_requests_per_s = 1000000\n",
    );
    let cl = bind(&client, "198.51.100.2:4000");
    let mut stranger = detour_client(7);
    assert!(ask(
        &mut stranger,
        &cl,
        req(Mode::Nat),
        Duration::from_millis(500)
    )
    .is_none());
    let st = relay.status();
    assert_eq!(st["counters"]["rx_unknown_client"], 1, "{st}");
    assert_eq!(st["counters"]["answers"], 0, "{st}");
    assert_eq!(map_elements(&relay_ns, "e2e2"), 0);

    // 10 000 valid requests of the listed key, each from another source port, then 2 000
    // from unknown keys: the table stays at the per-client bound.
    let mut dc = detour_client(1);
    let mut strangers: Vec<DetourClient> = (100..120).map(detour_client).collect();
    let send = |dc: &mut DetourClient, i: usize| {
        dc.request(
            Instant::ZERO,
            req(if i.is_multiple_of(2) {
                Mode::Nat
            } else {
                Mode::Tunnel
            }),
        )
        .unwrap();
        let msg = dc.poll_transmit().unwrap();
        // A fresh socket per request: another source port each time.
        let s = bind(&client, "198.51.100.2:0");
        s.send_to(&msg, RELAY.parse().unwrap()).unwrap();
        // Unanswered requests stay pending in the client: forget them.
        dc.handle_timeout(Instant::from_micros(u64::MAX / 2));
        while dc.poll_event().is_some() {}
    };
    let sockets_per_run = 500;
    for chunk in 0..(10_000 / sockets_per_run) {
        for i in 0..sockets_per_run {
            send(&mut dc, chunk * sockets_per_run + i);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for i in 0..2_000 {
        send(&mut strangers[i % 20], i);
    }
    let mut st = relay.status();
    for _ in 0..100 {
        st = relay.status();
        let c = &st["counters"];
        if c["rx_datagrams"].as_u64().unwrap() >= 12_001 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let c = &st["counters"];
    assert_eq!(st["detours"], 8, "{st}");
    assert_eq!(c["installed"], 8, "{st}");
    assert_eq!(c["rx_unknown_client"], 2_001, "{st}");
    assert!(c["refused_client_limit"].as_u64().unwrap() >= 9_000, "{st}");
    assert!(map_elements(&relay_ns, "e2e2") <= 8);
    relay.stop();
    assert!(!tables(&relay_ns).contains("multihome_relay_e2e2"));
}
