//! Interception and routing for the racing gateway: the SYN queue, nftables TPROXY, per-flow
//! UDP uplinks, policy routing per uplink, and their removal.
//!
//! - **Held SYNs** (`hold_syns`): an iptables rule (mangle PREROUTING, priority -150) sends
//!   every new connection's SYN from the LAN to a unicast destination to NFQUEUE
//!   `queue_num`, with `--queue-bypass` so SYNs pass unqueued while no daemon is bound. This
//!   kernel has the xtables NFQUEUE target but not nftables' `queue` statement
//!   (CONFIG_NFT_QUEUE is off), hence iptables for that one rule. The daemon's verdict
//!   lets a SYN continue to the nftables chain below (priority -145, after the queue), or
//!   marks it [`REFUSE_MARK`]: that chain answers it with `reject with tcp reset`, so the
//!   kernel itself sends the client an RST for its SYN (correct sequence numbers, IPv4 and
//!   IPv6, from the original destination's address) and the client's connect() fails with
//!   ECONNREFUSED.
//! - **TCP** from the LAN interfaces to foreign addresses is diverted with nftables `tproxy`
//!   to the daemon's transparent listener; the accepted socket's local address *is* the
//!   original destination (no NAT, no SO_ORIGINAL_DST). Packets of connections that already
//!   have a transparent socket are marked and delivered locally too (`socket transparent`).
//!   The mark makes `ip rule fwmark MARK lookup T` route them to `local default dev lo`.
//! - **UDP** (`udp_flows`): the first packet of each new flow goes to the same queue; the
//!   verdict marks it with its uplink (`(i + 1) << 24`, [`UPLINK_MARK_MASK`]), the chain
//!   saves that in the flow's conntrack mark and restores it on the flow's later packets
//!   (original direction only, so replies are routed to the LAN as usual); `ip rule fwmark`
//!   sends marked packets to the uplink's table, and they are masqueraded to the uplink's
//!   address. The kernel forwards them (net.ipv4.ip_forward must be on).
//! - **NAT mode** (`mode = "nat"`): no TPROXY. The SYN copies the daemon sends carry
//!   [`RAW_MARK`] and are exempt from conntrack (`rawout` chain), so their answers are
//!   conntrack-INVALID on arrival; iptables queues exactly those SYN-ACKs and RSTs from the
//!   uplinks ([`nat_queue_rules`]), and the client's first ACK (a conntrack pick-up: NEW
//!   without SYN). The daemon marks that ACK with the winner's uplink mark, and from there
//!   it is a UDP flow's path: ct mark, `fwmark` rule to the uplink's table, masquerade to
//!   the uplink's address (the client's port is kept: nothing else holds that tuple).
//! - Each uplink `i` gets routing table `table_base + 1 + i` with its default route, and a
//!   rule `from <uplink address> lookup` it. Sockets of an attempt are bound to the uplink's
//!   address and device, so they leave by that uplink whatever the main table says, and the
//!   origin sees the uplink's address (its NAT, if any, is the uplink router's business).
//!
//! Invariants: everything is installed in one nftables table of our own (replaced
//! atomically if a crashed daemon left it), in iptables rules carrying the comment
//! [`TABLE`] and in rules/tables numbered from `table_base`; [`Interception::drop`] removes
//! exactly those, queue rules first so no SYN is queued to a daemon that is going away.
//! Names were validated by the config.

use super::config::{Mode, RaceSettings, UplinkSettings};
use std::net::IpAddr;
use std::process::{Command, Stdio};

/// nftables table of the daemon.
pub const TABLE: &str = "multihome_race";
/// Packet mark bit of diverted packets (a high bit, away from marks others commonly use).
pub const MARK: u32 = 0x0010_0000;
/// Packet mark bit of a held SYN the daemon refuses: the chain resets it.
pub const REFUSE_MARK: u32 = 0x0020_0000;
/// Mark of NAT mode's own packets (the SYN copies): the `rawout` chain exempts them from
/// connection tracking, so the kernel's NAT can later give the client's connection the very
/// same uplink-side 4-tuple.
pub const RAW_MARK: u32 = 0x0040_0000;
/// Mark bits of a UDP flow's uplink: `(i + 1) << 24` for uplink `i` (0 = none).
pub const UPLINK_MARK_MASK: u32 = 0x0f00_0000;

