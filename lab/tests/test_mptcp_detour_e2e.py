"""End-to-end tests of kernel MPTCP with detours (docs/PROTOCOL.md §15.6): an unmodified MPTCP
application on a single-homed client gains a subflow through a `multihome relay`'s NAT detour,
added by `multihome mptcp-detours` with the kernel's userspace path manager; when the relay dies
the subflow is removed and the transfer completes over the direct subflow.

Topology (Brennan's setting: the relay is reached over the client's only access link and
forwards to the server by another route)::

    cli l0 10.0.1.2 ════ 10.0.1.1 l0 srv rl0 10.0.80.1 ════ 10.0.80.2 rl0 rly (multihome relay)

The direct route is the bottleneck: on ``cli l0`` an HTB class holds the transfer's own
packets (TCP to port ``PORT``, the direct subflow) to ``DIRECT_MBIT``; the detour subflow's
packets (TCP to the relay's ports) pass freely there and are held to ``DETOUR_MBIT`` by a tbf
on the relay's ``rl0`` towards the server. A byte counter in the relay's forward hook counts
what the relay forwards to the server's port.

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
CLI, SRV, RLY = "10.0.1.2", "10.0.1.1", "10.0.80.2"


class MptcpDetourLab:
    """The three namespaces, the relay and `multihome mptcp-detours` on the client."""

    def __init__(self, lab: Lab, binary: Path) -> None:
        self.lab, self.binary, self.dir = lab, binary, lab.dir
        self.cli, self.srv, self.rly = lab.ns("cli"), lab.ns("srv"), lab.ns("rly")
        lab.veth(self.cli, "l0", self.srv, "l0")
        lab.veth(self.srv, "rl0", self.rly, "rl0")
        self.cli.addr_add("l0", f"{CLI}/24")
        self.srv.addr_add("l0", f"{SRV}/24")
        self.srv.addr_add("rl0", "10.0.80.1/24")
        self.rly.addr_add("rl0", f"{RLY}/24")
        self.srv.sysctl("net.ipv4.ip_forward", 1)
        self.cli.route_replace("10.0.80.0/24", via=SRV)
        self.rly.route_replace("default", via="10.0.80.1")
        # The server's in-kernel path manager accepts joins up to its subflow limit.
        self.srv.ip("mptcp", "limits", "set", "subflow", "4", "add_addr_accepted", "0")
        self._shape()
        self.relay: Proc | None = None
        self.daemon: Proc | None = None

    def _shape(self) -> None:
        """HTB on cli l0: TCP to PORT at DIRECT_MBIT, the rest free; tbf on the relay's rl0."""
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
        self.rly.tbf("rl0", DETOUR_MBIT)
        # What the relay forwards to the server's port (after its DNAT), in bytes.
        self.rly.run(
            ["nft", "-f", "-"],
            input_text=(
                "table inet labcount {\n chain count {\n"
                "  type filter hook forward priority 10; policy accept;\n"
                f"  ip daddr {SRV} tcp dport {PORT} counter\n }}\n}}\n"
            ),
        )

    def keygen(self, name: str) -> str:
        key = self.dir / f"{name}.key"
        return self.cli.run(
            [str(self.binary), "keygen", "--private-key-file", str(key)]
        ).stdout.strip()

    def start(self, check_interval_s: int = 1) -> None:
        client_pub, relay_pub = self.keygen("client"), self.keygen("relay")
        (self.dir / "relay.toml").write_text(
            f'[relay]\nlisten = "0.0.0.0:{RELAY_PORT}"\nprivate_key_file = "relay.key"\n'
            f'name = "lab"\nports = "40000-40099"\ncontrol_socket = "{self.dir / "relay.sock"}"\n'
            f'[[client]]\nname = "home"\npublic_key = "{client_pub}"\n'
        )
        (self.dir / "mptcp.toml").write_text(
            f'[mptcp]\nprivate_key_file = "client.key"\nservers = ["{SRV}:{PORT}"]\n'
            f"check_interval_s = {check_interval_s}\n"
            f'control_socket = "{self.dir / "mptcp.sock"}"\n'
            f'[[relay]]\nname = "rly"\naddress = "{RLY}:{RELAY_PORT}"\npublic_key = "{relay_pub}"\n'
        )
        env = {"RUST_LOG": "info"}
        self.relay = self.rly.spawn(
            [str(self.binary), "relay", "--config", str(self.dir / "relay.toml")], "relay", env
        )
        self.daemon = self.cli.spawn(
            [str(self.binary), "mptcp-detours", "--config", str(self.dir / "mptcp.toml")],
            "mptcp-detours",
            env,
        )
        for sock in ("relay.sock", "mptcp.sock"):
            self.wait_for(lambda s=sock: (self.dir / s).exists(), f"{sock} to appear", 10)
        assert self.cli.run(["sysctl", "-n", "net.mptcp.pm_type"]).stdout.strip() == "1"

    def wait_for(self, cond: Callable[[], bool], what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise LabError(f"no {what} after {timeout}s\n{self.logs()}")
            time.sleep(0.05)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.tail()}" for p in (self.relay, self.daemon) if p)

    def status(self, ns: Namespace, sock: str) -> dict:
        res = ns.run(
            [str(self.binary), "status", "--socket", str(self.dir / sock), "--json"], timeout=10
        )
        return json.loads(res.stdout)

    def detours(self) -> list[dict]:
        return self.status(self.cli, "mptcp.sock")["detours"]

    def wait_detour(self, state: str, timeout: float) -> dict:
        found: list[dict] = []

        def up() -> bool:
            found[:] = [d for d in self.detours() if d["state"] == state]
            return bool(found)

        self.wait_for(up, f"detour in state {state}", timeout)
        return found[0]

    def relay_bytes(self) -> int:
        out = self.rly.run(["nft", "-j", "list", "table", "inet", "labcount"]).stdout
        for item in json.loads(out)["nftables"]:
            for expr in item.get("rule", {}).get("expr", []):
                if "counter" in expr:
                    return int(expr["counter"]["bytes"])
        raise LabError(f"no counter in the relay's labcount table: {out}")


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
    d = t.wait_detour("up", timeout=10)
    relay = t.status(t.rly, "relay.sock")
    assert relay["nat_tcp_detours"] == 1, relay
    res = xfer.wait(timeout=mib * 8 * 1.05 / DIRECT_MBIT + 10)
    assert res.intact, res
    after = counters(t.srv)
    joins = after.get("MPJoinAckRx", 0) - before.get("MPJoinAckRx", 0)
    forwarded = t.relay_bytes()
    share = forwarded / (mib << 20)
    print(
        f"mptcp+detour: {res.mbps:.1f} Mbit/s, relay forwarded {share:.2f} of the payload, "
        f"detour {d['local']} -> relay port {d['relay_port']}, joins {joins}"
    )
    assert joins >= 1, (before, after)
    assert res.mbps > 1.3 * DIRECT_MBIT, (res.mbps, share)
    assert share >= 0.3, (forwarded, res)
    st = t.status(t.cli, "mptcp.sock")
    assert st["counters"]["subflows_joined"] == 1, st
    assert st["counters"]["failures"] == 0, st


