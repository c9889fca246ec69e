"""Suite ``vehicular``: 60-80 MB downloads from a car passing Wi-Fi hotspots (issue 16).

Role: reproduce §4.2.1 of Mukherjee, *Network-Assisted Multihoming for Emerging Heterogeneous
Wireless Access Scenarios* in the lab. One Wi-Fi link (linkem: ``WIFI_RATE`` each way,
10 ms one way — the paper's 4 hops amortised to 10 ms core-to-edge — and a 100 ms queue)
is driven by a seeded schedule of lab/drive.py (10 m/s, inter-AP distance uniform in
[100, 300] m or [300, 500] m, 100 m effective range, a new address after a 1-2 s DHCP delay
at each association; lab/bench/vehicular_drive.py applies it). Each trial starts
U[0, 5] s after an association (the paper's §4.2.2 start rule) and downloads a file of
U[60, 80] MB from the origin, by two mechanisms on the same schedule, one after the other:

- ``tcp-resume``: plain TCP/IP, no tunnel; the downloader (lab/tools/rangeget.py
  ``--resume``) reconnects as soon as its address is gone and asks for the rest, the
  paper's "smart application";
- ``multihome``: the same downloader without resuming, through the tunnel with policy
  ``POLICY`` (``only:wifi``; on this one link the same as ``best``, which the results up to
  a3e5699 used) and store-and-forward: one TCP connection for the whole file.

Reported per AP-distance range: each trial's transfer time per mechanism, the medians and
the median gain ``1 - median(multihome) / median(tcp-resume)`` next to the paper's 30 %
([100, 300] m) and 22 % ([300, 500] m), the per-trial paired gain, and an oracle bound (the
time the link needs at ``WIFI_RATE`` counting only connected seconds). The simulator
(sim/scenarios/vehicular*.toml) gives the full CDF with many more drives.
"""

from __future__ import annotations

import random
import statistics
import time

from lab.bench.common import progress, save
from lab.bench.vehicular_drive import DrivePlayer
from lab.bench.vehicular_plot import plot
from lab.drive import Attachment, DriveParams, schedule, shifted
from lab.netns import Lab, LabError, tool_cmd
from lab.topology import ORIGIN, LinkSpec, Topology
from lab.traffic import wait_listening

WIFI_RATE_MBIT = 20
RANGES = {"100-300": (100.0, 300.0), "300-500": (300.0, 500.0)}
# The cross-check point with sim/scenarios/vehicular_crosscheck.toml: every draw fixed.
FIXED = "fixed-400"
PAPER_GAIN = {"100-300": 0.30, "300-500": 0.22}
POLICY = "only:wifi"
PORT = 8080
HORIZON_S = 900.0
MB = 1_000_000


def wifi_spec() -> LinkSpec:
    queue = int(WIFI_RATE_MBIT * 1e6 / 8 * 0.1)
    link = {"rate": f"{WIFI_RATE_MBIT}mbit", "delay": "10ms", "queue_bytes": queue}
    return LinkSpec("wifi", linkem={"both": link})


def drive_params(name: str) -> DriveParams:
    if name == FIXED:
        return DriveParams(gap_m=(400.0, 400.0), dhcp_s=(1.5, 1.5))
    return DriveParams(gap_m=RANGES[name])


def trials(name: str, runs: int, seed0: int) -> list[dict]:
    """Trial k of range ``name``: its drive (seed), start offset and file size."""
    if name == FIXED:
        return [{"range": FIXED, "seed": seed0, "start_s": 2.0, "bytes": 70 * MB}]
    out = []
    for k in range(runs):
        seed = seed0 + k
        rng = random.Random(seed * 7919)
        out.append(
            {
                "range": name,
                "seed": seed,
                "start_s": rng.uniform(0, 5),
                "bytes": int(rng.uniform(60, 80) * MB),
            }
        )
    return out


def oracle_s(atts: list[Attachment], size: int) -> float:
    """Seconds until ``size`` bytes fit in the connected time at the link's TCP goodput."""
    rate = WIFI_RATE_MBIT * 1e6 / 8 * 1448 / 1514
    need = size / rate
    for a in atts:
        lo = max(a.up, 0.0)
        if a.down - lo >= need:
            return lo + need
        need -= max(0.0, a.down - lo)
    return float("inf")


