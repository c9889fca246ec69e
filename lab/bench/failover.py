"""Suite ``failover``: one link cut mid-transfer; the gap in delivered bytes, and survival.

Role: on lab/scenarios/failover.toml (link a 20 Mbit/s 10 ms, link b 10 Mbit/s 25 ms, both
linkem) run one bulk connection (``cli`` sends to ``srv`` for 15 s, CUBIC) and cut link a
with ``linkem down`` (queue flushed, carrier kept: the endpoints see no interface event) 5 s
after the connection opened; link a stays down for the rest of the run. Measured at the
receiver: the longest time between two receptions (``max_gap_s``), the goodput before and
after, and whether the connection survived (every byte the sender wrote arrived, no error).

Why an upload: kernel MPTCP here (6.18, in-kernel path manager) opens its extra subflows only
once the client has sent data that the server acknowledged at the MPTCP level; a client that
only receives (a pure download) never sends MP_JOIN and stays on one subflow, so a download
would measure plain TCP, not MPTCP. Measured in this lab, recorded in docs/EXPERIMENTS.md.

Systems: multihome with each policy (a fresh topology per policy, since the policy is client
configuration) and kernel MPTCP (subflows over both links, initial subflow on link a).

``--download``: stream mode alone, the origin sending to the LAN host (``srv`` sends for 15 s,
measured at the LAN host), saved as ``failover-download`` (``-TAG`` with ``--tag``). Stream
mode opens every subflow from the client whatever the direction, so a download uses both
links; the cut link carries the initial subflow (link a is first in the config), the case
where only the client's steering and its REMOVE_ADDR reach the server. ``--stream-set
KEY=VALUE`` sets keys of the client's ``[stream]`` for an A/B (e.g. ``remove_addr=false``).
"""

from __future__ import annotations

import statistics
import threading
import time

from lab import mptcp
from lab.bench.common import figure, progress, save
from lab.bench.transfer import run_transfer
from lab.netns import Lab, LabError
from lab.scenario import load


def goodput(timeline: list[int], bin_ms: float, t0: float, t1: float) -> float:
    """Mbit/s received between ``t0`` and ``t1`` seconds (timeline = cumulative per bin)."""
    i0, i1 = int(t0 * 1000 / bin_ms), int(t1 * 1000 / bin_ms)
    i1 = min(i1, len(timeline) - 1)
    if i1 <= i0:
        return 0.0
    return (timeline[i1] - timeline[i0]) * 8 / ((i1 - i0) * bin_ms / 1000) / 1e6


def one_run(  # noqa: PLR0913 - the run's parameters
    topo,  # noqa: ANN001
    system: str,
    *,
    seconds: float,
    cut_at: float,
    cut: int,
    port: int,
    download: bool = False,
) -> dict:
    link = topo.emulated[cut]
    timer = threading.Timer(cut_at, link.down)

    def start_timer(client) -> None:  # noqa: ANN001 - a lab.netns.Proc
        # Time zero is the client's connect (its CONNECTED line), as in the receiver's timeline.
        deadline = time.monotonic() + 10
        while "CONNECTED" not in client.output() and time.monotonic() < deadline:
            time.sleep(0.005)
        timer.start()

    sending: dict = {"client_send_seconds": seconds}
    if download:
        # The LAN host half-closes only at the end: its FIN becomes the MPTCP connection's
        # DATA_FIN, after which the server's kernel refuses new subflows.
        sending = {"server_send_seconds": seconds, "client_close_after": seconds}
    try:
        res = run_transfer(
            topo,
            system,
            timeout=seconds + 90,
            port=port,
            during=start_timer,
            **sending,
        )
    finally:
        timer.cancel()
        link.up()
    # The receiver's view: the server's result in an upload, the client's in a download.
    snd, rcv = res.get("client", {}), res.get("server", {})
    if download:
        snd, rcv = rcv, snd
    survived = (
        "error" not in res
        and rcv.get("error") is None
        and snd.get("error") is None
        and snd.get("sent", -1) == rcv.get("received")
        and rcv.get("received", 0) > 0
    )
    tl, bin_ms = rcv.get("timeline", [0]), rcv.get("bin_ms", 100)
    return {
        "system": system,
        "survived": survived,
        "max_gap_s": rcv.get("max_gap_s"),
        "gap_at_s": rcv.get("gap_at_s"),
        "seconds": snd.get("seconds"),
        "before_mbps": goodput(tl, bin_ms, 1, cut_at),
        "after_mbps": goodput(tl, bin_ms, cut_at + 2, seconds),
        "timeline": tl,
        "bin_ms": bin_ms,
        "error": res.get("error") or snd.get("error") or rcv.get("error"),
        "link_bytes": res.get("link_bytes"),
        "mptcp_counters": res.get("mptcp_counters"),
    }


LABELS = {"mptcp": "kernel MPTCP", "stream": "multihome stream"}


