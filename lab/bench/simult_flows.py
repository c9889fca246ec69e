"""Suite ``simult-flows``: the kernel MPTCP selftest matrix, multihome next to kernel MPTCP.

Role: for each case of lab/scenarios/simult-flows.toml (two linkem paths, rates 10+10 and
15+5 Mbit/s, one-way delays 0/0, 1/25, 25/1 ms, 50-packet queues, per-packet frames) build a
fresh topology, start multihome (aggregate policy) and configure kernel MPTCP on the same
namespaces, then alternate runs of the two systems: one connection from ``cli`` to ``srv``
carrying 16 MiB each way at once, CUBIC.

Pass rule (tools/testing/selftests/net/mptcp/simult_flows.sh): a run passes when it completes
within ``size * 8 / (0.9 * (rate_a + rate_b)) + 0.4 s``, i.e. at 90 % of the summed rate (the
10 % stands for header overhead) plus 0.4 s for the MPTCP join handshakes. The selftest also
adds 50 ms of slack; we do not. The same rule for both systems, although multihome's own
headers cost more than 10 %: its goodput ceiling on a link of rate R is about 0.921 R
(1368 payload bytes per 1485-byte frame with header compression), so it must reach 92.7 % of
its ceiling to pass the 0/0 cases. ``ideal_s`` and ``ceiling_s`` are recorded beside the
limit for that reason.

A fresh topology per case keeps multihome's per-path estimators (min RTT) from carrying one
case's delays into the next.
"""

from __future__ import annotations

import statistics
import time

from lab import mptcp
from lab.bench.common import figure, progress, save
from lab.bench.transfer import SYSTEMS, run_transfer
from lab.netns import Lab
from lab.scenario import load
from lab.topology import TUN_MTU

MIB = 1 << 20
# TCP payload per Ethernet frame: plain (MSS 1448 per 1514 bytes) and through the tunnel (TUN
# MTU 1420 on the lab's IPv4 links: 1420 - 52 bytes of inner IPv4+TCP with timestamps, in a
# frame 29 bytes under 1514 because header compression carries 24 bytes of changing TCP/IP
# fields instead of 52 + the DATA frame's length; PROTOCOL.md §11).
PLAIN_EFF = 1448 / 1514
HEADER_COMPRESSION_SAVING = 29
TUNNEL_EFF = (TUN_MTU - 52) / (1514 - HEADER_COMPRESSION_SAVING)


def limit_s(size_bytes: int, rate_a: float, rate_b: float) -> float:
    return size_bytes * 8 / (0.9 * (rate_a + rate_b) * 1e6) + 0.4


def case_name(case: list[float]) -> str:
    ra, rb, da, db = case
    return f"{ra:g}+{rb:g} Mbit/s, {da:g}/{db:g} ms"


def run_case(
    case: list[float], size: int, runs: int, cc: str, scheduler: str | None = None
) -> dict:
    ra, rb, da, db = case
    sc = load("simult-flows")
    overrides = {
        "a": {"rate": f"{ra:g}mbit", "delay": f"{da:g}ms"},
        "b": {"rate": f"{rb:g}mbit", "delay": f"{db:g}ms"},
    }
    limit = limit_s(size, ra, rb)
    out: dict = {
        "case": case,
        "name": case_name(case),
        "limit_s": limit,
        "ideal_s": size * 8 / ((ra + rb) * 1e6),
        "ceiling_s": {
            "mptcp": size * 8 / ((ra + rb) * 1e6 * PLAIN_EFF),
            "multihome": size * 8 / ((ra + rb) * 1e6 * TUNNEL_EFF),
        },
        "runs": {s: [] for s in SYSTEMS},
    }
    with Lab() as lab:
        extra = {"aggregate_scheduler": scheduler} if scheduler else {}
        topo = sc.topology(
            lab, overrides=overrides, client={**sc.tunnel.get("client", {}), **extra}
        )
        # Stream mode on beside packet mode: TCP from the LAN host is carried over kernel
        # MPTCP on the links, the tunnel's own flows (cli -> srv) stay in packet mode.
        topo.set_stream(True, cc)
        topo.start()
        mptcp.enable(topo)
        # Single-path baselines, once per link: plain TCP over that link alone, no tunnel.
        for i, name in enumerate(("a", "b")):
            res = run_transfer(
                topo,
                f"tcp:{i}",
                cc=cc,
                client_send_bytes=size,
                server_send_bytes=size,
                timeout=size * 8 / (min(ra, rb) * 1e6) * 3 + 30,
                port=9150 + i,
            )
            cli = res.get("client", {})
            secs = cli.get("seconds") if cli.get("received") == size else None
            out.setdefault("alone", {})[name] = {"seconds": secs, "error": res.get("error")}
            shown = f"{secs:6.2f} s" if secs is not None else "failed"
            progress(f"  {out['name']:28} path {name} alone (plain TCP) {shown}")
        for r in range(runs):
            for system in SYSTEMS:
                res = run_transfer(
                    topo,
                    system,
                    cc=cc,
                    client_send_bytes=size,
                    server_send_bytes=size,
                    timeout=limit * 6 + 30,
                    port=9100 + r,
                )
                cli = res.get("client", {})
                complete = (
                    "error" not in res
                    and cli.get("error") is None
                    and cli.get("received") == size
                    and res.get("server", {}).get("received") == size
                )
                secs = cli.get("seconds") if complete else None
                res["seconds"] = secs
                res["pass"] = bool(complete and secs is not None and secs <= limit)
                if "client" in res:
                    res["client"].pop("timeline", None)
                if "server" in res:
                    res["server"].pop("timeline", None)
                out["runs"][system].append(res)
                shown = f"{secs:6.2f} s" if secs is not None else "failed  "
                progress(
                    f"  {out['name']:28} run {r + 1}/{runs} {system:9} {shown} "
                    f"(limit {limit:.2f} s) {'PASS' if res['pass'] else 'FAIL'}"
                )
                time.sleep(0.5)
        out["multihome_status"] = topo.status("client")
        topo.stop()
    for system in SYSTEMS:
        runs_ = out["runs"][system]
        times = [x["seconds"] for x in runs_ if x["seconds"] is not None]
        out.setdefault("summary", {})[system] = {
            "passed": sum(x["pass"] for x in runs_),
            "runs": len(runs_),
            "median_s": statistics.median(times) if times else None,
            "median_goodput_mbps": (size * 8 / statistics.median(times) / 1e6) if times else None,
        }
    return out


