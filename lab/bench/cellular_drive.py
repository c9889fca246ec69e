"""Suite ``cellular-drive``: a slow link is not a dead link (issue 19), on real driving traces.

Role: pairs of Mahimahi cellular driving traces (links with multi-second outages) as the two
links of one client; through them, per policy (``best``, ``aggregate``, ``redundant``, one
after the other on the same traces from the same start offset), a bulk TCP download (CUBIC,
``org`` -> the client's LAN host) and beside it a 64 kbit/s voice stream in the same direction
(160-byte IP packets every 20 ms, lab/tools/udpstream.py). Optionally kernel MPTCP's bulk
download on the same pair (``cli`` <- ``srv``, its own path manager, no voice).

Per run: bulk goodput (and over the rate the down traces offered); the longest stall of the
download while any link delivers (receiver timeline in 10-ms bins, minus the time when every
link's down trace is out, i.e. has a gap above ``OUT_GAP_MS``); the client's link state
changes (``PathState`` events of its log) against the real outages of the traces over the
run (gaps of at least the daemon's ``detect_ms`` in either direction of a link); voice packets
lost and late (> 150 ms one way). The arithmetic is lab/bench/cellular_drive_traces.py.

Bars (issue 19): longest stall while any link delivers <= 0.3 s; Down transitions per link <=
that link's real outages; ``aggregate`` >= ``best`` in goodput; no voice packet lost.
``stream`` is ``aggregate`` with stream mode on (docs/STREAM.md): the download is carried over
kernel MPTCP by the daemons (subflows from the client, one per link), the voice in the tunnel;
its Down transitions are the tunnel's, which the download no longer depends on.

Traces: read in place from ``$MULTIHOME_DATA/mahimahi``, else ``shared/data/mahimahi`` beside
the repository (as lab/bench/aggregate_traces.py finds its data); a pair with a missing trace
is reported as skipped. Each run's traces are rotated copies in the lab's temporary folder:
both start ``start_s`` into the drive, the second link a further ``offset_s`` so that outages
recorded on the same drive (these traces were captured simultaneously) do not line up by
construction. Both directions' traces are reinstalled at the bulk connection's CONNECTED, so
every policy sees the same stretch.

Usage (root, ~19 min with the defaults: 3 pairs x 3 policies and stream mode x 60 s + MPTCP)::

    .venv/bin/python -m lab.bench cellular-drive [--runs N] [--seconds S] [--cases PAIR ...]
        [--policies P ...] [--no-mptcp] [--probe]

``--probe`` also records, per run, what the sender sees (lab/bench/sender_probe.py): the
origin's TCP every 20 ms and the tunnel server's paths every 100 ms.

Invariants: every policy of a pair crosses the same linkem processes (the daemons restart
between policies); event counts are limited to the run's wall-clock window; a partial run
(``--cases`` or ``--seconds`` below the default, or ``--probe``) is written as
``cellular-drive-quick``.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

from lab import mptcp
from lab.bench import cellular_drive_traces as cd
from lab.bench.aggregate import queue_bytes
from lab.bench.aggregate_traces import DATA_DIR, TracesUnavailable, mean_mbit, read_trace
from lab.bench.cellular_drive_plot import plot
from lab.bench.common import progress, save
from lab.bench.sender_probe import SenderProbe
from lab.bench.transfer import run_transfer
from lab.netns import Lab, LabError, tool_cmd
from lab.topology import LAN_HOST, LAN_PREFIX, ORIGIN, SRV_UPLINK, LinkSpec, Topology
from lab.traffic import UdpStream, parse_result, wait_listening

MAHIMAHI_DIR = Path(os.environ.get("MAHIMAHI_DIR") or DATA_DIR / "mahimahi")
# Trace pairs: (link name, trace stem, one-way delay ms); start_s into both drives, offset_s
# more into the second. LTE 35 ms one way (70 ms RTT, a typical LTE RTT), UMTS 50 ms.
PAIRS = (
    {
        "name": "att+tmobile-lte",
        "links": [("att", "ATT-LTE-driving", 35), ("tmobile", "TMobile-LTE-driving", 35)],
        "start_s": 15,
        "offset_s": 200,
    },
    {
        "name": "att2016+tmobile-umts",
        "links": [("att", "ATT-LTE-driving-2016", 35), ("umts", "TMobile-UMTS-driving", 50)],
        "start_s": 15,
        "offset_s": 100,
    },
    {
        "name": "verizon+tmobile-short",
        "links": [("verizon", "Verizon-LTE-short", 35), ("tmobile", "TMobile-LTE-short", 35)],
        "start_s": 40,
        "offset_s": 50,
    },
)
# A trace without .up (TMobile-LTE-driving): the uplink carries only the download's ACKs,
# the voice's nothing, and the tunnel's feedback, ~0.5 Mbit/s for 13 Mbit/s of data; 2 Mbit/s
# is the low end of measured LTE uplinks and never the bottleneck. It has no outages, so that
# link's outages are the down trace's alone.
FIXED_UP_MBIT = 2
# "stream": `aggregate` with stream mode on (docs/STREAM.md): the bulk download is carried
# over kernel MPTCP by the daemons, the voice stays in the tunnel under `aggregate`.
POLICIES = ("best", "aggregate", "redundant", "stream")
SECONDS = 60.0
BIN_MS = 10
OUT_GAP_MS = 200  # a down trace silent this long: the link delivers nothing (it is "out")
DETECT_MS = 1000  # the daemon's default detect_ms (docs/CONFIG.md): gaps this long are outages
STALL_BAR_MS = 300
VOICE_PPS = 50
VOICE_PAYLOAD = 132  # + 28 bytes of IPv4/UDP: 160-byte packets, 64 kbit/s
DEADLINE_S = 0.150
QUEUE = {"queue_min_packets": 30, "queue_ms": 50}  # the aggregate suite's trace queues
_PORT = [9600]


def next_port() -> int:
    _PORT[0] += 1
    return _PORT[0]


def load_pair(pair: dict, out_dir: Path) -> list[dict]:
    """Rotated down/up traces of each link written to ``out_dir``; raises TracesUnavailable."""
    links = []
    for i, (name, stem, delay) in enumerate(pair["links"]):
        shift = int((pair["start_s"] + (pair["offset_s"] if i else 0)) * 1000)
        link: dict = {"name": name, "trace": stem, "delay_ms": delay, "shift_ms": shift}
        for d in ("down", "up"):
            src = MAHIMAHI_DIR / f"{stem}.{d}"
            if not src.is_file():
                if d == "down":
                    raise TracesUnavailable(f"{src} is absent (Mahimahi traces not here)")
                link[d] = None
                continue
            ms = cd.rotate(read_trace(src), shift)
            path = out_dir / f"{name}.{d}"
            path.write_text("".join(f"{m}\n" for m in ms))
            link[d] = {"ms": ms, "path": path, "mean_mbit": mean_mbit(ms)}
        links.append(link)
    return links


def linkem_config(link: dict) -> dict:
    def direction(tr: dict | None) -> dict:
        rate = f"trace:{tr['path']}" if tr else f"{FIXED_UP_MBIT}mbit"
        mbit = tr["mean_mbit"] if tr else FIXED_UP_MBIT
        return {
            "rate": rate,
            "delay": f"{link['delay_ms']}ms",
            "queue_bytes": queue_bytes(mbit, QUEUE),
        }

    return {"b2a": direction(link["down"]), "a2b": direction(link["up"])}


def set_policy(topo: Topology, policy: str) -> None:
    """(Re)start both daemons with the client's default policy set to ``policy`` (``stream``:
    ``aggregate`` with stream mode on)."""
    stream = policy == "stream"
    # A link may be in an outage of its trace right now: established is enough.
    topo.reconfigure(
        policy="aggregate" if stream else policy, stream=stream, timeout=30, all_links_up=False
    )


def wait_connected(proc, timeout: float = 15) -> None:  # noqa: ANN001 - a lab.netns.Proc
    deadline = time.monotonic() + timeout
    while "CONNECTED" not in proc.output():
        if not proc.alive() or time.monotonic() > deadline:
            raise LabError(f"bulk client never connected:\n{proc.tail()}")
        time.sleep(0.003)


def voice_figures(log: Path, count: int) -> dict:
    rows = json.loads(log.read_text()) if log.exists() else []
    delays = [(rx - sent) / 1e9 for _seq, sent, rx in rows]
    late = sum(d > DEADLINE_S for d in delays)
    got = {seq for seq, _sent, _rx in rows}
    lost_at = [seq / VOICE_PPS for seq in range(count) if seq not in got]
    return {
        "sent": count,
        "received": len(rows),
        "lost": count - len(rows),
        "late": late,
        "lost_or_late": count - len(rows) + late,
        "delay_median_ms": statistics.median(delays) * 1e3 if delays else None,
        "delay_max_ms": max(delays) * 1e3 if delays else None,
        # When the lost packets were sent (s after the traces restarted), to set beside the
        # links' outages; the first 100.
        "lost_at_s": lost_at[:100],
    }


def trace_facts(links: list[dict], t1_ms: float) -> dict:
    """Out intervals per link, the all-out time and each link's real outages over [0, t1]."""
    outs = [cd.out_intervals(lk["down"]["ms"], 0, t1_ms, OUT_GAP_MS) for lk in links]
    dead = cd.all_out(outs)
    return {
        "out_ms": outs,
        "all_out_ms": dead,
        "all_out_total_s": sum(b - a for a, b in dead) / 1e3,
        "outages": [
            cd.count_outages([lk[d]["ms"] for d in ("down", "up") if lk[d]], 0, t1_ms, DETECT_MS)
            for lk in links
        ],
        "offered_mbit": [mean_mbit(lk["down"]["ms"], 0, t1_ms / 1e3) for lk in links],
    }


