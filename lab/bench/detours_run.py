"""One measured upload through one mechanism of the ``detours`` suite (lab/bench/detours.py).

Role: set up what a mechanism needs on the slide-33 network (lab/bench/detours_topology.py),
run one bulk upload client -> server for a fixed time with :mod:`lab.tools.bidixfer` (the same
tool for every mechanism: iperf3 3.12 here cannot open MPTCP sockets and there is no
``mptcpize``), tear it down, and return the goodput with what explains it: bytes each linkem
link delivered and dropped, the sender's retransmissions, kernel MPTCP's join counters, and
for multihome the bytes each of its paths carried and the detour manager's state.

Mechanisms (Brennan's slide 35, with multihome in place of his MPTCP path manager):

- ``mptcp``: kernel MPTCP with no detour (one subflow, the seed's "1-Subflow");
- ``mptcp+nat``: kernel MPTCP + NAT detour through ``multihome mptcp-detours`` (the seed's
  "NAT"); reported as not available when the binary has no such subcommand;
- ``multihome+nat`` / ``multihome+tunnel``: multihome ``aggregate`` with one link and one
  detour of that mode through ``multihome relay`` on the detour host (the seed's "NAT" and
  "VPN");
- ``tcp``: plain TCP over the default route; ``tcp(nat)``: plain TCP to the detour, whose
  kernel NATs it to the server (nftables DNAT + masquerade, the relay's NAT rule for TCP);
- ``multihome``: multihome with its one link and no relay, a reference that is not in the
  seed: the tunnel's own cost on the default route, so that a detour's cost can be told apart.

Invariants: goodput = bytes the server received / the server's transfer time (accept to the
client's EOF); every counter is a delta of snapshots taken around the transfer; a failed run
returns its error and the suite goes on.
"""

from __future__ import annotations

import contextlib
import statistics
import subprocess
import time

import tomli_w

from lab import mptcp
from lab.bench.aggregate_run import snmp
from lab.bench.detours_topology import (
    DETOUR,
    DETOUR_PATH,
    SERVER,
    TUN_SERVER,
    DetourLab,
)
from lab.netns import LabError, Proc, tool_cmd
from lab.traffic import parse_result, wait_listening

MECHANISMS = (
    "mptcp",
    "mptcp+nat",
    "multihome+nat",
    "multihome+tunnel",
    "tcp",
    "tcp(nat)",
    "multihome",
)
LABELS = {
    "mptcp": "MPTCP\n1 subflow",
    "mptcp+nat": "MPTCP\n+ NAT detour",
    "multihome+nat": "multihome\n+ NAT detour",
    "multihome+tunnel": "multihome\n+ tunnel detour",
    "tcp": "TCP",
    "tcp(nat)": "TCP (NAT)",
    "multihome": "multihome\nno detour",
}
SENDER_COUNTERS = ("Tcp:OutSegs", "Tcp:RetransSegs", "TcpExt:TCPTimeouts")
MPTCP_DETOURS_CMD = "mptcp-detours"
SAMPLE_S = 2.0


def unavailable(dlab: DetourLab, mech: str) -> str | None:
    """Why ``mech`` cannot run with this binary, or None."""
    if mech != "mptcp+nat":
        return None
    out = subprocess.run([str(dlab.binary), "--help"], capture_output=True, text=True, check=False)
    if MPTCP_DETOURS_CMD not in out.stdout:
        return f"not available: `multihome {MPTCP_DETOURS_CMD}` is not in {dlab.binary}"
    return None


def start_mptcp_detours(dlab: DetourLab) -> Proc:
    """``multihome mptcp-detours`` in the client with the detour host as its one NAT relay.

    The config follows that subcommand's ``mptcp-detours.toml`` (``[mptcp]`` with the
    client's key, ``detours`` and the servers whose connections get detours; ``[[relay]]``);
    it switches the client's namespace to the kernel's userspace path manager while it runs.
    """
    dlab.start_relay()
    cfg = {
        "mptcp": {
            "private_key_file": "client.key",
            "detours": 1,
            "servers": [SERVER],
            "control_socket": str(dlab.dir / "mptcp.sock"),
        },
        "relay": [dlab.relay_entry("nat")],
    }
    path = dlab.dir / "mptcp-detours.toml"
    path.write_text(tomli_w.dumps(cfg))
    cmd = [str(dlab.binary), MPTCP_DETOURS_CMD, "--config", str(path)]
    proc = dlab.ns("client").spawn(cmd, "mptcp-detours")
    time.sleep(1.0)
    if not proc.alive():
        raise LabError(f"multihome {MPTCP_DETOURS_CMD} exited:\n{proc.tail()}")
    return proc


