"""Figure of the ``handoff-voice`` suite: one-way delay CDFs of a voice stream's packets
around Wi-Fi handoffs (cf. Fig. 10 of Amir et al., *On Redundant Multipath Operating System
Support for Wireless Mesh Networks*), one panel per AP-gap range of the simulator and one for
the lab/simulator cross-check point; each curve over every packet sent in a window, so it
ends below 1 by the share lost; the legend gives the packets lost per handoff."""

from __future__ import annotations

import matplotlib.pyplot as plt

from lab.bench import handoff_stats as hs
from lab.bench.common import progress

COLORS = {
    "plain": "tab:red",
    "best": "tab:orange",
    "redundant": "tab:blue",
    "realtime": "tab:green",
}


def _curve(ax, pooled: dict, mech: str, style: str, label: str) -> None:  # noqa: ANN001
    xs, ys = hs.cdf(pooled["window"])
    f = hs.figures(pooled)
    if not xs:
        return
    # From 0 at the first delay, flat past the last one (a single bucket is a visible step).
    xs, ys = [xs[0], *xs, 5000], [0.0, *ys, ys[-1]]
    lost = f["lost_per_handoff_mean"]
    ax.step(
        xs,
        ys,
        where="post",
        color=COLORS[mech],
        linestyle=style,
        label=f"{label} ({lost:.1f} lost/handoff)" if lost is not None else label,
    )


def _axes(ax, title: str) -> None:  # noqa: ANN001
    ax.set_title(title, fontsize=10)
    ax.set_xscale("log")
    ax.set_xlim(5, 5000)
    ax.axvline(hs.DEADLINE_S * 1e3, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xlabel("one-way delay (ms), packets sent around a handoff")
    ax.set_ylabel("share delivered")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=7)


def plot(sim: dict, cross_sim: dict, lab: dict):  # noqa: ANN201 - a matplotlib Figure
    points = sorted(sim)
    rows = (len(points) + 1 + 2) // 3
    fig, grid = plt.subplots(rows, 3, figsize=(15, 4.3 * rows), squeeze=False)
    axes = list(grid.flat)
    for ax in axes[len(points) + 1 :]:
        ax.set_visible(False)
    for ax, point in zip(axes, points, strict=False):
        for mech in COLORS:
            if mech in sim[point]:
                _curve(ax, sim[point][mech], mech, "-", mech)
        runs = max((p.get("runs") or 0) for p in sim[point].values())
        _axes(ax, f"simulator: {point}\n{runs} drives of 300 s")
    progress(f"plot: {len(points)} simulator points and the cross-check")
    ax = axes[len(points)]
    for mech in COLORS:
        if mech in lab:
            _curve(ax, lab[mech], mech, "-", f"lab {mech}")
        if mech in cross_sim:
            _curve(ax, cross_sim[mech], mech, "--", f"sim {mech}")
    _axes(ax, "cross-check: APs 150 m apart, DHCP 1.5 s,\nedge 30 m to 50 % loss; lab and sim")
    return fig
