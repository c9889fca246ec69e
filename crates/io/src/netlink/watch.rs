//! Link and address change notifications from rtnetlink multicast groups.
//!
//! The watcher keeps its own view of every link (name, up) and every usable address, seeded
//! from a dump when it is created, and turns kernel notifications into *transitions* of that
//! view. The kernel sends `RTM_NEWLINK` for many reasons (statistics, carrier flaps, renames)
//! and `RTM_NEWADDR` again when an address's flags change, so raw notifications would repeat;
//! transitions do not. When the socket's queue overflows (`ENOBUFS`) notifications were lost,
//! and the watcher re-dumps links and addresses and reports the difference.

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use ipnet::IpNet;
use netlink_packet_core::{NetlinkMessage, NetlinkPayload};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use super::request::{dump_addresses, dump_links, index_to_name, parse_address, parse_link};
use super::NetlinkError;

/// Receive buffer asked of the kernel: room for bursts (e.g. an interface with many
/// addresses going away) before notifications are dropped.
const SOCKET_RCVBUF: usize = 1 << 20;
const RECV_BUF: usize = 64 * 1024;

/// A change of a link or of an address, as seen by [`LinkWatcher`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkEvent {
    /// The link became usable: administratively up and running (carrier present).
    Up {
        /// Interface name.
        name: String,
        /// Interface index.
        index: u32,
    },
    /// The link stopped being usable: set down, lost its carrier, or was deleted.
    Down {
        /// Interface name.
        name: String,
        /// Interface index.
        index: u32,
    },
    /// A usable address appeared (IPv6 ones once duplicate address detection has finished).
    AddrAdded {
        /// Interface name.
        name: String,
        /// The address with its prefix length.
        addr: IpNet,
    },
    /// An address disappeared (or its duplicate address detection failed).
    AddrRemoved {
        /// Interface name.
        name: String,
        /// The address with its prefix length.
        addr: IpNet,
    },
}

/// What the watcher believes about links and addresses; pure, so it is unit-tested alone.
#[derive(Debug, Default)]
struct View {
    links: HashMap<u32, (String, bool)>,
    addrs: HashSet<(u32, IpNet)>,
}

impl View {
    fn name_of(&self, index: u32) -> String {
        self.links
            .get(&index)
            .map(|(n, _)| n.clone())
            .or_else(|| index_to_name(index))
            .unwrap_or_else(|| format!("if{index}"))
    }

    fn link(&mut self, index: u32, name: String, up: bool, out: &mut Vec<LinkEvent>) {
        match self.links.get(&index) {
            Some((old, was_up)) if *old == name && *was_up != up => {
                out.push(updown(up, name.clone(), index));
            }
            Some((old, _)) if *old == name => {}
            Some((old, was_up)) => {
                // Renamed: the old name's state ends, the new one's begins.
                if *was_up {
                    out.push(updown(false, old.clone(), index));
                }
                if up {
                    out.push(updown(true, name.clone(), index));
                }
            }
            None if up => out.push(updown(true, name.clone(), index)),
            None => {}
        }
        self.links.insert(index, (name, up));
    }

    fn link_removed(&mut self, index: u32, out: &mut Vec<LinkEvent>) {
        let name = self.name_of(index);
        let gone: Vec<IpNet> = self
            .addrs
            .iter()
            .filter(|(i, _)| *i == index)
            .map(|(_, a)| *a)
            .collect();
        for addr in gone {
            self.addr(index, addr, false, out);
        }
        if let Some((_, true)) = self.links.remove(&index) {
            out.push(updown(false, name, index));
        }
    }

    fn addr(&mut self, index: u32, addr: IpNet, present: bool, out: &mut Vec<LinkEvent>) {
        let changed = if present {
            self.addrs.insert((index, addr))
        } else {
            self.addrs.remove(&(index, addr))
        };
        if changed {
            let name = self.name_of(index);
            out.push(if present {
                LinkEvent::AddrAdded { name, addr }
            } else {
                LinkEvent::AddrRemoved { name, addr }
            });
        }
    }

    /// Brings the view to a full dump, reporting what changed.
    fn reconcile(
        &mut self,
        links: Vec<(u32, String, bool)>,
        addrs: Vec<(u32, IpNet, bool)>,
        out: &mut Vec<LinkEvent>,
    ) {
        let usable: HashSet<(u32, IpNet)> = addrs
            .into_iter()
            .filter(|(_, _, ok)| *ok)
            .map(|(i, a, _)| (i, a))
            .collect();
        let stale: Vec<(u32, IpNet)> = self.addrs.difference(&usable).copied().collect();
        for (i, a) in stale {
            self.addr(i, a, false, out);
        }
        let present: HashSet<u32> = links.iter().map(|(i, _, _)| *i).collect();
        let vanished: Vec<u32> = self
            .links
            .keys()
            .filter(|i| !present.contains(i))
            .copied()
            .collect();
        for i in vanished {
            self.link_removed(i, out);
        }
        for (i, name, up) in links {
            self.link(i, name, up, out);
        }
        let mut fresh: Vec<(u32, IpNet)> = usable.difference(&self.addrs).copied().collect();
        fresh.sort();
        for (i, a) in fresh {
            self.addr(i, a, true, out);
        }
    }
}

