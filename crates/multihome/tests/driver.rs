//! The daemons' driver with in-memory I/O: a real `Client` and a real `Server` core, each
//! in its own `Driver`, with in-memory devices and binds wired to each other over a
//! `MemNet` (the client has two links). IPv4/UDP packets sent in at the client's device
//! must come out byte for byte at the server's device, and back. No root, no namespaces;
//! real time (the handshake takes a few milliseconds).

use multihome::daemon::core::ClientCore;
use multihome::daemon::driver::{Driver, NoWatch, Services};
use multihome::daemon::mem::{self, DeviceHandle, MemNet};
use multihome::daemon::Clock;
use multihome_proto::crypto::{CipherSet, StaticSecret};
use multihome_proto::endpoint::{Client, ClientConfig, PeerConfig, Server, ServerConfig};
use multihome_proto::path::PathId;
use multihome_proto::policy::{Classifier, Policy};
use multihome_proto::session::SessionConfig;
use multihome_proto::Instant;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 2);
const REMOTE_IP: Ipv4Addr = Ipv4Addr::new(10, 50, 0, 1);
/// Numbers from here up mark the packets sent while waiting for the handshake.
const WARMUP: u32 = 1 << 30;

fn ones_complement(data: &[u8], mut sum: u32) -> u16 {
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A valid IPv4/UDP packet of `size` bytes numbered `n` (in the payload and the IP ID),
/// client → remote when `up`, else back; the payload is a pattern depending on `n`, so a
/// corrupted or mixed-up packet cannot pass for the right one.
fn packet(up: bool, n: u32, size: usize) -> Vec<u8> {
    let (src, dst) = if up {
        (CLIENT_IP, REMOTE_IP)
    } else {
        (REMOTE_IP, CLIENT_IP)
    };
    let mut p = vec![0u8; size.max(32)];
    let len = p.len();
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p[4..6].copy_from_slice(&(n as u16).to_be_bytes());
    p[6] = 0x40; // DF
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let csum = ones_complement(&p[..20], 0);
    p[10..12].copy_from_slice(&csum.to_be_bytes());
    p[20..22].copy_from_slice(&4000u16.to_be_bytes());
    p[22..24].copy_from_slice(&5004u16.to_be_bytes());
    p[24..26].copy_from_slice(&((len - 20) as u16).to_be_bytes());
    p[28..32].copy_from_slice(&n.to_be_bytes());
    for (i, b) in p[32..].iter_mut().enumerate() {
        *b = (n as usize).wrapping_mul(31).wrapping_add(i) as u8;
    }
    // UDP checksum over the pseudo-header and the datagram.
    let mut pseudo = 0u32;
    for w in [src.octets(), dst.octets()] {
        pseudo += u32::from(u16::from_be_bytes([w[0], w[1]]));
        pseudo += u32::from(u16::from_be_bytes([w[2], w[3]]));
    }
    pseudo += 17 + (len - 20) as u32;
    let csum = match ones_complement(&p[20..], pseudo) {
        0 => 0xffff,
        c => c,
    };
    p[26..28].copy_from_slice(&csum.to_be_bytes());
    p
}

fn number(p: &[u8]) -> u32 {
    u32::from_be_bytes(p[28..32].try_into().unwrap())
}

fn size_of(n: u32) -> usize {
    60 + (n as usize * 37) % 1300
}

fn cores() -> (Client, Server) {
    let (ck, sk) = (
        StaticSecret::from_bytes([11; 32]),
        StaticSecret::from_bytes([22; 32]),
    );
    let server = Server::new(
        ServerConfig {
            local_key: sk.clone(),
            peers: vec![PeerConfig {
                name: "home".into(),
                public_key: ck.public_key(),
                allowed_ips: vec!["10.200.0.2/32".parse().unwrap()],
            }],
            session: SessionConfig::default(),
            default_policy: Policy::Aggregate,
            downstream_copies: None,
            ciphers: CipherSet::ALL,
        },
        1,
    );
    let client = Client::new(
        ClientConfig {
            local_key: ck,
            server_key: sk.public_key(),
            session: SessionConfig::default(),
            classifier: Classifier::uniform(Policy::Aggregate),
            epoch_us: 1_700_000_000_000_000,
            ciphers: CipherSet::ALL,
        },
        2,
    );
    (client, server)
}

/// Packets a transfer keeps in the tunnel at most: a closed-loop sender, as TCP would be,
/// so the test checks delivery, not how the core's queue sheds an unpaced burst (CoDel
/// drops what waits too long).
const WINDOW: usize = 32;

/// Sends a warm-up packet every 10 ms from `from` until `to` delivers one (the session
/// is up), then sends `count` numbered packets, at most [`WINDOW`] undelivered at a time,
/// and collects what `to` delivers until all came; returns them, warm-up packets left out.
async fn transfer(from: &DeviceHandle, to: &DeviceHandle, up: bool, count: u32) -> Vec<Vec<u8>> {
    let mut warm = WARMUP;
    while to.take_received().is_empty() {
        from.send(packet(up, warm, 100));
        warm += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut got = Vec::new();
    let mut sent = 0;
    while got.len() < count as usize {
        while sent < count && (sent as usize) < got.len() + WINDOW {
            from.send(packet(up, sent, size_of(sent)));
            sent += 1;
        }
        // Lets the drivers run; real time passes only when everything is idle.
        tokio::task::yield_now().await;
        let batch = to.take_received();
        got.extend(batch.into_iter().filter(|p| number(p) < WARMUP));
    }
    got
}

fn assert_intact(got: &[Vec<u8>], up: bool, count: u32) {
    let mut numbers: Vec<u32> = got.iter().map(|p| number(p)).collect();
    for p in got {
        let n = number(p);
        assert_eq!(
            p,
            &packet(up, n, size_of(n)),
            "packet {n} (up {up}) altered"
        );
    }
    numbers.sort_unstable();
    assert_eq!(
        numbers,
        (0..count).collect::<Vec<_>>(),
        "up {up}: lost or duplicated"
    );
}

#[tokio::test]
async fn packets_cross_client_and_server_drivers_intact() {
    let server_addr: SocketAddr = "10.9.9.9:7000".parse().unwrap();
    let links: Vec<SocketAddr> = vec![
        "10.0.0.2:5000".parse().unwrap(),
        "10.0.1.2:5000".parse().unwrap(),
    ];
    let net = MemNet::new();
    let (mut client, server) = cores();
    for i in 0..links.len() {
        client.add_link(Instant::ZERO, PathId(i as u8), server_addr);
    }
    let names = vec!["a".to_string(), "b".to_string()];
    let (cdev, chost) = mem::device();
    let (sdev, shost) = mem::device();
    let mut cdrv = Driver::new(
        ClientCore::new(client, names),
        cdev,
        net.bind(links),
        Clock::new(),
    );
    let mut sdrv = Driver::new(server, sdev, net.bind(vec![server_addr]), Clock::new());
    let (stop_c, stopped_c) = tokio::sync::oneshot::channel::<()>();
    let (stop_s, stopped_s) = tokio::sync::oneshot::channel::<()>();
    let services = Services::default();
    let client_loop = async {
        let stop = async {
            let _ = stopped_c.await;
        };
        cdrv.run(&services, &mut NoWatch, stop).await.unwrap();
        cdrv.close();
    };
    let server_loop = async {
        let stop = async {
            let _ = stopped_s.await;
        };
        sdrv.run(&services, &mut NoWatch, stop).await.unwrap();
    };
    let test = async {
        let count = 2000;
        let up = transfer(&chost, &shost, true, count).await;
        assert_intact(&up, true, count);
        let down = transfer(&shost, &chost, false, count).await;
        assert_intact(&down, false, count);
        stop_c.send(()).unwrap();
        stop_s.send(()).unwrap();
    };
    tokio::time::timeout(Duration::from_secs(30), async {
        tokio::join!(client_loop, server_loop, test)
    })
    .await
    .expect("the transfer finished in time");
    assert_eq!(net.dropped(), 0, "the in-memory network dropped datagrams");
    // The dashboard's once-a-second sample of the server, built without the document,
    // reads as the whole document; the control socket's `sample` carries its sessions.
    let doc = multihome::status::server_status(&sdrv.core);
    let seen = multihome::status::server_snapshot(&sdrv.core);
    assert_eq!(seen, multihome::dashboard::snapshot(&doc));
    let json = multihome::dashboard::snapshot_json(&seen);
    assert_eq!(multihome::dashboard::snapshot(&json).links, seen.links);
    assert_eq!(seen.links.len(), 2, "{seen:?}");
    assert!(seen.links.iter().all(|l| l.rx_bytes > Some(0)), "{seen:?}");
}

/// Numbers from here up mark the packets the server's host echoes.
const ECHO: u32 = 1 << 29;

/// A host that answers a delivered packet at once (the kernel's echo reply, the ACK of a
/// TCP segment) gets its answer back through the tunnel intact, one `send` per echoed ping
/// at the server. (The driver reads the device again right after delivering, so on a real
/// TUN the answer leaves without another wake-up; the in-memory device is always ready, so
/// this test sees the bytes and the sends, not the wake-ups: the lab's overhead bench
/// counts those.)
#[tokio::test]
async fn a_host_answering_at_once_gets_each_answer_back_intact() {
    let server_addr: SocketAddr = "10.9.9.9:7000".parse().unwrap();
    let link: SocketAddr = "10.0.0.2:5000".parse().unwrap();
    let net = MemNet::new();
    let (mut client, server) = cores();
    client.add_link(Instant::ZERO, PathId(0), server_addr);
    let (cdev, chost) = mem::device();
    let (sdev, shost) = mem::device();
    let core = ClientCore::new(client, vec!["a".to_string()]);
    let mut cdrv = Driver::new(core, cdev, net.bind(vec![link]), Clock::new());
    let mut sdrv = Driver::new(server, sdev, net.bind(vec![server_addr]), Clock::new());
    let (stop_c, stopped_c) = tokio::sync::oneshot::channel::<()>();
    let (stop_s, stopped_s) = tokio::sync::oneshot::channel::<()>();
    let services = Services::default();
    let client_loop = async {
        let stop = async {
            let _ = stopped_c.await;
        };
        cdrv.run(&services, &mut NoWatch, stop).await.unwrap();
    };
    let server_loop = async {
        let stop = async {
            let _ = stopped_s.await;
        };
        sdrv.run(&services, &mut NoWatch, stop).await.unwrap();
    };
    let count = 20;
    let test = async {
        assert_intact(&transfer(&chost, &shost, true, 10).await, true, 10);
        shost.answer_at_once(|p| {
            let n = number(p);
            (n >= ECHO).then(|| packet(false, n, p.len()))
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let before = net.sends_from(server_addr);
        for n in ECHO..ECHO + count {
            chost.send(packet(true, n, 100));
            let answer = loop {
                let got = chost.take_received();
                if let Some(p) = got.into_iter().find(|p| number(p) == n) {
                    break p;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            };
            assert_eq!(answer, packet(false, n, 100), "echo {n} changed on the way");
        }
        let sends = net.sends_from(server_addr) - before;
        stop_c.send(()).unwrap();
        stop_s.send(()).unwrap();
        sends
    };
    let (_, _, sends) = tokio::time::timeout(Duration::from_secs(30), async {
        tokio::join!(client_loop, server_loop, test)
    })
    .await
    .expect("the pings were answered in time");
    println!("server sends for {count} echoed pings: {sends}");
    assert!(
        sends <= u64::from(count) + 2,
        "{sends} sends at the server for {count} echoed pings"
    );
}
