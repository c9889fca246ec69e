"""Figure and medians of the simulator's vehicular study (issue 16; Mukherjee, "Network-Assisted
Multihoming", §4.2.1, Fig. 4.2): transfer-time CDFs of 60-80 MB downloads from a car passing
Wi-Fi hotspots, plain TCP/IP with a resuming application against multihome, per AP-distance
range; the median gain next to the paper's 30 % ([100, 300] m) and 22 % ([300, 500] m), and the
gain under the paper's accounting (`multihome-gnrs`: 30-170 ms per association instead of
DHCP's 1-2 s, see sim/scenarios/vehicular.toml).

Reads sim/results/vehicular/summary.csv; writes sim/results/plots/vehicular.png and prints the
medians. Usage: .venv/bin/python sim/plot_vehicular.py [--results sim/results]
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
    for gap in PAPER_GAIN:
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
            "paper_gain": PAPER_GAIN[gap],
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


if __name__ == "__main__":
    main()
