"""A video call and a voice stream over UDP, with per-packet send and receive times.

Role: ``send`` emits, for ``--seconds``, a video stream of ``--fps`` frames per second at a
mean ``--video-kbit`` and a voice stream of ``--voice-bytes`` every ``--voice-ms``; ``recv``
records the first copy of every packet with its receive time. The bench
(lab/bench/realtime_media_metrics.py) turns the sender's manifest and the receiver's log into
frames on time / late / lost and one-way delays.

Video frame sizes (documented so a run can be reproduced from its seed): a group of pictures
of ``--gop`` frames opens with an I-frame whose mean size is ``--i-ratio`` times a P-frame's;
every frame's size is its kind's mean times a log-normal factor of mean 1
(``exp(sigma * Z - sigma**2 / 2)``, ``Z`` standard normal, ``--sigma``). The means are set so
a group carries ``video-kbit * gop / fps`` kbit: P = bytes per group / (i-ratio + gop - 1).
A frame is cut into ``ceil(size / max-payload)`` UDP datagrams, all ``--max-payload`` bytes
but the last, and they leave back to back (an encoder without a pacer: the bursty case).

Wire format of every datagram (big-endian): ``kind u8`` (1 video, 2 voice), ``0 u8``,
``index u16`` (packet of the frame), ``count u16`` (packets in the frame), ``frame u32``
(frame number; for voice the packet number), ``frame_ns u64`` (when the frame's first packet
left), ``send_ns u64``, then padding to the datagram's size.

Invariants: timestamps are CLOCK_MONOTONIC nanoseconds, which all network namespaces of one
host share, so a receiver in another namespace measures true one-way delay; the schedule is
absolute (``t0 + i / fps``), so sleep jitter never accumulates; the same ``--seed`` gives the
same frames. The sender's manifest (``--log``) lists every frame and voice packet it sent; the
receiver stops ``--idle`` seconds after its last packet or at ``--deadline``. The last stdout
line is ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import selectors
import socket
import struct
import sys
import time

HEADER = struct.Struct("!BBHHIQQ")
VIDEO, VOICE = 1, 2


def result(obj: dict) -> None:
    print("RESULT " + json.dumps(obj), flush=True)


def frame_sizes(args: argparse.Namespace) -> list[int]:
    """Bytes of each video frame (see the module doc for the distribution)."""
    rng = random.Random(args.seed)
    n = int(args.seconds * args.fps)
    group_bytes = args.video_kbit * 1000 / 8 * args.gop / args.fps
    p_mean = group_bytes / (args.i_ratio + args.gop - 1)
    sizes = []
    for i in range(n):
        mean = p_mean * (args.i_ratio if i % args.gop == 0 else 1)
        factor = math.exp(args.sigma * rng.gauss(0, 1) - args.sigma**2 / 2)
        sizes.append(max(HEADER.size, round(mean * factor)))
    return sizes


def packet_sizes(size: int, max_payload: int) -> list[int]:
    """Datagram sizes of a frame of ``size`` bytes: full datagrams, then the rest."""
    n = max(1, math.ceil(size / max_payload))
    return [max_payload] * (n - 1) + [max(HEADER.size, size - max_payload * (n - 1))]


def send(args: argparse.Namespace) -> int:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sizes = frame_sizes(args)
    n_voice = int(args.seconds * 1000 / args.voice_ms)
    # Events on one absolute schedule: (time offset s, kind, number).
    events = [(i / args.fps, VIDEO, i) for i in range(len(sizes))]
    events += [(j * args.voice_ms / 1000, VOICE, j) for j in range(n_voice)]
    events.sort()
    video: list[list[int]] = []
    voice: list[list[int]] = []
    errors = 0
    t0 = time.monotonic()
    for offset, kind, num in events:
        delay = t0 + offset - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        if kind == VIDEO:
            parts = packet_sizes(sizes[num], args.max_payload)
            port, frame_ns = args.video_port, time.monotonic_ns()
            video.append([num, len(parts), sizes[num], frame_ns])
        else:
            parts = [args.voice_bytes]
            port, frame_ns = args.voice_port, time.monotonic_ns()
            voice.append([num, frame_ns])
        for idx, size in enumerate(parts):
            head = HEADER.pack(kind, 0, idx, len(parts), num, frame_ns, time.monotonic_ns())
            try:
                sock.sendto(head + b"\x5a" * (size - HEADER.size), (args.host, port))
            except OSError:
                errors += 1  # e.g. ENOBUFS: counted, the packet is lost
    if args.log:
        with open(args.log, "w") as f:
            json.dump({"video": video, "voice": voice}, f)
    result(
        {
            "frames": len(video),
            "voice_packets": len(voice),
            "video_bytes": sum(sizes),
            "send_errors": errors,
            "seconds": time.monotonic() - t0,
        }
    )
    return 0


def recv(args: argparse.Namespace) -> int:
    sel = selectors.DefaultSelector()
    for port in (args.video_port, args.voice_port):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        s.bind((args.bind, port))
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    print("LISTENING", flush=True)
    seen: set[tuple[int, int, int]] = set()
    video: list[list[int]] = []  # frame, index, count, frame_ns, send_ns, recv_ns, bytes
    voice: list[list[int]] = []  # number, send_ns, recv_ns, bytes
    duplicates = 0
    start = time.monotonic()
    last_rx = None
    while time.monotonic() - start < args.deadline:
        if last_rx is not None and time.monotonic() - last_rx > args.idle:
            break
        for key, _ in sel.select(timeout=0.2):
            while True:
                try:
                    data = key.fileobj.recv(65535)  # type: ignore[union-attr]
                except BlockingIOError:
                    break
                recv_ns = time.monotonic_ns()
                last_rx = time.monotonic()
                if len(data) < HEADER.size:
                    continue
                kind, _, idx, count, num, frame_ns, send_ns = HEADER.unpack_from(data)
                if (kind, num, idx) in seen:
                    duplicates += 1
                    continue
                seen.add((kind, num, idx))
                if kind == VIDEO:
                    video.append([num, idx, count, frame_ns, send_ns, recv_ns, len(data)])
                elif kind == VOICE:
                    voice.append([num, send_ns, recv_ns, len(data)])
    if args.log:
        with open(args.log, "w") as f:
            json.dump({"video": video, "voice": voice, "duplicates": duplicates}, f)
    result({"video_packets": len(video), "voice_packets": len(voice), "duplicates": duplicates})
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description="video call + voice over UDP, timestamped")
    sub = parser.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("send")
    s.add_argument("--host", required=True)
    s.add_argument("--seconds", type=float, default=20)
    s.add_argument("--video-kbit", type=float, default=4000)
    s.add_argument("--fps", type=float, default=30)
    s.add_argument("--gop", type=int, default=30)
    s.add_argument("--i-ratio", type=float, default=5)
    s.add_argument("--sigma", type=float, default=0.3)
    s.add_argument("--max-payload", type=int, default=1200)
    s.add_argument("--voice-bytes", type=int, default=160)
    s.add_argument("--voice-ms", type=float, default=20)
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--log", help="write the manifest of frames and voice packets sent (JSON)")
    r = sub.add_parser("recv")
    r.add_argument("--bind", default="0.0.0.0")
    r.add_argument("--idle", type=float, default=2.0)
    r.add_argument("--deadline", type=float, default=120.0)
    r.add_argument("--log", help="write every first copy with its receive time (JSON)")
    for p in (s, r):
        p.add_argument("--video-port", type=int, default=5100)
        p.add_argument("--voice-port", type=int, default=5101)
    args = parser.parse_args()
    return send(args) if args.mode == "send" else recv(args)


if __name__ == "__main__":
    sys.exit(main())
