//! Server-side NAT: masquerade the tunnel's traffic out of the uplink with nftables.
//!
//! Role: on the server, packets that clients send through the tunnel leave the TUN with the
//! clients' tunnel addresses; [`Masquerade`] rewrites them to the uplink's address and lets
//! the replies back in, turning the server into the clients' exit to the Internet.
//!
//! Invariants:
//! - Everything lives in one `inet` table of our own (`table_name`), so IPv4 and IPv6 are
//!   covered and nothing else in the host's ruleset is touched. Installing replaces a table
//!   of that name atomically (one `nft -f -` transaction), so a table left over by a crashed
//!   daemon is replaced, not duplicated. Dropping the [`Masquerade`] deletes the table.
//! - The forward chain accepts TUN→uplink traffic and established/related replies and
//!   clamps TCP MSS to the route MTU both ways (the tunnel's MTU is smaller than the
//!   Internet's). Its policy is accept: in nftables an accept in one table cannot override a
//!   drop in another, so a host firewall with a forward drop policy (iptables FORWARD DROP,
//!   as Docker installs) must itself allow the TUN's traffic.
//! - `net.ipv4.ip_forward` and `net.ipv6.conf.all.forwarding` are turned on and left on at
//!   drop (turning them off could cut other services that came to rely on them). Before IPv6
//!   forwarding is enabled, an uplink that accepts router advertisements (`accept_ra=1`) is
//!   switched to `accept_ra=2`, or enabling forwarding would make the kernel ignore RAs and
//!   lose the uplink's IPv6 default route.
//! - Names are validated before they reach the ruleset text, so they cannot inject rules.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::sysctl::{self, SysctlError};

/// Errors installing or removing the NAT.
#[derive(Debug, thiserror::Error)]
pub enum NatError {
    /// A table or interface name with characters nftables or Linux would not accept.
    #[error(
        "invalid {what} {value:?}: use letters, digits and _ - . (interfaces at most 15 bytes)"
    )]
    InvalidName {
        /// "table name" or "interface name".
        what: &'static str,
        /// The name as given.
        value: String,
    },
    /// The `nft` program could not be run.
    #[error("cannot run nft: {source}; install the nftables package")]
    NftMissing {
        /// Underlying error.
        source: std::io::Error,
    },
    /// `nft` refused the ruleset or the command; its stderr says why.
    #[error("nft failed to {action} ({status}): {stderr}; check the kernel has nf_tables with NAT (nft_masq) and that we run as root")]
    Nft {
        /// What was attempted.
        action: String,
        /// Exit status as text.
        status: String,
        /// What nft printed on stderr.
        stderr: String,
    },
    /// Enabling forwarding failed.
    #[error("cannot enable forwarding: {0}")]
    Sysctl(#[from] SysctlError),
}

/// An installed masquerade table; dropping it removes the table.
#[derive(Debug)]
pub struct Masquerade {
    table: String,
}

impl Masquerade {
    /// Enables forwarding and installs table `inet table_name` that masquerades traffic
    /// coming from `tun_iface` and leaving through `uplink_iface`.
    pub fn install(
        table_name: &str,
        uplink_iface: &str,
        tun_iface: &str,
    ) -> Result<Masquerade, NatError> {
        let ruleset = ruleset(table_name, uplink_iface, tun_iface)?;
        enable_forwarding(uplink_iface)?;
        nft(
            &["-f", "-"],
            Some(&ruleset),
            &format!("install table inet {table_name}"),
        )?;
        Ok(Masquerade {
            table: table_name.to_owned(),
        })
    }

    /// The table's name.
    pub fn table_name(&self) -> &str {
        &self.table
    }

    /// Removes the table now, reporting failure (drop does the same but can only log).
    pub fn remove(mut self) -> Result<(), NatError> {
        let table = std::mem::take(&mut self.table);
        delete_table(&table)
    }
}

impl Drop for Masquerade {
    fn drop(&mut self) {
        if self.table.is_empty() {
            return; // already removed by `remove`
        }
        if let Err(e) = delete_table(&self.table) {
            eprintln!("multihome-io: NAT table left installed: {e}");
        }
    }
}

