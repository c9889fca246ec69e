"""The fetch workload of the race lab (§4.1 of Rao, "Gateway Selection in Multi-hop Wireless
Networks", MIT M.Eng. thesis, 2005), and single fetches for tests.

Role, by subcommand:

* ``dataset`` (run in the gateway namespace, no daemon): fetch a list of objects — sizes drawn
  from a web-like distribution — over *every* uplink, each socket bound to the uplink's device
  and address, recording per object and uplink the connection time, the total download time
  and the status; probe each uplink with a TCP handshake every ``--probe-interval`` seconds.
  Writes the JSON-lines dataset that ``multihome race --replay`` reads.
* ``live`` (run in the LAN namespace): fetch objects through the gateway, one connection each,
  recording the download time.
* ``dataset --upload`` / ``live --upload``: the same with uploads (the thesis's §4.5.3): each
  object is POSTed to the origin (sizes from :func:`upload_sizes`), timed until the origin
  confirmed every byte.
* ``get``: one download, optionally hashed (sha256), or one upload (``--upload-bytes``),
  printing ``RESULT {json}``.
* ``hello``: time ``count`` connections to a one-byte server up to the first byte.
* ``udp``: one UDP flow (from ``--sport``): ``count`` datagrams to the origin's UDP server,
  printing the source address the origin saw for each (which uplink carried the flow).

Invariants: every fetch ends within ``--timeout`` (the seed's three minutes by default) with a
status among ok / refused / reset / timeout / error; an object counts as ok only when the body
length equals its Content-Length (an upload: when the origin's count equals the bytes sent).
Object sizes and issue times depend only on ``--seed``. The emulated uplinks share no medium,
so every object is fetched over all uplinks at once (the thesis fetched sequentially on
Roofnet only to avoid self-interference on a shared hop).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import socket
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor

MIB = 1 << 20
UPLOAD_BLOCK = bytes(range(256)) * 256  # 64 KiB of upload body


def object_sizes(count: int, seed: int) -> list[int]:
    """Web-like sizes: 85 % log-normal around 8 KB, 15 % Pareto tail from 32 KB, capped 4 MB."""
    rng = random.Random(seed)
    sizes = []
    for _ in range(count):
        # Log-normal median e^9 ≈ 8 KB; Pareto tail from 32 KB.
        body = rng.random() < 0.85
        s = rng.lognormvariate(9.0, 1.1) if body else 32_000 * rng.paretovariate(1.3)
        sizes.append(int(min(max(s, 200), 4 * MIB)))
    return sizes


def upload_sizes(count: int, seed: int) -> list[int]:
    """Upload sizes, smaller than downloads (uplinks are the narrow direction): 85 %
    log-normal around 3 KB, 15 % Pareto tail from 16 KB, capped at 1 MB; mean ≈ 11.6 KB
    (E[min(X, c)] = 16 KB · 1.3/0.3 · (1 − (16 KB/1 MB)^0.3) ≈ 49 KB for the tail)."""
    rng = random.Random(seed)
    sizes = []
    for _ in range(count):
        body = rng.random() < 0.85
        s = rng.lognormvariate(8.0, 1.0) if body else 16_000 * rng.paretovariate(1.3)
        sizes.append(int(min(max(s, 200), MIB)))
    return sizes


def sizes_for(args: argparse.Namespace) -> list[int]:
    return (upload_sizes if args.upload else object_sizes)(args.count, args.seed)


def transfer_kw(args: argparse.Namespace, size: int) -> dict:
    """``http_get`` arguments for one object: a download of ``size`` bytes, or an upload."""
    if args.upload:
        return {"path": "/upload", "upload": size}
    return {"path": f"/bytes/{size}"}


def issue_times(count: int, rate: float, seed: int) -> list[float]:
    """Poisson arrivals at ``rate`` objects per second, starting at 0."""
    rng = random.Random(seed + 1)
    t, out = 0.0, []
    for _ in range(count):
        out.append(t)
        t += rng.expovariate(rate)
    return out


def connect(
    host: str,
    port: int,
    timeout: float,
    *,
    device: str | None = None,
    source: str | None = None,
    tos: int = 0,
) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if tos:
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
        if device:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, device.encode())
        if source:
            s.bind((source, 0))
        s.settimeout(timeout)
        s.connect((host, port))
    except BaseException:
        s.close()
        raise
    return s


def reset_close(s: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0): no TIME_WAIT, nothing left at the server."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def http_get(
    host: str,
    port: int,
    path: str,
    *,
    timeout: float,
    device: str | None = None,
    source: str | None = None,
    digest: bool = False,
    tos: int = 0,
    upload: int = 0,
) -> dict:
    """One HTTP/1.0 GET of ``path`` — or, with ``upload`` > 0, a POST of that many bytes to
    ``/upload`` — returning status, connect and total seconds, bytes, optional sha256.

    An upload is ok only when the origin answers 200 with the byte count it received equal to
    ``upload``; its total runs until that answer arrived (every byte was at the origin)."""
    t0 = time.monotonic()
    out: dict = {"status": "error", "connect": None, "total": None, "bytes": 0}
    deadline = t0 + timeout
    try:
        s = connect(host, port, timeout, device=device, source=source, tos=tos)
    except ConnectionRefusedError:
        out.update(status="refused", connect=time.monotonic() - t0)
        return out
    except TimeoutError:
        out["status"] = "timeout"
        return out
    except OSError as exc:
        out["error"] = str(exc)
        return out
    out["connect"] = time.monotonic() - t0
    h = hashlib.sha256() if digest else None
    try:
        if upload:
            _send_upload(s, host, upload, deadline)
        else:
            s.sendall(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        ok, body_len = _read_response(s, deadline, h, str(upload).encode() if upload else None)
        out.update(status="ok" if ok else "error", bytes=upload or body_len)
    except ConnectionResetError:
        out["status"] = "reset"
    except TimeoutError:
        out["status"] = "timeout"
    except OSError as exc:
        out["error"] = str(exc)
    finally:
        s.close()
    out["total"] = time.monotonic() - t0
    if h is not None:
        out["sha256"] = h.hexdigest()
    return out


def _send_upload(s: socket.socket, host: str, size: int, deadline: float) -> None:
    head = f"POST /upload HTTP/1.0\r\nHost: {host}\r\nContent-Length: {size}\r\n\r\n"
    s.sendall(head.encode())
    left = size
    while left > 0:
        s.settimeout(max(0.001, deadline - time.monotonic()))
        n = min(left, len(UPLOAD_BLOCK))
        s.sendall(UPLOAD_BLOCK[:n])
        left -= n


def _read_response(
    s: socket.socket, deadline: float, h: hashlib._Hash | None, expect: bytes | None
) -> tuple[bool, int]:
    """Reads one response to EOF: (200 with the announced length [and body ``expect``], body
    length)."""
    head, body, body_len, length = b"", b"", 0, None
    while True:
        s.settimeout(max(0.001, deadline - time.monotonic()))
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        if length is None:
            head += chunk
            if b"\r\n\r\n" not in head:
                continue
            head, chunk = head.split(b"\r\n\r\n", 1)
            length = _content_length(head)
        body_len += len(chunk)
        if expect is not None and len(body) < 64:
            body += chunk
        if h is not None:
            h.update(chunk)
    ok = length is not None and body_len == length and head.split(b" ")[1:2] == [b"200"]
    return ok and (expect is None or body == expect), body_len


def _content_length(head: bytes) -> int | None:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return None


def probe_loop(
    host: str, port: int, uplinks: list[tuple[str, str]], interval: float, stop: threading.Event
) -> list[dict]:
    """Every ``interval``, a timed TCP handshake per uplink (1 s timeout = lost)."""
    rows: list[dict] = []
    start = time.monotonic()
    while not stop.wait(interval):
        for i, (dev, src) in enumerate(uplinks):
            t = time.monotonic()
            try:
                s = connect(host, port, 1.0, device=dev, source=src)
                rtt = time.monotonic() - t
                reset_close(s)
            except OSError:
                rtt = None
            rows.append({"probe": i, "t": t - start, "rtt": rtt})
    return rows


def run_dataset(args: argparse.Namespace) -> None:
    uplinks = [tuple(u.split("=", 1)) for u in args.uplink]
    sizes = sizes_for(args)
    times = issue_times(args.count, args.rate, args.seed)
    stop = threading.Event()
    probes: list[dict] = []
    prober = threading.Thread(
        target=lambda: probes.extend(
            probe_loop(args.host, args.port, uplinks, args.probe_interval, stop)  # type: ignore[arg-type]
        )
    )
    prober.start()
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        futures = []
        for i, (size, t) in enumerate(zip(sizes, times, strict=True)):
            delay = start + t - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            futures.append(
                [
                    pool.submit(
                        http_get,
                        args.host,
                        args.port,
                        timeout=args.timeout,
                        device=dev,
                        source=src,
                        **transfer_kw(args, size),
                    )
                    for dev, src in uplinks
                ]
            )
            if i % 200 == 0:
                print(f"PROGRESS {i}", flush=True)
        rows = [
            {"id": i, "t": t, "size": size, "links": [f.result() for f in fs]}
            for i, (size, t, fs) in enumerate(zip(sizes, times, futures, strict=True))
        ]
    stop.set()
    prober.join()
    with open(args.out, "w") as f:
        for row in rows + probes:
            f.write(json.dumps(row) + "\n")
    ok = [sum(lk["status"] == "ok" for lk in r["links"]) for r in rows]
    print(
        "RESULT "
        + json.dumps(
            {"objects": len(rows), "probes": len(probes), "ok_links": ok.count(len(uplinks))}
        ),
        flush=True,
    )


def run_live(args: argparse.Namespace) -> None:
    sizes = sizes_for(args)
    times = issue_times(args.count, args.rate, args.seed)
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        futures = []
        for size, t in zip(sizes, times, strict=True):
            delay = start + t - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            futures.append(
                pool.submit(
                    http_get, args.host, args.port, timeout=args.timeout, **transfer_kw(args, size)
                )
            )
        rows = [
            {"id": i, "size": size, **f.result()}
            for i, (size, f) in enumerate(zip(sizes, futures, strict=True))
        ]
    with open(args.out, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    print(
        "RESULT "
        + json.dumps({"objects": len(rows), "ok": sum(r["status"] == "ok" for r in rows)}),
        flush=True,
    )


def run_hello(args: argparse.Namespace) -> None:
    """Connect, read the first byte, close; ``count`` times, one at a time. A connection
    that fails or sends nothing within 5 s is recorded as ``null`` with its error, and the
    next one starts: a benchmark reports its failures instead of stopping at the first."""
    times: list[float | None] = []
    failures = []
    for i in range(args.count):
        t0 = time.monotonic()
        try:
            with connect(args.host, args.port, 5.0) as s:
                port = s.getsockname()[1]
                if s.recv(1) != b"x":
                    raise SystemExit("hello server sent no byte")
            times.append(time.monotonic() - t0)
        except OSError as e:
            times.append(None)
            failures.append({"index": i, "error": str(e), "after_s": time.monotonic() - t0})
            continue
        if times[-1] > 1.0:
            failures.append({"index": i, "port": port, "slow_s": times[-1]})
    print("RESULT " + json.dumps({"seconds": times, "failures": failures}), flush=True)


def run_udp(args: argparse.Namespace) -> None:
    """Send ``count`` datagrams from port ``sport``; collect what the origin says it saw."""
    seen: list[str | None] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("0.0.0.0", args.sport))
        s.connect((args.host, args.port))
        s.settimeout(args.timeout)
        for i in range(args.count):
            s.send(f"probe {i}".encode())
            try:
                seen.append(s.recv(256).decode(errors="replace"))
            except TimeoutError:
                seen.append(None)
    print("RESULT " + json.dumps({"seen": seen}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("dataset", "live", "get", "hello", "udp"):
        p = sub.add_parser(name)
        p.add_argument("--host", required=True)
        p.add_argument("--port", type=int, default=80)
        p.add_argument("--timeout", type=float, default=180.0)
        p.add_argument("--count", type=int, default=1000)
        p.add_argument("--rate", type=float, default=10.0)
        p.add_argument("--seed", type=int, default=1)
        p.add_argument("--workers", type=int, default=64)
        p.add_argument("--out", default="fetch.jsonl")
        p.add_argument("--uplink", action="append", default=[], help="DEV=ADDR (dataset)")
        p.add_argument("--probe-interval", type=float, default=1.0)
        p.add_argument("--path", default="/bytes/1000")
        p.add_argument("--sha256", action="store_true")
        p.add_argument("--tos", type=int, default=0, help="IP TOS byte (DSCP << 2)")
        p.add_argument("--sport", type=int, default=0, help="UDP source port (udp)")
        p.add_argument(
            "--upload", action="store_true", help="POST the objects instead (dataset, live)"
        )
        p.add_argument("--upload-bytes", type=int, default=0, help="get: POST this many bytes")
    args = parser.parse_args()
    if args.cmd == "dataset":
        run_dataset(args)
    elif args.cmd == "live":
        run_live(args)
    elif args.cmd == "hello":
        run_hello(args)
    elif args.cmd == "udp":
        run_udp(args)
    else:
        res = http_get(
            args.host,
            args.port,
            args.path,
            timeout=args.timeout,
            digest=args.sha256,
            tos=args.tos,
            upload=args.upload_bytes,
        )
        print("RESULT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
