//! Config tests: valid files parse; each kind of mistake names the right line and a fix.

use super::*;
use std::path::Path;
use std::time::Duration;

const KEY: &str = "q5ZGxSCEYQ8aaUULUyOJXWKGjS6gtBg8GK62rzCGk0Q=";

fn client_src(extra_client: &str, links: &str) -> String {
    format!(
        "[client]\nprivate_key_file = \"c.key\"\nserver_public_key = \"{KEY}\"\n{extra_client}tun_address = \"10.200.0.2/24\"\nroutes = [\"10.50.0.0/24\"]\n\n{links}"
    )
}

const LINKS: &str = "[[link]]\nname = \"dsl\"\ninterface = \"veth0\"\n\n[[link]]\nname = \"lte\"\ninterface = \"veth1\"\nserver = \"10.0.2.1:7000\"\n";

fn client(text: &str) -> Result<ClientSettings, ConfigError> {
    client::validate(&Source {
        path: Path::new("/etc/mh/client.toml"),
        text,
    })
}

#[test]
fn valid_client() {
    let t = client_src("server = \"10.0.1.1:7000\"\n", LINKS)
        + "[policy]\ndefault = \"aggregate\"\n[[policy.rule]]\nname = \"voip\"\nprotocol = \"udp\"\nports = \"5000-5999\"\npolicy = \"redundant\"\ncopies = 2\n";
    let c = client(&t).unwrap();
    assert_eq!(c.links.len(), 2);
    assert_eq!(c.links[1].server, "10.0.2.1:7000".parse().unwrap());
    assert_eq!(c.private_key_file, Path::new("/etc/mh/c.key"));
    assert_eq!(c.classifier.rules[0].ports, Some((5000, 5999)));
    assert_eq!(c.links[0].interface_line, 10);
}

#[test]
fn dashboard_is_off_unless_given_and_located_when_wrong() {
    let base = client(&client_src("server = \"10.0.1.1:7000\"\n", LINKS)).unwrap();
    assert_eq!(base.dashboard, None);
    let on = client_src(
        "server = \"10.0.1.1:7000\"\ndashboard = \"127.0.0.1:8080\"\n",
        LINKS,
    );
    assert_eq!(
        client(&on).unwrap().dashboard,
        Some("127.0.0.1:8080".parse().unwrap())
    );
    let e = client(&on.replace("127.0.0.1:8080", "localhost:8080")).unwrap_err();
    assert_eq!(e.line, 5, "{e}");
    assert!(e.message.contains("dashboard `localhost:8080`"), "{e}");
}

#[test]
fn unknown_key_names_line() {
    let t = client_src("server = \"10.0.1.1:7000\"\ntun_adress = \"x\"\n", LINKS);
    let e = client(&t).unwrap_err();
    assert_eq!(e.line, 5, "{e}");
    assert!(e.to_string().contains("client.toml:5"), "{e}");
    assert!(e.message.contains("unknown field"), "{e}");
}

#[test]
fn malformed_key_names_line() {
    let t = client_src("server = \"10.0.1.1:7000\"\n", LINKS).replace(KEY, "not-a-key");
    let e = client(&t).unwrap_err();
    assert_eq!(e.line, 3);
    assert!(e.fix.contains("keygen"));
}

#[test]
fn missing_server_is_explained() {
    let e = client(&client_src("", LINKS)).unwrap_err();
    assert!(e.message.contains("no server address"), "{e}");
    assert!(e.fix.contains("server"), "{e}");
}

#[test]
fn bad_values_are_located() {
    let bad_policy =
        client_src("server = \"10.0.1.1:7000\"\n", LINKS) + "[policy]\ndefault = \"fastest\"\n";
    let e = client(&bad_policy).unwrap_err();
    assert!(e.message.contains("unknown policy"), "{e}");
    assert_eq!(e.line, 17);
    let bad_if = client_src(
        "server = \"10.0.1.1:7000\"\n",
        &LINKS.replace("veth0", "a/b"),
    );
    assert!(client(&bad_if)
        .unwrap_err()
        .message
        .contains("interface name"));
    let no_links = client_src("server = \"10.0.1.1:7000\"\n", "");
    assert!(client(&no_links)
        .unwrap_err()
        .message
        .contains("no [[link]]"));
    let syntax = "[client\nx=1";
    assert_eq!(client(syntax).unwrap_err().line, 1);
}