fn delete_table(table: &str) -> Result<(), NatError> {
    nft(
        &["delete", "table", "inet", table],
        None,
        &format!("delete table inet {table}"),
    )
}

/// The ruleset text [`Masquerade::install`] feeds to `nft -f -`.
pub fn ruleset(table: &str, uplink: &str, tun: &str) -> Result<String, NatError> {
    check_name("table name", table, 64)?;
    check_name("interface name", uplink, libc::IFNAMSIZ - 1)?;
    check_name("interface name", tun, libc::IFNAMSIZ - 1)?;
    // Declaring then deleting the table makes the transaction replace any leftover copy.
    Ok(format!(
        r#"table inet {table}
delete table inet {table}
table inet {table} {{
    chain forward {{
        type filter hook forward priority filter; policy accept;
        iifname "{tun}" oifname "{uplink}" tcp flags syn tcp option maxseg size set rt mtu
        iifname "{uplink}" oifname "{tun}" tcp flags syn tcp option maxseg size set rt mtu
        iifname "{tun}" oifname "{uplink}" accept
        iifname "{uplink}" oifname "{tun}" ct state established,related accept
    }}
    chain postrouting {{
        type nat hook postrouting priority srcnat; policy accept;
        iifname "{tun}" oifname "{uplink}" masquerade
    }}
}}
"#
    ))
}

pub(crate) fn check_name(what: &'static str, value: &str, max: usize) -> Result<(), NatError> {
    let ok = !value.is_empty()
        && value.len() <= max
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && !value.starts_with(['-', '.']);
    if ok {
        Ok(())
    } else {
        Err(NatError::InvalidName {
            what,
            value: value.to_owned(),
        })
    }
}

fn enable_forwarding(uplink: &str) -> Result<(), NatError> {
    sysctl::write("net.ipv4.ip_forward", "1")?;
    // No IPv6 in this kernel or namespace: nothing to forward, nothing to set.
    if sysctl::read("net.ipv6.conf.all.forwarding").is_err() {
        return Ok(());
    }
    let ra = format!("net/ipv6/conf/{uplink}/accept_ra");
    if sysctl::read(&ra).is_ok_and(|v| v == "1") {
        sysctl::write(&ra, "2")?;
    }
    sysctl::write("net.ipv6.conf.all.forwarding", "1")?;
    Ok(())
}

pub(crate) fn nft(args: &[&str], stdin: Option<&str>, action: &str) -> Result<(), NatError> {
    let mut child = Command::new("nft")
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| NatError::NftMissing { source })?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // A write error (nft exited early) shows up as nft's own status and stderr below.
        let _ = pipe.write_all(text.as_bytes());
    }
    let out = child
        .wait_with_output()
        .map_err(|source| NatError::NftMissing { source })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(NatError::Nft {
            action: action.to_owned(),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ruleset_masquerades_tun_out_of_uplink() {
        let r = ruleset("mh_nat", "eth0", "mh0").unwrap();
        assert!(r.contains(r#"iifname "mh0" oifname "eth0" masquerade"#));
        assert!(r.contains("type nat hook postrouting priority srcnat"));
        assert!(r.contains(r#"iifname "eth0" oifname "mh0" ct state established,related accept"#));
        assert!(r.starts_with("table inet mh_nat\ndelete table inet mh_nat\n"));
    }

    #[test]
    fn names_cannot_inject_rules() {
        for (t, u, n) in [
            ("x; flush ruleset", "eth0", "mh0"),
            ("mh", "eth0\" accept", "mh0"),
            ("mh", "eth0", ""),
            ("mh", "an-interface-name-too-long", "mh0"),
            ("mh", "eth0", "-mh0"),
        ] {
            assert!(
                matches!(ruleset(t, u, n), Err(NatError::InvalidName { .. })),
                "{t:?} {u:?} {n:?} accepted"
            );
        }
    }
}