/// The mark bits of UDP flows over uplink `i`.
pub fn uplink_mark(i: usize) -> u32 {
    ((i as u32 + 1) << 24) & UPLINK_MARK_MASK
}
/// First `ip rule` preference used (TPROXY rule; uplink rules follow).
const RULE_PREF: u32 = 9000;

/// Errors installing interception or routes.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The rule feeding the SYN/UDP queue could not be installed.
    #[error("`{cmd}` failed: {stderr}; install the iptables package (the NFQUEUE target is reached through it), or set hold_syns = false and udp_flows = false in [race]")]
    Queue {
        /// The command line.
        cmd: String,
        /// Its error output.
        stderr: String,
    },
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
        source: multihome_io::netlink::NetlinkError,
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

/// The nftables ruleset text. In NAT mode (`nat`) TCP is not diverted to the listener: a
/// won connection carries its uplink's mark like a UDP flow, and the SYN copies are
/// untracked.
pub fn ruleset(lan: &[String], port: u16, udp_flows: bool, nat: bool) -> String {
    let lan_match = if lan.is_empty() {
        String::new()
    } else {
        let names: Vec<String> = lan.iter().map(|n| format!("\"{n}\"")).collect();
        format!("iifname {{ {} }} ", names.join(", "))
    };
    // UDP: save the uplink the daemon chose in the flow's conntrack mark; restore it on the
    // flow's later packets from the LAN (never on replies, which go to the LAN by the main
    // table); masquerade to the uplink's address.
    let (udp, masq) = if udp_flows || nat {
        let m = UPLINK_MARK_MASK;
        let protos = if nat { "{ tcp, udp }" } else { "udp" };
        (
            format!(
                "\t\tmeta l4proto {protos} meta mark & {m:#010x} != 0 ct mark set meta mark\n\
                 \t\tct direction original ct mark & {m:#010x} != 0 meta mark set ct mark\n"
            ),
            format!(
                "\tchain masq {{\n\
                 \t\ttype nat hook postrouting priority srcnat; policy accept;\n\
                 \t\tct mark & {m:#010x} != 0 masquerade\n\
                 \t}}\n"
            ),
        )
    } else {
        (String::new(), String::new())
    };
    let divert = if nat {
        String::new()
    } else {
        format!(
            "\t\t{lan_match}meta l4proto tcp socket transparent 1 meta mark set meta mark | {MARK:#x} accept\n\
             \t\t{lan_match}fib daddr type local return\n\
             \t\t{lan_match}meta l4proto tcp tproxy to :{port} meta mark set meta mark | {MARK:#x} accept\n"
        )
    };
    let rawout = if nat {
        format!(
            "\tchain rawout {{\n\
             \t\ttype filter hook output priority raw; policy accept;\n\
             \t\tmeta mark & {RAW_MARK:#x} == {RAW_MARK:#x} notrack\n\
             \t}}\n"
        )
    } else {
        String::new()
    };
    format!(
        "table inet {TABLE} {{}}\ndelete table inet {TABLE}\n\
         table inet {TABLE} {{\n\
         \tchain divert {{\n\
         \t\ttype filter hook prerouting priority mangle + 5; policy accept;\n\
         \t\t{lan_match}meta mark & {REFUSE_MARK:#x} == {REFUSE_MARK:#x} reject with tcp reset\n\
         {udp}{divert}\
         \t}}\n{masq}{rawout}}}\n"
    )
}

