"""The multihome tunnel topology in network namespaces.

Role: build the five-namespace topology below, write keys and the client/server TOML configs of
docs/CLI-CONTRACT.md, start both daemons, wait for the session, and give tests handles on it
(``status``, ``run_in``, link failures, renumbering, traffic helpers).

::

                  192.168.50.0/24       link i: 10.0.<i+1>.0/24          10.50.0.0/24
   +-------+ lan0      lan0 +-----------+ l0 .2 ===== .1 l0 +-----------+ up0    up0 +-------+
   |  lan  |----------------|    cli    | l1 .2 ===== .1 l1 |    srv    |------------|  org  |
   |  .2   | default via .1 |    .1     |  ...  tbf rate,   |    .1     | NAT out of |  .2   |
   +-------+                | multihome |       nft loss    | multihome | up0        +-------+
                            |  client   |                   |  server   |
                            |  mh0 10.200.0.2 ~~ tunnel ~~ mh0 10.200.0.1 |
                            +-----------+                   +-----------+

A link is either a direct veth (tbf rate, nftables loss, blackhole) or, with
``LinkSpec.linkem``, two veths through a namespace ``lk<i>`` running linkem (delay, jitter,
trace-driven rate, Gilbert-Elliott loss, outages, live changes; lab/linkem.py)::

    cli l<i> .2 ═══ la [ lk<i>: linkem ] lb ═══ .1 l<i> srv

The client routes the origin's prefix (10.50.0.0/24) into the tunnel; the LAN host's default
route is the client; the server's peer entry allows the client's inner address and the LAN
prefix, and the server masquerades tunnel traffic out of ``up0``. The origin has no route back
to the LAN or the tunnel, so a reply reaches the LAN host only through the server's NAT.

With ``ipv6=True`` every host is also IPv6 inside the tunnel, and ``LinkSpec(family=6)`` makes a
link IPv6-only (lab/ipv6.py has that address plan).

Invariants: link ``i`` is ``l<i>`` on both sides, client ``10.0.<i+1>.2``, server
``10.0.<i+1>.1`` (IPv6-only links: ``fd00:0:<i+1>::2`` and ``::1``); nothing routes LAN or
origin traffic between ``cli`` and ``srv`` except the tunnel (``tunnel=False`` instead installs
plain routes over link 0, to test the lab itself).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import tomli_w

from lab import ipv6 as lab6
from lab.linkem import LinkemLink
from lab.netns import REPO_ROOT, Lab, LabError, Namespace, Proc, Veth
from lab.traffic import TcpTransfer, UdpStream, iperf3

LAN_PREFIX = "192.168.50.0/24"
LAN_GW = "192.168.50.1"
LAN_HOST = "192.168.50.2"
ORIGIN_PREFIX = "10.50.0.0/24"
SRV_UPLINK = "10.50.0.1"
ORIGIN = "10.50.0.2"
TUN_CLIENT = "10.200.0.2"
TUN_SERVER = "10.200.0.1"
PORT = 7000
OUTSIDER_PREFIX = "10.0.99"


# Every lab link is IPv4 with a 1500-byte MTU: TUN MTU = 1500 - 20 - 8 - 52 (docs/CONFIG.md).
TUN_MTU = 1420


def multihome_binary() -> Path:
    """Where the binary is: $MULTIHOME_BIN, else <target dir>/release/multihome."""
    if os.environ.get("MULTIHOME_BIN"):
        return Path(os.environ["MULTIHOME_BIN"])
    target = os.environ.get("CARGO_TARGET_DIR") or str(REPO_ROOT / "target")
    return Path(target) / "release" / "multihome"


@dataclass
class LinkSpec:
    """One client-server link.

    Either a direct veth with an optional tbf rate (both directions) and nftables random loss
    (%), or, when ``linkem`` is a dict (linkem's TOML config: ``{"both": {...}, "a2b": ...}``,
    a2b = upload, b2a = download), a link through a ``linkem`` namespace (lab/linkem.py).
    ``offloads=False`` turns TSO/GSO/GRO off on both ends (per-packet loss and queue limits).
    ``family=6`` gives the link IPv6 addresses only (lab/ipv6.py; direct veths only).
    """

    name: str
    rate_mbit: float | None = None
    loss_pct: float = 0.0
    tbf_latency_ms: float = 50
    linkem: dict | None = None
    offloads: bool = True
    seed: int = 1
    family: int = 4


def link_ip(i: int, side: str) -> str:
    return f"10.0.{i + 1}.{2 if side == 'cli' else 1}"


class Topology:
    """lan — cli — N links — srv — org, with the multihome tunnel between cli and srv."""

    def __init__(
        self,
        lab: Lab,
        links: list[LinkSpec],
        *,
        policy: str = "aggregate",
        rules: list[dict] | None = None,
        detect_ms: int | None = None,
        tunnel: bool = True,
        binary: Path | None = None,
        client_extra: dict | None = None,
        server_extra: dict | None = None,
        client_links: int | None = None,
        ipv6: bool = False,
        client_sections: dict | None = None,
    ) -> None:
        self.lab = lab
        self.links = links
        # The client's config lists the first ``client_links`` links (the others are built
        # and addressed, for a reload to add).
        self.client_links = len(links) if client_links is None else client_links
        self.policy = policy
        self.rules = rules or []
        self.detect_ms = detect_ms
        self.client_extra = client_extra or {}
        self.server_extra = server_extra or {}
        # Further top-level tables of the client's file (e.g. ``stream``).
        self.client_sections = client_sections or {}
        self.tunnel = tunnel
        self.ipv6 = ipv6
        # Outer IPv6 needs 20 more bytes per datagram than IPv4 (lab/ipv6.py).
        self.v6_links = any(spec.family == 6 for spec in links)
        self.tun_mtu = lab6.TUN_MTU6 if self.v6_links else TUN_MTU
        self.binary = binary or multihome_binary()
        self.dir = lab.dir
        self.daemons: dict[str, Proc] = {}
        self.sockets = {"client": self.dir / "client.sock", "server": self.dir / "server.sock"}
        self.lan = lab.ns("lan")
        self.cli = lab.ns("cli")
        self.srv = lab.ns("srv")
        self.org = lab.ns("org")
        self.veths: list[Veth] = []
        self.emulated: dict[int, LinkemLink] = {}
        self.outsider: Namespace | None = None
        # Further peers of the server: (name, tunnel address), each run in ``out``.
        self.extra_clients: list[tuple[str, str]] = []
        self._build()

    # ---- construction ----

    def ns(self, role: str) -> Namespace:
        return {"lan": self.lan, "cli": self.cli, "srv": self.srv, "org": self.org}.get(
            role
        ) or self.lab.namespaces[role]

    def _build(self) -> None:
        for ns in (self.cli, self.srv):
            ns.sysctl("net.ipv4.ip_forward", 1)
        self.lab.veth(self.lan, "lan0", self.cli, "lan0")
        self.lan.addr_add("lan0", f"{LAN_HOST}/24")
        self.cli.addr_add("lan0", f"{LAN_GW}/24")
        self.lan.route_replace("default", via=LAN_GW)
        for i, spec in enumerate(self.links):
            dev = f"l{i}"
            if spec.linkem is not None:
                self.emulated[i] = LinkemLink(
                    self.lab,
                    i,
                    self.cli,
                    dev,
                    self.srv,
                    dev,
                    spec.linkem,
                    seed=spec.seed,
                    offloads=spec.offloads,
                )
                # The two endpoint devices, for tbf/nft helpers that act per end.
                veth = Veth(self.cli, dev, self.srv, dev)
            else:
                veth = self.lab.veth(self.cli, dev, self.srv, dev)
                if not spec.offloads:
                    veth.offloads_off()
            if spec.family == 6:
                self.cli.addr_add(dev, f"{lab6.link_ip6(i, 'cli')}/64")
                self.srv.addr_add(dev, f"{lab6.link_ip6(i, 'srv')}/64")
            else:
                self.cli.addr_add(dev, f"{link_ip(i, 'cli')}/24")
                self.srv.addr_add(dev, f"{link_ip(i, 'srv')}/24")
            if spec.rate_mbit:
                veth.tbf(spec.rate_mbit, spec.tbf_latency_ms)
            if spec.loss_pct:
                veth.loss(spec.loss_pct)
            self.veths.append(veth)
        self.lab.veth(self.srv, "up0", self.org, "up0")
        self.srv.addr_add("up0", f"{SRV_UPLINK}/24")
        self.org.addr_add("up0", f"{ORIGIN}/24")
        if self.ipv6:
            lab6.build_inner(self)
        if not self.tunnel:
            # Plain routing over link 0: used to validate the lab without the daemon.
            self.cli.route_replace(ORIGIN_PREFIX, via=link_ip(0, "srv"))
            self.srv.route_replace(LAN_PREFIX, via=link_ip(0, "cli"))
            self.srv.run(["nft", "add", "table", "ip", "nat"])
            self.srv.run(
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
            self.srv.run(
                ["nft", "add", "rule", "ip", "nat", "post", "oifname", "up0", "masquerade"]
            )

    def keygen(self, name: str) -> str:
        """Write ``<name>.key`` with ``multihome keygen``; return the public key."""
        res = self.cli.run(
            [str(self.binary), "keygen", "--private-key-file", str(self.dir / f"{name}.key")]
        )
        return res.stdout.strip()

    def client_config(
        self,
        key_name: str,
        server_pub: str,
        links: list[tuple[str, str, str]],
        routes: list[str],
        sock: Path,
        *,
        tun_address: str = TUN_CLIENT,
    ) -> dict:
        client: dict = {
            "private_key_file": f"{key_name}.key",
            "server_public_key": server_pub,
            "server": links[0][2],
            "tun_name": "mh0",
            "tun_address": f"{tun_address}/24",
            "mtu": self.tun_mtu,
            "routes": routes,
            "control_socket": str(sock),
        }
        if self.detect_ms is not None:
            client["detect_ms"] = self.detect_ms
        if self.ipv6 and key_name == "client":
            lab6.client_settings(client)
        client.update(self.client_extra)
        policy: dict = {"default": self.policy}
        if self.rules:
            policy["rule"] = self.rules
        return {
            "client": client,
            "link": [{"name": n, "interface": dev, "server": ep} for n, dev, ep in links],
            "policy": policy,
        }

    def write_configs(self) -> None:
        self.server_pub = self.keygen("server")
        self.client_pub = self.keygen("client")
        server = {
            "server": {
                # `[::]` is one dual-stack socket: IPv4 and IPv6 links alike.
                "listen": f"[::]:{PORT}" if self.v6_links else f"0.0.0.0:{PORT}",
                "private_key_file": "server.key",
                "tun_name": "mh0",
                "tun_address": f"{TUN_SERVER}/24",
                "mtu": self.tun_mtu,
                "uplink": "up0",
                "control_socket": str(self.sockets["server"]),
                **self.server_extra,
            },
            "peer": [
                {
                    "name": "home",
                    "public_key": self.client_pub,
                    "allowed_ips": [f"{TUN_CLIENT}/32", LAN_PREFIX],
                }
            ],
        }
        if self.ipv6:
            lab6.server_settings(server)
        for name, tun_ip in self.extra_clients:
            server["peer"].append(
                {"name": name, "public_key": self.keygen(name), "allowed_ips": [f"{tun_ip}/32"]}
            )
        links = [
            (spec.name, f"l{i}", self.link_server(i))
            for i, spec in enumerate(self.links[: self.client_links])
        ]
        client = self.client_config(
            "client", self.server_pub, links, [ORIGIN_PREFIX], self.sockets["client"]
        )
        client.update(self.client_sections)
        (self.dir / "server.toml").write_text(tomli_w.dumps(server))
        (self.dir / "client.toml").write_text(tomli_w.dumps(client))

    def link_server(self, i: int) -> str:
        """The server's address and port as the client reaches it over link ``i``."""
        if self.links[i].family == 6:
            return f"[{lab6.link_ip6(i, 'srv')}]:{PORT}"
        return f"{link_ip(i, 'srv')}:{PORT}"

    def _daemon(self, ns: Namespace, role: str, config: Path) -> Proc:
        env = {"RUST_LOG": os.environ.get("MH_RUST_LOG", "info")}
        return ns.spawn(
            [str(self.binary), role, "--config", str(config)], f"multihome-{role}", env=env
        )

    def start(
        self,
        timeout: float = 15,
        all_links_up: bool = True,
        before_client: Callable[[], None] | None = None,
    ) -> None:
        """Write configs, start server then client, wait until every link is up (or, with
        ``all_links_up=False``, until the session is established).

        ``before_client`` runs once the server listens and before the client starts (e.g. an
        attack the client must then get through)."""
        if not self.binary.exists():
            raise LabError(f"multihome binary missing: {self.binary}")
        self.write_configs()
        self.daemons["server"] = self._daemon(self.srv, "server", self.dir / "server.toml")
        self.wait_socket("server", timeout)
        if before_client is not None:
            before_client()
        self.daemons["client"] = self._daemon(self.cli, "client", self.dir / "client.toml")
        self.wait_established(timeout, all_links_up)
        self._check_routes()

    def _check_routes(self) -> None:
        """The contract makes the daemons install these routes; say so if one is missing."""
        checks = [
            (self.cli, ORIGIN, "client `routes` (10.50.0.0/24) into mh0"),
            (self.srv, LAN_HOST, "server peer allowed_ips (192.168.50.0/24) into mh0"),
        ]
        if self.ipv6:
            checks += [
                (self.cli, lab6.ORIGIN6, f"client `routes` ({lab6.ORIGIN6_PREFIX}) into mh0"),
                (self.srv, lab6.LAN6_HOST, f"server allowed_ips ({lab6.LAN6_PREFIX}) into mh0"),
            ]
        for ns, dst, what in checks:
            got = ns.route_get(dst)
            if " dev mh0 " not in f" {got} ":
                raise LabError(f"{what}: route missing in {ns.name}: `ip route get {dst}` = {got}")

    def wait_socket(self, side: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.sockets[side].exists():
            self._check_alive(side)
            if time.monotonic() > deadline:
                raise LabError(
                    f"{side} control socket {self.sockets[side]} never appeared\n"
                    f"{self.daemons[side].tail()}"
                )
            time.sleep(0.05)

    def _check_alive(self, side: str) -> None:
        proc = self.daemons.get(side)
        if proc is not None and not proc.alive():
            raise LabError(
                f"multihome {side} exited (rc={proc.popen.returncode}):\n{proc.tail(60)}"
            )

    # ---- status ----

    def status(self, side: str = "client", sock: Path | None = None) -> dict:
        """``multihome status --json`` of ``client`` or ``server``."""
        ns = self.cli if side == "client" else self.srv
        path = sock or self.sockets[side]
        res = ns.run(
            [str(self.binary), "status", "--socket", str(path), "--json"], check=False, timeout=10
        )
        if res.returncode != 0:
            self._check_alive(side)
            raise LabError(f"status {side} failed (rc={res.returncode}): {res.stderr.strip()}")
        try:
            return json.loads(res.stdout)
        except json.JSONDecodeError as exc:
            raise LabError(f"status {side}: not JSON: {res.stdout[:500]!r}") from exc

    def status_text(self, side: str = "client") -> str:
        """``multihome status`` of ``client`` or ``server`` as a person reads it (text)."""
        ns = self.cli if side == "client" else self.srv
        cmd = [str(self.binary), "status", "--socket", str(self.sockets[side])]
        return ns.run(cmd, timeout=10).stdout

    def session(self, side: str = "client") -> dict | None:
        sessions = self.status(side).get("sessions", [])
        return sessions[0] if sessions else None

    def link_states(self, side: str = "client") -> dict[str, str]:
        sess = self.session(side)
        return {lk["name"]: lk["state"] for lk in sess["links"]} if sess else {}

    def wait_established(self, timeout: float = 15, all_links_up: bool = True) -> dict:
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            self._check_alive("client")
            self._check_alive("server")
            try:
                sess = self.session("client")
            except LabError as exc:
                last = exc
                time.sleep(0.1)
                continue
            last = sess
            if sess and sess.get("established"):
                states = [lk["state"] for lk in sess.get("links", [])]
                if not all_links_up or (len(states) == self.client_links and set(states) == {"up"}):
                    return sess
            time.sleep(0.1)
        raise LabError(
            f"session not established with all links up after {timeout}s; last status: {last}\n"
            f"client log:\n{self.daemons['client'].tail()}\n"
            f"server log:\n{self.daemons['server'].tail()}"
        )

    def wait_link_state(self, name: str, state: str, timeout: float, poll: float = 0.05) -> float:
        """Poll the client's status until link ``name`` is ``state``; return seconds taken."""
        start = time.monotonic()
        while True:
            if self.link_states("client").get(name) == state:
                return time.monotonic() - start
            if time.monotonic() - start > timeout:
                raise LabError(f"link {name} not {state} after {timeout}s: {self.link_states()}")
            time.sleep(poll)

    def counters(self, side: str) -> dict[str, int]:
        return self.status(side).get("counters", {})

    # ---- actions ----

    def run_in(self, role: str, cmd: list[str], check: bool = True, timeout: float = 60):
        """Run ``cmd`` in namespace ``role`` (lan, cli, srv, org, out)."""
        return self.ns(role).run(cmd, check=check, timeout=timeout)

    def blackhole(self, i: int) -> None:
        """Drop everything on link ``i`` (client side, both directions)."""
        self.cli.blackhole(f"l{i}")

    def unblackhole(self, i: int) -> None:
        self.cli.unblackhole(f"l{i}")

    def link_down(self, i: int) -> None:
        """Cut link ``i``: ``linkem down`` on an emulated link (queue flushed), else blackhole."""
        if i in self.emulated:
            self.emulated[i].down()
        else:
            self.blackhole(i)

    def link_up(self, i: int) -> None:
        if i in self.emulated:
            self.emulated[i].up()
        else:
            self.unblackhole(i)

    def restart_traces(self) -> None:
        """Every emulated link's traces from their time zero, now (LinkemLink.restart_traces)."""
        for link in self.emulated.values():
            link.restart_traces()

    def link(self, name: str) -> LinkemLink:
        """The emulated link called ``name`` (LinkSpec.name)."""
        for i, spec in enumerate(self.links):
            if spec.name == name and i in self.emulated:
                return self.emulated[i]
        raise LabError(f"no emulated link named {name!r}")

    def renumber_client(self, i: int, subnet: int) -> str:
        """Move the client's end of link ``i`` to ``10.0.<subnet>.2/24`` (a DHCP-style change).

        The new address is added, the route to the server's end is pinned to it, then the old
        address is removed; the server side learns a route to the new subnet over the same
        veth (the access network's job), so only the client's source address changes.
        """
        new_ip = f"10.0.{subnet}.2"
        dev = f"l{i}"
        self.srv.route_replace(f"10.0.{subnet}.0/24", dev=dev, src=link_ip(i, "srv"))
        self.cli.addr_add(dev, f"{new_ip}/24")
        self.cli.route_replace(f"{link_ip(i, 'srv')}/32", dev=dev, src=new_ip)
        self.cli.addr_del(dev, f"{link_ip(i, 'cli')}/24")
        return new_ip

    def add_outsider(self) -> Namespace:
        """A namespace on its own link to the server (10.0.99.0/24): attackers, rogue clients."""
        if self.outsider is None:
            self.outsider = self.lab.ns("out")
            self.lab.veth(self.outsider, "o0", self.srv, "o0")
            self.outsider.addr_add("o0", f"{OUTSIDER_PREFIX}.2/24")
            self.srv.addr_add("o0", f"{OUTSIDER_PREFIX}.1/24")
            self.outsider.route_replace("default", via=f"{OUTSIDER_PREFIX}.1")
        return self.outsider

    def start_rogue_client(self) -> Path:
        """A client in the outsider namespace with a key the server does not know.

        Returns its control socket path. It knows the right server public key, so only the
        server's peer check can refuse it.
        """
        out = self.add_outsider()
        self.keygen("rogue")
        sock = self.dir / "rogue.sock"
        links = [("rogue", "o0", f"{OUTSIDER_PREFIX}.1:{PORT}")]
        cfg = self.client_config("rogue", self.server_pub, links, [], sock)
        (self.dir / "rogue.toml").write_text(tomli_w.dumps(cfg))
        self.daemons["rogue"] = self._daemon(out, "client", self.dir / "rogue.toml")
        return sock

    def add_client(self, name: str, tun_ip: str) -> None:
        """Another client of the server, known to it (call before :meth:`start`; run it
        with :meth:`start_client`): one link ``o0`` from the outsider namespace, the origin's
        prefix routed into its tunnel, tunnel address ``tun_ip``."""
        self.extra_clients.append((name, tun_ip))

    def start_client(self, name: str, timeout: float = 15) -> Path:
        """Start the client :meth:`add_client` named; wait for its session; its socket."""
        tun_ip = dict(self.extra_clients)[name]
        out = self.add_outsider()
        sock = self.dir / f"{name}.sock"
        links = [(name, "o0", f"{OUTSIDER_PREFIX}.1:{PORT}")]
        cfg = self.client_config(
            name, self.server_pub, links, [ORIGIN_PREFIX], sock, tun_address=tun_ip
        )
        (self.dir / f"{name}.toml").write_text(tomli_w.dumps(cfg))
        self.daemons[name] = self._daemon(out, "client", self.dir / f"{name}.toml")
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive(name)
            with contextlib.suppress(LabError, OSError, ValueError):
                doc = out.run(
                    [str(self.binary), "status", "--socket", str(sock), "--json"],
                    check=False,
                    timeout=10,
                ).stdout
                sessions = json.loads(doc or "{}").get("sessions") or [{}]
                if sessions[0].get("established"):
                    return sock
            if time.monotonic() > deadline:
                raise LabError(f"client {name} not established:\n{self.daemons[name].tail()}")
            time.sleep(0.1)

    def stop(self) -> dict[str, int | None]:
        """Stop the daemons (SIGTERM, the clean path); return their exit codes."""
        return {side: proc.stop(timeout=5) for side, proc in self.daemons.items()}

    def reconfigure(
        self,
        *,
        policy: str | None = None,
        client_extra: dict | None = None,
        stream: bool | None = None,
        **start_kw: object,
    ) -> None:
        """(Re)start both daemons with the client's default ``policy``, the settings in
        ``client_extra`` changed as given and stream mode on or off (``stream``, for TCP
        from the LAN host; ``None`` keeps it as it is). ``start_kw`` go to ``start``. Nothing
        happens if the daemons already run with them: a restart would reset the counters a
        caller snapshotted around a flow."""
        new_policy = self.policy if policy is None else policy
        new_extra = {**self.client_extra, **(client_extra or {})}
        had_stream = "stream" in self.client_sections
        new_stream = had_stream if stream is None else stream
        same = new_policy == self.policy and new_extra == self.client_extra
        if self.daemons and same and new_stream == had_stream:
            return
        if self.daemons:
            self.stop_for_restart()
        self.policy, self.client_extra = new_policy, new_extra
        self.set_stream(new_stream)
        self.start(**start_kw)

    def set_stream(self, on: bool, cc: str | None = None) -> None:
        """Stream mode in the configs written next (docs/STREAM.md): the client ends TCP
        from ``lan0`` and carries it over kernel MPTCP; the server listens for it. ``cc``:
        the MPTCP subflows' congestion control on both sides (default: the daemons')."""
        if on:
            # A restart (``reconfigure``) passes no ``cc``: keep the one set before, or the
            # client would fall back to its default while the server kept the old one.
            cc = cc or self.client_sections.get("stream", {}).get("congestion_control")
            self.client_sections["stream"] = {"lan": ["lan0"]}
            self.server_extra["stream"] = True
            if cc:
                self.client_sections["stream"]["congestion_control"] = cc
                self.server_extra["stream_congestion_control"] = cc
        else:
            self.client_sections.pop("stream", None)
            self.server_extra.pop("stream", None)
            self.server_extra.pop("stream_congestion_control", None)

    def stop_for_restart(self) -> None:
        """Stop the daemons so that ``start`` can run again on the same links: a stale socket
        file would let ``start`` go on before the new server listens, and keygen refuses to
        overwrite a key, so both are removed (the daemons come back with fresh keys)."""
        self.stop()
        for path in [*self.sockets.values(), self.dir / "server.key", self.dir / "client.key"]:
            path.unlink(missing_ok=True)

    def logs(self) -> str:
        return "\n".join(
            f"--- multihome {side} (pid {p.pid}) ---\n{p.tail(80)}"
            for side, p in self.daemons.items()
        )

    # ---- traffic (LAN host to origin unless told otherwise) ----

    def transfer(self, mib: int, cc: str, *, seed: int = 1, port: int = 9000) -> TcpTransfer:
        """Start a checksummed TCP transfer LAN host -> origin through the tunnel."""
        return TcpTransfer(self.lan, self.org, ORIGIN, mib=mib, cc=cc, seed=seed, port=port)

    def udp_stream(self, count: int, pps: float, *, port: int = 5004, **kw: object) -> UdpStream:
        """A paced UDP stream LAN host -> origin (``size``, ``log``: see UdpStream)."""
        return UdpStream(self.lan, self.org, ORIGIN, count=count, pps=pps, port=port, **kw)  # type: ignore[arg-type]

    def iperf3(self, cc: str, seconds: float = 10, *, reverse: bool = False, **kw: object) -> dict:
        """iperf3 between LAN host (client) and origin (server); ``reverse`` = download."""
        return iperf3(self.lan, self.org, ORIGIN, cc=cc, seconds=seconds, reverse=reverse, **kw)  # type: ignore[arg-type]
