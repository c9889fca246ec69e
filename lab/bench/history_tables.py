"""Markdown tables of benchmark results for docs/EXPERIMENTS.md: one renderer per suite
(``TABLES``), and a generic one over the columns a suite names (``COLUMNS``).

Role: turn the history log's records of one suite's latest run (``lab.bench.history``) into
table rows; nothing here reads or writes files. Invariant: a missing figure renders as "-",
never as an error, so an old result with fewer fields still renders.
"""

from __future__ import annotations

from lab.bench.detours_run import MECHANISMS


def _fmt(v: object, unit: str = "") -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return (f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}") + unit
    return f"{v}{unit}"


def _pass(f: dict, system: str) -> str:
    if f"{system}.passed" not in f:
        return "—"
    med = f.get(f"{system}.median_s")
    return f"{f[f'{system}.passed']}/{f[f'{system}.runs']}, " + (_fmt(med, " s") if med else "—")


def _table_simult_flows(rs: list[dict]) -> list[str]:
    """Packet mode (``multihome``), kernel MPTCP and, where measured, stream mode; a last row
    with the passes summed over the cases (the issue's bar compares those)."""
    systems = ["multihome", "mptcp"]
    if any("stream.passed" in r["figures"] for r in rs):
        systems.append("stream")
    head = {
        "multihome": "multihome (packet mode)",
        "mptcp": "kernel MPTCP",
        "stream": "multihome stream mode",
    }
    rows = [
        "| case (rates, one-way delays) | limit | "
        + " | ".join(f"{head[s]} passed, median" for s in systems)
        + " | best path alone |",
        "|---|---|" + "---|" * len(systems) + "---|",
    ]
    for r in rs:
        f = r["figures"]
        rows.append(
            f"| {r['case']} | {_fmt(f.get('limit_s'), ' s')} | "
            + " | ".join(_pass(f, s) for s in systems)
            + f" | {_fmt(f.get('best_alone_s'), ' s')} |"
        )
    total = {
        s: (
            sum(r["figures"].get(f"{s}.passed", 0) for r in rs),
            sum(r["figures"].get(f"{s}.runs", 0) for r in rs),
        )
        for s in systems
    }
    rows.append(
        "| **all cases** | | " + " | ".join(f"**{p}/{n}**" for p, n in total.values()) + " | |"
    )
    return rows


