//! Interception and routing for the racing gateway: nftables TPROXY, policy routing per
//! uplink, and their removal.
//!
//! - TCP from the LAN interfaces to foreign addresses is diverted with nftables `tproxy` to
//!   the daemon's transparent listener; the accepted socket's local address *is* the
//!   original destination (no NAT, no SO_ORIGINAL_DST). Packets of connections that already
//!   have a transparent socket are marked and delivered locally too (`socket transparent`).
//!   The mark makes `ip rule fwmark MARK lookup T` route them to `local default dev lo`.
//! - Each uplink `i` gets routing table `table_base + 1 + i` with its default route, and a
//!   rule `from <uplink address> lookup` it. Sockets of an attempt are bound to the uplink's
//!   address and device, so they leave by that uplink whatever the main table says, and the
//!   origin sees the uplink's address (its NAT, if any, is the uplink router's business).
//!
//! Invariants: everything is installed in one nftables table of our own (replaced
//! atomically if a crashed daemon left it) and in rules/tables numbered from `table_base`;
//! [`Interception::drop`] removes exactly those. Names were validated by the config.

use super::config::{RaceSettings, UplinkSettings};
use std::net::IpAddr;
use std::process::{Command, Stdio};

/// nftables table of the daemon.
pub const TABLE: &str = "multihome_race";
/// Packet mark bit of diverted packets (a high bit, away from marks others commonly use).
pub const MARK: u32 = 0x0010_0000;
/// First `ip rule` preference used (TPROXY rule; uplink rules follow).
const RULE_PREF: u32 = 9000;

/// Errors installing interception or routes.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A command (`nft`, `ip`) failed.
    #[error("`{cmd}` failed: {stderr}; is the binary installed and are we root?")]
    Command {
        /// The command line.
        cmd: String,
        /// Its error output.
        stderr: String,
    },
    /// An uplink interface has no usable address.
    #[error("uplink `{name}`: interface {interface} has no IPv4 or global IPv6 address; give it one (or wait for DHCP) before starting")]
    NoAddress {
        /// Uplink name.
        name: String,
        /// Interface.
        interface: String,
    },
    /// The interface does not exist.
    #[error("uplink `{name}`: interface {interface}: {source}")]
    Interface {
        /// Uplink name.
        name: String,
        /// Interface.
        interface: String,
        /// Netlink error.
        source: mhio::netlink::NetlinkError,
    },
}

fn run(args: &[&str], input: Option<&str>) -> Result<(), SetupError> {
    let mut cmd = Command::new(args[0]);
    cmd.args(&args[1..])
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let fail = |stderr: String| SetupError::Command {
        cmd: args.join(" "),
        stderr,
    };
    let mut child = cmd.spawn().map_err(|e| fail(e.to_string()))?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        use std::io::Write;
        stdin
            .write_all(text.as_bytes())
            .map_err(|e| fail(e.to_string()))?;
    }
    let out = child.wait_with_output().map_err(|e| fail(e.to_string()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(fail(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ))
    }
}

/// The nftables ruleset text.
pub fn ruleset(lan: &[String], port: u16) -> String {
    let lan_match = if lan.is_empty() {
        String::new()
    } else {
        let names: Vec<String> = lan.iter().map(|n| format!("\"{n}\"")).collect();
        format!("iifname {{ {} }} ", names.join(", "))
    };
    format!(
        "table inet {TABLE} {{}}\ndelete table inet {TABLE}\n\
         table inet {TABLE} {{\n\
         \tchain divert {{\n\
         \t\ttype filter hook prerouting priority mangle; policy accept;\n\
         \t\t{lan_match}meta l4proto tcp socket transparent 1 meta mark set meta mark | {MARK:#x} accept\n\
         \t\t{lan_match}fib daddr type local return\n\
         \t\t{lan_match}meta l4proto tcp tproxy to :{port} meta mark set meta mark | {MARK:#x} accept\n\
         \t}}\n}}\n"
    )
}

/// The addresses of one uplink, found at start-up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UplinkAddrs {
    /// First IPv4 address.
    pub v4: Option<IpAddr>,
    /// First global IPv6 address.
    pub v6: Option<IpAddr>,
}

impl UplinkAddrs {
    /// The source address for a destination of `dst`'s family.
    pub fn for_dst(&self, dst: IpAddr) -> Option<IpAddr> {
        if dst.is_ipv4() {
            self.v4
        } else {
            self.v6
        }
    }
}

