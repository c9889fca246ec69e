//! The relay's kernel forwarding for NAT detours (`multihome relay`, docs/PROTOCOL.md §15).
//!
//! Role: per detour, the kernel forwards UDP (tunnel paths) or TCP (kernel MPTCP subflows)
//! from one client source (address, port) sent to one relay port on to one server, with the
//! relay's address as source, and the replies back. The relay process does no per-packet
//! work.
//!
//! Invariants:
//! - Everything lives in one `inet` table of our own, `multihome_relay_<name>`. Installing
//!   replaces a table of that name atomically (one `nft -f -` transaction), so a table left
//!   by a crashed relay is replaced, not duplicated. Dropping the [`RelayTable`] deletes it.
//! - A detour is two elements, added, renewed and removed together in one transaction: in
//!   map `dnat4`/`dnat6`, (source address . source port . relay port) → (server address .
//!   server port), which prerouting DNATs with; in set `fwd4`/`fwd6`, (source address .
//!   source port . server address . server port), which postrouting masquerades and the
//!   forward chain requires. TCP detours have the same pair, `tcp_dnat4`/`tcp_fwd4` (and
//!   `6`), matched on TCP headers. Both carry a kernel timeout: a relay that dies without
//!   cleanup stops forwarding once it passes.
//! - Conntrack keeps a flow's NAT binding after its elements are gone; the forward chain
//!   drops every packet of a DNATed flow to our port range whose tuple is not in the set,
//!   so nothing is forwarded after removal.
//! - Only UDP and TCP to the configured port range are touched. Names are validated before they
//!   reach the ruleset text.
//! - `net.ipv4.ip_forward` and `net.ipv6.conf.all.forwarding` are turned on (and left on);
//!   interfaces that accept router advertisements are switched to `accept_ra=2` first so
//!   they keep their IPv6 default route.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::nat::{check_name, nft, NatError};
use crate::sysctl;

/// The transport protocol a NAT detour forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Proto {
    /// Tunnel paths (the tunnel's datagrams).
    Udp,
    /// Kernel MPTCP subflows.
    Tcp,
}

impl Proto {
    /// Prefix of the proto's map and set names.
    fn prefix(self) -> &'static str {
        match self {
            Proto::Udp => "",
            Proto::Tcp => "tcp_",
        }
    }
}

/// One NAT detour as the kernel sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NatDetour {
    /// UDP or TCP.
    pub proto: Proto,
    /// The client's source (as the relay sees it).
    pub source: SocketAddr,
    /// The relay port the client sends to.
    pub relay_port: u16,
    /// Where the datagrams go.
    pub server: SocketAddr,
}

/// An installed relay table; dropping it removes the table.
#[derive(Debug)]
pub struct RelayTable {
    table: String,
}

/// The table name for relay `name`.
pub fn table_name(name: &str) -> String {
    format!("multihome_relay_{name}")
}

impl RelayTable {
    /// Enables forwarding and installs (or replaces) table `inet multihome_relay_<name>`
    /// forwarding UDP to relay ports `ports` (inclusive) as its elements say; none yet.
    pub fn install(name: &str, ports: (u16, u16)) -> Result<RelayTable, NatError> {
        let table = table_name(name);
        let text = ruleset(&table, ports)?;
        enable_forwarding()?;
        nft(
            &["-f", "-"],
            Some(&text),
            &format!("install table inet {table}"),
        )?;
        Ok(RelayTable { table })
    }

    /// The table's name.
    pub fn table_name(&self) -> &str {
        &self.table
    }

    /// Adds a detour whose kernel elements expire after `timeout`.
    pub fn add(&self, d: &NatDetour, timeout: Duration) -> Result<(), NatError> {
        let text = elements(&self.table, "add", d, Some(timeout))?;
        nft(&["-f", "-"], Some(&text), "add a detour")
    }

    /// Restarts a detour's kernel timeout (re-adds it if the kernel already expired it).
    pub fn renew(&self, d: &NatDetour, timeout: Duration) -> Result<(), NatError> {
        let text = elements(&self.table, "delete", d, None)?
            + &elements(&self.table, "add", d, Some(timeout))?;
        nft(&["-f", "-"], Some(&text), "renew a detour").or_else(|_| self.add(d, timeout))
    }

    /// Removes a detour.
    pub fn remove(&self, d: &NatDetour) -> Result<(), NatError> {
        let text = elements(&self.table, "delete", d, None)?;
        nft(&["-f", "-"], Some(&text), "remove a detour")
    }

