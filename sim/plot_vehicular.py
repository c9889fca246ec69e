"""Figure and medians of the simulator's vehicular study (issue 16; Mukherjee, "Network-Assisted
Multihoming", §4.2.1, Fig. 4.2): transfer-time CDFs of 60-80 MB downloads from a car passing
Wi-Fi hotspots, plain TCP/IP with a resuming application against multihome, per AP-distance
range; the median gain next to the paper's 30 % ([100, 300] m) and 22 % ([300, 500] m), and the
gain under the paper's accounting (`multihome-gnrs`: 30-170 ms per association instead of
DHCP's 1-2 s, see sim/scenarios/vehicular.toml).

Also §4.2.2 (Figs. 4.3-4.4): the same drive ([300, 500] m) with a steady LTE link, one
60-80 MB file under `aggregate` and `best`, against Wi-Fi alone (the vehicular study's
multihome runs, same seeds: same drives and files), LTE alone, and the sum of the two
interfaces' goodputs (per seed).

Reads sim/results/{vehicular,vehicular_lte,vehicular_lte_alone}/summary.csv; writes
sim/results/plots/vehicular.png and vehicular_lte.png and prints the medians.
Usage: .venv/bin/python sim/plot_vehicular.py [--results sim/results]
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path
from statistics import median

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PAPER_GAIN = {"100-300": 0.30, "300-500": 0.22}
COLORS = {"tcp-resume": "tab:red", "multihome": "tab:blue", "multihome-gnrs": "tab:green"}


def times(rows: list[dict], gap: str, mech: str) -> dict[int, float]:
    """Completion time per seed (runs that did not complete are left out and counted)."""
    return {
        int(r["seed"]): float(r["completion_s"])
        for r in rows
        if r["gap"] == gap and r["mech"] == mech and r["completion_s"]
    }


def summary(rows: list[dict]) -> dict:
    out = {}
    for gap, paper in PAPER_GAIN.items():
        t = {m: times(rows, gap, m) for m in COLORS}
        t = {m: v for m, v in t.items() if v}
        if "tcp-resume" not in t or "multihome" not in t:
            continue
        med = {m: median(v.values()) for m, v in t.items()}
        base = t["tcp-resume"]
        gains = {}
        for m in t.keys() - {"tcp-resume"}:
            both = sorted(set(base) & set(t[m]))
            gains[m] = {
                "median_gain": 1 - med[m] / med["tcp-resume"],
                "paired_gain_median": median(1 - t[m][s] / base[s] for s in both),
            }
        out[gap] = {
            "runs": {m: len(v) for m, v in t.items()},
            "median_s": med,
            "median_gain": gains["multihome"]["median_gain"],
            "gains": gains,
            "paper_gain": paper,
        }
    return out


def vehicular(results: Path, out: Path) -> dict:
    with (results / "vehicular" / "summary.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    s = summary(rows)
    fig, axes = plt.subplots(1, len(s), figsize=(5.5 * len(s), 4), squeeze=False)
    for ax, (gap, g) in zip(axes[0], s.items(), strict=True):
        for mech, color in COLORS.items():
            xs = sorted(times(rows, gap, mech).values())
            ys = [(i + 1) / len(xs) for i in range(len(xs))]
            ax.step(xs, ys, where="post", color=color, label=f"{mech} (n={len(xs)})")
        gg = g["gains"]
        line = f"gain {100 * gg['multihome']['median_gain']:.1f} %"
        if "multihome-gnrs" in gg:
            line += f", paper's accounting {100 * gg['multihome-gnrs']['median_gain']:.1f} %"
        ax.set_title(
            f"AP gap {gap} m (simulator, median)\n{line} (paper {100 * g['paper_gain']:.0f} %)",
            fontsize=9,
        )
        ax.set_xlabel("transfer time of a 60-80 MB file (s)")
        ax.set_ylabel("CDF")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "vehicular.png", dpi=110)
    plt.close(fig)
    return s


def read(results: Path, name: str) -> list[dict]:
    with (results / name / "summary.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def per_seed(rows: list[dict], **match: str) -> dict[int, tuple[float, float]]:
    """(completion s, goodput Mbit/s) per seed of the rows matching ``match``."""
    return {
        int(r["seed"]): (float(r["completion_s"]), float(r["goodput_mbit"]))
        for r in rows
        if r["completion_s"] and all(r[k] == v for k, v in match.items())
    }


def lte(results: Path, out: Path) -> dict:
    """§4.2.2: aggregate over Wi-Fi + LTE against the sum of the interfaces alone."""
    runs = {
        "aggregate": per_seed(read(results, "vehicular_lte"), policy="aggregate"),
        "best": per_seed(read(results, "vehicular_lte"), policy="best"),
        "wifi alone": per_seed(read(results, "vehicular"), gap="300-500", mech="multihome"),
        "lte alone": per_seed(read(results, "vehicular_lte_alone")),
    }
    seeds = sorted(set.intersection(*(set(v) for v in runs.values())))
    # Bytes of each file from its goodput and time; the sum's time is bytes / summed goodput.
    sums = {}
    for s in seeds:
        t, g = runs["aggregate"][s]
        total = g * t
        sums[s] = (total / (runs["wifi alone"][s][1] + runs["lte alone"][s][1]), 0.0)
    runs["sum of interfaces"] = sums
    ratio = [
        runs["aggregate"][s][1] / (runs["wifi alone"][s][1] + runs["lte alone"][s][1])
        for s in seeds
    ]
    res = {
        "seeds": len(seeds),
        "median_s": {m: median(v[s][0] for s in seeds) for m, v in runs.items()},
        "aggregate_over_sum_median": median(ratio),
        "aggregate_over_sum_min": min(ratio),
    }
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for m, v in runs.items():
        xs = sorted(v[s][0] for s in seeds)
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        ax.step(
            xs,
            ys,
            where="post",
            label=f"{m} (median {res['median_s'][m]:.1f} s)",
            linestyle="--" if m == "sum of interfaces" else "-",
        )
    ax.set_title(
        f"Wi-Fi ([300, 500] m drive) + steady LTE 5 Mbit/s (simulator, n={len(seeds)})\n"
        f"aggregate goodput / sum of interfaces alone: median "
        f"{res['aggregate_over_sum_median']:.2f}",
        fontsize=9,
    )
    ax.set_xlabel("transfer time of a 60-80 MB file (s)")
    ax.set_ylabel("CDF")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "vehicular_lte.png", dpi=110)
    plt.close(fig)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--results", type=Path, default=Path("sim/results"))
    args = ap.parse_args()
    out = args.results / "plots"
    out.mkdir(parents=True, exist_ok=True)
    for gap, g in vehicular(args.results, out).items():
        meds = ", ".join(f"{m} {v:.1f} s" for m, v in g["median_s"].items())
        gains = ", ".join(
            f"{m} {100 * v['median_gain']:.1f} % (paired {100 * v['paired_gain_median']:.1f} %)"
            for m, v in sorted(g["gains"].items())
        )
        print(f"{gap}: medians {meds}; gain {gains}; paper {100 * g['paper_gain']:.0f} %")
        print(f"  runs {g['runs']}")
    try:
        res = lte(args.results, out)
    except FileNotFoundError as e:
        print(f"lte: skipped ({e})")
        return
    meds = ", ".join(f"{m} {v:.1f} s" for m, v in res["median_s"].items())
    print(f"lte ({res['seeds']} seeds): medians {meds}")
    print(
        f"  aggregate goodput / (wifi alone + lte alone): median "
        f"{res['aggregate_over_sum_median']:.3f}, min {res['aggregate_over_sum_min']:.3f}"
    )


if __name__ == "__main__":
    main()
