"""Shared plumbing of the benchmark suites: progress lines, machine facts, result files, plots.

Role: every suite writes ``bench/results/<suite>.json`` (revision, dirty flag, machine,
load before and after; it replaces the suite's previous result, whose figures stay in
``bench/history.jsonl``) and the same name with ``.png`` and ``.svg`` for its figure, and prints
progress with the elapsed time so a long run is never silent.

Invariant: numbers in a result file come with the machine facts, the load average they were
measured under (2 shared cores: a benchmark is a snapshot, not a test) and the build time and
hash of the binaries that produced them (the tree may be dirty while others work in it).
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from lab.linkem import linkem_binary  # noqa: E402
from lab.results import write_result  # noqa: E402
from lab.topology import multihome_binary  # noqa: E402

_T0 = time.monotonic()


def progress(msg: str) -> None:
    """One progress line with the time since the suite started."""
    print(f"[{time.monotonic() - _T0:6.1f}s] {msg}", flush=True)


def build_binaries() -> None:
    """Build the workspace's binaries (release) before a suite runs, so the figures it files
    under the tree's revision come from that revision's code: a run once measured binaries
    older than the commit it named, because ``cargo test`` had rebuilt only the test
    targets. Quick when they are fresh. Skipped when ``MULTIHOME_BENCH_NO_BUILD`` is set or
    the binaries are given by path (``MULTIHOME_BIN``, ``LINKEM_BIN``).
    """
    given = ("MULTIHOME_BENCH_NO_BUILD", "LINKEM_BIN", "MULTIHOME_BIN")
    if any(os.environ.get(v) for v in given):
        return
    progress("building the release binaries (cargo build --release --workspace --bins)")
    subprocess.run(
        ["cargo", "build", "--release", "--workspace", "--bins", "--quiet"],
        cwd=Path(__file__).resolve().parents[2],
        check=True,
    )


def machine() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    tools = {}
    for tool, arg in (("iperf3", "--version"), ("openvpn", "--version")):
        try:
            out = subprocess.run([tool, arg], capture_output=True, text=True, check=False)
            tools[tool] = (out.stdout or out.stderr).splitlines()[0].strip()
        except (OSError, IndexError):
            tools[tool] = None
    binaries = {}
    for name, path in (("multihome", multihome_binary()), ("linkem", linkem_binary())):
        if path.exists():
            st = path.stat()
            binaries[name] = {
                "path": str(path),
                "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(st.st_mtime)),
                "sha256": hashlib.sha256(path.read_bytes()).hexdigest()[:16],
            }
    return {
        "binaries": binaries,
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "loadavg": os.getloadavg(),
        "tools": tools,
    }


def save(suite: str, data: dict, fig: plt.Figure | None) -> Path:
    """Write the JSON (with machine facts) and the figure as PNG and SVG; return the JSON."""
    data = {"suite": suite, "machine": machine(), **data}
    path = write_result(suite, data)
    if fig is not None:
        fig.tight_layout()
        fig.savefig(path.with_suffix(".png"), dpi=110)
        fig.savefig(path.with_suffix(".svg"))
        plt.close(fig)
    progress(f"wrote {path} (+ .png, .svg)")
    return path


def figure(ncols: int = 1, width: float = 8, height: float = 4) -> tuple[plt.Figure, list]:
    fig, axes = plt.subplots(1, ncols, figsize=(width, height), squeeze=False)
    return fig, list(axes[0])
