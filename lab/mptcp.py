"""Kernel MPTCP as a peer on the lab's links, set up as the kernel selftests do.

Role: turn ``cli`` and ``srv`` of a :class:`~lab.topology.Topology` into MPTCP hosts that use
every link: ``ip mptcp limits`` on both ends, one ``subflow`` endpoint per extra client
address, and source-address routing so that a subflow from link i's address leaves by link i
(DESIGN.md §4: without it every subflow towards the server's first address takes link 0).
Reads the kernel's ``MPTcpExt`` counters to prove that MPTCP (and its joins) really happened.

::

    cli 10.0.1.2 (l0) ─── link 0 ─── 10.0.1.1 (l0) srv     initial subflow -> 10.0.1.1
    cli 10.0.2.2 (l1) ─── link 1 ─── 10.0.2.1 (l1) srv     subflow 10.0.2.2 -> 10.0.1.1
        ip rule from 10.0.<i+1>.2 lookup 100+i: default via 10.0.<i+1>.1 dev l<i>

Invariants: the initial subflow uses link 0; all settings live in the lab's namespaces and
vanish with them; nothing here touches the multihome daemons, which may run alongside.
"""

from __future__ import annotations

from lab.netns import LabError, Namespace
from lab.topology import Topology, link_ip

MAX_SUBFLOWS = 8


def enable(topo: Topology) -> None:
    """Configure both ends for MPTCP over all of ``topo``'s links."""
    for ns in (topo.cli, topo.srv):
        ns.sysctl("net.mptcp.enabled", 1)
        ns.ip("mptcp", "endpoint", "flush")
        ns.ip(
            "mptcp",
            "limits",
            "set",
            "subflow",
            str(MAX_SUBFLOWS),
            "add_addr_accepted",
            str(MAX_SUBFLOWS),
        )
    for i in range(len(topo.links)):
        addr, dev, table = link_ip(i, "cli"), f"l{i}", str(100 + i)
        topo.cli.ip("rule", "add", "from", addr, "lookup", table)
        topo.cli.ip(
            "route", "replace", "default", "via", link_ip(i, "srv"), "dev", dev, "table", table
        )
        if i > 0:
            # The initial subflow's address (link 0) is implicit; every other one joins.
            topo.cli.ip("mptcp", "endpoint", "add", addr, "dev", dev, "subflow")


def restore_routes(topo: Topology, i: int) -> None:
    """Re-add link ``i``'s source route (needed after the interface went down and up)."""
    topo.cli.ip(
        "route",
        "replace",
        "default",
        "via",
        link_ip(i, "srv"),
        "dev",
        f"l{i}",
        "table",
        str(100 + i),
    )


def counters(ns: Namespace) -> dict[str, int]:
    """The ``MPTcpExt`` counters of ``ns`` (from its /proc/net/netstat)."""
    lines = ns.run(["cat", "/proc/net/netstat"]).stdout.splitlines()
    for head, values in zip(lines[::2], lines[1::2], strict=False):
        if head.startswith("MPTcpExt:"):
            keys = head.split()[1:]
            return dict(zip(keys, map(int, values.split()[1:]), strict=True))
    raise LabError(f"no MPTcpExt counters in {ns.name}: is MPTCP built into this kernel?")


def joined(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """MPTCP connections accepted and subflows joined between two counter snapshots."""
    keys = ("MPCapableSYNRX", "MPCapableACKRX", "MPJoinSynRx", "MPJoinAckRx")
    return {k: after.get(k, 0) - before.get(k, 0) for k in keys}