fn updown(up: bool, name: String, index: u32) -> LinkEvent {
    if up {
        LinkEvent::Up { name, index }
    } else {
        LinkEvent::Down { name, index }
    }
}

/// Watches links and addresses of the calling thread's network namespace.
///
/// Use from tokio: wrap it in `AsyncFd<LinkWatcher>`; when readable, call
/// [`LinkWatcher::poll_events`], which always reads until the socket would block, then clear
/// the readiness (`guard.clear_ready()`).
///
/// With tokio: `unsafe { AsyncFd::register_with_interest(watcher, Interest::READABLE) }`. Its safety
/// contract holds: the watcher owns its fd for its whole life and `as_raw_fd` always returns it.
pub struct LinkWatcher {
    sock: Socket,
    buf: Vec<u8>,
    view: View,
}

impl LinkWatcher {
    /// Subscribes to link and address notifications and takes the initial state.
    ///
    /// The initial state is not reported as events: read it with [`LinkWatcher::is_up`] and
    /// [`LinkWatcher::addresses`]. Subscribing happens before the dump, so no change between
    /// the two is missed.
    pub fn new() -> Result<LinkWatcher, NetlinkError> {
        let op = "subscribe to link and address notifications";
        let sock_err = |source| NetlinkError::Socket {
            op: op.to_owned(),
            source,
        };
        let mut sock = Socket::new(NETLINK_ROUTE).map_err(sock_err)?;
        sock.bind(&SocketAddr::new(0, 0)).map_err(sock_err)?;
        for group in [
            libc::RTNLGRP_LINK,
            libc::RTNLGRP_IPV4_IFADDR,
            libc::RTNLGRP_IPV6_IFADDR,
        ] {
            sock.add_membership(group).map_err(sock_err)?;
        }
        // Best effort: a smaller buffer only makes overflows (and so resyncs) likelier.
        let _ = sock.set_rx_buf_sz(SOCKET_RCVBUF);
        sock.set_non_blocking(true).map_err(sock_err)?;
        let mut w = LinkWatcher {
            sock,
            buf: vec![0; RECV_BUF],
            view: View::default(),
        };
        w.resync(&mut Vec::new())?;
        Ok(w)
    }

    /// Whether the watcher currently believes link `name` is up (`None`: unknown link).
    pub fn is_up(&self, name: &str) -> Option<bool> {
        self.view
            .links
            .values()
            .find(|(n, _)| n == name)
            .map(|(_, up)| *up)
    }

    /// The usable addresses the watcher currently knows on link `name`, sorted.
    pub fn addresses(&self, name: &str) -> Vec<IpNet> {
        let Some((&index, _)) = self.view.links.iter().find(|(_, (n, _))| n == name) else {
            return Vec::new();
        };
        let mut v: Vec<IpNet> = self
            .view
            .addrs
            .iter()
            .filter(|(i, _)| *i == index)
            .map(|(_, a)| *a)
            .collect();
        v.sort();
        v
    }

