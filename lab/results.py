"""Where experiment results go and which revision produced them.

Role: write a suite's result as JSON under a stable name, ``bench/results/<kind>.json`` (the
newest run of each suite; the revision is inside), and append its figures to the history log
``bench/history.jsonl`` (``lab/bench/history.py``), where older runs live on.
Invariant: a result file always records the revision and whether the tree was dirty, so a
number can be traced to the code that produced it.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from lab.netns import REPO_ROOT

RESULTS_DIR = REPO_ROOT / "bench" / "results"


# Result folders (and the history log write_result appends to): files there are what
# benchmarks write, not code, so they do not make a tree dirty (a run's own output, or the
# previous run's uncommitted result, flagged every crosscheck and every second benchmark of a
# series as built from modified code).
RESULT_PATHS = ("bench/results", "sim/results", "bench/history.jsonl")


def git_revision() -> tuple[str, bool]:
    """``(short revision or "norev", dirty)`` of the work tree; dirty means a file outside
    the result folders differs from the revision."""
    rev = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    status = subprocess.run(
        ["git", "status", "--porcelain", "--", ".", *(f":(exclude){p}" for p in RESULT_PATHS)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    name = rev.stdout.strip() if rev.returncode == 0 else "norev"
    return name, bool(status.stdout.strip())


def write_result(kind: str, data: dict) -> Path:
    """Write ``bench/results/<kind>.json`` with revision metadata (replacing the previous run
    of that suite), append its lines to ``bench/history.jsonl``; return the path."""
    rev, dirty = git_revision()
    data = {"revision": rev, "dirty": dirty, "timestamp": time.time(), **data}
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{kind}.json"
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    from lab.bench import history  # noqa: PLC0415 (lab.bench imports this module)

    history.append([path])
    return path
