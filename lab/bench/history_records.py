"""Result files read into history records: git revisions and dates, and each suite's key
figures (one record per case and run), for ``lab.bench.history``.

Role: knows every suite's JSON layout (the extractors in ``EXTRACT``) and the file names
results were written under; nothing here writes. Invariant: a record always has ``suite``,
``case``, ``revision``, ``dirty``, ``date``, ``source`` and ``figures``.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
from collections import defaultdict
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from statistics import mean

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
SIM_RESULTS = REPO_ROOT / "sim" / "results"
SIM_BENCH = SIM_RESULTS / "bench"
REV_RE = re.compile(r"[0-9a-f]{7,40}")

# --- revisions and dates -----------------------------------------------------------------


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    return out.stdout.strip() if out.returncode == 0 else ""


@cache
def _commit_order() -> dict[str, int]:
    """Full hash -> position, oldest first, in ``git log --topo-order``."""
    hashes = _git("log", "--topo-order", "--format=%H").split()
    return {h: i for i, h in enumerate(reversed(hashes))}


@cache
def commit_index(rev: str) -> int:
    """Position of a (short) revision in commit order; -1 if it is not in this history."""
    if not rev or not REV_RE.fullmatch(rev):
        return -1
    order = _commit_order()
    full = _git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    return order.get(full, -1)


@cache
def commit_date(rev: str) -> str | None:
    return _git("log", "-1", "--format=%cI", rev) or None if REV_RE.fullmatch(rev) else None


def _date(ts: float | None, rev: str) -> str | None:
    if ts:
        return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")
    return commit_date(rev)


def _split_rev(raw: str) -> tuple[str, bool]:
    """``"916159c+dirty"`` -> ``("916159c", True)``; short hashes are cut to 7 characters."""
    m = re.match(r"([0-9a-f]{7,40})([+-]dirty)?$", raw or "")
    if not m:
        return raw or "norev", False
    return m.group(1)[:7], bool(m.group(2))


def sort_key(rec: dict) -> tuple:
    return (commit_index(rec["revision"]), rec.get("date") or "")


# --- figures per suite --------------------------------------------------------------------


def _r(x: object) -> object:
    """Round floats to 4 significant digits (the log keeps figures, not noise)."""
    if isinstance(x, float):
        return float(f"{x:.4g}")
    return x


def _figs(d: dict, keys: tuple[str, ...], prefix: str = "") -> dict:
    return {prefix + k: _r(d[k]) for k in keys if k in d and not isinstance(d[k], dict | list)}


AGG_KEYS = (
    "goodput_mbps",
    "goodput_after_2s_mbps",
    "ratio_to_ceiling",
    "goodput_ratio",
    "ratio_best_single",
    "ratio_single_sum",
    "rtt_added_ms",
    "rtt_during_median_ms",
    "retransmissions",
)


def _simult_flows(d: dict) -> list[tuple[str, dict]]:
    out = []
    for c in d["cases"]:
        f: dict = {"limit_s": _r(c.get("limit_s")), "ideal_s": _r(c.get("ideal_s"))}
        for system, s in c.get("summary", {}).items():
            f |= _figs(s, ("passed", "runs", "median_s", "median_goodput_mbps"), f"{system}.")
        alone = [a["seconds"] for a in c.get("alone", {}).values() if a.get("seconds")]
        if alone:
            f["best_alone_s"] = _r(min(alone))
        out.append((c["name"], f))
    return out


def _aggregate(d: dict) -> list[tuple[str, dict]]:
    out = []
    for c in [*d.get("cases", []), *d.get("traces", [])]:
        if "error" in c:
            out.append((c["name"], {"error": c["error"][-200:]}))
            continue
        f: dict = {}
        if "sum_mbit" in c:
            f["sum_mbit"] = c["sum_mbit"]
        if "trace_mean_sum_mbit" in c:
            f["sum_mbit"] = _r(c["trace_mean_sum_mbit"])
        for system, s in c.get("summary", {}).items():
            f |= _figs(s, AGG_KEYS, f"{system}.")
        out.append((c["name"], f))
    if "efficiency" in d:
        out.append(("header ceiling", {k: _r(v) for k, v in d["efficiency"].items()}))
    return out


def _failover(d: dict) -> list[tuple[str, dict]]:
    keys = ("survived", "runs", "median_gap_s", "max_gap_s")
    keys += ("median_before_mbps", "median_after_mbps")
    return [(label, _figs(s, keys)) for label, s in d["summary"].items()]


def _naming(d: dict) -> list[tuple[str, dict]]:
    out = []
    for r in d["latency"]:
        # Older results had no case names: the store, and whether the leader was killed.
        killed = " leader killed" if r.get("killed_leader") is not None else ""
        case = r.get("case") or r["store"] + killed
        f = {f"publish_{k}": _r(v) for k, v in r["publish"].items() if k.endswith("_ms")}
        f |= {f"lookup_{k}": _r(v) for k, v in r["lookup"].items() if k.endswith("_ms")}
        f["records_lost"] = r["verify"]["missing"] + r["verify"]["stale"]
        out.append((case, f))
    fo = d["failover"]
    if not fo:
        return out
    fs = fo["failover_s"]
    f = {"clients": fo["clients"], "moved": fo["moved"], "without_server": fo["without_server"]}
    if fs:
        f |= {"median_s": _r(fs[len(fs) // 2]), "max_s": _r(max(fs))}
    out.append(("failover", f))
    return out


def _overhead(d: dict) -> list[tuple[str, dict]]:
    out = []
    for name, b in d["best"].items():
        f = _figs(b, ("tcp_mbps", "tcp4_mbps", "rtt_median_ms", "tunnel_cpu_pct_per_gbps"))
        ratios = ("throughput_ratio", "throughput_ratio_4", "added_rtt_ms")
        f |= _figs(d["ratios"].get(name, {}), ratios)
        out.append((name, f))
    for name, r in d["ratios"].items():
        if name not in d["best"]:
            out.append((name, _figs(r, ("throughput_ratio", "throughput_ratio_4"))))
    return out


def _detour_relay(d: dict) -> list[tuple[str, dict]]:
    keys = ("received_mbps", "lost_percent", "relay_cpu_percent")
    return [(mode, _figs(d[mode], keys)) for mode in ("nat", "tunnel") if mode in d]


def _vehicular(d: dict) -> list[tuple[str, dict]]:
    out = []
    for name, s in d["summary"].items():
        figs = {f"median_s_{m}": v for m, v in s["median_s"].items()}
        figs.update(_figs(s, ("median_gain", "paired_gain_median", "trials")))
        out.append((name, figs))
    return out


def _outage(d: dict) -> list[tuple[str, dict]]:
    keys = ("first_bytes_after_return_s_median", "none_within_s", "runs")
    return [(case, _figs(s, keys)) for case, s in d["summary"].items()]


def _vehicular_lte(d: dict) -> list[tuple[str, dict]]:
    s = d["summary"]
    f = _figs(s, ("ratio_lab", "ratio_sim"))
    for src in ("lab", "sim"):
        f |= {f"{src}.{m}.seconds": _r(v["seconds"]) for m, v in s[src].items()}
    return [("fixed-400", f)]


def _reorder(d: dict) -> list[tuple[str, dict]]:
    """One record per (policy, loss, jitter) point of the summary."""
    keys = ("goodput_mbps", "ratio_to_no_reorder", "resent", "lost", "resent_over_lost",
            "spurious_lost", "retransmissions")  # fmt: skip
    return [
        (f"{s['policy']}-loss{s['loss']:g}-jitter{s['jitter_ms']}ms", _figs(s, keys))
        for s in d["summary"]
    ]


def _cellular_drive(d: dict) -> list[tuple[str, dict]]:
    """One record per (trace pair, policy) of the summary, kernel MPTCP's goodput included."""
    keys = ("goodput_mbps", "goodput_over_offered", "longest_stall_any_link_s",
            "longest_stall_raw_s", "downs", "real_outages", "voice_lost", "voice_late")  # fmt: skip
    return [
        (f"{p['name']} {pol}", _figs(s, keys))
        for p in d.get("pairs", [])
        for pol, s in p.get("summary", {}).items()
    ]


