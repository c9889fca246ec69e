"""What the sending side sees during a transfer, sampled for diagnosing stalls.

Role: while a download runs, two background threads sample (1) the origin's TCP socket of
the transfer (``ss -tin`` in the origin's namespace: congestion window, RTT, RTO, bytes
acknowledged, segments delivered, lost and retransmitted) and (2) every path of the tunnel
server's session (its status document: state, standby, smoothed RTT, forward queue, pacing
rate, bytes in flight). The inner TCP's cumulative ACK standing still while ``delivered``
creeps shows a hole the receiver waits for; the server's pacing rate against the rate the
link's trace offers shows a path paced below its rate. ``lab/bench/cellular_drive.py
--probe`` stores both series per run.

Invariants: timestamps are seconds after ``t0`` (the caller's clock origin, wall time);
each series holds at most ``MAX_SAMPLES`` rows (later ones are dropped and counted); the
threads end on ``stop()`` and a failing sample is recorded as an error row, never raised.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time

from lab.topology import Topology

# Fields of ``ss -tin`` kept per sample (``key:value`` tokens; rtt is "srtt/rttvar").
SS_FIELDS = ("cwnd", "ssthresh", "rto", "rtt", "unacked", "retrans", "lost", "sacked",
             "bytes_acked", "delivered")  # fmt: skip
# Fields of each path of the server's session kept per sample.
PATH_FIELDS = ("id", "state", "standby", "srtt_ms", "fwd_queue_ms", "pacing_rate_bps",
               "inflight_bytes", "tx_packets")  # fmt: skip
MAX_SAMPLES = 20_000


def parse_ss(text: str, port: int | None = None) -> dict | None:
    """The first TCP socket of ``ss -tin`` output (on ``port`` if given) as numbers, or None."""
    lines = text.splitlines()
    for i, line in enumerate(lines[:-1]):
        if port is not None and f":{port} " not in line + " ":
            continue
        info = lines[i + 1]
        if "bytes_acked" not in info and "cwnd" not in info:
            continue
        row: dict = {}
        for key in SS_FIELDS:
            m = re.search(rf"(?<!\w){key}:(\S+)", info)
            if not m:
                continue
            value = m.group(1)
            if key == "rtt":
                srtt, _, var = value.partition("/")
                row["rtt_ms"], row["rttvar_ms"] = float(srtt), float(var or 0)
            elif key == "retrans":
                now, _, total = value.partition("/")
                row["retrans"], row["retrans_total"] = int(now), int(total or 0)
            else:
                row[key] = int(float(value))
        return row
    return None


def path_rows(status: dict) -> list[dict]:
    """Each path of the first session of a status document, with ``PATH_FIELDS`` only."""
    sessions = status.get("sessions") or []
    if not sessions:
        return []
    return [{k: lk.get(k) for k in PATH_FIELDS} for lk in sessions[0].get("links", [])]


class SenderProbe:
    """Samples the origin's TCP (every ``tcp_interval`` s) and the server's paths (every
    ``path_interval`` s) from ``start()`` to ``stop()``."""

    def __init__(
        self, topo: Topology, port: int, tcp_interval: float = 0.02, path_interval: float = 0.1
    ) -> None:
        self.topo, self.port = topo, port
        self.t0 = time.time()
        self.tcp: list = []
        self.paths: list = []
        self.dropped = 0
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._loop, args=(self._tcp_sample, self.tcp, tcp_interval)),
            threading.Thread(
                target=self._loop, args=(self._path_sample, self.paths, path_interval)
            ),
        ]

    def start(self, t0: float) -> None:
        """Starts sampling; rows are timed in seconds after ``t0`` (wall clock)."""
        self.t0 = t0
        for t in self._threads:
            t.daemon = True
            t.start()

    def stop(self) -> dict:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        return {"tcp": self.tcp, "paths": self.paths, "dropped": self.dropped}

    def _loop(self, sample, into: list, interval: float) -> None:  # noqa: ANN001
        while not self._stop.is_set():
            at = time.time()
            try:
                row = sample()
            except Exception as exc:  # noqa: BLE001 - a diagnostic never fails the run
                row = {"error": str(exc)[:200]}
            if row is not None:
                if len(into) < MAX_SAMPLES:
                    into.append([round(at - self.t0, 3), row])
                else:
                    self.dropped += 1
            self._stop.wait(interval)

    def _tcp_sample(self) -> dict | None:
        cmd = self.topo.org.cmd(["ss", "-tin"])
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=5, check=False)
        return parse_ss(out.stdout, self.port)

    def _path_sample(self) -> dict:
        return {"paths": path_rows(self.topo.status("server"))}
