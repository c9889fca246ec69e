"""Figure of the ``cellular-drive`` suite: goodput, longest stall, link state changes per pair.

Role: three panels, one group of bars per trace pair and one bar per policy (kernel MPTCP's
goodput beside them when measured): bulk goodput, the longest stall while any link delivered
(the 0.3 s bar drawn), and the client's Down transitions against the traces' real outages.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from lab.bench.common import figure

POLICIES = ("best", "aggregate", "redundant", "stream")
COLORS = {"best": "tab:blue", "aggregate": "tab:green", "redundant": "tab:orange",
          "stream": "tab:purple", "mptcp": "tab:gray"}  # fmt: skip


def plot(results: list[dict]) -> plt.Figure | None:
    pairs = [p for p in results if "summary" in p]
    if not pairs:
        return None
    fig, (ax_g, ax_s, ax_c) = figure(3, width=15, height=4.2)
    width = 0.2
    for j, pol in enumerate((*POLICIES, "mptcp")):
        xs, good, stall, downs = [], [], [], []
        for i, p in enumerate(pairs):
            s = p["summary"].get(pol)
            if s is None:
                continue
            xs.append(i + (j - 1.5) * width)
            good.append(s["goodput_mbps"] or 0.0)
            stall.append(s.get("longest_stall_any_link_s"))
            downs.append(s.get("downs"))
        if not xs:
            continue
        ax_g.bar(xs, good, width, label=pol, color=COLORS[pol])
        if pol != "mptcp":
            ax_s.bar(xs, stall, width, label=pol, color=COLORS[pol])
            ax_c.bar(xs, downs, width, label=f"{pol}: Down transitions", color=COLORS[pol])
    # Every policy of a pair ran on the same traces: the first one's count stands for all.
    outages = [next(iter(p["summary"].values()))["real_outages"] for p in pairs]
    ax_c.scatter(range(len(pairs)), outages, marker="_", s=900, color="black", zorder=3,
                 label="real outages (gaps >= detect_ms)")  # fmt: skip
    ax_s.axhline(0.3, color="red", linestyle="--", label="bar 0.3 s")
    # Headroom for the legend above the tallest bar.
    counts = [s.get("downs") or 0 for p in pairs for s in p["summary"].values()]
    ax_c.set_ylim(0, 1.5 * max([*counts, *outages, 1]))
    names = [p["name"] for p in pairs]
    for ax, title, unit, where in (
        (ax_g, "bulk download goodput", "Mbit/s", "upper left"),
        (ax_s, "longest stall while any link delivers", "s", "upper left"),
        (ax_c, "link state changes vs real outages", "count (both links)", "upper right"),
    ):
        ax.set_xticks(range(len(pairs)), names, rotation=12, fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(unit)
        ax.legend(fontsize=7, loc=where)
    return fig
