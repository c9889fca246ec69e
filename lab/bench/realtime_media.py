"""Suite ``realtime-media``: a video call and voice over lossy and trace-driven links, per policy.

Role: issue 17's multimedia case (MMTP, after Magalhães, *A Transport Layer Approach to Host
Mobility*: a frame that cannot arrive in time is dropped at the sender). On
lab/scenarios/realtime-media.toml, per case — fixed links with random loss (two and three
links, different delays, one clean pair) and the Wi-Fi + LTE trace pairs of
lab/scenarios/aggregate.toml — one pair of daemons carries, in turn, the same stream under
``realtime`` with FEC, ``realtime`` with ``fec = false``, adaptive ``redundant``, ``aggregate``
and ``best`` (each policy has its own port pair and rule). The stream (lab/tools/mediastream.py)
is a 4 Mbit/s, 30 frames/s video call with an I-frame every 30 frames, plus 64 kbit/s voice,
both with a 150 ms deadline, uploaded lan -> org (the client's rules choose the policy).

Per case and policy (lab/bench/realtime_media_metrics.py has the definitions): frames on time,
late and lost; voice packets on time, late and lost; packets that arrived after their
deadline; the one-way delay CDF; bytes the client sent on all links (its per-link
``tx_bytes``) per inner byte delivered, and ``extra_bytes`` = those bytes over ``best``'s in
the same run, minus 1 (``best`` sends one copy of the same stream: the cost of copies and
parity); the daemons' counters (``rt_dropped_late``, ``fec_parity_sent``, ``fec_recovered``,
``fec_late``, ``rt_rx_late``, ...).

Bars (issue 17), checked per two-link case: with random loss p1, p2 (1-5 %), realtime+FEC
leaves at most p1·p2 + 0.2 % of packets not on time (the loss of full duplication plus 0.2 %)
for at most 30 % extra bytes, and on clean links at most 5 %; no realtime packet arrives
after its deadline (receiver's clock, beyond ``slack_ms``).

Usage (root; ~18 min with the defaults)::

    .venv/bin/python -m lab.bench realtime-media [--seconds S] [--cases NAME ...]

Invariants: every policy of a case crosses the same linkem processes and daemons, with the
same frames (same seed); each policy first sends a warm-up stream (not counted) so the links'
loss is measured; trace links restart their trace when the measured stream starts, so every
policy sees the same stretch; a partial run (``--cases``, shorter ``--seconds``) is written
as ``realtime-media-quick.json``.
"""

from __future__ import annotations

import dataclasses
import json
import time

from lab.bench.aggregate import queue_bytes, subset, trace_overrides
from lab.bench.aggregate_traces import TracesUnavailable, pair_traces
from lab.bench.common import progress, save
from lab.bench.realtime_media_metrics import figures
from lab.bench.realtime_media_plot import plot
from lab.netns import Lab, LabError, tool_cmd
from lab.scenario import Scenario, load
from lab.topology import ORIGIN, Topology
from lab.traffic import parse_result, wait_listening

# (label, first port of the pair, rule keys).
POLICIES = (
    ("realtime+fec", 5100, {"policy": "realtime"}),
    ("realtime-nofec", 5110, {"policy": "realtime", "fec": False}),
    ("redundant", 5120, {"policy": "redundant"}),
    ("aggregate", 5130, {"policy": "aggregate"}),
    ("best", 5140, {"policy": "best"}),
)
CLIENT_COUNTERS = ("rt_dropped_late", "fec_parity_sent", "queue_drops", "codel_drops")
SERVER_COUNTERS = ("rt_rx_late", "fec_recovered", "fec_late", "rx_duplicates")


def rules(deadline_ms: int) -> list[dict]:
    out = []
    for name, port, keys in POLICIES:
        rule = {"name": name, "protocol": "udp", "ports": f"{port}-{port + 1}", **keys}
        if keys["policy"] == "realtime":
            rule["deadline_ms"] = deadline_ms
        out.append(rule)
    return out


