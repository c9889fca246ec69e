"""Suite ``scale``: one real server, a thousand real clients (issue: "A thousand clients").

Role: on lab/scale.py's topology, ``multihome loadgen`` runs ``sessions`` (default 1000) real
client endpoints x 2 links in one process against one ``multihome server``:

1. *up*: every session starts at once; time until all are up, handshakes per second;
2. *idle*: the server's memory (VmRSS, /proc) with every session up and quiet, against the
   same server before any session (its peers configured): bytes per idle session; its CPU
   and datagrams a second once every session has been quiet for longer than the keepalive
   interval (a new session probes at the fast rate for its first 5 s: PROTOCOL.md §6.6);
3. *steady*: every session sends ``rate_kbit`` (default 256 kbit/s) of numbered packets to
   a sink in the server's namespace; loss per session; the server's CPU (/proc/<pid>/stat);
4. *churn*, *roam*: the same while 10 % of the sessions leave and re-join (CLOSE, new
   handshake) or move link 0 to a new address;
5. *bulk* twice: the sink sends 50 sessions ``bulk_mbit`` each while 10 % of the others
   churn; the second time beside a flood of spoofed handshake initiations with a right mac1
   (``lab/tools/hsflood.py``, as many senders as ``flood_procs``) aimed at 100 000 a second;
   goodput against the first, the flood rate actually reached, the server's peak memory, and
   whether any legitimate client was refused (server counters, re-joins);

then, in two fresh labs, a tenth of ``idle_sessions`` and then ``idle_sessions`` (default
10 000, 5 per client address) come up at once and idle: the server's RSS per session that came
up in each (the median of five readings a second apart), and the marginal figure, what each
session beyond the smaller run adds (the threads' fixed buffers and the capped dashboard series
cancel). Pass bars (issue): all up within 10 s;
steady loss <= 0.1 %; <= 16 KB per idle session (the marginal figure); bulk goodput under the
flood >= 90 % of without; nobody refused. ``--flood-only`` runs just the up phase and the two
bulk phases (results in ``scale-flood.json``). The machine's load average is recorded beside
the figures: the load generator, the server, the sink and the flood share its cores.
"""

from __future__ import annotations

import os
import statistics
import threading
import time

from lab.bench.common import figure, progress, save
from lab.netns import Lab, tool_cmd
from lab.scale import (
    SERVERS,
    ScaleLab,
    phase_results,
    proc_cpu_s,
    proc_memory_kb,
    wait_event,
)
from lab.topology import multihome_binary
from lab.traffic import parse_result

SPOOFED = "198.18.0.0/15"
FLOOD_PPS = 100_000
# The idle phase: past the 5-s keepalive interval (`keepalive_ms`) after the last session's
# first datagram, then 4 s measured.
IDLE_S = 12.0
IDLE_MEASURE_S = 4.0
BARS = {"all_up_s": 10.0, "loss_pct": 0.1, "idle_kb_per_session": 16.0, "flood_ratio": 0.9}


def started(proc, index: int, timeout: float) -> None:  # noqa: ANN001
    wait_event(proc, lambda e: e.get("event") == "start" and e.get("index") == index, timeout)


def sample_rss(pid: int, stop: threading.Event, out: list[int]) -> None:
    while not stop.is_set():
        try:
            out.append(proc_memory_kb(pid))
        except (OSError, ValueError):
            return
        stop.wait(0.25)


def udp_in(s: ScaleLab) -> int:
    """Datagrams the server's namespace received (delivered or dropped for a full buffer)."""
    lines = [ln.split() for ln in s.srv.run(["cat", "/proc/net/snmp"]).stdout.splitlines()]
    head, vals = [ln for ln in lines if ln and ln[0] == "Udp:"][:2]
    t = dict(zip(head[1:], map(int, vals[1:]), strict=True))
    return t["InDatagrams"] + t["RcvbufErrors"]


