"""Name-service topology: several servers sharing records, clients that resolve them.

Role: build the namespaces below, start a real etcd cluster (Debian's ``etcd-server``, one
member per namespace) or give each server an embedded store, start servers with a
``[naming]`` section and clients with ``servers = "resolve"``, and speak the resolver's UDP
protocol (docs/PROTOCOL.md §17.2) from Python for the tests: look a record up, publish
bytes, read the answer's status.

::

    client k  l0 10.63.<k>.1 ──┐                 ┌── 10.60.<i>.1 up0  server i (NAT out of up0,
    (multihome client,         │    +------+     │                    resolver on :7001)
     servers = "resolve")      ├────| core |─────┼── 10.61.<j>.1 eth0 etcd member j
                               │    +------+     │
                               │  routes all     └── 10.62.0.1 eth0   origin
                               └── 10.x.y.254 on core

Invariants: every process is started by the lab and stopped by its PID (etcd members
included); server ``i`` listens on ``10.60.<i>.1:7000`` (tunnel) and ``:7001`` (resolver);
all servers list every client as a peer, so any of them can serve any client; the origin is
reached by clients only through a server's tunnel and NAT.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

import tomli_w

from lab.netns import Lab, LabError, Namespace, Proc
from lab.topology import multihome_binary
from lab.traffic import TcpTransfer

ORIGIN = "10.62.0.1"
PORT, RESOLVER_PORT, ETCD_PORT = 7000, 7001, 2379
TUN_MTU = 1420
MAGIC = b"MHNR"
KIND_IDENTITY, KIND_SERVER = 1, 2
# Refusal codes in a response's status byte (16 + signed::Refusal's code).
REFUSED_OVERSIZED, REFUSED_UNSIGNED = 16 + 1, 16 + 2
REFUSED_BAD_SIGNATURE, REFUSED_STALE = 16 + 4, 16 + 7


def server_ip(i: int) -> str:
    return f"10.60.{i}.1"


def client_ip(k: int) -> str:
    return f"10.63.{k}.1"


def tun_ip(k: int) -> str:
    return f"10.200.{k // 250}.{k % 250 + 2}"


@dataclass
class Member:
    ns: Namespace
    proc: Proc | None = None


@dataclass
class NamingLab:
    """``servers`` servers and ``clients`` clients around a router; etcd or embedded."""

    lab: Lab
    servers: int = 2
    clients: int = 1
    store: str = "etcd"
    lease_s: int = 5
    detect_ms: int = 1000
    binary: Path = field(default_factory=multihome_binary)
    core: Namespace = field(init=False)
    srv: list[Namespace] = field(init=False, default_factory=list)
    cli: list[Namespace] = field(init=False, default_factory=list)
    etcd: list[Member] = field(init=False, default_factory=list)
    daemons: dict[str, Proc] = field(init=False, default_factory=dict)
    keys: dict[str, str] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.dir = self.lab.dir
        self.core = self.lab.ns("core")
        self.core.sysctl("net.ipv4.ip_forward", 1)
        for i in range(self.servers):
            self.srv.append(self._leaf(f"s{i}", f"10.60.{i}", "up0"))
        if self.store == "etcd":
            for j in range(3):
                self.etcd.append(Member(self._leaf(f"e{j}", f"10.61.{j}", "eth0")))
        org = self._leaf("org", "10.62.0", "eth0")
        self.org = org
        for k in range(self.clients):
            self.cli.append(self._leaf(f"c{k}", f"10.63.{k}", "l0"))

    def _leaf(self, role: str, net: str, dev: str) -> Namespace:
        """A namespace with one veth to the router: ``<net>.1`` inside, ``<net>.254`` on core."""
        ns = self.lab.ns(role)
        self.lab.veth(ns, dev, self.core, role)
        ns.addr_add(dev, f"{net}.1/24")
        self.core.addr_add(role, f"{net}.254/24")
        ns.route_replace("default", via=f"{net}.254")
        return ns

    # ---- etcd ----

    def etcd_endpoints(self) -> list[str]:
        return [f"http://10.61.{j}.1:{ETCD_PORT}" for j in range(len(self.etcd))]

    def start_etcd(self, timeout: float = 20) -> None:
        """Three members, one per namespace, then wait until the cluster answers."""
        cluster = ",".join(f"m{j}=http://10.61.{j}.1:2380" for j in range(len(self.etcd)))
        for j, m in enumerate(self.etcd):
            ip = f"10.61.{j}.1"
            m.proc = m.ns.spawn(
                [
                    "etcd",
                    f"--name=m{j}",
                    f"--data-dir={self.dir / f'etcd{j}'}",
                    f"--listen-client-urls=http://{ip}:{ETCD_PORT}",
                    f"--advertise-client-urls=http://{ip}:{ETCD_PORT}",
                    f"--listen-peer-urls=http://{ip}:2380",
                    f"--initial-advertise-peer-urls=http://{ip}:2380",
                    f"--initial-cluster={cluster}",
                    "--initial-cluster-state=new",
                    "--initial-cluster-token=mhlab",
                    # A lab network: 50 ms heartbeats, 500 ms elections (defaults 100/1000).
                    "--heartbeat-interval=50",
                    "--election-timeout=500",
                    "--logger=zap",
                    "--log-level=error",
                ],
                f"etcd{j}",
            )
        deadline = time.monotonic() + timeout
        eps = ",".join(self.etcd_endpoints())
        while True:
            res = self.srv[0].run(
                ["etcdctl", f"--endpoints={eps}", "endpoint", "health"], check=False
            )
            if res.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise LabError(f"etcd cluster not healthy after {timeout}s:\n{res.stderr}")
            time.sleep(0.2)

    def kill_etcd(self, j: int) -> None:
        """SIGKILL member ``j`` by its PID."""
        proc = self.etcd[j].proc
        assert proc is not None
        proc.stop(sig=signal.SIGKILL, timeout=5)

    # ---- daemons ----

    def keygen(self, name: str) -> str:
        path = self.dir / f"{name}.key"
        res = self.core.run([str(self.binary), "keygen", "--private-key-file", str(path)])
        self.keys[name] = res.stdout.strip()
        return self.keys[name]

    def write_configs(self) -> None:
        for k in range(self.clients):
            self.keygen(f"client{k}")
        for i in range(self.servers):
            self.keygen(f"server{i}")
        peers = [
            {
                "name": f"c{k}",
                "public_key": self.keys[f"client{k}"],
                "allowed_ips": [f"{tun_ip(k)}/32"],
            }
            for k in range(self.clients)
        ]
        for i in range(self.servers):
            naming: dict = {
                "listen": f"{server_ip(i)}:{RESOLVER_PORT}",
                "lease_s": self.lease_s,
            }
            if self.store == "etcd":
                naming |= {"store": "etcd", "etcd": self.etcd_endpoints()}
            else:
                naming |= {"store": "embedded", "path": f"naming{i}.redb"}
            conf = {
                "server": {
                    "listen": f"{server_ip(i)}:{PORT}",
                    "private_key_file": f"server{i}.key",
                    "tun_name": "mh0",
                    "tun_address": "10.200.255.1/16",
                    "mtu": TUN_MTU,
                    "uplink": "up0",
                    "detect_ms": self.detect_ms,
                    "control_socket": str(self.dir / f"server{i}.sock"),
                },
                "peer": peers,
                "naming": naming,
            }
            (self.dir / f"server{i}.toml").write_text(tomli_w.dumps(conf))
        resolvers = [f"{server_ip(i)}:{RESOLVER_PORT}" for i in range(self.servers)]
        trusted = [self.keys[f"server{i}"] for i in range(self.servers)]
        for k in range(self.clients):
            conf = {
                "client": {
                    "private_key_file": f"client{k}.key",
                    "servers": "resolve",
                    "tun_name": "mh0",
                    "tun_address": f"{tun_ip(k)}/16",
                    "mtu": TUN_MTU,
                    "routes": ["10.62.0.0/24"],
                    "detect_ms": self.detect_ms,
                    "control_socket": str(self.dir / f"client{k}.sock"),
                },
                "link": [{"name": "wan", "interface": "l0"}],
                "naming": {"resolvers": resolvers, "trusted_servers": trusted},
            }
            (self.dir / f"client{k}.toml").write_text(tomli_w.dumps(conf))

    def start_server(self, i: int) -> Proc:
        sock = self.dir / f"server{i}.sock"
        sock.unlink(missing_ok=True)
        env = {"RUST_LOG": os.environ.get("MH_RUST_LOG", "info")}
        cmd = [str(self.binary), "server", "--config", str(self.dir / f"server{i}.toml")]
        proc = self.srv[i].spawn(cmd, f"server{i}", env=env)
        self.daemons[f"server{i}"] = proc
        wait_for(lambda: sock.exists() or not proc.alive(), 10, f"server{i} control socket")
        if not proc.alive():
            raise LabError(f"server{i} exited:\n{proc.tail()}")
        return proc

    def start_client(self, k: int) -> Proc:
        env = {"RUST_LOG": os.environ.get("MH_RUST_LOG", "info")}
        cmd = [str(self.binary), "client", "--config", str(self.dir / f"client{k}.toml")]
        proc = self.cli[k].spawn(cmd, f"client{k}", env=env)
        self.daemons[f"client{k}"] = proc
        return proc

    def start(self) -> None:
        """etcd (if used), configs, every server, every client."""
        if self.store == "etcd":
            self.start_etcd()
        self.write_configs()
        for i in range(self.servers):
            self.start_server(i)
        for k in range(self.clients):
            self.start_client(k)

    def kill_server(self, i: int) -> None:
        """SIGKILL server ``i`` by its PID (a crash: nothing is cleaned up, no record removed)."""
        self.daemons[f"server{i}"].stop(sig=signal.SIGKILL, timeout=5)

    # ---- what a client and a server show ----

    def _status(self, ns: Namespace, sock: Path, as_json: bool) -> str | None:
        cmd = [str(self.binary), "status", "--socket", str(sock)] + (["--json"] if as_json else [])
        res = ns.run(cmd, check=False, timeout=5)
        return res.stdout if res.returncode == 0 else None

    def status(self, k: int) -> dict | None:
        """Client ``k``'s ``multihome status --json``."""
        out = self._status(self.cli[k], self.dir / f"client{k}.sock", True)
        return json.loads(out) if out is not None else None

    def status_text(self, k: int) -> str:
        """Client ``k``'s ``multihome status`` (the table view)."""
        return self._status(self.cli[k], self.dir / f"client{k}.sock", False) or ""

    def server_status(self, i: int, *, text: bool = False) -> dict | str:
        """Server ``i``'s ``multihome status`` (JSON, or the table view with ``text``)."""
        out = self._status(self.srv[i], self.dir / f"server{i}.sock", not text)
        if out is None:
            raise LabError(f"server{i}: no status")
        return out if text else json.loads(out)

    def served_by(self, k: int) -> int | None:
        """The server whose session client ``k`` has established, if any."""
        st = self.status(k)
        if st is None or not st.get("naming"):
            return None
        sessions = st.get("sessions") or [{}]
        if not sessions[0].get("established"):
            return None
        up = any(lk.get("state") == "up" for lk in sessions[0].get("links", []))
        addr = st["naming"].get("server_address") or ""
        for i in range(self.servers):
            if addr == f"{server_ip(i)}:{PORT}" and up:
                return i
        return None

    def transfer(self, k: int, mib: int, port: int) -> TcpTransfer:
        """A checksummed TCP transfer client ``k`` -> origin, through the tunnel."""
        return TcpTransfer(self.cli[k], self.org, ORIGIN, mib=mib, cc="cubic", port=port)

    def resolve(self, k_ns: int, name: str, resolver: int, *, server: bool = False) -> dict:
        """``multihome resolve`` of ``name`` at server ``resolver``'s resolver, as JSON."""
        cmd = [
            str(self.binary),
            "resolve",
            name,
            "--resolver",
            f"{server_ip(resolver)}:{RESOLVER_PORT}",
            "--json",
        ] + (["--server"] if server else [])
        return json.loads(self.cli[k_ns].run(cmd, timeout=10).stdout)


