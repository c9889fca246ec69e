"""TCP bulk transfer with an end-to-end checksum.

Role: ``send`` streams N MiB from a seeded generator over one TCP connection with a named
congestion control; ``recv`` accepts one connection, hashes everything until EOF and reports
bytes, sha256 and duration. The parent compares the receiver's sha256 against
:func:`expected_sha256`, computed locally from the same seed, so corruption, truncation,
duplication or reordering of stream bytes anywhere on the path is detected.

Invariants: block ``i`` of the stream is ``Random(seed * 1_000_003 + i).randbytes(1 MiB)``, so
sender, receiver-side check and parent agree without exchanging data. The final line on stdout
is ``RESULT {json}``; ``PROGRESS <bytes> <seconds>`` lines (stdout, flushed) report the received
count and the time since the connection was accepted.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import socket
import sys
import time
from collections.abc import Iterator

MIB = 1 << 20
# Linux's IPPROTO_MPTCP: a kernel MPTCP socket, for the MPTCP tests (--mptcp).
IPPROTO_MPTCP = 262


def blocks(mib: int, seed: int) -> Iterator[bytes]:
    for i in range(mib):
        yield random.Random(seed * 1_000_003 + i).randbytes(MIB)


def expected_sha256(mib: int, seed: int) -> str:
    digest = hashlib.sha256()
    for block in blocks(mib, seed):
        digest.update(block)
    return digest.hexdigest()


def result(obj: dict) -> None:
    print("RESULT " + json.dumps(obj), flush=True)


def family(addr: str) -> socket.AddressFamily:
    """IPv6 for an address with a colon (``fd00::2``, ``::``), else IPv4."""
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def connect(host: str, port: int, cc: str, timeout: float, proto: int = 0) -> socket.socket:
    """Connect, retrying while the receiver is not listening yet."""
    deadline = time.monotonic() + timeout
    while True:
        sock = socket.socket(family(host), socket.SOCK_STREAM, proto)
        # The namespace default is BBR here; inner flows must name their CC (DESIGN.md §4).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
        sock.settimeout(timeout)
        try:
            sock.connect((host, port))
            return sock
        except (ConnectionRefusedError, TimeoutError, OSError):
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def send(args: argparse.Namespace) -> int:
    proto = IPPROTO_MPTCP if args.mptcp else 0
    sock = connect(args.host, args.port, args.cc, args.connect_timeout, proto)
    # A stalled path must fail the transfer, not hang it: bound every send.
    sock.settimeout(args.stall_timeout)
    digest = hashlib.sha256()
    sent = 0
    start = time.monotonic()
    for block in blocks(args.mib, args.seed):
        sock.sendall(block)
        digest.update(block)
        sent += len(block)
    sock.shutdown(socket.SHUT_WR)
    # Wait for the receiver to close: then every byte was delivered, not just queued.
    sock.recv(1)
    sock.close()
    secs = time.monotonic() - start
    result({"bytes": sent, "sha256": digest.hexdigest(), "seconds": secs, "cc": args.cc})
    return 0


def recv(args: argparse.Namespace) -> int:
    proto = IPPROTO_MPTCP if args.mptcp else 0
    lsock = socket.socket(family(args.bind), socket.SOCK_STREAM, proto)
    if lsock.family == socket.AF_INET6:
        # Dual-stack: `--bind ::` accepts IPv4 senders too, whatever the system default.
        lsock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind((args.bind, args.port))
    lsock.listen(1)
    lsock.settimeout(args.accept_timeout)
    print("LISTENING", flush=True)
    conn, peer = lsock.accept()
    conn.settimeout(args.stall_timeout)
    digest = hashlib.sha256()
    got = 0
    start = time.monotonic()
    last_report = start
    buf = bytearray(4 * MIB)
    view = memoryview(buf)
    try:
        while True:
            n = conn.recv_into(view)
            if n == 0:
                break
            digest.update(view[:n])
            got += n
            now = time.monotonic()
            if now - last_report >= 0.2:
                print(f"PROGRESS {got} {now - start:.3f}", flush=True)
                last_report = now
    except TimeoutError:
        result({"bytes": got, "sha256": digest.hexdigest(), "error": "stalled"})
        return 1
    secs = time.monotonic() - start
    print(f"PROGRESS {got}", flush=True)
    conn.close()
    result(
        {
            "bytes": got,
            "sha256": digest.hexdigest(),
            "seconds": secs,
            "mbps": got * 8 / secs / 1e6 if secs > 0 else 0.0,
            "peer": f"[{peer[0]}]:{peer[1]}" if ":" in peer[0] else f"{peer[0]}:{peer[1]}",
        }
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description="TCP transfer with sha256 check")
    sub = parser.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("send")
    s.add_argument("--host", required=True)
    s.add_argument("--port", type=int, default=9000)
    s.add_argument("--mib", type=int, required=True)
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--cc", choices=["cubic", "bbr", "reno"], required=True)
    s.add_argument("--connect-timeout", type=float, default=10)
    s.add_argument("--stall-timeout", type=float, default=30)
    s.add_argument("--mptcp", action="store_true", help="a kernel MPTCP socket")
    r = sub.add_parser("recv")
    r.add_argument("--bind", default="0.0.0.0", help="address to listen on; `::` = both families")
    r.add_argument("--port", type=int, default=9000)
    r.add_argument("--accept-timeout", type=float, default=30)
    r.add_argument("--mptcp", action="store_true", help="a kernel MPTCP socket")
    r.add_argument("--stall-timeout", type=float, default=30)
    args = parser.parse_args()
    return send(args) if args.mode == "send" else recv(args)


if __name__ == "__main__":
    sys.exit(main())