def run_config(  # noqa: PLR0913 - the configuration's parameters
    sc,  # noqa: ANN001
    policy: str,
    systems: list[str],
    runs: int,
    b: dict,
    *,
    download: bool = False,
    stream_set: dict | None = None,
) -> list[dict]:
    out = []
    with Lab() as lab:
        topo = sc.topology(lab, policy=policy)
        if "stream" in systems:
            topo.set_stream(True, "cubic")
            topo.client_sections["stream"].update(stream_set or {})
        topo.start()
        if "mptcp" in systems:
            mptcp.enable(topo)
        cut_name = topo.links[b["cut_link"]].name
        for r in range(runs):
            for system in systems:
                label = LABELS.get(system, f"multihome {policy}")
                res = one_run(
                    topo,
                    system,
                    seconds=b["seconds"],
                    cut_at=b["cut_at_s"],
                    cut=b["cut_link"],
                    port=9200 + r,
                    download=download,
                )
                res["label"] = label
                res["policy"] = policy if system == "multihome" else None
                out.append(res)
                progress(
                    f"  {label:22} run {r + 1}/{runs}: gap {res['max_gap_s'] or 0:6.2f} s at "
                    f"{res['gap_at_s'] or 0:5.2f} s, {res['before_mbps']:5.1f} -> "
                    f"{res['after_mbps']:5.1f} Mbit/s, "
                    f"{'survived' if res['survived'] else 'DIED: ' + str(res['error'])[:80]}"
                )
                try:
                    topo.wait_link_state(cut_name, "up", timeout=15)
                except LabError as exc:
                    progress(f"  link {cut_name} not back up: {exc}")
                time.sleep(1)
        topo.stop()
    return out


def plot(results: list[dict], b: dict):
    fig, (ax1, ax2) = figure(2, width=12, height=4.5)
    labels = list(dict.fromkeys(r["label"] for r in results))
    for label in labels:
        run = next(r for r in results if r["label"] == label)
        tl, bin_s = run["timeline"], run["bin_ms"] / 1000
        rates = [(tl[i] - (tl[i - 1] if i else 0)) * 8 / bin_s / 1e6 for i in range(len(tl))]
        ax1.plot([(i + 1) * bin_s for i in range(len(tl))], rates, lw=0.9, label=label)
    ax1.axvline(b["cut_at_s"], color="red", ls="--", lw=1, label="link a cut")
    ax1.set_xlabel("time since connect (s)")
    ax1.set_ylabel(f"goodput per {b.get('bin_ms', 100)} ms bin (Mbit/s)")
    ax1.set_title("first run of each system")
    ax1.legend(fontsize=7)
    gaps = [[r["max_gap_s"] or 0 for r in results if r["label"] == lb] for lb in labels]
    ax2.boxplot(gaps, tick_labels=labels, vert=True)
    for k, label in enumerate(labels):
        died = sum(not r["survived"] for r in results if r["label"] == label)
        ax2.text(k + 1, 0, f"died {died}", ha="center", va="bottom", fontsize=8, color="red")
    ax2.set_ylabel("longest gap in delivered bytes (s)")
    ax2.tick_params(axis="x", labelrotation=20, labelsize=8)
    ax2.set_title("gap at failover, all runs")
    return fig


def parse_stream_set(items: list[str] | None) -> dict:
    """``KEY=VALUE`` strings as [stream] keys: true/false as booleans, digits as integers."""
    out: dict = {}
    for item in items or []:
        key, _, value = item.partition("=")
        if value in ("true", "false"):
            out[key] = value == "true"
        else:
            out[key] = int(value) if value.isdigit() else value
    return out


def main(
    runs: int = 3,
    *,
    download: bool = False,
    stream_set: dict | None = None,
    tag: str | None = None,
) -> dict:
    sc = load("failover")
    b = sc.bench
    results: list[dict] = []
    if download:
        progress(f"failover download: stream mode, {runs} runs, {stream_set or {}}\n{sc.picture}")
        policy = b["policies"][0]
        results = run_config(sc, policy, ["stream"], runs, b, download=True, stream_set=stream_set)
    else:
        progress(
            f"failover: policies {b['policies']} + kernel MPTCP, {runs} runs each\n{sc.picture}"
        )
    for k, policy in enumerate([] if download else b["policies"]):
        progress(f"multihome policy {policy}")
        # Stream mode and kernel MPTCP ride along in the first topology (same links).
        systems = ["multihome", "stream", "mptcp"] if k == 0 else ["multihome"]
        results.extend(run_config(sc, policy, systems, runs, b, stream_set=stream_set))
    summary = {}
    for label in dict.fromkeys(r["label"] for r in results):
        rs = [r for r in results if r["label"] == label]
        summary[label] = {
            "runs": len(rs),
            "survived": sum(r["survived"] for r in rs),
            "median_gap_s": statistics.median(r["max_gap_s"] or 0 for r in rs),
            "max_gap_s": max(r["max_gap_s"] or 0 for r in rs),
            "median_before_mbps": statistics.median(r["before_mbps"] for r in rs),
            "median_after_mbps": statistics.median(r["after_mbps"] for r in rs),
        }
    params = {**b, "download": download, "stream_set": stream_set or {}}
    data = {"params": params, "summary": summary, "runs": results}
    name = "failover-download" if download else "failover"
    save(f"{name}-{tag}" if tag else name, data, plot(results, b))
    head = ("system", "survived", "gap median", "gap max", "before", "after")
    print("\n{:22} {:>9} {:>11} {:>8} {:>7} {:>6}".format(*head))
    for label, s in summary.items():
        print(
            f"{label:22} {s['survived']:>4}/{s['runs']:<4} {s['median_gap_s']:10.2f}s "
            f"{s['max_gap_s']:7.2f}s {s['median_before_mbps']:7.1f} {s['median_after_mbps']:6.1f}"
        )
    return data
