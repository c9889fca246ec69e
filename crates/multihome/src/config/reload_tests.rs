//! Reload tests (`reload.rs`): a link keeps its path id by name, a new one takes an id
//! no running link holds, policies that name links follow the ids, and a change of a key
//! fixed at start is refused on its line.

use super::reload::{self, assign_ids, client as reload_client};
use super::*;
use multihome_proto::path::PathId;
use multihome_proto::policy::{LinkRule, Policy};
use std::path::Path;

const KEY: &str = "q5ZGxSCEYQ8aaUULUyOJXWKGjS6gtBg8GK62rzCGk0Q=";

/// A client file with `links` (name, interface) and `extra` appended.
fn file(links: &[(&str, &str)], extra: &str) -> String {
    let mut t = format!(
        "[client]\nprivate_key_file = \"c.key\"\nserver_public_key = \"{KEY}\"\n\
         server = \"10.0.1.1:7000\"\ntun_address = \"10.200.0.2/24\"\nmtu = 1300\n"
    );
    for (name, iface) in links {
        t += &format!("\n[[link]]\nname = \"{name}\"\ninterface = \"{iface}\"\n");
    }
    t + extra
}

fn src(text: &str) -> Source<'_> {
    Source {
        path: Path::new("/etc/mh/client.toml"),
        text,
    }
}

fn start(text: &str) -> ClientSettings {
    client::validate(&src(text)).unwrap()
}

fn ids(s: &ClientSettings) -> Vec<(String, u8)> {
    s.links.iter().map(|l| (l.name.clone(), l.id.0)).collect()
}

#[test]
fn a_link_keeps_its_id_and_a_new_one_takes_a_fresh_id() {
    let old = start(&file(
        &[("dsl", "eth0"), ("lte", "wwan0"), ("wifi", "wlan0")],
        "",
    ));
    // dsl removed, a new link `sat` listed first: lte and wifi keep 1 and 2, and sat gets
    // 3, not dsl's 0, so dsl's path is not handed at once to another interface.
    let t = file(&[("sat", "sat0"), ("lte", "wwan0"), ("wifi", "wlan0")], "");
    let r = reload_client(&src(&t), &old).unwrap();
    assert_eq!(
        ids(&r.settings),
        [("sat".into(), 3), ("lte".into(), 1), ("wifi".into(), 2)]
    );
    let names =
        |v: &[client::LinkSettings]| -> Vec<String> { v.iter().map(|l| l.name.clone()).collect() };
    assert_eq!(names(&r.links.added), ["sat"]);
    assert_eq!(names(&r.links.removed), ["dsl"]);
    assert!(r.links.rebound.is_empty() && r.links.recosted.is_empty());
    assert!(!r.policies_changed);
    assert_eq!(
        r.describe(),
        [
            "link `sat` added (interface sat0, server 10.0.1.1:7000, path 3)",
            "link `dsl` removed"
        ]
    );
}

#[test]
fn ids_are_reused_only_when_every_other_is_taken() {
    let names: Vec<String> = (0..16).map(|i| format!("l{i}")).collect();
    let links: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "eth0")).collect();
    let mut old = start(&file(&links, "")).links;
    let mut new = old.clone();
    new[5].name = "fresh".into();
    assign_ids(&mut new, &old);
    // Every id is held by a link of the old file: the removed l5's id is the only free one.
    assert_eq!(new[5].id, PathId(5));
    old.truncate(2);
    let mut new = start(&file(&[("a", "eth0"), ("l1", "eth1")], "")).links;
    assign_ids(&mut new, &old);
    assert_eq!((new[0].id, new[1].id), (PathId(2), PathId(1)));
}

#[test]
fn a_link_policy_follows_the_links_running_id() {
    let old = start(&file(&[("dsl", "eth0"), ("lte", "wwan0")], ""));
    let t = file(&[("lte", "wwan0")], "[policy]\ndefault = \"only:lte\"\n");
    let r = reload_client(&src(&t), &old).unwrap();
    // lte is the file's first link but keeps path 1.
    assert_eq!(
        r.settings.classifier.default,
        Policy::Link(LinkRule::Only(PathId(1)))
    );
    assert!(r.policies_changed);
}

#[test]
fn moved_and_recosted_links_are_told_apart() {
    let old = start(&file(&[("dsl", "eth0"), ("lte", "wwan0")], ""));
    let t = file(&[("dsl", "eth9"), ("lte", "wwan0")], "").replace(
        "interface = \"wwan0\"\n",
        "interface = \"wwan0\"\ncost = 5\n",
    );
    let r = reload_client(&src(&t), &old).unwrap();
    assert_eq!(r.links.rebound.len(), 1);
    assert_eq!(r.links.rebound[0].interface, "eth9");
    assert_eq!(r.links.recosted.len(), 1);
    assert_eq!(r.links.recosted[0].cost, 5);
    assert!(r.links.added.is_empty() && r.links.removed.is_empty());
}