/// The iptables/ip6tables arguments (without the `-A`/`-D` verb's table and chain) of the
/// rules that feed the queue: TCP SYNs of new connections and first packets of new UDP
/// flows from the LAN to unicast destinations.
pub fn queue_rules(s: &RaceSettings) -> Vec<Vec<String>> {
    let mut protos = Vec::new();
    if s.hold_syns {
        protos.push(vec!["-p", "tcp", "--syn"]);
    }
    if s.udp_flows {
        protos.push(vec!["-p", "udp"]);
    }
    let lans: Vec<Option<&str>> = if s.lan_interfaces.is_empty() {
        vec![None]
    } else {
        s.lan_interfaces.iter().map(|l| Some(l.as_str())).collect()
    };
    let queue = s.queue_num.to_string();
    let mut out = Vec::new();
    for lan in &lans {
        for p in &protos {
            let mut r: Vec<&str> = Vec::new();
            if let Some(l) = lan {
                r.extend(["-i", l]);
            }
            r.extend(p);
            r.extend(["-m", "conntrack", "--ctstate", "NEW"]);
            r.extend(["-m", "addrtype", "--dst-type", "UNICAST"]);
            r.extend(["-m", "comment", "--comment", TABLE]);
            r.extend(["-j", "NFQUEUE", "--queue-num", &queue, "--queue-bypass"]);
            out.push(r.into_iter().map(String::from).collect());
        }
    }
    out
}

