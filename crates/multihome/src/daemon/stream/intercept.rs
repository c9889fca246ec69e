//! The client's interception of LAN TCP for stream mode: nftables TPROXY diverts TCP that
//! arrives on the `lan` interfaces for the tunnel's routes to the transparent listener;
//! the accepted socket's local address *is* the original destination (no NAT). Packets of
//! connections that already have a transparent socket are marked and delivered locally
//! too (`socket transparent`); `ip rule fwmark MARK lookup TABLE` routes marked packets to
//! `local default dev lo`. The same scheme as the racing gateway's (`race` setup).
//!
//! With held SYNs, an iptables rule (mangle PREROUTING, before the nftables chain) queues
//! each new connection's SYN from `lan` to the routes to NFQUEUE `queue` (`--queue-bypass`:
//! unqueued while no daemon is bound). The daemon's verdict lets it continue to TPROXY, or
//! marks it [`REFUSE_MARK`], which the chain answers with `reject with tcp reset`: the
//! application's connect() fails with ECONNREFUSED.
//!
//! Invariants: everything lives in one nftables table of our own ([`TABLE`], replaced
//! atomically if a crashed daemon left it) and in one rule and routing table per family
//! numbered `table`; [`Interception`]'s drop removes exactly those.

use anyhow::{Context, Result};
use ipnet::IpNet;
use multihome_race::daemon::setup::Undoable;

/// nftables table of stream mode.
pub const TABLE: &str = "multihome_stream";
/// Packet mark bit of diverted packets (apart from the racing gateway's bits).
pub const MARK: u32 = 0x0080_0000;
/// Packet mark bit of a held SYN the daemon refuses: the chain resets it.
pub const REFUSE_MARK: u32 = 0x1000_0000;

/// The ruleset: TCP from `lan` to `routes` goes to the listener on `port`.
pub fn ruleset(lan: &[String], routes: &[IpNet], port: u16) -> String {
    let names: Vec<String> = lan.iter().map(|n| format!("\"{n}\"")).collect();
    let lan = format!("iifname {{ {} }}", names.join(", "));
    let mut divert = format!(
        "\t\t{lan} meta mark & {REFUSE_MARK:#x} == {REFUSE_MARK:#x} reject with tcp reset\n\
         \t\t{lan} meta l4proto tcp socket transparent 1 meta mark set meta mark | {MARK:#x} accept\n"
    );
    for (fam, v6) in [("ip", false), ("ip6", true)] {
        let nets: Vec<String> = routes
            .iter()
            .filter(|r| matches!(r, IpNet::V6(_)) == v6)
            .map(|n| n.trunc().to_string())
            .collect();
        if nets.is_empty() {
            continue;
        }
        divert += &format!(
            "\t\t{lan} {fam} daddr {{ {} }} meta l4proto tcp tproxy {fam} to :{port} meta mark set meta mark | {MARK:#x} accept\n",
            nets.join(", ")
        );
    }
    format!(
        "table inet {TABLE} {{}}\ndelete table inet {TABLE}\n\
         table inet {TABLE} {{\n\
         \tchain divert {{\n\
         \t\ttype filter hook prerouting priority mangle + 5; policy accept;\n\
         {divert}\t}}\n}}\n"
    )
}

/// Installed interception; dropping it removes the table, rules and routes.
#[derive(Debug)]
pub struct Interception {
    undo: Undoable,
}

impl Interception {
    /// Installs routing of marked packets to the host (per family with routes) and the
    /// nftables table. On an error, what was installed so far is removed.
    pub fn install(
        lan: &[String],
        routes: &[IpNet],
        port: u16,
        table: u32,
        queue: Option<u16>,
    ) -> Result<Self> {
        let mut me = Interception {
            undo: Undoable::default(),
        };
        let t = table.to_string();
        let mark = format!("{MARK:#x}/{MARK:#x}");
        for (fam, local, v6) in [("-4", "0.0.0.0/0", false), ("-6", "::/0", true)] {
            if !routes.iter().any(|r| matches!(r, IpNet::V6(_)) == v6) {
                continue;
            }
            me.undo.add(
                &[
                    "ip", fam, "rule", "add", "fwmark", &mark, "lookup", &t, "pref", &t,
                ],
                &[
                    "ip", fam, "rule", "del", "fwmark", &mark, "lookup", &t, "pref", &t,
                ],
            )?;
            me.undo.add(
                &[
                    "ip", fam, "route", "replace", "local", local, "dev", "lo", "table", &t,
                ],
                &["ip", fam, "route", "flush", "table", &t],
            )?;
        }
        let undo = ["nft", "delete", "table", "inet", TABLE];
        me.undo
            .load(&["nft", "-f", "-"], &ruleset(lan, routes, port), &undo)
            .context("installing the stream-mode nftables table")?;
        // Last, so the chain that acts on the verdicts exists before any SYN is queued.
        if let Some(q) = queue {
            for rule in queue_rules(lan, routes, q) {
                let undo: Vec<String> = rule
                    .iter()
                    .map(|a| if a == "-A" { "-D".into() } else { a.clone() })
                    .collect();
                let rule: Vec<&str> = rule.iter().map(String::as_str).collect();
                let undo: Vec<&str> = undo.iter().map(String::as_str).collect();
                me.undo.add(&rule, &undo).context(
                    "queueing SYNs needs iptables with the NFQUEUE target; or set hold_syns = false",
                )?;
            }
        }
        Ok(me)
    }
}

/// The iptables/ip6tables commands that queue new connections' SYNs from `lan` to
/// `routes` to queue `q`.
pub fn queue_rules(lan: &[String], routes: &[IpNet], q: u16) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for l in lan {
        for r in routes {
            let tool = if matches!(r, IpNet::V6(_)) {
                "ip6tables"
            } else {
                "iptables"
            };
            let rule = [
                tool,
                "-w",
                "-t",
                "mangle",
                "-A",
                "PREROUTING",
                "-i",
                l,
                "-d",
                &r.trunc().to_string(),
                "-p",
                "tcp",
                "--syn",
                "-m",
                "conntrack",
                "--ctstate",
                "NEW",
                "-m",
                "comment",
                "--comment",
                TABLE,
                "-j",
                "NFQUEUE",
                "--queue-num",
                &q.to_string(),
                "--queue-bypass",
            ];
            out.push(rule.iter().map(|s| s.to_string()).collect());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diverts_only_the_routes_of_each_family() {
        let routes = vec![
            "10.50.0.0/24".parse().unwrap(),
            "2001:db8::/64".parse().unwrap(),
        ];
        let r = ruleset(&["lan0".into()], &routes, 7070);
        assert!(r.contains("meta mark & 0x10000000 == 0x10000000 reject with tcp reset"));
        let q = queue_rules(&["lan0".into()], &routes, 9);
        assert_eq!(q.len(), 2);
        assert_eq!(q[1][0], "ip6tables");
        assert!(q[0]
            .join(" ")
            .contains("-i lan0 -d 10.50.0.0/24 -p tcp --syn"));
        assert!(r.contains(
            "iifname { \"lan0\" } ip daddr { 10.50.0.0/24 } meta l4proto tcp tproxy ip to :7070"
        ));
        assert!(r.contains("ip6 daddr { 2001:db8::/64 } meta l4proto tcp tproxy ip6 to :7070"));
        let v4only = ruleset(&["a".into(), "b".into()], &routes[..1], 1);
        assert!(!v4only.contains("ip6 daddr"));
        assert!(v4only.contains("iifname { \"a\", \"b\" }"));
    }
}
