//! Building a world from a scenario: endpoints with their keys and classifiers, one hop
//! chain per (client, link, direction), and the apps with their port ranges.
//!
//! Address plan (all simulated, never on a real network): server 192.0.2.1:51820; client
//! c's socket on link l is 10.l.(c >> 8).(c & 255):40000; client c's inner address is
//! 100.64.0.0 + c + 2; the origin is 198.51.100.1. Every seed the world uses is drawn in
//! a fixed order from one ChaCha8 stream seeded by the run's seed.

use super::{ClientNode, Envelope, HopNode, Next, Node, World, WorldError};
use crate::events::EventQueue;
use crate::scenario::{hop_params, ReorderSpec, Scenario, SchedulerSpec};
use crate::traffic::{App, Placement};
use linkem::{DirectionParams, Pipeline};
use multihome_proto::crypto::{CipherSet, StaticSecret};
use multihome_proto::endpoint::{Client, ClientConfig, PeerConfig, Server, ServerConfig};
use multihome_proto::path::PathId;
use multihome_proto::policy::{Classifier, Rule};
use multihome_proto::session::{AggregateScheduler, SessionConfig};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::Path;
use std::time::Duration;

/// The server's address.
pub const SERVER_ADDR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 51820);
/// The origin's address.
pub const ORIGIN_IP: [u8; 4] = [198, 51, 100, 1];
const INNER_BASE: u32 = u32::from_be_bytes([100, 64, 0, 0]);
const FIRST_PORT: u16 = 10_000;

/// Client c's socket on link l.
pub fn client_addr(c: u32, l: u8) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(
        Ipv4Addr::new(10, l, (c >> 8) as u8, c as u8),
        40000,
    ))
}

/// (client, link) of a client socket address.
pub fn decode_client_addr(a: SocketAddr) -> Option<(u32, u8)> {
    match a {
        SocketAddr::V4(v) => {
            let o = v.ip().octets();
            Some(((u32::from(o[2]) << 8) | u32::from(o[3]), o[1]))
        }
        SocketAddr::V6(_) => None,
    }
}

/// Client c's inner (TUN) address.
pub fn inner_ip(c: u32) -> [u8; 4] {
    (INNER_BASE + c + 2).to_be_bytes()
}

/// Client index of an inner address.
pub fn inner_client(ip: [u8; 4]) -> Option<u32> {
    u32::from_be_bytes(ip)
        .checked_sub(INNER_BASE + 2)
        .filter(|&c| c < 65_536)
}

fn client_key(c: u32) -> StaticSecret {
    // Bytes 1..5, not 0..4: X25519 clamping clears the low 3 bits of byte 0, which would
    // give clients 0-7 the same key.
    let mut k = [0x5a; 32];
    k[1..5].copy_from_slice(&c.to_le_bytes());
    StaticSecret::from_bytes(k)
}

fn server_key() -> StaticSecret {
    StaticSecret::from_bytes([0xa5; 32])
}

/// The apps of every client, with each client's port ranges and classifier rules.
struct Apps {
    apps: Vec<App>,
    /// Per client: (first port, ports used, app index).
    ports: Vec<Vec<(u16, u16, u32)>>,
    rules: Vec<Vec<Rule>>,
}

/// Hop chains of one world: every hop, and per client its (up, down) first hop per link.
struct Hops {
    hops: Vec<HopNode>,
    links: Vec<Vec<(u32, u32)>>,
}

