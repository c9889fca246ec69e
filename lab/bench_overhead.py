"""Benchmark: the cost of the tunnel on one unlimited veth path (``python -m lab.bench_overhead``).

Role: on one veth between ``cli`` and ``srv``, measure one TCP stream (iperf3 -C cubic, 10 s)
and the idle RTT (ping -c 50 -i 0.01, median) directly between the veth addresses and through
multihome (encrypted, between the tunnel addresses), in the same run, and report the ratios.
Writes bench/results/overhead-<rev>.json and a bar chart beside it.

Not a test: numbers move with the load of the shared machine (2 cores), so only ratios measured
in one run are compared. Reference figures measured on this machine (DESIGN.md §4): raw veth
31 Gbit/s and 0.05 ms; wireguard-go 2.72 Gbit/s, +0.44 ms.
"""

from __future__ import annotations

import argparse
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from lab.netns import Lab  # noqa: E402
from lab.results import write_result  # noqa: E402
from lab.topology import TUN_SERVER, LinkSpec, Topology, link_ip  # noqa: E402
from lab.traffic import iperf3, ping_rtts_ms  # noqa: E402

REFERENCE = {"wireguard_go_gbps": 2.72, "wireguard_go_added_rtt_ms": 0.44}


def measure(topo: Topology, addr: str, seconds: float, cc: str) -> dict:
    rtts = ping_rtts_ms(topo.cli, addr, count=50, interval=0.01)
    tcp = iperf3(topo.cli, topo.srv, addr, cc=cc, seconds=seconds)
    return {
        "tcp_mbps": tcp["mbps"],
        "retransmits": tcp["end"]["sum_sent"].get("retransmits"),
        "rtt_median_ms": statistics.median(rtts),
        "rtt_min_ms": min(rtts),
        "rtt_samples": len(rtts),
        "cpu_sender_pct": tcp["end"]["cpu_utilization_percent"]["host_total"],
    }


def plot(result: dict, path: str) -> None:
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8, 3.5))
    names = ["direct", "multihome"]
    ax1.bar(names, [result[n]["tcp_mbps"] / 1000 for n in names], color=["grey", "tab:blue"])
    ax1.set_ylabel("TCP throughput (Gbit/s)")
    ax2.bar(names, [result[n]["rtt_median_ms"] for n in names], color=["grey", "tab:blue"])
    ax2.set_ylabel("median idle RTT (ms)")
    fig.suptitle(f"multihome overhead, one veth path, rev {result['revision']}")
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--cc", choices=["cubic", "bbr"], default="cubic")
    args = parser.parse_args()
    with Lab() as lab:
        topo = Topology(lab, [LinkSpec("veth")])
        topo.start()
        direct = measure(topo, link_ip(0, "srv"), args.seconds, args.cc)
        tunnel = measure(topo, TUN_SERVER, args.seconds, args.cc)
        topo.stop()
    ratios = {
        "throughput_ratio": tunnel["tcp_mbps"] / direct["tcp_mbps"],
        "rtt_ratio": tunnel["rtt_median_ms"] / direct["rtt_median_ms"],
        "added_rtt_ms": tunnel["rtt_median_ms"] - direct["rtt_median_ms"],
    }
    data = {
        "bench": "overhead",
        "cc": args.cc,
        "seconds": args.seconds,
        "direct": direct,
        "multihome": tunnel,
        "ratios": ratios,
        "reference": REFERENCE,
    }
    path = write_result("overhead", data)
    data["revision"] = path.stem.split("-", 1)[1]
    plot(data, str(path.with_suffix(".png")))
    print(f"{'':10} {'TCP Mbit/s':>11} {'RTT ms (median)':>16}")
    for name, m in (("direct", direct), ("multihome", tunnel)):
        print(f"{name:10} {m['tcp_mbps']:11.0f} {m['rtt_median_ms']:16.3f}")
    print(
        f"throughput ratio {ratios['throughput_ratio']:.3f}, RTT ratio {ratios['rtt_ratio']:.2f}"
        f" (+{ratios['added_rtt_ms']:.3f} ms); wireguard-go here: 2.72 Gbit/s, +0.44 ms"
    )
    print(f"wrote {path} and {path.with_suffix('.png')}")


if __name__ == "__main__":
    main()
