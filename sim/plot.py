"""Plots of the simulator studies from sim/results/: section 4.3 of Mukherjee, "Network-Assisted
Multihoming for Emerging Heterogeneous Wireless Access Scenarios" (Rutgers M.S. thesis, 2014),
and the loss and fairness tables of Magalhães, "A Transport Layer Approach to Host Mobility".

Reads the `summary.csv` and per-run JSON files that `multihome-sim run` writes and draws
PNGs into sim/results/plots/. Every figure is a pure function of those files.

Usage: .venv/bin/python sim/plot.py [--results sim/results]
"""

from __future__ import annotations

import argparse
import csv
import json
from collections import defaultdict
from pathlib import Path
from statistics import mean

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DENSITY_SPAN = 20  # must match crates/sim/src/stats.rs


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def averaged(rows, keys, value):
    """Mean of `value` over seeds, keyed by the tuple of `keys`."""
    acc = defaultdict(list)
    for r in rows:
        if r[value] != "":
            acc[tuple(r[k] for k in keys)].append(float(r[value]))
    return {k: mean(v) for k, v in acc.items()}


def reorder_occupancy(results: Path, out: Path) -> None:
    rows = read_rows(results / "mobilityfirst_reorder" / "summary.csv")
    occ = averaged(rows, ["case", "scheduler", "traffic"], "reorder_down_mean_occ_bytes")
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharex=True)
    for row, traffic in enumerate(["saturate", "bulk"]):
        for col, sched in enumerate(["weighted", "earliest"]):
            ax = axes[row][col]
            for param, marker in [("rate", "o"), ("delay", "s"), ("hops", "^")]:
                ks = [1, 2, 3, 4, 5]
                ys = [occ.get((f"{param}-1:{k}", sched, traffic), float("nan")) / 1e3 for k in ks]
                ax.plot(ks, ys, marker=marker, label=f"{param} ratio")
            ax.set_title(f"{sched}, {traffic}")
            ax.set_xlabel("ratio 1:k")
            ax.set_ylabel("mean reorder buffer (KB)")
            ax.grid(alpha=0.3)
            ax.legend()
    fig.suptitle(
        "Reorder buffer occupancy at the client vs path disparity (Mukherjee fig. 4.5/4.6)"
    )
    fig.tight_layout()
    fig.savefig(out / "mobilityfirst_occupancy.png", dpi=110)
    plt.close(fig)


def reorder_density(results: Path, out: Path) -> None:
    base = results / "mobilityfirst_reorder"
    xs = list(range(-DENSITY_SPAN - 1, DENSITY_SPAN + 2))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, sched in zip(axes, ["weighted", "earliest"], strict=True):
        for k in [1, 2, 3, 4, 5]:
            f = base / f"case=rate-1_{k}_scheduler={sched}_traffic=saturate_s1.json"
            if not f.exists():
                continue
            d = json.loads(f.read_text())["reorder"]["down"]["density"]
            ax.plot(xs, d, marker=".", label=f"rate 1:{k}")
        ax.set_yscale("log")
        ax.set_title(f"{sched} (backlogged source)")
        ax.set_xlabel("displacement (arrival position - rank); ends pool the tails")
        ax.grid(alpha=0.3)
        ax.legend()
    axes[0].set_ylabel("fraction of packets")
    fig.suptitle("Reorder density vs rate ratio (Mukherjee fig. 4.7)")
    fig.tight_layout()
    fig.savefig(out / "mobilityfirst_density.png", dpi=110)
    plt.close(fig)