def rcvbuf_errors(s: ScaleLab) -> int:
    """Datagrams the server's namespace dropped for a full socket receive buffer."""
    lines = [ln.split() for ln in s.srv.run(["cat", "/proc/net/snmp"]).stdout.splitlines()]
    head, vals = [ln for ln in lines if ln and ln[0] == "Udp:"][:2]
    return dict(zip(head[1:], map(int, vals[1:]), strict=True))["RcvbufErrors"]


def counters(s: ScaleLab) -> dict:
    return s.server_status().get("counters", {})


def start_flood(s: ScaleLab, procs: int, seconds: float) -> list:
    per = FLOOD_PPS // procs
    flood = []
    for k in range(procs):
        cmd = tool_cmd(
            "hsflood", "--host", SERVERS[0].split(":")[0], "--port", "7000",
            "--sources", SPOOFED, "--kind", "mac1", "--server-key", s.server_pub,
            "--count", str(int(per * seconds)), "--pps", str(per), "--seed", str(k + 1),
        )  # fmt: skip
        flood.append(s.lg.spawn(cmd, f"flood{k}"))
    return flood


def big_run(lab: Lab, a: dict) -> dict:
    """Phases 1-5 with ``sessions`` clients."""
    n, secs, bulk_s = a["sessions"], a["seconds"], a["bulk_seconds"]
    s = ScaleLab(lab, a["binary"], n, detect_ms=a["detect_ms"], threads=a["server_threads"])
    s.keys()
    srv = s.start_server()
    s.srv.route_replace(SPOOFED, via="10.1.0.2")  # replies to the flood die in lg
    time.sleep(1.0)
    base_kb = proc_memory_kb(srv.pid)
    low = a["low_rate_kbit"]
    phases = ["up", f"idle:{IDLE_S}", f"steady:{secs}", f"steady:{secs}@{low}"]
    phases += [f"churn:{secs}@{low}", f"roam:{secs}@{low}", f"bulk:{bulk_s}", f"bulk:{bulk_s}"]
    lg = s.loadgen(
        phases, rate_kbit=a["rate_kbit"], packet_bytes=a["packet_bytes"],
        fraction=0.1, bulk_sessions=50, bulk_mbit=a["bulk_mbit"], up_timeout=60,
    )  # fmt: skip
    out: dict = {"sessions": n, "server_rss_kb_configured": base_kb}
    started(lg, 0, 30)
    out["loadavg_start"] = os.getloadavg()
    started(lg, 1, 120)
    time.sleep(IDLE_S - IDLE_MEASURE_S - 1.0)
    cpu0, dg0, t0 = proc_cpu_s(srv.pid), udp_in(s), time.monotonic()
    time.sleep(IDLE_MEASURE_S)
    dt = time.monotonic() - t0
    out["server_cpu_idle"] = (proc_cpu_s(srv.pid) - cpu0) / dt
    out["server_datagrams_per_s_idle"] = (udp_in(s) - dg0) / dt
    out["server_rss_kb_idle"] = proc_memory_kb(srv.pid)
    out["loadgen_rss_kb_idle"] = proc_memory_kb(lg.pid)
    # Per session that came up (a session still handshaking holds next to nothing).
    out["sessions_up"] = phase_results(lg)[0]["up"]
    out["idle_kb_per_session"] = (out["server_rss_kb_idle"] - base_kb) / max(out["sessions_up"], 1)
    progress(f"{n} idle sessions: server {out['server_rss_kb_idle']} kB (configured {base_kb})")
    started(lg, 2, 60)
    cpu0, t0 = proc_cpu_s(srv.pid), time.monotonic()
    lg_cpu0 = proc_cpu_s(lg.pid)
    started(lg, 3, secs + 30)
    dt = time.monotonic() - t0
    out["server_cpu_steady"] = (proc_cpu_s(srv.pid) - cpu0) / dt
    out["loadgen_cpu_steady"] = (proc_cpu_s(lg.pid) - lg_cpu0) / dt
    out["loadavg_steady"] = os.getloadavg()
    started(lg, 7, 4 * secs + bulk_s + 60)
    out["flood"] = flooded(s, lg, a)
    out["server_rss_kb_end"] = proc_memory_kb(srv.pid)
    out["phases"] = {f"{p['index']}-{p['phase']}": p for p in phase_results(lg)}
    return out


