"""A file server and a downloader that resumes where it stopped (an HTTP Range request, reduced).

Role: ``serve`` answers ``GET <seed> <size> <offset>\\n`` with bytes [offset, size) of a
seeded stream, one connection per request; ``get`` downloads ``size`` bytes and reports the
time, the sha256 of the bytes in stream order, and how often it had to reconnect.

``get --resume`` is the "smart application over TCP/IP" of Mukherjee, *Network-Assisted
Multihoming* §4.2.1: when its connection can no longer work it reconnects and asks for the
rest (``offset`` = bytes already received) instead of starting over. It gives up on a
connection as soon as the connection's local address is gone from the host (a mobile OS
tells applications at once; checked every ``--poll`` seconds) or nothing arrived for
``--stall`` seconds, then tries to connect every ``--poll`` seconds (each try bounded by
``--connect-timeout``) until the new address works. Without ``--resume`` one connection must
carry the whole file (what an application sees through multihome's store-and-forward).

Invariants: byte ``i`` of a stream is byte ``i % 2**20`` of block ``i // 2**20``, block
``b`` = ``Random(seed * 1_000_003 + b).randbytes(2**20)``, the same as ``tcpxfer``'s, so the
parent checks the sha256 with ``tcpxfer.expected_sha256``-style arithmetic; the last stdout
line is ``RESULT {json}``; ``PROGRESS <seconds> <bytes>`` lines (flushed, every 0.25 s and at
each reconnection) give the received count over time. With ``--mark-gaps S``, the first bytes
after S seconds or more without any print ``RESUMED <monotonic> <gap s> <bytes before>``
at once: CLOCK_MONOTONIC, which every namespace of the host shares, so the parent compares
it with when it gave the link back.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import select
import socket
import socketserver
import sys
import time

BLOCK = 1 << 20


def stream(seed: int, offset: int, size: int):
    """Bytes [offset, size) of the seeded stream, in chunks of at most one block."""
    pos = offset
    while pos < size:
        b = pos // BLOCK
        block = random.Random(seed * 1_000_003 + b).randbytes(BLOCK)
        lo = pos - b * BLOCK
        hi = min(BLOCK, size - b * BLOCK)
        yield block[lo:hi]
        pos += hi - lo


def expected_sha256(seed: int, size: int) -> str:
    digest = hashlib.sha256()
    for chunk in stream(seed, 0, size):
        digest.update(chunk)
    return digest.hexdigest()


class Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        line = self.rfile.readline(200).decode(errors="replace").split()
        if len(line) != 4 or line[0] != "GET":
            return
        seed, size, offset = (int(x) for x in line[1:])
        try:
            for chunk in stream(seed, offset, size):
                self.wfile.write(chunk)
        except OSError:
            pass  # the client went away (a broken attachment): it will ask for the rest


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def serve(args: argparse.Namespace) -> None:
    with Server(("0.0.0.0", args.port), Handler) as srv:
        print("LISTENING", flush=True)
        srv.serve_forever()


def address_gone(ip: str) -> bool:
    """Whether ``ip`` is no longer an address of this host (binding to it fails)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.bind((ip, 0))
        return False
    except OSError:
        return True
    finally:
        probe.close()


def connect(args: argparse.Namespace, offset: int) -> socket.socket:
    """Connect and send the request; retry every ``poll`` seconds until it works."""
    while True:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, args.cc.encode())
        sock.settimeout(args.connect_timeout)
        try:
            sock.connect((args.host, args.port))
            sock.sendall(f"GET {args.seed} {args.bytes} {offset}\n".encode())
            sock.setblocking(False)
            return sock
        except OSError:
            sock.close()
            if not args.resume:
                raise
            time.sleep(args.poll)


class Download:
    """State of one download: bytes so far, digest, reconnections, progress output."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.t0 = time.monotonic()
        self.got = 0
        self.digest = hashlib.sha256()
        self.reconnects = 0
        self.last_report = 0.0
        self.last_data = time.monotonic()

    def report(self, force: bool = False) -> None:
        now = time.monotonic() - self.t0
        if force or now - self.last_report >= 0.25:
            print(f"PROGRESS {now:.3f} {self.got}", flush=True)
            self.last_report = now

    def mark_gap(self) -> None:
        """Bytes arrived: say so at once if none had for ``--mark-gaps`` seconds."""
        now = time.monotonic()
        gap = now - self.last_data
        if self.args.mark_gaps > 0 and self.got > 0 and gap >= self.args.mark_gaps:
            print(f"RESUMED {now:.4f} {gap:.3f} {self.got}", flush=True)
        self.last_data = now

    def one_connection(self, sock: socket.socket) -> None:
        """Read until the end, the address is gone or a stall (resume mode)."""
        local = sock.getsockname()[0]
        last_data = last_check = time.monotonic()
        while self.got < self.args.bytes:
            ready, _, _ = select.select([sock], [], [], self.args.poll)
            if ready:
                try:
                    data = sock.recv(1 << 16)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    return
                self.mark_gap()
                self.digest.update(data)
                self.got += len(data)
                last_data = time.monotonic()
            self.report()
            now = time.monotonic()
            if not self.args.resume or now - last_check < self.args.poll:
                continue
            last_check = now
            if address_gone(local) or now - last_data > self.args.stall:
                return

    def run(self) -> dict:
        while self.got < self.args.bytes:
            try:
                sock = connect(self.args, self.got)
            except OSError as exc:
                return self.result(error=f"connect: {exc}")
            try:
                self.one_connection(sock)
            finally:
                sock.close()
            if self.got < self.args.bytes:
                if not self.args.resume:
                    return self.result(error="connection ended early")
                self.reconnects += 1
                self.report(force=True)
        self.report(force=True)
        return self.result()

    def result(self, error: str | None = None) -> dict:
        return {
            "bytes": self.got,
            "sha256": self.digest.hexdigest(),
            "seconds": time.monotonic() - self.t0,
            "reconnects": self.reconnects,
            "error": error,
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, default=8080)
    g = sub.add_parser("get")
    g.add_argument("--host", required=True)
    g.add_argument("--port", type=int, default=8080)
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--bytes", type=int, required=True)
    g.add_argument("--cc", default="cubic")
    g.add_argument("--resume", action="store_true")
    g.add_argument("--poll", type=float, default=0.05)
    g.add_argument("--stall", type=float, default=3.0)
    g.add_argument("--connect-timeout", type=float, default=1.0)
    g.add_argument("--mark-gaps", type=float, default=0.0)
    args = parser.parse_args()
    if args.cmd == "serve":
        serve(args)
        return 0
    res = Download(args).run()
    print("RESULT " + json.dumps(res), flush=True)
    return 0 if res["error"] is None else 1


if __name__ == "__main__":
    sys.exit(main())
