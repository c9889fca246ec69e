"""Figure of the ``realtime-media`` suite: delay CDFs per case, on-time frames and extra bytes.

Role: one PNG/SVG (lab/bench/common.py ``save``): a row of one-way delay CDFs of the video
packets per case (every policy, the deadline as a vertical line; the CDF reaches only the
fraction of packets that arrived), then two bar charts over all cases: frames on time (%)
and extra bytes over ``best`` (%) per policy. Reads only the result dict.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

COLORS = {
    "realtime+fec": "tab:green",
    "realtime-nofec": "tab:olive",
    "redundant": "tab:blue",
    "aggregate": "tab:orange",
    "best": "tab:gray",
}
DELAY_MAX_MS = 300


def _cdf(ax, case: dict, deadline_ms: float) -> None:  # noqa: ANN001
    for label, rec in case["policies"].items():
        v = rec["video"]
        q = v["delay_cdf_ms"]
        if not q:
            continue
        got = v["packets_received"] / v["packets_sent"] if v["packets_sent"] else 0
        ys = [got * i / (len(q) - 1) for i in range(len(q))]
        ax.plot([min(x, DELAY_MAX_MS) for x in q], ys, label=label, color=COLORS.get(label))
    ax.axvline(deadline_ms, color="red", linestyle=":", linewidth=1)
    ax.set_xlim(0, DELAY_MAX_MS)
    ax.set_ylim(0, 1.0)
    ax.set_title(case["name"], fontsize=9)
    ax.set_xlabel("one-way delay, video packets (ms)", fontsize=8)
    ax.tick_params(labelsize=7)


def _bars(ax, cases: list[dict], key: str, title: str) -> None:  # noqa: ANN001
    labels = list(COLORS)
    width = 0.8 / len(labels)
    for j, label in enumerate(labels):
        vals = [100 * (c["policies"].get(label, {}).get(key) or 0) for c in cases]
        xs = [i + (j - (len(labels) - 1) / 2) * width for i in range(len(cases))]
        ax.bar(xs, vals, width, label=label, color=COLORS[label])
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels([c["name"] for c in cases], fontsize=7, rotation=20)
    ax.set_title(title, fontsize=9)
    ax.tick_params(labelsize=7)
    ax.grid(axis="y", alpha=0.3)


def plot(results: list[dict], deadline_ms: float) -> plt.Figure | None:
    cases = [c for c in results if c.get("policies")]
    if not cases:
        return None
    n = len(cases)
    cols = max(n, 2)
    fig = plt.figure(figsize=(max(10, 2.6 * cols), 8))
    grid = fig.add_gridspec(2, cols)
    for i, c in enumerate(cases):
        ax = fig.add_subplot(grid[0, i])
        _cdf(ax, c, deadline_ms)
        if i == 0:
            ax.set_ylabel("fraction of packets sent", fontsize=8)
            ax.legend(fontsize=6, loc="lower right")
    half = cols // 2
    ax = fig.add_subplot(grid[1, :half])
    _bars(ax, cases, "frames_on_time", "video frames on time (%)")
    lowest = min(
        100 * (r.get("frames_on_time") or 0) for c in cases for r in c["policies"].values()
    )
    ax.set_ylim(max(0, lowest - 5), 100.5)
    ax.legend(fontsize=6)
    ax = fig.add_subplot(grid[1, half:])
    _bars(ax, cases, "extra_bytes", "extra bytes sent over best (%)")
    return fig
