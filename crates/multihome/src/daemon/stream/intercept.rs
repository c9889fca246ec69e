//! The client's interception of LAN TCP for stream mode: nftables TPROXY diverts TCP that
//! arrives on the `lan` interfaces for the tunnel's routes to the transparent listener;
//! the accepted socket's local address *is* the original destination (no NAT). Packets of
//! connections that already have a transparent socket are marked and delivered locally
//! too (`socket transparent`); `ip rule fwmark MARK lookup TABLE` routes marked packets to
//! `local default dev lo`. The same scheme as the racing gateway's (`race` setup).
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

/// The ruleset: TCP from `lan` to `routes` goes to the listener on `port`.
pub fn ruleset(lan: &[String], routes: &[IpNet], port: u16) -> String {
    let names: Vec<String> = lan.iter().map(|n| format!("\"{n}\"")).collect();
    let lan = format!("iifname {{ {} }}", names.join(", "));
    let mut divert = format!(
        "\t\t{lan} meta l4proto tcp socket transparent 1 meta mark set meta mark | {MARK:#x} accept\n"
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
    pub fn install(lan: &[String], routes: &[IpNet], port: u16, table: u32) -> Result<Self> {
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
        assert!(r.contains(
            "iifname { \"lan0\" } ip daddr { 10.50.0.0/24 } meta l4proto tcp tproxy ip to :7070"
        ));
        assert!(r.contains("ip6 daddr { 2001:db8::/64 } meta l4proto tcp tproxy ip6 to :7070"));
        let v4only = ruleset(&["a".into(), "b".into()], &routes[..1], 1);
        assert!(!v4only.contains("ip6 daddr"));
        assert!(v4only.contains("iifname { \"a\", \"b\" }"));
    }
}
