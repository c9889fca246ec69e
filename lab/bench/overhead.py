"""Suite ``overhead``: the cost of a tunnel on one unimpaired path, next to OpenVPN and WireGuard.

Role: on lab/scenarios/overhead.toml (one direct veth between ``cli`` and ``srv``, offloads on,
no rate limit, no delay) measure, in one run, one TCP stream and 4 parallel streams (iperf3 -C
cubic, 10 s each, cli -> srv) and the idle RTT (ping -c 50 -i 0.01, median) directly between
the veth addresses, through multihome (encrypted), through OpenVPN (no encryption) and through
wireguard-go (encrypted); report each as a ratio to direct. A reference tunnel whose program is
missing is recorded as skipped with the reason, and the rest still runs.

CPU per Gbit/s: the user + system CPU time of the tunnel's own processes at both ends (from
``/proc/<pid>/stat``; found by name among ``ip netns pids`` of ``cli`` and ``srv``) over a TCP
test, as percent of one core, divided by the Gbit/s it carried (the median over repeats). Kernel
work in softirq context is not in it, nor the iperf3 processes; direct has no tunnel process.

Each system is measured ``repeats`` times, interleaved, and the best throughput and the lowest
median RTT are kept: the 2 cores are shared with other work, and the best of a few runs is the
least disturbed estimate of what the tunnel itself costs.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

from lab.bench import vpn
from lab.bench.common import figure, progress, save
from lab.netns import Lab, LabError
from lab.scenario import load
from lab.topology import TUN_SERVER, Topology, link_ip
from lab.traffic import iperf3, ping_rtts_ms

REFERENCE = {
    "design_md_section_4": "raw veth 31 Gbit/s 0.05 ms; OpenVPN (no encryption) 1.27 Gbit/s "
    "+0.20 ms; wireguard-go 2.72 Gbit/s +0.44 ms"
}
SYSTEMS = ("direct", "multihome", "openvpn", "wireguard-go")
STREAMS = 4
# Process names (``/proc/<pid>/comm``) of each system's tunnel programs; ``go install``
# names wireguard-go's binary ``wireguard``.
PROCESSES = {"multihome": ("multihome",), "openvpn": ("openvpn",)}
PROCESSES["wireguard-go"] = ("wireguard-go", "wireguard")
TICK = os.sysconf("SC_CLK_TCK")


def tunnel_ticks(topo: Topology, system: str) -> int:
    """CPU ticks (user + system) so far of ``system``'s processes in ``cli`` and ``srv``."""
    ticks = 0
    for ns in (topo.cli, topo.srv):
        for pid in ns.run(["ip", "netns", "pids", ns.name], check=False).stdout.split():
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() not in PROCESSES.get(system, ()):
                    continue
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # gone meanwhile
                continue
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks


def tcp_test(topo: Topology, system: str, addr: str, *, seconds: float, cc: str, streams: int):
    """One iperf3 test: (iperf3's JSON, % of one core per Gbit/s of the tunnel's processes)."""
    ticks0 = tunnel_ticks(topo, system)
    extra = ("-P", str(streams)) if streams > 1 else ()
    tcp = iperf3(topo.cli, topo.srv, addr, cc=cc, seconds=seconds, extra=extra)
    cpu_pct = 100 * (tunnel_ticks(topo, system) - ticks0) / TICK / seconds
    return tcp, cpu_pct / (tcp["mbps"] / 1000)


def measure(topo: Topology, system: str, addr: str, seconds: float, cc: str) -> dict:
    rtts = ping_rtts_ms(topo.cli, addr, count=50, interval=0.01)
    tcp, cpu = tcp_test(topo, system, addr, seconds=seconds, cc=cc, streams=1)
    tcp4, cpu4 = tcp_test(topo, system, addr, seconds=seconds, cc=cc, streams=STREAMS)
    return {
        "tcp_mbps": tcp["mbps"],
        "retransmits": tcp["end"]["sum_sent"].get("retransmits"),
        f"tcp{STREAMS}_mbps": tcp4["mbps"],
        "rtt_median_ms": statistics.median(rtts),
        "rtt_min_ms": min(rtts),
        "cpu_sender_pct": tcp["end"]["cpu_utilization_percent"]["host_total"],
        "cpu_receiver_pct": tcp["end"]["cpu_utilization_percent"]["remote_total"],
        "tunnel_cpu_pct_per_gbps": cpu,
        f"tunnel_cpu_pct_per_gbps_{STREAMS}": cpu4,
    }


def plot(result: dict):
    names = [n for n in SYSTEMS if n in result["best"]]
    colors = ["grey", "tab:blue", "tab:green", "tab:red"][: len(names)]
    fig, (ax1, ax2) = figure(2, width=9, height=3.8)
    ax1.bar(names, [result["best"][n]["tcp_mbps"] / 1000 for n in names], color=colors)
    ax1.set_ylabel("1 TCP stream, CUBIC (Gbit/s)")
    ax1.set_yscale("log")
    ax2.bar(names, [result["best"][n]["rtt_median_ms"] for n in names], color=colors)
    ax2.set_ylabel("median idle RTT (ms)")
    for ax in (ax1, ax2):
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle(f"tunnel overhead on one veth path (best of {result['repeats']})")
    return fig


