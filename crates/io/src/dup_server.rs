//! The server's kernel fast path for downstream copies: the daemon seals a packet once, as a
//! datagram of one path of a client's session, and the kernel copies it onto the session's
//! other paths (nftables `dup`), each copy addressed to that path's client socket and sent
//! from the address the client reaches the server at on that path.
//!
//! Role: the server has one listening socket (port L) for all clients, and besides it a
//! *copy socket* (port C). In table `ip <table>`, chain `output`, a datagram from port C
//! gets source port L (so every reply reaches the clients from the port they talk to) and
//! is looked up by destination in a verdict map of the paths the table knows; the chain of
//! path p of a session, for each other path q of that session, rewrites the datagram to q
//! (destination address and port of q's client socket, source address the server's on q)
//! and `dup`s it to q's address — the clone leaves with those headers, on the route to q —
//! then writes p's own headers back, and the original leaves for p as routed.
//!
//! Why rewrite before `dup` rather than after (the client rewrites its copies in
//! `postrouting`): on the server all paths may leave by the same device and a clone cannot
//! be told from the original after the fact; before `dup` the chain knows which copy it is
//! making. The clone re-enters `output` with source port L, which the table does not match,
//! and `nf_dup_ipv4` never copies a copy.
//!
//! Invariants: one table of our own, replaced atomically (`nft -f -`: declare, delete,
//! define), so a leftover of a killed daemon is replaced; dropping the
//! [`crate::dup::KernelCopies`] that installed it deletes it. Only datagrams from port C
//! are touched. A datagram from C to a destination the map does not know (a path the
//! table has not learned yet) still gets port L and goes uncopied. IPv4 only; the map keys
//! are addresses and ports, never names, so nothing in the text comes from a peer.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddrV4};

use crate::nat::{check_name, NatError};

/// One path of a client's session as the table needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DupPath {
    /// The client's socket on this path (the path's remote).
    pub remote: SocketAddrV4,
    /// The server's address the client reaches on this path (the source the server's
    /// socket uses towards `remote`).
    pub local: Ipv4Addr,
}

/// The ruleset text `KernelCopies::install_ruleset` feeds to `nft -f -`: copies from port
/// `copy_port` onto the other paths of each session in `sessions`, all leaving from port
/// `listen_port`.
pub fn ruleset(
    table: &str,
    listen_port: u16,
    copy_port: u16,
    sessions: &[Vec<DupPath>],
) -> Result<String, NatError> {
    check_name("table name", table, 64)?;
    let (mut elements, mut chains) = (Vec::new(), String::new());
    for (s, paths) in sessions.iter().enumerate() {
        if paths.len() < 2 {
            continue; // nothing to copy onto
        }
        for (p, own) in paths.iter().enumerate() {
            let chain = format!("s{s}p{p}");
            elements.push(format!(
                "{} . {} : jump {chain}",
                own.remote.ip(),
                own.remote.port()
            ));
            let _ = writeln!(chains, "    chain {chain} {{");
            for (_, q) in paths.iter().enumerate().filter(|(i, _)| *i != p) {
                let _ = writeln!(chains, "        {} dup to {}", rewrite(q), q.remote.ip());
            }
            let _ = writeln!(chains, "        {}\n    }}", rewrite(own));
        }
    }
    let elements = if elements.is_empty() {
        String::new()
    } else {
        format!("        elements = {{ {} }}\n", elements.join(", "))
    };
    // Declaring then deleting the table makes the transaction replace any leftover copy.
    Ok(format!(
        r#"table ip {table}
delete table ip {table}
table ip {table} {{
    map paths {{
        type ipv4_addr . inet_service : verdict
{elements}    }}
    chain output {{
        type filter hook output priority filter; policy accept;
        udp sport {copy_port} udp sport set {listen_port} ip daddr . udp dport vmap @paths
    }}
{chains}}}
"#
    ))
}

/// The statements that address a datagram to path `q`.
fn rewrite(q: &DupPath) -> String {
    format!(
        "ip saddr set {} ip daddr set {} udp dport set {}",
        q.local,
        q.remote.ip(),
        q.remote.port()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(i: u8, port: u16) -> DupPath {
        DupPath {
            remote: SocketAddrV4::new(Ipv4Addr::new(10, 0, i + 1, 2), port),
            local: Ipv4Addr::new(10, 0, i + 1, 1),
        }
    }

    #[test]
    fn each_path_copies_onto_the_others_and_restores_itself() {
        let sess = vec![path(0, 4000), path(1, 5000), path(2, 6000)];
        let r = ruleset("mh_dup_srv", 7000, 7001, &[sess]).unwrap();
        assert!(r.starts_with("table ip mh_dup_srv\ndelete table ip mh_dup_srv\n"));
        assert!(r.contains("udp sport 7001 udp sport set 7000 ip daddr . udp dport vmap @paths"));
        assert!(r.contains("10.0.1.2 . 4000 : jump s0p0, 10.0.2.2 . 5000 : jump s0p1"));
        let p0 = &r[r.find("chain s0p0").unwrap()..r.find("chain s0p1").unwrap()];
        assert_eq!(
            p0,
            "chain s0p0 {\n\
             \x20       ip saddr set 10.0.2.1 ip daddr set 10.0.2.2 udp dport set 5000 dup to 10.0.2.2\n\
             \x20       ip saddr set 10.0.3.1 ip daddr set 10.0.3.2 udp dport set 6000 dup to 10.0.3.2\n\
             \x20       ip saddr set 10.0.1.1 ip daddr set 10.0.1.2 udp dport set 4000\n    }\n    "
        );
        assert_eq!(r.matches(" dup to ").count(), 6, "3 paths: 2 copies each");
    }

    #[test]
    fn sessions_of_one_path_are_left_out() {
        let r = ruleset("t", 7000, 7001, &[vec![path(0, 4000)], vec![]]).unwrap();
        assert!(!r.contains("elements") && !r.contains("jump"), "{r}");
        assert!(ruleset("x; flush ruleset", 1, 2, &[]).is_err());
    }
}