def wait_for(pred, timeout: float, what: str, poll: float = 0.05) -> float:  # noqa: ANN001
    """Poll ``pred`` until true; return the seconds waited; raise on timeout."""
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            raise LabError(f"{what}: not within {timeout}s")
        time.sleep(poll)
    return time.monotonic() - t0


# ---- the resolver's UDP protocol, for tests that forge and replay ----


def request(op: int, rid: int, body: bytes) -> bytes:
    msg = MAGIC + bytes([1, op]) + struct.pack(">I", rid) + body
    return msg if op == 3 else msg.ljust(256, b"\0")


def parse_response(b: bytes) -> tuple[int, list[bytes]]:
    """``(status, records)`` of a response."""
    if b[:4] != MAGIC or not b[5] & 0x80:
        raise LabError(f"not a resolver response: {b[:16].hex()}")
    status, count, rest = b[10], b[27], b[28:]
    records = []
    for _ in range(count):
        (n,) = struct.unpack(">H", rest[:2])
        records.append(rest[2 : 2 + n])
        rest = rest[2 + n :]
    return status, records


def ask(ns: Namespace, resolver: str, op: int, body: bytes) -> tuple[int, list[bytes]]:
    """One request from inside ``ns`` (a tiny Python client run there); its answer."""
    code = (
        "import socket,sys;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.settimeout(2);"
        f"s.sendto(bytes.fromhex('{request(op, 7, body).hex()}'),('{resolver}',{RESOLVER_PORT}));"
        "print(s.recv(2048).hex())"
    )
    out = ns.run(["python3", "-c", code], timeout=10).stdout.strip()
    return parse_response(bytes.fromhex(out))


def name_of(record: bytes) -> bytes:
    """A record's name: BLAKE2s-256 of the key it carries (bytes 2..34), first 16 bytes."""
    return hashlib.blake2s(record[2:34]).digest()[:16]
