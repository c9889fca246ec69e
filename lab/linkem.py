"""Emulated links: two endpoint namespaces joined through a namespace that runs ``linkem``.

Role: build one emulated link ``A ── la [ns lk<i>: linkem] lb ── B``, write its TOML config,
start ``linkem`` with a control socket, and drive it live (``set``, ``down``, ``up``,
``stats``) through ``linkem ctl``; generate synthetic traces with ``linkem trace-gen``.

::

    ns A ── dev ═veth═ la ─┐                 ┌─ lb ═veth═ dev ── ns B
                           └── ns lk<i>: linkem ─┘
            frames entering la = direction a2b (upload), entering lb = b2a (download)

Invariants: the link namespace carries no IP address and IPv6 is off in it, so only the
endpoints' frames cross; linkem is started and stopped by its PID through the owning
:class:`~lab.netns.Lab` (SIGTERM, so it writes ``--stats-json``); a link is usable only after
linkem printed ``ready``. Configs given as dicts are written verbatim as TOML, so unknown keys
are linkem's errors, not silently ignored here.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import tomli_w

from lab.netns import REPO_ROOT, Lab, LabError, Namespace, Proc, run

DIRECTIONS = ("both", "a2b", "b2a")


def linkem_binary() -> Path:
    """Where linkem is: $LINKEM_BIN, else <target dir>/release/linkem (as setup.sh builds it)."""
    if os.environ.get("LINKEM_BIN"):
        return Path(os.environ["LINKEM_BIN"])
    target = os.environ.get("CARGO_TARGET_DIR") or str(REPO_ROOT / "target")
    return Path(target) / "release" / "linkem"


def trace_gen(path: Path, kind: str, mean_mbit: float, seconds: int = 60, seed: int = 1) -> Path:
    """Write a synthetic Mahimahi trace (``linkem trace-gen``) to ``path``; return it."""
    res = run(
        [
            str(linkem_binary()),
            "trace-gen",
            "--kind",
            kind,
            "--mean-mbit",
            str(mean_mbit),
            "--seconds",
            str(seconds),
            "--seed",
            str(seed),
        ]
    )
    path.write_text(res.stdout)
    return path


class LinkemLink:
    """One emulated link between ``a``/``a_dev`` and ``b``/``b_dev`` (both veths created here).

    ``config`` is linkem's TOML config as a dict (``{"both": {...}, "a2b": {...}}``); an
    empty dict gives an unimpaired link.
    """

    def __init__(  # noqa: PLR0917 - the two ends, as (namespace, device) pairs
        self,
        lab: Lab,
        index: int,
        a: Namespace,
        a_dev: str,
        b: Namespace,
        b_dev: str,
        config: dict,
        *,
        seed: int = 1,
        offloads: bool = True,
    ) -> None:
        self.lab = lab
        self.index = index
        self.a, self.a_dev, self.b, self.b_dev = a, a_dev, b, b_dev
        self.config = config
        self.ns = lab.ns(f"lk{index}")
        self.ns.sysctl("net.ipv6.conf.all.disable_ipv6", 1)
        self.ns.sysctl("net.ipv6.conf.default.disable_ipv6", 1)
        lab.veth(a, a_dev, self.ns, "la")
        lab.veth(self.ns, "lb", b, b_dev)
        if not offloads:
            # Per-packet loss and queue limits need offloads off on the endpoints (the
            # senders); linkem then sees 1514-byte frames (crates/linkem/README.md).
            a.offloads_off(a_dev)
            b.offloads_off(b_dev)
        self.config_path = lab.dir / f"linkem-{index}.toml"
        self.config_path.write_text(tomli_w.dumps(config))
        self.control = lab.dir / f"linkem-{index}.sock"
        self.stats_path = lab.dir / f"linkem-{index}-stats.json"
        self.proc = self._start(seed)

    def _start(self, seed: int) -> Proc:
        binary = linkem_binary()
        if not binary.exists():
            raise LabError(f"linkem binary missing: {binary} (cargo build --release -p linkem)")
        proc = self.ns.spawn(
            [
                str(binary),
                "--iface-a",
                "la",
                "--iface-b",
                "lb",
                "--config",
                str(self.config_path),
                "--control",
                str(self.control),
                "--seed",
                str(seed),
                "--stats-json",
                str(self.stats_path),
            ],
            "linkem",
        )
        deadline = time.monotonic() + 10
        while "ready" not in proc.output():
            if not proc.alive() or time.monotonic() > deadline:
                raise LabError(f"linkem for link {self.index} did not start:\n{proc.tail()}")
            time.sleep(0.02)
        return proc

    def ctl(self, *words: str) -> str:
        """Send one control command; return the reply line (``ok`` or JSON)."""
        res = run([str(linkem_binary()), "ctl", "--control", str(self.control), *words])
        reply = res.stdout.strip()
        if reply.startswith("error"):
            raise LabError(f"linkem ctl {' '.join(words)}: {reply}")
        return reply

    def set(self, direction: str, **settings: object) -> None:
        """Change settings live, e.g. ``set("both", rate="10mbit", delay="25ms")``."""
        if direction not in DIRECTIONS:
            raise LabError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
        self.ctl("set", direction, *(f"{k}={v}" for k, v in settings.items()))

    def restart_traces(self) -> None:
        """Start every trace-driven direction from its trace's time zero, now (a trace's time
        zero is when it is installed), so two runs meet the same stretch of the trace."""
        for direction in DIRECTIONS:
            rate = self.config.get(direction, {}).get("rate")
            if isinstance(rate, str) and rate.startswith("trace:"):
                self.set(direction, rate=rate)

    def down(self) -> None:
        """Link down both ways: queue flushed, arrivals dropped (a cut cable, carrier kept)."""
        self.ctl("down")

    def up(self) -> None:
        self.ctl("up")

    def stats(self) -> dict:
        return json.loads(self.ctl("stats"))

    def show(self) -> dict:
        return json.loads(self.ctl("show"))

    def stop(self) -> dict | None:
        """Stop linkem (SIGTERM) and return its final counters, if it wrote them."""
        self.proc.stop()
        if self.stats_path.exists():
            return json.loads(self.stats_path.read_text())
        return None
