"""The interim demo (``python -m lab.demo``): two links bonded, one fails and comes back.

Role: build the tunnel topology with two tbf-limited links (30 and 10 Mbit/s), measure each
link alone, run one bulk iperf3 download (CUBIC) through the tunnel with the `aggregate`
policy while printing per-link throughput every second from ``multihome status --json``
deltas, blackhole the fast link for 5 s and restore it, then summarise: each link alone vs
bonded, throughput during the outage, and the gap at failover. Takes under a minute; the lab
is always torn down.
"""

from __future__ import annotations

import argparse
import threading
import time

from lab.netns import Lab, LabError
from lab.topology import LinkSpec, Topology, link_ip
from lab.traffic import iperf3, iperf3_intervals_mbps

LINKS = [LinkSpec("dsl", rate_mbit=30), LinkSpec("lte", rate_mbit=10)]
RUN_S = 30
HOLE_AT_S, HOLE_FOR_S = 10, 5
INTERVAL_S = 0.25


class Monitor(threading.Thread):
    """Prints one line per second: per-link tunnel traffic (outer bytes, both directions, from
    the client's status) and link state."""

    def __init__(self, topo: Topology) -> None:
        super().__init__(daemon=True)
        self.topo = topo
        self.stop_event = threading.Event()
        self.t0 = time.monotonic()

    def snapshot(self) -> dict[str, tuple[int, str]]:
        sess = self.topo.session("client") or {"links": []}
        return {lk["name"]: (lk["rx_bytes"] + lk["tx_bytes"], lk["state"]) for lk in sess["links"]}

    def run(self) -> None:
        prev, prev_t = self.snapshot(), time.monotonic()
        while not self.stop_event.wait(1.0):
            try:
                cur = self.snapshot()
            except LabError as exc:
                print(f"  status failed: {exc}")
                continue
            now = time.monotonic()
            parts, total = [], 0.0
            for name, (nbytes, state) in cur.items():
                mbps = (nbytes - prev.get(name, (nbytes, ""))[0]) * 8 / (now - prev_t) / 1e6
                total += mbps
                parts.append(f"{name} {mbps:5.1f} Mbit/s [{state:7}]")
            print(f"  t={now - self.t0:4.0f}s  " + "  ".join(parts) + f"  total {total:5.1f}")
            prev, prev_t = cur, now


def mean(vals: list[float]) -> float:
    return sum(vals) / len(vals) if vals else 0.0


def failover_gap(series: list[tuple[float, float]], hole_at: float, floor: float) -> float:
    """Longest stretch after ``hole_at`` with throughput under ``floor`` (s)."""
    gap = longest = 0.0
    for end, mbps in series:
        if end <= hole_at:
            continue
        gap = gap + INTERVAL_S if mbps < floor else 0.0
        longest = max(longest, gap)
    return longest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cc", choices=["cubic", "bbr"], default="cubic")
    args = parser.parse_args()
    with Lab() as lab:
        print("building lan - cli - {dsl 30 Mbit/s, lte 10 Mbit/s} - srv - org ...")
        topo = Topology(lab, LINKS, policy="aggregate")
        alone = {}
        for i, spec in enumerate(LINKS):
            # The bare link, no tunnel: what a host on that link alone would get.
            res = iperf3(topo.cli, topo.srv, link_ip(i, "srv"), cc=args.cc, seconds=3, port=5300)
            alone[spec.name] = res["mbps"]
            print(f"  {spec.name} alone: {res['mbps']:.1f} Mbit/s")
        topo.start()
        print(f"tunnel up: {topo.link_states()}")
        print(
            f"bulk download origin -> LAN host ({args.cc}, {RUN_S} s); "
            f"dsl blackholed at {HOLE_AT_S} s for {HOLE_FOR_S} s"
        )
        mon = Monitor(topo)
        hole = threading.Timer(HOLE_AT_S, lambda: (topo.blackhole(0), print("  >>> dsl DOWN")))
        back = threading.Timer(
            HOLE_AT_S + HOLE_FOR_S, lambda: (topo.unblackhole(0), print("  >>> dsl restored"))
        )
        mon.start()
        hole.start()
        back.start()
        try:
            data = topo.iperf3(args.cc, seconds=RUN_S, reverse=True, interval=INTERVAL_S)
        finally:
            hole.cancel()
            back.cancel()
            mon.stop_event.set()
            mon.join(timeout=3)
            topo.unblackhole(0)
        series = iperf3_intervals_mbps(data)
        before = [m for t, m in series if 3 < t <= HOLE_AT_S]
        during = [m for t, m in series if HOLE_AT_S + 2 < t <= HOLE_AT_S + HOLE_FOR_S]
        after = [m for t, m in series if t > HOLE_AT_S + HOLE_FOR_S + 3]
        gap = failover_gap(series, HOLE_AT_S, 0.1 * alone["lte"])
        worst = min((m for t, m in series if t > HOLE_AT_S), default=0.0)
        topo.stop()
    print("\nsummary (Mbit/s)")
    print(f"  dsl alone {alone['dsl']:6.1f}   lte alone {alone['lte']:6.1f}")
    print(f"  bonded    {mean(before):6.1f}   (sum of links alone {sum(alone.values()):.1f})")
    print(f"  dsl down  {mean(during):6.1f}   after restore {mean(after):6.1f}")
    print(
        f"  gap at failover (< 10 % of lte alone, {INTERVAL_S} s bins): {gap:.2f} s; worst bin "
        f"after the hole {worst:.1f}; whole run {data['mbps']:.1f} (iperf3 goodput)"
    )


if __name__ == "__main__":
    main()