#[test]
fn server_config() {
    let t = format!(
        "[server]\nlisten = \"0.0.0.0:7000\"\nprivate_key_file = \"/k\"\ntun_address = \"10.200.0.1/24\"\nuplink = \"eth0\"\n\n[[peer]]\nname = \"home\"\npublic_key = \"{KEY}\"\nallowed_ips = [\"10.200.0.2/32\", \"192.168.50.0/24\"]\n"
    );
    let s = server::validate(&Source {
        path: Path::new("s.toml"),
        text: &t,
    })
    .unwrap();
    assert_eq!(s.peers[0].allowed_ips.len(), 2);
    assert_eq!(s.uplink, Some(("eth0".into(), 5)));
    assert!(
        !s.kernel_copies,
        "the server's fast path is off unless asked"
    );
    assert_eq!(s.redundant_copies, None, "adaptive unless asked");
    let on = t.replace(
        "uplink = ",
        "kernel_copies = true\nredundant_copies = 3\nuplink = ",
    );
    let on = server::validate(&Source {
        path: Path::new("s.toml"),
        text: &on,
    })
    .unwrap();
    assert!(on.kernel_copies);
    assert_eq!(on.redundant_copies, Some(3));
    let zero = t.replace("uplink = ", "redundant_copies = 0\nuplink = ");
    let e = server::validate(&Source {
        path: Path::new("s.toml"),
        text: &zero,
    })
    .unwrap_err();
    assert!(e.message.contains("redundant_copies = 0"), "{e}");
    assert_eq!(e.line, 5, "{e}");
    let no_ips = t.replace(
        "allowed_ips = [\"10.200.0.2/32\", \"192.168.50.0/24\"]\n",
        "",
    );
    let e = server::validate(&Source {
        path: Path::new("s.toml"),
        text: &no_ips,
    })
    .unwrap_err();
    assert!(e.message.contains("allowed_ips"), "{e}");
    assert_eq!(e.line, 7);
}

#[test]
fn cipher_choice() {
    use multihome_proto::crypto::CipherSet;
    let c = client(&client_src("server = \"10.0.1.1:7000\"\n", LINKS)).unwrap();
    assert_eq!(c.ciphers, CipherSet::hardware(), "auto by default");
    let t = client_src(
        "server = \"10.0.1.1:7000\"\ncipher = \"chacha20-poly1305\"\n",
        LINKS,
    );
    assert_eq!(client(&t).unwrap().ciphers, CipherSet::CHACHA20_POLY1305);
    let t = client_src(
        "server = \"10.0.1.1:7000\"\ncipher = \"aes-256-gcm\"\n",
        LINKS,
    );
    assert_eq!(client(&t).unwrap().ciphers, CipherSet::ALL);
    let t = client_src("server = \"10.0.1.1:7000\"\ncipher = \"aes128\"\n", LINKS);
    let e = client(&t).unwrap_err();
    assert_eq!(e.line, 5, "{e}");
    assert!(e.message.contains("unknown cipher"), "{e}");
    assert!(e.fix.contains("chacha20-poly1305"), "{e}");
}

