"""Suite ``copies-cpu``: the CPU experiment of *On Redundant Multipath Operating System Support
for Wireless Mesh Networks* (Figs. 4-5) on multihome's ``redundant`` copies.

Role: full-duplex VoIP-like load (``voipgen``: 160-byte UDP payloads, 50 packets/s each way
per stream, i.e. 64 kbit/s per one-way stream) from the LAN host to the origin, at a rising
number of streams, through

* ``user-k``: multihome ``redundant`` with ``copies = k`` over k links, copies made in user
  space on both sides (the client's rule; the server's ``redundant_copies = k``);
* ``kernel-k``: the same with the kernel fast path on both sides (``kernel_copies``): each
  packet sealed once, nftables ``dup`` makes the other k-1 copies;
* ``plain``: kernel routing over one link, no tunnel (the paper's "kernel without redundant
  multipath"), the baseline that shows the lab and the generator carry every rate;

for k = 2 and 3, all topologies up at once and each rate run on each of them in turn, so the
modes see the same rates under the same machine load. Per point: packets offered and
delivered (both directions), loss, and the daemons' CPU per delivered packet, in
microseconds: utime + stime of both processes, read as the nanosecond run time they are
apportioned from (``/proc/<pid>/task/*/schedstat``; ``/proc/<pid>/stat``'s 10 ms ticks are
recorded beside it but too coarse for a few seconds at low rates).

Method: what the daemons are charged is their own user time and their system calls —
reading and writing the TUN device (and the kernel forwarding the inner packet on), sealing
and opening, sending (for ``kernel-k`` with the ``dup`` copies made inside that send) and
receiving. On veth the far end's receive path runs in the sender's context, so the daemon
also pays the receive processing of every datagram it sends, copies included — the same
for both copy modes. ``--isolate`` moves that work off the daemons (RPS on every veth to
CPU 1, daemons pinned to CPU 0, generators to CPU 1); on this virtual machine every packet
handed to the other CPU then costs its sender an inter-processor interrupt (a trapped MSR
write, a fifth of the daemon's samples under ``perf``), which makes the daemons dearer, not
cheaper, so it is not the default.

Loss onset: the lowest rate whose loss exceeds 0.5 % (``LOSS_ONSET``), per mode.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass

from lab.bench.common import progress, save
from lab.bench.copies_cpu_plot import plot, summarize
from lab.netns import Lab, LabError, Namespace
from lab.topology import ORIGIN, LinkSpec, Topology
from lab.voip import PPS, SIZE, voip_calls, voipgen_binary

STREAMS = (1, 10, 50, 100, 200, 300, 400, 600, 800)
SECONDS = 5.0  # per point: packets per stream = PPS * SECONDS
LOSS_ONSET = 0.005
DAEMON_CPU, LOAD_CPU = 0, 1
CLK_TCK = 100  # USER_HZ: /proc/<pid>/stat counts utime and stime in 1/100 s


@dataclass(frozen=True)
class Mode:
    name: str
    links: int
    kernel: bool = False
    tunnel: bool = True


MODES = (
    Mode("plain", 1, tunnel=False),
    Mode("user-2", 2),
    Mode("kernel-2", 2, kernel=True),
    Mode("user-3", 3),
    Mode("kernel-3", 3, kernel=True),
)


def build(lab: Lab, mode: Mode, isolate: bool) -> Topology:
    """The topology of ``mode``, started, with RPS and pinning when ``isolate``."""
    links = [LinkSpec(f"l{i}") for i in range(mode.links)]
    if not mode.tunnel:
        topo = Topology(lab, links, tunnel=False)
    else:
        rule = {"name": "voice", "protocol": "udp", "ports": "5004", "policy": "redundant"}
        rule["copies"] = mode.links
        server = {"redundant_copies": mode.links}
        client: dict = {}
        if mode.kernel:
            server["kernel_copies"] = client["kernel_copies"] = True
        topo = Topology(
            lab, links, policy="best", rules=[rule], client_extra=client, server_extra=server
        )
        topo.start()
    if isolate:
        for ns in (topo.lan, topo.cli, topo.srv, topo.org):
            rps_to(ns, LOAD_CPU)
        for proc in topo.daemons.values():
            pin(proc.pid, DAEMON_CPU)
    return topo


def rps_to(ns: Namespace, cpu: int) -> None:
    """Queue the receive processing of every veth in ``ns`` to ``cpu`` (RPS)."""
    mask = f"{1 << cpu:x}"
    script = (
        "for q in /sys/class/net/*/queues/rx-*/rps_cpus; do "
        'case "$q" in */lo/*) continue;; esac; '
        f'echo {mask} > "$q"; done'
    )
    ns.run(["sh", "-c", script])


def pin(pid: int, cpu: int) -> None:
    """Pin every thread of ``pid`` to ``cpu``."""
    from lab.netns import run  # noqa: PLC0415

    run(["taskset", "-a", "-p", "-c", str(cpu), str(pid)])


def cpu_ticks(pid: int) -> int:
    """utime + stime of ``pid`` (all threads), in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)


