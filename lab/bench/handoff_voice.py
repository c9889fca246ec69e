"""Suite ``handoff-voice``: a 64 kbit/s voice stream through Wi-Fi handoffs with LTE beside.

Role: the handoff case of Amir et al., *On Redundant Multipath Operating System Support for
Wireless Mesh Networks* (160-byte packets every 20 ms to a client moving between access
points; its Fig. 10 is the one-way latency CDF) on the drive of issue 16 (lab/drive.py:
10 m/s, 100 m range, a new address 1-2 s after each association) with a steady LTE link
beside the Wi-Fi one.
Mechanisms: plain routing over Wi-Fi (no tunnel; the stream follows each new address at
once, the best plain routing can do) and the tunnel with the stream under ``best``,
``redundant`` (adaptive) or ``realtime`` (150 ms), the client stating the policy for its
downlink. Per mechanism: packets lost and late in a window around each handoff (3 s before
coverage is lost to 4 s after the new address; lab/bench/handoff_stats.py) and the one-way
delay CDF there.

Two sources, side by side in one result:

- the simulator (sim/scenarios/handoff_voice.toml, 40 drives of 300 s per AP-gap range and
  mechanism; the suite runs ``multihome-sim`` unless ``--sim-from`` names existing results);
- the lab, on the cross-check point (sim/scenarios/handoff_voice_crosscheck.toml: every draw
  fixed — APs 150 m apart, so coverages overlap and the client hands off at the midpoint
  every 15 s, DHCP 1.5 s, losses rising to 50 % over the last 30 m of each coverage), one
  run per mechanism, against the simulator on the same point.

Lab set-up: Wi-Fi = linkem 20 Mbit/s, 10 ms one way, 250 kB queue, driven by
:class:`~lab.bench.vehicular_drive.DrivePlayer`; LTE = linkem 5 Mbit/s, 30 ms, 62.5 kB; the
stream is ``lab/tools/udpstream.py`` from the origin to the LAN host (132-byte payloads,
160-byte IP packets, 50/s), its receiver logging every packet's send and receive times.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from pathlib import Path

from lab.bench import handoff_stats as hs
from lab.bench.common import progress, save
from lab.bench.crosscheck import sim_binary
from lab.bench.handoff_voice_plot import plot
from lab.bench.vehicular_drive import DrivePlayer
from lab.drive import Attachment, DriveParams, schedule
from lab.netns import REPO_ROOT, Lab, LabError
from lab.topology import LAN_HOST, LAN_PREFIX, SRV_UPLINK, LinkSpec, Topology
from lab.traffic import UdpStream

MECHS = ("plain", "best", "redundant", "realtime")
GAPS = ("100-300", "300-500")
SCENARIO = REPO_ROOT / "sim" / "scenarios" / "handoff_voice.toml"
CROSS = REPO_ROOT / "sim" / "scenarios" / "handoff_voice_crosscheck.toml"
CROSS_PARAMS = DriveParams(gap_m=(150.0, 150.0), dhcp_s=(1.5, 1.5), edge_m=30.0, edge_loss=0.5)
PPS = 50
PAYLOAD = 132  # + 28 bytes of IPv4/UDP headers: the simulator's 160-byte packets
PORT = 5004
LEAD_S = 2.0  # the stream starts 2 s into the drive, as in the scenarios


def links() -> list[LinkSpec]:
    wifi = {"rate": "20mbit", "delay": "10ms", "queue_bytes": 250_000}
    lte = {"rate": "5mbit", "delay": "30ms", "queue_bytes": 62_500}
    return [LinkSpec("wifi", linkem={"both": wifi}), LinkSpec("lte", linkem={"both": lte})]


class VoicePlayer(DrivePlayer):
    """The drive; without the tunnel the server routes the LAN to each new address once
    DHCP gave it (the stream follows the client at once) and to nowhere from coverage lost
    until then: otherwise the server's cached next hop (the old address's MAC) would reach
    the client as soon as it associates, which no access network does for a departed
    address."""

    def apply(self, what: str, att: Attachment) -> None:
        super().apply(what, att)
        if self.plain and what == "down":
            self.topo.srv.ip("route", "replace", "blackhole", LAN_PREFIX)

    def configure(self, addr: str) -> None:
        super().configure(addr)
        if self.plain:
            self.topo.srv.ip("route", "replace", LAN_PREFIX, "via", addr, "dev", self.dev)


def outages(player: DrivePlayer) -> list[tuple[float, float]]:
    """(coverage lost, next address in place) in CLOCK_MONOTONIC seconds."""
    out, down = [], None
    for e in player.log:
        if e["event"] == "down":
            down = e["begun"]
        elif e["event"] == "up" and down is not None:
            out.append((down, e["begun"]))
            down = None
    return out


def trace_of(log: Path, count: int) -> list[tuple[float, float | None]]:
    """(send time s, delay s or None) per packet from udpstream's ``--log``; the sender
    paces on an absolute schedule (t0 + seq / PPS), so lost packets' send times follow."""
    got = {seq: (sent / 1e9, (rx - sent) / 1e9) for seq, sent, rx in json.loads(log.read_text())}
    if not got:
        raise LabError("the voice stream delivered nothing")
    t0 = statistics.median(sent - seq / PPS for seq, (sent, _) in got.items())
    return [(t0 + s / PPS, got[s][1] if s in got else None) for s in range(count)]