def _table_quic(rs: list[dict]) -> list[str]:
    rows = [
        "| case | QUIC via aggregate Mbit/s | QUIC best link alone | / best link | "
        "TCP via aggregate Mbit/s | TCP best link alone | / best link | QUIC / TCP |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rs:
        f = r["figures"]
        if "error" in f:
            rows.append(f"| {r['case']} | failed | | | | | | |")
            continue
        keys = ("quic_goodput_mbps", "quic_best_single_mbps", "quic_ratio_best_single",
                "tcp_goodput_mbps", "tcp_best_single_mbps", "tcp_ratio_best_single",
                "quic_ratio_to_tcp_aggregate")  # fmt: skip
        rows.append(f"| {r['case']} | " + " | ".join(_fmt(f.get(k)) for k in keys) + " |")
    return rows


def _table_aggregate(rs: list[dict]) -> list[str]:
    # Stream mode's columns only where a run measured it (older results have none).
    stream = any("stream.goodput_mbps" in r["figures"] for r in rs)
    extra = " stream mode Mbit/s | / ceiling |" if stream else ""
    rows = [
        "| case | sum of rates | multihome Mbit/s | / header ceiling |" + extra + " kernel MPTCP "
        "Mbit/s | / ceiling | best single TCP | multihome added RTT |",
        "|---|---|---|---|---|---|---|---|" + ("---|---|" if stream else ""),
    ]
    eff = None
    for r in rs:
        f = r["figures"]
        if r["case"] == "header ceiling":
            eff = f
            continue
        if "error" in f:
            rows.append(f"| {r['case']} | failed | | | | | | |" + (" | |" if stream else ""))
            continue
        mh = "multihome-earliest"
        singles = [f.get(f"tcp:{i}.goodput_mbps") for i in range(3)]
        best = max((s for s in singles if s is not None), default=None)
        cols = (
            f" {_fmt(f.get('stream.goodput_mbps'))} | {_fmt(f.get('stream.ratio_to_ceiling'))} |"
            if stream
            else ""
        )
        rows.append(
            f"| {r['case']} | {_fmt(f.get('sum_mbit'), ' Mbit/s')} | "
            f"{_fmt(f.get(f'{mh}.goodput_mbps'))} | {_fmt(f.get(f'{mh}.ratio_to_ceiling'))} |"
            f"{cols} {_fmt(f.get('mptcp.goodput_mbps'))} | "
            f"{_fmt(f.get('mptcp.ratio_to_ceiling'))} | "
            f"{_fmt(best)} | {_fmt(f.get(f'{mh}.rtt_added_ms'), ' ms')} |"
        )
    if eff:
        rows.append("")
        also = f", stream mode {eff['stream']:.1%}" if "stream" in eff else ""
        rows.append(
            f"Header ceiling (goodput over wire rate at MTU 1500): multihome "
            f"{eff.get('multihome', 0):.1%}, plain TCP {eff.get('plain', 0):.1%}{also}."
        )
    return rows


def _table_failover(rs: list[dict]) -> list[str]:
    rows = [
        "| system | survived | longest gap, median | longest gap, max | before cut | after cut |",
        "|---|---|---|---|---|---|",
    ]
    for r in rs:
        f = r["figures"]
        rows.append(
            f"| {r['case']} | {f.get('survived')}/{f.get('runs')} | "
            f"{_fmt(f.get('median_gap_s'), ' s')} | {_fmt(f.get('max_gap_s'), ' s')} | "
            f"{_fmt(f.get('median_before_mbps'), ' Mbit/s')} | "
            f"{_fmt(f.get('median_after_mbps'), ' Mbit/s')} |"
        )
    return rows


def _table_cellular_drive(rs: list[dict]) -> list[str]:
    """Pairs in run order, policies in POLICIES order, kernel MPTCP last (goodput only)."""
    order = {"best": 0, "aggregate": 1, "redundant": 2, "stream": 3, "mptcp": 4}
    rows = [
        "| trace pair | system | Mbit/s | / offered | longest stall while a link delivers (raw) "
        "| Down transitions / real outages | voice lost / late |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rs, key=lambda r: (r["case"].split()[0], order.get(r["case"].split()[-1], 9))):
        f = r["figures"]
        pair, system = r["case"].rsplit(" ", 1)
        if system == "mptcp":
            rows.append(f"| {pair} | kernel MPTCP | {_fmt(f.get('goodput_mbps'))} | | | | |")
            continue
        rows.append(
            f"| {pair} | {system} | {_fmt(f.get('goodput_mbps'))} | "
            f"{_fmt(f.get('goodput_over_offered'))} | "
            f"{_fmt(f.get('longest_stall_any_link_s'), ' s')} "
            f"({_fmt(f.get('longest_stall_raw_s'), ' s')}) | "
            f"{f.get('downs')} / {f.get('real_outages')} | "
            f"{f.get('voice_lost')} / {f.get('voice_late')} |"
        )
    return rows


def _table_overhead(rs: list[dict]) -> list[str]:
    rows = [
        "| path | 1 TCP stream (CUBIC) | vs direct | 4 streams | vs direct | median idle RTT "
        "| added RTT | tunnel CPU per Gbit/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rs:
        f = r["figures"]
        if "tcp_mbps" not in f:
            rows.append(
                f"| {r['case']} | | {_fmt(f.get('throughput_ratio'))} | | "
                f"{_fmt(f.get('throughput_ratio_4'))} | | | |"
            )
            continue
        rows.append(
            f"| {r['case']} | {_fmt(f['tcp_mbps'], ' Mbit/s')} | "
            f"{_fmt(f.get('throughput_ratio', 1.0))} | {_fmt(f.get('tcp4_mbps'), ' Mbit/s')} | "
            f"{_fmt(f.get('throughput_ratio_4', 1.0 if 'tcp4_mbps' in f else None))} | "
            f"{_fmt(f.get('rtt_median_ms'), ' ms')} | {_fmt(f.get('added_rtt_ms', 0.0), ' ms')} | "
            f"{_fmt(f.get('tunnel_cpu_pct_per_gbps'), ' % of a core')} |"
        )
    return rows


RT_POLICIES = ("realtime+fec", "realtime-nofec", "redundant", "aggregate", "best")


def _pct(v: object) -> str:
    return f"{100 * v:.2f} %" if isinstance(v, float | int) and not isinstance(v, bool) else "—"


def _table_realtime_media(rs: list[dict]) -> list[str]:
    rows = [
        "| case | policy | frames on time | packets not on time | packets after deadline | "
        "bytes sent / delivered | extra bytes over best |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rs:
        f = r["figures"]
        if "error" in f:
            rows.append(f"| {r['case']} | failed or skipped | | | | | |")
            continue
        for p in RT_POLICIES:
            if f"{p}.frames_on_time" not in f:
                continue
            rows.append(
                f"| {r['case']} | {p} | {_pct(f[f'{p}.frames_on_time'])} | "
                f"{_pct(f.get(f'{p}.packets_not_on_time'))} | {_fmt(f.get(f'{p}.late_packets'))} "
                f"| {_fmt(f.get(f'{p}.bytes_per_delivered'))} | {_pct(f.get(f'{p}.extra_bytes'))} |"
            )
    return rows


def _table_detours(rs: list[dict]) -> list[str]:
    """Goodput (Mbit/s) per mechanism, multihome's ratio to TCP, and the issue's checks."""
    head = ["MPTCP 1 subflow", "MPTCP + NAT", "multihome + NAT", "multihome + tunnel"]
    head += ["TCP", "TCP (NAT)", "multihome, no detour", "multihome+NAT / TCP"]
    head.append("issue 15 checks")
    rows = ["| case | cc | " + " | ".join(head) + " |", "|---" * (len(head) + 2) + "|"]
    bars = {"aggregates": 1.8, "vs-mptcp-detour": 1.0, "no-loss-when-no-gain": 0.95}
    for r in rs:
        f = r["figures"]
        case, _, cc = r["case"].rpartition(" ")
        cells = [_fmt(f.get(f"{m}.goodput_mbps")) for m in MECHANISMS]
        mh, tcp = f.get("multihome+nat.goodput_mbps"), f.get("tcp.goodput_mbps")
        cells.append(_fmt(mh / tcp) if mh and tcp else "—")
        checks = []
        for k, v in f.items():
            if k.startswith("pass."):
                bar = bars.get(k[5:], 1.0)
                checks.append(f"{k[5:]} {v:.3f} {'≥' if v >= bar else '<'} {bar}")
        cells.append("; ".join(checks) or "—")
        rows.append(f"| {case} | {cc} | " + " | ".join(cells) + " |")
    return rows


# Columns of the suites without a table of their own (default: the first eight figures).
COLUMNS = {
    "race-eval": ["mean_s", "p50_s", "p95_s", "p99_s", "avail_2s", "fetched"],
    "race-bench": [
        "added_setup_median_ms",
        "added_setup_p90_ms",
        "throughput_direct_mbps",
        "throughput_race_mbps",
        "throughput_ratio",
        "daemon_cpu_s_per_gbit",
    ],
    "crosscheck": [
        "lab_goodput_mbps",
        "sim_goodput_mbps",
        "ratio_sim_to_lab",
        "within_tolerance",
        "lab_retransmissions",
        "sim_retransmissions",
    ],
    "reorder": [
        "goodput_mbps",
        "ratio_to_no_reorder",
        "resent",
        "lost",
        "resent_over_lost",
        "spurious_lost",
        "retransmissions",
    ],
    "cellular-drive": [
        "goodput_mbps",
        "goodput_over_offered",
        "longest_stall_any_link_s",
        "longest_stall_raw_s",
        "downs",
        "real_outages",
        "voice_lost",
        "voice_late",
    ],
    "quic": [
        "quic_goodput_mbps",
        "quic_best_single_mbps",
        "quic_ratio_best_single",
        "tcp_goodput_mbps",
        "tcp_best_single_mbps",
        "tcp_ratio_best_single",
        "quic_ratio_to_tcp_aggregate",
    ],
    "sim-bench": [
        "realtime_factor",
        "realtime_factor_idle",
        "datagrams_per_s",
        "mean_session_goodput_mbit",
        "wall_s",
        "build_profile",
    ],
}


def _table_generic(rs: list[dict], keys: list[str] | None = None) -> list[str]:
    keys = keys or list(dict.fromkeys(k for r in rs for k in r["figures"]))[:8]
    rows = ["| case | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for r in rs:
        f = r["figures"]
        rows.append(f"| {r['case']} | " + " | ".join(_fmt(f.get(k)) for k in keys) + " |")
    return rows


TABLES = {
    "simult-flows": _table_simult_flows,
    "aggregate": _table_aggregate,
    "quic": _table_quic,
    "failover": _table_failover,
    "overhead": _table_overhead,
    "realtime-media": _table_realtime_media,
    "detours": _table_detours,
    "cellular-drive": _table_cellular_drive,
}
