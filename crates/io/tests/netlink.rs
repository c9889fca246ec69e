//! Link/address watcher and link, address and route requests inside a namespace.
mod common;

use std::time::Duration;

use common::{until, wait_readable};
use ipnet::IpNet;
use multihome_io::netlink::{self, LinkEvent, LinkWatcher, NetlinkError};
use multihome_io::netns::{run_cmd, NetNs};

/// Polls the watcher until an event satisfying `want` arrives; returns every event seen
/// up to and including it.
fn wait_for(w: &mut LinkWatcher, want: impl Fn(&LinkEvent) -> bool) -> Vec<LinkEvent> {
    let mut seen = Vec::new();
    until(Duration::from_secs(5), || {
        wait_readable(w, Duration::from_millis(100));
        w.poll_events(&mut seen).unwrap();
        seen.iter().any(&want).then_some(())
    })
    .unwrap_or_else(|| panic!("event never came; saw {seen:?}"));
    seen
}

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

/// A veth pair whose far end is up, so `mhl0` is running as soon as it is set up.
fn make_link() {
    run_cmd(&[
        "ip", "link", "add", "mhl0", "type", "veth", "peer", "name", "mhl0p",
    ])
    .unwrap();
    netlink::set_link_up("mhl0p", true).unwrap();
}

#[test]
fn watcher_reports_up_addresses_and_down() {
    let ns = NetNs::new("mhio").unwrap();
    ns.run(|| {
        let mut w = LinkWatcher::new().unwrap();
        assert_eq!(
            w.is_up("lo"),
            Some(true),
            "initial state comes from the dump"
        );
        make_link();
        assert!(!netlink::link_is_up("mhl0").unwrap());

        netlink::set_link_up("mhl0", true).unwrap();
        let ev = wait_for(
            &mut w,
            |e| matches!(e, LinkEvent::Up { name, .. } if name == "mhl0"),
        );
        let index = netlink::link_index("mhl0").unwrap();
        assert!(ev.contains(&LinkEvent::Up {
            name: "mhl0".into(),
            index
        }));
        assert!(netlink::link_is_up("mhl0").unwrap());

        netlink::add_address("mhl0", net("192.0.2.10/24")).unwrap();
        wait_for(&mut w, |e| {
            *e == LinkEvent::AddrAdded {
                name: "mhl0".into(),
                addr: net("192.0.2.10/24"),
            }
        });
        netlink::add_address("mhl0", net("2001:db8:5::10/64")).unwrap();
        wait_for(&mut w, |e| {
            *e == LinkEvent::AddrAdded {
                name: "mhl0".into(),
                addr: net("2001:db8:5::10/64"),
            }
        });
        let mut addrs = netlink::interface_addresses("mhl0").unwrap();
        addrs.retain(|a| !matches!(a, IpNet::V6(v6) if v6.addr().segments()[0] == 0xfe80));
        addrs.sort();
        assert_eq!(addrs, vec![net("192.0.2.10/24"), net("2001:db8:5::10/64")]);
        assert!(w.addresses("mhl0").contains(&net("192.0.2.10/24")));

        netlink::del_address("mhl0", net("192.0.2.10/24")).unwrap();
        wait_for(&mut w, |e| {
            *e == LinkEvent::AddrRemoved {
                name: "mhl0".into(),
                addr: net("192.0.2.10/24"),
            }
        });

        netlink::set_link_up("mhl0", false).unwrap();
        let ev = wait_for(
            &mut w,
            |e| matches!(e, LinkEvent::Down { name, .. } if name == "mhl0"),
        );
        assert!(ev.contains(&LinkEvent::Down {
            name: "mhl0".into(),
            index
        }));
        assert!(
            !ev.iter().any(|e| matches!(e, LinkEvent::Up { .. })),
            "no repeated Up: {ev:?}"
        );

        // Losing the carrier (peer down) while admin-up is a Down too.
        netlink::set_link_up("mhl0", true).unwrap();
        wait_for(
            &mut w,
            |e| matches!(e, LinkEvent::Up { name, .. } if name == "mhl0"),
        );
        netlink::set_link_up("mhl0p", false).unwrap();
        wait_for(
            &mut w,
            |e| matches!(e, LinkEvent::Down { name, .. } if name == "mhl0"),
        );

        run_cmd(&["ip", "link", "del", "mhl0"]).unwrap();
        until(Duration::from_secs(5), || {
            let mut v = Vec::new();
            w.poll_events(&mut v).unwrap();
            (w.is_up("mhl0").is_none()).then_some(())
        })
        .expect("deleted link still known");
    })
    .unwrap();
}