#[test]
fn realtime_rules_and_link_costs() {
    let links = LINKS.replace(
        "interface = \"veth1\"\n",
        "interface = \"veth1\"\ncost = 5\n",
    );
    let rule = "[[policy.rule]]\nname = \"voice\"\nprotocol = \"udp\"\nports = \"5000-5999\"\npolicy = \"realtime\"\n";
    let t = client_src("server = \"10.0.1.1:7000\"\n", &links) + rule + "deadline_ms = 100\n";
    let c = client(&t).unwrap();
    assert_eq!(
        c.classifier.rules[0].policy,
        multihome_proto::policy::Policy::realtime(std::time::Duration::from_millis(100))
    );
    assert_eq!((c.links[0].cost, c.links[1].cost), (1, 5));
    let t = client_src("server = \"10.0.1.1:7000\"\n", LINKS) + rule;
    let c = client(&t).unwrap();
    assert_eq!(
        c.classifier.rules[0].policy,
        multihome_proto::policy::Policy::realtime(multihome_proto::policy::DEFAULT_DEADLINE)
    );
    let t = client_src("server = \"10.0.1.1:7000\"\n", LINKS) + rule + "deadline_ms = 0\n";
    let e = client(&t).unwrap_err();
    assert!(e.message.contains("deadline_ms = 0"), "{e}");
    let t = client_src("server = \"10.0.1.1:7000\"\n", LINKS)
        + &rule.replace("realtime", "best")
        + "deadline_ms = 100\n";
    let e = client(&t).unwrap_err();
    assert!(e.message.contains("not realtime"), "{e}");
    let links = LINKS.replace(
        "interface = \"veth1\"\n",
        "interface = \"veth1\"\ncost = 0\n",
    );
    let e = client(&client_src("server = \"10.0.1.1:7000\"\n", &links)).unwrap_err();
    assert!(e.message.contains("cost = 0"), "{e}");
}

/// `fec = false` turns parity off on a realtime rule, keeping its deadline; anything but
/// a boolean, or `fec` on another policy, is an error on its line.
#[test]
fn realtime_fec_switch() {
    use multihome_proto::policy::Policy;
    let rule = "[[policy.rule]]\nname = \"video\"\nprotocol = \"udp\"\npolicy = \"realtime\"\n";
    let base = client_src("server = \"10.0.1.1:7000\"\n", LINKS);
    let line_of_fec = base.lines().count() + 5;
    let c = client(&(base.clone() + rule + "deadline_ms = 120\nfec = false\n")).unwrap();
    assert_eq!(
        c.classifier.rules[0].policy,
        Policy::Realtime {
            deadline: std::time::Duration::from_millis(120),
            fec: false
        }
    );
    let c = client(&(base.clone() + rule + "fec = true\n")).unwrap();
    assert_eq!(
        c.classifier.rules[0].policy,
        Policy::realtime(multihome_proto::policy::DEFAULT_DEADLINE)
    );
    let e = client(&(base.clone() + rule + "fec = \"off\"\n")).unwrap_err();
    assert_eq!(e.line, line_of_fec, "{e}");
    assert!(e.message.contains("invalid type"), "{e}");
    let e = client(&(base + &rule.replace("realtime", "redundant") + "fec = false\n")).unwrap_err();
    assert_eq!(e.line, line_of_fec, "{e}");
    assert!(
        e.message
            .contains("fec on a rule whose policy is not realtime"),
        "{e}"
    );
}