def both_vs_best(results: Path, out: Path) -> None:
    rows = read_rows(results / "mobilityfirst_both_vs_best" / "summary.csv")
    done = averaged(rows, ["bytes", "ratio", "policy"], "completion_s")
    sizes = sorted({int(r["bytes"]) for r in rows})
    ratios = sorted({int(r["ratio"]) for r in rows})
    grid = []
    for s in sizes:
        line = []
        for k in ratios:
            best = done.get((str(s), str(k), "best"))
            both = done.get((str(s), str(k), "aggregate"))
            line.append(best / both if best and both else float("nan"))
        grid.append(line)
    fig, ax = plt.subplots(figsize=(7, 5))
    im = ax.imshow(grid, cmap="RdYlGn", vmin=0.5, vmax=1.5, origin="lower", aspect="auto")
    for i, line in enumerate(grid):
        for j, v in enumerate(line):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(ratios)), [f"1:{k}" for k in ratios])
    ax.set_yticks(range(len(sizes)), [f"{s / 1e6:g} MB" for s in sizes])
    ax.set_xlabel("rate ratio of the paths (36 Mbit/s : 36/k)")
    ax.set_ylabel("flow size")
    fig.colorbar(im, label="completion(best) / completion(both): > 1 = striping pays")
    ax.set_title("Best path vs both paths (Mukherjee fig. 4.10)")
    fig.tight_layout()
    fig.savefig(out / "mobilityfirst_both_vs_best.png", dpi=110)
    plt.close(fig)


def loss_table(results: Path, out: Path) -> None:
    one = read_rows(results / "rmtp_loss" / "summary.csv")
    two = read_rows(results / "rmtp_loss_2links" / "summary.csv")
    losses = ["0.0", "0.001", "0.01"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, rate in zip(axes, ["1mbit", "10mbit"], strict=True):
        series = {}
        for mode in ["direct", "tunnel"]:
            rows = [r for r in one if r["mode"] == mode and r["rate"] == rate]
            series[f"1 link, {mode}"] = averaged(rows, ["loss"], "goodput_mbit")
        for pol in ["aggregate", "redundant"]:
            rows = [r for r in two if r["policy"] == pol and r["rate"] == rate]
            series[f"2 links, {pol}"] = averaged(rows, ["loss"], "goodput_mbit")
        width = 0.2
        for i, (name, g) in enumerate(series.items()):
            # Packets of 1334 bytes delivered in 30 s, the unit of Magalhães's table.
            ys = [g.get((loss,), 0.0) * 1e6 * 30 / 8 / 1334 for loss in losses]
            ax.bar([x + i * width for x in range(len(losses))], ys, width, label=name)
        ax.set_xticks([x + 1.5 * width for x in range(len(losses))], ["0", "0.1 %", "1 %"])
        ax.set_xlabel("random loss on every link")
        ax.set_ylabel("packets delivered in 30 s")
        ax.set_title(f"{rate} links, 40 ms")
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("One NewReno-like flow under random loss (Magalhães's loss table)")
    fig.tight_layout()
    fig.savefig(out / "rmtp_loss.png", dpi=110)
    plt.close(fig)


def fairness(results: Path, out: Path) -> None:
    panels = []
    for name, key in [("rmtp_fairness", "mode"), ("rmtp_fairness_2links", "scheduler")]:
        for f in sorted((results / name).glob("*_s1.json")):
            r = json.loads(f.read_text())
            label = f"{r['point'].get(key)} ({'1' if name.endswith('fairness') else '2'} link)"
            panels.append((label, [x["goodput_mbit"] for x in r["flows"]], r["summary"]["jain"]))
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / max(len(panels), 1)
    for i, (label, gs, j) in enumerate(panels):
        xs = [x + i * width for x in range(len(gs))]
        ax.bar(xs, gs, width, label=f"{label}: Jain {j:.3f}")
    ax.set_xticks([x + 0.4 - width / 2 for x in range(5)], [f"flow {i + 1}" for i in range(5)])
    ax.set_ylabel("goodput (Mbit/s)")
    ax.set_title("5 competing TCP flows on a shared bottleneck (Magalhães's table, seed 1)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "rmtp_fairness.png", dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--results", type=Path, default=Path("sim/results"))
    args = ap.parse_args()
    out = args.results / "plots"
    out.mkdir(parents=True, exist_ok=True)
    from plot_vehicular import vehicular  # noqa: PLC0415 (beside this script)

    for fn in [reorder_occupancy, reorder_density, both_vs_best, loss_table, fairness, vehicular]:
        try:
            fn(args.results, out)
            print(f"{fn.__name__}: ok")
        except FileNotFoundError as e:
            print(f"{fn.__name__}: skipped ({e})")


if __name__ == "__main__":
    main()
