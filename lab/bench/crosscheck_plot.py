"""The figure of the ``crosscheck`` suite: lab vs simulator goodput, and their ratio.

Role: one 1 x 2 figure from the suite's comparison: (a) goodput per system (multihome over
both links, plain TCP over link a, over link b), the lab's median bar with every run as a
dot beside the simulator's bar; (b) the ratio simulator / lab per system against the
tolerance band.

Invariant: a system the lab could not measure leaves a gap, never a zero.
"""

from __future__ import annotations

from matplotlib.patches import Patch

from lab.bench.common import figure

LAB, SIM = "tab:blue", "tab:orange"


def plot(cmp: dict, tolerance: float):  # noqa: ANN201 (a matplotlib Figure)
    fig, (ax, bx) = figure(ncols=2, width=10, height=4)
    labels = list(cmp)
    for k, label in enumerate(labels):
        c = cmp[label]
        if c["lab_goodput_mbps"] is not None:
            ax.bar(k - 0.2, c["lab_goodput_mbps"], 0.4, color=LAB)
            runs = c["lab_runs_mbps"]
            ax.scatter([k - 0.2] * len(runs), runs, color="black", s=6, zorder=3)
        ax.bar(k + 0.2, c["sim_goodput_mbps"], 0.4, color=SIM)
        if c["ratio_sim_to_lab"] is not None:
            bx.bar(k, c["ratio_sim_to_lab"], 0.5, color=SIM if c["within_tolerance"] else "red")
    ax.set_xticks(range(len(labels)), labels)
    ax.set_ylabel("goodput, one CUBIC upload (Mbit/s)")
    ax.set_title("(a) goodput: lab (median, runs as dots) vs simulator")
    ax.legend(handles=[Patch(color=LAB, label="lab"), Patch(color=SIM, label="simulator")])
    bx.axhspan(1 - tolerance, 1 + tolerance, color="tab:green", alpha=0.15)
    bx.axhline(1, color="black", lw=0.8)
    bx.set_xticks(range(len(labels)), labels)
    bx.set_ylim(0.5, 1.5)
    bx.set_ylabel("simulator / lab")
    bx.set_title(f"(b) ratio; band = ±{tolerance:.0%}")
    return fig
