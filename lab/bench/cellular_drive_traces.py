"""Pure arithmetic of the ``cellular-drive`` suite: trace outages, stalls, link state changes.

Role: everything the suite computes from data rather than from the lab, so that it can be
tested without namespaces (lab/tests/test_cellular_drive.py):

* :func:`rotate` — a Mahimahi trace started ``offset`` ms into itself (same period), so a run
  can begin at any point of a drive and the second link of a pair can be shifted against the
  first;
* :func:`out_intervals` — when a (looping) trace offers no delivery opportunity for more than
  a threshold, i.e. when the link is *out*; :func:`count_outages` counts the gaps of at least
  the daemon's detect interval, the outages a link-state detector should see, merging the two
  directions of a link (either one silences the feedback);
* :func:`stalls` / :func:`longest_stall` — runs of 10-ms bins in which the bulk receiver got
  nothing, and the longest of them once the time when *every* link was out is taken away
  ("a slow link is not a dead link": while any link delivers, the transfer should not stop);
* :func:`path_events` / :func:`state_changes` — the client daemon's ``PathState`` events from
  its log (``session event event=PathState(PathId(i), Down)``, one per change, with the wall
  clock time tracing prints), counted per link inside the run.

Invariants: times are milliseconds since the traces were (re)installed, which is the bulk
receiver's time zero to within the measured lag; intervals are half-open ``(start, end)``
pairs, sorted and disjoint after :func:`merge`; a trace loops on its last timestamp exactly as
linkem (and Mahimahi's ``mm-link``) loops it, and time before its installation has no
opportunity.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from datetime import datetime

Interval = tuple[float, float]

# A gap looked for beyond the edges of a window: longer than any threshold used here, so a gap
# that reaches it is out on every count (it is clipped to the window anyway).
LOOKAROUND_MS = 10_000


def rotate(ms: list[int], offset_ms: int) -> list[int]:
    """The trace as seen from ``offset_ms`` into it: opportunities in (offset, offset + P],
    shifted back by offset; the period P is kept by pinning an opportunity at P if none is
    there (one opportunity per period at most, as aggregate_traces.to_mahimahi does)."""
    period = ms[-1]
    off = offset_ms % period
    if off == 0:
        return list(ms)
    tail = [m - off for m in ms if m > off]
    head = [m + period - off for m in ms if m <= off]
    out = tail + head
    if out[-1] != period:
        out.append(period)
    return out


def opportunities(ms: list[int], t0: float, t1: float) -> list[int]:
    """Opportunity times in [t0, t1] of the trace looping from time 0 (none before 0)."""
    period = ms[-1]
    out: list[int] = []
    for lap in range(max(0, int(t0 // period)), int(t1 // period) + 1):
        base = lap * period
        lo, hi = bisect_left(ms, t0 - base), bisect_right(ms, t1 - base)
        out.extend(base + m for m in ms[lo:hi])
    return out


def out_intervals(ms: list[int], t0: float, t1: float, min_gap_ms: float) -> list[Interval]:
    """Gaps between consecutive opportunities longer than ``min_gap_ms``, clipped to [t0, t1].

    Before the trace's time zero there is nothing, so a window starting at 0 starts out if
    the first opportunity comes later than the threshold."""
    times = opportunities(ms, max(0.0, t0 - LOOKAROUND_MS), t1 + LOOKAROUND_MS)
    times = [max(0.0, t0 - LOOKAROUND_MS), *times, t1 + LOOKAROUND_MS]
    out = []
    for a, b in zip(times, times[1:], strict=False):
        if b - a > min_gap_ms:
            lo, hi = max(a, t0), min(b, t1)
            if hi > lo:
                out.append((float(lo), float(hi)))
    return out


def merge(intervals: list[Interval]) -> list[Interval]:
    """Sorted, disjoint union (touching intervals join)."""
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def intersect(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """Times inside both lists (each sorted and disjoint)."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def all_out(per_link: list[list[Interval]]) -> list[Interval]:
    """When every link is out at once."""
    if not per_link:
        return []
    acc = merge(per_link[0])
    for ivs in per_link[1:]:
        acc = intersect(acc, merge(ivs))
    return acc


