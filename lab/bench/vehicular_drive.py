"""Plays a drive schedule (lab/drive.py) on one emulated Wi-Fi link of a lab topology.

Role: at each event of the schedule, do to the client's link what a Wi-Fi interface sees:

- coverage lost (``down``): linkem drops what it queued and everything after (``linkem
  down``), the link namespace's end of the veth goes down so the client's interface loses
  its carrier (operstate down, as a driver reports a lost association; multihome's netlink
  watch marks the link unusable at once), and the client's address is removed with its routes
  (the DHCP lease is gone);
- association (``enter``): carrier back, linkem forwards again; no address yet (DHCP runs);
- DHCP done (``up``): a new address ``10.0.<100 + n>.2/24`` (n = 1, 2, ...; attachment 0
  keeps the topology's ``10.0.<i + 1>.2`` on link ``i``), the host route to the server's end
  of the link (``10.0.<i + 1>.1``, the tunnel server's public address) and, without the
  tunnel, the origin's
  prefix via it, both with the new source; the server side routes the new subnet over the
  same veth (the access network's job, done once at set-up);
- edge of coverage (optional): loss steps before ``down`` (``linkem set both loss=...``).

Invariants: events are applied in time order from one thread, each at its time relative to
``start()`` (late by the ``ip`` commands' run time, a few ms, logged as ``lag``; ``begun`` and
``mono`` are CLOCK_MONOTONIC before and after its commands ran, the clock the lab's tools
print); ``stop()``
returns the link to attachment 0's state (carrier, address, routes) so the next trial starts
connected. Only the namespaces of the topology are touched.
"""

from __future__ import annotations

import threading
import time

from lab.drive import Attachment
from lab.topology import ORIGIN_PREFIX, Topology, link_ip

FIRST_SUBNET = 100
SUBNETS = 150


def subnet_of(index: int, link: int = 0) -> int:
    """Third octet of attachment ``index``'s address (attachment 0: the topology's own
    address on link ``link``, ``10.0.<link + 1>.2``)."""
    return link + 1 if index == 0 else FIRST_SUBNET + 1 + (index - 1) % SUBNETS


class DrivePlayer:
    """Applies ``atts`` to link ``i`` of ``topo``; ``plain`` also routes the origin over it."""

    def __init__(self, topo: Topology, atts: list[Attachment], *, i: int = 0, plain: bool):
        self.topo = topo
        self.atts = atts
        self.i = i
        self.dev = f"l{i}"
        self.plain = plain
        self.link = topo.emulated[i]
        self.server_ip = link_ip(i, "srv")
        self.addr: str | None = link_ip(i, "cli")
        self.log: list[dict] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.t0 = 0.0

    @staticmethod
    def prepare(topo: Topology, i: int = 0) -> None:
        """Server-side routes to every subnet the drive may hand out (once per topology)."""
        for k in range(SUBNETS):
            topo.srv.route_replace(
                f"10.0.{FIRST_SUBNET + 1 + k}.0/24", dev=f"l{i}", src=link_ip(i, "srv")
            )

    def events(self) -> list[tuple[float, str, Attachment]]:
        out: list[tuple[float, str, Attachment]] = []
        for a in self.atts:
            if a.index > 0:
                out += [(a.enter, "enter", a), (a.up, "up", a)]
            out += [(t, f"loss={p:.3f}", a) for t, p in a.edge]
            out.append((a.down, "down", a))
        return sorted((e for e in out if e[0] >= 0), key=lambda e: e[0])

    def start(self) -> None:
        self.t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for at, what, att in self.events():
            delay = self.t0 + at - time.monotonic()
            if self._stop.wait(max(0.0, delay)):
                return
            begun = time.monotonic()
            self.apply(what, att)
            done = time.monotonic()
            self.log.append(
                {
                    "t": round(at, 3),
                    "event": what,
                    "index": att.index,
                    "lag": round(done - self.t0 - at, 4),
                    "begun": begun,
                    "mono": done,
                }
            )

    def apply(self, what: str, att: Attachment) -> None:
        if what == "down":
            self.link.down()
            self.link.ns.ip("link", "set", "la", "down")
            if self.addr:
                self.topo.cli.ip("addr", "del", f"{self.addr}/24", "dev", self.dev, check=False)
                self.addr = None
        elif what == "enter":
            self.link.ns.ip("link", "set", "la", "up")
            self.link.set("both", loss=0)
            self.link.up()
        elif what == "up":
            self.configure(f"10.0.{subnet_of(att.index, self.i)}.2")
        elif what.startswith("loss="):
            self.link.set("both", loss=what.split("=", 1)[1])

    def configure(self, addr: str) -> None:
        """What DHCP leaves behind: the address, and routes from it to the server and origin."""
        cli = self.topo.cli
        cli.ip("addr", "add", f"{addr}/24", "dev", self.dev)
        cli.ip("route", "replace", f"{self.server_ip}/32", "dev", self.dev, "src", addr)
        if self.plain:
            cli.ip(
                "route",
                "replace",
                ORIGIN_PREFIX,
                "via",
                self.server_ip,
                "dev",
                self.dev,
                "src",
                addr,
                "onlink",
            )
        self.addr = addr

    def stop(self) -> None:
        """Stop playing and reconnect the link with attachment 0's address."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.link.ns.ip("link", "set", "la", "up")
        self.link.set("both", loss=0)
        self.link.up()
        first = link_ip(self.i, "cli")
        if self.addr != first:
            if self.addr:
                self.topo.cli.ip("addr", "del", f"{self.addr}/24", "dev", self.dev, check=False)
            self.configure(first)
