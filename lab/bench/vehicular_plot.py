"""Figure of the ``vehicular`` suite: transfer-time CDFs per AP-distance range (cf. Fig. 4.2 of
Mukherjee, *Network-Assisted Multihoming*), one panel per range, one curve per mechanism,
the medians and the gain next to the paper's in the title."""

from __future__ import annotations

from lab.bench.common import figure

COLORS = {"tcp-resume": "tab:red", "multihome": "tab:blue"}


def cdf(values: list[float]) -> tuple[list[float], list[float]]:
    xs = sorted(values)
    return xs, [(i + 1) / len(xs) for i in range(len(xs))]


def plot(records: list[dict], summary: dict):  # noqa: ANN201 - a matplotlib Figure
    names = sorted({r["range"] for r in records})
    fig, axes = figure(ncols=len(names), width=5.5 * len(names), height=4)
    for ax, name in zip(axes, names, strict=True):
        for mech, color in COLORS.items():
            xs = [
                r["seconds"]
                for r in records
                if r["range"] == name
                and r["mechanism"] == mech
                and r.get("seconds")
                and r.get("error") is None
            ]
            if xs:
                x, y = cdf(xs)
                ax.step(x, y, where="post", color=color, label=f"{mech} (n={len(xs)})")
        s = summary.get(name)
        title = f"AP gap {name} m"
        if s:
            title += f"\nmedian gain {100 * s['median_gain']:.1f} %"
            if s["paper_gain"] is not None:
                title += f" (paper {100 * s['paper_gain']:.0f} %)"
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("transfer time of a 60-80 MB file (s)")
        ax.set_ylabel("CDF")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    return fig