/// NAT mode's extra iptables rules (IPv4 only; NAT mode races IPv4): the first packet of a
/// TCP connection that conntrack picks up without a SYN (the client's ACK to the SYN-ACK
/// we passed on: its own SYN was never forwarded) from the LAN, so the daemon can mark it
/// with its uplink; and SYN-ACKs and RSTs arriving on the uplinks that belong to no tracked
/// connection (conntrack state INVALID: our SYN copies are untracked) — the answers to the
/// copies.
pub fn nat_queue_rules(s: &RaceSettings) -> Vec<Vec<String>> {
    let queue = s.queue_num.to_string();
    let tail = [
        "-m",
        "comment",
        "--comment",
        TABLE,
        "-j",
        "NFQUEUE",
        "--queue-num",
    ];
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut push = |head: Vec<&str>| {
        let mut r: Vec<String> = head.into_iter().map(String::from).collect();
        r.extend(tail.iter().map(|x| x.to_string()));
        r.extend([queue.clone(), "--queue-bypass".to_string()]);
        out.push(r);
    };
    let lans: Vec<Option<&str>> = if s.lan_interfaces.is_empty() {
        vec![None]
    } else {
        s.lan_interfaces.iter().map(|l| Some(l.as_str())).collect()
    };
    for lan in lans {
        let mut r = lan.map_or(vec![], |l| vec!["-i", l]);
        r.extend([
            "-p",
            "tcp",
            "!",
            "--syn",
            "-m",
            "conntrack",
            "--ctstate",
            "NEW",
        ]);
        push(r);
    }
    for u in &s.uplinks {
        for flags in [["SYN,ACK,RST", "SYN,ACK"], ["RST", "RST"]] {
            push(vec![
                "-i",
                &u.interface,
                "-p",
                "tcp",
                "--tcp-flags",
                flags[0],
                flags[1],
                "-m",
                "conntrack",
                "--ctstate",
                "INVALID",
            ]);
        }
    }
    out
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
            let nets =
                multihome_io::netlink::interface_addresses(&u.interface).map_err(|source| {
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
    undo: Undoable,
}

impl Interception {
    /// Installs policy routing for every uplink, the TPROXY routing and the nftables table.
    /// On an error, what was installed so far is removed as the value drops.
    pub fn install(s: &RaceSettings, addrs: &[UplinkAddrs]) -> Result<Interception, SetupError> {
        let mut me = Interception {
            undo: Undoable::default(),
        };
        me.tproxy_routing(s)?;
        me.uplink_routing(s, addrs)?;
        me.nft_table(s)?;
        me.queue_to_daemon(s)?;
        Ok(me)
    }

    /// Marked packets (the TPROXY'd connections) are delivered locally, per family.
    fn tproxy_routing(&mut self, s: &RaceSettings) -> Result<(), SetupError> {
        let tproxy = s.table_base.to_string();
        let mark = format!("{MARK:#x}/{MARK:#x}");
        for (fam, local) in [("-4", "0.0.0.0/0"), ("-6", "::/0")] {
            // IPv6 is best effort: a host without it still races IPv4.
            let v6 = fam == "-6";
            let pref = RULE_PREF.to_string();
            let res = self
                .add(
                    &[
                        "ip", fam, "rule", "add", "fwmark", &mark, "lookup", &tproxy, "pref", &pref,
                    ],
                    &[
                        "ip", fam, "rule", "del", "fwmark", &mark, "lookup", &tproxy, "pref", &pref,
                    ],
                )
                .and_then(|_| {
                    self.add(
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
        Ok(())
    }

    /// One routing table per uplink, chosen by source address (and by mark for UDP flows).
    fn uplink_routing(
        &mut self,
        s: &RaceSettings,
        addrs: &[UplinkAddrs],
    ) -> Result<(), SetupError> {
        for (i, (u, a)) in s.uplinks.iter().zip(addrs).enumerate() {
            let table = (s.table_base + 1 + i as u32).to_string();
            let pref = (RULE_PREF + 1 + i as u32).to_string();
            for (fam, addr) in [("-4", a.v4), ("-6", a.v6)] {
                let Some(addr) = addr else { continue };
                let from = addr.to_string();
                self.add(
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
                self.add(&route, &["ip", fam, "route", "flush", "table", &table])?;
                if s.udp_flows || s.mode == Mode::Nat {
                    // UDP flows (and NAT-mode connections) marked for this uplink use its
                    // table.
                    let m = format!("{:#x}/{UPLINK_MARK_MASK:#x}", uplink_mark(i));
                    let pref = (RULE_PREF + 10 + i as u32).to_string();
                    self.add(
                        &[
                            "ip", fam, "rule", "add", "fwmark", &m, "lookup", &table, "pref", &pref,
                        ],
                        &[
                            "ip", fam, "rule", "del", "fwmark", &m, "lookup", &table, "pref", &pref,
                        ],
                    )?;
                }
            }
        }
        Ok(())
    }

    /// The nftables table: refusal, TPROXY, UDP marks, masquerade.
    fn nft_table(&mut self, s: &RaceSettings) -> Result<(), SetupError> {
        let nat = s.mode == Mode::Nat;
        let text = ruleset(&s.lan_interfaces, s.listen_port, s.udp_flows, nat);
        let undo = ["nft", "delete", "table", "inet", TABLE];
        self.undo.load(&["nft", "-f", "-"], &text, &undo)
    }

    /// The iptables rules that queue SYNs and new UDP flows to the daemon.
    fn queue_to_daemon(&mut self, s: &RaceSettings) -> Result<(), SetupError> {
        // Last, so the chain that acts on the daemon's verdicts exists before any packet is
        // queued; first to go at cleanup.
        for tool in ["iptables", "ip6tables"] {
            for rule in queue_rules(s) {
                let mut add = vec![tool, "-w", "-t", "mangle", "-A", "PREROUTING"];
                add.extend(rule.iter().map(String::as_str));
                let mut del = add.clone();
                del[4] = "-D";
                match self.add(&add, &del) {
                    Ok(()) => {}
                    Err(SetupError::Command { cmd, stderr }) if tool == "iptables" => {
                        return Err(SetupError::Queue { cmd, stderr })
                    }
                    Err(e) => {
                        tracing::warn!("IPv6 SYN/UDP queueing not installed: {e}");
                        break;
                    }
                }
            }
        }
        if s.mode == Mode::Nat {
            for rule in nat_queue_rules(s) {
                let mut add = vec!["iptables", "-w", "-t", "mangle", "-A", "PREROUTING"];
                add.extend(rule.iter().map(String::as_str));
                let mut del = add.clone();
                del[4] = "-D";
                self.add(&add, &del).map_err(|e| match e {
                    SetupError::Command { cmd, stderr } => SetupError::Queue { cmd, stderr },
                    e => e,
                })?;
            }
        }
        Ok(())
    }

    fn add(&mut self, cmd: &[&str], undo: &[&str]) -> Result<(), SetupError> {
        self.undo.add(cmd, undo)
    }
}

/// Commands run with their undo; dropping it undoes them, last first. Shared by every
/// interception of this kind (the racing gateway's, stream mode's).
#[derive(Debug, Default)]
pub struct Undoable {
    undo: Vec<Vec<String>>,
}

impl Undoable {
    /// Runs `cmd`, to be undone by `undo`. For `ip rule` and iptables commands, a copy left
    /// by a crashed daemon is removed first (adding would duplicate it).
    pub fn add(&mut self, cmd: &[&str], undo: &[&str]) -> Result<(), SetupError> {
        if cmd.get(2) == Some(&"rule") || cmd[0].ends_with("tables") {
            while run(undo, None).is_ok() {}
        }
        run(cmd, None)?;
        self.push_undo(undo);
        Ok(())
    }

    /// Loads `text` with `cmd` reading it on stdin (`nft -f -`), undone by `undo`.
    pub fn load(&mut self, cmd: &[&str], text: &str, undo: &[&str]) -> Result<(), SetupError> {
        run(cmd, Some(text))?;
        self.push_undo(undo);
        Ok(())
    }

    fn push_undo(&mut self, undo: &[&str]) {
        self.undo.push(undo.iter().map(|s| s.to_string()).collect());
    }
}

impl Drop for Undoable {
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
        let r = ruleset(&["lan0".into(), "lan1".into()], 7070, true, false);
        assert!(r.contains("iifname { \"lan0\", \"lan1\" } meta l4proto tcp tproxy to :7070"));
        assert!(r.contains("delete table inet multihome_race"));
        assert!(r.contains("meta mark | 0x100000 accept"));
        assert!(r.contains("meta mark & 0x200000 == 0x200000 reject with tcp reset"));
        let refuse = r.find("reject").unwrap();
        assert!(
            refuse < r.find("tproxy").unwrap(),
            "refusal before the divert"
        );
        assert!(r.contains("ct mark & 0x0f000000 != 0 masquerade"));
        let bare = ruleset(&[], 1, false, false);
        assert!(!bare.contains("iifname"));
        assert!(!bare.contains("masquerade") && !bare.contains("ct mark"));
        assert!(!bare.contains("notrack"));
        let nat = ruleset(&["lan0".into()], 1, false, true);
        assert!(!nat.contains("tproxy"), "NAT mode diverts nothing");
        assert!(nat.contains("meta l4proto { tcp, udp } meta mark & 0x0f000000 != 0 ct mark set"));
        assert!(nat.contains("ct mark & 0x0f000000 != 0 masquerade"));
        assert!(nat.contains("meta mark & 0x400000 == 0x400000 notrack"));
        assert!(
            nat.contains("reject with tcp reset"),
            "refusals as in proxy mode"
        );
    }

    #[test]
    fn queue_rules_per_lan_and_protocol() {
        let text = "[race]\npredictor = \"race\"\nlan_interfaces = [\"lan0\", \"lan1\"]\n\
                    queue_num = 9\n[[uplink]]\nname = \"a\"\ninterface = \"u0\"\n";
        let src = multihome_runtime::config::Source {
            path: std::path::Path::new("race.toml"),
            text,
        };
        let mut s = super::super::config::validate(&src).unwrap();
        let rules = queue_rules(&s);
        assert_eq!(rules.len(), 4);
        let first = rules[0].join(" ");
        assert!(
            first.starts_with("-i lan0 -p tcp --syn -m conntrack --ctstate NEW"),
            "{first}"
        );
        assert!(
            first.ends_with("-j NFQUEUE --queue-num 9 --queue-bypass"),
            "{first}"
        );
        assert!(rules[3].join(" ").starts_with("-i lan1 -p udp"));
        let nat: Vec<String> = nat_queue_rules(&s).iter().map(|r| r.join(" ")).collect();
        assert_eq!(nat.len(), 2 + 2, "{nat:?}");
        assert!(nat[0].starts_with("-i lan0 -p tcp ! --syn -m conntrack --ctstate NEW -m comment"));
        assert!(nat[2].starts_with(
            "-i u0 -p tcp --tcp-flags SYN,ACK,RST SYN,ACK -m conntrack --ctstate INVALID"
        ));
        assert!(nat[3].ends_with("--queue-num 9 --queue-bypass"), "{nat:?}");
        s.hold_syns = false;
        s.udp_flows = false;
        assert!(queue_rules(&s).is_empty());
        assert_eq!(uplink_mark(0), 0x0100_0000);
        assert_eq!(uplink_mark(7), 0x0800_0000);
    }
}
