"""The figure of the ``aggregate`` suite: goodput, ping RTT, reorder and trace-driven goodput.

Role: one 2 x 2 figure from the suite's results: (a) goodput per system per fixed case, the
summed link rate drawn as a line over each case; (b) ping RTT during the transfer per system
(median bar, p95 whisker, idle median as a tick); (c) multihome's reorder-buffer occupancy
and reorder density, earliest vs weighted; (d) trace-driven goodput of multihome, kernel
MPTCP and the best single link, with the capacity the traces offered as a line.

Invariant: bars are medians over runs, every run's value is drawn as a dot on its bar; a
failed case or pair leaves a gap, never a zero that reads as a measurement.
"""

from __future__ import annotations

from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from lab.bench.common import plt  # the Agg backend, selected there

COLORS = {
    "multihome-earliest": "tab:blue",
    "multihome-weighted": "tab:cyan",
    "stream": "tab:green",
    "mptcp": "tab:orange",
    "tcp:0": "tab:grey",
    "tcp:1": "silver",
    "tcp:2": "gainsboro",
    "best single": "tab:grey",
}


def order(label: str) -> tuple[int, str]:
    """Sort key of a system label: the order of COLORS (a JSON read back has sorted keys)."""
    return (list(COLORS).index(label) if label in COLORS else len(COLORS), label)


def _labels(cases: list[dict]) -> list[str]:
    return sorted(dict.fromkeys(k for c in cases for run in c["runs"] for k in run), key=order)