    /// Removes the table now, reporting failure (drop does the same but can only log).
    pub fn remove_table(mut self) -> Result<(), NatError> {
        let table = std::mem::take(&mut self.table);
        delete_table(&table)
    }
}

impl Drop for RelayTable {
    fn drop(&mut self) {
        if self.table.is_empty() {
            return;
        }
        if let Err(e) = delete_table(&self.table) {
            eprintln!("multihome-io: relay table left installed: {e}");
        }
    }
}

/// Deletes table `inet multihome_relay_<name>` if it exists (a crashed relay's leftover).
pub fn delete_leftover(name: &str) -> Result<(), NatError> {
    let table = table_name(name);
    check_name("table name", &table, 64)?;
    // Declaring first makes the delete succeed whether or not the table existed.
    nft(
        &["-f", "-"],
        Some(&format!("table inet {table}\ndelete table inet {table}\n")),
        &format!("delete table inet {table}"),
    )
}

fn delete_table(table: &str) -> Result<(), NatError> {
    nft(
        &["delete", "table", "inet", table],
        None,
        &format!("delete table inet {table}"),
    )
}

/// The ruleset text [`RelayTable::install`] feeds to `nft -f -`.
pub fn ruleset(table: &str, (lo, hi): (u16, u16)) -> Result<String, NatError> {
    check_name("table name", table, 64)?;
    if lo == 0 || hi < lo {
        return Err(NatError::InvalidName {
            what: "port range",
            value: format!("{lo}-{hi}"),
        });
    }
    let r = format!("{lo}-{hi}");
    Ok(format!(
        r#"table inet {table}
delete table inet {table}
table inet {table} {{
    map dnat4 {{
        type ipv4_addr . inet_service . inet_service : ipv4_addr . inet_service
        flags timeout
    }}
    set fwd4 {{
        type ipv4_addr . inet_service . ipv4_addr . inet_service
        flags timeout
    }}
    map dnat6 {{
        type ipv6_addr . inet_service . inet_service : ipv6_addr . inet_service
        flags timeout
    }}
    set fwd6 {{
        type ipv6_addr . inet_service . ipv6_addr . inet_service
        flags timeout
    }}
    map tcp_dnat4 {{
        type ipv4_addr . inet_service . inet_service : ipv4_addr . inet_service
        flags timeout
    }}
    set tcp_fwd4 {{
        type ipv4_addr . inet_service . ipv4_addr . inet_service
        flags timeout
    }}
    map tcp_dnat6 {{
        type ipv6_addr . inet_service . inet_service : ipv6_addr . inet_service
        flags timeout
    }}
    set tcp_fwd6 {{
        type ipv6_addr . inet_service . ipv6_addr . inet_service
        flags timeout
    }}
    chain prerouting {{
        type nat hook prerouting priority dstnat; policy accept;
        udp dport {r} dnat ip to ip saddr . udp sport . udp dport map @dnat4
        udp dport {r} dnat ip6 to ip6 saddr . udp sport . udp dport map @dnat6
        tcp dport {r} dnat ip to ip saddr . tcp sport . tcp dport map @tcp_dnat4
        tcp dport {r} dnat ip6 to ip6 saddr . tcp sport . tcp dport map @tcp_dnat6
    }}
    chain postrouting {{
        type nat hook postrouting priority srcnat; policy accept;
        ct status dnat ip saddr . udp sport . ip daddr . udp dport @fwd4 masquerade
        ct status dnat ip6 saddr . udp sport . ip6 daddr . udp dport @fwd6 masquerade
        ct status dnat ip saddr . tcp sport . ip daddr . tcp dport @tcp_fwd4 masquerade
        ct status dnat ip6 saddr . tcp sport . ip6 daddr . tcp dport @tcp_fwd6 masquerade
    }}
    chain forward {{
        type filter hook forward priority filter; policy accept;
        ct status dnat meta l4proto udp ct original proto-dst {r} ip saddr . udp sport . ip daddr . udp dport != @fwd4 ip daddr . udp dport . ip saddr . udp sport != @fwd4 drop
        ct status dnat meta l4proto udp ct original proto-dst {r} ip6 saddr . udp sport . ip6 daddr . udp dport != @fwd6 ip6 daddr . udp dport . ip6 saddr . udp sport != @fwd6 drop
        ct status dnat meta l4proto tcp ct original proto-dst {r} ip saddr . tcp sport . ip daddr . tcp dport != @tcp_fwd4 ip daddr . tcp dport . ip saddr . tcp sport != @tcp_fwd4 drop
        ct status dnat meta l4proto tcp ct original proto-dst {r} ip6 saddr . tcp sport . ip6 daddr . tcp dport != @tcp_fwd6 ip6 daddr . tcp dport . ip6 saddr . tcp sport != @tcp_fwd6 drop
    }}
}}
"#
    ))
}