#[test]
fn routes_are_added_and_deleted() {
    let ns = NetNs::new("mhio").unwrap();
    ns.run(|| {
        make_link();
        netlink::set_link_up("mhl0", true).unwrap();
        netlink::add_route(net("203.0.113.77/24"), "mhl0").unwrap();
        netlink::add_route(net("2001:db8:77::/48"), "mhl0").unwrap();
        netlink::add_route(net("203.0.113.0/24"), "mhl0").unwrap(); // idempotent
        let v4 = run_cmd(&["ip", "route", "show", "dev", "mhl0"]).unwrap();
        assert!(v4.contains("203.0.113.0/24"), "{v4}");
        let v6 = run_cmd(&["ip", "-6", "route", "show", "dev", "mhl0"]).unwrap();
        assert!(v6.contains("2001:db8:77::/48"), "{v6}");

        netlink::del_route(net("203.0.113.0/24"), "mhl0").unwrap();
        netlink::del_route(net("2001:db8:77::/48"), "mhl0").unwrap();
        assert!(!run_cmd(&["ip", "route", "show", "dev", "mhl0"])
            .unwrap()
            .contains("203.0.113"));
        assert!(!run_cmd(&["ip", "-6", "route", "show", "dev", "mhl0"])
            .unwrap()
            .contains("2001:db8:77"));

        let e = netlink::del_route(net("203.0.113.0/24"), "mhl0").unwrap_err();
        assert_eq!(e.errno(), Some(libc::ESRCH), "{e}");
        assert!(matches!(
            netlink::add_route(net("203.0.113.0/24"), "nope0"),
            Err(NetlinkError::NoSuchInterface { .. })
        ));
        // Refusals carry the kernel's reason: MTU below the IPv4 minimum.
        let e = netlink::set_mtu("mhl0", 10).unwrap_err();
        assert!(matches!(e, NetlinkError::Kernel { .. }), "{e}");
    })
    .unwrap();
}

/// The daemon's pattern: AsyncFd around the watcher on a current-thread runtime.
#[test]
fn watcher_works_under_tokio_asyncfd() {
    let ns = NetNs::new("mhio").unwrap();
    ns.run(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            use tokio::io::{unix::AsyncFd, Interest};
            let watcher = LinkWatcher::new().unwrap();
            // SAFETY: LinkWatcher owns its fd and as_raw_fd always returns that same fd.
            let mut afd = unsafe { AsyncFd::register_with_interest(watcher, Interest::READABLE) }
                .map_err(|e| e.to_string())
                .unwrap();
            make_link();
            netlink::set_link_up("mhl0", true).unwrap();
            let mut events = Vec::new();
            let wait = async {
                loop {
                    let mut guard = afd.readable_mut().await.unwrap();
                    // poll_events drains the socket, so readiness can be cleared after it.
                    guard.get_inner_mut().poll_events(&mut events).unwrap();
                    guard.clear_ready();
                    if events
                        .iter()
                        .any(|e| matches!(e, LinkEvent::Up { name, .. } if name == "mhl0"))
                    {
                        break;
                    }
                }
            };
            tokio::time::timeout(Duration::from_secs(5), wait)
                .await
                .expect("no Up event via tokio");
        });
    })
    .unwrap();
}