#[test]
fn relays_and_detours() {
    let relays = format!(
        "[[relay]]\nname = \"fra\"\naddress = \"192.0.2.1:51900\"\npublic_key = \"{KEY}\"\n\n\
         [[relay]]\naddress = \"192.0.2.2:51900\"\npublic_key = \"{KEY}\"\nmode = \"tunnel\"\n"
    );
    let c = client(&(client_src("server = \"10.0.1.1:7000\"\n", LINKS) + &relays)).unwrap();
    assert_eq!(c.relays.len(), 2);
    assert_eq!(c.detours, 2, "default");
    assert_eq!(c.relays[1].name, "192.0.2.2:51900");
    assert_eq!(c.relays[1].mode, multihome_proto::detour::Mode::Tunnel);
    let none = client(&client_src("server = \"10.0.1.1:7000\"\n", LINKS)).unwrap();
    assert_eq!(none.detours, 2, "for the relays the server hands out");
    let off = client(&client_src(
        "server = \"10.0.1.1:7000\"\ndetours = 0\n",
        LINKS,
    ))
    .unwrap();
    assert_eq!(off.detours, 0);
    let three = client_src("server = \"10.0.1.1:7000\"\ndetours = 3\n", LINKS) + &relays;
    assert_eq!(client(&three).unwrap().detours, 3);
    let too_many = client_src("server = \"10.0.1.1:7000\"\ndetours = 15\n", LINKS) + &relays;
    let e = client(&too_many).unwrap_err();
    assert_eq!(e.line, 5, "{e}");
    assert!(e.fix.contains("0 to 14"), "{e}");
    let bad_mode = relays.replace("\"tunnel\"", "\"vpn\"");
    let e = client(&(client_src("server = \"10.0.1.1:7000\"\n", LINKS) + &bad_mode)).unwrap_err();
    assert!(e.message.contains("relay mode"), "{e}");
    assert_eq!(e.line, 24, "{e}");
    let twice = relays.replace("192.0.2.2", "192.0.2.1");
    let e = client(&(client_src("server = \"10.0.1.1:7000\"\n", LINKS) + &twice)).unwrap_err();
    assert!(e.message.contains("listed twice"), "{e}");
}

#[test]
fn kernel_copies_is_off_unless_asked() {
    let c = client(&client_src("server = \"10.0.1.1:7000\"\n", LINKS)).unwrap();
    assert!(!c.kernel_copies);
    let t = client_src("server = \"10.0.1.1:7000\"\nkernel_copies = true\n", LINKS);
    assert!(client(&t).unwrap().kernel_copies);
}

#[test]
fn hold_limits_default_and_range() {
    let c = client(&client_src("server = \"10.0.1.1:7000\"\n", LINKS)).unwrap();
    assert_eq!(c.hold, (16 << 20, Duration::from_secs(60)));
    let t = client_src(
        "server = \"10.0.1.1:7000\"\nhold_max_mb = 4\nhold_max_s = 30\n",
        LINKS,
    );
    assert_eq!(client(&t).unwrap().hold, (4 << 20, Duration::from_secs(30)));
    let bad = client_src("server = \"10.0.1.1:7000\"\nhold_max_s = 0\n", LINKS);
    let e = client(&bad).unwrap_err();
    assert!(e.message.contains("hold_max_s = 0"), "{e}");
    assert_eq!(e.line, 5, "{e}");
}

#[test]
fn keepalive_defaults_to_five_seconds_within_one_to_twenty_five() {
    let c = client(&client_src("server = \"10.0.1.1:7000\"\n", LINKS)).unwrap();
    assert_eq!(c.keepalive, Duration::from_secs(5));
    let t = client_src("server = \"10.0.1.1:7000\"\nkeepalive_ms = 20000\n", LINKS);
    assert_eq!(client(&t).unwrap().keepalive, Duration::from_secs(20));
    for bad in [999, 25_001] {
        let t = client_src(
            &format!("server = \"10.0.1.1:7000\"\nkeepalive_ms = {bad}\n"),
            LINKS,
        );
        let e = client(&t).unwrap_err();
        assert!(e.message.contains(&format!("keepalive_ms = {bad}")), "{e}");
        assert_eq!(e.line, 5, "{e}");
    }
}