def link_ids(topo: Topology, names: list[str]) -> dict[int, int]:
    """Client PathId -> our link index (by name, from the status document)."""
    sess = topo.session("client") or {}
    return {
        lk["id"]: names.index(lk["name"]) for lk in sess.get("links", []) if lk["name"] in names
    }


def link_rx(topo: Topology) -> dict[str, int]:
    sess = topo.session("client") or {}
    return {lk["name"]: lk.get("rx_bytes", 0) for lk in sess.get("links", [])}


def bulk_and_voice(topo: Topology, seconds: float, port: int, probe: bool = False) -> dict:
    """One bulk download + voice stream with the traces restarted at connect; with ``probe``,
    the sender's view sampled throughout (lab/bench/sender_probe.py)."""
    common = ["--port", str(port), "--cc", "cubic", "--bin-ms", str(BIN_MS)]
    common += ["--stall-timeout", f"{seconds + 30:g}"]
    server = topo.org.spawn(
        tool_cmd("bidixfer", "server", *common, "--send-seconds", f"{seconds:g}"), f"bx{port}"
    )
    wait_listening(server)
    client = topo.lan.spawn(
        tool_cmd("bidixfer", "client", "--host", ORIGIN, *common, "--send-bytes", "0"),
        f"bxc{port}",
    )
    wait_connected(client)
    t_conn = time.monotonic()
    topo.restart_traces()
    wall0, lag = time.time(), time.monotonic() - t_conn
    sampler = SenderProbe(topo, port) if probe else None
    if sampler:
        sampler.start(wall0)
    count = int(seconds * VOICE_PPS)
    log = topo.dir / f"voice-{port}.json"
    voice = UdpStream(topo.org, topo.lan, LAN_HOST, count=count, pps=VOICE_PPS,
                      size=VOICE_PAYLOAD, port=port + 1000, idle_s=10.0, log=str(log))  # fmt: skip
    out: dict = {"lag_s": lag, "wall0": wall0}
    try:
        client.wait(seconds + 120)
        server.wait(10)
        out["rx"] = parse_result(client)
        voice.wait()
    except LabError as exc:
        for proc in (client, server, voice.sender, voice.receiver):
            proc.stop()
        out["error"] = str(exc)[-600:]
    out["voice"] = voice_figures(log, count)
    if sampler:
        out["probe"] = sampler.stop()
    return out


