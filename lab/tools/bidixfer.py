"""One TCP (or kernel MPTCP) connection that carries data both ways at once, with a timeline.

Role: ``server`` accepts one connection, ``client`` opens it; then each end sends
``--send-bytes`` bytes (or for ``--send-seconds``) while it receives whatever the peer sends,
and reports how long the whole exchange took, what it received, and the receive timeline. The
benchmarks use it for the simult-flows matrix (16 MiB each way, like ``mptcp_connect`` in the
kernel selftest) and for failover (one-way for a fixed time, longest gap in delivered bytes).

Invariants:

* ``--mptcp`` opens an ``IPPROTO_MPTCP`` socket (what ``mptcpize`` does by LD_PRELOAD), so the
  kernel's MPTCP path manager adds subflows; the congestion control (``--cc``) is always set
  explicitly (the namespace default here is BBR).
* ``seconds`` runs from connect/accept until this end has sent everything and received the
  peer's EOF. The server half-closes only after it got the client's EOF, so on the client
  ``seconds`` covers delivery in both directions.
* ``max_gap_s`` is the longest time between two consecutive receptions after the first byte
  (CLOCK_MONOTONIC); ``timeline`` lists cumulative received bytes at the end of each
  ``--bin-ms`` bin since connect. The last stdout line is ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time

IPPROTO_MPTCP = 262
CHUNK = 64 * 1024


def result(obj: dict) -> None:
    print("RESULT " + json.dumps(obj), flush=True)


def make_socket(mptcp: bool, cc: str) -> socket.socket:
    proto = IPPROTO_MPTCP if mptcp else socket.IPPROTO_TCP
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, proto)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
    return sock


class Sender(threading.Thread):
    """Sends the configured amount, then half-closes; records any error."""

    def __init__(
        self,
        sock: socket.socket,
        nbytes: int,
        seconds: float,
        half_close: bool,
        close_after: float = 0.0,
    ) -> None:
        super().__init__(daemon=True)
        self.sock, self.nbytes, self.seconds = sock, nbytes, seconds
        self.half_close = half_close
        self.close_after = close_after
        self.sent = 0
        self.error: str | None = None
        self.finished_at: float | None = None

    def run(self) -> None:
        block = bytes(range(256)) * (CHUNK // 256)
        start = time.monotonic()
        try:
            while True:
                if self.seconds > 0:
                    if time.monotonic() - start >= self.seconds:
                        break
                    n = CHUNK
                else:
                    n = min(CHUNK, self.nbytes - self.sent)
                    if n <= 0:
                        break
                self.sock.sendall(block[:n])
                self.sent += n
            if self.half_close:
                # Kernel MPTCP refuses new subflows once the peer's DATA_FIN arrived: a client
                # that sends a little and then only receives keeps its side open meanwhile.
                time.sleep(max(0.0, start + self.close_after - time.monotonic()))
                self.sock.shutdown(socket.SHUT_WR)
        except OSError as exc:
            self.error = f"send: {exc!r}"
        self.finished_at = time.monotonic()


def exchange(sock: socket.socket, args: argparse.Namespace, t0: float, is_server: bool) -> int:
    sock.settimeout(args.stall_timeout)
    # The client half-closes when it has sent everything; the server only once it has also
    # received the client's EOF, so the client's EOF means "every byte delivered both ways".
    close_after = 0.0 if is_server else args.close_after
    sender = Sender(sock, args.send_bytes, args.send_seconds, not is_server, close_after)
    sender.start()
    got = 0
    first = last = None
    max_gap = 0.0
    gap_at = None
    bin_s = args.bin_ms / 1000
    timeline: list[int] = []  # cumulative bytes at the end of bin i, i.e. at (i + 1) * bin_s
    buf = bytearray(1 << 20)
    error = None
    try:
        while True:
            n = sock.recv_into(buf)
            now = time.monotonic()
            while len(timeline) < int((now - t0) / bin_s):
                timeline.append(got)  # bins that ended before this reception
            if n == 0:
                break
            if last is not None and now - last > max_gap:
                max_gap, gap_at = now - last, last - t0
            if first is None:
                first = now
            last = now
            got += n
    except OSError as exc:  # timeout (stall) or reset
        error = f"recv: {exc!r}"
    sender.join(timeout=args.stall_timeout)
    if is_server and error is None and sender.error is None:
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError as exc:
            error = f"shutdown: {exc!r}"
    done = time.monotonic()
    sock.close()
    result(
        {
            "sent": sender.sent,
            "received": got,
            "seconds": done - t0,
            "first_byte_s": None if first is None else first - t0,
            "max_gap_s": max_gap,
            "gap_at_s": gap_at,
            "bin_ms": args.bin_ms,
            "timeline": [*timeline, got],
            "error": error or sender.error,
        }
    )
    return 0 if (error or sender.error) is None else 1


def server(args: argparse.Namespace) -> int:
    lsock = make_socket(args.mptcp, args.cc)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind((args.bind, args.port))
    lsock.listen(1)
    lsock.settimeout(args.accept_timeout)
    print("LISTENING", flush=True)
    conn, _peer = lsock.accept()
    t0 = time.monotonic()
    # Keep listening: MPTCP's MP_JOIN SYNs for extra subflows arrive at the listener.
    try:
        return exchange(conn, args, t0, is_server=True)
    finally:
        lsock.close()


def client(args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.connect_timeout
    while True:
        sock = make_socket(args.mptcp, args.cc)
        sock.settimeout(args.connect_timeout)
        t0 = time.monotonic()
        try:
            sock.connect((args.host, args.port))
            print("CONNECTED", flush=True)
            break
        except OSError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    return exchange(sock, args, t0, is_server=False)


def main() -> int:
    parser = argparse.ArgumentParser(description="bidirectional TCP/MPTCP transfer")
    sub = parser.add_subparsers(dest="mode", required=True)
    for name in ("server", "client"):
        p = sub.add_parser(name)
        p.add_argument("--port", type=int, default=9100)
        p.add_argument("--mptcp", action="store_true")
        p.add_argument("--cc", choices=["cubic", "bbr", "reno"], required=True)
        p.add_argument("--send-bytes", type=int, default=0)
        p.add_argument("--send-seconds", type=float, default=0.0)
        p.add_argument("--stall-timeout", type=float, default=30)
        p.add_argument("--bin-ms", type=float, default=100)
        if name == "server":
            p.add_argument("--bind", default="0.0.0.0")
            p.add_argument("--accept-timeout", type=float, default=30)
        else:
            p.add_argument("--host", required=True)
            p.add_argument("--connect-timeout", type=float, default=10)
            p.add_argument(
                "--close-after",
                type=float,
                default=0.0,
                help="half-close no earlier than this many seconds after connect",
            )
    args = parser.parse_args()
    return server(args) if args.mode == "server" else client(args)


if __name__ == "__main__":
    sys.exit(main())
