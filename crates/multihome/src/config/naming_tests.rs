//! `[naming]` in client.toml and server.toml: what parses, and each mistake's line and fix.

use super::*;
use std::path::Path;

const KEY: &str = "q5ZGxSCEYQ8aaUULUyOJXWKGjS6gtBg8GK62rzCGk0Q=";

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

fn client_src(servers: &str, naming: &str) -> String {
    format!(
        "[client]\nprivate_key_file = \"c.key\"\n{servers}tun_address = \"10.200.0.2/24\"\n\n[[link]]\nname = \"dsl\"\ninterface = \"veth0\"\n\n{naming}"
    )
}

#[test]
fn client_resolves() {
    let naming =
        format!("[naming]\nresolvers = [\"10.0.1.1:7001\"]\ntrusted_servers = [\"{KEY}\"]\n");
    let c = client(&client_src("servers = \"resolve\"\n", &naming)).unwrap();
    let n = c.naming.unwrap();
    assert_eq!(n.resolvers, ["10.0.1.1:7001".parse().unwrap()]);
    assert_eq!(n.lease.as_secs(), 30);
    assert_eq!(c.links[0].server, naming::UNRESOLVED);
    // A list in `servers` is the resolvers.
    let naming = format!("[naming]\ntrusted_servers = [\"{KEY}\"]\nlease_s = 60\n");
    let c = client(&client_src(
        "servers = [\"10.0.1.1:7001\", \"10.0.2.1:7001\"]\n",
        &naming,
    ))
    .unwrap();
    assert_eq!(c.naming.unwrap().resolvers.len(), 2);
}

#[test]
fn client_mistakes_name_line_and_fix() {
    let naming =
        format!("[naming]\nresolvers = [\"10.0.1.1:7001\"]\ntrusted_servers = [\"{KEY}\"]\n");
    // A fixed server as well.
    let e = client(&client_src(
        &format!("servers = \"resolve\"\nserver_public_key = \"{KEY}\"\n"),
        &naming,
    ))
    .unwrap_err();
    assert_eq!(e.line, 4, "{e}");
    assert!(e.fix.contains("remove server"), "{e}");
    // No trusted servers.
    let e = client(&client_src(
        "servers = \"resolve\"\n",
        "[naming]\nresolvers = [\"10.0.1.1:7001\"]\n",
    ))
    .unwrap_err();
    assert!(e.fix.contains("trusted_servers"), "{e}");
    // [naming] without servers, and servers of the wrong kind.
    let e = client(&client_src(
        &format!("server_public_key = \"{KEY}\"\nserver = \"10.0.1.1:7000\"\n"),
        &naming,
    ))
    .unwrap_err();
    assert!(e.fix.contains("servers = \"resolve\""), "{e}");
    let e = client(&client_src("servers = \"dns\"\n", &naming)).unwrap_err();
    assert_eq!(e.line, 3, "{e}");
    // Neither a fixed server key nor servers.
    let e = client(&client_src("server = \"10.0.1.1:7000\"\n", "")).unwrap_err();
    assert!(e.message.contains("server_public_key"), "{e}");
}

fn server_src(naming: &str) -> String {
    format!(
        "[server]\nlisten = \"10.0.1.1:7000\"\nprivate_key_file = \"s.key\"\ntun_address = \"10.200.0.1/24\"\n\n[[peer]]\nname = \"c\"\npublic_key = \"{KEY}\"\nallowed_ips = [\"10.200.0.2/32\"]\n\n{naming}"
    )
}

#[test]
fn server_stores() {
    let s = server(&server_src(
        "[naming]\nlisten = \"10.0.1.1:7001\"\nstore = \"embedded\"\npath = \"naming.redb\"\n",
    ))
    .unwrap();
    let n = s.naming.unwrap();
    assert_eq!(
        n.store,
        naming::StoreSettings::Embedded("/etc/mh/naming.redb".into())
    );
    assert_eq!(n.advertise, ["10.0.1.1:7000".parse().unwrap()]);
    assert_eq!((n.capacity, n.lease.as_secs()), (1000, 10));
    let s = server(&server_src("[naming]\nlisten = \"10.0.1.1:7001\"\nstore = \"etcd\"\netcd = [\"http://10.0.9.1:2379\"]\n")).unwrap();
    assert!(matches!(s.naming.unwrap().store, naming::StoreSettings::Etcd(e) if e.len() == 1));
    assert!(server(&server_src("")).unwrap().naming.is_none());
}

#[test]
fn server_mistakes_name_line_and_fix() {
    let e = server(&server_src(
        "[naming]\nlisten = \"10.0.1.1:7001\"\nstore = \"etcd\"\n",
    ))
    .unwrap_err();
    assert_eq!(e.line, 13, "{e}");
    assert!(e.fix.contains("etcd = ["), "{e}");
    let e = server(&server_src(
        "[naming]\nlisten = \"10.0.1.1:7001\"\nstore = \"etcd\"\netcd = [\"10.0.9.1:2379\"]\n",
    ))
    .unwrap_err();
    assert!(e.fix.contains("http://"), "{e}");
    let e = server(&server_src(
        "[naming]\nlisten = \"0.0.0.0:7001\"\nstore = \"embedded\"\npath = \"x\"\n",
    ))
    .unwrap_err();
    assert!(e.fix.contains("resolver_advertise"), "{e}");
    let e = server(&server_src(
        "[naming]\nlisten = \"10.0.1.1:7001\"\nstore = \"sql\"\n",
    ))
    .unwrap_err();
    assert!(e.fix.contains("embedded"), "{e}");
}
