"""The demo (``python -m lab.demo``): a home with DSL and LTE, bonded, and LTE failing.

Role: build lab/scenarios/home.toml (DSL: constant 20 Mbit/s down / 5 up, 10 ms; LTE: a
synthetic LTE trace, 30/8 Mbit/s mean, 30 ms; both through linkem), then, with a live
per-link throughput view in the terminal (``multihome status --json`` deltas, once a second):

1. each link alone (iperf3 download over the bare link, no tunnel), from the same point of
   the traces as the bonded download of step 3;
2. client and server started; the policy rules send UDP port 5004 (VoIP) to ``redundant``
   and everything else to ``aggregate``;
3. a bulk download through the tunnel, using both links;
4. a VoIP-like stream (50 packets/s of 172 bytes, LAN host -> origin) next to a bulk download,
   while the LTE link fails (``linkem down``) and comes back;
5. a short report (markdown + PNG/SVG plots) in results/demo-<rev>/ (lab/demo_report.py).

Runs in about a minute and a half; the lab is always torn down (namespaces, processes).
``--stream`` runs the same with stream mode on (docs/STREAM.md): the LAN host's TCP, the
bulk downloads among it, is carried over kernel MPTCP; ``--stream-set KEY=VALUE`` sets keys of
the client's ``[stream]`` (an A/B, e.g. ``remove_addr=false``). Off by default.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

from lab.bench.failover import parse_stream_set
from lab.demo_report import headline, write_report
from lab.linkem import linkem_binary
from lab.netns import REPO_ROOT, Lab, LabError
from lab.results import git_revision
from lab.scenario import ScenarioUnavailable, load
from lab.topology import Topology, link_ip, multihome_binary
from lab.traffic import iperf3, iperf3_intervals_mbps

BULK_S = 15
FAIL_RUN_S = 30
FAIL_AT_S, BACK_AT_S = 10, 20
VOIP_PPS, VOIP_SIZE, VOIP_PORT = 50, 172, 5004
BIN_S = 0.1
BAR_MBIT = 2.5  # one block of the live bar per this many Mbit/s


class Monitor(threading.Thread):
    """Once a second: per-link download/upload Mbit/s and state, from the client's status."""

    def __init__(self, topo: Topology, t0: float) -> None:
        super().__init__(daemon=True)
        self.topo, self.t0 = topo, t0
        self.stop_event = threading.Event()
        self.samples: list[dict] = []
        self.note = ""

    def snapshot(self) -> dict[str, dict]:
        sess = self.topo.session("client") or {"links": []}
        return {lk["name"]: lk for lk in sess["links"]}

    def run(self) -> None:
        prev, prev_t = self.snapshot(), time.monotonic()
        while not self.stop_event.wait(1.0):
            try:
                cur = self.snapshot()
            except LabError as exc:
                print(f"  (status failed: {exc})")
                continue
            now = time.monotonic()
            dt = now - prev_t
            sample: dict = {"t": now - self.t0, "links": {}}
            parts = []
            for name, lk in cur.items():
                old = prev.get(name, lk)
                down = (lk["rx_bytes"] - old["rx_bytes"]) * 8 / dt / 1e6
                up = (lk["tx_bytes"] - old["tx_bytes"]) * 8 / dt / 1e6
                sample["links"][name] = {"down": down, "up": up, "state": lk["state"]}
                bar = "#" * min(16, round(down / BAR_MBIT))
                parts.append(f"{name} {down:5.1f}|{up:4.1f} {lk['state']:7} {bar:16}")
            total = sum(v["down"] for v in sample["links"].values())
            self.samples.append(sample)
            print(
                f"  t={sample['t']:5.0f}s  " + "  ".join(parts) + f" sum {total:5.1f} {self.note}"
            )
            prev, prev_t = cur, now


def step(n: int, text: str) -> None:
    print(f"\n[{n}/5] {text}", flush=True)


def longest_gap(series: list[tuple[float, float]], start: float, end: float, floor: float) -> float:
    """Longest run of ``BIN_S`` bins in [start, end) whose goodput is under ``floor``."""
    gap = longest = 0.0
    for t, mbps in series:
        if start < t <= end:
            gap = gap + BIN_S if mbps < floor else 0.0
            longest = max(longest, gap)
    return longest


