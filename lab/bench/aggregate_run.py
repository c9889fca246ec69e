"""One measured upload for the ``aggregate`` suite: goodput, retransmissions, ping RTT, reorder.

Role: run one TCP flow (CUBIC) ``cli`` -> ``srv`` for a fixed time through one system
(multihome with a given ``aggregate_scheduler``, kernel MPTCP, or plain TCP over link i) with
:func:`lab.bench.transfer.run_transfer`, and around it measure what issue 4 asks for:

* goodput = application bytes received by ``srv`` over the receiver's transfer time (accept to
  the sender's EOF, the drain of the sender's buffers included);
* the sender's TCP counters (``Tcp: RetransSegs`` and a few ``TcpExt`` reordering/loss
  counters of the ``cli`` namespace, which runs nothing but this flow's sender: multihome
  itself speaks UDP), and the receiver's out-of-order queueing (``TCPOFOQueue`` on ``srv``);
* the RTT of a 10 Hz ping, idle just before the transfer and during it: over the tunnel
  addresses for multihome, over the link the flow uses for plain TCP, over link 0 (the
  initial subflow's link) for kernel MPTCP;
* for multihome, the deltas of the data receiver's (the server's) ``reorder`` counters.

Invariants: switching the client's ``aggregate_scheduler`` restarts both daemons in the same
namespaces (the links, their linkem processes and kernel MPTCP's settings stay), so every
system of a run crosses the very same emulated links; counters are always reported as deltas
of snapshots taken around the transfer, never as totals since a daemon started.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable

from lab.bench.transfer import run_transfer
from lab.netns import LabError, Namespace, Proc
from lab.topology import TUN_SERVER, Topology, link_ip
from lab.traffic import ping_rtts_ms

PING_INTERVAL_S = 0.1
IDLE_PINGS = 20
# Reorder counters of the status document; the last four may be absent in older binaries
# (``lost_skips``: gaps given up that were losses, not reordering).
REORDER_COUNTERS = (
    "held",
    "skipped_gaps",
    "late",
    "inserts",
    "occupancy_sum",
    "displaced",
    "lost_skips",
)
SENDER_COUNTERS = (
    "Tcp:OutSegs",
    "Tcp:RetransSegs",
    "TcpExt:TCPFastRetrans",
    "TcpExt:TCPSlowStartRetrans",
    "TcpExt:TCPTimeouts",
    "TcpExt:TCPLossProbes",
    "TcpExt:TCPSACKReorder",
    "TcpExt:TCPTSReorder",
    "TcpExt:TCPDSACKRecv",
    "TcpExt:TCPSpuriousRTOs",
)
RECEIVER_COUNTERS = ("TcpExt:TCPOFOQueue", "TcpExt:TCPDSACKOldSent")


def label(system: str, scheduler: str | None = None) -> str:
    """The key a system's results are filed under: ``multihome-earliest``, ``mptcp``, ``tcp:0``."""
    return f"multihome-{scheduler}" if system == "multihome" else system


def enable_stream(topo: Topology, cc: str) -> None:
    """Run the daemons with stream mode on (before they start): the ``stream`` system's
    connections, from the LAN host, are carried over MPTCP by the daemons, whose subflows
    use ``cc`` as every other system's flow does; the others are not affected."""
    topo.set_stream(True, cc)


def set_scheduler(topo: Topology, scheduler: str) -> None:
    """(Re)start both daemons with the client's ``aggregate_scheduler`` set to ``scheduler``."""
    topo.reconfigure(client_extra={"aggregate_scheduler": scheduler})


def snmp(ns: Namespace) -> dict[str, int]:
    """``Table:Counter`` -> value from /proc/net/snmp and /proc/net/netstat of ``ns``."""
    out: dict[str, int] = {}
    text = ns.run(["cat", "/proc/net/snmp", "/proc/net/netstat"]).stdout
    lines = text.splitlines()
    for head, values in zip(lines[::2], lines[1::2], strict=False):
        table, _, keys = head.partition(":")
        vtable, _, vals = values.partition(":")
        if table != vtable:
            continue
        for k, v in zip(keys.split(), vals.split(), strict=False):
            with contextlib.suppress(ValueError):
                out[f"{table}:{k}"] = int(v)
    return out


def reorder_snapshot(topo: Topology) -> dict:
    """The server's (the data receiver's) session: reorder counters and delivered packets."""
    sess = topo.session("server") or {}
    out = dict(sess.get("reorder", {}))
    out["rx_ip_packets"] = sess.get("rx_ip_packets", 0)
    return out


def reorder_delta(before: dict, after: dict) -> dict:
    """Counter deltas, mean occupancy and reorder density over one transfer.

    ``mean_occupancy`` = d(occupancy_sum) / d(inserts) packets held when a packet arrives;
    ``reorder_density`` = d(displaced) / d(inserts), the fraction of ordered packets that did
    not arrive in sequence; ``density`` the displacement histogram (-16..+16) as fractions.
    Without the newer counters only ``held_fraction`` (held / delivered) is exact here, and
    ``mean_occupancy_since_start`` is the daemon's own cumulative figure.
    """
    d = {k: after[k] - before.get(k, 0) for k in (*REORDER_COUNTERS, "rx_ip_packets") if k in after}
    out: dict = {"deltas": d, "max_held_since_start": after.get("max_held")}
    rx = d.get("rx_ip_packets", 0)
    out["held_fraction"] = d["held"] / rx if rx and "held" in d else None
    inserts = d.get("inserts")
    out["mean_occupancy"] = (
        d["occupancy_sum"] / inserts if inserts and "occupancy_sum" in d else None
    )
    out["reorder_density"] = d["displaced"] / inserts if inserts and "displaced" in d else None
    if isinstance(after.get("density"), list):
        old = before.get("density") or [0] * len(after["density"])
        hist = [a - b for a, b in zip(after["density"], old, strict=False)]
        total = sum(hist)
        out["density"] = [h / total for h in hist] if total else hist
    if out["mean_occupancy"] is None:
        out["mean_occupancy_since_start"] = after.get("mean_occupancy")
    return out