def _handoff_voice(d: dict) -> list[tuple[str, dict]]:
    """One record per simulator point (gap, mechanism) and per cross-check mechanism."""
    keys = ("handoffs", "lost_per_handoff_mean", "lost_per_handoff_p95", "window_loss")
    keys += ("window_late", "window_delay_p95_ms", "window_delay_p99_ms", "steady_loss")
    out = []
    for gap, by in d["summary"]["sim"].items():
        out += [(f"sim gap={gap} {m}", _figs(f, keys)) for m, f in by.items()]
    for m, c in d["summary"]["crosscheck"].items():
        f = {}
        for src in ("lab", "sim"):
            if c.get(src):
                f |= _figs(c[src], keys, f"{src}.")
        out.append((f"crosscheck {m}", f))
    return out


def _copies_cpu(d: dict) -> list[tuple[str, dict]]:
    summ = d["summary"]
    out = []
    for mode, cpu in summ.get("cpu_us_per_packet", {}).items():
        f = {f"cpu_us_per_packet_{pps}pps": us for pps, us in cpu.items()}
        f["loss_onset_pps"] = summ["loss_onset_pps"].get(mode)
        out.append((mode, f))
    ratios = {k: _r(v) for k, v in summ.items() if k.startswith("kernel_to_user") and "_m" in k}
    ratios["plain_loss_onset_pps"] = summ["loss_onset_pps"].get("plain")
    return [*out, ("ratios", ratios)]