impl World {
    /// Builds the world of `scn` for `seed`; trace files are relative to `base`.
    pub fn new(scn: &Scenario, seed: u64, base: &Path) -> Result<World, WorldError> {
        // The draw order from `master` is part of every result: apps, server, clients, hops.
        let mut master = ChaCha8Rng::seed_from_u64(seed);
        let tunnel = scn.tunnel.enabled;
        let session = session_config(scn);
        let default_policy = scn.tunnel.policy.to_proto(None);
        let mut links: Vec<_> = scn
            .links
            .iter()
            .enumerate()
            .map(|(i, l)| hop_params(i, l, base))
            .collect::<Result<_, _>>()?;
        let n_clients = scn.clients as usize;
        let used_links = if tunnel { links.len() } else { 1 };
        // Apps first: classifier rules need their port ranges.
        let Apps {
            mut apps,
            ports,
            rules,
        } = build_apps(scn, &mut master)?;
        if scn.drive.is_some() {
            // CBR streams under a drive report their handoff windows (`crate::handoff`).
            apps.iter_mut().for_each(App::trace_cbr);
        }
        let server =
            tunnel.then(|| build_server(scn.clients, session, default_policy, &mut master));
        let mut clients = Vec::with_capacity(n_clients);
        for (c, rules) in rules.into_iter().enumerate() {
            let classifier = Classifier {
                rules,
                default: default_policy,
            };
            let ep = tunnel
                .then(|| build_client(c as u32, links.len(), session, classifier, &mut master));
            clients.push(ClientNode {
                ep,
                links: Vec::new(),
                next_tag: [0, 0],
                arrivals: [Vec::new(), Vec::new()],
            });
        }
        let hop_seed = master.next_u64();
        let drive = scn
            .drive
            .as_ref()
            .map(|d| super::drive::prepare(d, seed, scn.duration, &mut links))
            .transpose()
            .map_err(WorldError::Build)?;
        let Hops {
            hops,
            links: firsts,
        } = build_hops(n_clients, &links[..used_links], tunnel, hop_seed);
        for (node, firsts) in clients.iter_mut().zip(firsts) {
            node.links = firsts;
        }
        let nodes = Node::count(n_clients, hops.len(), apps.len());
        let mut w = World {
            q: EventQueue::new(nodes),
            end: scn.duration,
            n_clients: n_clients as u32,
            n_hops: hops.len() as u32,
            server,
            clients,
            hops,
            apps,
            ports,
            trace: scn.metrics.reorder_trace && tunnel,
            server_dirty: false,
            dirty: Vec::new(),
            client_dirty: vec![false; n_clients],
            pool: Vec::new(),
            deliver_buf: vec![0u8; 65_536],
            emit_buf: Vec::new(),
            last_fire: vec![(Duration::MAX, 0); 1 + n_clients],
            counters: Default::default(),
            drive,
            next_trace: Duration::ZERO,
        };
        w.arm_first_timers();
        Ok(w)
    }

    /// Every client endpoint fires at once; every app at its first deadline.
    fn arm_first_timers(&mut self) {
        for c in 0..self.n_clients {
            if self.clients[c as usize].ep.is_some() {
                self.q
                    .arm(self.node_id(Node::Client(c)), Some(Duration::ZERO));
            }
        }
        for a in 0..self.apps.len() as u32 {
            let t = self.apps[a as usize].deadline();
            self.q.arm(self.node_id(Node::App(a)), t);
        }
        let t = self
            .drive
            .as_ref()
            .and_then(super::drive::DriveState::deadline);
        self.q.arm(self.node_id(Node::Drive), t);
    }
}

fn session_config(scn: &Scenario) -> SessionConfig {
    SessionConfig {
        detect: scn.tunnel.detect,
        failback_hold: scn.tunnel.failback_hold,
        aggregate: match scn.tunnel.scheduler {
            SchedulerSpec::Earliest => AggregateScheduler::Earliest,
            SchedulerSpec::Weighted => AggregateScheduler::Weighted,
        },
        max_datagram: scn.tunnel.mtu + multihome_proto::wire::OVERHEAD_BYTES,
        flow_order: scn.tunnel.reorder == ReorderSpec::Flow,
        ..SessionConfig::default()
    }
}

/// Every client's apps, one seed drawn per app in (client, flow) order.
fn build_apps(scn: &Scenario, master: &mut ChaCha8Rng) -> Result<Apps, WorldError> {
    let n_clients = scn.clients as usize;
    let mut out = Apps {
        apps: Vec::new(),
        ports: vec![Vec::new(); n_clients],
        rules: vec![Vec::new(); n_clients],
    };
    let stop = scn.duration.saturating_sub(Duration::from_secs(1)).max(
        scn.duration / 2, // very short runs still send for half their length
    );
    // What Linux would use: the path MTU less IPv4 + TCP headers with timestamps.
    let mss = (scn.tunnel.inner_mtu() - crate::packet::TCP_HEADERS) as u32;
    for c in 0..scn.clients {
        let mut port = FIRST_PORT;
        for spec in &scn.flows {
            let need = App::ports_needed(spec);
            let at = Placement {
                client: c,
                client_ip: inner_ip(c),
                origin_ip: ORIGIN_IP,
                port_base: port,
            };
            let app = App::new(spec.clone(), at, mss, master.next_u64(), stop);
            if let Some(p) = spec.policy {
                out.rules[c as usize].push(Rule {
                    name: format!("{:?}", spec.kind),
                    protocol: None,
                    ports: Some((port, port + need - 1)),
                    dscp: None,
                    policy: p.to_proto(spec.deadline),
                });
            }
            out.ports[c as usize].push((port, need, out.apps.len() as u32));
            port = port
                .checked_add(need)
                .ok_or_else(|| WorldError::Build("too many ports for one client".into()))?;
            out.apps.push(app);
        }
    }
    Ok(out)
}

