"""The ``detours`` suite's figure: one bar chart per scenario, like Brennan's slides 37-46.

Role: draw goodput per mechanism (bars side by side per congestion control) for each of the
six scenarios, with the wire rate of the default route and of both routes together as
dashed lines, and mark mechanisms that were not available or failed. Nothing is computed
here that is not in the result file.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from lab.bench.detours_run import LABELS  # noqa: E402

COLORS = {"cubic": "#4c72b0", "bbr": "#dd8452"}
TITLES = {
    "symmetric/normal": "Symmetric",
    "symmetric/loss": "Symmetric, 1 % loss on link 2",
    "symmetric/delay": "Symmetric, +100 ms on link 2",
    "core-limited/normal": "Core-limited",
    "core-limited/loss": "Core-limited, 1 % loss on link 2",
    "core-limited/delay": "Core-limited, +100 ms on link 2",
}


def plot(table: dict, mechs, ccs, cases: list[dict]) -> plt.Figure:  # noqa: ANN001
    """2 x 3 panels (networks x variations); returns the figure (saved by common.save)."""
    fig, axes = plt.subplots(2, 3, figsize=(15, 8), squeeze=False)
    caps = {c["case"]: c["capacity_mbit"] for c in cases}
    width = 0.8 / max(1, len(ccs))
    for ax, case in zip(axes.flat, TITLES, strict=True):
        ax.set_title(TITLES[case], fontsize=10)
        if case not in table:
            ax.axis("off")
            continue
        for j, cc in enumerate(ccs):
            g = table[case][cc]["goodput_mbps"]
            xs = [i + (j - (len(ccs) - 1) / 2) * width for i in range(len(mechs))]
            vals = [g.get(m) or 0.0 for m in mechs]
            bars = ax.bar(xs, vals, width, color=COLORS.get(cc), label=cc)
            for bar, m in zip(bars, mechs, strict=True):
                text = "n/a" if g.get(m) is None else f"{g[m]:.1f}"
                ax.annotate(
                    text,
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center",
                    va="bottom",
                    fontsize=6,
                )
        cap = caps[case]
        ax.axhline(cap["default"], ls="--", lw=0.8, color="grey")
        ax.axhline(cap["both"], ls=":", lw=0.8, color="grey")
        ax.set_xticks(range(len(mechs)))
        ax.set_xticklabels([LABELS[m] for m in mechs], fontsize=6.5)
        ax.set_ylabel("goodput (Mbit/s)")
        ax.set_ylim(0, cap["both"] * 1.15)
    axes[0][0].legend(fontsize=8, loc="lower left")
    fig.suptitle(
        "Upload client -> server (dashed: default route's rate; dotted: both routes')",
        fontsize=10,
    )
    return fig