def flooded(s: ScaleLab, lg, a: dict) -> dict:  # noqa: ANN001
    """The flood beside the load generator's last phase (which has just started), until
    the load generator's summary: what was sent, the server's counters over it, its peak
    memory and the datagrams its namespace dropped for a full socket buffer."""
    srv = s.server
    before, rcvbuf0 = counters(s), rcvbuf_errors(s)
    stop, rss = threading.Event(), []
    sampler = threading.Thread(target=sample_rss, args=(srv.pid, stop, rss), daemon=True)
    sampler.start()
    flood = start_flood(s, a["flood_procs"], a["bulk_seconds"] + 1)
    wait_event(lg, lambda e: e.get("event") == "summary", a["bulk_seconds"] + 60)
    stop.set()
    for p in flood:
        p.wait(60)
    sent = [parse_result(p) for p in flood]
    after = counters(s)
    return {
        "sent": sum(r["sent"] for r in sent),
        "rate_per_s": sum(r["sent"] / r["seconds"] for r in sent),
        "senders": len(sent),
        "server_rss_kb_max": max(rss, default=0),
        "server_rcvbuf_drops": rcvbuf_errors(s) - rcvbuf0,
        "counters": {k: after.get(k, 0) - before.get(k, 0) for k in after},
    }


def flood_run(lab: Lab, a: dict) -> dict:
    """Only the flood phase: ``sessions`` clients up, then bulk with re-joins twice, the
    second time beside the flood (phases 6 and 7 of the full run, numbered 1 and 2)."""
    s = ScaleLab(
        lab, a["binary"], a["sessions"], detect_ms=a["detect_ms"], threads=a["server_threads"]
    )
    s.keys()
    s.start_server()
    s.srv.route_replace(SPOOFED, via="10.1.0.2")
    time.sleep(1.0)
    bulk_s = a["bulk_seconds"]
    lg = s.loadgen(
        ["up", f"bulk:{bulk_s}", f"bulk:{bulk_s}"], fraction=0.1, bulk_sessions=50,
        bulk_mbit=a["bulk_mbit"], up_timeout=60,
    )  # fmt: skip
    started(lg, 2, bulk_s + 120)
    out: dict = {"sessions": a["sessions"], "loadavg_start": os.getloadavg()}
    out["flood"] = flooded(s, lg, a)
    out["loadavg_end"] = os.getloadavg()
    out["phases"] = {f"{p['index']}-{p['phase']}": p for p in phase_results(lg)}
    return out


def flood_summary(run: dict) -> dict:
    ph = run["phases"]
    bulk0, bulk1 = ph["1-bulk"], ph["2-bulk"]
    ratio = bulk1["bulk_goodput_mbit"] / max(bulk0["bulk_goodput_mbit"], 1e-9)
    refused = run["flood"]["counters"].get("rx_handshake_rate_limited", 0)
    return {
        "sessions": run["sessions"],
        "bulk_goodput_mbit": bulk0["bulk_goodput_mbit"],
        "bulk_goodput_flood_mbit": bulk1["bulk_goodput_mbit"],
        "flood_ratio": ratio,
        "flood_rate_per_s": run["flood"]["rate_per_s"],
        "refused_during_flood": refused,
        "rejoined_without_flood": f"{bulk0['back_up']}/{bulk0['acted_on']}",
        "rejoined_during_flood": f"{bulk1['back_up']}/{bulk1['acted_on']}",
        "rejoin_max_s_during_flood": bulk1.get("rejoin_max_s"),
        "others_rehandshook_during_flood": bulk1.get("others_rehandshook"),
        "up_after_flood": bulk1.get("up_at_end"),
        "server_rcvbuf_drops": run["flood"]["server_rcvbuf_drops"],
        "pass": {
            "flood_goodput": ratio >= BARS["flood_ratio"],
            "nobody_refused": refused == 0 and bulk1["back_up"] == bulk1["acted_on"],
        },
    }