def rtt_stats(idle: list[float], during: list[float]) -> dict:
    def pct(xs: list[float], q: float) -> float | None:
        if not xs:
            return None
        xs = sorted(xs)
        return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]

    idle_med = statistics.median(idle) if idle else None
    med = statistics.median(during) if during else None
    return {
        "idle_median_ms": idle_med,
        "during_median_ms": med,
        "during_p95_ms": pct(during, 0.95),
        "added_ms": med - idle_med if med is not None and idle_med is not None else None,
        "idle_samples": len(idle),
        "during_samples": len(during),
        "during_ms": during,
    }


def ping_target(system: str) -> str:
    if system == "multihome":
        return TUN_SERVER
    if system.startswith("tcp:"):
        return link_ip(int(system[4:]), "srv")
    return link_ip(0, "srv")


def _ping_rtts(proc: Proc) -> list[float]:
    toks = proc.output().split()
    return [float(t.split("=")[1]) for t in toks if t.startswith("time=")]


def measure(
    topo: Topology,
    system: str,
    *,
    seconds: float,
    port: int,
    scheduler: str | None = None,
    cc: str = "cubic",
    on_connect: Callable[[], None] | None = None,
) -> dict:
    """One upload of ``seconds`` through ``system`` with everything measured around it.

    ``on_connect()`` runs as soon as the client printed CONNECTED (the receiver's time zero
    to within a poll), e.g. to restart the links' traces so every system sees the same part.
    """
    if system == "multihome":
        set_scheduler(topo, scheduler or "earliest")
    target = ping_target(system)
    try:
        idle = ping_rtts_ms(topo.cli, target, count=IDLE_PINGS, interval=PING_INTERVAL_S)
    except LabError:
        idle = []
    pinger: list[Proc] = []

    def start_ping(client: Proc) -> None:
        if on_connect is not None:
            wait_until = time.monotonic() + 10
            while "CONNECTED" not in client.output() and time.monotonic() < wait_until:
                time.sleep(0.005)
            on_connect()
        deadline = str(int(seconds + 30))
        cmd = ["ping", "-n", "-i", str(PING_INTERVAL_S), "-w", deadline, target]
        pinger.append(topo.cli.spawn(cmd, f"ping{port}"))

    snd0, rcv0 = snmp(topo.cli), snmp(topo.srv)
    ro0 = reorder_snapshot(topo) if system == "multihome" else {}
    try:
        res = run_transfer(
            topo,
            system,
            cc=cc,
            client_send_seconds=seconds,
            timeout=seconds + 90,
            port=port,
            during=start_ping,
        )
    finally:
        for p in pinger:
            p.stop()
    snd1, rcv1 = snmp(topo.cli), snmp(topo.srv)
    rx, tx = res.get("server", {}), res.get("client", {})
    received, secs = rx.get("received", 0), rx.get("seconds")
    tl, bin_s = rx.get("timeline", []), rx.get("bin_ms", 100) / 1000
    out: dict = {
        "system": system,
        "scheduler": scheduler if system == "multihome" else None,
        "received_bytes": received,
        "sent_bytes": tx.get("sent"),
        "seconds": secs,
        "goodput_mbps": received * 8 / secs / 1e6 if secs else 0.0,
        "error": res.get("error") or tx.get("error") or rx.get("error"),
        "sender_tcp": {k: snd1.get(k, 0) - snd0.get(k, 0) for k in SENDER_COUNTERS},
        "receiver_tcp": {k: rcv1.get(k, 0) - rcv0.get(k, 0) for k in RECEIVER_COUNTERS},
        "rtt": rtt_stats(idle, _ping_rtts(pinger[0]) if pinger else []),
        "link_bytes": res.get("link_bytes"),
        "mptcp_counters": res.get("mptcp_counters"),
    }
    out["retransmissions"] = out["sender_tcp"]["Tcp:RetransSegs"]
    # Goodput after the first 2 s (slow start, MPTCP joins): the steady-state share.
    skip = int(2 / bin_s)
    if secs and len(tl) > skip and secs > 3:
        out["goodput_after_2s_mbps"] = (received - tl[skip - 1]) * 8 / (secs - 2) / 1e6
    ups = {n: b["a2b"] for n, b in (res.get("link_bytes") or {}).items()}
    total = sum(ups.values())
    out["link_share_up"] = {n: b / total for n, b in ups.items()} if total else None
    if system == "multihome":
        out["reorder"] = reorder_delta(ro0, reorder_snapshot(topo))
        out["client_links"] = client_links(topo)
    return out


# What the client's rate control believed of each link at the end of a run: a run far off
# its usual figure can then be told apart (a link starved by its estimate, a stale queue).
LINK_FIELDS = (
    "name",
    "state",
    "srtt_ms",
    "min_rtt_ms",
    "fwd_queue_ms",
    "delivery_rate_bps",
    "pacing_rate_bps",
    "pair_capacity_bps",
    "rate_mode",
    "tx_bytes",
)


def client_links(topo: Topology) -> list[dict] | None:
    try:
        sess = topo.session("client")
    except LabError:
        return None
    if sess is None:
        return None
    return [{k: lk.get(k) for k in LINK_FIELDS} for lk in sess.get("links", [])]
