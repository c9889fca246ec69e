"""``python -m lab.bench.history``: the benchmark history log, the latest tables, the trend plot.

Role: ``bench/history.jsonl`` holds one JSON line per benchmark case per run (suite, case,
revision, date, dirty flag, source file and the case's key figures, kernel MPTCP and the
other peers of the same run included). Each suite's newest result lives under a stable name
with its revision inside: ``bench/results/<suite>.json`` (+ ``.png``/``.svg``), the simulator's
``sim/results/<scenario>/`` and ``sim/results/bench/<params>.json``.

Subcommands:

* ``import``: build the log from every result file in ``bench/results/`` and ``sim/results/``
  (a one-off: it rewrites the log), then, with ``--prune``, keep only the newest result of each
  suite under its stable name and delete the older per-revision files.
* ``append FILE...``: add one result's lines to the log (``lab/results.py`` calls this after
  every benchmark run; run it by hand after ``multihome-sim bench`` or a simulator study, whose
  writers are in Rust). A per-revision simulator bench file is moved to its stable name.
* ``tables [--write]``: the markdown tables of each suite's latest run, with the revision and
  the command that produced it; ``--write`` refreshes the generated blocks of
  docs/EXPERIMENTS.md in place (``<!-- BEGIN GENERATED: suite -->`` ... ``<!-- END GENERATED -->``).
* ``plot``: each suite's headline figure over revisions in commit order, docs/trend.png + .svg.

Invariant: "newest" is decided by the revision's position in ``git log --topo-order`` (then by
the run's own timestamp), never by file modification time, which a fresh clone makes arbitrary.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from statistics import mean

from lab.bench.history_records import (
    _base,
    records_of,
    sort_key,
)
from lab.bench.history_tables import COLUMNS, TABLES, _table_generic

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
LOG = REPO_ROOT / "bench" / "history.jsonl"
BENCH_RESULTS = REPO_ROOT / "bench" / "results"
SIM_RESULTS = REPO_ROOT / "sim" / "results"
SIM_BENCH = SIM_RESULTS / "bench"
DOC = REPO_ROOT / "docs" / "EXPERIMENTS.md"
TREND = REPO_ROOT / "docs" / "trend"

REV_RE = re.compile(r"[0-9a-f]{7,40}")
PY = ".venv/bin/python"

# The command that produces each suite's result (lab suites run as root).
COMMANDS = {
    "simult-flows": f"{PY} -m lab.bench simult-flows",
    "simult-flows-weighted": f"{PY} -m lab.bench simult-flows --scheduler weighted",
    "simult-flows-partial": f"{PY} -m lab.bench simult-flows --cases 0 1",
    "overhead": f"{PY} -m lab.bench overhead",
    "failover": f"{PY} -m lab.bench failover",
    "failover-download": f"{PY} -m lab.bench failover --download --runs 5",
    "failover-download-no-remove-addr": f"{PY} -m lab.bench failover --download --runs 5 "
    "--stream-set remove_addr=false --tag no-remove-addr",
    "aggregate": f"{PY} -m lab.bench aggregate",
    "aggregate-quick": f"{PY} -m lab.bench aggregate --cases fixed --seconds 20",
    "aggregate-bursty": f"{PY} -m lab.bench aggregate --cases 30+20+10-bursty --seconds 20 "
    "--tag bursty",
    "aggregate-stream-fixed": f"{PY} -m lab.bench aggregate --cases fixed --seconds 20 "
    "--tag stream-fixed",
    "aggregate-stream-traces": f"{PY} -m lab.bench aggregate --cases traces --runs 3 "
    "--seconds 20 --tag stream-traces",
    "aggregate-stream-bbr": f"{PY} -m lab.bench aggregate --cases fixed --seconds 20 --cc bbr "
    "--tag stream-bbr",
    "aggregate-gbit": f"{PY} -m lab.bench aggregate --cases 1000+1000 --runs 3 --seconds 15 "
    "--tag gbit",
    "aggregate-gbit-bbr": f"{PY} -m lab.bench aggregate --cases 1000+1000 --runs 2 "
    "--seconds 12 --cc bbr --tag gbit-bbr",
    "crosscheck": f"{PY} -m lab.bench crosscheck",
    "reorder": f"{PY} -m lab.bench reorder --runs 3",
    "cellular-drive": f"{PY} -m lab.bench cellular-drive",
    "quic": f"{PY} -m lab.bench quic --runs 2",
    "realtime-media": f"{PY} -m lab.bench realtime-media",
    "detour-relay": f"{PY} -m lab.bench detour-relay",
    "detours": f"{PY} -m lab.bench detours",
    "detours-quick": f"{PY} -m lab.bench detours --quick",
    "race-bench": f"{PY} -m lab.race.bench",
    "race-bench-1000mbit": f"{PY} -m lab.race.bench --rate-mbit 1000",
    "race-eval-wired-wired": f"{PY} -m lab.race.experiment --config wired-wired",
    "race-eval-wired-wireless": f"{PY} -m lab.race.experiment --config wired-wireless",
    "race-eval-wireless-wireless": (
        f"{PY} -m lab.race.experiment --config wireless-wireless --live"
    ),
    "race-eval-cellular": f"{PY} -m lab.race.traces --config cellular",
    "race-eval-cellular-upload": f"{PY} -m lab.race.traces --config cellular-upload",
    "race-eval-dsl-cellular": f"{PY} -m lab.race.traces --config dsl-cellular",
    "race-eval-dsl-cellular-upload": f"{PY} -m lab.race.traces --config dsl-cellular-upload",
    "race-eval-5gophers": f"{PY} -m lab.race.traces --config 5gophers",
    "sim-bench": (
        "cargo run --profile bench-speed -p multihome-sim -- bench --sessions 1000 --seconds 60"
        " --out sim/results/bench"
    ),
}


# --- the log ------------------------------------------------------------------------------


def read_log(log: Path = LOG) -> list[dict]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _identity(rec: dict) -> tuple:
    return (rec["suite"], rec.get("label"), rec["revision"], rec.get("date"), rec["case"])


def append(paths: list[Path], log: Path = LOG) -> int:
    """Append the lines of these results (lines already in the log are skipped)."""
    have = {_identity(r) for r in read_log(log)}
    new = []
    for p in paths:
        recs = records_of(p)
        new += [r for r in recs if _identity(r) not in have]
        if p.resolve().parent == SIM_BENCH and recs:
            stable = SIM_BENCH / f"{recs[0]['case']}.json"
            if p.resolve() != stable:
                p.replace(stable)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as f:
        for r in new:
            f.write(json.dumps(r, sort_keys=True) + "\n")
    return len(new)


def _result_files() -> list[Path]:
    files = sorted(BENCH_RESULTS.glob("*.json"))
    files += sorted(SIM_BENCH.glob("*.json"))
    files += sorted(p.parent for p in SIM_RESULTS.glob("*/meta.json"))
    return files


def import_all(prune: bool) -> None:
    """Rebuild the log from every result file; with ``prune``, keep only the newest of each
    suite under its stable name."""
    by_file = {p: records_of(p) for p in _result_files()}
    recs = sorted((r for rs in by_file.values() for r in rs), key=sort_key)
    seen, lines = set(), []
    for r in recs:
        if _identity(r) not in seen:
            seen.add(_identity(r))
            lines.append(json.dumps(r, sort_keys=True))
    LOG.write_text("\n".join(lines) + "\n")
    print(f"{LOG.relative_to(REPO_ROOT)}: {len(lines)} lines from {len(by_file)} results")
    if prune:
        _prune(by_file)


def _prune(by_file: dict[Path, list[dict]]) -> None:
    newest: dict[str, Path] = {}
    for path, rs in sorted(by_file.items(), key=lambda kv: sort_key(kv[1][0]) if kv[1] else ()):
        if not rs or path.is_dir():
            continue
        r = rs[0]
        if r["suite"] == "sim-bench":
            newest[f"sim-bench:{r['case']}"] = path
        elif "label" not in r:
            newest[r["suite"]] = path
    keep = set()
    for suite, path in newest.items():
        if suite.startswith("sim-bench:"):
            stable = SIM_BENCH / f"{suite.split(':', 1)[1]}.json"
        else:
            stable = BENCH_RESULTS / f"{suite}.json"
        keep.add(stable)
        for ext in (".json", ".png", ".svg"):
            src = path.with_suffix(ext)
            if src.exists() and src != stable.with_suffix(ext):
                src.replace(stable.with_suffix(ext))
            keep.add(stable.with_suffix(ext))
        ds = path.parent / f"{path.stem}-dataset.jsonl.gz"
        if ds.exists():
            ds.replace(BENCH_RESULTS / f"{suite}-dataset.jsonl.gz")
        keep.add(BENCH_RESULTS / f"{suite}-dataset.jsonl.gz")
    for folder in (BENCH_RESULTS, SIM_BENCH):
        for p in folder.iterdir():
            if p.is_file() and p not in keep:
                p.unlink()
    print(f"kept {len([k for k in keep if k.exists()])} files under stable names")


# --- tables -------------------------------------------------------------------------------


def latest_runs(log: list[dict]) -> dict[str, list[dict]]:
    """Suite -> the lines of its newest run (diagnostic runs with a label excluded)."""
    runs: dict[str, dict[tuple, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in log:
        if "label" in r and r["suite"] != "sim-bench":
            continue
        runs[r["suite"]][(r["revision"], r.get("date"), r.get("label"))].append(r)
    out = {}
    for suite, by_run in runs.items():
        best = max(by_run.values(), key=lambda rs: (*sort_key(rs[0]), "label" not in rs[0]))
        out[suite] = best
    return out


def stable_path(suite: str, rec: dict) -> str:
    """Where a suite's latest result lives (the log's ``source`` is the file a line was read
    from when it was recorded, which may since have been replaced)."""
    if suite == "sim-bench":
        return f"sim/results/bench/{rec['case']}.json"
    if suite.startswith("sim:"):
        return rec["source"]
    return f"bench/results/{suite}.json"


def table(suite: str, rs: list[dict]) -> str:
    r0 = rs[0]
    base = "sim-bench" if suite == "sim-bench" else _base(suite) if ":" not in suite else ""
    make = TABLES.get(base) or (lambda rs: _table_generic(rs, COLUMNS.get(base)))
    dirty = " (dirty tree)" if r0.get("dirty") else ""
    cmd = COMMANDS.get(suite)
    if cmd is None and suite.startswith("sim:"):
        cmd = f"target/release/multihome-sim run sim/scenarios/{suite[4:]}.toml"
    head = [
        f"Revision `{r0['revision']}`{dirty}, {r0.get('date') or 'date unknown'}"
        + (f", kernel {r0['kernel']}" if r0.get("kernel") else "")
        + f"; from `{stable_path(suite, r0)}`.",
        "",
    ]
    if cmd:
        head[0] += f" Command: `{cmd}`."
    return "\n".join(head + make(rs))


def tables(suites: list[str] | None = None) -> dict[str, str]:
    latest = latest_runs(read_log())
    names = suites or sorted(s for s in latest if not s.startswith("sim:"))
    return {s: table(s, latest[s]) if s in latest else "no result yet" for s in names}


GEN_RE = re.compile(
    r"(<!-- BEGIN GENERATED: (?P<suite>[^ ]+) -->\n)(?P<body>.*?)(<!-- END GENERATED -->)", re.S
)


def write_doc(doc: Path = DOC) -> int:
    """Refresh every generated block of ``doc``; return how many were written."""
    text = doc.read_text()
    wanted = [m.group("suite") for m in GEN_RE.finditer(text)]
    made = tables(wanted)
    new = GEN_RE.sub(lambda m: m.group(1) + made[m.group("suite")] + "\n" + m.group(4), text)
    doc.write_text(new)
    return len(wanted)


# --- trend plot ---------------------------------------------------------------------------


def _sum(rs: list[dict], key: str) -> float | None:
    vals = [r["figures"][key] for r in rs if key in r["figures"]]
    return sum(vals) if vals else None


def _mean_of(rs: list[dict], key: str, cases: set[str] | None = None) -> float | None:
    vals = [
        r["figures"][key]
        for r in rs
        if key in r["figures"] and (cases is None or r["case"] in cases)
    ]
    return mean(vals) if vals else None


def _case(rs: list[dict], case: str, key: str) -> float | None:
    return next((r["figures"].get(key) for r in rs if r["case"] == case), None)


FIXED = {"50+20", "100+10", "30+20+10", "10+10"}

# Suite -> (title, y label, [(series label, function of one run's lines)]).
HEADLINES = {
    "simult-flows": (
        "simult-flows: runs passed (of 30)",
        "passed",
        [
            ("multihome", lambda rs: _sum(rs, "multihome.passed")),
            ("kernel MPTCP", lambda rs: _sum(rs, "mptcp.passed")),
        ],
    ),
    "aggregate": (
        "aggregate: goodput / header ceiling (fixed cases, mean)",
        "ratio",
        [
            (
                "multihome",
                lambda rs: _mean_of(rs, "multihome-earliest.ratio_to_ceiling", FIXED),
            ),
            ("kernel MPTCP", lambda rs: _mean_of(rs, "mptcp.ratio_to_ceiling", FIXED)),
        ],
    ),
    "failover": (
        "failover: longest gap after a cut, median",
        "s",
        [
            ("multihome aggregate", lambda rs: _case(rs, "multihome aggregate", "median_gap_s")),
            ("kernel MPTCP", lambda rs: _case(rs, "kernel MPTCP", "median_gap_s")),
        ],
    ),
    "overhead": (
        "overhead: one TCP stream through the tunnel",
        "Mbit/s",
        [
            ("multihome", lambda rs: _case(rs, "multihome", "tcp_mbps")),
            ("wireguard-go", lambda rs: _case(rs, "wireguard-go", "tcp_mbps")),
            ("OpenVPN", lambda rs: _case(rs, "openvpn", "tcp_mbps")),
        ],
    ),
    "crosscheck": (
        "crosscheck: simulator / lab goodput",
        "ratio",
        [
            ("multihome", lambda rs: _case(rs, "multihome", "ratio_sim_to_lab")),
            ("plain TCP, link 0", lambda rs: _case(rs, "tcp:0", "ratio_sim_to_lab")),
        ],
    ),
    "sim-bench": (
        "simulator speed: 1000 sessions x 3 links x 60 s",
        "x real time",
        [("realtime factor", lambda rs: _case(rs, "1000x3x60s_cps1", "realtime_factor"))],
    ),
}


def trend_series(log: list[dict]) -> dict[str, list[tuple[str, dict[str, float | None]]]]:
    """Suite -> [(revision, {series: value})] in commit order, one point per run."""
    runs: dict[str, dict[tuple, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in log:
        if r["suite"] in HEADLINES and ("label" not in r or r["suite"] == "sim-bench"):
            runs[r["suite"]][(r["revision"], r.get("date"), r.get("label"))].append(r)
    out = {}
    for suite, by_run in runs.items():
        _, _, series = HEADLINES[suite]
        pts = []
        for rs in sorted(by_run.values(), key=lambda rs: sort_key(rs[0])):
            pts.append((rs[0]["revision"], {name: fn(rs) for name, fn in series}))
        out[suite] = pts
    return out


def plot(out: Path = TREND) -> list[Path]:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    data = trend_series(read_log())
    suites = [s for s in HEADLINES if s in data]
    ncols = 2
    nrows = (len(suites) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(12, 3.2 * nrows), squeeze=False)
    for ax, suite in zip(axes.flat, suites, strict=False):
        title, ylabel, series = HEADLINES[suite]
        pts = data[suite]
        xs = list(range(len(pts)))
        for name, _ in series:
            ys = [v[name] if v[name] is not None else float("nan") for _, v in pts]
            ax.plot(xs, ys, marker="o", label=name)
        ax.set_xticks(xs, [rev for rev, _ in pts], rotation=60, fontsize=7)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(suites) :]:
        ax.set_visible(False)
    fig.suptitle("Headline figure per suite over revisions (commit order)")
    fig.tight_layout()
    paths = [out.with_suffix(".png"), out.with_suffix(".svg")]
    fig.savefig(paths[0], dpi=100)
    fig.savefig(paths[1])
    plt.close(fig)
    return paths


# --- command line -------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.bench.history", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    imp = sub.add_parser("import", help="rebuild the log from every result file")
    imp.add_argument(
        "--prune", action="store_true", help="then keep only the newest result of each suite"
    )
    app = sub.add_parser("append", help="add one result's lines to the log")
    app.add_argument("files", nargs="+", type=Path)
    tab = sub.add_parser("tables", help="markdown tables of each suite's latest run")
    tab.add_argument("suites", nargs="*", help="only these suites (default: all lab suites)")
    tab.add_argument("--write", action="store_true", help=f"refresh the blocks of {DOC.name}")
    sub.add_parser("plot", help="trend plot, docs/trend.png and .svg")
    args = parser.parse_args(argv)
    if args.cmd == "import":
        import_all(args.prune)
    elif args.cmd == "append":
        print(f"{LOG.relative_to(REPO_ROOT)}: {append(args.files)} lines appended")
    elif args.cmd == "tables":
        if args.write:
            print(f"{DOC.relative_to(REPO_ROOT)}: {write_doc()} generated blocks refreshed")
        else:
            for suite, text in tables(args.suites or None).items():
                print(f"## {suite}\n\n{text}\n")
    else:
        for p in plot():
            print(f"wrote {p.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
