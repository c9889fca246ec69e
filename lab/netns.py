"""Network-namespace helpers for the multihome lab.

Role: create and always destroy the pieces every lab topology is built from — namespaces with
a random suffix, veth pairs, addresses, routes, tbf rate limits, nftables random loss and
blackholes, offload switches, foreground commands and background processes in a namespace.
Modelled on the kernel MPTCP selftests (``mptcp_lib.sh``, ``simult_flows.sh``) and
wireguard-go's ``netns.sh``.

Invariants:

* Every namespace is named ``mhlab-<owner pid>-<random>-<role>``, so parallel runs never collide
  and a stale namespace can be traced to a dead owner (``python -m lab.netns --cleanup-stale``).
* Everything a :class:`Lab` creates is torn down by :meth:`Lab.cleanup`, which is idempotent and
  runs on ``with`` exit, on interpreter exit (``atexit``) and on SIGTERM/SIGHUP.
* Processes are stopped only by the PID the lab recorded when it started them.
* Loss and blackholes are netdev-family nftables rules (ingress/egress hooks on one device), so
  they act the same on forwarded and locally generated packets; they live inside the namespace
  and vanish with it.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("lab")

PREFIX = "mhlab"
NFT_TABLE = "mhlab"

# Repository root: tools run inside namespaces as ``python -m lab.tools.X`` from here.
REPO_ROOT = Path(__file__).resolve().parent.parent


class LabError(RuntimeError):
    """A lab command failed; the message carries the command and its output."""


def run(
    cmd: Sequence[str],
    *,
    check: bool = True,
    timeout: float = 60,
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command in the root namespace and capture its output as text."""
    try:
        res = subprocess.run(
            list(cmd),
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input_text,
            check=False,
            cwd=REPO_ROOT,
            env=tool_env(),
        )
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"timeout after {timeout}s: {' '.join(cmd)}") from exc
    if check and res.returncode != 0:
        raise LabError(
            f"command failed (rc={res.returncode}): {' '.join(cmd)}\n"
            f"stdout: {res.stdout.strip()}\nstderr: {res.stderr.strip()}"
        )
    return res


def tool_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment in which ``python -m lab.tools.X`` imports this checkout's ``lab``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT)
    env.update(extra or {})
    return env


def tool_cmd(module: str, *args: str) -> list[str]:
    """Command line that runs ``lab.tools.<module>`` with this interpreter."""
    return [sys.executable, "-m", f"lab.tools.{module}", *args]


