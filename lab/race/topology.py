"""The racing gateway's topology in network namespaces.

Role: build the namespaces below, optionally with a ``linkem`` emulated link on each access
link, start the origin (HTTP + hello servers) and ``multihome race``, and give tests and
experiments handles: status, refusing or blackholing one uplink, fetch helpers.

::

                                   uplink i: 10.6<i+1>.0.0/24       10.7<i+1>.0.0/24
  +-----+ lan0     lan0 +------+ u0 .2 ==[linkem]== .1 u0 +----+ o0 .1 ===== .2 o0 +-------+
  | lan |---------------|  gw  | u1 .2 ==[linkem]== .1 u1 | r1 | o1 .1 ===== .2 o1 |  org  |
  | .2  | default via .1|  .1  |                          | r0 |  masquerade       | lo:   |
  +-----+ 192.168.60/24 | race |                          +----+  out of o<i>      | 10.80.0.1
                        +------+                                                   +-------+

Each router masquerades out of its origin-side link, so the origin sees a different source
address per uplink (10.7<i+1>.0.1) — two ISPs — and can refuse one of them. The gateway's main
table routes via uplink 0; table 50+i plus ``from 10.6<i+1>.0.2`` rules route each uplink's
own sockets (the fetch workload's; the daemon installs its own equivalent ones).

Invariants: uplink i is ``u<i>`` on the gateway and on router ``r<i>``; the origin service
address 10.80.0.1 is reachable only through the routers; everything lives in the given
:class:`~lab.netns.Lab` and disappears with it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import tomli_w

from lab.linkem import LinkemLink
from lab.netns import Lab, LabError, Namespace, Proc, tool_cmd
from lab.topology import multihome_binary

LAN_HOST = "192.168.60.2"
LAN_GW = "192.168.60.1"
ORIGIN = "10.80.0.1"
HTTP_PORT = 80
HELLO_PORT = 7
UDP_PORT = 9
RACE_PORT = 7070


def gw_ip(i: int) -> str:
    return f"10.6{i + 1}.0.2"


def router_ip(i: int) -> str:
    return f"10.6{i + 1}.0.1"


def origin_side_ip(i: int) -> str:
    """The router's address as the origin sees it (after its masquerade)."""
    return f"10.7{i + 1}.0.1"


@dataclass
class UplinkSpec:
    """One uplink: a name, and a linkem config (None: a plain veth)."""

    name: str
    linkem: dict | None = None
    offloads: bool = True
    extra: dict = field(default_factory=dict)


