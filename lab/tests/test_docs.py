"""The documents are reference: paths they name exist, no machine paths, papers cited by title,
the history log parses and its tables render. Pure file checks (no namespaces, no root)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from lab.bench import history

ROOT = Path(__file__).resolve().parent.parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
# Extensions and top-level folders that make a backticked word a repository path.
PATH_EXT = re.compile(r"\.(rs|py|md|toml|sh|json|jsonl|csv|png|svg|gz)$")
TOP = ("crates/", "lab/", "sim/", "bench/", "docs/", "scripts/", "examples/", "fuzz/")


def tracked() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.split()
    if not out:  # not a git checkout: the files on disk
        out = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*") if p.is_file()]
    return out


def named_paths(text: str) -> list[str]:
    """Backticked words that look like repository paths (placeholders and globs skipped)."""
    found = []
    for raw in re.findall(r"`([^`\s]+)`", text):
        word = raw.rstrip(".,:;)").split("::")[0]
        if any(c in word for c in "<>*{}$=?[]") or "://" in word or word.startswith("-"):
            continue
        if word.startswith(("/", "~")):
            continue  # absolute paths are checked by test_no_machine_paths
        if word.startswith(TOP) or ("/" in word and PATH_EXT.search(word)):
            found.append(word.rstrip("/"))
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_named_paths_exist(doc: Path) -> None:
    files = tracked()
    dirs = {str(Path(f).parent) for f in files} | {
        "/".join(f.split("/")[:i]) for f in files for i in range(1, f.count("/") + 1)
    }
    known = set(files) | dirs
    missing = []
    for p in named_paths(doc.read_text()):
        # A path is taken from the repository root, or as the tail of a tracked path
        # (``sched/best.rs`` inside ``crates/proto/src``).
        if p in known or any(k.endswith("/" + p) for k in known):
            continue
        missing.append(p)
    assert not missing, f"{doc.name} names paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_no_machine_paths(doc: Path) -> None:
    text = doc.read_text()
    for bad in ("/work/", "/root/", "/home/"):
        assert bad not in text, f"{doc.name} contains the machine path {bad}"


DOC_TREE = [
    *DOCS,
    *sorted(ROOT.glob("lab/**/README.md")),
    ROOT / "sim" / "README.md",
    *sorted((ROOT / "sim" / "scenarios").glob("*.toml")),
]


@pytest.mark.parametrize("doc", DOC_TREE, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_papers_cited_by_title(doc: Path) -> None:
    assert not re.search(r"seed 00\d", doc.read_text(), re.I), f"{doc} cites a paper by number"


def test_history_log_parses() -> None:
    lines = history.LOG.read_text().splitlines()
    assert lines
    for n, line in enumerate(lines, 1):
        rec = json.loads(line)
        for key in ("suite", "case", "revision", "figures"):
            assert key in rec, f"history.jsonl line {n} has no {key}"


def test_tables_render() -> None:
    made = history.tables()
    assert "simult-flows" in made
    assert all(isinstance(t, str) and t for t in made.values())


def test_experiments_generated_blocks_are_known_suites() -> None:
    text = history.DOC.read_text()
    suites = [m.group("suite") for m in history.GEN_RE.finditer(text)]
    assert suites, "docs/EXPERIMENTS.md has no generated tables"
    latest = history.latest_runs(history.read_log())
    assert set(suites) <= set(latest), set(suites) - set(latest)


# ``path.rs::Type::function`` or ``path.rs::function`` in ARCHITECTURE.md's routes of a packet.
ROUTE_STEP = re.compile(r"`((?:crates|fuzz)/[\w/]+\.rs)::((?:\w+::)?\w+)`")


def route_steps() -> list[tuple[str, str]]:
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    start = text.index("## The two routes of a packet")
    end = text.index("\n## ", start + 1)
    return ROUTE_STEP.findall(text[start:end])


def test_architecture_routes_name_real_functions() -> None:
    """Every ``file::function`` of the two routes exists: the file, the function in it, and
    (for ``Type::method``) an ``impl`` of that type in the same file."""
    steps = route_steps()
    assert len(steps) >= 15, f"the routes name too few steps: {steps}"
    missing = []
    for path, name in steps:
        src = ROOT / path
        if not src.is_file():
            missing.append(f"{path} (no such file)")
            continue
        code = src.read_text()
        *ty, fn = name.split("::")
        if not re.search(rf"\bfn {fn}\b", code):
            missing.append(f"{path}::{name} (no fn {fn})")
        elif ty and not re.search(rf"\bimpl\b[^{{;]*\b{ty[0]}\b[^{{;]*\{{", code):
            missing.append(f"{path}::{name} (no impl of {ty[0]})")
    assert not missing, f"ARCHITECTURE.md names functions that do not exist: {missing}"