#[test]
fn a_key_fixed_at_start_is_refused_on_its_line() {
    let old = start(&file(&[("dsl", "eth0")], ""));
    let t = file(&[("dsl", "eth0")], "").replace("mtu = 1300", "mtu = 1280");
    let e = reload_client(&src(&t), &old).unwrap_err();
    assert_eq!(e.line, 6, "{e}");
    assert!(e.message.contains("`mtu` changed"), "{e}");
    assert!(e.fix.contains("restart"), "{e}");
    // Removed: its default (1400) differs, and the error is about the file.
    let t = file(&[("dsl", "eth0")], "").replace("mtu = 1300\n", "");
    let e = reload_client(&src(&t), &old).unwrap_err();
    assert_eq!(e.line, 0, "{e}");
    assert!(e.message.contains("`mtu` changed"), "{e}");
}

#[test]
fn an_invalid_file_is_refused_as_at_start() {
    let old = start(&file(&[("dsl", "eth0")], ""));
    let t = file(&[("dsl", "eth0")], "[policy]\ndefault = \"only:lte\"\n");
    let e = reload_client(&src(&t), &old).unwrap_err();
    assert!(e.message.contains("names no link"), "{e}");
    assert_eq!(e.line, 12, "{e}");
}

#[test]
fn links_cannot_move_under_detours_but_costs_may_change() {
    let relay = "\n[[relay]]\naddress = \"198.51.100.1:51900\"\n\
                 public_key = \"AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=\"\n";
    let old = start(&file(&[("dsl", "eth0"), ("lte", "wwan0")], relay));
    let t = file(&[("dsl", "eth0")], relay);
    let e = reload_client(&src(&t), &old).unwrap_err();
    assert!(e.message.contains("detours"), "{e}");
    let t = file(&[("dsl", "eth0"), ("lte", "wwan0")], relay).replace(
        "interface = \"wwan0\"\n",
        "interface = \"wwan0\"\ncost = 3\n",
    );
    let r = reload_client(&src(&t), &old).unwrap();
    assert_eq!(r.links.recosted.len(), 1);
}

const PEER_A: &str = "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=";
const PEER_B: &str = "AwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwM=";

fn server_file(peers: &[(&str, &str, &str)], extra: &str) -> String {
    let mut t = format!(
        "[server]\nlisten = \"0.0.0.0:7000\"\nprivate_key_file = \"s.key\"\n\
         tun_address = \"10.200.0.1/24\"\n{extra}"
    );
    for (name, key, net) in peers {
        t += &format!(
            "\n[[peer]]\nname = \"{name}\"\npublic_key = \"{key}\"\nallowed_ips = [\"{net}\"]\n"
        );
    }
    t
}

/// Peers are matched by key: a renamed peer is changed, not removed and added.
#[test]
fn server_peers_are_matched_by_key() {
    let old =
        server::validate(&src(&server_file(&[("home", PEER_A, "10.200.0.2/32")], ""))).unwrap();
    let t = server_file(
        &[
            ("office", PEER_B, "10.200.0.3/32"),
            ("home2", PEER_A, "10.200.0.2/32"),
        ],
        "default_policy = \"redundant\"\n",
    );
    let r = reload::server(&src(&t), &old).unwrap();
    assert_eq!(
        r.describe(),
        [
            "peer `office` added (10.200.0.3/32)",
            "peer `home2` now 10.200.0.2/32",
            "default_policy redundant"
        ]
    );
    let t = server_file(&[("office", PEER_B, "10.200.0.3/32")], "");
    let r = reload::server(&src(&t), &old).unwrap();
    assert_eq!(r.removed.len(), 1);
    assert_eq!(r.removed[0].name, "home");
}

/// The relays handed to the clients may change; the change is listed.
#[test]
fn server_relays_may_change() {
    let peers = [("home", PEER_A, "10.200.0.2/32")];
    let relay = |name: &str| {
        format!(
            "\n[[relay]]\nname = \"{name}\"\naddress = \"10.0.80.2:51900\"\npublic_key = \"{PEER_B}\"\n"
        )
    };
    let old = server::validate(&src(&(server_file(&peers, "") + &relay("rly")))).unwrap();
    let same = reload::server(&src(&(server_file(&peers, "") + &relay("rly"))), &old).unwrap();
    assert!(!same.relays_changed);
    assert!(same.describe().is_empty());
    let renamed = server_file(&peers, "") + &relay("fra");
    let r = reload::server(&src(&renamed), &old).unwrap();
    assert_eq!(r.describe(), ["relays handed out: fra"]);
    let r = reload::server(&src(&server_file(&peers, "")), &old).unwrap();
    assert_eq!(r.describe(), ["relays handed out: none"]);
}

#[test]
fn a_server_key_fixed_at_start_is_refused_on_its_line() {
    let peers = [("home", PEER_A, "10.200.0.2/32")];
    let old = server::validate(&src(&server_file(&peers, ""))).unwrap();
    let t = server_file(&peers, "").replace("0.0.0.0:7000", "0.0.0.0:7001");
    let e = reload::server(&src(&t), &old).unwrap_err();
    assert_eq!(e.line, 2, "{e}");
    assert!(e.message.contains("`listen` changed"), "{e}");
    assert!(e.fix.contains("restart the server"), "{e}");
    // The threads' sockets and device queues are made at start.
    let threads = server_file(&peers, "threads = 1\n");
    let old = server::validate(&src(&threads)).unwrap();
    let e = reload::server(&src(&threads.replace("threads = 1", "threads = 2")), &old).unwrap_err();
    assert!(e.message.contains("`threads` changed"), "{e}");
}