def lab_point(mech: str, seconds: float) -> dict:
    """One lab run of the cross-check drive under ``mech``; its handoff report."""
    rule = {"name": "voice", "protocol": "udp", "ports": str(PORT), "policy": mech}
    with Lab() as lab:
        topo = Topology(
            lab,
            links(),
            policy="best",
            rules=[rule] if mech != "plain" else [],
            tunnel=mech != "plain",
        )
        DrivePlayer.prepare(topo)
        topo.org.route_replace(LAN_PREFIX, via=SRV_UPLINK)
        if topo.tunnel:
            topo.start()
        horizon = seconds + LEAD_S + 5
        atts = schedule(CROSS_PARAMS, horizon, seed=1)
        player = VoicePlayer(topo, atts, plain=not topo.tunnel)
        player.start()
        time.sleep(LEAD_S)
        count = int(seconds * PPS)
        log = lab.dir / f"voice-{mech}.json"
        stream = UdpStream(
            topo.org,
            topo.lan,
            LAN_HOST,
            count=count,
            pps=PPS,
            size=PAYLOAD,
            port=PORT,
            idle_s=30.0,
            log=str(log),
        )
        try:
            stream.wait()
        finally:
            player.stop()
        rep = hs.report(trace_of(log, count), outages(player))
        if topo.tunnel:
            rep["server_counters"] = topo.counters("server")
        rep["drive_lag_max_s"] = max((e["lag"] for e in player.log), default=0.0)
        return rep


def run_sim(path: Path) -> None:
    binary = sim_binary()
    if not binary.exists():
        raise LabError(f"{binary} not found: cargo build --release -p multihome-sim")
    rel = str(path.relative_to(REPO_ROOT))  # as the result's meta.json names it
    res = subprocess.run(
        [str(binary), "run", rel], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )
    if res.returncode != 0:
        raise LabError(f"multihome-sim failed ({res.returncode}): {res.stderr[-2000:]}")


def sim_pooled(name: str) -> dict[str, dict[str, dict]]:
    """Pooled handoff reports of sim/results/<name>/ per point and mechanism: the point is
    ``gap=... edge=...`` (its axes but ``mech``), or ``fixed`` without other axes."""
    out: dict[str, dict[str, list]] = {}
    for p in sorted((REPO_ROOT / "sim" / "results" / name).glob("*_s*.json")):
        r = json.loads(p.read_text())
        axes = " ".join(f"{k}={v}" for k, v in r["point"].items() if k != "mech") or "fixed"
        out.setdefault(axes, {}).setdefault(r["point"]["mech"], []).append(r["flows"][0]["handoff"])
    return {g: {m: hs.pool(rs) for m, rs in by.items()} for g, by in out.items()}


def main(seconds: float | None = None, sim_from: str | None = None, lab: bool = True) -> None:
    seconds = seconds or 120.0
    if sim_from is None:
        for path in (SCENARIO, CROSS):
            progress(f"simulator: {path.name}")
            run_sim(path)
    sim = sim_pooled("handoff_voice")
    cross_sim = sim_pooled("handoff_voice_crosscheck").get("fixed", {})
    lab_reports = {}
    for mech in MECHS if lab else ():
        progress(f"lab: cross-check drive, {mech}, {seconds:.0f} s of voice")
        lab_reports[mech] = lab_point(mech, seconds)
        f = hs.figures(lab_reports[mech])
        progress(
            f"lab {mech}: {f['handoffs']} handoffs, lost/handoff mean "
            f"{f['lost_per_handoff_mean']}, window loss {f['window_loss']}, late "
            f"{f['window_late']}, p95 {f['window_delay_p95_ms']} ms"
        )
    summary = {
        "sim": {g: {m: hs.figures(p) for m, p in by.items()} for g, by in sim.items()},
        "crosscheck": {
            m: {
                "sim": hs.figures(cross_sim[m]) if m in cross_sim else None,
                "lab": hs.figures(lab_reports[m]) if m in lab_reports else None,
            }
            for m in MECHS
        },
    }
    for g, by in summary["sim"].items():
        for m, f in by.items():
            progress(
                f"sim {g} {m}: {f['handoffs']} handoffs, lost/handoff mean "
                f"{f['lost_per_handoff_mean']:.2f} (p95 {f['lost_per_handoff_p95']}), window "
                f"loss {f['window_loss']:.4f} late {f['window_late']:.4f}, p99 "
                f"{f['window_delay_p99_ms']} ms"
            )
    data = {
        "params": {
            "pps": PPS,
            "ip_bytes": PAYLOAD + 28,
            "deadline_ms": hs.DEADLINE_S * 1e3,
            "window": {"pre_s": hs.PRE_S, "post_s": hs.POST_S},
            "lab_seconds": seconds,
            "crosscheck_drive": CROSS_PARAMS.__dict__,
            "scenarios": [str(SCENARIO.relative_to(REPO_ROOT)), str(CROSS.relative_to(REPO_ROOT))],
        },
        "summary": summary,
        "lab": lab_reports,
        "sim_pooled": sim,
        "crosscheck_sim_pooled": cross_sim,
    }
    save("handoff-voice", data, plot(sim, cross_sim, lab_reports))