def test_relay_death_removes_the_subflow(lab: Lab, multihome_bin: Path) -> None:
    """The relay node dies mid-transfer (its process killed and its link cut): the daemon's
    next check goes unanswered, it destroys the detour subflow (RmSubflow at the client), and
    the transfer completes intact over the direct subflow.

    Bounds: checks every 1 s, a request gives up after 4 attempts 1 s apart, so the subflow
    goes within 1 + 4 s of the death (asserted: 10 s). After the death at >= 8 MiB, at most
    52 MiB remain at DIRECT_MBIT: 52 * 8.4 / 20 = 22 s, plus 10 s slack.
    """
    t = MptcpDetourLab(lab, multihome_bin)
    t.start(check_interval_s=1)
    mib = 60
    xfer = TcpTransfer(t.cli, t.srv, SRV, mib=mib, cc="cubic", port=PORT, mptcp=True)
    t.wait_detour("up", timeout=10)
    xfer.wait_progress(8 << 20, timeout=20)
    assert not xfer.done(), "transfer finished before the relay died; grow it"
    before = counters(t.cli)
    assert t.relay is not None
    t.relay.stop(sig=9)
    t.rly.ip("link", "set", "rl0", "down")
    died = time.monotonic()
    t.wait_for(lambda: not t.detours(), "detour removal", 10)
    gone_after = time.monotonic() - died
    remaining = mib - xfer.received_bytes() / (1 << 20)
    res = xfer.wait(timeout=remaining * 8 * 1.05 / DIRECT_MBIT + 10)
    assert res.intact, res
    after = counters(t.cli)
    st = t.status(t.cli, "mptcp.sock")
    print(
        f"subflow removed {gone_after:.1f} s after the relay died; transfer {res.mbps:.1f} "
        f"Mbit/s overall; counters {st['counters']}"
    )
    assert st["counters"]["relays_dead"] == 1, st
    assert st["counters"]["subflows_removed"] == 1, st
    assert after.get("RmSubflow", 0) - before.get("RmSubflow", 0) >= 1, (before, after)