class RaceTopology:
    """lan — gw — N uplinks (routers) — org, with ``multihome race`` on gw."""

    def __init__(
        self, lab: Lab, uplinks: list[UplinkSpec], *, seed: int = 1, binary: Path | None = None
    ) -> None:
        self.lab = lab
        self.uplinks = uplinks
        self.binary = binary or multihome_binary()
        self.lan = lab.ns("lan")
        self.gw = lab.ns("gw")
        self.org = lab.ns("org")
        self.routers: list[Namespace] = []
        self.links: list[LinkemLink | None] = []
        self.daemon: Proc | None = None
        self.origin: Proc | None = None
        self.socket = lab.dir / "race.sock"
        self._refusals: dict[int, int] = {}
        self._build(seed)

    def _build(self, seed: int) -> None:
        lab = self.lab
        lab.veth(self.lan, "lan0", self.gw, "lan0")
        self.lan.addr_add("lan0", f"{LAN_HOST}/24")
        self.gw.addr_add("lan0", f"{LAN_GW}/24")
        self.lan.route_replace("default", via=LAN_GW)
        self.org.addr_add("lo", f"{ORIGIN}/32")
        # The gateway forwards the LAN's UDP flows (TCP is relayed by the daemon).
        self.gw.sysctl("net.ipv4.ip_forward", 1)
        for i, spec in enumerate(self.uplinks):
            r = lab.ns(f"r{i}")
            r.sysctl("net.ipv4.ip_forward", 1)
            self.routers.append(r)
            if spec.linkem is None:
                lab.veth(self.gw, f"u{i}", r, f"u{i}")
                self.links.append(None)
            else:
                self.links.append(
                    LinkemLink(
                        lab,
                        i,
                        self.gw,
                        f"u{i}",
                        r,
                        f"u{i}",
                        spec.linkem,
                        seed=seed + i,
                        offloads=spec.offloads,
                    )
                )
            self.gw.addr_add(f"u{i}", f"{gw_ip(i)}/24")
            r.addr_add(f"u{i}", f"{router_ip(i)}/24")
            lab.veth(r, f"o{i}", self.org, f"o{i}")
            r.addr_add(f"o{i}", f"{origin_side_ip(i)}/24")
            self.org.addr_add(f"o{i}", f"10.7{i + 1}.0.2/24")
            r.route_replace(f"{ORIGIN}/32", via=f"10.7{i + 1}.0.2")
            r.run(["nft", "add", "table", "ip", "nat"])
            r.run(
                [
                    "nft",
                    "add",
                    "chain",
                    "ip",
                    "nat",
                    "post",
                    "{ type nat hook postrouting priority 100; }",
                ]
            )
            r.run(["nft", "add", "rule", "ip", "nat", "post", "oifname", f"o{i}", "masquerade"])
            # The fetch workload's per-uplink routing (the daemon adds its own equivalent).
            self.gw.ip("route", "replace", "default", "via", router_ip(i), "table", str(50 + i))
            self.gw.ip("rule", "add", "from", gw_ip(i), "lookup", str(50 + i), "pref", str(50 + i))
        self.gw.route_replace("default", via=router_ip(0))

    # ---- origin and daemon ----

    def start_origin(self) -> Proc:
        self.origin = self.org.spawn(
            tool_cmd_race(
                "origin",
                "--bind",
                ORIGIN,
                "--port",
                str(HTTP_PORT),
                "--hello-port",
                str(HELLO_PORT),
                "--udp-port",
                str(UDP_PORT),
            ),
            "origin",
        )
        deadline = time.monotonic() + 10
        while "LISTENING" not in self.origin.output():
            if not self.origin.alive() or time.monotonic() > deadline:
                raise LabError(f"origin did not start:\n{self.origin.tail()}")
            time.sleep(0.05)
        return self.origin

    def config(self, predictor: str, **race: object) -> dict:
        section: dict = {
            "lan_interfaces": ["lan0"],
            "predictor": predictor,
            "listen_port": RACE_PORT,
            "control_socket": str(self.socket),
            "seed": 1,
            **race,
        }
        uplinks = [
            {"name": s.name, "interface": f"u{i}", "gateway": router_ip(i), **s.extra}
            for i, s in enumerate(self.uplinks)
        ]
        return {"race": section, "uplink": uplinks}

    def start_race(self, predictor: str = "race", **race: object) -> Proc:
        """Write race.toml and start the daemon; wait for its control socket."""
        if not self.binary.exists():
            raise LabError(f"multihome binary missing: {self.binary}")
        self.stop_race()
        path = self.lab.dir / f"race-{predictor}.toml"
        path.write_text(tomli_w.dumps(self.config(predictor, **race)))
        env = {"RUST_LOG": os.environ.get("MH_RUST_LOG", "info")}
        self.daemon = self.gw.spawn(
            [str(self.binary), "race", "--config", str(path)], f"race-{predictor}", env=env
        )
        deadline = time.monotonic() + 10
        while not self.socket.exists():
            if not self.daemon.alive() or time.monotonic() > deadline:
                raise LabError(f"multihome race did not start:\n{self.daemon.tail()}")
            time.sleep(0.05)
        return self.daemon

    def stop_race(self) -> int | None:
        if self.daemon is None:
            return None
        rc = self.daemon.stop()
        self.daemon = None
        return rc

    def status(self) -> dict:
        res = self.gw.run(
            [str(self.binary), "status", "--socket", str(self.socket), "--json"], timeout=10
        )
        return json.loads(res.stdout)

    # ---- impairments at the origin and on the access links ----

    def refuse(self, i: int, port: int = HTTP_PORT) -> None:
        """The origin resets TCP handshakes coming through uplink ``i`` (figure 3-3)."""
        if not self._refusals:
            self.org.run(["nft", "add", "table", "inet", "refuse"])
            self.org.run(
                [
                    "nft",
                    "add",
                    "chain",
                    "inet",
                    "refuse",
                    "input",
                    "{ type filter hook input priority 0; }",
                ]
            )
        res = self.org.run(
            [
                "nft",
                "--echo",
                "--handle",
                "add",
                "rule",
                "inet",
                "refuse",
                "input",
                "ip",
                "saddr",
                origin_side_ip(i),
                "tcp",
                "dport",
                str(port),
                "reject",
                "with",
                "tcp",
                "reset",
            ]
        )
        self._refusals[i] = int(res.stdout.strip().rsplit("handle", 1)[1].split()[0])

    def unrefuse(self, i: int) -> None:
        """Uplink ``i``'s handshakes are accepted again."""
        handle = self._refusals.pop(i)
        self.org.run(["nft", "delete", "rule", "inet", "refuse", "input", "handle", str(handle)])

    def blackhole(self, i: int) -> None:
        """Uplink ``i`` silently drops everything (gateway side, both directions)."""
        self.gw.blackhole(f"u{i}")

    def unblackhole(self, i: int) -> None:
        self.gw.unblackhole(f"u{i}")

    # ---- traffic from the LAN host ----

    def get(
        self,
        path: str,
        *,
        timeout: float = 30,
        sha256: bool = False,
        tos: int = 0,
        upload: int = 0,
    ) -> dict:
        """One HTTP GET from the LAN host to the origin, through the gateway (``upload`` > 0:
        a POST of that many bytes to ``/upload`` instead, ok when the origin counted them)."""
        cmd = tool_cmd_race(
            "fetch", "get", "--host", ORIGIN, "--path", path, "--timeout", str(timeout)
        )
        cmd += ["--tos", str(tos), "--upload-bytes", str(upload)]
        if sha256:
            cmd.append("--sha256")
        res = self.lan.run(cmd, timeout=timeout + 30)
        return parse_result(res.stdout)

    def hello(self, count: int) -> list[float | None]:
        """``count`` sequential connections from the LAN host to the one-byte server: seconds
        from connect() to the first byte, each (``None``: failed or nothing within 5 s)."""
        cmd = tool_cmd_race(
            "fetch", "hello", "--host", ORIGIN, "--port", str(HELLO_PORT), "--count", str(count)
        )
        return parse_result(self.lan.run(cmd, timeout=count + 60).stdout)["seconds"]

    def udp(self, sport: int, count: int = 3, timeout: float = 2.0) -> list[str | None]:
        """One UDP flow from the LAN host's port ``sport``: the source address the origin saw
        for each datagram (``origin_side_ip(i)`` for uplink i; None: no answer)."""
        cmd = tool_cmd_race(
            "fetch", "udp", "--host", ORIGIN, "--port", str(UDP_PORT), "--sport", str(sport)
        )
        cmd += ["--count", str(count), "--timeout", str(timeout)]
        res = self.lan.run(cmd, timeout=count * timeout + 30)
        return parse_result(res.stdout)["seen"]


def tool_cmd_race(module: str, *args: str) -> list[str]:
    """``python -m lab.race.<module> args`` (the race lab's tools live beside this file)."""
    return [*tool_cmd("x")[:2], f"lab.race.{module}", *args]


def parse_result(stdout: str) -> dict:
    for line in reversed(stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise LabError(f"no RESULT line in: {stdout[-2000:]}")
