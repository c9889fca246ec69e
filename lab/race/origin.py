"""The origin of the race lab: a real HTTP server plus a one-byte "hello" server.

Role: run in the origin namespace. ``GET /bytes/<n>`` returns ``n`` bytes of a fixed
pattern (the fetch workload's objects: no files on disk), ``GET /seeded/<mib>/<seed>``
returns the seeded stream of :mod:`lab.tools.tcpxfer` (so its sha256 is known without
sending it), ``POST /upload`` reads the request body and answers with the number of body
bytes it received (the upload workload: the client checks it equals what it sent),
``--hello-port`` accepts TCP connections and writes one byte at once (for measuring
connection set-up to first byte), ``--udp-port`` answers each datagram with the source
address it came from (which uplink carried a UDP flow).

Invariants: HTTP/1.0, one request per connection, ``Content-Length`` always set; the server is
threaded so a slow transfer never delays another; prints ``LISTENING`` once every server is
bound.
"""

from __future__ import annotations

import argparse
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from lab.tools.tcpxfer import MIB, blocks

PATTERN = bytes(range(256)) * 256  # 64 KiB


class Handler(BaseHTTPRequestHandler):
    """Serves generated bodies; logs nothing (thousands of requests)."""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib name
        return

    def do_GET(self) -> None:
        parts = self.path.strip("/").split("/")
        try:
            if parts[0] == "bytes" and len(parts) == 2:
                self._send_bytes(int(parts[1]))
                return
            if parts[0] == "seeded" and len(parts) == 3:
                self._send_seeded(int(parts[1]), int(parts[2]))
                return
        except (ValueError, BrokenPipeError, ConnectionResetError):
            return
        self.send_error(404)

    def do_POST(self) -> None:
        if self.path != "/upload":
            self.send_error(404)
            return
        try:
            left = int(self.headers.get("Content-Length", "0"))
            got = 0
            while left > 0:
                chunk = self.rfile.read(min(left, 1 << 16))
                if not chunk:
                    break
                got += len(chunk)
                left -= len(chunk)
            body = str(got).encode()
            self._head(len(body))
            self.wfile.write(body)
        except (ValueError, BrokenPipeError, ConnectionResetError):
            return

    def _head(self, length: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def _send_bytes(self, n: int) -> None:
        self._head(n)
        left = n
        while left > 0:
            chunk = PATTERN[: min(left, len(PATTERN))]
            self.wfile.write(chunk)
            left -= len(chunk)

    def _send_seeded(self, mib: int, seed: int) -> None:
        self._head(mib * MIB)
        for block in blocks(mib, seed):
            self.wfile.write(block)


def hello_server(addr: str, port: int) -> None:
    srv = socket.create_server((addr, port), backlog=512, reuse_port=True)
    while True:
        conn, _ = srv.accept()
        try:
            conn.sendall(b"x")
        except OSError:
            pass
        finally:
            conn.close()


def udp_source_server(addr: str, port: int) -> None:
    srv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    srv.bind((addr, port))
    while True:
        _, peer = srv.recvfrom(2048)
        srv.sendto(peer[0].encode(), peer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bind", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=80)
    parser.add_argument("--hello-port", type=int, default=0)
    parser.add_argument("--udp-port", type=int, default=0)
    args = parser.parse_args()
    ThreadingHTTPServer.request_queue_size = 512
    httpd = ThreadingHTTPServer((args.bind, args.port), Handler)
    httpd.daemon_threads = True
    if args.hello_port:
        threading.Thread(
            target=hello_server, args=(args.bind, args.hello_port), daemon=True
        ).start()
    if args.udp_port:
        threading.Thread(
            target=udp_source_server, args=(args.bind, args.udp_port), daemon=True
        ).start()
    print("LISTENING", flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
