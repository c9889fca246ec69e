//! A scenario's `[drive]` applied to the world: what a Wi-Fi link of a moving client sees.
//!
//! The schedule (`crate::drive`) becomes (1) outage windows on the client-side hop of the
//! drive's link, both directions, from coverage lost until the next address is configured
//! (linkem flushes the hop's queue as each begins, as `linkem down` does in the lab);
//! (2) availability given to each tunnel client (`Client::set_link_available`, what the
//! daemon's netlink watch does): gone with the carrier, back with the new address; (3) a new client address
//! at each association: the client's socket on that link moves to port `BASE_PORT + n`
//! (the address plan keeps the IP for the client index), datagrams the server still sends
//! to an older address are dropped as unroutable, and without the tunnel every app's
//! connections are dead (`App::on_new_address`: a resuming flow reconnects).
//!
//! Invariants: every client drives the same schedule, drawn from its own stream
//! (`DRIVE_SALT` under the run's seed), so scenarios without a drive draw exactly as before;
//! events are applied in time order, a carrier loss before a carrier return at one instant.

use super::{Node, World};
use crate::drive::{self, DriveEvent, DriveSpec};
use linkem::loss::LossSpec;
use linkem::outage::{Outage, OutageSchedule};
use linkem::pipeline::Change;
use linkem::DirectionParams;
use multihome_proto::path::PathId;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::net::SocketAddr;
use std::time::Duration;

/// Stream of the drive's draws under the run's seed.
const DRIVE_SALT: u64 = 0x6472_6976_6500_0016;
/// Port of address 0 (the address plan's own).
pub const BASE_PORT: u16 = 40_000;

/// The drive of a running world.
pub struct DriveState {
    events: Vec<(Duration, DriveEvent)>,
    next: usize,
    link: u8,
    /// Port of the address now configured.
    port: u16,
    /// The link's outages [coverage lost, next address), for the handoff report.
    pub outages: Vec<(Duration, Duration)>,
}

/// The schedule of `spec` for `seed`, and its outage windows added to the client-side hop of
/// the drive's link in `links` (per link: per hop (up, down), client side first).
pub fn prepare(
    spec: &DriveSpec,
    seed: u64,
    horizon: Duration,
    links: &mut [Vec<(DirectionParams, DirectionParams)>],
) -> Result<DriveState, String> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ DRIVE_SALT);
    let atts = drive::schedule(spec, horizon, &mut rng);
    let (mut events, outages) = drive::events(&atts);
    events.extend(drive::edge_events(spec, &atts));
    // Stable: at one instant a coverage loss stays before a carrier return.
    events.sort_by_key(|&(t, _)| t);
    let hop = &mut links[spec.link][0];
    for dir in [&mut hop.0, &mut hop.1] {
        let mut windows = dir.outages.windows().to_vec();
        windows.extend(outages.iter().map(|&(start, end)| Outage { start, end }));
        dir.outages = OutageSchedule::new(windows).map_err(|e| e.to_string())?;
    }
    Ok(DriveState {
        events,
        next: 0,
        link: spec.link as u8,
        port: BASE_PORT,
        outages,
    })
}

impl DriveState {
    /// When the next event is due.
    pub fn deadline(&self) -> Option<Duration> {
        self.events.get(self.next).map(|e| e.0)
    }
}

impl World {
    /// Client `c`'s socket address on link `l` now.
    pub(super) fn src_addr(&self, c: u32, l: u8) -> SocketAddr {
        let mut a = super::client_addr(c, l);
        if let Some(d) = self.drive.as_ref().filter(|d| d.link == l) {
            a.set_port(d.port);
        }
        a
    }

    /// Whether a datagram for `dst` would reach a configured address.
    pub(super) fn addr_current(&self, dst: SocketAddr, l: u8) -> bool {
        self.drive
            .as_ref()
            .is_none_or(|d| d.link != l || dst.port() == d.port)
    }

    /// Performs every drive event due now and arms the next one.
    pub(super) fn on_drive(&mut self) {
        let now = self.now();
        while let Some(d) = self.drive.as_mut() {
            let Some(&(at, ev)) = d.events.get(d.next).filter(|e| e.0 <= now) else {
                break;
            };
            d.next += 1;
            let link = d.link;
            if let DriveEvent::Address(n) = ev {
                d.port = BASE_PORT.wrapping_add(n as u16);
            }
            self.apply_drive(at, link, ev);
        }
        let t = self.drive.as_ref().and_then(DriveState::deadline);
        let id = self.node_id(Node::Drive);
        self.q.arm(id, t);
    }

    fn apply_drive(&mut self, at: Duration, link: u8, ev: DriveEvent) {
        let tunnel = self.server.is_some();
        for c in 0..self.n_clients {
            match ev {
                // The daemon uses a link once it is up *and* addressed (client.rs): carrier
                // loss takes it away, the new address gives it back.
                DriveEvent::CarrierDown | DriveEvent::Address(_) if tunnel => {
                    let up = ev != DriveEvent::CarrierDown;
                    if let Some(ep) = self.clients[c as usize].ep.as_mut() {
                        ep.set_link_available(super::pi(at), PathId(link), up);
                        self.mark(c);
                    }
                }
                DriveEvent::Loss(ppm) => {
                    // Both directions of the link's client-side hop (hop 0), where the
                    // outages are too.
                    let loss = (ppm > 0).then(|| LossSpec::Bernoulli(f64::from(ppm) / 1e6));
                    let edge: Vec<u32> = (0..self.hops.len() as u32)
                        .filter(|&h| {
                            let l = self.hops[h as usize].label;
                            l.0 == c && l.1 == link && l.3 == 0
                        })
                        .collect();
                    for h in edge {
                        self.hops[h as usize].pipe.apply(at, Change::Loss(loss));
                        self.rearm_hop(h);
                    }
                }
                DriveEvent::Address(_) if !tunnel => {
                    let apps: Vec<u32> = self.ports[c as usize].iter().map(|p| p.2).collect();
                    for a in apps {
                        let mut out = std::mem::take(&mut self.emit_buf);
                        self.apps[a as usize].on_new_address(at, &mut out);
                        self.emit(a, out);
                        self.rearm_app(a);
                    }
                }
                _ => {}
            }
        }
    }
}
