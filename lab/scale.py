"""Many real clients against one real server: the namespaces, the server, the load generator.

Role: the topology of ``python -m lab.bench scale`` and ``lab/tests/test_scale_e2e.py``::

     +------------------------+  l0 10.1.0.0/24   +-----------------------------+
     |  lg: multihome loadgen |==================| srv: multihome server :7000 |
     |  N sessions x 2 links  |  l1 10.2.0.0/24   |  mh0 10.200.0.1/16          |
     |  (own key, own addrs)  |==================|  sink 10.200.0.1:9000 (*)   |
     +------------------------+                   +-----------------------------+

(*) the sink is a socket of the load generator opened inside ``srv`` (``--sink-netns``).

Session ``i`` has key ``i`` (``multihome loadgen keys``), inner address ``10.200.1.0 + i``
(its ``[[peer]]``'s ``allowed_ips``, inside the server's TUN subnet, so the server adds no
route per peer) and local addresses ``10.11.0.10 + i // per_address`` (link 0) and
``10.21.0.10 + i // per_address`` (link 1), /32s on the veths; a roaming session moves link 0
to ``10.12.0.10 + i // per_address``. Server addresses: ``10.1.0.1`` and ``10.2.0.1``; it
routes each pool via the load generator's ``10.<link+1>.0.2``.

Invariants: every process is started through the :class:`Lab` (stopped by PID), every address
lives in the lab's own namespaces; the client pools are routed via one next hop per link, so
thousands of client addresses take two neighbour entries (the kernel's neighbour table is
shared by all namespaces and keeps 1024 by default).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from lab.netns import Lab, LabError, Namespace, Proc

PORT = 7000
SINK = "10.200.0.1:9000"
INNER_BASE = "10.200.1.0"
LOCALS = ("10.11.0.10", "10.21.0.10")
ROAM_BASE = "10.12.0.10"
SERVERS = (f"10.1.0.1:{PORT}", f"10.2.0.1:{PORT}")
MTU = 1420


def _ip_plus(base: str, k: int) -> str:
    a, b, c, d = (int(x) for x in base.split("."))
    n = (a << 24 | b << 16 | c << 8 | d) + k
    return ".".join(str(n >> s & 255) for s in (24, 16, 8, 0))


def proc_memory_kb(pid: int) -> int:
    """Resident set size (VmRSS) of a process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise LabError(f"no VmRSS for pid {pid}")


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (all threads), from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class ScaleLab:
    """The two namespaces, the keys and the server of a run with ``sessions`` clients."""

    lab: Lab
    binary: Path
    sessions: int
    per_address: int = 1
    roam: bool = True
    detect_ms: int = 1000
    threads: int | None = None
    lg: Namespace = field(init=False)
    srv: Namespace = field(init=False)
    server: Proc | None = None
    server_pub: str = ""

    def __post_init__(self) -> None:
        self.lg = self.lab.ns("lg")
        self.srv = self.lab.ns("srv")
        self.dir = self.lab.dir
        n_addr = -(-self.sessions // self.per_address)
        for i in range(2):
            self.lab.veth(self.lg, f"l{i}", self.srv, f"l{i}")
            self.srv.addr_add(f"l{i}", f"10.{i + 1}.0.1/24")
            self.lg.addr_add(f"l{i}", f"10.{i + 1}.0.2/24")
            pools = [LOCALS[i]] + ([ROAM_BASE] if i == 0 and self.roam else [])
            lines = [f"addr add {_ip_plus(b, k)}/32 dev l{i}" for b in pools for k in range(n_addr)]
            batch = self.dir / f"addrs{i}.txt"
            batch.write_text("\n".join(lines) + "\n")
            self.lg.run(["ip", "-batch", str(batch)], timeout=300)
            for b in pools:
                pool = _ip_plus(b, -10) + "/16"
                self.srv.route_replace(pool, via=f"10.{i + 1}.0.2")

    def keys(self) -> None:
        """Server key, session keys, and server.toml with one [[peer]] per session."""
        res = self.srv.run(
            [str(self.binary), "keygen", "--private-key-file", str(self.dir / "server.key")]
        )
        self.server_pub = res.stdout.strip()
        self.srv.run(
            [str(self.binary), "loadgen", "keys", "--sessions", str(self.sessions),
             "--out", str(self.dir), "--inner-base", INNER_BASE],
            timeout=300,
        )  # fmt: skip
        threads = f"threads = {self.threads}\n" if self.threads else ""
        server = (
            "[server]\n"
            f'listen = "0.0.0.0:{PORT}"\n'
            'private_key_file = "server.key"\n'
            'tun_name = "mh0"\n'
            'tun_address = "10.200.0.1/16"\n'
            f"mtu = {MTU}\n"
            f"detect_ms = {self.detect_ms}\n"
            f"{threads}"
            f'control_socket = "{self.dir / "server.sock"}"\n\n'
        )
        (self.dir / "server.toml").write_text(server + (self.dir / "peers.toml").read_text())

    def start_server(self, timeout: float = 60) -> Proc:
        env = {"RUST_LOG": os.environ.get("MH_RUST_LOG", "warn")}
        cmd = [str(self.binary), "server", "--config", str(self.dir / "server.toml")]
        self.server = self.srv.spawn(cmd, "server", env=env)
        deadline = time.monotonic() + timeout
        while not (self.dir / "server.sock").exists():
            if not self.server.alive() or time.monotonic() > deadline:
                raise LabError(f"server did not start:\n{self.server.tail(40)}")
            time.sleep(0.05)
        return self.server

    def server_status(self) -> dict:
        res = self.srv.run(
            [str(self.binary), "status", "--socket", str(self.dir / "server.sock"), "--json"],
            timeout=30,
        )
        return json.loads(res.stdout)

    def loadgen(self, phases: list[str], *, sessions: int | None = None, **opts: object) -> Proc:
        """Start ``multihome loadgen run`` with ``phases``; ``opts`` become ``--key value``
        (``True``: a bare flag)."""
        cmd = [
            str(self.binary), "loadgen", "run",
            "--keys", str(self.dir / "keys"),
            "--sessions", str(sessions or self.sessions),
            "--server-key", self.server_pub,
            "--servers", ",".join(SERVERS),
            "--locals", ",".join(LOCALS),
            "--per-address", str(self.per_address),
            "--inner-base", INNER_BASE,
            "--sink", SINK,
            "--sink-netns", self.srv.name,
            "--mtu", str(MTU),
            "--detect-ms", str(self.detect_ms),
            "--phases", ",".join(phases),
        ]  # fmt: skip
        if self.roam:
            cmd += ["--roam-base", ROAM_BASE]
        for k, v in opts.items():
            flag = "--" + k.replace("_", "-")
            cmd += [flag] if v is True else [flag, str(v)]
        return self.lg.spawn(cmd, "loadgen")


def read_events(proc: Proc) -> list[dict]:
    """The JSON lines the load generator printed so far."""
    out = []
    for line in proc.output().splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def wait_event(proc: Proc, pred, timeout: float) -> dict:  # noqa: ANN001
    """Waits for the first printed event for which ``pred(event)`` holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for ev in read_events(proc):
            if pred(ev):
                return ev
        if not proc.alive():
            for ev in read_events(proc):
                if pred(ev):
                    return ev
            raise LabError(f"loadgen exited:\n{proc.tail(40)}")
        time.sleep(0.1)
    raise LabError(f"loadgen: event not seen in {timeout} s:\n{proc.tail(40)}")


def phase_results(proc: Proc) -> list[dict]:
    return [ev for ev in read_events(proc) if ev.get("event") == "phase"]