def _detours(d: dict) -> list[tuple[str, dict]]:
    """One record per scenario and congestion control: goodput per mechanism, the pass
    ratios of issue 15 (``pass.<check>``)."""
    out = []
    for case, per_cc in d["table"].items():
        for cc, t in per_cc.items():
            f = {f"{m}.goodput_mbps": _r(v) for m, v in t["goodput_mbps"].items()}
            for p in d["pass"]:
                if p["case"] == case and p["cc"] == cc and p["ratio"] is not None:
                    f[f"pass.{p['check']}"] = _r(p["ratio"])
            out.append((f"{case} {cc}", f))
    return out


def _crosscheck(d: dict) -> list[tuple[str, dict]]:
    keys = ("lab_goodput_mbps", "sim_goodput_mbps", "ratio_sim_to_lab", "within_tolerance")
    keys += ("lab_retransmissions", "sim_retransmissions")
    return [(name, _figs(c, keys)) for name, c in d["comparison"].items()]


def _race_bench(d: dict) -> list[tuple[str, dict]]:
    direct = _r(d["throughput_direct_mbps"])
    if "modes" not in d:  # results from before NAT mode: the proxy alone
        f = {
            "direct_setup_median_ms": _r(d["setup_direct"]["median_ms"]),
            "race_setup_median_ms": _r(d["setup_race"]["median_ms"]),
            "added_setup_median_ms": _r(d["added_setup_ms"]["median"]),
            "added_setup_p90_ms": _r(d["added_setup_ms"]["p90"]),
            "throughput_direct_mbps": direct,
            "throughput_race_mbps": _r(d["throughput_race_mbps"]),
            "throughput_ratio": _r(d["throughput_ratio"]),
        }
        return [("race vs direct", f)]
    rows = []
    for mode, m in d["modes"].items():
        f = {
            "direct_setup_median_ms": _r(d["setup_direct"]["median_ms"]),
            "race_setup_median_ms": _r(m["setup"]["median_ms"]),
            "added_setup_median_ms": _r(m["added_setup_ms"]["median"]),
            "added_setup_p90_ms": _r(m["added_setup_ms"]["p90"]),
            "throughput_direct_mbps": direct,
            "throughput_race_mbps": _r(m["throughput_mbps"]),
            "throughput_ratio": _r(m["throughput_ratio"]),
            "daemon_cpu_s_per_gbit": _r(m["daemon_cpu_s_per_gbit"]),
        }
        rows.append((f"{mode} vs direct", f))
    return rows