def plot(cases: list[dict]):
    fig, (ax,) = figure(width=10, height=4.5)
    colors = {"multihome": "tab:blue", "mptcp": "tab:orange", "stream": "tab:green"}
    for k, case in enumerate(cases):
        for j, system in enumerate(SYSTEMS):
            x = k + (j - (len(SYSTEMS) - 1) / 2) * 0.25
            ys = [r["seconds"] / case["limit_s"] for r in case["runs"][system] if r["seconds"]]
            ax.scatter([x] * len(ys), ys, color=colors[system], s=18, label=None)
            s = case["summary"][system]
            ax.text(x, 0.55, f"{s['passed']}/{s['runs']}", ha="center", fontsize=8)
        alone = [a["seconds"] for a in case.get("alone", {}).values() if a["seconds"]]
        if alone:
            ax.scatter([k], [min(alone) / case["limit_s"]], color="grey", marker="x", s=30)
        ax.plot(
            [k - 0.4, k + 0.4],
            [case["ceiling_s"]["multihome"] / case["limit_s"]] * 2,
            color="tab:blue",
            lw=0.8,
            ls=":",
        )
    for system in SYSTEMS:
        ax.scatter([], [], color=colors[system], label=system)
    ax.scatter([], [], color="grey", marker="x", label="best path alone (plain TCP)")
    ax.axhline(1.0, color="red", lw=1, label="pass limit")
    ax.plot([], [], color="tab:blue", ls=":", label="multihome header ceiling")
    ax.set_xticks(range(len(cases)), [c["name"] for c in cases], rotation=20, fontsize=8)
    ax.set_ylabel("completion time / limit")
    ax.set_ylim(0.5, max(2.0, ax.get_ylim()[1]))
    ax.legend(fontsize=8)
    ax.set_title("simult-flows: 16 MiB each way (numbers: runs passed)")
    return fig


def main(
    runs: int | None = None,
    cc: str = "cubic",
    only: list[int] | None = None,
    scheduler: str | None = None,
) -> dict:
    """Run the matrix; ``scheduler`` (earliest|weighted) sets multihome's aggregate_scheduler
    and the result is then ``simult-flows-<scheduler>.json`` (a diagnostic variant); a run of
    only some cases is ``simult-flows-partial.json``, so it never poses as the suite's result."""
    sc = load("simult-flows")
    size = sc.bench["size_mib"] * MIB
    runs = runs or sc.bench["runs"]
    cases = [c for i, c in enumerate(sc.bench["cases"]) if only is None or i in only]
    progress(f"simult-flows: {len(cases)} cases x {runs} runs x {SYSTEMS}\n{sc.picture}")
    results = []
    for case in cases:
        progress(f"case {case_name(case)}")
        results.append(run_case(case, size, runs, cc, scheduler))
    data = {
        "cc": cc,
        "size_bytes": size,
        "runs_per_case": runs,
        "aggregate_scheduler": scheduler or "earliest (default)",
        "cases": results,
    }
    name = f"simult-flows-{scheduler}" if scheduler else "simult-flows"
    save(name if only is None else "simult-flows-partial", data, plot(results))
    print(f"\n{'case':28} {'packet mode':>16} {'kernel MPTCP':>16} {'stream mode':>16}")
    for c in results:
        cells = [
            f"{c['summary'][s]['passed']}/{c['summary'][s]['runs']} "
            f"{c['summary'][s]['median_s'] or float('nan'):6.2f}s"
            for s in SYSTEMS
        ]
        cols = " ".join(f"{cell:>16}" for cell in cells)
        print(f"{c['name']:28} {cols}   limit {c['limit_s']:.2f}s")
    return data