def cpu_ns(pid: int) -> int:
    """CPU time of ``pid``'s threads in nanoseconds (``schedstat``: the run time utime and
    stime are apportioned from, without their 10 ms ticks)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/schedstat") as f:
            total += int(f.read().split()[0])
    return total


def host_cpu() -> list[int]:
    """The ``cpu`` line of /proc/stat (user nice system idle iowait irq softirq ...)."""
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def measure(topo: Topology, mode: Mode, streams: int, seconds: float, isolate: bool) -> dict:
    """One rate point on one topology."""
    pids = {side: p.pid for side, p in topo.daemons.items()}
    before = {side: (cpu_ticks(pid), cpu_ns(pid)) for side, pid in pids.items()}
    host0, t0 = host_cpu(), time.monotonic()
    load = ["taskset", "-c", str(LOAD_CPU)] if isolate else []
    binary = voipgen_binary()
    count = round(PPS * seconds)
    res = voip_calls(
        topo.lan,
        topo.org,
        ORIGIN,
        streams=streams,
        count=count,
        binary=binary,
        prefix=load,
        tag=f"-{mode.name}-{streams}",
    )
    wall = time.monotonic() - t0
    host1 = host_cpu()
    ticks = {side: cpu_ticks(pid) - before[side][0] for side, pid in pids.items()}
    ns = {side: cpu_ns(pid) - before[side][1] for side, pid in pids.items()}
    delivered = res.delivered
    us = {side: t / 1e3 / max(1, delivered) for side, t in ns.items()}
    counters = {}
    if mode.tunnel:
        for side in ("client", "server"):
            c = topo.counters(side)
            counters[side] = {k: c.get(k) for k in ("tx_kernel_copies", "rx_replayed")}
    point = {
        "streams": streams,
        "offered_pps": 2 * PPS * streams,
        "expected": res.expected,
        "delivered": delivered,
        "loss": res.loss,
        "wall_s": wall,
        "cpu_ticks": ticks,
        "cpu_ns": ns,
        "cpu_us_per_packet": {**us, "total": sum(us.values())} if mode.tunnel else None,
        "host_softirq_us_per_packet": (host1[6] - host0[6]) / CLK_TCK * 1e6 / max(1, delivered),
        "generator_lag_ms": max(res.up["lag_ms"], res.down["lag_ms"]),
        "latency_p99_ms": {
            "up": res.up["latency_ms"]["p99"],
            "down": res.down["latency_ms"]["p99"],
        },
        "counters": counters,
    }
    return point


def main(
    streams: tuple[int, ...] = STREAMS,
    seconds: float = SECONDS,
    isolate: bool = False,
    modes: tuple[Mode, ...] = MODES,
) -> dict:
    if not voipgen_binary().exists():
        raise LabError(f"voipgen missing: {voipgen_binary()} (cargo build --release -p voipgen)")
    points: dict[str, list[dict]] = {m.name: [] for m in modes}
    with contextlib.ExitStack() as stack:
        topos = {}
        for m in modes:
            lab = stack.enter_context(Lab())
            topos[m.name] = build(lab, m, isolate)
            progress(f"{m.name}: up")
        for n in streams:
            for m in modes:
                p = measure(topos[m.name], m, n, seconds, isolate)
                points[m.name].append(p)
                cpu = p["cpu_us_per_packet"]
                cpu_s = f"{cpu['total']:.1f} us/pkt" if cpu else "-"
                progress(
                    f"{n:4d} streams {p['offered_pps']:6d} pps {m.name:9s} "
                    f"loss {p['loss'] * 100:6.2f} %  daemons {cpu_s}  "
                    f"gen lag {p['generator_lag_ms']:.1f} ms"
                )
    data = {
        "params": {
            "streams": list(streams),
            "seconds_per_point": seconds,
            "packet_bytes": SIZE,
            "pps_per_stream_each_way": PPS,
            "isolate": isolate,
            "daemon_cpu": DAEMON_CPU if isolate else None,
            "rps_and_load_cpu": LOAD_CPU if isolate else None,
            "loss_onset": LOSS_ONSET,
        },
        "modes": {
            m.name: {"links": m.links, "kernel": m.kernel, "tunnel": m.tunnel} for m in modes
        },
        "points": points,
    }
    data["summary"] = summarize(points, LOSS_ONSET)
    save("copies-cpu", data, plot(points, LOSS_ONSET))
    return data
