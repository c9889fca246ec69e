"""Suite ``vehicular-lte``: §4.2.2 of Mukherjee, *Network-Assisted Multihoming for Emerging
Heterogeneous Wireless Access Scenarios* (Figs. 4.3-4.4) in the lab, on one point.

Role: the drive of the ``vehicular`` suite's cross-check point (APs 400 m apart, DHCP 1.5 s,
a 70 MB file requested 2 s into the drive; lab/drive.py) with a steady, slower LTE link
beside the Wi-Fi one; the file downloaded three times on the same schedule:

- ``aggregate``: multihome striping over Wi-Fi and LTE (store-and-forward across the gaps);
- ``wifi-alone``: multihome ``only:wifi`` on the same two links (LTE carries keepalives);
- ``lte-alone``: plain TCP over LTE (no tunnel, no drive).

Reported: each transfer's time and goodput, throughput over time (1 s bins, from the
downloader's progress lines: the paper's Fig. 4.3), and the ratio of ``aggregate``'s
goodput to the sum of the two interfaces alone, next to the simulator's on the same point
(sim/scenarios/vehicular_lte_crosscheck.toml, with vehicular_crosscheck.toml's multihome run
as Wi-Fi alone; both run by the suite) and its 100-drive median (0.83, docs/EXPERIMENTS.md).

Links: Wi-Fi 20 Mbit/s, 10 ms one way, 250 kB queue (as ``vehicular``); LTE 5 Mbit/s, 30 ms,
62.5 kB. LTE is link 0 and Wi-Fi link 1, so that plain routing (link 0) is LTE alone.
"""

from __future__ import annotations

import json
import time

from lab.bench.common import figure, progress, save
from lab.bench.handoff_voice import run_sim
from lab.bench.vehicular_drive import DrivePlayer
from lab.drive import DriveParams, schedule, shifted
from lab.netns import REPO_ROOT, Lab, LabError, tool_cmd
from lab.topology import ORIGIN, LinkSpec, Topology
from lab.traffic import wait_listening

MECHS = ("aggregate", "wifi-alone", "lte-alone")
PARAMS = DriveParams(gap_m=(400.0, 400.0), dhcp_s=(1.5, 1.5))
START_S = 2.0
SIZE = 70_000_000
SEED = 3000  # the vehicular suite's fixed-400 trial
PORT = 8080
HORIZON_S = 600.0
SIM_PAPER_MEDIAN = 0.83  # vehicular_lte over 100 drives, docs/EXPERIMENTS.md
COLORS = {"aggregate": "tab:blue", "wifi-alone": "tab:red", "lte-alone": "black"}


def links() -> list[LinkSpec]:
    lte = {"rate": "5mbit", "delay": "30ms", "queue_bytes": 62_500}
    wifi = {"rate": "20mbit", "delay": "10ms", "queue_bytes": 250_000}
    return [LinkSpec("lte", linkem={"both": lte}), LinkSpec("wifi", linkem={"both": wifi})]


def progress_series(out: str) -> list[tuple[float, int]]:
    """(seconds, bytes) of rangeget's PROGRESS lines."""
    pts = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "PROGRESS":
            pts.append((float(parts[1]), int(parts[2])))
    return pts


def one(mech: str) -> dict:
    """One download of the file under ``mech`` on the fixed drive."""
    with Lab() as lab:
        tunnel = mech != "lte-alone"
        policy = "aggregate" if mech == "aggregate" else "only:wifi"
        topo = Topology(lab, links(), policy=policy, tunnel=tunnel)
        player = None
        if tunnel:
            DrivePlayer.prepare(topo, i=1)
            topo.start()
            atts = shifted(schedule(PARAMS, HORIZON_S, SEED), START_S)
            player = DrivePlayer(topo, atts, i=1, plain=False)
        server = topo.org.spawn(tool_cmd("rangeget", "serve", "--port", str(PORT)), "rangeget")
        wait_listening(server)
        args = ["get", "--host", ORIGIN, "--port", str(PORT), "--seed", str(SEED)]
        where = topo.lan if tunnel else topo.cli
        if player is not None:
            player.start()
        proc = where.spawn(tool_cmd("rangeget", *args, "--bytes", str(SIZE)), f"get-{mech}")
        try:
            proc.wait(timeout=HORIZON_S - 60)
        finally:
            if player is not None:
                player.stop()
        out = proc.output()
        res = next(
            (json.loads(ln[7:]) for ln in reversed(out.splitlines()) if ln.startswith("RESULT ")),
            None,
        )
        if res is None or res.get("error"):
            raise LabError(f"{mech}: the download failed: {proc.tail()}")
        return {
            "mechanism": mech,
            "seconds": res["seconds"],
            "goodput_mbps": SIZE * 8 / res["seconds"] / 1e6,
            "progress": progress_series(out),
        }


