"""End-to-end tests of detour paths (docs/PROTOCOL.md §15): a single-homed client gains a
second tunnel path through a `multihome relay` and uses it — listed in its own config, or handed
out by the server (§15.7); the relay dies mid-transfer and the transfer completes over the
direct path.

Topology: lab/topology.py with one link (``direct``, cli l0 — srv l0) plus a relay namespace
``rly`` behind the server's namespace, which routes between them (Brennan's setting: the relay
is reached over the client's only access link, and forwards to the server by another route)::

    cli l0 10.0.1.2 ════ 10.0.1.1 l0 srv rl0 10.0.80.1 ════ 10.0.80.2 rl0 rly (multihome relay)

The direct route is the bottleneck, as in Brennan's experiments: the tunnel's own datagrams on
link 0 (UDP port 7000 at the server) are shaped to ``DIRECT_MBIT`` in both directions with an
HTB class, and everything else on that veth (the detour's datagrams, to and from the relay's
ports) is not. So a detour adds capacity, and the useless-detour rule (direct + detour < 1.1 ×
direct alone) must keep it.
"""

from __future__ import annotations

import time
import tomllib
from pathlib import Path

import tomli_w

from lab import prometheus
from lab.netns import Lab, LabError, Proc
from lab.topology import PORT, LinkSpec, Topology, link_ip

DIRECT_MBIT = 40.0
RELAY_NET = "10.0.80"
RELAY_PORT = 51900
RELAY_DASHBOARD = 8091
DETOUR = "direct via rly"


