"""The README's first command after setup, ``python -m lab.demo``, end to end (about 70 s).

It must finish, write its report (markdown + three plots in PNG and SVG), leave no namespace
behind, and show what it claims: the bonded download beats the DSL link alone, the download
never stalls while LTE is down (DSL keeps carrying it; bound = detect_ms 1 s + 1 s slack), and
the redundant VoIP stream loses under 1 % (its copy on DSL is untouched by the LTE cut).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from lab.netns import REPO_ROOT, lab_namespaces, tool_env


def test_demo_runs_and_reports(multihome_bin: Path, linkem_bin: Path, tmp_path: Path) -> None:
    out = tmp_path / "demo"
    proc = subprocess.Popen(
        [sys.executable, "-m", "lab.demo", "--out", str(out)],
        cwd=REPO_ROOT,
        env=tool_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    stdout, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, stdout[-4000:]
    assert not [n for n in lab_namespaces() if n.split("-")[1] == str(proc.pid)]
    for name in ("report.md", "summary.json", "links.png", "failover.svg", "voip.png"):
        assert (out / name).is_file(), name
    d = json.loads((out / "summary.json").read_text())
    assert d["bonded_mbps"] > d["alone_mbps"]["dsl"], (d["bonded_mbps"], d["alone_mbps"])
    assert d["fail"]["zero_gap_s"] <= 2.0, d["fail"]
    assert d["voip"]["loss"] < 0.01, {k: v for k, v in d["voip"].items() if k != "packets"}
    assert "t=" in stdout and "LTE DOWN" in stdout  # the live view ran
    # The report opens with the one line that matters and the picture; the terminal ends
    # with that line.
    lines = [ln for ln in (out / "report.md").read_text().splitlines() if ln.strip()]
    assert lines[1].startswith("**Bonded ") and "LTE cut: longest gap" in lines[1], lines[:3]
    assert lines[2] == "![per-link throughput](links.png)", lines[:3]
    assert lines[1].strip("*") in stdout
