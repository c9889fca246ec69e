"""Benchmark of ``multihome race`` (``python -m lab.race.bench``).

Role: on the race topology with plain veth uplinks, measure in one run (a) connection set-up
to first byte — ``count`` sequential connections from the LAN host to a one-byte server on
the origin — and (b) one TCP download (iperf3 -R, named congestion control), first with the
gateway routing directly over uplink 0 (forwarding + masquerade, no daemon), then through
``multihome race``: set-up with the ``race`` predictor, throughput with ``static`` (one
attempt: iperf3's one-off server cannot tell a raced loser from its control connection).
Reports the added set-up time (median and p90 difference; target ≤ 1 ms) and the
relayed/direct throughput ratio (target ≥ 0.9); writes ``bench/results/race-bench.json``.

Not a test: the figures move with the load of the shared 2-core machine; only quantities
measured in the same run are compared. ``--rate-mbit`` shapes both uplinks with tbf, for a
comparison at a realistic access rate as well as at veth speed.
"""

from __future__ import annotations

import argparse
import statistics

from lab.netns import Lab
from lab.race.topology import (
    HELLO_PORT,
    ORIGIN,
    RaceTopology,
    UplinkSpec,
    parse_result,
    tool_cmd_race,
)
from lab.results import write_result
from lab.traffic import iperf3


def hello(topo: RaceTopology, count: int) -> list[float]:
    res = topo.lan.run(
        tool_cmd_race(
            "fetch", "hello", "--host", ORIGIN, "--port", str(HELLO_PORT), "--count", str(count)
        ),
        timeout=count + 60,
    )
    return [s * 1000 for s in parse_result(res.stdout)["seconds"]]


def stats(ms: list[float]) -> dict:
    q = statistics.quantiles(ms, n=10)
    return {
        "median_ms": statistics.median(ms),
        "p90_ms": q[8],
        "min_ms": min(ms),
        "samples": len(ms),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--cc", choices=["cubic", "bbr"], default="cubic")
    parser.add_argument("--rate-mbit", type=float, default=0)
    args = parser.parse_args()
    with Lab() as lab:
        topo = RaceTopology(lab, [UplinkSpec("a"), UplinkSpec("b")])
        if args.rate_mbit:
            for i, r in enumerate(topo.routers):
                topo.gw.tbf(f"u{i}", args.rate_mbit)
                r.tbf(f"u{i}", args.rate_mbit)
        topo.start_origin()
        # Direct: plain forwarding over uplink 0 with masquerade, no daemon.
        topo.gw.sysctl("net.ipv4.ip_forward", 1)
        topo.gw.run(["nft", "add", "table", "ip", "direct"])
        topo.gw.run(
            [
                "nft",
                "add",
                "chain",
                "ip",
                "direct",
                "post",
                "{ type nat hook postrouting priority 100; }",
            ]
        )
        topo.gw.run(["nft", "add", "rule", "ip", "direct", "post", "oifname", "u0", "masquerade"])
        direct_setup = hello(topo, args.count)
        direct_tcp = iperf3(
            topo.lan, topo.org, ORIGIN, cc=args.cc, seconds=args.seconds, reverse=True
        )
        topo.start_race("race")
        race_setup = hello(topo, args.count)
        status = topo.status()
        # Throughput of one relayed connection, with a single-attempt predictor: iperf3's
        # one-off server takes the first connection it accepts as its control connection,
        # and a race over two equal veths completes both handshakes before one is reset.
        topo.start_race("static", static_uplink="a")
        race_tcp = iperf3(
            topo.lan, topo.org, ORIGIN, cc=args.cc, seconds=args.seconds, reverse=True
        )
        topo.stop_race()
    d, r = stats(direct_setup), stats(race_setup)
    data = {
        "bench": "race",
        "cc": args.cc,
        "uplink_rate_mbit": args.rate_mbit or None,
        "setup_direct": d,
        "setup_race": r,
        "added_setup_ms": {
            "median": r["median_ms"] - d["median_ms"],
            "p90": r["p90_ms"] - d["p90_ms"],
        },
        "throughput_direct_mbps": direct_tcp["mbps"],
        "throughput_race_mbps": race_tcp["mbps"],
        "throughput_ratio": race_tcp["mbps"] / direct_tcp["mbps"],
        "targets": {"added_setup_ms": 1.0, "throughput_ratio": 0.9},
        "daemon_counters": status["counters"],
    }
    suffix = f"-{int(args.rate_mbit)}mbit" if args.rate_mbit else ""
    path = write_result(f"race-bench{suffix}", data)
    print(
        f"set-up to first byte: direct {d['median_ms']:.3f} ms, race {r['median_ms']:.3f} ms "
        f"(+{data['added_setup_ms']['median']:.3f} ms median, "
        f"+{data['added_setup_ms']['p90']:.3f} p90)"
    )
    print(
        f"one TCP download ({args.cc}): direct {direct_tcp['mbps']:.0f} Mbit/s, relayed "
        f"{race_tcp['mbps']:.0f} Mbit/s, ratio {data['throughput_ratio']:.3f}"
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