def steady_mbps(res: dict) -> float:
    """Mean goodput of an iperf3 run's ``BIN_S`` bins after its first 2 s (slow start)."""
    return mean([m for t, m in iperf3_intervals_mbps(res) if t > 2])


def mean(vals: list[float]) -> float:
    return statistics.fmean(vals) if vals else float("nan")


def run(cc: str, scenario: str = "home", stream: dict | None = None) -> dict:
    """``stream``: stream mode on, with these extra keys of the client's ``[stream]``."""
    sc = load(scenario)
    with Lab() as lab:
        t0 = time.monotonic()
        step(1, f"building the emulated home (scenario {sc.name}){sc.picture}")
        topo = sc.topology(lab)
        alone = {}
        for i, spec in enumerate(topo.links):
            # The same stretch of every trace and the same measure as the bonded download
            # below: the LTE trace's rate moves from 14 to 79 Mbit/s between seconds.
            topo.restart_traces()
            res = iperf3(
                topo.cli,
                topo.srv,
                link_ip(i, "srv"),
                cc=cc,
                seconds=BULK_S,
                reverse=True,
                interval=BIN_S,
            )
            alone[spec.name] = steady_mbps(res)
            print(
                f"  {spec.name} alone (bare link, download, {BULK_S} s): "
                f"{alone[spec.name]:.1f} Mbit/s"
            )

        step(2, "starting multihome client and server")
        if stream is not None:
            topo.set_stream(True, cc)
            topo.client_sections["stream"].update(stream)
        topo.start()
        print(
            f"  session up, links {topo.link_states()}; policy: VoIP port {VOIP_PORT} -> "
            "redundant, the rest -> aggregate"
        )
        mon = Monitor(topo, t0)
        print("  live view, per link: download|upload Mbit/s, state, download bar")
        mon.start()
        events: dict[str, float] = {}
        try:
            step(3, f"bulk download through the tunnel ({BULK_S} s, TCP {cc})")
            events["bulk_start"] = time.monotonic() - t0
            mon.note = "bulk"
            topo.restart_traces()
            bulk = topo.iperf3(cc, seconds=BULK_S, reverse=True, interval=BIN_S)
            events["bulk_end"] = time.monotonic() - t0

            step(
                4,
                f"VoIP stream + bulk download ({FAIL_RUN_S} s); LTE fails at {FAIL_AT_S} s, "
                f"returns at {BACK_AT_S} s",
            )
            lte = topo.link("lte")
            voip_log = lab.dir / "voip.json"
            voip = topo.udp_stream(
                count=FAIL_RUN_S * VOIP_PPS,
                pps=VOIP_PPS,
                port=VOIP_PORT,
                size=VOIP_SIZE,
                log=str(voip_log),
            )

            def fail() -> None:
                lte.down()
                events["lte_down"] = time.monotonic() - t0
                mon.note = ">>> LTE DOWN"

            def restore() -> None:
                lte.up()
                events["lte_up"] = time.monotonic() - t0
                mon.note = ">>> LTE back"

            events["fail_start"] = time.monotonic() - t0
            timers = [threading.Timer(FAIL_AT_S, fail), threading.Timer(BACK_AT_S, restore)]
            for tm in timers:
                tm.start()
            mon.note = "voip+bulk"
            try:
                bulk2 = topo.iperf3(cc, seconds=FAIL_RUN_S, reverse=True, interval=BIN_S)
            finally:
                for tm in timers:
                    tm.cancel()
                lte.up()
            voip_res = voip.wait()
            packets = json.loads(voip_log.read_text()) if voip_log.exists() else []
        finally:
            mon.stop_event.set()
            mon.join(timeout=3)
        status = {"client": topo.status("client"), "server": topo.status("server")}
        topo.stop()
    return summarize(alone, bulk, bulk2, voip_res, packets, events, mon.samples, status, t0, cc)


