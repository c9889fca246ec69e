"""``python -m lab.bench.summary``: markdown tables of the latest result of each suite.

Role: read each suite's latest result, ``bench/results/<suite>.json`` (a stable name; the
revision is inside), and print its table. ``python -m lab.bench.history tables`` prints the
same from the history log for every suite and refreshes docs/EXPERIMENTS.md.
Invariant: every table names the revision, the dirty flag and the machine it came from.
"""

from __future__ import annotations

import json
import sys

from lab.results import RESULTS_DIR


def latest(suite: str) -> dict | None:
    """The suite's latest result, ``bench/results/<suite>.json``, if there is one."""
    path = RESULTS_DIR / f"{suite}.json"
    return json.loads(path.read_text()) | {"_file": path.name} if path.exists() else None


def provenance(d: dict) -> str:
    m = d.get("machine", {})
    load = ", ".join(f"{x:.1f}" for x in m.get("loadavg", []))
    return (
        f"revision `{d['revision']}`{' (dirty tree)' if d.get('dirty') else ''}, "
        f"file `bench/results/{d['_file']}`; kernel {m.get('kernel')}, {m.get('cpus')} CPUs "
        f"({m.get('cpu_model')}), load average at the end {load}"
    )


def simult_flows(d: dict) -> str:
    rows = [
        "| case (rates, one-way delays) | limit | multihome passed | median | "
        "kernel MPTCP passed | median | best path alone |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in d["cases"]:
        mh, mp = c["summary"]["multihome"], c["summary"]["mptcp"]

        def cell(s: dict) -> str:
            med = s["median_s"]
            return f"{s['passed']}/{s['runs']} | " + (f"{med:.2f} s" if med else "—")

        alone = [a["seconds"] for a in c.get("alone", {}).values() if a.get("seconds")]
        best = f"{min(alone):.2f} s" if alone else "—"
        rows.append(f"| {c['name']} | {c['limit_s']:.2f} s | {cell(mh)} | {cell(mp)} | {best} |")
    return "\n".join(rows)


def failover(d: dict) -> str:
    rows = [
        "| system | survived | longest gap, median | longest gap, max | before cut | after cut |",
        "|---|---|---|---|---|---|",
    ]
    for label, s in d["summary"].items():
        rows.append(
            f"| {label} | {s['survived']}/{s['runs']} | {s['median_gap_s']:.2f} s | "
            f"{s['max_gap_s']:.2f} s | {s['median_before_mbps']:.1f} Mbit/s | "
            f"{s['median_after_mbps']:.1f} Mbit/s |"
        )
    return "\n".join(rows)


def overhead(d: dict) -> str:
    rows = [
        "| path | 1 TCP stream (CUBIC) | vs direct | median idle RTT | added RTT |",
        "|---|---|---|---|---|",
    ]
    for name, b in d["best"].items():
        r = d["ratios"].get(name, {"throughput_ratio": 1.0, "added_rtt_ms": 0.0})
        rows.append(
            f"| {name} | {b['tcp_mbps']:.0f} Mbit/s | {r['throughput_ratio']:.3f} | "
            f"{b['rtt_median_ms']:.3f} ms | {r['added_rtt_ms']:+.3f} ms |"
        )
    for name, why in d.get("skipped", {}).items():
        rows.append(f"| {name} | skipped: {why} | | | |")
    return "\n".join(rows)


def main() -> int:
    for suite, table in (
        ("simult-flows", simult_flows),
        ("simult-flows-weighted", simult_flows),
        ("overhead", overhead),
        ("failover", failover),
    ):
        d = latest(suite)
        if d is None:
            print(f"## {suite}\n\nno result yet\n")
            continue
        print(f"## {suite}\n\n{provenance(d)}\n\n{table(d)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