/// `add`/`delete` statements for a detour's two elements.
pub fn elements(
    table: &str,
    verb: &str,
    d: &NatDetour,
    timeout: Option<Duration>,
) -> Result<String, NatError> {
    check_name("table name", table, 64)?;
    let fam = match (d.source.ip(), d.server.ip()) {
        (IpAddr::V4(_), IpAddr::V4(_)) => "4",
        (IpAddr::V6(_), IpAddr::V6(_)) => "6",
        _ => {
            return Err(NatError::InvalidName {
                what: "detour (source and server of different families)",
                value: format!("{} -> {}", d.source, d.server),
            })
        }
    };
    // Addresses and ports are typed values: their Display cannot inject rule text.
    let t = timeout.map_or(String::new(), |t| {
        format!(" timeout {}s", t.as_secs().max(1))
    });
    let (s, sp, v, vp, p) = (
        d.source.ip(),
        d.source.port(),
        d.server.ip(),
        d.server.port(),
        d.relay_port,
    );
    let map_value = if verb == "add" {
        format!(" : {v} . {vp}")
    } else {
        String::new()
    };
    let x = d.proto.prefix();
    Ok(format!(
        "{verb} element inet {table} {x}dnat{fam} {{ {s} . {sp} . {p}{t}{map_value} }}\n\
         {verb} element inet {table} {x}fwd{fam} {{ {s} . {sp} . {v} . {vp}{t} }}\n"
    ))
}

fn enable_forwarding() -> Result<(), NatError> {
    sysctl::write("net.ipv4.ip_forward", "1")?;
    if sysctl::read("net.ipv6.conf.all.forwarding").is_err() {
        return Ok(());
    }
    if let Ok(dir) = std::fs::read_dir("/proc/sys/net/ipv6/conf") {
        for entry in dir.flatten() {
            let iface = entry.file_name().to_string_lossy().into_owned();
            let ra = format!("net/ipv6/conf/{iface}/accept_ra");
            if sysctl::read(&ra).is_ok_and(|v| v == "1") {
                sysctl::write(&ra, "2")?;
            }
        }
    }
    sysctl::write("net.ipv6.conf.all.forwarding", "1")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ruleset_and_elements() {
        let r = ruleset("multihome_relay_a", (40000, 40999)).unwrap();
        assert!(
            r.starts_with("table inet multihome_relay_a\ndelete table inet multihome_relay_a\n")
        );
        assert!(r.contains("udp dport 40000-40999 dnat ip to"));
        let d = NatDetour {
            proto: Proto::Udp,
            source: "198.51.100.2:4000".parse().unwrap(),
            relay_port: 40001,
            server: "203.0.113.2:9000".parse().unwrap(),
        };
        let add = elements("t", "add", &d, Some(Duration::from_secs(330))).unwrap();
        assert_eq!(
            add,
            "add element inet t dnat4 { 198.51.100.2 . 4000 . 40001 timeout 330s : 203.0.113.2 . 9000 }\n\
             add element inet t fwd4 { 198.51.100.2 . 4000 . 203.0.113.2 . 9000 timeout 330s }\n"
        );
        let del = elements("t", "delete", &d, None).unwrap();
        assert!(!del.contains("timeout") && !del.contains(':'));
        let mixed = NatDetour {
            server: "[2001:db8::1]:9000".parse().unwrap(),
            ..d
        };
        assert!(elements("t", "add", &mixed, None).is_err());
        let tcp = NatDetour {
            proto: Proto::Tcp,
            ..d
        };
        let add = elements("t", "add", &tcp, None).unwrap();
        assert!(add.starts_with("add element inet t tcp_dnat4 { 198.51.100.2 . 4000 . 40001 :"));
        assert!(add.contains("add element inet t tcp_fwd4 {"));
        assert!(r.contains(
            "tcp dport 40000-40999 dnat ip to ip saddr . tcp sport . tcp dport map @tcp_dnat4"
        ));
        assert!(ruleset("x; flush ruleset", (1, 2)).is_err());
        assert!(ruleset("t", (0, 2)).is_err());
        assert!(ruleset("t", (5, 2)).is_err());
    }
}
