"""Paced UDP stream with sequence numbers: loss, duplicates, reordering, one-way latency.

Role: ``send`` emits N datagrams at R packets/s, each carrying ``(seq, send time)``; ``recv``
counts what arrives and reports lost, duplicated and reordered packets and latency percentiles
(and, with ``--log``, every packet's send and receive times, for plots).

Invariants: timestamps are CLOCK_MONOTONIC nanoseconds, which all network namespaces of one
host share, so sender and receiver in different namespaces measure true one-way latency.
Pacing follows an absolute schedule (``t0 + i / R``) so sleep jitter never accumulates. The
receiver stops once all N sequence numbers arrived, after ``--idle`` seconds without a packet
(once the first arrived) or at ``--deadline``. The last stdout line is ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time

HEADER = struct.Struct("!IQ")  # sequence number, send time in ns (CLOCK_MONOTONIC)


def result(obj: dict) -> None:
    print("RESULT " + json.dumps(obj), flush=True)


def send(args: argparse.Namespace) -> int:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if args.sport:
        sock.bind(("0.0.0.0", args.sport))
    pad = b"\x5a" * max(0, args.size - HEADER.size)
    interval = 1.0 / args.pps
    t0 = time.monotonic()
    errors = 0
    for seq in range(args.count):
        target = t0 + seq * interval
        delay = target - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        try:
            sock.sendto(HEADER.pack(seq, time.monotonic_ns()) + pad, (args.host, args.port))
        except OSError:
            errors += 1  # e.g. ENOBUFS/EHOSTUNREACH during a failover; counted, not fatal
    result({"sent": args.count, "send_errors": errors, "seconds": time.monotonic() - t0})
    return 0


def percentile(sorted_vals: list[float], q: float) -> float:
    if not sorted_vals:
        return float("nan")
    idx = min(len(sorted_vals) - 1, max(0, round(q * (len(sorted_vals) - 1))))
    return sorted_vals[idx]


def recv(args: argparse.Namespace) -> int:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind((args.bind, args.port))
    print("LISTENING", flush=True)
    seen: set[int] = set()
    duplicates = 0
    reordered = 0
    max_seq = -1
    latencies_ms: list[float] = []
    packets: list[tuple[int, int, int]] = []  # (seq, sent ns, received ns), for --log
    start = time.monotonic()
    last_rx = None
    while len(seen) < args.count:
        now = time.monotonic()
        if now - start > args.deadline:
            break
        if last_rx is not None and now - last_rx > args.idle:
            break
        sock.settimeout(0.2)
        try:
            data = sock.recv(65535)
        except TimeoutError:
            continue
        recv_ns = time.monotonic_ns()
        last_rx = time.monotonic()
        if len(data) < HEADER.size:
            continue
        seq, sent_ns = HEADER.unpack_from(data)
        if seq in seen:
            duplicates += 1
            continue
        seen.add(seq)
        if seq < max_seq:
            reordered += 1  # arrived after a higher sequence number (RFC 4737 style)
        max_seq = max(max_seq, seq)
        latencies_ms.append((recv_ns - sent_ns) / 1e6)
        if args.log:
            packets.append((seq, sent_ns, recv_ns))
    if args.log:
        with open(args.log, "w") as f:
            json.dump(packets, f)
    latencies_ms.sort()
    lost = args.count - len(seen)
    result(
        {
            "expected": args.count,
            "received": len(seen),
            "lost": lost,
            "loss": lost / args.count,
            "duplicates": duplicates,
            "reordered": reordered,
            "latency_ms": {
                "p50": percentile(latencies_ms, 0.5),
                "p99": percentile(latencies_ms, 0.99),
                "max": latencies_ms[-1] if latencies_ms else float("nan"),
            },
        }
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description="paced UDP stream with sequence numbers")
    sub = parser.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("send")
    s.add_argument("--host", required=True)
    s.add_argument("--port", type=int, default=5004)
    s.add_argument("--sport", type=int, default=0)
    s.add_argument("--count", type=int, default=2000)
    s.add_argument("--pps", type=float, default=50)
    s.add_argument("--size", type=int, default=200)
    r = sub.add_parser("recv")
    r.add_argument("--bind", default="0.0.0.0")
    r.add_argument("--port", type=int, default=5004)
    r.add_argument("--count", type=int, default=2000)
    r.add_argument("--idle", type=float, default=3.0)
    r.add_argument("--deadline", type=float, default=120.0)
    r.add_argument("--log", help="write every first copy as [seq, sent ns, received ns] (JSON)")
    args = parser.parse_args()
    return send(args) if args.mode == "send" else recv(args)


if __name__ == "__main__":
    sys.exit(main())