def _links_delta(before: dict, after: dict) -> dict:
    """Per link and direction: delivered bytes and frames dropped by loss and by the queue."""
    out = {}
    for k, st in after.items():
        out[str(k)] = {
            d: {
                "delivered_bytes": st[d]["delivered"]["bytes"] - before[k][d]["delivered"]["bytes"],
                "dropped_loss": st[d]["dropped_loss"]["frames"]
                - before[k][d]["dropped_loss"]["frames"],
                "dropped_queue": st[d]["dropped_queue"]["frames"]
                - before[k][d]["dropped_queue"]["frames"],
            }
            for d in ("a2b", "b2a")
        }
    return out


PATH_KEYS = (
    "state",
    "tx_bytes",
    "srtt_ms",
    "min_rtt_ms",
    "fwd_queue_ms",
    "delivery_rate_bps",
    "pacing_rate_bps",
    "cwnd_bytes",
    "inflight_bytes",
    "loss",
    "error_loss",
    "congestion_losses",
    "error_losses",
    "rate_mode",
    "pair_capacity_bps",
    "standby",
)
# Client counters that say where a packet was held back or lost before the links.
CLIENT_COUNTERS = ("codel_drops", "queue_drops", "queue_overflow_drops", "repaired", "reinjected")
REORDER_KEYS = ("held", "skipped_gaps", "late", "lost_skips", "inserts", "displaced")
SAMPLE_KEYS = (
    "delivery_rate_bps",
    "pacing_rate_bps",
    "cwnd_bytes",
    "inflight_bytes",
    "srtt_ms",
    "pair_capacity_bps",
)
# Sampled too, but no median: when the switch to standby came and what each path carried.
SAMPLE_TIMELINE = ("tx_bytes", "standby")


def _paths(status: dict) -> dict[str, dict]:
    sess = (status.get("sessions") or [{}])[0]
    return {lk["name"]: {k: lk.get(k) for k in PATH_KEYS} for lk in sess.get("links", [])}


def _delta(after: dict, before: dict, keys: tuple[str, ...]) -> dict:
    return {k: (after.get(k) or 0) - (before.get(k) or 0) for k in keys if k in after}


class MultihomeWatch:
    """Snapshots of the client (paths, counters) and server (reorder) around and during a run."""

    def __init__(self, dlab: DetourLab) -> None:
        self.dlab = dlab
        self.before = self._snap()
        self.samples: list[dict] = []
        self.t0 = time.monotonic()

    def _snap(self) -> dict:
        cli, srv = self.dlab.status("client"), self.dlab.status("server")
        sess = (srv.get("sessions") or [{}])[0]
        return {"client": cli, "reorder": sess.get("reorder", {})}

    def sample(self) -> None:
        """Per path, the rate control's view now (the end state alone can mislead)."""
        with contextlib.suppress(LabError):
            paths = _paths(self.dlab.status("client"))
            t = round(time.monotonic() - self.t0, 1)
            self.samples.append(
                {
                    "t": t,
                    **{
                        n: {k: p.get(k) for k in SAMPLE_KEYS + SAMPLE_TIMELINE}
                        for n, p in paths.items()
                    },
                }
            )

    def result(self) -> dict:
        after = self._snap()
        b, a = _paths(self.before["client"]), _paths(after["client"])
        sent = {n: (p["tx_bytes"] or 0) - (b.get(n, {}).get("tx_bytes") or 0) for n, p in a.items()}
        total = sum(sent.values())
        keys = ("congestion_losses", "error_losses")
        medians = {}
        for n in a:
            got = [s[n] for s in self.samples[1:] if n in s]  # the first is start-up
            medians[n] = {
                k: statistics.median(v) for k in SAMPLE_KEYS if (v := [g[k] for g in got if g[k]])
            }
        return {
            "path_tx_bytes": sent,
            "detour_share": sent.get(DETOUR_PATH, 0) / total if total else None,
            "path_losses": {n: _delta(p, b.get(n, {}), keys) for n, p in a.items()},
            "path_median": medians,
            "paths_end": a,
            "client_counters": _delta(
                after["client"].get("counters", {}),
                self.before["client"].get("counters", {}),
                CLIENT_COUNTERS,
            ),
            "server_reorder": _delta(after["reorder"], self.before["reorder"], REORDER_KEYS),
            "detours": after["client"].get("detours"),
            "samples": self.samples,
        }


