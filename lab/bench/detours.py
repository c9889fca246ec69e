"""Suite ``detours``: Brennan's detour experiments (issue 15) with multihome beside kernel MPTCP.

Role: reproduce the evaluation of "Exploring Alternative Routes Using Multipath TCP" (slides
31-47) on linkem links: the Mininet network of slide 33 (our reading of it, with the rates that
make the seed's claims follow, is in lab/bench/detours_topology.py), the scenarios of slide 34
({symmetric: every link 10 Mbit/s; core-limited: core 10, access 20} x {normal; 1 % loss on
link 2; +100 ms on link 2}), the workload "send as much as possible from client to server"
(one bulk upload per run, inner CUBIC and BBR), and the mechanisms of slide 35 side by side in
the same run (lab/bench/detours_run.py): kernel MPTCP with one subflow, kernel MPTCP + NAT
detour (``multihome mptcp-detours``, when the binary has it), multihome ``aggregate`` with a
NAT detour and with a tunnel detour, plain TCP over the default route, plain TCP via the NAT
detour; and, as a reference the seed does not have, multihome with no detour.

Pass ratios (issue 15; computed in the result, per congestion control, on the NAT detour):

- core-limited, normal: multihome >= 1.8 x TCP (default route), and >= MPTCP + NAT detour;
- symmetric, normal: multihome >= 0.95 x TCP (multihome's header ceiling is 0.963 x TCP's);
- 1 % loss on link 2 (both networks): multihome >= the better of TCP and TCP (NAT).

Usage (root; ~28 min: 6 cases x 2 cc x 6 mechanisms x 20 s, plus set-up)::

    .venv/bin/python -m lab.bench detours                 # bench/results/detours.json + .png
    .venv/bin/python -m lab.bench detours --quick         # CUBIC only, 8 s: ~10 min
    .venv/bin/python -m lab.bench detours --cases core-limited/normal --seconds 10

Invariants: one network (the same linkem processes) serves every run; a case's mechanisms run
back to back on it; a run that is partial (``--quick``, ``--cases``, other ``--seconds``) is
written as ``detours-quick``/``detours-partial`` and never replaces the suite's result.
"""

from __future__ import annotations

from lab.bench.common import progress, save
from lab.bench.detours_plot import plot
from lab.bench.detours_run import MECHANISMS, measure
from lab.bench.detours_topology import (
    DELAY_MS,
    LINKS,
    QUEUE_PACKETS,
    RATES,
    VARIATIONS,
    DetourLab,
    route_capacity_mbit,
)
from lab.netns import Lab
from lab.topology import multihome_binary

NETWORKS = ("symmetric", "core-limited")
CASES = tuple(f"{n}/{v}" for n in NETWORKS for v in VARIATIONS)
CCS = ("cubic", "bbr")
SECONDS = 20.0
QUICK_SECONDS = 8.0
# The bars, on multihome with the NAT detour.
BAR_AGGREGATE, BAR_SYMMETRIC = 1.8, 0.95
# Goodput over the wire rate at 1514-byte frames: plain TCP with timestamps 1448 / 1514;
# multihome's tunnel (mtu 1420, header compression) 1368 / 1485 (docs/EXPERIMENTS.md).
CEILING = {"tcp": 1448 / 1514, "multihome": 1368 / 1485}
_PORT = [9100]


def next_port() -> int:
    _PORT[0] += 1
    return _PORT[0]


def checks(case: str, cc: str, g: dict[str, float | None]) -> list[dict]:
    """The issue's pass checks for one case and congestion control (goodputs in ``g``)."""
    mh = g.get("multihome+nat")
    out = []

    def add(name: str, ref: float | None, bar: float, what: str) -> None:
        ratio = mh / ref if mh is not None and ref else None
        out.append(
            {
                "case": case,
                "cc": cc,
                "check": name,
                "what": what,
                "ratio": ratio,
                "bar": bar,
                "passed": None if ratio is None else ratio >= bar,
            }
        )

    if case == "core-limited/normal":
        add("aggregates", g.get("tcp"), BAR_AGGREGATE, "multihome+nat / tcp")
        add("vs-mptcp-detour", g.get("mptcp+nat"), 1.0, "multihome+nat / mptcp+nat")
    elif case == "symmetric/normal":
        add("no-loss-when-no-gain", g.get("tcp"), BAR_SYMMETRIC, "multihome+nat / tcp")
    elif case.endswith("/loss"):
        best = max((x for x in (g.get("tcp"), g.get("tcp(nat)")) if x), default=None)
        add("best-path-under-loss", best, 1.0, "multihome+nat / max(tcp, tcp(nat))")
    return out