    /// Reads every pending notification without blocking and appends the resulting events to
    /// `out`; returns how many were appended (0 when nothing was pending).
    ///
    /// On return `Ok` the socket has been drained (it would block). A notification the
    /// decoder does not understand is skipped and reported as [`NetlinkError::Decode`] after
    /// the drain; the events already appended to `out` are valid.
    pub fn poll_events(&mut self, out: &mut Vec<LinkEvent>) -> Result<usize, NetlinkError> {
        let start = out.len();
        let mut first_decode_error = None;
        loop {
            match self.sock.recv(&mut &mut self.buf[..], 0) {
                Ok(n) => {
                    if let Err(e) = self.handle_datagram(n, out) {
                        first_decode_error.get_or_insert(e);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // The kernel dropped notifications for us: our view may be wrong, rebuild it.
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => self.resync(out)?,
                Err(source) => {
                    return Err(NetlinkError::Socket {
                        op: "read link notifications".into(),
                        source,
                    })
                }
            }
        }
        match first_decode_error {
            Some(e) => Err(e),
            None => Ok(out.len() - start),
        }
    }

    fn resync(&mut self, out: &mut Vec<LinkEvent>) -> Result<(), NetlinkError> {
        let links = dump_links("dump links")?;
        let addrs = dump_addresses("dump addresses")?;
        self.view.reconcile(links, addrs, out);
        Ok(())
    }

    fn handle_datagram(&mut self, n: usize, out: &mut Vec<LinkEvent>) -> Result<(), NetlinkError> {
        let mut off = 0;
        let mut result = Ok(());
        while off < n {
            let m = match NetlinkMessage::<RouteNetlinkMessage>::deserialize(&self.buf[off..n]) {
                Ok(m) => m,
                Err(e) => {
                    // Without a parsed header the next message's start is unknown.
                    return Err(NetlinkError::Decode {
                        op: "read link notifications".into(),
                        detail: e.to_string(),
                    });
                }
            };
            let len = m.header.length as usize;
            if len == 0 {
                break;
            }
            off += (len + 3) & !3;
            let NetlinkPayload::InnerMessage(msg) = m.payload else {
                continue;
            };
            match msg {
                RouteNetlinkMessage::NewLink(l) => match parse_link(&l) {
                    Some((i, name, up)) => self.view.link(i, name, up, out),
                    None => {
                        result = Err(NetlinkError::Decode {
                            op: "read link notifications".into(),
                            detail: format!("link {} without a name", l.header.index),
                        })
                    }
                },
                RouteNetlinkMessage::DelLink(l) => self.view.link_removed(l.header.index, out),
                RouteNetlinkMessage::NewAddress(a) => {
                    if let Some((i, addr, usable)) = parse_address(&a) {
                        self.view.addr(i, addr, usable, out);
                    }
                }
                RouteNetlinkMessage::DelAddress(a) => {
                    if let Some((i, addr, _)) = parse_address(&a) {
                        self.view.addr(i, addr, false, out);
                    }
                }
                _ => {}
            }
        }
        result
    }
}

impl AsRawFd for LinkWatcher {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

impl AsFd for LinkWatcher {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn repeated_notifications_yield_one_transition() {
        let mut v = View::default();
        let mut out = Vec::new();
        v.link(5, "eth1".into(), false, &mut out);
        assert!(out.is_empty(), "a new link that is down is no transition");
        v.link(5, "eth1".into(), true, &mut out);
        v.link(5, "eth1".into(), true, &mut out);
        v.addr(5, net("192.0.2.7/24"), true, &mut out);
        v.addr(5, net("192.0.2.7/24"), true, &mut out);
        v.link(5, "eth1".into(), false, &mut out);
        assert_eq!(
            out,
            vec![
                LinkEvent::Up {
                    name: "eth1".into(),
                    index: 5
                },
                LinkEvent::AddrAdded {
                    name: "eth1".into(),
                    addr: net("192.0.2.7/24")
                },
                LinkEvent::Down {
                    name: "eth1".into(),
                    index: 5
                },
            ]
        );
    }

    #[test]
    fn deleted_link_reports_its_addresses_then_down() {
        let mut v = View::default();
        let mut out = Vec::new();
        v.link(3, "wwan0".into(), true, &mut out);
        v.addr(3, net("2001:db8::5/64"), true, &mut out);
        out.clear();
        v.link_removed(3, &mut out);
        v.link_removed(3, &mut out);
        assert_eq!(
            out,
            vec![
                LinkEvent::AddrRemoved {
                    name: "wwan0".into(),
                    addr: net("2001:db8::5/64")
                },
                LinkEvent::Down {
                    name: "wwan0".into(),
                    index: 3
                },
            ]
        );
    }

    #[test]
    fn tentative_address_appears_only_when_usable() {
        let mut v = View::default();
        let mut out = Vec::new();
        v.link(2, "eth0".into(), true, &mut out);
        out.clear();
        v.addr(2, net("2001:db8::1/64"), false, &mut out);
        assert!(out.is_empty());
        v.addr(2, net("2001:db8::1/64"), true, &mut out);
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn reconcile_reports_exactly_the_differences() {
        let mut v = View::default();
        let mut out = Vec::new();
        v.reconcile(
            vec![
                (1, "lo".into(), true),
                (2, "eth0".into(), true),
                (3, "eth1".into(), false),
            ],
            vec![
                (2, net("192.0.2.1/24"), true),
                (2, net("2001:db8::1/64"), false),
            ],
            &mut out,
        );
        assert_eq!(out.len(), 3, "lo up, eth0 up, one usable address: {out:?}");
        out.clear();
        // eth0 vanished (with its address), eth1 came up and got an address.
        v.reconcile(
            vec![(1, "lo".into(), true), (3, "eth1".into(), true)],
            vec![(3, net("198.51.100.2/24"), true)],
            &mut out,
        );
        assert_eq!(
            out,
            vec![
                LinkEvent::AddrRemoved {
                    name: "eth0".into(),
                    addr: net("192.0.2.1/24")
                },
                LinkEvent::Down {
                    name: "eth0".into(),
                    index: 2
                },
                LinkEvent::Up {
                    name: "eth1".into(),
                    index: 3
                },
                LinkEvent::AddrAdded {
                    name: "eth1".into(),
                    addr: net("198.51.100.2/24")
                },
            ]
        );
    }

    #[test]
    fn rename_ends_the_old_name_and_starts_the_new() {
        let mut v = View::default();
        let mut out = Vec::new();
        v.link(9, "eth9".into(), true, &mut out);
        out.clear();
        v.link(9, "uplink".into(), true, &mut out);
        assert_eq!(
            out,
            vec![
                LinkEvent::Down {
                    name: "eth9".into(),
                    index: 9
                },
                LinkEvent::Up {
                    name: "uplink".into(),
                    index: 9
                },
            ]
        );
    }
}
