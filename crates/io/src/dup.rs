//! Kernel fast path for redundant copies: the daemon seals a packet once and the kernel
//! copies the datagram onto the other links (nftables `dup`), so the daemon's cost per
//! packet does not grow with the number of copies (SMesh, *On Redundant Multipath
//! Operating System Support for Wireless Mesh Networks*: user-space forwarding saturates
//! at 400 packets/s where the kernel carries 5 000).
//!
//! Role: on the client, each link has besides its socket a second one, the *copy socket*
//! (bound to the same interface, its own port). A datagram sent from link i's copy socket
//! is, in table `ip <table>`:
//! - in `output`, copied onto every other link j (`dup to <server j> device <dev j>`: the
//!   same route a socket bound to dev j takes to the server);
//! - in `postrouting`, the copy on dev j rewritten to look sent by link j's own socket
//!   (source address and port of link j, destination the server's address and port on
//!   link j) — the server sees datagrams it could have got from link j, and ingress
//!   filtering on link j's network passes them — and the original on dev i given link i's
//!   socket port, so the server's replies all reach the sockets the daemon reads.
//!
//! Invariants:
//! - Everything lives in one table of our own; installing replaces a table of that name
//!   atomically (one `nft -f -` transaction), so a table left by a crashed daemon is
//!   replaced, not duplicated; dropping [`KernelCopies`] deletes it.
//! - Only datagrams from the copy sockets' ports are copied: everything else the daemon
//!   sends (striped data, ACKs, probes) leaves exactly as before.
//! - IPv4 only; names are validated before they reach the ruleset text.
//! - Copies are untracked (`nf_dup_ipv4`) and not copied again.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddrV4};

use crate::nat::{check_name, nft, NatError};

/// One link as the fast path needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DupLink {
    /// Interface the link's sockets are bound to.
    pub interface: String,
    /// The link's source address (the interface's IPv4 address).
    pub local: Ipv4Addr,
    /// Port of the link's own socket.
    pub port: u16,
    /// Port of the link's copy socket.
    pub copy_port: u16,
    /// The server's address and port on this link.
    pub server: SocketAddrV4,
}

/// An installed fast-path table; dropping it removes the table.
#[derive(Debug)]
pub struct KernelCopies {
    table: String,
}

impl KernelCopies {
    /// Installs (or replaces) table `ip table` for `links`.
    pub fn install(table: &str, links: &[DupLink]) -> Result<KernelCopies, NatError> {
        KernelCopies::install_ruleset(table, &ruleset(table, links)?)
    }

    /// Installs `text`, a ruleset that declares, deletes and redefines `ip table` (as
    /// [`ruleset`] and `dup_server::ruleset` write it), so a leftover is replaced.
    pub fn install_ruleset(table: &str, text: &str) -> Result<KernelCopies, NatError> {
        check_name("table name", table, 64)?;
        nft(
            &["-f", "-"],
            Some(text),
            &format!("install table ip {table}"),
        )?;
        Ok(KernelCopies {
            table: table.to_owned(),
        })
    }

    /// Replaces the rules (links rebound, addresses changed).
    pub fn update(&self, links: &[DupLink]) -> Result<(), NatError> {
        self.update_ruleset(&ruleset(&self.table, links)?)
    }