def one_run(
    topo: Topology, links: list[dict], policy: str, seconds: float, probe: bool = False
) -> dict:
    set_policy(topo, policy)
    time.sleep(1)
    names = [lk["name"] for lk in links]
    ids = link_ids(topo, names)
    rx0 = link_rx(topo)
    res = bulk_and_voice(topo, seconds, next_port(), probe)
    rx1 = link_rx(topo)
    rx = res.get("rx", {})
    secs, received = rx.get("seconds"), rx.get("received", 0)
    lag_ms = res["lag_s"] * 1e3
    facts = trace_facts(links, seconds * 1e3)
    # Receiver time = trace time + lag (the traces were reinstalled lag after connect).
    dead = [(a + lag_ms, b + lag_ms) for a, b in facts["all_out_ms"]]
    stall = cd.longest_stall(rx.get("timeline", []), rx.get("bin_ms", BIN_MS), dead)
    events = [
        (ts, ids.get(p, -1), st) for ts, p, st in cd.path_events(topo.daemons["client"].output())
    ]
    changes = cd.state_changes(
        [e for e in events if e[1] >= 0], res["wall0"], res["wall0"] + seconds, len(links)
    )
    offered = sum(facts["offered_mbit"])
    goodput = received * 8 / secs / 1e6 if secs else 0.0
    return {
        "policy": policy,
        "goodput_mbps": goodput,
        "offered_mbit": offered,
        "goodput_over_offered": goodput / offered if offered else None,
        "seconds": secs,
        "max_gap_s": rx.get("max_gap_s"),
        "stall": stall,
        "longest_stall_any_link_s": stall["any_link_ms"] / 1e3,
        "longest_stall_raw_s": stall["raw_ms"] / 1e3,
        "all_out_total_s": facts["all_out_total_s"],
        "state_changes": changes,
        "downs": [c["downs"] for c in changes],
        "real_outages": facts["outages"],
        "voice": res["voice"],
        "lag_ms": lag_ms,
        # What each link delivered to the client during the run (its session's rx_bytes):
        # which link ``best`` used, how ``aggregate`` shared.
        "link_rx_bytes": {n: rx1.get(n, 0) - rx0.get(n, 0) for n in names},
        "error": res.get("error") or rx.get("error"),
        "counters": topo.counters("client"),
        "server_counters": topo.counters("server"),
        # The sender's view over time (``--probe``): the origin's TCP and the server's paths.
        **({"probe": res["probe"]} if "probe" in res else {}),
    }


