"""Benchmark of ``multihome race`` in both modes (``python -m lab.race.bench``).

Role: on the race topology with plain veth uplinks, measure in one run, first with the
gateway routing directly over uplink 0 (forwarding + masquerade, no daemon), then through
``multihome race`` in proxy mode and in NAT mode side by side:

- set-up to first byte: ``count`` sequential connections from the LAN host to a one-byte
  server on the origin (predictor ``race``); the added time over direct routing (median and
  p90; target ≤ 1 ms);
- one TCP download (iperf3 -R, named congestion control): throughput against direct (proxy
  target ≥ 0.9, NAT target ≥ 0.95) and the daemon's CPU time (utime + stime from
  /proc/PID/stat) over the download, per Gbit moved (NAT target: none — the kernel carries
  the data). Proxy mode uses ``static`` (iperf3's one-off server takes the first connection
  it accepts as its control connection, and a proxy-mode race completes both handshakes);
  NAT mode races (``race``): its losers are reset before any handshake completes.

Writes ``bench/results/race-bench.json``. Not a test: the figures move with the load of the
shared 2-core machine; only quantities measured in the same run are compared.
``--rate-mbit`` shapes both uplinks with tbf, for a comparison at a realistic access rate.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from lab.netns import Lab
from lab.race.topology import (
    ORIGIN,
    RaceTopology,
    UplinkSpec,
)
from lab.results import write_result
from lab.traffic import iperf3


def hello(topo: RaceTopology, count: int) -> list[float | None]:
    return [None if s is None else s * 1000 for s in topo.hello(count)]


def stats(times: list[float | None]) -> dict:
    ms = [t for t in times if t is not None]
    q = statistics.quantiles(ms, n=10)
    return {
        "failed": len(times) - len(ms),
        "median_ms": statistics.median(ms),
        "p90_ms": q[8],
        "min_ms": min(ms),
        "max_ms": max(ms),
        "over_1s": sum(x > 1000 for x in ms),
        "samples": len(ms),
    }


def daemon_pid(pid: int) -> int:
    """The ``multihome`` process under a spawned command (``ip netns exec`` execs into it)."""
    comm = Path(f"/proc/{pid}/comm").read_text().strip()
    if comm == "multihome":
        return pid
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            found = daemon_pid(int(child))
            if found:
                return found
    return 0


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` in seconds (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_mode(topo: RaceTopology, mode: str, args: argparse.Namespace, direct: dict) -> dict:
    topo.start_race("race", mode=mode)
    setup = stats(hello(topo, args.count))
    counters = topo.status()["counters"]
    if mode == "proxy":
        topo.start_race("static", static_uplink="a", mode=mode)
    pid = daemon_pid(topo.daemon.pid)
    cpu0 = cpu_seconds(pid)
    tcp = iperf3(topo.lan, topo.org, ORIGIN, cc=args.cc, seconds=args.seconds, reverse=True)
    cpu = cpu_seconds(pid) - cpu0
    # A connection's relayed bytes are counted when it ends: wait for the relay to close.
    deadline = time.monotonic() + 5
    while (after := topo.status()["counters"])["relaying"] and time.monotonic() < deadline:
        time.sleep(0.05)
    topo.stop_race()
    gbit = tcp["mbps"] * args.seconds / 1000
    return {
        "setup": setup,
        "added_setup_ms": {
            "median": setup["median_ms"] - direct["median_ms"],
            "p90": setup["p90_ms"] - direct["p90_ms"],
        },
        "throughput_mbps": tcp["mbps"],
        "throughput_ratio": tcp["mbps"] / direct["mbps"],
        "daemon_cpu_s": cpu,
        "daemon_cpu_s_per_gbit": cpu / gbit if gbit else None,
        "relayed_bytes": after["relayed_up_bytes"] + after["relayed_down_bytes"],
        "setup_counters": counters,
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
        direct_setup = stats(hello(topo, args.count))
        direct_tcp = iperf3(
            topo.lan, topo.org, ORIGIN, cc=args.cc, seconds=args.seconds, reverse=True
        )
        # The direct path's masquerade would also catch the daemon's flows: removed first.
        topo.gw.run(["nft", "delete", "table", "ip", "direct"])
        direct = {"median_ms": direct_setup["median_ms"], "p90_ms": direct_setup["p90_ms"]}
        direct["mbps"] = direct_tcp["mbps"]
        modes = {m: measure_mode(topo, m, args, direct) for m in ("proxy", "nat")}
    data = {
        "bench": "race",
        "cc": args.cc,
        "uplink_rate_mbit": args.rate_mbit or None,
        "setup_direct": direct_setup,
        "throughput_direct_mbps": direct_tcp["mbps"],
        "modes": modes,
        # The series lab/bench/history.py has tracked since before NAT mode: proxy mode.
        "setup_race": modes["proxy"]["setup"],
        "added_setup_ms": modes["proxy"]["added_setup_ms"],
        "throughput_race_mbps": modes["proxy"]["throughput_mbps"],
        "throughput_ratio": modes["proxy"]["throughput_ratio"],
        "targets": {
            "added_setup_ms": 1.0,
            "throughput_ratio": {"proxy": 0.9, "nat": 0.95},
            "nat_daemon_cpu_s_per_gbit": 0.0,
        },
    }
    suffix = f"-{int(args.rate_mbit)}mbit" if args.rate_mbit else ""
    path = write_result(f"race-bench{suffix}", data)
    print(f"direct: set-up {direct['median_ms']:.3f} ms median, {direct['mbps']:.0f} Mbit/s")
    for m, r in modes.items():
        print(
            f"{m:5}: set-up +{r['added_setup_ms']['median']:.3f} ms median "
            f"(+{r['added_setup_ms']['p90']:.3f} p90), {r['throughput_mbps']:.0f} Mbit/s "
            f"(ratio {r['throughput_ratio']:.3f}), daemon CPU {r['daemon_cpu_s']:.2f} s "
            f"({r['daemon_cpu_s_per_gbit'] or 0:.4f} s/Gbit), relayed {r['relayed_bytes']} B"
        )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