def _transfer(  # noqa: PLR0913 - one upload's parameters
    dlab: DetourLab,
    host: str,
    cc: str,
    seconds: float,
    port: int,
    *,
    mp: bool,
    watch: MultihomeWatch | None,
) -> dict:
    common = ["--port", str(port), "--cc", cc, "--stall-timeout", f"{30 + seconds:g}"]
    if mp:
        common.append("--mptcp")
    server = dlab.ns("server").spawn(tool_cmd("bidixfer", "server", *common), f"bx{port}")
    wait_listening(server)
    args = ["--host", host, *common, "--send-seconds", str(seconds)]
    client = dlab.ns("client").spawn(tool_cmd("bidixfer", "client", *args), f"bxc{port}")
    out: dict = {}
    try:
        deadline = time.monotonic() + seconds + 90
        while client.alive() and time.monotonic() < deadline:
            time.sleep(SAMPLE_S)
            if watch is not None:
                watch.sample()
        client.wait(max(1.0, deadline - time.monotonic()))
        server.wait(15)
        out["client"], out["server"] = parse_result(client), parse_result(server)
    except LabError as exc:
        for proc in (client, server):
            proc.stop()
        out["error"] = str(exc)[-600:]
        for name, proc in (("client", client), ("server", server)):
            with contextlib.suppress(LabError):
                out[name] = parse_result(proc)
    return out


def _setup(dlab: DetourLab, mech: str, extra: list[Proc]) -> tuple[str, bool, dict | None]:
    """Bring ``mech`` up; return (address to connect to, MPTCP socket, multihome status)."""
    if mech == "tcp":
        return SERVER, False, None
    if mech == "tcp(nat)":
        dlab.nat_tcp(True)
        return DETOUR, False, None
    if mech == "mptcp":
        return SERVER, True, None
    if mech == "mptcp+nat":
        extra.append(start_mptcp_detours(dlab))
        return SERVER, True, None
    mode = mech.split("+")[1] if "+" in mech else None
    return TUN_SERVER, False, dlab.start_multihome(mode)


def _teardown(dlab: DetourLab, mech: str, extra: list[Proc]) -> dict:
    out: dict = {}
    if mech == "tcp(nat)":
        dlab.nat_tcp(False)
    for proc in extra:
        out["helper_rc"] = proc.stop()
        out["helper_log"] = proc.tail(30)
        # Back to the in-kernel path manager (one subflow) for the next runs.
        dlab.ns("client").sysctl("net.mptcp.pm_type", 0)
    if mech.startswith("multihome"):
        out["exit_codes"] = dlab.stop_multihome()
    return out


def measure(dlab: DetourLab, mech: str, cc: str, seconds: float, port: int) -> dict:
    """One upload of ``seconds`` through ``mech``; never raises for the mechanism's faults."""
    rec: dict = {"mechanism": mech, "cc": cc}
    why = unavailable(dlab, mech)
    if why:
        return rec | {"unavailable": why}
    extra: list[Proc] = []
    try:
        host, mp, mh0 = _setup(dlab, mech, extra)
        links0, snd0, mp0 = (
            dlab.link_stats(),
            snmp(dlab.ns("client")),
            mptcp.counters(dlab.ns("server")),
        )
        watch = MultihomeWatch(dlab) if mh0 is not None else None
        res = _transfer(dlab, host, cc, seconds, port, mp=mp, watch=watch)
        snd1 = snmp(dlab.ns("client"))
        rec["links"] = _links_delta(links0, dlab.link_stats())
        rec["sender_tcp"] = {k: snd1.get(k, 0) - snd0.get(k, 0) for k in SENDER_COUNTERS}
        rec["mptcp_counters"] = mptcp.joined(mp0, mptcp.counters(dlab.ns("server")))
        if watch is not None:
            rec["multihome"] = watch.result()
    except LabError as exc:
        rec["error"] = str(exc)[-1500:]
        res = {}
    finally:
        rec |= _teardown(dlab, mech, extra)
    rx = res.get("server", {})
    secs = rx.get("seconds")
    rec["received_bytes"] = rx.get("received", 0)
    rec["seconds"] = secs
    rec["goodput_mbps"] = rx.get("received", 0) * 8 / secs / 1e6 if secs else 0.0
    tl, bin_s = rx.get("timeline", []), rx.get("bin_ms", 100) / 1000
    skip = int(2 / bin_s)
    if secs and secs > 3 and len(tl) > skip:
        rec["goodput_after_2s_mbps"] = (rx["received"] - tl[skip - 1]) * 8 / (secs - 2) / 1e6
    if res.get("error") or rx.get("error"):
        rec["error"] = rec.get("error") or res.get("error") or rx.get("error")
    return rec