def mptcp_run(topo: Topology, seconds: float) -> dict:
    """Kernel MPTCP's download on the same pair. The client sends 64 KiB first: this kernel's
    path manager opens the extra subflow only once the client's data was acknowledged; and it
    keeps its side open until the end, since the server refuses joins after a DATA_FIN."""

    def on_connect(client) -> None:  # noqa: ANN001 - a lab.netns.Proc
        wait_connected(client)
        topo.restart_traces()

    res = run_transfer(topo, "mptcp", server_send_seconds=seconds, client_send_bytes=65536,
                       client_close_after=seconds, timeout=seconds + 120, port=next_port(),
                       during=on_connect)  # fmt: skip
    rx = res.get("client", {})
    secs = rx.get("seconds")
    return {
        "goodput_mbps": rx.get("received", 0) * 8 / secs / 1e6 if secs else 0.0,
        "max_gap_s": rx.get("max_gap_s"),
        "joins": res.get("mptcp_counters"),
        "link_bytes": res.get("link_bytes"),
        "error": res.get("error") or rx.get("error"),
    }


def run_pair(
    pair: dict,
    seconds: float,
    runs: int,
    with_mptcp: bool,
    policies: tuple[str, ...],
    *,
    probe: bool = False,
) -> dict:
    out: dict = {"name": pair["name"], "start_s": pair["start_s"], "offset_s": pair["offset_s"]}
    with Lab() as lab:
        links = load_pair(pair, lab.dir)
        out["links"] = [
            {k: v for k, v in lk.items() if k not in ("down", "up")}
            | {d: (lk[d]["mean_mbit"] if lk[d] else None) for d in ("down", "up")}
            | {"up_fixed_mbit": None if lk["up"] else FIXED_UP_MBIT}
            for lk in links
        ]
        facts = trace_facts(links, seconds * 1e3)
        for link, outs, n in zip(out["links"], facts["out_ms"], facts["outages"], strict=True):
            link["out_s"] = [[round(a / 1e3, 3), round(b / 1e3, 3)] for a, b in outs]
            link["outages"] = n
        out["all_out_s"] = [[round(a / 1e3, 3), round(b / 1e3, 3)] for a, b in facts["all_out_ms"]]
        specs = [LinkSpec(lk["name"], linkem=linkem_config(lk), offloads=False, seed=i + 1)
                 for i, lk in enumerate(links)]  # fmt: skip
        topo = Topology(lab, specs, policy=policies[0])
        topo.org.route_replace(LAN_PREFIX, via=SRV_UPLINK)
        if with_mptcp:
            mptcp.enable(topo)
        out["runs"] = []
        for r in range(runs):
            run: dict = {}
            for policy in policies:
                rec = one_run(topo, links, policy, seconds, probe)
                run[policy] = rec
                show(pair["name"], r, runs, rec)
            if with_mptcp:
                run["mptcp"] = mptcp_run(topo, seconds)
                progress(f"  {pair['name']:22} run {r + 1}/{runs} mptcp     "
                         f"{run['mptcp']['goodput_mbps']:6.2f} Mbit/s "
                         f"joins {run['mptcp']['joins']}")  # fmt: skip
            out["runs"].append(run)
        topo.stop()
    out["summary"] = summarize(out["runs"])
    return out