#[test]
fn link_policies_name_links_and_errors_are_located() {
    use multihome_proto::path::PathId;
    use multihome_proto::policy::{LinkRule, Policy};
    let t = client_src("server = \"10.0.1.1:7000\"\n", LINKS)
        + "[policy]\ndefault = \"backup:lte\"\n[[policy.rule]]\nname = \"bulk\"\nports = \"80\"\n\
           policy = \"only:dsl\"\n[[policy.rule]]\nname = \"ssh\"\nports = \"22\"\npolicy = \"prefer:lte\"\n";
    let c = client(&t).unwrap();
    assert_eq!(
        c.classifier.default,
        Policy::Link(LinkRule::Backup(PathId(1)))
    );
    assert_eq!(
        c.classifier.rules[0].policy,
        Policy::Link(LinkRule::Only(PathId(0)))
    );
    assert_eq!(
        c.classifier.rules[1].policy,
        Policy::Link(LinkRule::Prefer(PathId(1)))
    );
    // An unknown link name: the line of the policy, the links to choose from.
    let t = client_src("server = \"10.0.1.1:7000\"\n", LINKS)
        + "[policy]\n[[policy.rule]]\nname = \"bulk\"\nports = \"80\"\npolicy = \"only:wifi\"\n";
    let e = client(&t).unwrap_err();
    assert_eq!(e.line, 20, "{e}");
    assert!(e.message.contains("no [[link]] `wifi`"), "{e}");
    assert!(e.fix.contains("dsl, lte"), "{e}");
    let t =
        client_src("server = \"10.0.1.1:7000\"\n", LINKS) + "[policy]\ndefault = \"first:dsl\"\n";
    let e = client(&t).unwrap_err();
    assert!(e.message.contains("unknown policy"), "{e}");
    assert!(e.fix.contains("backup:LINK"), "{e}");
    // The server has no links to name.
    let t = format!(
        "[server]\nlisten = \"0.0.0.0:7000\"\nprivate_key_file = \"/k\"\ntun_address = \"10.200.0.1/24\"\ndefault_policy = \"only:dsl\"\n\n[[peer]]\nname = \"home\"\npublic_key = \"{KEY}\"\nallowed_ips = [\"10.200.0.2/32\"]\n"
    );
    let e = server::validate(&Source {
        path: Path::new("s.toml"),
        text: &t,
    })
    .unwrap_err();
    assert_eq!(e.line, 5, "{e}");
    assert!(e.message.contains("link policy is the client's"), "{e}");
}

fn server_with(extra_server: &str, relays: &str) -> Result<ServerSettings, ConfigError> {
    let t = format!(
        "[server]\nlisten = \"0.0.0.0:7000\"\nprivate_key_file = \"/k\"\ntun_address = \"10.200.0.1/24\"\n{extra_server}\n[[peer]]\nname = \"home\"\npublic_key = \"{KEY}\"\nallowed_ips = [\"10.200.0.2/32\"]\n{relays}"
    );
    server::validate(&Source {
        path: Path::new("s.toml"),
        text: &t,
    })
}

/// The server's `[[relay]]` list: validated as a client's, and as the wire carries it.
#[test]
fn server_relays() {
    let relay = |name: &str, addr: &str| {
        format!("\n[[relay]]\nname = \"{name}\"\naddress = \"{addr}\"\npublic_key = \"{KEY}\"\n")
    };
    assert!(server_with("", "").unwrap().relays.is_empty());
    let two =
        relay("rly", "10.0.80.2:51900") + &relay("fra", "192.0.2.50:51900") + "mode = \"tunnel\"\n";
    let s = server_with("", &two).unwrap();
    assert_eq!(s.relays.len(), 2);
    assert_eq!(s.relays[1].mode, multihome_proto::detour::Mode::Tunnel);
    // Twice, too many, a long or missing name (the address is too long as a name), an
    // address clients cannot send to: each refused at its [[relay]].
    let e = server_with(
        "",
        &(relay("a", "10.0.80.2:1") + &relay("a", "10.0.80.3:1")),
    )
    .unwrap_err();
    assert!(e.message.contains("listed twice"), "{e}");
    let nine: String = (1..=9)
        .map(|i| relay(&format!("r{i}"), &format!("10.0.80.{i}:1")))
        .collect();
    let e = server_with("", &nine).unwrap_err();
    assert!(e.message.contains("more than 8"), "{e}");
    let unnamed = "\n[[relay]]\naddress = \"[2001:db8:1234:5678:9abc:def0:1234:5678]:51900\"\npublic_key = \"KEY\"\n".replace("KEY", KEY);
    for bad in [
        relay(&"n".repeat(33), "10.0.80.2:1"),
        unnamed,
        relay("a", "0.0.0.0:51900"),
        relay("a", "10.0.80.2:0"),
    ] {
        let e = server_with("", &bad).unwrap_err();
        assert!(
            e.message.contains("cannot be handed to clients"),
            "{bad}: {e}"
        );
        assert_eq!(e.line, 11, "{e}");
    }
    // Eight relays with 32-byte names take 694 bytes: mtu 720 or more carries them.
    let full: String = (1..=8)
        .map(|i| relay(&format!("{i}{}", "n".repeat(31)), &format!("10.0.80.{i}:1")))
        .collect();
    let e = server_with("mtu = 600\n", &full).unwrap_err();
    assert!(e.message.contains("694 bytes"), "{e}");
    assert!(e.fix.contains("720"), "{e}");
    assert_eq!(server_with("mtu = 720\n", &full).unwrap().relays.len(), 8);
}