def summarize(  # noqa: PLR0917 - one call site, the measurements of run() in order
    alone, bulk, bulk2, voip_res, packets, events, samples, status, t0, cc
) -> dict:  # noqa: ANN001
    series = iperf3_intervals_mbps(bulk)
    bonded = steady_mbps(bulk)
    series2 = iperf3_intervals_mbps(bulk2)
    down_at = events.get("lte_down", events["fail_start"] + FAIL_AT_S) - events["fail_start"]
    up_at = events.get("lte_up", events["fail_start"] + BACK_AT_S) - events["fail_start"]
    # VoIP packets: times relative to the start of step 4, on the shared monotonic clock.
    base_ns = (t0 + events["fail_start"]) * 1e9
    voip = [[seq, (s - base_ns) / 1e9, (r - s) / 1e6] for seq, s, r in packets]
    sent_in = [i / VOIP_PPS for i in range(FAIL_RUN_S * VOIP_PPS)]
    got = {p[0] for p in voip}
    lost_window = [
        i for i, ts in enumerate(sent_in) if down_at - 0.5 <= ts <= down_at + 3 and i not in got
    ]
    lat = sorted(p[2] for p in voip)
    # When did LTE carry download traffic again (> 1 Mbit/s in a 1 s monitor sample)?
    lte_up = events.get("lte_up")
    resumed = [
        s["t"] - lte_up
        for s in samples
        if lte_up is not None and s["t"] > lte_up and s["links"].get("lte", {}).get("down", 0) > 1
    ]
    return {
        "cc": cc,
        "alone_mbps": alone,
        "bonded_mbps": bonded,
        "bonded_iperf3_mbps": bulk["mbps"],
        "bulk_series": series,
        "fail_series": series2,
        "fail": {
            "down_at_s": down_at,
            "up_at_s": up_at,
            "before_mbps": mean([m for t, m in series2 if 2 < t <= down_at]),
            "during_mbps": mean([m for t, m in series2 if down_at + 2 < t <= up_at]),
            "after_mbps": mean([m for t, m in series2 if t > up_at + 3]),
            "gap_s": longest_gap(series2, down_at, up_at, 0.1 * alone["dsl"]),
            "zero_gap_s": longest_gap(series2, down_at, up_at, 0.01),
            "lte_resumed_after_s": resumed[0] if resumed else None,
            "lte_observed_after_up_s": FAIL_RUN_S - up_at,
        },
        "voip": {
            **voip_res,
            "lost_around_failover": len(lost_window),
            "latency_ms_all": {
                "p50": lat[len(lat) // 2] if lat else None,
                "p99": lat[int(len(lat) * 0.99)] if lat else None,
                "max": lat[-1] if lat else None,
            },
            "packets": voip,
        },
        "events": events,
        "monitor": samples,
        "final_status": status,
    }


def check_ready() -> None:
    for what, path in (("multihome", multihome_binary()), ("linkem", linkem_binary())):
        if not path.exists():
            sys.exit(
                f"{what} binary missing at {path}: run `bash scripts/setup.sh` (as root) first"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cc", choices=["cubic", "bbr"], default="cubic")
    parser.add_argument("--out", type=Path, help="report folder (default results/demo-<rev>)")
    parser.add_argument(
        "--scenario",
        default="home",
        help="home (synthetic LTE trace), or lte-real (a real LTE trace read in place from "
        "../shared/data; skipped when absent): any scenario with links `dsl` and `lte`",
    )
    parser.add_argument("--stream", action="store_true", help="stream mode on (docs/STREAM.md)")
    parser.add_argument(
        "--stream-set", nargs="*", metavar="KEY=VALUE", help="with --stream: [stream] keys"
    )
    args = parser.parse_args()
    check_ready()
    rev, dirty = git_revision()
    name = "demo" if args.scenario == "home" else f"demo-{args.scenario}"
    name += "-stream" if args.stream else ""
    out_dir = args.out or REPO_ROOT / "results" / f"{name}-{rev}{'-dirty' if dirty else ''}"
    start = time.monotonic()
    try:
        stream = parse_stream_set(args.stream_set) if args.stream else None
        data = run(args.cc, args.scenario, stream)
    except ScenarioUnavailable as exc:
        print(f"skipped: {exc}")
        return
    data["revision"], data["dirty"], data["scenario"] = rev, dirty, args.scenario
    data["stream"] = stream
    step(5, f"report in {out_dir}")
    report = write_report(out_dir, data)
    print(f"\n  {headline(data)}\n")
    print(f"  report: {report}")
    print(f"  plots:  {out_dir / 'links.png'}, failover.png, voip.png (PNG and SVG)")
    print(f"demo took {time.monotonic() - start:.0f} s")


if __name__ == "__main__":
    main()
