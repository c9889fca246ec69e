"""Traffic generators and meters run between two namespaces.

Role: start the tools of :mod:`lab.tools` (TCP transfer with checksum, paced UDP stream) and
iperf3 in namespaces, wait for them and parse their results; ping RTT. Used by the topology,
the end-to-end tests, the benchmark and the demo.

Invariants: every TCP flow names its congestion control (``-C cubic|bbr``; the namespace
default here is BBR, most hosts run CUBIC); a receiver is listening before its sender starts;
a result is only returned when both ends reported one, otherwise :class:`LabError` carries both
logs.
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from dataclasses import dataclass

from lab.netns import LabError, Namespace, Proc, tool_cmd
from lab.tools.tcpxfer import expected_sha256


def parse_result(proc: Proc) -> dict:
    """The ``RESULT {json}`` line a tool printed last."""
    for line in reversed(proc.output().splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise LabError(f"{proc.name} printed no RESULT (rc={proc.popen.returncode}):\n{proc.tail()}")


def wait_listening(proc: Proc, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while "LISTENING" not in proc.output():
        if not proc.alive():
            raise LabError(f"{proc.name} exited before listening:\n{proc.tail()}")
        if time.monotonic() > deadline:
            raise LabError(f"{proc.name} not listening after {timeout}s:\n{proc.tail()}")
        time.sleep(0.05)


@dataclass
class TransferResult:
    mib: int
    expected_sha256: str
    received_sha256: str
    received_bytes: int
    seconds: float
    mbps: float

    @property
    def intact(self) -> bool:
        return self.received_sha256 == self.expected_sha256 and self.received_bytes == self.mib * (
            1 << 20
        )


class TcpTransfer:
    """A running checksummed TCP transfer from ``src`` to ``dst_addr`` (a host in ``dst``)."""

    def __init__(
        self,
        src: Namespace,
        dst: Namespace,
        dst_addr: str,
        *,
        mib: int,
        cc: str,
        seed: int = 1,
        port: int = 9000,
        mptcp: bool = False,
    ) -> None:
        self.mib = mib
        self.seed = seed
        self.started = time.monotonic()
        extra = ["--mptcp"] if mptcp else []
        # An IPv6 destination needs an IPv6 listener (`::` takes both families).
        bind = ["--bind", "::"] if ":" in dst_addr else []
        self.receiver = dst.spawn(
            tool_cmd("tcpxfer", "recv", "--port", str(port), *bind, *extra), f"rx{port}"
        )
        wait_listening(self.receiver)
        self.sender = src.spawn(
            tool_cmd(
                "tcpxfer",
                "send",
                "--host",
                dst_addr,
                "--port",
                str(port),
                "--mib",
                str(mib),
                "--seed",
                str(seed),
                "--cc",
                cc,
                *extra,
            ),
            f"tx{port}",
        )

    def received_bytes(self) -> int:
        """Bytes the receiver has reported so far (progress every 0.2 s)."""
        for line in reversed(self.receiver.output().splitlines()):
            if line.startswith("PROGRESS "):
                return int(line.split()[1])
        return 0

    def progress(self) -> list[tuple[float, int]]:
        """(seconds since accept, bytes received) at each progress report so far."""
        out = []
        for line in self.receiver.output().splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] == "PROGRESS":
                out.append((float(parts[2]), int(parts[1])))
        return out

    def wait_progress(self, nbytes: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.received_bytes() < nbytes:
            if not self.receiver.alive() or time.monotonic() > deadline:
                raise LabError(
                    f"transfer reached {self.received_bytes()} of {nbytes} bytes "
                    f"in {timeout}s\nsender:\n{self.sender.tail()}\n"
                    f"receiver:\n{self.receiver.tail()}"
                )
            time.sleep(0.05)

    def done(self) -> bool:
        return not self.receiver.alive() and not self.sender.alive()

    def wait(self, timeout: float) -> TransferResult:
        try:
            self.receiver.wait(timeout)
            self.sender.wait(max(1.0, timeout - (time.monotonic() - self.started)))
        except LabError as exc:
            raise LabError(f"{exc}\nsender:\n{self.sender.tail()}") from exc
        rx = parse_result(self.receiver)
        parse_result(self.sender)  # the sender saw its data acknowledged and the close
        return TransferResult(
            mib=self.mib,
            expected_sha256=expected_sha256(self.mib, self.seed),
            received_sha256=rx["sha256"],
            received_bytes=rx["bytes"],
            seconds=rx.get("seconds", float("nan")),
            mbps=rx.get("mbps", 0.0),
        )


class UdpStream:
    """A running paced UDP stream from ``src`` to ``dst_addr`` with a counting receiver."""

    def __init__(
        self,
        src: Namespace,
        dst: Namespace,
        dst_addr: str,
        *,
        count: int,
        pps: float,
        size: int = 200,
        port: int = 5004,
        idle_s: float = 3.0,
        log: str | None = None,
    ) -> None:
        self.count = count
        deadline = count / pps + 30
        extra = ["--log", log] if log else []
        self.receiver = dst.spawn(
            tool_cmd(
                "udpstream",
                "recv",
                "--port",
                str(port),
                "--count",
                str(count),
                "--idle",
                str(idle_s),
                "--deadline",
                str(deadline),
                *extra,
            ),
            f"udprx{port}",
        )
        wait_listening(self.receiver)
        self.sender = src.spawn(
            tool_cmd(
                "udpstream",
                "send",
                "--host",
                dst_addr,
                "--port",
                str(port),
                "--count",
                str(count),
                "--pps",
                str(pps),
                "--size",
                str(size),
            ),
            f"udptx{port}",
        )
        self.timeout = deadline + 10

    def wait(self) -> dict:
        self.sender.wait(self.timeout)
        self.receiver.wait(self.timeout)
        out = parse_result(self.receiver)
        out["sender"] = parse_result(self.sender)
        return out


def iperf3(
    client: Namespace,
    server: Namespace,
    server_addr: str,
    *,
    cc: str,
    seconds: float = 10,
    reverse: bool = False,
    port: int = 5201,
    interval: float = 1.0,
    extra: tuple[str, ...] = (),
) -> dict:
    """One iperf3 TCP test; returns iperf3's JSON with ``mbps`` (receiver side) added."""
    srv = server.spawn(["iperf3", "-s", "-1", "-p", str(port)], f"iperf3s{port}")
    # iperf3 -s prints nothing until a client comes; give it a moment to bind, then retry.
    time.sleep(0.3)
    cmd = [
        "iperf3",
        "-c",
        server_addr,
        "-p",
        str(port),
        "-C",
        cc,
        "-t",
        str(seconds),
        "-i",
        str(interval),
        "-J",
        *extra,
    ]
    if reverse:
        cmd.append("-R")
    res = None
    for _attempt in range(5):
        res = client.run(cmd, check=False, timeout=seconds + 60)
        if res.returncode == 0 or "Connection refused" not in res.stdout + res.stderr:
            break
        time.sleep(0.5)
    srv.stop()
    assert res is not None
    if res.returncode != 0:
        raise LabError(f"iperf3 failed: {' '.join(cmd)}\n{res.stdout[-2000:]}\n{res.stderr}")
    data = json.loads(res.stdout)
    data["mbps"] = data["end"]["sum_received"]["bits_per_second"] / 1e6
    return data


def iperf3_intervals_mbps(data: dict) -> list[tuple[float, float]]:
    """``(interval end time s, Mbit/s)`` for each iperf3 reporting interval."""
    return [
        (iv["sum"]["end"], iv["sum"]["bits_per_second"] / 1e6) for iv in data.get("intervals", [])
    ]


def ping_rtts_ms(src: Namespace, addr: str, count: int = 50, interval: float = 0.01) -> list[float]:
    """Per-packet RTTs of ``ping -c count -i interval`` (sub-0.2 s intervals need root)."""
    if shutil.which("ping") is None:
        raise LabError("ping missing: apt-get install iputils-ping")
    res = src.run(["ping", "-n", "-c", str(count), "-i", str(interval), addr], check=False)
    rtts = [float(tok.split("=")[1]) for tok in res.stdout.split() if tok.startswith("time=")]
    if not rtts:
        raise LabError(f"ping {addr} from {src.name}: no replies\n{res.stdout}{res.stderr}")
    return rtts


def median_rtt_ms(src: Namespace, addr: str, count: int = 50) -> float:
    return statistics.median(ping_rtts_ms(src, addr, count))