def stream_args(b: dict, port: int, seconds: float, seed: int) -> list[str]:
    s = b["stream"]
    args = ["--video-port", str(port), "--voice-port", str(port + 1)]
    args += ["--seconds", f"{seconds:g}", "--seed", str(seed)]
    for key in ("video_kbit", "fps", "gop", "i_ratio", "sigma", "max_payload"):
        args += [f"--{key.replace('_', '-')}", str(s[key])]
    return args + ["--voice-bytes", str(s["voice_bytes"]), "--voice-ms", str(s["voice_ms"])]


def stream(topo: Topology, b: dict, port: int, run: tuple[float, int, str]) -> tuple:
    """One stream lan -> org of ``run`` = (seconds, seed, tag); returns (manifest, rx log)."""
    seconds, seed, tag = run
    d = topo.dir
    tx_log, rx_log = d / f"{tag}-tx.json", d / f"{tag}-rx.json"
    ports = ["--video-port", str(port), "--voice-port", str(port + 1)]
    rx = topo.org.spawn(
        tool_cmd("mediastream", "recv", *ports, "--idle", "1.5", "--log", str(rx_log)), f"{tag}-rx"
    )
    wait_listening(rx)
    tx = topo.lan.spawn(
        tool_cmd(
            "mediastream", "send", "--host", ORIGIN, *stream_args(b, port, seconds, seed),
            "--log", str(tx_log),
        ),
        f"{tag}-tx",
    )  # fmt: skip
    tx.wait(seconds + 30)
    rx.wait(30)
    sent = parse_result(tx)
    if sent["send_errors"]:
        progress(f"    sender: {sent['send_errors']} send errors")
    return json.loads(tx_log.read_text()), json.loads(rx_log.read_text())


def link_drops(topo: Topology) -> dict:
    """Upload frames each emulated link dropped: at random (``loss``) and at its full queue."""
    out = {}
    for i, link in topo.emulated.items():
        up = link.stats()["a2b"]
        out[topo.links[i].name] = {
            "loss": up["dropped_loss"]["frames"],
            "queue": up["dropped_queue"]["frames"],
        }
    return out


def snapshot(topo: Topology) -> dict:
    sess = topo.session("client") or {}
    return {
        "link_drops": link_drops(topo),
        "tx_bytes": sum(lk.get("tx_bytes", 0) for lk in sess.get("links", [])),
        "link_tx_bytes": {lk["name"]: lk.get("tx_bytes", 0) for lk in sess.get("links", [])},
        "link_loss": {lk["name"]: lk.get("loss") for lk in sess.get("links", [])},
        "client": {k: topo.counters("client").get(k, 0) for k in CLIENT_COUNTERS},
        "server": {k: topo.counters("server").get(k, 0) for k in SERVER_COUNTERS},
    }


def delta(a: dict, b: dict) -> dict:
    links = {k: v - a["link_tx_bytes"].get(k, 0) for k, v in b["link_tx_bytes"].items()}
    drops = {
        k: {kind: n - a["link_drops"][k][kind] for kind, n in v.items()}
        for k, v in b["link_drops"].items()
    }
    return {
        "tx_bytes": b["tx_bytes"] - a["tx_bytes"],
        "link_tx_bytes": links,
        "link_drops": drops,
        **{side: {k: b[side][k] - a[side][k] for k in b[side]} for side in ("client", "server")},
    }


def run_policy(topo: Topology, b: dict, label: str, port: int, restart) -> dict:  # noqa: ANN001
    seed = b["stream"]["seed"]
    stream(topo, b, port, (b["warmup_s"], seed + 1000, f"{label}-warmup"))
    before = snapshot(topo)
    if restart:
        restart()
    manifest, rx = stream(topo, b, port, (b["seconds"], seed, label))
    after = snapshot(topo)
    counters = delta(before, after)
    # The client's loss estimate per link when the stream ended (what FEC and copies follow).
    counters["link_loss"] = after["link_loss"]
    rec = figures(manifest, rx, b["deadline_ms"], b["slack_ms"])
    rec["counters"] = counters
    rec["bytes_per_delivered"] = (
        counters["tx_bytes"] / rec["delivered_bytes"] if rec["delivered_bytes"] else None
    )
    v, a = rec["video"], rec["voice"]
    progress(
        f"    {label:15} frames on time {v['frames_on_time']}/{v['frames']} "
        f"(late {v['frames_late']}, lost {v['frames_lost']}); voice on time "
        f"{a['packets_on_time']}/{a['packets_sent']}; late pkts {rec['late_packets']}; "
        f"p99 {v['delay_ms']['p99'] or 0:.1f} ms; bytes/delivered "
        f"{rec['bytes_per_delivered'] or 0:.3f}; {counters['client']} {counters['server']} "
        f"drops {counters['link_drops']} lost {v['lost_packets'][:12]}"
    )
    return rec


