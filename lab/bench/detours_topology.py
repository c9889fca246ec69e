"""The network of Brennan's Mininet experiments ("Exploring Alternative Routes Using Multipath
TCP", slide 33) on linkem links, for the ``detours`` suite.

Role: build the six hosts and six links, route them, switch the links between the suite's
scenarios (live linkem changes), and start what each mechanism needs on them: the kernel
NAT rule of a plain TCP(NAT) detour, the multihome server, client and ``multihome relay``.

The slide names the nodes (client, server, detour, r1-r3), the links (1-6) and one /24 per
link (10.0.1-10.0.6); it does not say which link joins what. Our reading, chosen so that the
seed's claims follow from the rates (slide 34)::

                                 detour 10.0.6.1
                                    │ link 6 (access)
                                 10.0.6.2
                  10.0.4.1 ─ link 4 ─ r3 ─ link 5 ─ 10.0.5.2
                  │ (core)   10.0.4.2   10.0.5.1   (core) │
    client ─ link 1 (access) ─ r1 ─────── link 2 (core) ────── r2 ─ link 3 (access) ─ server
    10.0.1.1          10.0.1.2  10.0.2.1             10.0.2.2  10.0.3.1          10.0.3.2

- Access links (1, 3, 6) join a host to its router; core links (2, 4, 5) join routers.
- The default route client -> server is r1 -> r2 over link 2: links 1, 2, 3.
- The detour route: client -> detour over r1 -> r3 (links 1, 4, 6), and, after the detour's
  NAT, detour -> server over r3 -> r2 (links 6, 5, 3). An upload crosses link 6 twice, once
  in each direction (full duplex: no shared capacity).
- Symmetric (every link 10 Mbit/s): each route is 10 Mbit/s, and so are links 1 and 3, which
  both routes share: together they still carry 10. No aggregation is possible.
- Core-limited (core 10, access 20): each route is 10 (its core links), the shared access
  links 20: the two routes together carry 20, twice the default route's 10.
- Lossy / delayed: link 2 only, i.e. the default route only, in both directions (as
  Mininet's ``TCLink(loss=1)`` or ``delay='100ms'`` sets netem on both interfaces).

Not on the slide, so chosen here: 5 ms one-way delay on every link (default-route RTT 30 ms,
detour route 60 ms), drop-tail queues of 100 frames per direction, offloads off on every link
end (linkem drops and queues 1514-byte frames, as a Mininet link does).

Invariants: link k is ``l<k>`` on both its ends and ``lk<k>`` is its linkem namespace; the
data direction client -> server is linkem's a2b on links 1-5 and on link 6 a2b into the
detour, b2a out of it; every process is started through the :class:`~lab.netns.Lab` and
stopped by its PID.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import tomli_w

from lab.linkem import LinkemLink
from lab.netns import Lab, LabError, Namespace, Proc

# Link k: (a end, a address, b end, b address, kind). Data client -> server goes a2b.
LINKS = {
    1: ("client", "10.0.1.1", "r1", "10.0.1.2", "access"),
    2: ("r1", "10.0.2.1", "r2", "10.0.2.2", "core"),
    3: ("r2", "10.0.3.1", "server", "10.0.3.2", "access"),
    4: ("r1", "10.0.4.1", "r3", "10.0.4.2", "core"),
    5: ("r3", "10.0.5.1", "r2", "10.0.5.2", "core"),
    6: ("r3", "10.0.6.2", "detour", "10.0.6.1", "access"),
}
CLIENT, SERVER, DETOUR = "10.0.1.1", "10.0.3.2", "10.0.6.1"
# (node, prefix, next hop): every route not on a connected /24.
ROUTES = (
    ("client", "default", "10.0.1.2"),
    ("server", "default", "10.0.3.1"),
    ("detour", "default", "10.0.6.2"),
    ("r1", "10.0.3.0/24", "10.0.2.2"),  # the default route: over link 2
    ("r1", "10.0.5.0/24", "10.0.2.2"),
    ("r1", "10.0.6.0/24", "10.0.4.2"),  # to the detour: over link 4
    ("r2", "10.0.1.0/24", "10.0.2.1"),
    ("r2", "10.0.4.0/24", "10.0.2.1"),
    ("r2", "10.0.6.0/24", "10.0.5.1"),  # the detour's side back: over link 5
    ("r3", "10.0.1.0/24", "10.0.4.1"),
    ("r3", "10.0.2.0/24", "10.0.4.1"),
    ("r3", "10.0.3.0/24", "10.0.5.2"),
)
DELAY_MS = 5
QUEUE_PACKETS = 100
RATES = {"symmetric": {"access": 10, "core": 10}, "core-limited": {"access": 20, "core": 10}}
# Variation -> what link 2 gets in both directions on top of the network's settings.
VARIATIONS = {"normal": {}, "loss": {"loss": 0.01}, "delay": {"delay_ms": 100}}

PORT, RELAY_PORT, TUN_CLIENT, TUN_SERVER = 7000, 51900, "10.200.0.2", "10.200.0.1"
DIRECT_NAME, RELAY_NAME = "direct", "detour"
DETOUR_PATH = f"{DIRECT_NAME} via {RELAY_NAME}"
TUN_MTU = 1420
# TCP(NAT): connections to these ports of the detour are NATed to the server.
NAT_TCP_PORTS = (9100, 9999)


def link_settings(network: str, variation: str, k: int) -> dict[str, str]:
    """linkem settings (both directions) of link ``k`` in one scenario."""
    rate = RATES[network][LINKS[k][4]]
    extra = VARIATIONS[variation] if k == 2 else {}
    return {
        "rate": f"{rate}mbit",
        "delay": f"{DELAY_MS + extra.get('delay_ms', 0)}ms",
        "loss": str(extra.get("loss", 0.0)),
        "queue_packets": str(QUEUE_PACKETS),
    }


def route_capacity_mbit(network: str) -> dict[str, float]:
    """Wire rate of the default route, the detour route, and both together (shared access)."""
    r = RATES[network]
    return {"default": r["core"], "detour": min(r["core"], r["access"]), "both": r["access"]}


@dataclass
class Daemon:
    proc: Proc
    sock: Path


class DetourLab:
    """Slide 33's six hosts on six linkem links, plus the multihome pieces on demand."""

    def __init__(self, lab: Lab, binary: Path) -> None:
        self.lab, self.binary, self.dir = lab, binary, lab.dir
        self.nodes: dict[str, Namespace] = {
            n: lab.ns(n) for n in ("client", "server", "detour", "r1", "r2", "r3")
        }
        for n in ("r1", "r2", "r3", "detour"):
            self.nodes[n].sysctl("net.ipv4.ip_forward", 1)
        self.links: dict[int, LinkemLink] = {}
        first = link_settings("symmetric", "normal", 1)
        for k, (a, a_ip, b, b_ip, _kind) in LINKS.items():
            dev = f"l{k}"
            cfg = {"both": {**first, "queue_packets": QUEUE_PACKETS, "loss": 0.0}}
            self.links[k] = LinkemLink(
                lab, k, self.nodes[a], dev, self.nodes[b], dev, cfg, seed=k, offloads=False
            )
            self.nodes[a].addr_add(dev, f"{a_ip}/24")
            self.nodes[b].addr_add(dev, f"{b_ip}/24")
        for node, prefix, via in ROUTES:
            self.nodes[node].route_replace(prefix, via=via)
        self.daemons: dict[str, Daemon] = {}
        self.keys: dict[str, str] = {}

    def ns(self, name: str) -> Namespace:
        return self.nodes[name]

    # ---- scenarios and counters ----

    def apply(self, network: str, variation: str) -> None:
        """Set every link to the scenario (live; the queues drain in a second)."""
        for k, link in self.links.items():
            link.set("both", **link_settings(network, variation, k))
        time.sleep(1.0)

    def link_stats(self) -> dict[int, dict]:
        return {k: link.stats() for k, link in self.links.items()}

    # ---- TCP(NAT): the kernel NAT of a detour, for plain TCP ----

    def nat_tcp(self, on: bool) -> None:
        """DNAT TCP to the detour's ports NAT_TCP_PORTS to the server, SNAT to the detour."""
        lo, hi = NAT_TCP_PORTS
        rules = "table ip dbench\ndelete table ip dbench\n"
        if on:
            rules += (
                "table ip dbench {\n"
                "  chain pre { type nat hook prerouting priority dstnat; policy accept;\n"
                f"    ip daddr {DETOUR} tcp dport {lo}-{hi} dnat to {SERVER}\n  }}\n"
                "  chain post { type nat hook postrouting priority srcnat; policy accept;\n"
                f"    ip daddr {SERVER} tcp dport {lo}-{hi} ct status dnat masquerade\n  }}\n"
                "}\n"
            )
        self.nodes["detour"].run(["nft", "-f", "-"], input_text=rules)

    # ---- MPTCP ----

    def mptcp_base(self) -> None:
        """Kernel MPTCP on client and server with no endpoints: one subflow, no ADD_ADDR; the
        server accepts joins (a detour path manager may add subflows)."""
        for n in ("client", "server"):
            ns = self.nodes[n]
            ns.sysctl("net.mptcp.enabled", 1)
            ns.sysctl("net.mptcp.pm_type", 0)
            ns.ip("mptcp", "endpoint", "flush")
        self.nodes["server"].ip("mptcp", "limits", "set", "subflow", "8", "add_addr_accepted", "0")

    # ---- multihome ----

    def keygen(self, name: str) -> str:
        if name not in self.keys:
            out = self.nodes["client"].run(
                [str(self.binary), "keygen", "--private-key-file", str(self.dir / f"{name}.key")]
            )
            self.keys[name] = out.stdout.strip()
        return self.keys[name]

    def spawn(self, node: str, role: str, config: dict, *args: str) -> Daemon:
        """Start ``multihome <role> --config`` in ``node``; wait for its control socket."""
        path = self.dir / f"{role}.toml"
        path.write_text(tomli_w.dumps(config))
        sock = self.dir / f"{role}.sock"
        sock.unlink(missing_ok=True)
        env = {"RUST_LOG": os.environ.get("MH_RUST_LOG", "info")}
        cmd = [str(self.binary), role, "--config", str(path), *args]
        proc = self.nodes[node].spawn(cmd, f"multihome-{role}", env=env)
        deadline = time.monotonic() + 15
        while not sock.exists():
            if not proc.alive() or time.monotonic() > deadline:
                proc.stop()
                raise LabError(f"multihome {role} did not come up:\n{proc.tail()}")
            time.sleep(0.05)
        self.daemons[role] = Daemon(proc, sock)
        return self.daemons[role]

    def start_relay(self) -> None:
        if "relay" in self.daemons:
            return
        cfg = {
            "relay": {
                "listen": f"{DETOUR}:{RELAY_PORT}",
                "private_key_file": "relay.key",
                "name": "dbench",
                "ports": "40000-40099",
                "control_socket": str(self.dir / "relay.sock"),
            },
            "client": [{"name": "client", "public_key": self.keygen("client")}],
        }
        self.keygen("relay")
        self.spawn("detour", "relay", cfg)

    def relay_entry(self, mode: str) -> dict:
        return {
            "name": RELAY_NAME,
            "address": f"{DETOUR}:{RELAY_PORT}",
            "public_key": self.keygen("relay"),
            "mode": mode,
        }

    def start_multihome(self, mode: str | None, timeout: float = 20) -> dict:
        """Server, then a client with one link and one ``mode`` detour (none: no relay); wait
        until the direct path and the detour path are up. Returns the client's status then."""
        if mode is not None:
            self.start_relay()
        server = {
            "server": {
                "listen": f"0.0.0.0:{PORT}",
                "private_key_file": "server.key",
                "tun_address": f"{TUN_SERVER}/24",
                "mtu": TUN_MTU,
                "control_socket": str(self.dir / "server.sock"),
            },
            "peer": [
                {
                    "name": "client",
                    "public_key": self.keygen("client"),
                    "allowed_ips": [f"{TUN_CLIENT}/32"],
                }
            ],
        }
        client = {
            "client": {
                "private_key_file": "client.key",
                "server_public_key": self.keygen("server"),
                "server": f"{SERVER}:{PORT}",
                "tun_address": f"{TUN_CLIENT}/24",
                "mtu": TUN_MTU,
                "control_socket": str(self.dir / "client.sock"),
                "detours": 0 if mode is None else 1,
            },
            "link": [{"name": DIRECT_NAME, "interface": "l1"}],
            "policy": {"default": "aggregate"},
        }
        if mode is not None:
            client["relay"] = [self.relay_entry(mode)]
        want = {DIRECT_NAME} if mode is None else {DIRECT_NAME, DETOUR_PATH}
        self.spawn("server", "server", server)
        self.spawn("client", "client", client)
        deadline = time.monotonic() + timeout
        st: dict = {}
        while time.monotonic() < deadline:
            st = self.status("client")
            sess = (st.get("sessions") or [{}])[0]
            states = {lk["name"]: lk["state"] for lk in sess.get("links", [])}
            if all(states.get(name) == "up" for name in want):
                return st
            time.sleep(0.2)
        raise LabError(f"no detour path up after {timeout}s: {json.dumps(st)[:1500]}")

    def stop_multihome(self) -> dict[str, int | None]:
        """Stop client (it releases its detour) and server; the relay stays."""
        codes = {}
        for role in ("client", "server"):
            d = self.daemons.pop(role, None)
            if d is not None:
                codes[role] = d.proc.stop(timeout=5)
        return codes

    def status(self, role: str) -> dict:
        d = self.daemons[role]
        node = {"client": "client", "server": "server", "relay": "detour"}[role]
        cmd = [str(self.binary), "status", "--socket", str(d.sock), "--json"]
        res = self.nodes[node].run(cmd, check=False, timeout=10)
        if res.returncode != 0:
            raise LabError(f"status {role}: {res.stderr.strip()}\n{d.proc.tail()}")
        return json.loads(res.stdout)
