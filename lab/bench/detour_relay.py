"""Suite ``detour-relay``: what forwarding a detour costs the relay (issue 15). Not in CI.

Role: three namespaces, client --veth-- relay --veth-- server, the real ``multihome relay``
(release build) in the middle. A detour is requested with the real protocol
(``crates/relay/examples/detour_request.rs``) for the client's UDP port, then iperf3 sends UDP
from that port to the relay port:

- NAT detour at ``--nat-mbps`` (100 Mbit/s): the kernel forwards; the relay process's CPU
  (utime + stime from ``/proc/<pid>/stat``) over the run should be about zero;
- tunnel detour at ``--tunnel-mbps`` (1000 Mbit/s): the relay forwards in userspace
  (recvmmsg/sendmmsg) on one core; the rate the server receives and the relay's CPU (on the
  2 shared cores the iperf3 sender and receiver compete with the relay).

iperf3 is pointed at the relay's address and the server's iperf3 port: a table of the
benchmark's own in the relay DNATs its TCP control connection to the server (and the server
routes back through the relay), one in the client sends its UDP datagrams to the detour's
port. Writes ``bench/results/detour-relay.json`` with the revision (``lab/results.py``).

Run (as root): ``.venv/bin/python -m lab.bench detour-relay [--seconds 10]`` (or
``.venv/bin/python -m lab.bench.detour_relay``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from lab.results import write_result
from lab.topology import multihome_binary

RELAY_IP, SERVER_IP, CLIENT_IP = "198.51.100.1", "203.0.113.2", "198.51.100.2"
LISTEN_PORT, CLIENT_PORT, IPERF_PORT = 51900, 4000, 5201


def sh(*args: str, check: bool = True) -> str:
    return subprocess.run(args, check=check, capture_output=True, text=True).stdout


def nsx(ns: str, *args: str, check: bool = True) -> str:
    return sh("ip", "netns", "exec", ns, *args, check=check)


def topology(tag: str) -> tuple[str, str, str]:
    c, r, s = f"dtb-c-{tag}", f"dtb-r-{tag}", f"dtb-s-{tag}"
    for ns in (c, r, s):
        sh("ip", "netns", "add", ns)
        nsx(ns, "ip", "link", "set", "lo", "up")
    for here, there, ns in (("rc", "cr", c), ("rs", "sr", s)):
        nsx(r, "ip", "link", "add", here, "type", "veth", "peer", "name", there, "netns", ns)
        nsx(r, "ip", "link", "set", here, "up")
        nsx(ns, "ip", "link", "set", there, "up")
    nsx(r, "ip", "addr", "add", f"{RELAY_IP}/24", "dev", "rc")
    nsx(r, "ip", "addr", "add", "203.0.113.1/24", "dev", "rs")
    nsx(c, "ip", "addr", "add", f"{CLIENT_IP}/24", "dev", "cr")
    nsx(s, "ip", "addr", "add", f"{SERVER_IP}/24", "dev", "sr")
    # The relay host routes (NAT detours, iperf3's control connection): a new namespace
    # starts with forwarding off unless the host's sysctls are inherited.
    nsx(r, "sysctl", "-qw", "net.ipv4.ip_forward=1")
    # Only for iperf3's TCP control connection (DNATed by the bench table, not SNATed).
    nsx(s, "ip", "route", "add", "198.51.100.0/24", "via", "203.0.113.1")
    return c, r, s


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)


def udp_rcvbuf_errors(ns: str) -> int:
    """Datagrams the namespace's UDP sockets dropped for a full receive buffer so far."""
    lines = [ln.split() for ln in nsx(ns, "cat", "/proc/net/snmp").splitlines()]
    udp = [ln for ln in lines if ln[0] == "Udp:"]
    return int(dict(zip(udp[0][1:], udp[1][1:], strict=True))["RcvbufErrors"])


def request(binary: Path, client_ns: str, relay_pub: str, key: Path, mode: str) -> dict:
    out = nsx(
        client_ns,
        str(binary),
        f"{CLIENT_IP}:{CLIENT_PORT}",
        f"{RELAY_IP}:{LISTEN_PORT}",
        relay_pub,
        str(key),
        f"{SERVER_IP}:{IPERF_PORT}",
        mode,
    )
    return json.loads(out)


def control_dnat(relay_ns: str, client_ns: str, port: int) -> None:
    """iperf3 talks to relay:IPERF_PORT: its TCP control connection is DNATed to the server
    (bench table in the relay), its UDP datagrams to the detour's port (bench table in the
    client). The control connection cannot use the detour's port: the relay's own table
    drops forwarded TCP to its detour ports that no ``nat-tcp`` detour asked for."""
    nft = "table ip dtbench\ndelete table ip dtbench\ntable ip dtbench {\n"
    relay_rules = (
        f"{nft}  chain pre {{ type nat hook prerouting priority dstnat; policy accept;\n"
        f"    tcp dport {IPERF_PORT} dnat to {SERVER_IP}:{IPERF_PORT}\n  }}\n}}\n"
    )
    client_rules = (
        f"{nft}  chain out {{ type nat hook output priority -100; policy accept;\n"
        f"    ip daddr {RELAY_IP} udp dport {IPERF_PORT} dnat to {RELAY_IP}:{port}\n  }}\n}}\n"
    )
    for ns, rules in ((relay_ns, relay_rules), (client_ns, client_rules)):
        subprocess.run(
            ["ip", "netns", "exec", ns, "nft", "-f", "-"], input=rules, text=True, check=True
        )