def add_ratios(policies: dict) -> None:
    """``extra_bytes`` against ``best`` of the same run; ``not_on_time`` fractions."""
    best = policies.get("best", {}).get("counters", {}).get("tx_bytes")
    for rec in policies.values():
        tx = rec["counters"]["tx_bytes"]
        rec["extra_bytes"] = tx / best - 1 if best else None
        v, a = rec["video"], rec["voice"]
        sent = v["packets_sent"] + a["packets_sent"]
        bad = v["packets_not_on_time"] + a["packets_late"] + a["packets_lost"]
        rec["packets_not_on_time"] = bad / sent if sent else None
        rec["frames_on_time"] = v["frames_on_time"] / v["frames"] if v["frames"] else None


def run_topology(sc: Scenario, name: str, n: int, overrides: dict, restart_of=None) -> dict:  # noqa: ANN001
    """All policies over one topology of ``n`` links; returns ``{label: record}``."""
    b = sc.bench
    sc = dataclasses.replace(
        subset(sc, n), tunnel={"policy": "best", "rule": rules(b["deadline_ms"])}
    )
    with Lab() as lab:
        topo = sc.topology(lab, overrides=overrides(lab) if callable(overrides) else overrides)
        topo.start()
        restart = restart_of(topo) if restart_of else None
        out = {}
        for label, port, _ in POLICIES:
            out[label] = run_policy(topo, b, label, port, restart)
            time.sleep(0.5)
        topo.stop()
    add_ratios(out)
    progress(f"  {name}: done")
    return out


def run_case(sc: Scenario, case: dict) -> dict:
    b = sc.bench
    names = [lk["name"] for lk in sc.links[: len(case["rates_mbit"])]]
    links = zip(names, case["rates_mbit"], case["delays_ms"], case["loss"], strict=True)
    overrides = {
        nm: {"rate": f"{r:g}mbit", "delay": f"{d:g}ms", "queue_bytes": queue_bytes(r, b)}
        | ({"loss": p} if p else {})
        for nm, r, d, p in links
    }
    policies = run_topology(sc, case["name"], len(names), overrides)
    return {**case, "kind": "fixed", "links": overrides, "policies": policies}


def run_pair(sc: Scenario, pair: dict) -> dict:
    b = sc.bench
    info: dict = {}

    def overrides(lab: Lab) -> dict:
        links = pair_traces(pair, lab.dir)
        info["links"] = links
        return trace_overrides(links, b)

    policies = run_topology(
        sc, pair["name"], len(pair["link"]), overrides, lambda topo: topo.restart_traces
    )
    links = [{k: v for k, v in lk.items() if k not in ("ms", "path")} for lk in info["links"]]
    return {"name": pair["name"], "kind": "traces", "links": links, "policies": policies}


def checks(case: dict) -> dict | None:
    """Issue 17's bars for a two-link fixed case (None for others)."""
    if case.get("kind") != "fixed" or len(case["loss"]) != 2 or "policies" not in case:
        return None
    p1, p2 = case["loss"]
    rt = case["policies"]["realtime+fec"]
    clean = p1 == 0 and p2 == 0
    bound = p1 * p2 + 0.002
    extra_max = 0.05 if clean else 0.30
    out = {
        "loss_bound": bound,
        "not_on_time": rt["packets_not_on_time"],
        "loss_ok": rt["packets_not_on_time"] <= bound,
        "extra_bytes": rt["extra_bytes"],
        "extra_bytes_max": extra_max,
        "extra_ok": rt["extra_bytes"] is not None and rt["extra_bytes"] <= extra_max,
        "frames_on_time_vs_redundant": (
            rt["frames_on_time"] - case["policies"]["redundant"]["frames_on_time"]
        ),
    }
    out["late_ok"] = all(
        case["policies"][p]["late_beyond_slack"] == 0 for p in ("realtime+fec", "realtime-nofec")
    )
    return out