def run_case(dlab: DetourLab, case: str, ccs: tuple[str, ...], mechs, seconds: float) -> dict:  # noqa: ANN001
    network, variation = case.split("/")
    dlab.apply(network, variation)
    rec: dict = {"case": case, "capacity_mbit": route_capacity_mbit(network), "runs": []}
    for cc in ccs:
        for mech in mechs:
            run = measure(dlab, mech, cc, seconds, next_port())
            rec["runs"].append(run)
            note = run.get("unavailable") or run.get("error") or ""
            share = (run.get("multihome") or {}).get("detour_share")
            extra = f" detour share {share:.2f}" if share is not None else ""
            progress(
                f"{case} {cc} {mech}: {run.get('goodput_mbps', 0):.2f} Mbit/s{extra} {note[:200]}"
            )
    return rec


def summarize(cases: list[dict], ccs: tuple[str, ...]) -> tuple[dict, list[dict]]:
    """``table[case][cc][mech]`` = goodput (None: unavailable/failed) and the pass checks."""
    table: dict = {}
    passes: list[dict] = []
    for c in cases:
        table[c["case"]] = {}
        for cc in ccs:
            g = {
                r["mechanism"]: (r["goodput_mbps"] if not r.get("error") else None)
                for r in c["runs"]
                if r["cc"] == cc and "unavailable" not in r
            }
            tcp = g.get("tcp")
            table[c["case"]][cc] = {
                "goodput_mbps": g,
                "ratio_to_tcp": {m: v / tcp for m, v in g.items() if v and tcp},
            }
            passes += checks(c["case"], cc, g)
    return table, passes


def print_table(table: dict, mechs) -> None:  # noqa: ANN001
    print("case | cc | " + " | ".join(mechs))
    for case, per_cc in table.items():
        for cc, t in per_cc.items():
            cells = [
                "n/a" if t["goodput_mbps"].get(m) is None else f"{t['goodput_mbps'][m]:.2f}"
                for m in mechs
            ]
            print(f"{case} | {cc} | " + " | ".join(cells))


def main(
    seconds: float | None = None,
    only: list[str] | None = None,
    quick: bool = False,
    mechanisms: list[str] | None = None,
) -> dict:
    ccs = ("cubic",) if quick else CCS
    secs = seconds or (QUICK_SECONDS if quick else SECONDS)
    cases = [c for c in CASES if not only or c in only]
    mechs = tuple(m for m in MECHANISMS if not mechanisms or m in mechanisms)
    full = not quick and not only and not mechanisms and secs == SECONDS
    suite = "detours" if full else ("detours-quick" if quick else "detours-partial")
    results = []
    with Lab() as lab:
        dlab = DetourLab(lab, multihome_binary())
        dlab.mptcp_base()
        for case in cases:
            results.append(run_case(dlab, case, ccs, mechs, secs))
    table, passes = summarize(results, ccs)
    print_table(table, mechs)
    for p in passes:
        ratio = "n/a" if p["ratio"] is None else f"{p['ratio']:.3f}"
        print(f"pass {p['case']} {p['cc']} {p['check']}: {ratio} (bar {p['bar']}) {p['passed']}")
    data = {
        "seconds": secs,
        "ccs": list(ccs),
        "mechanisms": list(mechs),
        "network": {
            "links": {str(k): {"ends": [v[0], v[2]], "kind": v[4]} for k, v in LINKS.items()},
            "rates_mbit": RATES,
            "variations_on_link_2": VARIATIONS,
            "delay_ms_per_link": DELAY_MS,
            "queue_packets": QUEUE_PACKETS,
        },
        "header_ceiling": CEILING,
        "cases": results,
        "table": table,
        "pass": passes,
        "all_passed": all(p["passed"] for p in passes if p["passed"] is not None),
        "unavailable": sorted(
            {r["unavailable"] for c in results for r in c["runs"] if "unavailable" in r}
        ),
    }
    try:
        fig = plot(table, mechs, ccs, results)
    except Exception as exc:  # noqa: BLE001 - the figures must reach the result file anyway
        progress(f"plot failed ({exc!r}); writing the result without a figure")
        fig = None
    save(suite, data, fig)
    return data