def main(seconds: float | None = None, cc: str = "cubic", repeats: int = 2) -> dict:
    sc = load("overhead")
    seconds = seconds or sc.bench["seconds"]
    progress(f"overhead: {SYSTEMS}, {seconds:g} s per TCP test, {repeats} repeats\n{sc.picture}")
    skipped: dict[str, str] = {}
    runs: dict[str, list[dict]] = {}
    with Lab() as lab:
        topo = sc.topology(lab)
        topo.start()
        addrs = {"direct": link_ip(0, "srv"), "multihome": TUN_SERVER}
        for name, start in (
            ("openvpn", vpn.start_openvpn),
            ("wireguard-go", vpn.start_wireguard_go),
        ):
            try:
                addrs[name] = start(topo)
            except LabError as exc:  # Unavailable, or it failed to come up: say so, go on
                skipped[name] = str(exc).splitlines()[0]
                progress(f"  {name} skipped: {skipped[name]}")
        for rep in range(repeats):
            for name, addr in addrs.items():
                m = measure(topo, name, addr, seconds, cc)
                runs.setdefault(name, []).append(m)
                progress(
                    f"  {rep + 1}/{repeats} {name:12} {m['tcp_mbps']:8.0f} Mbit/s, "
                    f"{STREAMS} streams {m[f'tcp{STREAMS}_mbps']:6.0f} Mbit/s  "
                    f"RTT {m['rtt_median_ms']:.3f} ms  "
                    f"CPU {m['tunnel_cpu_pct_per_gbps']:.0f} %/Gbit/s"
                )
        topo.stop()
    best = {
        name: {
            "tcp_mbps": max(m["tcp_mbps"] for m in ms),
            f"tcp{STREAMS}_mbps": max(m[f"tcp{STREAMS}_mbps"] for m in ms),
            "rtt_median_ms": min(m["rtt_median_ms"] for m in ms),
            "tunnel_cpu_pct_per_gbps": statistics.median(m["tunnel_cpu_pct_per_gbps"] for m in ms),
            f"tunnel_cpu_pct_per_gbps_{STREAMS}": statistics.median(
                m[f"tunnel_cpu_pct_per_gbps_{STREAMS}"] for m in ms
            ),
        }
        for name, ms in runs.items()
    }
    ratios = {
        name: {
            "throughput_ratio": b["tcp_mbps"] / best["direct"]["tcp_mbps"],
            f"throughput_ratio_{STREAMS}": b[f"tcp{STREAMS}_mbps"]
            / best["direct"][f"tcp{STREAMS}_mbps"],
            "added_rtt_ms": b["rtt_median_ms"] - best["direct"]["rtt_median_ms"],
        }
        for name, b in best.items()
        if name != "direct"
    }
    if "multihome" in best:
        for name in ("openvpn", "wireguard-go"):
            if name in best:
                mh, other = best["multihome"], best[name]
                ratios[f"multihome_vs_{name}"] = {
                    "throughput_ratio": mh["tcp_mbps"] / other["tcp_mbps"],
                    f"throughput_ratio_{STREAMS}": mh[f"tcp{STREAMS}_mbps"]
                    / other[f"tcp{STREAMS}_mbps"],
                }
    data = {
        "cc": cc,
        "seconds": seconds,
        "repeats": repeats,
        "streams": STREAMS,
        "openvpn_mode": "p2p, no encryption, no authentication (no --secret, no TLS)",
        "wireguard_go_mode": "encrypted (ChaCha20-Poly1305), MTU 1420",
        "multihome_mode": "encrypted (ChaCha20-Poly1305), aggregate policy, MTU 1420",
        "runs": runs,
        "best": best,
        "ratios": ratios,
        "skipped": skipped,
        "reference": REFERENCE,
    }
    save("overhead", data, plot(data))
    print(
        f"\n{'':13} {'TCP Mbit/s':>11} {f'x{STREAMS} Mbit/s':>11} {'RTT ms':>8} "
        f"{'vs direct':>10} {'added RTT':>10} {'CPU %/Gbit/s':>13}"
    )
    for name, b in best.items():
        r = ratios.get(name, {"throughput_ratio": 1.0, "added_rtt_ms": 0.0})
        print(
            f"{name:13} {b['tcp_mbps']:11.0f} {b[f'tcp{STREAMS}_mbps']:11.0f} "
            f"{b['rtt_median_ms']:8.3f} {r['throughput_ratio']:10.3f} "
            f"{r['added_rtt_ms']:+9.3f} {b['tunnel_cpu_pct_per_gbps']:13.1f}"
        )
    for name, why in skipped.items():
        print(f"{name:13} skipped: {why}")
    return data