/// Looks up the addresses of every uplink interface.
pub fn uplink_addresses(uplinks: &[UplinkSettings]) -> Result<Vec<UplinkAddrs>, SetupError> {
    uplinks
        .iter()
        .map(|u| {
            let nets = mhio::netlink::interface_addresses(&u.interface).map_err(|source| {
                SetupError::Interface {
                    name: u.name.clone(),
                    interface: u.interface.clone(),
                    source,
                }
            })?;
            let v4 = nets.iter().map(|n| n.addr()).find(IpAddr::is_ipv4);
            let v6 = nets.iter().map(|n| n.addr()).find(|a| match a {
                IpAddr::V6(v6) => !v6.is_loopback() && (v6.segments()[0] & 0xffc0) != 0xfe80,
                IpAddr::V4(_) => false,
            });
            if v4.is_none() && v6.is_none() {
                return Err(SetupError::NoAddress {
                    name: u.name.clone(),
                    interface: u.interface.clone(),
                });
            }
            Ok(UplinkAddrs { v4, v6 })
        })
        .collect()
}

/// Installed interception; dropping it removes rules, routes and the nftables table.
#[derive(Debug)]
pub struct Interception {
    undo: Vec<Vec<String>>,
}

impl Interception {
    /// Installs policy routing for every uplink, the TPROXY routing and the nftables table.
    pub fn install(s: &RaceSettings, addrs: &[UplinkAddrs]) -> Result<Interception, SetupError> {
        let mut me = Interception { undo: Vec::new() };
        let tproxy = s.table_base.to_string();
        let mark = format!("{MARK:#x}/{MARK:#x}");
        for (fam, local) in [("-4", "0.0.0.0/0"), ("-6", "::/0")] {
            // IPv6 is best effort: a host without it still races IPv4.
            let v6 = fam == "-6";
            let pref = RULE_PREF.to_string();
            let res = me
                .add(
                    &[
                        "ip", fam, "rule", "add", "fwmark", &mark, "lookup", &tproxy, "pref", &pref,
                    ],
                    &[
                        "ip", fam, "rule", "del", "fwmark", &mark, "lookup", &tproxy, "pref", &pref,
                    ],
                )
                .and_then(|_| {
                    me.add(
                        &[
                            "ip", fam, "route", "replace", "local", local, "dev", "lo", "table",
                            &tproxy,
                        ],
                        &["ip", fam, "route", "flush", "table", &tproxy],
                    )
                });
            if let Err(e) = res {
                if !v6 {
                    return Err(e);
                }
                tracing::warn!("IPv6 interception not installed: {e}");
            }
        }
        for (i, (u, a)) in s.uplinks.iter().zip(addrs).enumerate() {
            let table = (s.table_base + 1 + i as u32).to_string();
            let pref = (RULE_PREF + 1 + i as u32).to_string();
            for (fam, addr) in [("-4", a.v4), ("-6", a.v6)] {
                let Some(addr) = addr else { continue };
                let from = addr.to_string();
                me.add(
                    &[
                        "ip", fam, "rule", "add", "from", &from, "lookup", &table, "pref", &pref,
                    ],
                    &[
                        "ip", fam, "rule", "del", "from", &from, "lookup", &table, "pref", &pref,
                    ],
                )?;
                let mut route = vec!["ip", fam, "route", "replace", "default"];
                let gw = u
                    .gateway
                    .filter(|g| g.is_ipv4() == addr.is_ipv4())
                    .map(|g| g.to_string());
                if let Some(gw) = gw.as_deref() {
                    route.extend(["via", gw]);
                }
                route.extend(["dev", &u.interface, "table", &table]);
                me.add(&route, &["ip", fam, "route", "flush", "table", &table])?;
            }
        }
        run(
            &["nft", "-f", "-"],
            Some(&ruleset(&s.lan_interfaces, s.listen_port)),
        )?;
        me.undo.push(vec![
            "nft".into(),
            "delete".into(),
            "table".into(),
            "inet".into(),
            TABLE.into(),
        ]);
        Ok(me)
    }

    fn add(&mut self, cmd: &[&str], undo: &[&str]) -> Result<(), SetupError> {
        // A rule left by a crashed daemon would make `rule add` duplicate it: remove first.
        if cmd.get(2) == Some(&"rule") {
            while run(undo, None).is_ok() {}
        }
        run(cmd, None)?;
        self.undo.push(undo.iter().map(|s| s.to_string()).collect());
        Ok(())
    }
}

impl Drop for Interception {
    fn drop(&mut self) {
        for cmd in self.undo.iter().rev() {
            let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
            if let Err(e) = run(&args, None) {
                tracing::warn!("cleanup: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ruleset_text() {
        let r = ruleset(&["lan0".into(), "lan1".into()], 7070);
        assert!(r.contains("iifname { \"lan0\", \"lan1\" } meta l4proto tcp tproxy to :7070"));
        assert!(r.contains("delete table inet multihome_race"));
        assert!(r.contains("meta mark | 0x100000 accept"));
        assert!(!ruleset(&[], 1).contains("iifname"));
    }
}