def one_trial(topo: Topology, trial: dict, mech: str) -> dict:
    params = drive_params(trial["range"])
    atts = shifted(schedule(params, HORIZON_S, trial["seed"]), trial["start_s"])
    player = DrivePlayer(topo, atts, plain=mech == "tcp-resume")
    args = ["get", "--host", ORIGIN, "--port", str(PORT), "--seed", str(trial["seed"])]
    args += ["--bytes", str(trial["bytes"])]
    if mech == "tcp-resume":
        args.append("--resume")
    player.start()
    proc = topo.cli.spawn(tool_cmd("rangeget", *args), f"get-{mech}-{trial['seed']}")
    try:
        proc.wait(timeout=HORIZON_S - 60)
    finally:
        player.stop()
    res = parse_result(proc.output())
    crossed = sum(1 for a in atts if 0 < a.up < (res.get("seconds") or 0))
    return {
        **trial,
        "mechanism": mech,
        **res,
        "attachments_crossed": crossed,
        "oracle_s": oracle_s(atts, trial["bytes"]),
        "drive_lag_max_s": max((e["lag"] for e in player.log), default=0.0),
    }


def parse_result(out: str) -> dict:
    import json  # noqa: PLC0415

    for line in reversed(out.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    return {"error": "no result", "seconds": None}


def run_mechanism(mech: str, todo: list[dict]) -> list[dict]:
    """Every trial of ``todo`` with one mechanism, in one topology."""
    out = []
    with Lab() as lab:
        topo = Topology(lab, [wifi_spec()], policy=POLICY, tunnel=mech != "tcp-resume")
        DrivePlayer.prepare(topo)
        if mech != "tcp-resume":
            topo.start()
        server = topo.org.spawn(tool_cmd("rangeget", "serve", "--port", str(PORT)), "rangeget")
        wait_listening(server)
        for trial in todo:
            if mech != "tcp-resume":
                topo.wait_link_state("wifi", "up", timeout=15)
            t0 = time.monotonic()
            try:
                rec = one_trial(topo, trial, mech)
            except LabError as exc:
                rec = {**trial, "mechanism": mech, "error": str(exc), "seconds": None}
            if mech != "tcp-resume":
                rec["hold"] = (topo.session("server") or {}).get("hold")
            progress(
                f"{mech} range {trial['range']} seed {trial['seed']}: "
                f"{rec.get('seconds') or float('nan'):.1f} s for {trial['bytes'] / MB:.1f} MB "
                f"(oracle {rec.get('oracle_s', float('nan')):.1f} s, "
                f"{rec.get('reconnects', '-')} reconnects, wall {time.monotonic() - t0:.0f} s)"
            )
            out.append(rec)
    return out


def summarize(records: list[dict]) -> dict:
    by: dict = {}
    for name in [*RANGES, FIXED]:
        times = {}
        for mech in ("tcp-resume", "multihome"):
            times[mech] = [
                r["seconds"]
                for r in records
                if r["range"] == name and r["mechanism"] == mech and r.get("error") is None
            ]
        if not all(times.values()):
            continue
        med = {m: statistics.median(t) for m, t in times.items()}
        paired = [
            1 - m["seconds"] / t["seconds"]
            for t in records
            for m in records
            if t["range"] == m["range"] == name
            and t["seed"] == m["seed"]
            and t["mechanism"] == "tcp-resume"
            and m["mechanism"] == "multihome"
            and t.get("error") is None
            and m.get("error") is None
        ]
        by[name] = {
            "median_s": med,
            "median_gain": 1 - med["multihome"] / med["tcp-resume"],
            "paired_gain_median": statistics.median(paired) if paired else None,
            "paper_gain": PAPER_GAIN.get(name),
            "trials": len(paired),
        }
    return by


def main(runs: int | None = None, only: list[str] | None = None) -> None:
    runs = runs or 4
    names = only or list(RANGES)
    order = [*RANGES, FIXED]
    todo = [t for name in names for t in trials(name, runs, 1000 * (order.index(name) + 1))]
    records: list[dict] = []
    for mech in ("tcp-resume", "multihome"):
        records += run_mechanism(mech, todo)
    summary = summarize(records)
    for name, s in summary.items():
        progress(
            f"range {name}: median tcp-resume {s['median_s']['tcp-resume']:.1f} s, multihome "
            f"{s['median_s']['multihome']:.1f} s, gain {100 * s['median_gain']:.1f} % "
            f"(paired {100 * (s['paired_gain_median'] or 0):.1f} %"
            + (f"; paper {100 * s['paper_gain']:.0f} %)" if s["paper_gain"] else ")")
        )
    data = {
        "params": {
            "wifi_rate_mbit": WIFI_RATE_MBIT,
            "one_way_delay_ms": 10,
            "policy": POLICY,
            "drive": DriveParams().__dict__,
            "ranges": RANGES,
            "runs_per_range": runs,
        },
        "records": records,
        "summary": summary,
    }
    suite = "vehicular-crosscheck" if names == [FIXED] else "vehicular"
    save(suite, data, plot(records, summary))