def iperf_udp(client_ns: str, port: int, mbps: int, seconds: float) -> dict:
    out = nsx(
        client_ns,
        "iperf3",
        "-J",
        "-u",
        "-l",
        "1400",
        # 4 MB socket buffers at both ends (the sysctl cap here): with the default ~200 KB
        # the iperf3 receiver, not the relay, dropped most of what was lost.
        "-w",
        "4M",
        "-b",
        f"{mbps}M" if mbps else "0",
        "-t",
        str(seconds),
        "--cport",
        str(CLIENT_PORT),
        "-c",
        RELAY_IP,
        "-p",
        str(port),
        check=False,
    )
    d = json.loads(out)
    if "error" in d:
        raise RuntimeError(d["error"])
    s = d["end"]["sum"]
    return {
        "sent_mbps": s["bits_per_second"] / 1e6,
        "lost_percent": s.get("lost_percent"),
        "received_mbps": s["bits_per_second"] * (1 - (s.get("lost_percent") or 0) / 100) / 1e6,
        "datagrams": s.get("packets"),
    }


def run_mode(mode: str, mbps: int, seconds: float, multihome: Path, tool: Path) -> dict:
    tag = f"{mode[0]}{os.getpid() % 10000}"
    c, r, s = topology(tag)
    relay = server = None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            relay_pub = sh(str(multihome), "keygen", "--private-key-file", str(d / "r.key")).strip()
            client_pub = sh(
                str(multihome), "keygen", "--private-key-file", str(d / "c.key")
            ).strip()
            (d / "relay.toml").write_text(
                f'[relay]\nlisten = "0.0.0.0:{LISTEN_PORT}"\nprivate_key_file = "r.key"\n'
                f'name = "bench{tag}"\ncontrol_socket = "{d / "relay.sock"}"\n'
                f'[[client]]\nname = "bench"\npublic_key = "{client_pub}"\n'
            )
            relay = subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    r,
                    str(multihome),
                    "relay",
                    "--config",
                    str(d / "relay.toml"),
                ],
                stderr=subprocess.DEVNULL,
            )
            time.sleep(0.5)
            pid = int(nsx(r, "pgrep", "-f", f"relay --config {d / 'relay.toml'}").split()[0])
            server = subprocess.Popen(
                ["ip", "netns", "exec", s, "iperf3", "-s", "-p", str(IPERF_PORT)],
                stdout=subprocess.DEVNULL,
            )
            time.sleep(0.3)
            answer = request(tool, c, relay_pub, d / "c.key", mode)
            port = answer["relay_port"]
            control_dnat(r, c, port)
            t0, ticks0 = time.monotonic(), cpu_ticks(pid)
            res = iperf_udp(c, IPERF_PORT, mbps, seconds)
            dt, ticks = time.monotonic() - t0, cpu_ticks(pid) - ticks0
            res |= {
                # Where the datagrams were lost: the relay's socket or the iperf3 server's.
                "relay_rcvbuf_drops": udp_rcvbuf_errors(r),
                "server_rcvbuf_drops": udp_rcvbuf_errors(s),
                "answer": answer,
                "offered_mbps": mbps or "unlimited",
                "relay_cpu_seconds": ticks / os.sysconf("SC_CLK_TCK"),
                "relay_cpu_percent": 100 * ticks / os.sysconf("SC_CLK_TCK") / dt,
                "seconds": seconds,
            }
            relay.terminate()
            relay.wait(timeout=10)
            res["table_left"] = f"multihome_relay_bench{tag}" in nsx(r, "nft", "list", "tables")
            return res
    finally:
        for p in (relay, server):
            if p and p.poll() is None:
                p.terminate()
                p.wait(timeout=10)
        for ns in (c, r, s):
            sh("ip", "netns", "del", ns, check=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--nat-mbps", type=int, default=100)
    ap.add_argument(
        "--tunnel-mbps",
        type=int,
        default=1000,
        help="offered rate of the tunnel run (0: unlimited)",
    )
    args = ap.parse_args(argv)
    # $MULTIHOME_BIN (or <target dir>/release/multihome) and the example built beside it.
    multihome = multihome_binary()
    tool = multihome.parent / "examples" / "detour_request"
    for b in (multihome, tool):
        if not b.exists():
            raise SystemExit(
                f"missing {b}: cargo build --release -p multihome && "
                "cargo build --release -p multihome-relay --example detour_request"
            )
    result = {
        "suite": "detour-relay",
        "nat": run_mode("nat", args.nat_mbps, args.seconds, multihome, tool),
        "tunnel": run_mode("tunnel", args.tunnel_mbps, args.seconds, multihome, tool),
    }
    path = write_result("detour-relay", result)
    print(json.dumps(result, indent=2))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