def idle_run(lab: Lab, a: dict, n: int) -> dict:
    """``n`` clients (5 per address) up and quiet: memory per idle session."""
    s = ScaleLab(
        lab,
        a["binary"],
        n,
        per_address=5,
        roam=False,
        detect_ms=a["detect_ms"],
        threads=a["server_threads"],
    )
    s.keys()
    srv = s.start_server(timeout=120)
    time.sleep(1.0)
    base_kb = proc_memory_kb(srv.pid)
    lg = s.loadgen(["up", "idle:8"], up_timeout=120)
    started(lg, 1, 180)
    # The median of five readings a second apart (from 2 s in): the once-a-second dashboard
    # sample and the server's periodic return of freed heap move RSS by a few hundred
    # bytes per session from one second to the next.
    time.sleep(1.0)
    readings = []
    for _ in range(5):
        time.sleep(1.0)
        readings.append(proc_memory_kb(srv.pid))
    idle_kb = statistics.median(readings)
    up = phase_results(lg)[0]
    out = {
        "sessions": n,
        "sessions_up": up["up"],
        "server_rss_kb_configured": base_kb,
        "server_rss_kb_idle": idle_kb,
        "server_rss_kb_idle_readings": readings,
        # Per session that came up: one still handshaking holds next to nothing.
        "idle_kb_per_session": (idle_kb - base_kb) / max(up["up"], 1),
        "loadgen_rss_kb_idle": proc_memory_kb(lg.pid),
        "loadavg": os.getloadavg(),
    }
    wait_event(lg, lambda e: e.get("event") == "summary", 60)
    out["up"] = up
    progress(f"{n} idle sessions: {out['idle_kb_per_session']:.1f} kB each, up {out['up']}")
    return out


def marginal_kb(small: dict, large: dict) -> float:
    """What each session beyond the smaller run's adds to the server's RSS: the threads'
    fixed buffers (touched only under load), the dashboard's charted series (capped) and
    the allocator's arenas count in both runs and cancel."""
    grown = lambda r: r["server_rss_kb_idle"] - r["server_rss_kb_configured"]  # noqa: E731
    return (grown(large) - grown(small)) / max(large["sessions_up"] - small["sessions_up"], 1)


def summarize(big: dict, idle: dict | None, small: dict | None = None) -> dict:
    ph = big["phases"]
    up = ph["0-up"]
    bulk0, bulk1 = ph["6-bulk"], ph["7-bulk"]
    ratio = bulk1["bulk_goodput_mbit"] / max(bulk0["bulk_goodput_mbit"], 1e-9)
    refused = big["flood"]["counters"].get("rx_handshake_rate_limited", 0)
    s = {
        "sessions": big["sessions"],
        "all_up_s": up["all_up_s"],
        "handshakes_per_s": up["handshakes_per_s"],
        "steady_loss_pct": ph["2-steady"]["loss_pct"],
        "steady_low_loss_pct": ph["3-steady"]["loss_pct"],
        "low_rate_kbit": ph["3-steady"]["rate_kbit"],
        "churn_loss_pct": ph["4-churn"]["loss_pct"],
        "roam_loss_pct": ph["5-roam"]["loss_pct"],
        "idle_kb_per_session": big["idle_kb_per_session"],
        "server_cpu_idle": big["server_cpu_idle"],
        "server_datagrams_per_s_idle": big["server_datagrams_per_s_idle"],
        "server_cpu_steady": big["server_cpu_steady"],
        "bulk_goodput_mbit": bulk0["bulk_goodput_mbit"],
        "bulk_goodput_flood_mbit": bulk1["bulk_goodput_mbit"],
        "flood_ratio": ratio,
        "flood_rate_per_s": big["flood"]["rate_per_s"],
        "refused_during_flood": refused,
        "rejoined_during_flood": f"{bulk1['back_up']}/{bulk1['acted_on']}",
    }
    if idle:
        s["idle_sessions"] = idle["sessions"]
        s["idle_sessions_up"] = idle["sessions_up"]
        s["idle_kb_per_session_large"] = idle["idle_kb_per_session"]
        s["idle_all_up_s"] = idle["up"]["all_up_s"]
        s["idle_max_up_s"] = idle["up"]["max_s"]
    if idle and small:
        s["idle_kb_per_session_small"] = small["idle_kb_per_session"]
        s["idle_kb_per_session_marginal"] = marginal_kb(small, idle)
    s["pass"] = {
        "all_up": (up["all_up_s"] or 1e9) <= BARS["all_up_s"],
        "steady_loss": s["steady_loss_pct"] <= BARS["loss_pct"],
        "idle_memory": s.get("idle_kb_per_session_marginal", s["idle_kb_per_session"])
        <= BARS["idle_kb_per_session"],
        "flood_goodput": ratio >= BARS["flood_ratio"],
        "nobody_refused": refused == 0 and bulk1["back_up"] == bulk1["acted_on"],
    }
    return s