def sim_point() -> dict:
    """The simulator's figures on the same point (runs both scenarios)."""
    for name in ("vehicular_lte_crosscheck", "vehicular_crosscheck"):
        run_sim(REPO_ROOT / "sim" / "scenarios" / f"{name}.toml")
    res = REPO_ROOT / "sim" / "results"

    def flow(folder: str, mech: str) -> dict:
        return json.loads((res / folder / f"mech={mech}_s1.json").read_text())["flows"][0]

    got = {
        "aggregate": flow("vehicular_lte_crosscheck", "aggregate"),
        "lte-alone": flow("vehicular_lte_crosscheck", "lte-alone"),
        "wifi-alone": flow("vehicular_crosscheck", "multihome"),
    }
    return {
        m: {"seconds": f["completion_s"], "goodput_mbps": f["goodput_mbit"]} for m, f in got.items()
    }


def ratio(figs: dict) -> float:
    g = {m: figs[m]["goodput_mbps"] for m in MECHS}
    return g["aggregate"] / (g["wifi-alone"] + g["lte-alone"])


def binned(series: list[tuple[float, int]], width: float = 1.0) -> tuple[list, list]:
    """Throughput (Mbit/s) per ``width``-second bin from cumulative progress points."""
    xs, ys, prev_t, prev_b = [], [], 0.0, 0
    t = width
    for when, got in series:
        while when >= t:
            xs.append(t)
            ys.append((got - prev_b) * 8 / (when - prev_t) / 1e6 if when > prev_t else 0.0)
            t += width
        if when >= t - width:
            prev_t, prev_b = when, got
    return xs, ys


def plot(lab: dict, sim: dict):  # noqa: ANN201 - a matplotlib Figure
    fig, (ax, bx) = figure(ncols=2, width=12, height=4.2)
    series = {m: binned(lab[m]["progress"]) for m in MECHS}
    for m in MECHS:
        ax.plot(*series[m], color=COLORS[m], label=f"{m} ({lab[m]['seconds']:.1f} s)")
    w, lte = series["wifi-alone"], series["lte-alone"]
    n = min(len(w[0]), len(lte[0]))
    ax.plot(
        w[0][:n],
        [a + b for a, b in zip(w[1][:n], lte[1][:n], strict=True)],
        color="tab:green",
        linestyle="--",
        label="Wi-Fi alone + LTE alone",
    )
    ax.set_xlabel("seconds since the request")
    ax.set_ylabel("goodput (Mbit/s, 1 s bins)")
    ax.set_title("lab: 70 MB, APs 400 m apart, LTE 5 Mbit/s beside (cf. Fig. 4.3)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    labels = ["lab", "simulator"]
    vals = [ratio(lab), ratio(sim)]
    bx.bar(labels, vals, color=["tab:blue", "tab:gray"])
    bx.axhline(
        SIM_PAPER_MEDIAN, color="black", linestyle=":", label="simulator, 100 drives (median)"
    )
    for i, v in enumerate(vals):
        bx.annotate(f"{v:.2f}", (i, v), ha="center", va="bottom")
    bx.set_ylim(0, 1.1)
    bx.set_ylabel("aggregate goodput / (Wi-Fi alone + LTE alone)")
    bx.set_title("the same point in the lab and the simulator", fontsize=10)
    bx.legend(fontsize=8, loc="lower right")
    return fig


def main() -> None:
    lab = {}
    for mech in MECHS:
        t0 = time.monotonic()
        lab[mech] = one(mech)
        progress(
            f"lab {mech}: {lab[mech]['seconds']:.1f} s, {lab[mech]['goodput_mbps']:.2f} Mbit/s "
            f"(wall {time.monotonic() - t0:.0f} s)"
        )
    sim = sim_point()
    summary = {
        "lab": {m: {k: lab[m][k] for k in ("seconds", "goodput_mbps")} for m in MECHS},
        "sim": sim,
        "ratio_lab": ratio(lab),
        "ratio_sim": ratio(sim),
        "ratio_sim_median_100_drives": SIM_PAPER_MEDIAN,
    }
    progress(
        f"aggregate / (Wi-Fi alone + LTE alone): lab {summary['ratio_lab']:.3f}, "
        f"simulator {summary['ratio_sim']:.3f}"
    )
    data = {
        "params": {
            "drive": PARAMS.__dict__,
            "start_s": START_S,
            "bytes": SIZE,
            "links": {"wifi": "20 Mbit/s, 10 ms, 250 kB", "lte": "5 Mbit/s, 30 ms, 62.5 kB"},
        },
        "summary": summary,
        "lab": lab,
    }
    save("vehicular-lte", data, plot(lab, sim))