def select(sc: Scenario, only: list[str] | None) -> tuple[list[dict], list[dict]]:
    cases = sc.bench["case"]
    pairs = [p for p in load("aggregate").bench["trace_pair"]]
    if not only:
        wanted_pairs = set(sc.bench["trace_pairs"])
        return cases, [p for p in pairs if p["name"] in wanted_pairs]
    known = {c["name"] for c in cases} | {p["name"] for p in pairs}
    if set(only) - known:
        raise LabError(f"unknown cases {sorted(set(only) - known)}; known: {sorted(known)}")
    return [c for c in cases if c["name"] in only], [p for p in pairs if p["name"] in only]


def table(results: list[dict]) -> None:
    print(
        f"\n{'case':15} {'policy':15} {'frames on time':>15} {'late':>5} {'lost':>5} "
        f"{'voice ok':>9} {'late pkts':>9} {'not on time':>11} {'B/B dlv':>7} {'extra':>7}"
    )
    for c in results:
        if "error" in c or "skipped" in c:
            print(f"{c['name']:15} {c.get('error') or c.get('skipped')}"[:150])
            continue
        for label, r in c["policies"].items():
            v, a = r["video"], r["voice"]
            extra = f"{r['extra_bytes']:+7.1%}" if r["extra_bytes"] is not None else "      -"
            print(
                f"{c['name']:15} {label:15} {v['frames_on_time']:>7}/{v['frames']:<7} "
                f"{v['frames_late']:>5} {v['frames_lost']:>5} "
                f"{a['packets_on_time']:>4}/{a['packets_sent']:<4} {r['late_packets']:>9} "
                f"{r['packets_not_on_time']:>11.3%} {r['bytes_per_delivered'] or 0:>7.3f} {extra}"
            )
        if c.get("checks"):
            print(f"{'':15} bars: {c['checks']}")


def main(seconds: float | None = None, only: list[str] | None = None) -> dict:
    sc = load("realtime-media")
    b = sc.bench
    if seconds:
        b["seconds"] = seconds
    cases, pairs = select(sc, only)
    progress(
        f"realtime-media: {len(cases)} fixed cases + {len(pairs)} trace pairs, "
        f"{len(POLICIES)} policies, {b['seconds']:g} s (+ {b['warmup_s']:g} s warm-up) each\n"
        f"{sc.picture}"
    )
    results: list[dict] = []
    for case in cases:
        progress(
            f"case {case['name']}: {case['rates_mbit']} Mbit/s, {case['delays_ms']} ms, "
            f"loss {case['loss']}"
        )
        try:
            results.append(run_case(sc, case))
        except LabError as exc:
            progress(f"case {case['name']} failed: {exc}")
            results.append({**case, "error": str(exc)[-2000:]})
    for pair in pairs:
        progress(f"trace pair {pair['name']}")
        try:
            results.append(run_pair(sc, pair))
        except TracesUnavailable as exc:
            results.append({"name": pair["name"], "kind": "traces", "skipped": str(exc)})
        except LabError as exc:
            progress(f"trace pair {pair['name']} failed: {exc}")
            results.append({"name": pair["name"], "kind": "traces", "error": str(exc)[-2000:]})
    for c in results:
        c["checks"] = checks(c)
    quick = bool(only) or b["seconds"] < load("realtime-media").bench["seconds"]
    data = {"params": {k: v for k, v in b.items() if k != "case"}, "cases": results}
    save(
        "realtime-media-quick" if quick else "realtime-media", data, plot(results, b["deadline_ms"])
    )
    table(results)
    return data
