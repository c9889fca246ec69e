"""One total outage of a client's only link, with a new address after it (issue 16).

Role: the set-up shared by the end-to-end test (lab/tests/test_mobility_e2e.py) and the
``outage`` benchmark (lab/bench/outage.py): a Wi-Fi-like link through linkem, an outage
played on it by :class:`~lab.bench.vehicular_drive.DrivePlayer` — coverage lost (linkem drops
everything, carrier down, address and routes gone), association ``DHCP_S`` before the end
(carrier back, no address), then a new address ``10.0.101.2`` as DHCP would give — and
downloads by ``lab/tools/rangeget.py`` that mark the first bytes after a silence with the
host's monotonic clock, so the time from the link's return (the new address) to
the first new bytes at the receiving application is measured, not inferred.

Invariants: the link's return is the moment the new address starts being configured (no
packet can cross before: the interface has no address; measured from there, the commands'
own few ms count against the mechanism); a download's figures come from
the receiving application's own marks (``RESUMED``), never from daemon counters.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from lab.bench.vehicular_drive import DrivePlayer
from lab.drive import Attachment
from lab.netns import LabError, Namespace, Proc, tool_cmd
from lab.tools.rangeget import expected_sha256
from lab.topology import LinkSpec, Topology
from lab.traffic import wait_listening

OUTAGE_S = 30.0
DHCP_S = 1.5
RATE_MBIT = 50
DELAY_MS = 5
# A gap in the received bytes at least this long is an outage, not a hiccup.
MARK_GAPS_S = 1.0
# Far beyond any outage here: the second attachment lasts until the player is stopped.
FOREVER_S = 24 * 3600.0


def wifi_spec() -> LinkSpec:
    """The client's one link: RATE_MBIT each way, DELAY_MS one way, a 100 ms queue."""
    queue = int(RATE_MBIT * 1e6 / 8 * 0.1)
    link = {"rate": f"{RATE_MBIT}mbit", "delay": f"{DELAY_MS}ms", "queue_bytes": queue}
    return LinkSpec("wifi", linkem={"both": link})


def outage_schedule(outage_s: float = OUTAGE_S, dhcp_s: float = DHCP_S) -> list[Attachment]:
    """Coverage lost at once; association at ``outage_s - dhcp_s``; new address at
    ``outage_s`` (attachment 1, ``10.0.101.2``)."""
    return [
        Attachment(index=0, enter=0.0, up=0.0, down=0.0),
        Attachment(index=1, enter=outage_s - dhcp_s, up=outage_s, down=FOREVER_S),
    ]


def returned_at(player: DrivePlayer) -> float | None:
    """CLOCK_MONOTONIC when the new address was being configured (just before its ``ip``
    commands: the tunnel can move before the last of them returns), once it is in place."""
    for e in player.log:
        if e["event"] == "up":
            return e["begun"]
    return None


def serve(ns: Namespace, port: int) -> Proc:
    """A rangeget file server in ``ns``."""
    proc = ns.spawn(tool_cmd("rangeget", "serve", "--port", str(port)), f"serve{port}")
    wait_listening(proc)
    return proc


@dataclass
class Download:
    """A running ``rangeget get``: its process and what it must deliver."""

    proc: Proc
    size: int
    seed: int

    def got(self) -> int:
        """Bytes received so far (its last PROGRESS line, at most 0.25 s old)."""
        for line in reversed(self.proc.output().splitlines()):
            if line.startswith("PROGRESS "):
                return int(line.split()[2])
        return 0

    def resumed(self) -> list[tuple[float, float, int]]:
        """(monotonic time, gap s, bytes before) of each first arrival after a gap."""
        out = []
        for line in self.proc.output().splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[0] == "RESUMED":
                out.append((float(parts[1]), float(parts[2]), int(parts[3])))
        return out

    def wait_got(self, nbytes: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.got() < nbytes:
            if not self.proc.alive() or time.monotonic() > deadline:
                raise LabError(f"download at {self.got()} of {nbytes} B:\n{self.proc.tail()}")
            time.sleep(0.05)

    def result(self, timeout: float) -> dict:
        """The RESULT line once the download ended, with ``intact`` (size and sha256)."""
        self.proc.wait(timeout)
        for line in reversed(self.proc.output().splitlines()):
            if line.startswith("RESULT "):
                res = json.loads(line[len("RESULT ") :])
                res["intact"] = res["bytes"] == self.size and res["sha256"] == expected_sha256(
                    self.seed, self.size
                )
                return res
        raise LabError(f"no RESULT from the download:\n{self.proc.tail()}")


def download(
    ns: Namespace, host: str, port: int, size: int, *, seed: int, resume: bool = False
) -> Download:
    """Start ``rangeget get`` in ``ns`` from ``host:port``; ``resume``: the resuming app."""
    args = ["get", "--host", host, "--port", str(port), "--seed", str(seed)]
    args += ["--bytes", str(size), "--mark-gaps", str(MARK_GAPS_S)]
    if resume:
        args.append("--resume")
    proc = ns.spawn(tool_cmd("rangeget", *args), f"get{port}-{seed}")
    return Download(proc, size, seed)


def first_after(dl: Download, t: float) -> float | None:
    """Seconds from ``t`` to the download's first bytes after a gap that ended after ``t``."""
    marks = [m for m in dl.resumed() if m[0] >= t]
    return marks[0][0] - t if marks else None


def play_outage(topo: Topology, **kw: float) -> DrivePlayer:
    """Start the outage on link 0 now (``outage_schedule(**kw)``); stop the player after."""
    player = DrivePlayer(topo, outage_schedule(**kw), plain=not topo.tunnel)
    player.start()
    return player


def wait_return(player: DrivePlayer, timeout: float) -> float:
    """Block until the new address is in place; its monotonic time."""
    deadline = time.monotonic() + timeout
    while (t := returned_at(player)) is None:
        if time.monotonic() > deadline:
            raise LabError(f"the link did not come back within {timeout} s: {player.log}")
        time.sleep(0.02)
    return t