    /// Replaces the table by `text` (a ruleset of the same table, as for install).
    pub fn update_ruleset(&self, text: &str) -> Result<(), NatError> {
        nft(
            &["-f", "-"],
            Some(text),
            &format!("replace table ip {}", self.table),
        )
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Removes the table now, reporting failure (drop does the same but can only log).
    pub fn remove(mut self) -> Result<(), NatError> {
        let table = std::mem::take(&mut self.table);
        delete_table(&table)
    }
}

impl Drop for KernelCopies {
    fn drop(&mut self) {
        if self.table.is_empty() {
            return;
        }
        if let Err(e) = delete_table(&self.table) {
            eprintln!("multihome-io: fast-path table left installed: {e}");
        }
    }
}

/// Deletes `ip table` if it exists (a leftover of a crashed daemon, at start-up when the
/// fast path is off).
pub fn remove_leftover(table: &str) -> Result<(), NatError> {
    check_name("table name", table, 64)?;
    let text = format!("table ip {table}\ndelete table ip {table}\n");
    nft(
        &["-f", "-"],
        Some(&text),
        &format!("delete table ip {table}"),
    )
}

fn delete_table(table: &str) -> Result<(), NatError> {
    nft(
        &["delete", "table", "ip", table],
        None,
        &format!("delete table ip {table}"),
    )
}

/// The ruleset text [`KernelCopies::install`] feeds to `nft -f -`.
pub fn ruleset(table: &str, links: &[DupLink]) -> Result<String, NatError> {
    check_name("table name", table, 64)?;
    for l in links {
        check_name("interface name", &l.interface, libc::IFNAMSIZ - 1)?;
    }
    let (mut out, mut post) = (String::new(), String::new());
    for (i, a) in links.iter().enumerate() {
        let (dev, port) = (&a.interface, a.copy_port);
        for (_, b) in links.iter().enumerate().filter(|(j, _)| *j != i) {
            let _ = writeln!(
                out,
                "        oifname \"{dev}\" udp sport {port} dup to {} device \"{}\"",
                b.server.ip(),
                b.interface
            );
            let _ = writeln!(
                post,
                "        oifname \"{}\" ip saddr {} udp sport {port} ip saddr set {} ip daddr set {} udp sport set {} udp dport set {}",
                b.interface,
                a.local,
                b.local,
                b.server.ip(),
                b.port,
                b.server.port()
            );
        }
        let _ = writeln!(
            post,
            "        oifname \"{dev}\" udp sport {port} udp sport set {}",
            a.port
        );
    }
    // Declaring then deleting the table makes the transaction replace any leftover copy.
    Ok(format!(
        r#"table ip {table}
delete table ip {table}
table ip {table} {{
    chain output {{
        type filter hook output priority filter; policy accept;
{out}    }}
    chain postrouting {{
        type filter hook postrouting priority 300; policy accept;
{post}    }}
}}
"#
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(i: u8, port: u16) -> DupLink {
        DupLink {
            interface: format!("l{i}"),
            local: Ipv4Addr::new(10, 0, i + 1, 2),
            port,
            copy_port: port + 1,
            server: SocketAddrV4::new(Ipv4Addr::new(10, 0, i + 1, 1), 51820),
        }
    }

    #[test]
    fn copies_onto_every_other_link_and_rewrites_them() {
        let r = ruleset("mh_dup", &[link(0, 4000), link(1, 5000), link(2, 6000)]).unwrap();
        assert!(r.starts_with("table ip mh_dup\ndelete table ip mh_dup\n"));
        assert!(r.contains(r#"oifname "l0" udp sport 4001 dup to 10.0.2.1 device "l1""#));
        assert!(r.contains(r#"oifname "l0" udp sport 4001 dup to 10.0.3.1 device "l2""#));
        assert!(r.contains(r#"oifname "l2" udp sport 6001 dup to 10.0.1.1 device "l0""#));
        assert!(r.contains(
            r#"oifname "l1" ip saddr 10.0.1.2 udp sport 4001 ip saddr set 10.0.2.2 ip daddr set 10.0.2.1 udp sport set 5000 udp dport set 51820"#
        ));
        assert!(r.contains(r#"oifname "l0" udp sport 4001 udp sport set 4000"#));
        assert_eq!(r.matches(" dup to ").count(), 6, "3 links: 2 copies each");
    }

    #[test]
    fn names_cannot_inject_rules() {
        let mut l = link(0, 4000);
        l.interface = "l0\" accept".into();
        assert!(matches!(
            ruleset("mh", &[l]),
            Err(NatError::InvalidName { .. })
        ));
        assert!(ruleset("x; flush ruleset", &[link(0, 1)]).is_err());
    }
}