def overlap(iv: Interval, ivs: list[Interval]) -> float:
    """How much of ``iv`` lies inside ``ivs`` (sorted, disjoint)."""
    return sum(max(0.0, min(iv[1], b) - max(iv[0], a)) for a, b in ivs)


def count_outages(directions: list[list[int]], t0: float, t1: float, detect_ms: float) -> int:
    """Outages of one link in [t0, t1]: gaps of at least ``detect_ms`` in any of its
    directions' traces, overlapping ones counted once."""
    gaps = [iv for ms in directions for iv in out_intervals(ms, t0, t1, detect_ms - 1e-9)]
    return len(merge(gaps))


def stalls(timeline: list[int], bin_ms: float) -> list[Interval]:
    """Runs of bins without new bytes after the first byte, as (start, end) ms.

    ``timeline[i]`` is the cumulative count at the end of bin i; a run of bins j..k with
    nothing new is the interval [j, k + 1) x bin (a lower bound on the true gap: the last
    byte before it arrived in bin j - 1 and the next one in bin k + 1)."""
    out: list[Interval] = []
    start = None
    prev = None
    for i, v in enumerate(timeline):
        if prev is None or prev == 0:
            prev = v
            continue
        if v == prev:
            if start is None:
                start = i
        elif start is not None:
            out.append((start * bin_ms, i * bin_ms))
            start = None
        prev = v
    return out


def longest_stall(timeline: list[int], bin_ms: float, dead: list[Interval]) -> dict:
    """The longest stall and the longest once the time in ``dead`` (every link out) is taken
    away: ``{"raw_ms", "raw_at_ms", "any_link_ms", "any_link_at_ms"}``."""
    best_raw: tuple[float, float] = (0.0, -1.0)
    best_any: tuple[float, float] = (0.0, -1.0)
    for iv in stalls(timeline, bin_ms):
        raw = iv[1] - iv[0]
        live = raw - overlap(iv, dead)
        best_raw = max(best_raw, (raw, iv[0]))
        best_any = max(best_any, (live, iv[0]))
    return {
        "raw_ms": best_raw[0],
        "raw_at_ms": best_raw[1] if best_raw[1] >= 0 else None,
        "any_link_ms": best_any[0],
        "any_link_at_ms": best_any[1] if best_any[1] >= 0 else None,
    }


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_EVENT = re.compile(
    r"^(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z).*?"
    r"PathState\(PathId\((?P<path>\d+)\), (?P<state>\w+)\)"
)


def path_events(log: str) -> list[tuple[float, int, str]]:
    """``(unix seconds, path id, state)`` of every PathState event in a daemon's log."""
    out = []
    for line in _ANSI.sub("", log).splitlines():
        m = _EVENT.search(line)
        if m:
            ts = datetime.fromisoformat(m["ts"].replace("Z", "+00:00")).timestamp()
            out.append((ts, int(m["path"]), m["state"].lower()))
    return out


def state_changes(
    events: list[tuple[float, int, str]], t0: float, t1: float, n_links: int
) -> list[dict]:
    """Per link: ``downs`` (into Down), ``ups`` (out of Down), ``suspects`` (into Suspect)
    between unix times t0 and t1, and the event times (s since t0)."""
    out = [{"downs": 0, "ups": 0, "suspects": 0, "events": []} for _ in range(n_links)]
    state = ["up"] * n_links
    for ts, path, st in sorted(events):
        if path >= n_links:
            continue
        before, state[path] = state[path], st
        if not t0 <= ts <= t1 or st == before:
            continue
        rec = out[path]
        rec["events"].append([round(ts - t0, 3), st])
        if st == "down":
            rec["downs"] += 1
        elif before == "down":
            rec["ups"] += 1
        if st == "suspect":
            rec["suspects"] += 1
    for rec in out:
        rec["changes"] = rec["downs"] + rec["ups"]
    return out
