"""Server CPU time per 1000 flood initiations (docs/PROTOCOL.md §3.5).

Role: the measurement behind the figures of PROTOCOL.md §3.5. One server daemon (one peer,
no client), an outsider namespace that sends ``--count`` initiations at ``--pps`` from spoofed
sources in 198.18.0.0/15 (``lab/tools/hsflood.py``), and the server's user + system CPU time
from /proc before the flood and 1.5 s after its last datagram. ``--size 116 --kind random``
floods a server from before the MAC fields (protocol version 4) with what it must
Diffie-Hellman; ``--kind random`` (wrong mac1) and ``--kind mac1`` (right mac1, under load:
cookie replies) a current one.

Invariants: the figure divides by the datagrams the server counted (refusal counters and
cookie replies), not by those sent, so socket-buffer drops do not flatter it; the daemon's
idle timers over the run are included (a few ms). Prints one JSON line.

    sudo .venv/bin/python -m lab.flood_cpu --binary target/release/multihome --kind mac1
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from lab.netns import Lab, tool_cmd
from lab.topology import OUTSIDER_PREFIX, PORT, LinkSpec, Topology, multihome_binary
from lab.traffic import parse_result

SPOOFED = "198.18.0.0/15"
COUNTED = ("rx_bad_mac1", "tx_cookie_replies", "rx_handshake_failed", "rx_unknown_peer")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(binary: Path, kind: str, size: int, count: int, pps: float) -> dict:
    with Lab() as lab:
        topo = Topology(lab, [LinkSpec("a")], policy="best", binary=binary)
        out = topo.add_outsider()
        topo.srv.route_replace(SPOOFED, via=f"{OUTSIDER_PREFIX}.2")
        topo.write_configs()
        server = topo.srv.spawn(
            [str(binary), "server", "--config", str(topo.dir / "server.toml")], "server"
        )
        topo.daemons["server"] = server
        topo.wait_socket("server", 15)
        time.sleep(1)
        cpu0 = cpu_seconds(server.pid)
        flood = out.spawn(
            tool_cmd(
                "hsflood", "--host", f"{OUTSIDER_PREFIX}.1", "--port", str(PORT),
                "--sources", SPOOFED, "--kind", kind, "--server-key", topo.server_pub,
                "--size", str(size), "--count", str(count), "--pps", str(pps),
            ),
            "flood",
        )  # fmt: skip
        flood.wait(count / max(pps, 1000) + 60)
        time.sleep(1.5)
        cpu = cpu_seconds(server.pid) - cpu0
        sent = parse_result(flood)
        c = topo.counters("server")
        counted = sum(c.get(k, 0) for k in COUNTED)
        return {
            "kind": kind,
            "size": size,
            "sent": sent["sent"],
            "seconds": round(sent["seconds"], 2),
            "counted": counted,
            "server_cpu_s": round(cpu, 3),
            "ms_per_1000": round(1e6 * cpu / max(counted, 1), 1),
            "counters": {k: c[k] for k in COUNTED if c.get(k)},
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", type=Path, default=multihome_binary())
    ap.add_argument("--kind", choices=["random", "mac1"], default="mac1")
    ap.add_argument("--size", type=int, default=148)
    ap.add_argument("--count", type=int, default=12000)
    ap.add_argument("--pps", type=float, default=4000)
    a = ap.parse_args()
    print(json.dumps(measure(a.binary, a.kind, a.size, a.count, a.pps)))


if __name__ == "__main__":
    main()