class DetourTopology(Topology):
    """One link plus a relay behind the server's namespace; the client lists the relay, or
    (``handed``) the server does and hands it to the client."""

    def __init__(self, lab: Lab, binary: Path, mode: str, handed: bool = False) -> None:
        self.mode = mode
        self.handed = handed
        self.relay_pub = ""
        super().__init__(lab, [LinkSpec("direct")], policy="aggregate", binary=binary)
        self.rly = lab.ns("rly")
        lab.veth(self.srv, "rl0", self.rly, "rl0")
        self.srv.addr_add("rl0", f"{RELAY_NET}.1/24")
        # The server answers from its one public address, the one the relay forwards to: its
        # socket is unbound, so without this its replies to the relay would leave from
        # 10.0.80.1 and match no NAT entry at the relay (docs/PROTOCOL.md §15.5).
        self.srv.route_replace(f"{RELAY_NET}.0/24", dev="rl0", src=link_ip(0, "srv"))
        self.rly.addr_add("rl0", f"{RELAY_NET}.2/24")
        self.rly.route_replace("default", via=f"{RELAY_NET}.1")
        # The client reaches the relay over its only link; its socket is bound to l0.
        self.cli.route_replace(f"{RELAY_NET}.0/24", via=link_ip(0, "srv"), dev="l0")
        self._shape_direct()
        self.relay: Proc | None = None

    def _shape_direct(self) -> None:
        """HTB on both ends of l0: the tunnel's direct datagrams at DIRECT_MBIT, the rest free."""
        for ns, match in ((self.cli, "dport"), (self.srv, "sport")):
            tc = ["tc"]
            ns.run(
                [*tc, "qdisc", "add", "dev", "l0", "root", "handle", "1:", "htb", "default", "20"]
            )
            for cls, rate in (("1:10", f"{DIRECT_MBIT:g}mbit"), ("1:20", "10gbit")):
                ns.run(
                    [
                        *tc,
                        "class",
                        "add",
                        "dev",
                        "l0",
                        "parent",
                        "1:",
                        "classid",
                        cls,
                        "htb",
                        "rate",
                        rate,
                        "ceil",
                        rate,
                    ]
                )
            ns.run(
                [
                    *tc,
                    "filter",
                    "add",
                    "dev",
                    "l0",
                    "parent",
                    "1:",
                    "protocol",
                    "ip",
                    "u32",
                    "match",
                    "ip",
                    match,
                    str(PORT),
                    "0xffff",
                    "flowid",
                    "1:10",
                ]
            )

    def start_relay(self) -> None:
        self.relay_pub = self.keygen("relay")
        cfg = (
            f'[relay]\nlisten = "0.0.0.0:{RELAY_PORT}"\nprivate_key_file = "relay.key"\n'
            f'name = "lab"\nports = "40000-40099"\ncontrol_socket = "{self.dir / "relay.sock"}"\n'
            f'dashboard = "127.0.0.1:{RELAY_DASHBOARD}"\n'
            f'[[client]]\nname = "home"\npublic_key = "{self.client_pub}"\n'
        )
        (self.dir / "relay.toml").write_text(cfg)
        self.relay = self._daemon(self.rly, "relay", self.dir / "relay.toml")

    def write_configs(self) -> None:
        super().write_configs()
        self.start_relay()
        # Rewrite the configs with the relay (its key exists only now): the client's own
        # [[relay]], or the server's list it hands out.
        relay = {
            "name": "rly",
            "address": f"{RELAY_NET}.2:{RELAY_PORT}",
            "public_key": self.relay_pub,
            "mode": self.mode,
        }
        path = self.dir / "client.toml"
        cfg = tomllib.loads(path.read_text())
        cfg["client"]["detours"] = 1
        if not self.handed:
            cfg["relay"] = [relay]
        path.write_text(tomli_w.dumps(cfg))
        if self.handed:
            path = self.dir / "server.toml"
            cfg = tomllib.loads(path.read_text())
            cfg["relay"] = [relay]
            path.write_text(tomli_w.dumps(cfg))

    def wait_established(self, timeout: float = 15, all_links_up: bool = True) -> dict:
        # Detour paths come and go: only the direct link must be up.
        del all_links_up
        return super().wait_established(timeout, all_links_up=False)

    def detour_link(self) -> dict | None:
        sess = self.session("client")
        return next((lk for lk in sess["links"] if lk["name"] == DETOUR), None) if sess else None

    def wait_detour(self, state: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lk = self.detour_link()
            if lk is not None and lk["state"] == state:
                return lk
            time.sleep(0.1)
        raise LabError(f"no {state} `{DETOUR}` after {timeout}s: {self.status()}\n{self.logs()}")


def carried(topo: Topology) -> dict[str, int]:
    """Bytes sent plus received per path of the client."""
    sess = topo.session("client")
    assert sess is not None
    return {lk["name"]: lk["tx_bytes"] + lk["rx_bytes"] for lk in sess["links"]}


def start(lab: Lab, binary: Path, mode: str, handed: bool = False) -> DetourTopology:
    topo = DetourTopology(lab, binary, mode, handed)
    topo.start()
    topo.wait_detour("up", timeout=15)
    return topo


def test_single_homed_client_gains_a_detour(lab: Lab, multihome_bin: Path) -> None:
    """A NAT detour through the relay becomes a second path and carries part of a transfer
    that arrives intact; the direct path alone could not reach the rate."""
    topo = start(lab, multihome_bin, "nat")
    st = topo.status()
    active = [c for c in st["detours"]["candidates"] if c["state"] == "active"]
    assert len(active) == 1, st["detours"]
    before = carried(topo)
    mib = 60
    res = topo.transfer(mib, "cubic").wait(timeout=mib * 8 * 1.05 / (0.5 * DIRECT_MBIT) + 10)
    assert res.intact, res
    after = carried(topo)
    moved = {k: after[k] - before.get(k, 0) for k in after}
    share = moved[DETOUR] / max(1, sum(moved.values()))
    print(f"detour: {res.mbps:.1f} Mbit/s, detour share {share:.2f}, moved {moved}")
    # The detour carries a real part (at least a tenth of the bytes), and the transfer beat
    # what the direct path's class alone can carry.
    assert share >= 0.1, moved
    assert res.mbps > DIRECT_MBIT, (res.mbps, moved)
    assert topo.detour_link()["state"] == "up"
    # The relay's Prometheus metrics show the detour installed for this client.
    url = f"http://127.0.0.1:{RELAY_DASHBOARD}/metrics"
    _, values = prometheus.parse(prometheus.get(topo.rly, url))
    assert values[("multihome_relay_installed_total", 'relay="lab"')] >= 1, values
    assert values[("multihome_relay_client_detours", 'relay="lab",client="home"')] == 1, values
    assert values[("multihome_relay_detours", 'relay="lab",mode="nat"')] == 1, values
    # Its status lists the detour under its client (the dashboard's sessions panel).
    relay = topo.status("relay", sock=topo.dir / "relay.sock")
    (entry,) = relay["clients"][0]["entries"]
    assert entry["mode"] == "nat" and entry["server"].endswith(f":{PORT}"), entry
    assert entry["expires_in_s"] > 0, entry
    # A clean shutdown releases the detour at the relay.
    assert topo.daemons["client"].stop() == 0
    relay = topo.status("relay", sock=topo.dir / "relay.sock")
    assert relay["detours"] == 0, relay
    assert relay["counters"]["released"] == 1, relay


def test_server_hands_out_the_relay(lab: Lab, multihome_bin: Path) -> None:
    """The client's config lists no relay; the server's lists one and hands it out: the client
    gains a detour path through it (status: "direct via rly", source server) and a transfer
    arrives intact over both paths; once a reload empties the server's list, the client
    retires the detour."""
    topo = start(lab, multihome_bin, "nat", handed=True)
    assert "relay" not in tomllib.loads((topo.dir / "client.toml").read_text())
    st = topo.status()["detours"]
    assert [(r["name"], r["source"]) for r in st["relays"]] == [("rly", "server")], st
    active = [c for c in st["candidates"] if c["state"] == "active"]
    assert [c["source"] for c in active] == ["server"], st
    handed = topo.status("server")["sessions"][0]["relay_list"]
    assert handed["relays"] == 1 and handed["acked"], handed
    before = carried(topo)
    mib = 20
    res = topo.transfer(mib, "cubic").wait(timeout=mib * 8 * 1.05 / (0.5 * DIRECT_MBIT) + 10)
    assert res.intact, res
    after = carried(topo)
    moved = {k: after[k] - before.get(k, 0) for k in after}
    print(f"handed-out detour: {res.mbps:.1f} Mbit/s, moved {moved}")
    assert moved[DETOUR] > 0, moved
    assert moved["direct"] > 0, moved
    assert topo.detour_link()["state"] == "up"
    # The server stops handing the relay out (`multihome reload`): the client retires the
    # detour — path down, entry released at the relay — and forgets the relay.
    path = topo.dir / "server.toml"
    cfg = tomllib.loads(path.read_text())
    del cfg["relay"]
    path.write_text(tomli_w.dumps(cfg))
    res = topo.srv.run([str(topo.binary), "reload", "--config", str(path)], check=False)
    assert res.returncode == 0 and "relays handed out: none" in res.stdout, res
    topo.wait_detour("down", timeout=5)
    deadline = time.monotonic() + 5
    while topo.status()["detours"]["relays"]:
        assert time.monotonic() < deadline, topo.status()["detours"]
        time.sleep(0.1)
    relay = topo.status("relay", sock=topo.dir / "relay.sock")
    assert relay["detours"] == 0 and relay["counters"]["released"] == 1, relay
    assert topo.link_states()["direct"] == "up"


def test_relay_killed_mid_transfer(lab: Lab, multihome_bin: Path) -> None:
    """A tunnel detour's relay is killed (SIGKILL: forwarding stops at once) mid-transfer: the
    transfer completes intact over the direct path, and the dead detour path is retired."""
    topo = start(lab, multihome_bin, "tunnel")
    mib = 60
    xfer = topo.transfer(mib, "cubic")
    xfer.wait_progress(15 << 20, timeout=30)
    assert not xfer.done(), "transfer finished before the kill; grow it"
    on_detour = carried(topo)[DETOUR]
    assert on_detour > 0
    assert topo.relay is not None
    topo.relay.stop(sig=9)
    remaining_bits = mib * 8 * (1 << 20)
    res = xfer.wait(timeout=remaining_bits / (0.5 * DIRECT_MBIT * 1e6) + 15)
    assert res.intact, res
    # Down after the detection time; retired after dead_after = 10 s of that (+ 5 s slack for
    # detection, the manager's 0.5 s tick and status polling), its candidate backing off.
    topo.wait_detour("down", timeout=15)
    deadline = time.monotonic() + 15
    while topo.status()["detours"]["retired_dead"] < 1:
        assert time.monotonic() < deadline, topo.status()["detours"]
        time.sleep(0.2)
    assert topo.status()["detours"]["candidates"][0]["state"] == "backoff"
    print(f"after kill: {res.mbps:.1f} Mbit/s overall; detour had moved {on_detour} bytes")
