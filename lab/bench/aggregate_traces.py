"""Traces for the ``aggregate`` suite: synthetic Wi-Fi + LTE pairs and the mptraces pairs.

Role: produce the two Mahimahi traces of a trace pair in a run's temporary folder, either with
the project's own generator (``linkem trace-gen``) or by converting a real Wi-Fi/cellular pair
of MP-Traces (aydini/MP-Traces, ``Traces/<path>_<trial>_{wifi,cellular}.csv``, read in place
from ``$MPTRACES_DIR``, else ``$MULTIHOME_DATA/mptraces``, else ``shared/data/mptraces`` beside
the repository, i.e. ``../shared/data/mptraces`` from its root), and compute the capacity they
offer.

MP-Traces format: CRLF lines ``second,bytes`` (second 1, 2, ...; throughput in bytes per
second, as the repository's ``Scripts/tputVary.sh`` reads it: ``tput/1000*8`` kbit/s). Second
``s`` covers [s-1, s) s; its bytes are spread evenly over its 1000 milliseconds and integrated
into 1500-byte delivery opportunities exactly as linkem's generator does (half an opportunity
of initial credit, leftover carried across), so the converted trace's mean rate is the CSV's
mean to within one opportunity. A second missing from the CSV counts as zero throughput.

Invariants: nothing from outside the repository is copied into it (converted traces live in
the lab's temporary folder and vanish with it); an absent mptraces folder or pair raises
:class:`TracesUnavailable`, which the suite reports as skipped, not failed.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from pathlib import Path

from lab.linkem import trace_gen
from lab.netns import LabError

OPPORTUNITY_BYTES = 1500
# Data sets live outside the repository: $MULTIHOME_DATA, else shared/data/ beside the repository.
DATA_DIR = Path(
    os.environ.get("MULTIHOME_DATA")
    or Path(__file__).resolve().parent.parent.parent.parent / "shared" / "data"
)
MPTRACES_DIR = Path(os.environ.get("MPTRACES_DIR") or DATA_DIR / "mptraces")


class TracesUnavailable(LabError):
    """The real traces a trace pair names are not on this machine."""


def read_mptraces_csv(path: Path) -> list[float]:
    """Bytes per second for seconds 1..N of one MP-Traces CSV (missing seconds are 0)."""
    rows: dict[int, float] = {}
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        try:
            sec, val = line.split(",")
            rows[int(sec)] = float(val)
        except ValueError as exc:
            raise LabError(f"{path}:{n}: not 'second,bytes': {line!r}") from exc
    if not rows or min(rows) < 1:
        raise LabError(f"{path}: no rows, or a second before 1")
    return [rows.get(s, 0.0) for s in range(1, max(rows) + 1)]


def to_mahimahi(bytes_per_s: list[float]) -> list[int]:
    """Millisecond opportunity timestamps for a per-second byte series (period = its length)."""
    total_ms = len(bytes_per_s) * 1000
    ms: list[int] = []
    credit = OPPORTUNITY_BYTES / 2
    for s, b in enumerate(bytes_per_s):
        per_ms = b / 1000
        for k in range(1000):
            credit += per_ms
            while credit >= OPPORTUNITY_BYTES:
                ms.append(s * 1000 + k + 1)
                credit -= OPPORTUNITY_BYTES
    if not ms or ms[-1] != total_ms:
        # The trace loops on its last timestamp: pin the period to the series' length (one
        # extra opportunity at most, when the series ends in silence).
        ms.append(total_ms)
    return ms


def mean_mbit(ms: list[int], start_s: float = 0.0, end_s: float | None = None) -> float:
    """Mean rate (Mbit/s) a trace offers between ``start_s`` and ``end_s`` (default: a period).

    Times beyond the period wrap around, as linkem loops the trace.
    """
    period = ms[-1]
    end_ms = period if end_s is None else end_s * 1000
    start_ms = start_s * 1000
    if end_ms <= start_ms:
        return 0.0
    laps, rem = divmod(end_ms, period)
    laps0, rem0 = divmod(start_ms, period)
    count = (laps - laps0) * len(ms) + bisect_right(ms, rem) - bisect_right(ms, rem0)
    return count * OPPORTUNITY_BYTES * 8 / ((end_ms - start_ms) / 1000) / 1e6


def read_trace(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()]


def pair_traces(pair: dict, out_dir: Path) -> list[dict]:
    """Write the traces of one ``[[bench.trace_pair]]`` into ``out_dir``; describe each link.

    Returns one dict per link: ``name``, ``path``, ``source``, ``delay_ms``, ``mean_mbit``.
    """
    links = []
    if "mptraces" in pair:
        base = pair["mptraces"]
        for link in pair["link"]:
            src = MPTRACES_DIR / f"{base}_{link['network']}.csv"
            if not src.is_file():
                raise TracesUnavailable(f"{src} is absent (mptraces not on this machine)")
            ms = to_mahimahi(read_mptraces_csv(src))
            path = out_dir / f"{base}_{link['network']}.trace"
            path.write_text("".join(f"{m}\n" for m in ms))
            links.append({"source": str(src), "path": path, "ms": ms, **link})
    else:
        for link in pair["link"]:
            path = trace_gen(
                out_dir / f"{pair['name']}-{link['name']}.trace",
                link["kind"],
                link["mean_mbit"],
                link.get("seconds", 60),
                link.get("seed", 1),
            )
            src = f"linkem trace-gen --kind {link['kind']} --mean-mbit {link['mean_mbit']}"
            links.append({"source": src, "path": path, "ms": read_trace(path), **link})
    for link in links:
        link["trace_mean_mbit"] = mean_mbit(link["ms"])
        link["period_s"] = link["ms"][-1] / 1000
    return links