def _bars(ax, cases: list[dict], labels: list[str], value) -> None:  # noqa: ANN001
    """Grouped bars: one group per case, one bar per label; ``value(rec)`` per run."""
    width = 0.8 / max(1, len(labels))
    for j, lab in enumerate(labels):
        for k, c in enumerate(cases):
            ys = [value(run[lab]) for run in c["runs"] if lab in run]
            ys = [y for y in ys if y is not None]
            if not ys:
                continue
            x = k - 0.4 + (j + 0.5) * width
            ys.sort()
            ax.bar(x, ys[len(ys) // 2], width, color=COLORS.get(lab, "tab:purple"))
            ax.scatter([x] * len(ys), ys, color="black", s=6, zorder=3)
    ax.set_xticks(range(len(cases)), [c["name"] for c in cases], fontsize=8)


def _legend(ax, labels: list[str], extra: list | None = None, **kw: object) -> None:  # noqa: ANN001
    """A legend with one colour patch per system (empty bars carry no colour) plus ``extra``."""
    handles = [Patch(color=COLORS.get(lab, "tab:purple"), label=lab) for lab in labels]
    ax.legend(handles=[*handles, *(extra or [])], fontsize=6, **kw)


def _goodput(ax, cases: list[dict]) -> None:
    labels = _labels(cases)
    _bars(ax, cases, labels, lambda r: r["goodput_mbps"])
    for k, c in enumerate(cases):
        ax.plot([k - 0.45, k + 0.45], [c["sum_mbit"]] * 2, color="red", lw=1.2)
        ax.plot([k - 0.45, k + 0.45], [0.95 * c["sum_mbit"]] * 2, color="red", lw=0.8, ls=":")
    extra = [
        Line2D([], [], color="red", label="sum of link rates"),
        Line2D([], [], color="red", ls=":", label="95 % of the sum"),
    ]
    ax.set_ylabel("goodput, one CUBIC flow (Mbit/s)")
    ax.set_title("(a) goodput per system")
    ax.set_ylim(0, 1.3 * max((c["sum_mbit"] for c in cases), default=1))
    _legend(ax, labels, extra, ncol=3, loc="upper right")


def _rtt(ax, cases: list[dict]) -> None:
    labels = _labels(cases)
    width = 0.8 / max(1, len(labels))
    for j, lab in enumerate(labels):
        for k, c in enumerate(cases):
            s = c["summary"].get(lab)
            if not s or s["rtt_during_median_ms"] is None:
                continue
            x = k - 0.4 + (j + 0.5) * width
            med, p95 = s["rtt_during_median_ms"], s["rtt_during_p95_ms"]
            ax.bar(x, med, width, color=COLORS.get(lab, "tab:purple"))
            ax.errorbar(x, med, yerr=[[0], [p95 - med]], color="black", lw=0.8, capsize=2)
            if s["rtt_idle_median_ms"] is not None:
                ax.scatter([x], [s["rtt_idle_median_ms"]], marker="_", color="red", s=60, zorder=3)
    ax.set_xticks(range(len(cases)), [c["name"] for c in cases], fontsize=8)
    ax.set_ylabel("ping RTT during transfer (ms): median, p95")
    ax.set_title("(b) RTT under load (10 Hz ping)")
    idle = Line2D([], [], marker="_", ls="", color="red", markersize=10, label="idle median")
    _legend(ax, labels, [idle], ncol=2, loc="upper left")


def _reorder(ax, cases: list[dict]) -> None:
    labels = [lab for lab in _labels(cases) if lab.startswith("multihome-")]
    if not labels:
        ax.set_axis_off()
        return

    def occupancy(rec: dict) -> float | None:
        ro = rec.get("reorder") or {}
        occ = ro.get("mean_occupancy")
        return occ if occ is not None else ro.get("mean_occupancy_since_start")

    _bars(ax, cases, labels, occupancy)
    ax.set_ylabel(
        "mean reorder-buffer occupancy (packets)\n(since daemon start if no per-run data)"
    )
    twin = ax.twinx()
    width = 0.8 / len(labels)
    for j, lab in enumerate(labels):
        for k, c in enumerate(cases):
            ro = (c["summary"].get(lab) or {}).get("reorder") or {}
            dens = ro.get("reorder_density")
            if dens is None:
                dens = ro.get("held_fraction")
            if dens is not None:
                x = k - 0.4 + (j + 0.5) * width
                twin.scatter([x], [dens], marker="D", color="tab:red", s=20, zorder=4)
    twin.set_ylabel("fraction of packets out of sequence")
    twin.set_ylim(0, 1.05)
    dens = Line2D(
        [], [], marker="D", ls="", color="tab:red", label="reorder density (else held fraction)"
    )
    _legend(ax, labels, [dens], loc="upper left")
    ax.set_title("(c) multihome receiver reorder: earliest vs weighted")


def _traces(ax, pairs: list[dict]) -> None:
    if not pairs:
        ax.text(0.5, 0.5, "no trace pairs run", ha="center", va="center")
        ax.set_axis_off()
        return
    # "best single" = the better of the plain TCP flows of that run.
    shown = []
    for p in pairs:
        runs = []
        for run in p["runs"]:
            singles = [rec for key, rec in run.items() if key.startswith("tcp:")]
            best = max(singles, key=lambda r: r["goodput_mbps"]) if singles else None
            row = {k: v for k, v in run.items() if not k.startswith("tcp:")}
            if best is not None:
                row["best single"] = best
            runs.append(row)
        shown.append({**p, "runs": runs})
    labels = _labels(shown)
    _bars(ax, shown, labels, lambda r: r["goodput_mbps"])
    for k, p in enumerate(shown):
        caps = [sum(rec["window_mean_mbit"]) for run in p["runs"] for rec in run.values()]
        if caps:
            ax.plot([k - 0.45, k + 0.45], [sum(caps) / len(caps)] * 2, color="red", lw=1.2)
    cap = Line2D([], [], color="red", label="traces' mean rate while flowing (sum)")
    ax.set_ylabel("goodput (Mbit/s)")
    ax.set_title("(d) trace-driven links (a = Wi-Fi, b = LTE)")
    ax.set_ylim(0, 1.3 * ax.get_ylim()[1])
    _legend(ax, labels, [cap], ncol=2, loc="upper right")
    ax.tick_params(axis="x", labelrotation=10)


def plot(cases: list[dict], pairs: list[dict]) -> plt.Figure:
    cases = [c for c in cases if not c.get("error")]
    pairs = [p for p in pairs if not p.get("error")]
    fig, axes = plt.subplots(2, 2, figsize=(14, 9))
    _goodput(axes[0][0], cases)
    _rtt(axes[0][1], cases)
    _reorder(axes[1][0], cases)
    _traces(axes[1][1], pairs)
    fig.suptitle("aggregate: one TCP flow (CUBIC, upload) over unequal links")
    return fig