def plot(big: dict, s: dict):  # noqa: ANN201
    fig, (a1, a2) = figure(2, 11, 4)
    ph = big["phases"]
    keys = ["2-steady", "3-steady", "4-churn", "5-roam"]
    names = [f"{k[2:]} {ph[k]['rate_kbit']:g}k" for k in keys]
    a1.bar(names, [max(ph[k]["loss_pct"], 1e-3) for k in keys], color="C0")
    a1.set_yscale("log")
    a1.axhline(BARS["loss_pct"], color="red", ls="--", label="bar 0.1 %")
    a1.set_ylabel("loss, % of packets")
    up = "not all up" if s["all_up_s"] is None else f"all up in {s['all_up_s']:.1f} s"
    a1.set_title(f"{s['sessions']} sessions x 2 links; {up}")
    a1.legend()
    a2.bar(["bulk", "bulk + flood"], [s["bulk_goodput_mbit"], s["bulk_goodput_flood_mbit"]])
    a2.set_ylabel("goodput of 50 downloads, Mbit/s")
    a2.set_title(f"flood of {s['flood_rate_per_s']:.0f} initiations/s (target 100 000)")
    return fig


def main(sessions: int = 1000, idle_sessions: int = 10_000, seconds: float = 10, **kw) -> None:
    a = {
        "binary": multihome_binary(), "sessions": sessions, "idle_sessions": idle_sessions,
        "seconds": seconds, "bulk_seconds": kw.get("bulk_seconds", 8),
        "rate_kbit": kw.get("rate_kbit", 256), "packet_bytes": kw.get("packet_bytes", 600),
        "bulk_mbit": kw.get("bulk_mbit", 2.0), "flood_procs": kw.get("flood_procs", 2),
        "low_rate_kbit": kw.get("low_rate_kbit", 16), "detect_ms": kw.get("detect_ms", 1000),
        "server_threads": kw.get("server_threads"),
    }  # fmt: skip
    if kw.get("flood_only"):
        with Lab() as lab:
            run = flood_run(lab, a)
        s = flood_summary(run)
        progress(f"summary: {s}")
        params = {k: v for k, v in a.items() if k != "binary"}
        save("scale-flood", {"params": params, "summary": s, "run": run}, None)
        return
    with Lab() as lab:
        big = big_run(lab, a)
    big["rate_kbit"] = a["rate_kbit"]
    idle = small = None
    if idle_sessions:
        with Lab() as lab:
            small = idle_run(lab, a, idle_sessions // 10)
        with Lab() as lab:
            idle = idle_run(lab, a, idle_sessions)
    s = summarize(big, idle, small)
    progress(f"summary: {s}")
    params = {k: v for k, v in a.items() if k != "binary"}
    save(
        "scale",
        {"params": params, "summary": s, "big": big, "idle": idle, "idle_small": small},
        plot(big, s),
    )
