"""End-to-end tests of kernel MPTCP with detours (docs/PROTOCOL.md §15.6): an unmodified MPTCP
application on a single-homed client gains subflows through `multihome relay`s' NAT detours,
added by `multihome mptcp-detours` with the kernel's userspace path manager (N = 2 by default:
two relays give two subflows); when a relay dies its subflow is removed and the transfer
completes over the direct subflow.

Topology (Brennan's setting: the relays are reached over the client's only access link and
forward to the server by other routes)::

    cli l0 10.0.1.2 ════ 10.0.1.1 l0 srv rl<i> 10.0.8<i>.1 ════ 10.0.8<i>.2 rl0 rly<i> (relay)

The direct route is the bottleneck: on ``cli l0`` an HTB class holds the transfer's own
packets (TCP to port ``PORT``, the direct subflow) to ``DIRECT_MBIT``; the detour subflows'
packets (TCP to the relays' ports) pass freely there and are held to ``DETOUR_MBIT`` each by a
tbf on the relay's ``rl0`` towards the server. A byte counter in each relay's forward hook
counts what it forwards to the server's port.

The application is ``lab/tools/tcpxfer.py --mptcp`` (``socket(AF_INET, SOCK_STREAM,
IPPROTO_MPTCP)``, sha256 of the stream checked at the receiver): MPTCP's own byte stream
carried by whichever subflows the kernel has.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from lab.mptcp import counters
from lab.netns import Lab, LabError, Namespace, Proc
from lab.traffic import TcpTransfer

DIRECT_MBIT = 20.0
DETOUR_MBIT = 40.0
PORT = 9000
RELAY_PORT = 51900
CLI, SRV = "10.0.1.2", "10.0.1.1"


def relay_ip(i: int) -> str:
    return f"10.0.8{i}.2"


class MptcpDetourLab:
    """The namespaces, the relays and `multihome mptcp-detours` on the client."""

    def __init__(self, lab: Lab, binary: Path, relays: int = 1) -> None:
        self.lab, self.binary, self.dir = lab, binary, lab.dir
        self.cli, self.srv = lab.ns("cli"), lab.ns("srv")
        lab.veth(self.cli, "l0", self.srv, "l0")
        self.cli.addr_add("l0", f"{CLI}/24")
        self.srv.addr_add("l0", f"{SRV}/24")
        self.srv.sysctl("net.ipv4.ip_forward", 1)
        self.rlys: list[Namespace] = []
        for i in range(relays):
            rly = lab.ns(f"rly{i}")
            lab.veth(self.srv, f"rl{i}", rly, "rl0")
            self.srv.addr_add(f"rl{i}", f"10.0.8{i}.1/24")
            rly.addr_add("rl0", f"{relay_ip(i)}/24")
            rly.route_replace("default", via=f"10.0.8{i}.1")
            self.cli.route_replace(f"10.0.8{i}.0/24", via=SRV)
            self._relay_side(rly)
            self.rlys.append(rly)
        # The server's in-kernel path manager accepts joins up to its subflow limit.
        self.srv.ip("mptcp", "limits", "set", "subflow", "4", "add_addr_accepted", "0")
        self._shape_direct()
        self.relays: list[Proc] = []
        self.daemon: Proc | None = None

    def _shape_direct(self) -> None:
        """HTB on cli l0: TCP to PORT at DIRECT_MBIT, the rest free."""
        tc = ["tc"]
        dev = ["dev", "l0"]
        self.cli.run([*tc, "qdisc", "add", *dev, "root", "handle", "1:", "htb", "default", "20"])
        for cls, rate in (("1:10", f"{DIRECT_MBIT:g}mbit"), ("1:20", "10gbit")):
            self.cli.run(
                [*tc, "class", "add", *dev, "parent", "1:", "classid", cls, "htb"]
                + ["rate", rate, "ceil", rate]
            )
        self.cli.run(
            [*tc, "filter", "add", *dev, "parent", "1:", "protocol", "ip", "u32"]
            + ["match", "ip", "dport", str(PORT), "0xffff", "flowid", "1:10"]
        )

    @staticmethod
    def _relay_side(rly: Namespace) -> None:
        """tbf at DETOUR_MBIT towards the server, and a counter of what is forwarded to it."""
        rly.tbf("rl0", DETOUR_MBIT)
        rly.run(
            ["nft", "-f", "-"],
            input_text=(
                "table inet labcount {\n chain count {\n"
                "  type filter hook forward priority 10; policy accept;\n"
                f"  ip daddr {SRV} tcp dport {PORT} counter\n }}\n}}\n"
            ),
        )

    def keygen(self, name: str) -> str:
        key = str(self.dir / f"{name}.key")
        return self.cli.run([str(self.binary), "keygen", "--private-key-file", key]).stdout.strip()

    def start(self, check_interval_s: int = 1) -> None:
        client_pub = self.keygen("client")
        relay_sections = ""
        env = {"RUST_LOG": "info"}
        for i, rly in enumerate(self.rlys):
            pub = self.keygen(f"relay{i}")
            cfg = self.dir / f"relay{i}.toml"
            cfg.write_text(
                f'[relay]\nlisten = "0.0.0.0:{RELAY_PORT}"\nprivate_key_file = "relay{i}.key"\n'
                f'name = "lab"\nports = "40000-40099"\n'
                f'control_socket = "{self.dir / f"relay{i}.sock"}"\n'
                f'[[client]]\nname = "home"\npublic_key = "{client_pub}"\n'
            )
            self.relays.append(
                rly.spawn([str(self.binary), "relay", "--config", str(cfg)], "relay", env)
            )
            relay_sections += (
                f'[[relay]]\nname = "rly{i}"\naddress = "{relay_ip(i)}:{RELAY_PORT}"\n'
                f'public_key = "{pub}"\n'
            )
        (self.dir / "mptcp.toml").write_text(
            f'[mptcp]\nprivate_key_file = "client.key"\nservers = ["{SRV}:{PORT}"]\n'
            f"check_interval_s = {check_interval_s}\n"
            f'control_socket = "{self.dir / "mptcp.sock"}"\n' + relay_sections
        )
        self.daemon = self.cli.spawn(
            [str(self.binary), "mptcp-detours", "--config", str(self.dir / "mptcp.toml")],
            "mptcp-detours",
            env,
        )
        socks = [f"relay{i}.sock" for i in range(len(self.rlys))] + ["mptcp.sock"]
        for sock in socks:
            self.wait_for(lambda s=sock: (self.dir / s).exists(), f"{sock} to appear", 10)
        assert self.cli.run(["sysctl", "-n", "net.mptcp.pm_type"]).stdout.strip() == "1"

    def wait_for(self, cond: Callable[[], bool], what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise LabError(f"no {what} after {timeout}s\n{self.logs()}")
            time.sleep(0.05)

    def logs(self) -> str:
        procs = [*self.relays, *([self.daemon] if self.daemon else [])]
        return "\n".join(f"--- {p.name}\n{p.tail()}" for p in procs)

    def status(self, ns: Namespace, sock: str) -> dict:
        res = ns.run(
            [str(self.binary), "status", "--socket", str(self.dir / sock), "--json"], timeout=10
        )
        return json.loads(res.stdout)

    def detours(self) -> list[dict]:
        return self.status(self.cli, "mptcp.sock")["detours"]

    def wait_up(self, n: int, timeout: float) -> list[dict]:
        up: list[dict] = []

        def enough() -> bool:
            up[:] = [d for d in self.detours() if d["state"] == "up"]
            return len(up) >= n

        self.wait_for(enough, f"{n} detour subflows up", timeout)
        return up

    def relay_bytes(self, i: int) -> int:
        out = self.rlys[i].run(["nft", "-j", "list", "table", "inet", "labcount"]).stdout
        for item in json.loads(out)["nftables"]:
            for expr in item.get("rule", {}).get("expr", []):
                if "counter" in expr:
                    return int(expr["counter"]["bytes"])
        raise LabError(f"no counter in relay {i}'s labcount table: {out}")


def joins_at_server(before: dict[str, int], t: MptcpDetourLab) -> int:
    return counters(t.srv).get("MPJoinAckRx", 0) - before.get("MPJoinAckRx", 0)


def test_mptcp_connection_gains_a_subflow_through_the_relay(lab: Lab, multihome_bin: Path) -> None:
    """The MPTCP transfer gains a subflow through the relay's NAT detour, which carries a real
    part of it, and arrives intact; the relay holds one TCP (nat-tcp) detour meanwhile.

    Bounds: the direct subflow alone is held to DIRECT_MBIT = 20 Mbit/s, so a mean rate above
    1.3 × 20 = 26 Mbit/s needs the detour; the detour adds up to DETOUR_MBIT = 40 (ideal 60
    in all, 40/60 = 0.67 through the relay), so the relay forwarding at least 30 % of the
    payload is well inside what MPTCP's scheduler should reach. 60 MiB at >= 26 Mbit/s takes
    <= 20 s; the timeout allows direct-only speed plus 10 s so a failure reports, not hangs.
    """
    t = MptcpDetourLab(lab, multihome_bin)
    t.start()
    before = counters(t.srv)
    mib = 60
    xfer = TcpTransfer(t.cli, t.srv, SRV, mib=mib, cc="cubic", port=PORT, mptcp=True)
    d = t.wait_up(1, timeout=10)[0]
    relay = t.status(t.rlys[0], "relay0.sock")
    assert relay["nat_tcp_detours"] == 1, relay
    res = xfer.wait(timeout=mib * 8 * 1.05 / DIRECT_MBIT + 10)
    assert res.intact, res
    joins = joins_at_server(before, t)
    share = t.relay_bytes(0) / (mib << 20)
    print(
        f"mptcp+detour: {res.mbps:.1f} Mbit/s, relay forwarded {share:.2f} of the payload, "
        f"detour {d['local']} -> relay port {d['relay_port']}, joins {joins}"
    )
    assert joins == 1, joins
    assert res.mbps > 1.3 * DIRECT_MBIT, (res.mbps, share)
    assert share >= 0.3, (share, res)
    st = t.status(t.cli, "mptcp.sock")
    assert st["counters"]["subflows_joined"] == 1, st
    assert st["counters"]["failures"] == 0, st


def test_two_relays_give_two_subflows(lab: Lab, multihome_bin: Path) -> None:
    """With two relays and the default N = 2 the connection gains two subflows, one through
    each relay, and both carry part of the transfer.

    Bounds: direct 20 + one detour 40 = 60 Mbit/s is the most that one relay could add, so a
    mean above 60 needs both (ideal 100: 0.4 of the payload through each relay); each relay
    forwarding at least 15 % of the payload shows both were used. 80 MiB at >= 60 Mbit/s
    takes <= 11.2 s.
    """
    t = MptcpDetourLab(lab, multihome_bin, relays=2)
    t.start()
    before = counters(t.srv)
    mib = 80
    xfer = TcpTransfer(t.cli, t.srv, SRV, mib=mib, cc="cubic", port=PORT, mptcp=True)
    up = t.wait_up(2, timeout=10)
    assert {d["relay"] for d in up} == {"rly0", "rly1"}, up
    res = xfer.wait(timeout=mib * 8 * 1.05 / DIRECT_MBIT + 10)
    assert res.intact, res
    shares = [t.relay_bytes(i) / (mib << 20) for i in range(2)]
    joins = joins_at_server(before, t)
    print(f"mptcp+2 detours: {res.mbps:.1f} Mbit/s, relay shares {shares}, joins {joins}")
    assert joins == 2, joins
    assert res.mbps > DIRECT_MBIT + DETOUR_MBIT, (res.mbps, shares)
    assert min(shares) >= 0.15, shares


def test_relay_death_removes_the_subflow(lab: Lab, multihome_bin: Path) -> None:
    """The relay node dies mid-transfer (its process killed and its link cut): the daemon's
    next check goes unanswered, it destroys the detour subflow (RmSubflow at the client), and
    the transfer completes intact over the direct subflow.

    Bounds: checks every 1 s, a request gives up after 4 attempts 1 s apart, so the subflow
    goes within 1 + 4 s of the death (asserted: 10 s). Meanwhile the transfer stalls less than
    3 s: MPTCP's own retransmission timer moves the lost data to the direct subflow. After the
    death at >= 8 MiB, at most 52 MiB remain at DIRECT_MBIT: 52 * 8.4 / 20 = 22 s, plus 10 s.
    """
    t = MptcpDetourLab(lab, multihome_bin)
    t.start(check_interval_s=1)
    mib = 60
    xfer = TcpTransfer(t.cli, t.srv, SRV, mib=mib, cc="cubic", port=PORT, mptcp=True)
    t.wait_up(1, timeout=10)
    xfer.wait_progress(8 << 20, timeout=20)
    assert not xfer.done(), "transfer finished before the relay died; grow it"
    before = counters(t.cli)
    t.relays[0].stop(sig=9)
    t.rlys[0].ip("link", "set", "rl0", "down")
    died = time.monotonic()
    t.wait_for(lambda: not t.detours(), "detour removal", 10)
    gone_after = time.monotonic() - died
    remaining = mib - xfer.received_bytes() / (1 << 20)
    res = xfer.wait(timeout=remaining * 8 * 1.05 / DIRECT_MBIT + 10)
    assert res.intact, res
    after = counters(t.cli)
    st = t.status(t.cli, "mptcp.sock")
    # Progress reports come every 0.2 s while bytes arrive: the longest gap is the stall.
    reports = xfer.progress()
    stall = max(b[0] - a[0] for a, b in zip(reports, reports[1:], strict=False))
    print(
        f"subflow removed {gone_after:.1f} s after the relay died; longest stall "
        f"{stall:.1f} s; transfer {res.mbps:.1f} Mbit/s overall; counters {st['counters']}"
    )
    # MPTCP sends the dead subflow's data again on the direct one by its own retransmission
    # timer (a few RTOs of >= 200 ms), without waiting for the removal.
    assert stall < 3.0, reports
    assert st["counters"]["relays_dead"] >= 1, st
    assert st["counters"]["subflows_removed"] == 1, st
    assert after.get("RmSubflow", 0) - before.get("RmSubflow", 0) >= 1, (before, after)
