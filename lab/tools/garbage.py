"""Hostile datagrams for the server's UDP port: random bytes, truncated, bit-flipped, replayed.

Role: ``capture`` records real tunnel datagrams seen on an interface (AF_PACKET) so ``send``
can derive malformed variants from them; ``send`` fires a seeded mix of garbage at the server.

Invariants: every datagram sent is invalid for the server — random bytes (overwhelmingly not
a valid message), a strict prefix of a real datagram (truncated), a real datagram with one byte
changed (fails authentication) or an exact copy of one the server already accepted (replay).
The mix is deterministic for a seed. The last stdout line is ``RESULT {json}`` with per-kind
counts.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import struct
import sys
import time
from pathlib import Path

ETH_P_ALL = 0x0003
ETH_HLEN = 14


def capture(args: argparse.Namespace) -> int:
    """Save up to ``--count`` UDP payloads to ``--port`` seen on ``--iface`` as hex lines."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.bind((args.iface, 0))
    sock.settimeout(0.2)
    payloads: list[bytes] = []
    deadline = time.monotonic() + args.timeout
    while len(payloads) < args.count and time.monotonic() < deadline:
        try:
            frame, addr = sock.recvfrom(65535)
        except TimeoutError:
            continue
        if addr[2] == socket.PACKET_OUTGOING or len(frame) < ETH_HLEN + 28:
            continue
        if struct.unpack_from("!H", frame, 12)[0] != 0x0800:
            continue
        ihl = (frame[ETH_HLEN] & 0x0F) * 4
        if frame[ETH_HLEN + 9] != socket.IPPROTO_UDP:
            continue
        udp = ETH_HLEN + ihl
        dport, length = struct.unpack_from("!HH", frame, udp + 2)
        # Skip GSO super-packets: their payload is several datagrams glued together.
        if dport != args.port or len(frame) - udp > 1500:
            continue
        payloads.append(bytes(frame[udp + 8 : udp + length]))
    Path(args.out).write_text("".join(p.hex() + "\n" for p in payloads))
    print("RESULT " + json.dumps({"captured": len(payloads)}), flush=True)
    return 0 if payloads else 1


def variants(samples: list[bytes], rng: random.Random, count: int) -> list[tuple[str, bytes]]:
    kinds = ["random", "truncated", "flipped", "replayed"] if samples else ["random"]
    out = []
    for i in range(count):
        kind = kinds[i % len(kinds)]
        if kind == "random":
            data = rng.randbytes(
                rng.choice([1, 2, 3, 4, 8, 16, 31, 32, 33, 48, 64, 100, 148, 1000, 1400])
            )
        else:
            sample = rng.choice([s for s in samples if len(s) > 1] or samples)
            if kind == "truncated":
                data = sample[: rng.randrange(1, max(2, len(sample)))]
            elif kind == "flipped":
                buf = bytearray(sample)
                pos = rng.randrange(len(buf))
                buf[pos] ^= rng.randrange(1, 256)
                data = bytes(buf)
            else:
                data = sample
        out.append((kind, data))
    return out


def send(args: argparse.Namespace) -> int:
    samples = []
    if args.samples and Path(args.samples).exists():
        samples = [bytes.fromhex(x) for x in Path(args.samples).read_text().split() if x]
    rng = random.Random(args.seed)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    counts: dict[str, int] = {}
    interval = 1.0 / args.pps
    t0 = time.monotonic()
    for i, (kind, data) in enumerate(variants(samples, rng, args.count)):
        delay = t0 + i * interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        sock.sendto(data, (args.host, args.port))
        counts[kind] = counts.get(kind, 0) + 1
    print("RESULT " + json.dumps({"sent": args.count, "kinds": counts}), flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description="hostile datagrams for the server port")
    sub = parser.add_subparsers(dest="mode", required=True)
    c = sub.add_parser("capture")
    c.add_argument("--iface", required=True)
    c.add_argument("--port", type=int, default=7000)
    c.add_argument("--count", type=int, default=64)
    c.add_argument("--timeout", type=float, default=5)
    c.add_argument("--out", required=True)
    s = sub.add_parser("send")
    s.add_argument("--host", required=True)
    s.add_argument("--port", type=int, default=7000)
    s.add_argument("--samples", default="")
    s.add_argument("--count", type=int, default=2000)
    s.add_argument("--pps", type=float, default=500)
    s.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    return capture(args) if args.mode == "capture" else send(args)


if __name__ == "__main__":
    sys.exit(main())