def show(name: str, r: int, runs: int, rec: dict) -> None:
    v = rec["voice"]
    err = f"  ERROR {str(rec['error'])[:80]}" if rec.get("error") else ""
    progress(
        f"  {name:22} run {r + 1}/{runs} {rec['policy']:9} {rec['goodput_mbps']:6.2f} Mbit/s "
        f"(offered {rec['offered_mbit']:.2f}), "
        f"stall any-link {rec['longest_stall_any_link_s']:.2f} s "
        f"raw {rec['longest_stall_raw_s']:.2f} s, downs {rec['downs']} vs outages "
        f"{rec['real_outages']}, voice lost {v['lost']} late {v['late']}{err}"
    )


def _median(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarize(runs: list[dict]) -> dict:
    """Per policy: medians over runs, worst case for the bars, and the bars themselves."""
    out: dict = {}
    for pol in POLICIES:
        recs = [run[pol] for run in runs if pol in run]
        if not recs:
            continue
        out[pol] = {
            "goodput_mbps": _median([r["goodput_mbps"] for r in recs]),
            "goodput_over_offered": _median([r["goodput_over_offered"] for r in recs]),
            "longest_stall_any_link_s": max(r["longest_stall_any_link_s"] for r in recs),
            "longest_stall_raw_s": max(r["longest_stall_raw_s"] for r in recs),
            "downs": max(sum(r["downs"]) for r in recs),
            "real_outages": max(sum(r["real_outages"]) for r in recs),
            "downs_over_outages_links": sum(
                d > o for r in recs for d, o in zip(r["downs"], r["real_outages"], strict=True)
            ),
            "voice_lost": sum(r["voice"]["lost"] for r in recs),
            "voice_late": sum(r["voice"]["late"] for r in recs),
            "errors": sum(bool(r.get("error")) for r in recs),
        }
    for pol, s in out.items():
        s["bar_stall"] = s["longest_stall_any_link_s"] <= STALL_BAR_MS / 1e3
        s["bar_state_changes"] = s["downs_over_outages_links"] == 0
        s["bar_voice"] = s["voice_lost"] == 0
        if pol in ("aggregate", "stream") and "best" in out:
            best = out["best"]["goodput_mbps"] or 0.0
            s["ratio_to_best"] = s["goodput_mbps"] / best if best else None
            s["bar_goodput"] = s["goodput_mbps"] >= best
    mp = [run["mptcp"]["goodput_mbps"] for run in runs if "mptcp" in run]
    if mp:
        out["mptcp"] = {"goodput_mbps": _median(mp)}
    return out


def table(results: list[dict]) -> None:
    print(
        "\npair / policy            Mbit/s  /offer  stall>0.3?  any-link  raw   downs/outages  "
        "voice lost/late"
    )
    for p in results:
        if p.get("error"):
            print(f"{p['name']}: FAILED {p['error'][:200]}")
            continue
        for pol, s in p["summary"].items():
            if pol == "mptcp":
                print(f"  {p['name']:22} mptcp     {s['goodput_mbps']:6.2f}")
                continue
            print(
                f"  {p['name']:22} {pol:9} {s['goodput_mbps']:6.2f}  "
                f"{s['goodput_over_offered']:.3f}"
                f"  {'ok ' if s['bar_stall'] else 'MISS'}  {s['longest_stall_any_link_s']:8.2f}"
                f"  {s['longest_stall_raw_s']:5.2f}  {s['downs']:5d} / {s['real_outages']:<5d}"
                f"  {s['voice_lost']:5d} / {s['voice_late']}"
            )


def main(
    runs: int | None = None,
    seconds: float | None = None,
    only: list[str] | None = None,
    with_mptcp: bool = True,
    policies: list[str] | None = None,
    *,
    probe: bool = False,
) -> dict:
    seconds = seconds or SECONDS
    if policies and set(policies) - set(POLICIES):
        raise LabError(
            f"unknown policies {sorted(set(policies) - set(POLICIES))}; known: {POLICIES}"
        )
    chosen = tuple(p for p in POLICIES if not policies or p in policies)
    runs = runs or 1
    known = [p["name"] for p in PAIRS]
    if only and set(only) - set(known):
        raise LabError(
            f"unknown cellular-drive pairs {sorted(set(only) - set(known))}; known: {known}"
        )
    pairs = [p for p in PAIRS if not only or p["name"] in only]
    progress(
        f"cellular-drive: {len(pairs)} pairs x {chosen} x {runs} runs, {seconds:g} s each, "
        f"bulk download CUBIC + 64 kbit/s voice, org -> LAN host; traces from {MAHIMAHI_DIR}"
    )
    results, skipped = [], []
    for pair in pairs:
        progress(f"pair {pair['name']}: {[lk[1] for lk in pair['links']]}, "
                 f"start {pair['start_s']} s, "
                 f"second link +{pair['offset_s']} s")  # fmt: skip
        try:
            results.append(run_pair(pair, seconds, runs, with_mptcp, chosen, probe=probe))
        except TracesUnavailable as exc:
            progress(f"pair {pair['name']} skipped: {exc}")
            skipped.append({"name": pair["name"], "reason": str(exc)})
        except LabError as exc:
            progress(f"pair {pair['name']} failed: {exc}")
            results.append({"name": pair["name"], "error": str(exc)[-2000:]})
    params = {
        "seconds": seconds, "runs": runs, "policies": list(chosen), "bin_ms": BIN_MS,
        "out_gap_ms": OUT_GAP_MS, "detect_ms": DETECT_MS, "stall_bar_ms": STALL_BAR_MS,
        "voice": {"pps": VOICE_PPS, "ip_bytes": VOICE_PAYLOAD + 28,
                  "deadline_ms": DEADLINE_S * 1e3},
        "fixed_up_mbit": FIXED_UP_MBIT, "queue": QUEUE, "cc": "cubic",
        "direction": "download org -> LAN host (bulk and voice)",
        "pairs": [{k: v for k, v in p.items()} for p in pairs],
    }  # fmt: skip
    data = {"params": params, "pairs": results, "skipped": skipped}
    quick = bool(only) or seconds < SECONDS or chosen != POLICIES or probe
    save("cellular-drive-quick" if quick else "cellular-drive", data, plot(results))
    table(results)
    for s in skipped:
        print(f"\n{s['name']}: skipped ({s['reason']})")
    return data
