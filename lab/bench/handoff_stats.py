"""Handoff windows of a voice stream: the lab's twin of crates/sim/src/handoff.rs, and the
pooling of many runs' reports into the figures of the ``handoff-voice`` suite.

A handoff is one outage of the Wi-Fi link, from coverage lost to the next address; its
window runs from ``PRE_S`` before to ``POST_S`` after; a packet belongs to the first window
holding its send time, else it is "steady". Per class: packets sent, lost (never
received), late (received after the deadline), and the one-way delays of those received,
bucketed by whole ms up to 1 s, then by 100 ms (the simulator's buckets, so lab and
simulator reports pool and compare alike).

Invariants: pure functions; a report is a dict shaped as the simulator's ``HandoffReport``
(``handoffs``, ``outage_s``, ``lost_each``, ``late_each``, ``window``, ``steady``, the last
two with ``sent``, ``lost``, ``late``, ``delay_ms`` = [[ms, packets], ...]).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter

PRE_S = 3.0
POST_S = 4.0
DEADLINE_S = 0.150


def bucket(delay_s: float) -> int:
    ms = int(delay_s * 1000)
    return ms if ms < 1000 else ms // 100 * 100


def _empty() -> dict:
    return {"sent": 0, "lost": 0, "late": 0, "delay_ms": Counter()}


def _add(cls: dict, delay: float | None, deadline: float) -> None:
    cls["sent"] += 1
    if delay is None:
        cls["lost"] += 1
        return
    cls["late"] += int(delay > deadline)
    cls["delay_ms"][bucket(max(delay, 0.0))] += 1


def report(
    trace: list[tuple[float, float | None]],
    outages: list[tuple[float, float]],
    deadline: float = DEADLINE_S,
) -> dict:
    """The handoff report of (send time s, delay s or None) per packet against outages."""
    windows = [(down - PRE_S, up + POST_S) for down, up in outages]
    win, steady = _empty(), _empty()
    per = [[0, 0, 0] for _ in windows]
    for sent, delay in trace:
        w = next((i for i, (lo, hi) in enumerate(windows) if lo <= sent < hi), None)
        if w is None:
            _add(steady, delay, deadline)
            continue
        _add(win, delay, deadline)
        per[w][0] += 1
        per[w][1] += int(delay is None)
        per[w][2] += int(delay is not None and delay > deadline)
    out = {"handoffs": 0, "outage_s": [], "lost_each": [], "late_each": []}
    for (down, up), (sent, lost, late) in zip(outages, per, strict=True):
        if sent:
            out["handoffs"] += 1
            out["outage_s"].append(up - down)
            out["lost_each"].append(lost)
            out["late_each"].append(late)
    for name, cls in (("window", win), ("steady", steady)):
        cls["delay_ms"] = sorted(cls["delay_ms"].items())
        out[name] = cls
    return out


def pool(reports: list[dict]) -> dict:
    """Many runs' reports as one (lists concatenated, counts and histograms summed)."""
    out = {"handoffs": 0, "outage_s": [], "lost_each": [], "late_each": [], "runs": 0}
    for name in ("window", "steady"):
        out[name] = _empty()
    for r in reports:
        out["runs"] += 1
        out["handoffs"] += r["handoffs"]
        for k in ("outage_s", "lost_each", "late_each"):
            out[k] += r[k]
        for name in ("window", "steady"):
            for k in ("sent", "lost", "late"):
                out[name][k] += r[name][k]
            for ms, n in r[name]["delay_ms"]:
                out[name]["delay_ms"][int(ms)] += n
    for name in ("window", "steady"):
        out[name]["delay_ms"] = sorted(out[name]["delay_ms"].items())
    return out


def quantile_ms(hist: list[tuple[int, int]], q: float) -> float | None:
    """Upper edge (ms) of the bucket holding quantile ``q`` of the received packets."""
    total = sum(n for _, n in hist)
    if not total:
        return None
    target, acc = max(1, math.ceil(total * q)), 0
    for ms, n in hist:
        acc += n
        if acc >= target:
            return ms + (1 if ms < 1000 else 100)
    return None


def cdf(cls: dict) -> tuple[list[float], list[float]]:
    """Delay CDF over every packet sent (lost ones never arrive: the curve stays below
    1 by the loss rate): x = bucket upper edge (ms), y = share delivered by then."""
    xs, ys, acc = [], [], 0
    for ms, n in cls["delay_ms"]:
        acc += n
        xs.append(ms + (1 if ms < 1000 else 100))
        ys.append(acc / max(cls["sent"], 1))
    return xs, ys


def figures(p: dict) -> dict:
    """The headline figures of a pooled report."""
    lost = p["lost_each"]
    w, s = p["window"], p["steady"]
    return {
        "runs": p.get("runs"),
        "handoffs": p["handoffs"],
        "outage_s_median": statistics.median(p["outage_s"]) if p["outage_s"] else None,
        "lost_per_handoff_mean": statistics.mean(lost) if lost else None,
        "lost_per_handoff_median": statistics.median(lost) if lost else None,
        "lost_per_handoff_p95": sorted(lost)[max(0, math.ceil(0.95 * len(lost)) - 1)]
        if lost
        else None,
        "handoffs_without_loss": sum(1 for x in lost if x == 0) / len(lost) if lost else None,
        "late_per_handoff_mean": statistics.mean(p["late_each"]) if p["late_each"] else None,
        "window_sent": w["sent"],
        "window_loss": w["lost"] / w["sent"] if w["sent"] else None,
        "window_late": w["late"] / w["sent"] if w["sent"] else None,
        "window_delay_p50_ms": quantile_ms(w["delay_ms"], 0.5),
        "window_delay_p95_ms": quantile_ms(w["delay_ms"], 0.95),
        "window_delay_p99_ms": quantile_ms(w["delay_ms"], 0.99),
        "steady_loss": s["lost"] / s["sent"] if s["sent"] else None,
        "steady_delay_p50_ms": quantile_ms(s["delay_ms"], 0.5),
    }