fn build_server(
    clients: u32,
    session: SessionConfig,
    default_policy: multihome_proto::policy::Policy,
    master: &mut ChaCha8Rng,
) -> Server {
    let peers = (0..clients)
        .map(|c| PeerConfig {
            name: format!("c{c}"),
            public_key: client_key(c).public_key(),
            allowed_ips: vec![ipnet_host(inner_ip(c))],
        })
        .collect();
    Server::new(
        ServerConfig {
            local_key: server_key(),
            peers,
            session,
            default_policy,
            downstream_copies: None,
            // What the daemon would pick on this machine. Results do not depend on it (both
            // ciphers add the same 16-byte tag); only the wall time of a run does.
            ciphers: CipherSet::hardware(),
        },
        master.next_u64(),
    )
}

fn build_client(
    c: u32,
    links: usize,
    session: SessionConfig,
    classifier: Classifier,
    master: &mut ChaCha8Rng,
) -> Client {
    let mut ep = Client::new(
        ClientConfig {
            local_key: client_key(c),
            server_key: server_key().public_key(),
            session,
            classifier,
            epoch_us: 1_700_000_000_000_000,
            ciphers: CipherSet::hardware(),
        },
        master.next_u64(),
    );
    for l in 0..links {
        ep.add_link(
            multihome_proto::Instant::ZERO,
            PathId(l as u8),
            SocketAddr::V4(SERVER_ADDR),
        );
    }
    ep
}

/// Hop chains: up = client → server (hops in order), down = server → client (reversed);
/// each hop's pipeline draws from stream = its index under `hop_seed`.
fn build_hops(
    n_clients: usize,
    links: &[Vec<(DirectionParams, DirectionParams)>],
    tunnel: bool,
    hop_seed: u64,
) -> Hops {
    let mut out = Hops {
        hops: Vec::new(),
        links: vec![Vec::new(); n_clients],
    };
    let hops = &mut out.hops;
    for c in 0..n_clients {
        for (l, params) in links.iter().enumerate() {
            let n = params.len();
            let up_first = hops.len() as u32;
            for (h, (up, _)) in params.iter().enumerate() {
                let next = if h + 1 < n {
                    Next::Hop(hops.len() as u32 + 1)
                } else if tunnel {
                    Next::Server
                } else {
                    Next::OriginRaw
                };
                let stream = hops.len() as u64;
                hops.push(HopNode::new(
                    Pipeline::<Envelope>::new(up.clone(), hop_seed, stream),
                    next,
                    (c as u32, l as u8, true, h as u8),
                    tunnel,
                ));
            }
            let down_first = hops.len() as u32;
            for (k, (_, down)) in params.iter().rev().enumerate() {
                let next = if k + 1 < n {
                    Next::Hop(hops.len() as u32 + 1)
                } else if tunnel {
                    Next::Client(c as u32, l as u8)
                } else {
                    Next::ClientRaw
                };
                let stream = hops.len() as u64;
                hops.push(HopNode::new(
                    Pipeline::<Envelope>::new(down.clone(), hop_seed, stream),
                    next,
                    (c as u32, l as u8, false, (n - 1 - k) as u8),
                    tunnel,
                ));
            }
            out.links[c].push((up_first, down_first));
        }
    }
    out
}

fn ipnet_host(ip: [u8; 4]) -> ipnet::IpNet {
    ipnet::IpNet::V4(ipnet::Ipv4Net::new(Ipv4Addr::from(ip), 32).expect("a /32 is always valid"))
}