def _race_eval(d: dict) -> list[tuple[str, dict]]:
    out = []
    for mode, runs in (("offline", d.get("offline") or {}), ("live", d.get("live") or {})):
        for name, s in runs.items():
            f = _figs(s, ("fetched", "objects", "mean_s", "p50_s", "p95_s", "p99_s"))
            f |= {f"avail_{k}": _r(v) for k, v in s.get("availability", {}).items()}
            out.append((f"{mode}: {name}", f))
    return out


def _sim_bench(d: dict) -> list[tuple[str, dict]]:
    keys = ("realtime_factor", "realtime_factor_idle", "datagrams_per_s", "datagrams_per_cpu_s")
    keys += ("mean_session_goodput_mbit", "wall_s", "threads", "build_profile")
    return [(_sim_bench_params(d), _figs(d, keys))]


def _sim_bench_params(d: dict) -> str:
    p = d["params"]
    return f"{p['sessions']}x{p['links']}x{p['seconds']}s_cps{p['clients_per_server']}"


def _realtime_media(d: dict) -> list[tuple[str, dict]]:
    out = []
    for c in d.get("cases", []):
        if "policies" not in c:
            out.append((c["name"], {"error": (c.get("error") or c.get("skipped") or "")[-200:]}))
            continue
        f: dict = {}
        for label, r in c["policies"].items():
            f |= _figs(r, ("frames_on_time", "packets_not_on_time", "extra_bytes"), f"{label}.")
            f |= _figs(r, ("late_packets", "bytes_per_delivered"), f"{label}.")
        out.append((c["name"], f))
    return out


def _quic(d: dict) -> list[tuple[str, dict]]:
    """One record per case: QUIC and TCP through ``aggregate`` against their best link."""
    out = []
    for c in d.get("cases", []):
        if "error" in c:
            out.append((c["name"], {"error": c["error"][-200:]}))
            continue
        s, f = c["summary"], {}
        for system, short in (("quic-aggregate", "quic"), ("tcp-aggregate", "tcp")):
            f |= {f"{short}_{k}": _r(s[system].get(k)) for k in QUIC_KEYS if k in s[system]}
        out.append((c["name"], f))
    return out


QUIC_KEYS = ("goodput_mbps", "best_single_mbps", "ratio_best_single", "ratio_to_tcp_aggregate")


def _scale(d: dict) -> list[tuple[str, dict]]:
    s = d["summary"]
    keys = tuple(k for k, v in s.items() if isinstance(v, int | float) and not isinstance(v, bool))
    threads = d.get("params", {}).get("server_threads")
    case = str(s["sessions"]) + (f", threads = {threads}" if threads else "")
    return [(case, _figs(s, keys))]


EXTRACT = {
    "simult-flows": _simult_flows,
    "aggregate": _aggregate,
    "failover": _failover,
    "naming": _naming,
    "overhead": _overhead,
    "crosscheck": _crosscheck,
    "race-bench": _race_bench,
    "race-eval": _race_eval,
    "detour-relay": _detour_relay,
    "copies-cpu": _copies_cpu,
    "realtime-media": _realtime_media,
    "detours": _detours,
    "vehicular": _vehicular,
    "outage": _outage,
    "handoff-voice": _handoff_voice,
    "vehicular-lte": _vehicular_lte,
    "reorder": _reorder,
    "cellular-drive": _cellular_drive,
    "scale": _scale,
    "quic": _quic,
}