#[test]
fn stream_section_defaults_and_mistakes() {
    let base = client_src("server = \"10.0.1.1:7000\"\n", LINKS);
    assert_eq!(client(&base).unwrap().stream, None);
    let on = client(&(base.clone() + "\n[stream]\nlan = [\"eth1\"]\n")).unwrap();
    let s = on.stream.unwrap();
    assert_eq!(s.lan, vec!["eth1".to_string()]);
    assert_eq!(s.listen_port, stream::DEFAULT_LISTEN_PORT);
    assert_eq!(s.max_connections, stream::DEFAULT_MAX_CONNECTIONS);
    assert_eq!(s.hold_syns, Some(stream::DEFAULT_QUEUE_NUM));
    assert_eq!(s.congestion_control, "bbr");
    assert!(s.follow_tunnel);
    assert!(s.remove_addr);
    let off = client(
        &(base.clone()
            + "\n[stream]\nlan = [\"eth1\"]\nhold_syns = false\nfollow_tunnel = false\nremove_addr = false\n"),
    )
    .unwrap()
    .stream
    .unwrap();
    assert_eq!(off.hold_syns, None);
    assert!(!off.follow_tunnel);
    assert!(!off.remove_addr);
    for (bad, line, words) in [
        ("[stream]\n", 17, "lan"),
        (
            "[stream]\nlan = [\"eth1\"]\nlisten_port = 0\n",
            19,
            "listen_port",
        ),
        (
            "[stream]\nlan = [\"eth1\"]\nmax_connections = 0\n",
            19,
            "max_connections",
        ),
        ("[stream]\nlan = [\"a/b\"]\n", 18, "interface name"),
        (
            "[stream]\nlan = [\"eth1\"]\nport = 1\n",
            19,
            "unknown field",
        ),
        (
            "[stream]\nlan = [\"eth1\"]\ncongestion_control = \"BBR!\"\n",
            19,
            "congestion-control name",
        ),
    ] {
        let e = client(&format!("{base}\n{bad}")).unwrap_err();
        assert!(e.message.contains(words), "{bad}: {}", e.message);
        assert_eq!(e.line, line, "{bad}: {e}");
    }
}

/// `threads`: one per core unless set, 1–64, and one with the kernel fast path.
#[test]
fn server_threads() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(
        usize::from(server_with("", "").unwrap().threads),
        cores.min(64)
    );
    assert_eq!(server_with("threads = 3", "").unwrap().threads, 3);
    assert_eq!(server_with("kernel_copies = true", "").unwrap().threads, 1);
    for bad in ["threads = 0", "threads = 65"] {
        let e = server_with(bad, "").unwrap_err();
        assert!(e.message.contains(bad), "{e}");
        assert_eq!(e.line, 5, "{e}");
        assert!(e.fix.contains("1 to 64"), "{e}");
    }
    let e = server_with("threads = 2\nkernel_copies = true", "").unwrap_err();
    assert!(e.message.contains("kernel_copies"), "{e}");
    assert!(e.fix.contains("threads = 1"), "{e}");
    assert!(server_with("threads = 1\nkernel_copies = true", "").is_ok());
}
