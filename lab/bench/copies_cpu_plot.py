"""Suite ``copies-cpu``: the summary (loss onset, kernel/user CPU ratios) and the figure, in
the layout of the SMesh paper's Figs. 4-5 (CPU load and loss against packets/s).

Role: pure functions of the measured points (``lab/bench/copies_cpu.py``); nothing here
runs traffic.
"""

from __future__ import annotations

from statistics import median

from lab.bench.common import figure

COLORS = {
    "plain": "black",
    "user-2": "tab:orange",
    "kernel-2": "tab:blue",
    "user-3": "tab:red",
    "kernel-3": "tab:green",
}


def loss_onset(points: list[dict], threshold: float) -> int | None:
    """The lowest offered rate (packets/s) whose loss exceeds ``threshold``; None if none."""
    for p in sorted(points, key=lambda p: p["offered_pps"]):
        if p["loss"] > threshold:
            return p["offered_pps"]
    return None


def summarize(points: dict[str, list[dict]], threshold: float) -> dict:
    """Per mode the loss onset and CPU per packet; per copy count the kernel/user ratio at
    each rate both ran without loss, and its median and maximum."""
    out: dict = {"loss_onset_pps": {m: loss_onset(ps, threshold) for m, ps in points.items()}}
    out["cpu_us_per_packet"] = {
        m: {str(p["offered_pps"]): _r(p["cpu_us_per_packet"]["total"]) for p in ps}
        for m, ps in points.items()
        if ps and ps[0]["cpu_us_per_packet"] is not None
    }
    for k in (2, 3):
        user, kern = points.get(f"user-{k}"), points.get(f"kernel-{k}")
        if not user or not kern:
            continue
        ratios = {}
        for u, c in zip(user, kern, strict=True):
            if u["loss"] <= threshold and c["loss"] <= threshold:
                ratios[str(u["offered_pps"])] = _r(
                    c["cpu_us_per_packet"]["total"] / u["cpu_us_per_packet"]["total"]
                )
        out[f"kernel_to_user_cpu_{k}"] = ratios
        if ratios:
            out[f"kernel_to_user_cpu_{k}_median"] = _r(median(ratios.values()))
            out[f"kernel_to_user_cpu_{k}_max"] = _r(max(ratios.values()))
    return out


def _r(x: float) -> float:
    return round(x, 3)


def plot(points: dict[str, list[dict]], threshold: float):  # noqa: ANN201 - a Figure
    fig, (cpu, load, loss) = figure(3, width=15, height=4.2)
    for mode, ps in points.items():
        xs = [p["offered_pps"] for p in ps]
        color = COLORS.get(mode)
        style = "--" if mode.startswith("user") else "-"
        if ps and ps[0]["cpu_us_per_packet"] is not None:
            us = [p["cpu_us_per_packet"]["total"] for p in ps]
            cpu.plot(xs, us, style, marker="o", color=color, label=mode)
            pct = [sum(p["cpu_ns"].values()) / p["wall_s"] / 1e7 for p in ps]
            load.plot(xs, pct, style, marker="o", color=color, label=mode)
        loss.plot(xs, [p["loss"] * 100 for p in ps], style, marker="o", color=color, label=mode)
    cpu.set_ylabel("daemons' CPU per delivered packet (µs)")
    load.set_ylabel("daemons' CPU load (% of one core)")
    loss.set_ylabel("loss (%), both directions")
    loss.axhline(threshold * 100, color="grey", lw=0.8, ls=":")
    for ax in (cpu, load, loss):
        ax.set_xscale("log")
        ax.set_xlabel("offered packets/s (both directions; 100 per full-duplex stream)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    cpu.set_ylim(bottom=0)
    cpu.set_title("CPU per packet")
    load.set_title("CPU load (paper's Fig. 4)")
    loss.set_title("Loss (paper's Fig. 5)")
    return fig
