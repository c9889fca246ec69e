//! Config tests of address families: dual-stack TUN addresses, IPv6 link servers, and the
//! mistakes that mix families (each names its line and a fix).

use super::*;
use std::path::Path;

const KEY: &str = "q5ZGxSCEYQ8aaUULUyOJXWKGjS6gtBg8GK62rzCGk0Q=";

/// A client file with `tun` as the value of `tun_address` and `routes` as the routes list.
fn client_src(tun: &str, routes: &str) -> String {
    format!(
        "[client]\nprivate_key_file = \"c.key\"\nserver_public_key = \"{KEY}\"\n\
         tun_address = {tun}\nroutes = {routes}\n\n\
         [[link]]\nname = \"dsl\"\ninterface = \"veth0\"\nserver = \"10.0.1.1:7000\"\n\n\
         [[link]]\nname = \"fiber\"\ninterface = \"veth1\"\nserver = \"[2001:db8:1::1]:7000\"\n"
    )
}

fn client(text: &str) -> Result<ClientSettings, ConfigError> {
    client::validate(&Source {
        path: Path::new("/etc/mh/client.toml"),
        text,
    })
}

fn server(text: &str) -> Result<ServerSettings, ConfigError> {
    server::validate(&Source {
        path: Path::new("/etc/mh/server.toml"),
        text,
    })
}

#[test]
fn dual_stack_client_parses() {
    let c = client(&client_src(
        "[\"10.200.0.2/24\", \"fd00:200::2/64\"]",
        "[\"10.50.0.0/24\", \"::/0\"]",
    ))
    .unwrap();
    let tun: Vec<String> = c.tun_addresses.iter().map(|n| n.to_string()).collect();
    assert_eq!(tun, ["10.200.0.2/24", "fd00:200::2/64"]);
    assert_eq!(c.routes[1].to_string(), "::/0");
    assert_eq!(c.links[0].server, "10.0.1.1:7000".parse().unwrap());
    assert_eq!(c.links[1].server, "[2001:db8:1::1]:7000".parse().unwrap());
    // A single IPv6 address (an IPv6-only tunnel) is a valid tun_address too.
    let c = client(&client_src("\"fd00:200::2/64\"", "[\"2001:db8::/32\"]")).unwrap();
    assert_eq!(c.tun_addresses.len(), 1);
}

#[test]
fn tun_address_mistakes_name_line_and_fix() {
    for (tun, what) in [
        ("[\"10.200.0.2/24\", \"10.201.0.2/24\"]", "two IPv4"),
        ("[\"fd00::2/64\", \"fd01::2/64\"]", "two IPv6"),
        ("[]", "neither"),
        ("[\"10.200.0.2/24\", 7]", "neither"),
        ("7", "neither"),
        ("[\"10.200.0.2/24\", \"fd00::2\"]", "prefix length"),
    ] {
        let e = client(&client_src(tun, "[]")).unwrap_err();
        assert_eq!(e.line, 4, "{tun}: {e}");
        assert!(e.message.contains(what), "{tun}: {e}");
        assert!(e.fix.contains("2/"), "{tun}: {e}");
    }
}

#[test]
fn route_needs_a_tun_address_of_its_family() {
    let e = client(&client_src(
        "\"10.200.0.2/24\"",
        "[\n  \"10.50.0.0/24\",\n  \"2001:db8::/32\",\n]",
    ))
    .unwrap_err();
    assert_eq!(e.line, 7, "{e}");
    assert!(
        e.message
            .contains("route `2001:db8::/32` is IPv6 but tun_address has no IPv6 address"),
        "{e}"
    );
    assert!(e.fix.contains("fd00:200::2/64"), "{e}");
    let e = client(&client_src("\"fd00:200::2/64\"", "[\"0.0.0.0/0\"]")).unwrap_err();
    assert!(e.message.contains("no IPv4 address"), "{e}");
}

fn server_src(listen: &str, naming: &str) -> String {
    format!(
        "[server]\nlisten = \"{listen}\"\nprivate_key_file = \"s.key\"\n\
         tun_address = [\"10.200.0.1/24\", \"fd00:200::1/64\"]\n\n\
         [[peer]]\nname = \"c\"\npublic_key = \"{KEY}\"\n\
         allowed_ips = [\"10.200.0.2/32\", \"fd00:200::2/128\", \"2001:db8:50::/64\"]\n\n{naming}"
    )
}

#[test]
fn dual_stack_server_parses() {
    let naming = "[naming]\nlisten = \"10.0.1.1:7001\"\nstore = \"embedded\"\npath = \"n\"\n\
                  advertise = [\"192.0.2.1:7000\", \"[2001:db8::1]:7000\"]\n";
    let s = server(&server_src("[::]:7000", naming)).unwrap();
    assert_eq!(s.listen, "[::]:7000".parse().unwrap());
    assert_eq!(s.tun_addresses.len(), 2);
    assert_eq!(s.peers[0].allowed_ips.len(), 3);
    assert_eq!(s.naming.unwrap().advertise.len(), 2);
}

#[test]
fn advertised_family_must_reach_the_listening_socket() {
    let naming = "[naming]\nlisten = \"10.0.1.1:7001\"\nstore = \"embedded\"\npath = \"n\"\n\
                  advertise = [\n  \"192.0.2.1:7000\",\n  \"[2001:db8::1]:7000\",\n]\n";
    let e = server(&server_src("0.0.0.0:7000", naming)).unwrap_err();
    assert_eq!(e.line, 17, "{e}");
    assert!(
        e.message
            .contains("`[2001:db8::1]:7000` is IPv6 but [server] listen = \"0.0.0.0:7000\""),
        "{e}"
    );
    assert!(e.fix.contains("[::]:7000"), "{e}");
    // A specific IPv6 address takes no IPv4 datagrams.
    let e = server(&server_src("[2001:db8::1]:7000", naming)).unwrap_err();
    assert!(e.message.contains("`192.0.2.1:7000` is IPv4"), "{e}");
}
