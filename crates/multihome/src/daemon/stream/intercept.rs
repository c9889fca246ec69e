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

use anyhow::{bail, Context, Result};
use ipnet::IpNet;
use std::io::Write;
use std::process::{Command, Stdio};

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
    undo: Vec<Vec<String>>,
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
        let mut me = Interception { undo: Vec::new() };
        let t = table.to_string();
        let mark = format!("{MARK:#x}/{MARK:#x}");
        for (fam, local, v6) in [("-4", "0.0.0.0/0", false), ("-6", "::/0", true)] {
            if !routes.iter().any(|r| matches!(r, IpNet::V6(_)) == v6) {
                continue;
            }
            me.run_undoable(
                &[
                    "ip", fam, "rule", "add", "fwmark", &mark, "lookup", &t, "pref", &t,
                ],
                &[
                    "ip", fam, "rule", "del", "fwmark", &mark, "lookup", &t, "pref", &t,
                ],
            )?;
            me.run_undoable(
                &[
                    "ip", fam, "route", "replace", "local", local, "dev", "lo", "table", &t,
                ],
                &["ip", fam, "route", "flush", "table", &t],
            )?;
        }
        nft(&ruleset(lan, routes, port)).context("installing the stream-mode nftables table")?;
        me.undo.push(vec![
            "nft".into(),
            "delete".into(),
            "table".into(),
            "inet".into(),
            TABLE.into(),
        ]);
        // Last, so the chain that acts on the verdicts exists before any SYN is queued.
        if let Some(q) = queue {
            for rule in queue_rules(lan, routes, q) {
                let undo: Vec<String> = rule
                    .iter()
                    .map(|a| if a == "-A" { "-D".into() } else { a.clone() })
                    .collect();
                let rule: Vec<&str> = rule.iter().map(String::as_str).collect();
                let undo: Vec<&str> = undo.iter().map(String::as_str).collect();
                // A rule left by a killed daemon would be duplicated: remove it first.
                while run(&undo).is_ok() {}
                me.run_undoable(&rule, &undo).context(
                    "queueing SYNs needs iptables with the NFQUEUE target; or set hold_syns = false",
                )?;
            }
        }
        Ok(me)
    }

    fn run_undoable(&mut self, cmd: &[&str], undo: &[&str]) -> Result<()> {
        run(cmd)?;
        self.undo.push(undo.iter().map(|s| s.to_string()).collect());
        Ok(())
    }
}

impl Drop for Interception {
    fn drop(&mut self) {
        for cmd in self.undo.iter().rev() {
            let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
            if let Err(e) = run(&args) {
                tracing::warn!("stream mode: removing interception: {e:#}");
            }
        }
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

fn run(cmd: &[&str]) -> Result<()> {
    let out = Command::new(cmd[0])
        .args(&cmd[1..])
        .output()
        .with_context(|| format!("running `{}`: is it installed?", cmd[0]))?;
    if !out.status.success() {
        bail!(
            "`{}` failed: {}",
            cmd.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn nft(ruleset: &str) -> Result<()> {
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running `nft`: install the nftables package")?;
    child
        .stdin
        .take()
        .context("nft stdin")?
        .write_all(ruleset.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("nft -f: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
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