def _base(suite: str) -> str:
    for base in sorted(EXTRACT, key=len, reverse=True):
        if suite.startswith(base):
            return base
    raise ValueError(f"unknown suite {suite!r}")


def _name_parts(path: Path) -> tuple[str, str | None]:
    """``(name, extra)`` of a result file: its stem without the revision, and any words after
    the revision (``aggregate-7_1-ab-22c1473-run1`` -> ``("aggregate-7_1-ab", "run1")``)."""
    stem = path.stem
    m = re.fullmatch(r"(.+?)-([0-9a-f]{7})(?:-(.+))?", stem)
    if not m:
        return stem, None
    return m.group(1), m.group(3)


def bench_records(path: Path) -> list[dict]:
    """Log lines of one ``bench/results/`` JSON (stable or per-revision name)."""
    d = json.loads(path.read_text())
    rev, dirty = _split_rev(d.get("revision", "norev"))
    dirty = dirty or bool(d.get("dirty"))
    name, extra = _name_parts(path)
    suite = d.get("suite") or name
    # A hand-named diagnostic run (an A/B, a partial re-run) is filed under its suite with the
    # name it was saved as, and is never the suite's latest result.
    label = path.stem if name != suite or extra else None
    common = {
        "suite": suite,
        "revision": rev,
        "dirty": dirty,
        "date": _date(d.get("timestamp"), rev),
        "source": path.relative_to(REPO_ROOT).as_posix(),
    }
    if label:
        common["label"] = label
    kernel = (d.get("machine") or {}).get("kernel")
    if kernel:
        common["kernel"] = kernel
    return [{**common, "case": case, "figures": figs} for case, figs in EXTRACT[_base(suite)](d)]


def sim_bench_records(path: Path) -> list[dict]:
    d = json.loads(path.read_text())
    rev, dirty = _split_rev(d.get("git_revision", "norev"))
    m = re.fullmatch(
        r"(?:[0-9a-f]{7,40}|session\d+)(?:[+-]dirty)?(?:-(.+))?_[^_]+_cps\d+", path.stem
    )
    rec = {
        "suite": "sim-bench",
        "revision": rev,
        "dirty": dirty,
        "date": commit_date(rev),
        "source": path.relative_to(REPO_ROOT).as_posix(),
    }
    if m and m.group(1):
        rec["label"] = m.group(1)
    return [{**rec, "case": case, "figures": figs} for case, figs in _sim_bench(d)]


def sim_scenario_records(folder: Path) -> list[dict]:
    """One line per sweep point of a simulator study: each metric's mean over the seeds."""
    meta = json.loads((folder / "meta.json").read_text())
    rev, dirty = _split_rev(meta.get("git_revision", "norev"))
    with (folder / "summary.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return []
    cols = list(rows[0])
    params = cols[: cols.index("seed")] if "seed" in cols else []
    metrics = [c for c in cols if c not in params and c != "seed"]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[tuple(r[p] for p in params)].append(r)
    out = []
    for key, rs in groups.items():
        figs: dict = {"seeds": len(rs)}
        for m in metrics:
            vals = [float(r[m]) for r in rs if r.get(m) not in ("", None)]
            if vals:
                figs[m] = _r(mean(vals))
        out.append(
            {
                "suite": f"sim:{folder.name}",
                "case": " ".join(f"{p}={v}" for p, v in zip(params, key, strict=True)) or "all",
                "revision": rev,
                "dirty": dirty,
                "date": commit_date(rev),
                "source": folder.relative_to(REPO_ROOT).as_posix() + "/summary.csv",
                "figures": figs,
            }
        )
    return out


def records_of(path: Path) -> list[dict]:
    """Log lines of any result: a bench JSON, a simulator bench JSON, a study folder."""
    path = path.resolve()
    if path.is_dir() or path.name in ("meta.json", "summary.csv"):
        return sim_scenario_records(path if path.is_dir() else path.parent)
    if path.parent == SIM_BENCH:
        return sim_bench_records(path)
    return bench_records(path)