@dataclass
class Proc:
    """A background process started by a :class:`Lab`; stopped by its recorded PID only."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    _log_file: object = field(repr=False, default=None)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait(self, timeout: float) -> int:
        """Wait for a normal exit; raise :class:`LabError` (with the log tail) on timeout."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise LabError(
                f"{self.name} (pid {self.pid}) still running after {timeout}s\n{self.tail()}"
            ) from exc

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 5.0) -> int | None:
        """Signal the process (SIGTERM first, so daemons can undo NAT), then SIGKILL."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                log.warning("%s (pid %d) ignored signal %d, killing", self.name, self.pid, sig)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                self.popen.wait(timeout=timeout)
        if self._log_file is not None:
            self._log_file.close()  # type: ignore[attr-defined]
            self._log_file = None
        return self.popen.returncode


class Namespace:
    """One network namespace; every helper runs ``ip``/``tc``/``nft`` inside it."""

    def __init__(self, lab: Lab, role: str) -> None:
        self.lab = lab
        self.role = role
        self.name = f"{PREFIX}-{os.getpid()}-{lab.suffix}-{role}"
        self._nft_chains: set[str] = set()
        self._blackhole_handles: dict[str, list[int]] = {}
        self._loss_handles: dict[str, list[int]] = {}

    def __repr__(self) -> str:
        return f"Namespace({self.name})"

    def cmd(self, cmd: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.name, *cmd]

    def run(
        self,
        cmd: Sequence[str],
        *,
        check: bool = True,
        timeout: float = 60,
        input_text: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command in this namespace (``ip netns exec``) and capture its output."""
        return run(self.cmd(cmd), check=check, timeout=timeout, input_text=input_text)

    def spawn(self, cmd: Sequence[str], name: str, env: dict[str, str] | None = None) -> Proc:
        """Start a background process in this namespace; output goes to a log file."""
        return self.lab.spawn(self.cmd(cmd), f"{self.role}-{name}", env=env)

    def sysctl(self, key: str, value: str | int) -> None:
        self.run(["sysctl", "-q", "-w", f"{key}={value}"])

    def ip(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run(["ip", *args], check=check)

    def addr_add(self, dev: str, cidr: str) -> None:
        # IPv6 without duplicate address detection: usable at once, not tentative for a second.
        nodad = ["nodad"] if ":" in cidr else []
        self.ip("addr", "add", cidr, "dev", dev, *nodad)

    def addr_del(self, dev: str, cidr: str) -> None:
        self.ip("addr", "del", cidr, "dev", dev)

    def route_replace(
        self, prefix: str, *, via: str | None = None, dev: str | None = None, src: str | None = None
    ) -> None:
        args = ["route", "replace", prefix]
        if via:
            args += ["via", via]
        if dev:
            args += ["dev", dev]
        if src:
            args += ["src", src]
        self.ip(*args)

    def route_get(self, addr: str) -> str:
        return self.ip("route", "get", addr).stdout.strip()

    def tbf(self, dev: str, rate_mbit: float, *, latency_ms: float = 50, burst: int = 0) -> None:
        """Rate-limit ``dev``'s egress with a token bucket.

        The burst must hold at least one timer tick of tokens and a full frame; 5 ms of tokens
        (floor 16 KiB) keeps tbf accurate to a few percent at 1-1000 Mbit/s.
        """
        if burst <= 0:
            burst = max(16 * 1024, int(rate_mbit * 1e6 / 8 * 0.005))
        self.run(
            [
                "tc",
                "qdisc",
                "replace",
                "dev",
                dev,
                "root",
                "tbf",
                "rate",
                f"{rate_mbit}mbit",
                "burst",
                str(burst),
                "latency",
                f"{latency_ms}ms",
            ]
        )

    def offloads_off(self, dev: str) -> None:
        """Turn off TSO/GSO/GRO so a drop removes one packet, not a 64 KB super-packet."""
        self.run(
            [
                "ethtool",
                "-K",
                dev,
                "tso",
                "off",
                "gso",
                "off",
                "gro",
                "off",
                "tx-udp-segmentation",
                "off",
            ]
        )

    # ---- nftables: loss and blackholes (netdev family, per device and direction) ----

    def _chain(self, dev: str, direction: str) -> str:
        if direction not in ("ingress", "egress"):
            raise LabError(f"direction must be ingress or egress, not {direction!r}")
        chain = f"{direction[:2]}_{dev}"
        if chain not in self._nft_chains:
            self.run(["nft", "add", "table", "netdev", NFT_TABLE])
            spec = f'{{ type filter hook {direction} device "{dev}" priority 0; policy accept; }}'
            self.run(["nft", "add", "chain", "netdev", NFT_TABLE, chain, spec])
            self._nft_chains.add(chain)
        return chain

    def _add_rule(self, chain: str, rule: list[str], front: bool = False) -> int:
        verb = "insert" if front else "add"
        res = self.run(
            ["nft", "--echo", "--handle", verb, "rule", "netdev", NFT_TABLE, chain, *rule]
        )
        # Output ends with "# handle N"; the handle is what lets us delete exactly this rule.
        return int(res.stdout.strip().rsplit("handle", 1)[1].split()[0])

    def loss(self, dev: str, percent: float, directions: Sequence[str] = ("egress",)) -> None:
        """Drop ``percent`` % of IP packets at random (nft ``numgen random``) on ``dev``.

        Only IPv4/IPv6 is dropped, so ARP/ND keep working and the loss hits data, not the
        link's existence. ``numgen random mod 10000 < P*100`` gives 0.01 % resolution.
        """
        threshold = round(percent * 100)
        for direction in directions:
            chain = self._chain(dev, direction)
            handle = self._add_rule(
                chain,
                [
                    "meta",
                    "protocol",
                    "{",
                    "ip,",
                    "ip6",
                    "}",
                    "numgen",
                    "random",
                    "mod",
                    "10000",
                    "<",
                    str(threshold),
                    "counter",
                    "drop",
                ],
            )
            self._loss_handles.setdefault(dev, []).append(handle)

    def clear_loss(self, dev: str) -> None:
        self._delete_rules(dev, self._loss_handles)

    def blackhole(self, dev: str) -> None:
        """Drop every frame in and out of ``dev`` (ARP included): the link is dead."""
        if self._blackhole_handles.get(dev):
            return
        for direction in ("ingress", "egress"):
            chain = self._chain(dev, direction)
            handle = self._add_rule(chain, ["counter", "drop"], front=True)
            self._blackhole_handles.setdefault(dev, []).append(handle)

    def unblackhole(self, dev: str) -> None:
        self._delete_rules(dev, self._blackhole_handles)

    def _delete_rules(self, dev: str, book: dict[str, list[int]]) -> None:
        handles = book.pop(dev, [])
        for direction in ("ingress", "egress"):
            chain = f"{direction[:2]}_{dev}"
            if chain not in self._nft_chains:
                continue
            listing = self.run(["nft", "-a", "list", "chain", "netdev", NFT_TABLE, chain]).stdout
            for handle in handles:
                if f"# handle {handle}\n" in listing + "\n":
                    self.run(
                        ["nft", "delete", "rule", "netdev", NFT_TABLE, chain, "handle", str(handle)]
                    )

    def nft_counters(self) -> str:
        return self.run(["nft", "list", "table", "netdev", NFT_TABLE], check=False).stdout


@dataclass
class Veth:
    """A veth pair between two namespaces."""

    a: Namespace
    a_dev: str
    b: Namespace
    b_dev: str

    def ends(self) -> list[tuple[Namespace, str]]:
        return [(self.a, self.a_dev), (self.b, self.b_dev)]

    def tbf(self, rate_mbit: float, latency_ms: float = 50) -> None:
        """Limit both directions to ``rate_mbit`` (tbf on each end's egress)."""
        for ns, dev in self.ends():
            ns.tbf(dev, rate_mbit, latency_ms=latency_ms)

    def offloads_off(self) -> None:
        for ns, dev in self.ends():
            ns.offloads_off(dev)

    def loss(self, percent: float) -> None:
        """Random loss on both directions; offloads off so drops are per packet."""
        self.offloads_off()
        for ns, dev in self.ends():
            ns.loss(dev, percent, ("egress",))

    def clear_loss(self) -> None:
        for ns, dev in self.ends():
            ns.clear_loss(dev)


_ACTIVE: list[Lab] = []


def _cleanup_all() -> None:
    for lab in list(_ACTIVE):
        lab.cleanup()


def _on_signal(signum: int, _frame: object) -> None:
    _cleanup_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


atexit.register(_cleanup_all)


class Lab:
    """Owner of namespaces, veths and processes; a context manager that always cleans up."""

    def __init__(self, keep_dir: bool = False) -> None:
        if os.geteuid() != 0:
            raise LabError("the lab needs root (network namespaces, tc, nftables)")
        self.suffix = secrets.token_hex(3)
        self.dir = Path(tempfile.mkdtemp(prefix=f"{PREFIX}-{self.suffix}-"))
        self.keep_dir = keep_dir
        self.namespaces: dict[str, Namespace] = {}
        self.procs: list[Proc] = []
        self._closed = False
        _ACTIVE.append(self)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            # Only the main thread may install handlers; pytest-xdist workers are main threads.
            with contextlib.suppress(ValueError):
                signal.signal(sig, _on_signal)

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.cleanup()

    def ns(self, role: str) -> Namespace:
        """Create namespace ``role`` (loopback up, forwarding off unless set later)."""
        if role in self.namespaces:
            raise LabError(f"namespace role {role!r} exists")
        ns = Namespace(self, role)
        run(["ip", "netns", "add", ns.name])
        self.namespaces[role] = ns
        ns.ip("link", "set", "lo", "up")
        # Strict reverse-path filtering would drop a roaming client's packets; be explicit.
        ns.sysctl("net.ipv4.conf.all.rp_filter", 0)
        ns.sysctl("net.ipv4.conf.default.rp_filter", 0)
        return ns

    def veth(self, a: Namespace, a_dev: str, b: Namespace, b_dev: str) -> Veth:
        """Create a veth pair directly inside both namespaces and bring both ends up."""
        run(
            [
                "ip",
                "link",
                "add",
                a_dev,
                "netns",
                a.name,
                "type",
                "veth",
                "peer",
                "name",
                b_dev,
                "netns",
                b.name,
            ]
        )
        a.ip("link", "set", a_dev, "up")
        b.ip("link", "set", b_dev, "up")
        return Veth(a, a_dev, b, b_dev)

    def spawn(self, cmd: Sequence[str], name: str, env: dict[str, str] | None = None) -> Proc:
        log_path = self.dir / f"{name}.log"
        log_file = open(log_path, "ab")  # noqa: SIM115 - closed by Proc.stop()
        full_env = tool_env(env)
        popen = subprocess.Popen(
            list(cmd),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=REPO_ROOT,
            env=full_env,
            start_new_session=True,  # a Ctrl-C in the terminal reaches us, not the daemons
        )
        proc = Proc(name, popen, log_path, log_file)
        self.procs.append(proc)
        log.debug("started %s pid %d: %s", name, popen.pid, " ".join(cmd))
        return proc

    def cleanup(self) -> None:
        """Stop our processes (by PID), delete our namespaces; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for proc in reversed(self.procs):
            try:
                proc.stop(timeout=3)
            except Exception as exc:  # keep tearing down the rest
                log.warning("stopping %s: %s", proc.name, exc)
        for ns in reversed(list(self.namespaces.values())):
            run(["ip", "netns", "del", ns.name], check=False)
        if not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        if self in _ACTIVE:
            _ACTIVE.remove(self)


def lab_namespaces() -> list[str]:
    out = run(["ip", "netns", "list"]).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(f"{PREFIX}-")]


def cleanup_stale() -> list[str]:
    """Delete lab namespaces whose owner process is gone; return their names.

    Processes still inside such a namespace were started by that dead lab run; they are
    stopped by the PIDs ``ip netns pids`` reports for that namespace only.
    """
    removed = []
    for name in lab_namespaces():
        owner = int(name.split("-")[1])
        if Path(f"/proc/{owner}").exists():
            continue
        for pid in run(["ip", "netns", "pids", name], check=False).stdout.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.1)
        run(["ip", "netns", "del", name], check=False)
        removed.append(name)
    return removed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cleanup-stale", action="store_true", help="remove orphaned namespaces")
    args = parser.parse_args()
    if args.cleanup_stale:
        for name in cleanup_stale():
            print(f"removed {name}")
    else:
        for name in lab_namespaces():
            print(name)


if __name__ == "__main__":
    main()
