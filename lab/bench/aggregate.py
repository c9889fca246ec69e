"""Suite ``aggregate``: one TCP flow over unequal links, at what share of their summed rate?

Role: issue 4 ("one TCP flow over unequal links at >= 95 % of their sum, arriving in order").
On lab/scenarios/aggregate.toml, for each fixed case (50+20, 100+10, 30+20+10 Mbit/s with
unequal delays, drop-tail queues of max(30 packets, 50 ms)) and each trace pair (synthetic
Wi-Fi + LTE from ``linkem trace-gen``; the real Wi-Fi/cellular pairs of mptraces 7_1, 8_1,
11_1, 13_1, 21_1, 23_2), build one topology and measure in turn, on the same links, one
CUBIC flow through multihome (``aggregate_scheduler`` earliest and weighted; the trace pairs
earliest only), kernel MPTCP and plain TCP over each link alone. Per system and run: goodput,
``goodput_ratio`` (goodput / summed link rate; for traces the rate the traces offered while
the flow ran), ratios to the best single link and to the sum of the single-link goodputs of
the same run, the sender's retransmissions, ping RTT idle vs during, and for multihome the
data receiver's reorder-buffer occupancy and reorder density (lab/bench/aggregate_run.py).

Direction: upload, ``cli`` -> ``srv``. Two reasons: kernel MPTCP here opens its extra
subflows only once the client sends (a pure download stays on one subflow, see
lab/bench/failover.py), and the scheduler under test is the sender's: the client's
``aggregate_scheduler`` key is what switches earliest/weighted, while the server always
schedules with ``earliest`` (docs/CONFIG.md). So the reorder buffer measured is the server's.

Header ceiling: multihome carries 1368 TCP payload bytes per 1485-byte frame (0.921 of the
link rate, with header compression) and plain TCP/MPTCP 1448 per 1514 (0.956), so
``goodput_ratio`` >= 0.95 is beyond multihome's reach by construction; ``ratio_to_ceiling``
divides by the ceiling instead. ``stream`` is multihome's stream mode (docs/STREAM.md): the
upload starts on the LAN host, the client daemon ends it and carries it over kernel MPTCP
(ceiling 0.942: MPTCP's DSS option and the records' framing).

Trace pairs: ``goodput_ratio`` is over the sum of the rates the traces offered during that
flow's own transfer (each trace restarts when the flow connects, so all systems see the same
stretch), ``goodput_ratio_trace_mean`` over the traces' whole-period means, and a plain TCP
flow's ``ratio_own_link`` over its own link's offered rate.

Issue 20's case ``1000+1000`` (two 1 Gbit/s links, bar: >= 1.7 Gbit/s through multihome)
runs on kernel tbf veths instead of linkem, whose user-space forwarding would spend a core of
its own at that rate; it runs only when named (``--cases 1000+1000``).

Usage (root, ~20 min with the defaults: 16 flows of 30 s on fixed cases, 16 on traces)::

    .venv/bin/python -m lab.bench aggregate [--runs N] [--seconds S] [--cases NAME ...]
    .venv/bin/python -m lab.bench aggregate --seconds 8 --cases 50+20 mptraces-11_1  # check

Invariants: every system of a run crosses the same linkem processes (only the multihome
daemons restart, to switch scheduler); a run's ratios use single-link goodputs from that
run; a partial run (``--cases``, ``--seconds`` below the scenario's) is written as
``aggregate-quick.json`` so it never poses as the suite's result.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable

from lab import mptcp
from lab.bench.aggregate_plot import order, plot
from lab.bench.aggregate_run import enable_stream, label, measure, set_scheduler
from lab.bench.aggregate_traces import TracesUnavailable, mean_mbit, pair_traces
from lab.bench.common import progress, save
from lab.bench.simult_flows import PLAIN_EFF, TUNNEL_EFF
from lab.netns import Lab, LabError
from lab.scenario import Scenario, load
from lab.topology import Topology

# Stream mode's ceiling: MPTCP's data segments carry a 20-byte DSS option, and each 16 KiB
# record adds 19 bytes of framing and tag.
STREAM_EFF = (1448 - 20) / 1514 * 16384 / (16384 + 19)
FRAME_BYTES = 1514
_PORT = [9300]


def queue_bytes(rate_mbit: float, b: dict) -> int:
    """Drop-tail limit: max(``queue_min_packets`` full frames, ``queue_ms`` at the rate)."""
    return int(max(b["queue_min_packets"] * FRAME_BYTES, rate_mbit * 1e6 * b["queue_ms"] / 8e3))


def next_port() -> int:
    _PORT[0] += 1
    return _PORT[0]


def add_ratios(run: dict, capacity: Callable[[dict], float], n_links: int) -> None:
    """Fill each record's ratios from this run's single-link goodputs and its capacity."""
    singles = [run[f"tcp:{i}"]["goodput_mbps"] for i in range(n_links) if f"tcp:{i}" in run]
    best, total = max(singles, default=0.0), sum(singles)
    for rec in run.values():
        g, cap = rec["goodput_mbps"], capacity(rec)
        eff = {"multihome": TUNNEL_EFF, "stream": STREAM_EFF}.get(rec["system"], PLAIN_EFF)
        rec["capacity_mbit"] = cap
        rec["goodput_ratio"] = g / cap if cap else None
        rec["ratio_to_ceiling"] = g / (cap * eff) if cap else None
        rec["ratio_best_single"] = g / best if best else None
        rec["ratio_single_sum"] = g / total if total else None


def show(name: str, r: int, runs: int, rec: dict) -> None:
    rtt = rec["rtt"]
    ro = rec.get("reorder") or {}
    extra = ""
    if ro:
        occ = ro.get("mean_occupancy")
        dens = ro.get("reorder_density")
        extra = (f", reorder occ {occ:.2f}" if occ is not None else ", reorder occ n/a") + (
            f" dens {dens:.3f}" if dens is not None else ""
        )
        extra += f" held {ro['held_fraction'] or 0:.3f} skipped {ro['deltas'].get('skipped_gaps')}"
    err = f"  ERROR {str(rec['error'])[:80]}" if rec.get("error") else ""
    progress(
        f"  {name:20} run {r + 1}/{runs} {label(rec['system'], rec['scheduler']):19} "
        f"{rec['goodput_mbps']:6.1f} Mbit/s, retrans {rec['retransmissions']:5d}, "
        f"ping {rtt['idle_median_ms'] or 0:5.1f} -> {rtt['during_median_ms'] or 0:6.1f} ms"
        f"{extra}{err}"
    )


def run_systems(topo, name: str, systems: list[tuple[str, str | None]], r: int, runs: int, **kw):  # noqa: ANN001
    """Measure each ``(system, scheduler)`` in turn; return ``{label: record}``."""
    run: dict = {}
    for system, sched in systems:
        rec = measure(topo, system, port=next_port(), scheduler=sched, **kw)
        run[label(system, sched)] = rec
        show(name, r, runs, rec)
        time.sleep(1)
    return run


def subset(sc: Scenario, n: int) -> Scenario:
    if n > len(sc.links):
        raise LabError(f"{sc.name}: a case needs {n} links, the scenario lists {len(sc.links)}")
    return dataclasses.replace(sc, links=sc.links[:n])


def case_losses(case: dict) -> list:
    """A fixed case's loss per link: a probability, or a Gilbert-Elliott table (linkem's
    ``{ p, r, loss_bad, loss_good }``); none given is 0 on every link."""
    n = len(case["rates_mbit"])
    losses = case.get("loss", [0.0] * n)
    if len(losses) != n:
        raise LabError(f"case {case['name']}: {n} links but {len(losses)} loss values")
    return losses


def mean_loss(spec: float | dict) -> float:
    """Long-run loss rate of a case's loss value: Gilbert-Elliott's is the bad state's
    stationary share p / (p + r) times its loss, plus the good state's share times its own."""
    if not isinstance(spec, dict):
        return float(spec)
    p, r = spec["p"], spec["r"]
    bad = p / (p + r)
    return bad * spec.get("loss_bad", 1.0) + (1 - bad) * spec.get("loss_good", 0.0)


def case_overrides(sc: Scenario, case: dict) -> dict[str, dict]:
    """linkem settings of a fixed case's links, by link name: rate, delay, drop-tail queue
    (``queue_bytes``) and loss where there is any."""
    rates, delays = case["rates_mbit"], case["delays_ms"]
    names = [lk["name"] for lk in sc.links[: len(rates)]]
    return {
        nm: {"rate": f"{r:g}mbit", "delay": f"{d:g}ms", "queue_bytes": queue_bytes(r, sc.bench)}
        | ({"loss": p} if p else {})
        for nm, r, d, p in zip(names, rates, delays, case_losses(case), strict=True)
    }


def trace_overrides(links: list[dict], b: dict) -> dict[str, dict]:
    """linkem settings of a trace pair's links (``pair_traces``), by link name: the trace as
    the rate, the delay, and the queue sized at the trace's mean rate."""
    return {
        lk["name"]: {
            "rate": f"trace:{lk['path']}",
            "delay": f"{lk['delay_ms']:g}ms",
            "queue_bytes": queue_bytes(lk["trace_mean_mbit"], b),
        }
        for lk in links
    }


def tbf_links(sc: Scenario, case: dict) -> Scenario:
    """The case's links as kernel tbf on direct veths (``emulator = "tbf"``): no linkem
    process, so at Gbit/s rates the emulator costs no CPU of its own. tbf has a rate and a
    queue (``queue_ms`` at the rate) but no delay or loss; offloads stay on unless the case
    says ``offloads = false``."""
    if any(case.get("delays_ms", [])) or any(case_losses(case)):
        raise LabError(f"case {case['name']}: a tbf link has no delay or loss")
    links = [
        {"name": lk["name"], "emulator": "tbf", "rate_mbit": r,
         "tbf_latency_ms": sc.bench["queue_ms"], "offloads": case.get("offloads", True)}
        for lk, r in zip(sc.links, case["rates_mbit"], strict=False)
    ]  # fmt: skip
    return dataclasses.replace(subset(sc, len(case["rates_mbit"])), links=links)


def case_topology(lab: Lab, sc: Scenario, case: dict) -> tuple[Topology, dict]:
    """A fixed case's topology (linkem links, or tbf ones for ``emulator = "tbf"``) and the
    link settings to record with its results."""
    rates = case["rates_mbit"]
    if case.get("emulator", "linkem") == "tbf":
        tsc = tbf_links(sc, case)
        settings = {
            lk["name"]: {"emulator": "tbf", "rate": f"{lk['rate_mbit']:g}mbit",
                         "queue_ms": sc.bench["queue_ms"], "offloads": lk["offloads"]}
            for lk in tsc.links
        }  # fmt: skip
        return tsc.topology(lab), settings
    overrides = case_overrides(sc, case)
    return subset(sc, len(rates)).topology(lab, overrides=overrides), overrides


def run_case(sc: Scenario, case: dict, seconds: float, runs: int) -> dict:
    b = sc.bench
    rates = case["rates_mbit"]
    n = len(rates)
    out: dict = {**case, "sum_mbit": sum(rates), "runs": []}
    with Lab() as lab:
        topo, out["links"] = case_topology(lab, sc, case)
        enable_stream(topo, b["cc"])
        set_scheduler(topo, "earliest")
        mptcp.enable(topo)
        for r in range(runs):
            # Start with the scheduler the daemons already run: one restart per run.
            first = topo.client_extra.get("aggregate_scheduler", "earliest")
            scheds = [first, "weighted" if first == "earliest" else "earliest"]
            systems = [("multihome", s) for s in scheds] + [("stream", None), ("mptcp", None)]
            systems += [(f"tcp:{i}", None) for i in range(n)]
            run = run_systems(topo, case["name"], systems, r, runs, seconds=seconds, cc=b["cc"])
            add_ratios(run, lambda _rec: sum(rates), n)
            out["runs"].append(run)
        topo.stop()
    out["summary"] = summarize(out["runs"])
    return out


def run_pair(sc: Scenario, pair: dict, seconds: float, runs: int) -> dict:
    b = sc.bench
    out: dict = {"name": pair["name"], "runs": []}
    with Lab() as lab:
        links = pair_traces(pair, lab.dir)
        overrides = trace_overrides(links, b)
        out["links"] = [
            {k: v for k, v in lk.items() if k not in ("ms", "path")}
            | {"queue_bytes": q["queue_bytes"]}
            for lk, q in zip(links, overrides.values(), strict=True)
        ]
        out["trace_mean_sum_mbit"] = sum(lk["trace_mean_mbit"] for lk in links)
        topo = subset(sc, len(links)).topology(lab, overrides=overrides)
        enable_stream(topo, b["cc"])
        set_scheduler(topo, "earliest")
        mptcp.enable(topo)

        systems = [("multihome", "earliest"), ("stream", None), ("mptcp", None)]
        systems += [(f"tcp:{i}", None) for i in range(len(links))]
        for r in range(runs):
            # At each flow's connect the traces start again, so every system sees the
            # same stretch of them.
            kw = {"seconds": seconds, "cc": b["cc"], "on_connect": topo.restart_traces}
            run = run_systems(topo, pair["name"], systems, r, runs, **kw)
            # Capacity each flow was offered: the traces' means over its own [0, seconds]
            # (the traces restart at its connect), summed over the links for every system.
            for rec in run.values():
                rec["window_mean_mbit"] = [
                    mean_mbit(lk["ms"], 0, rec["seconds"] or seconds) for lk in links
                ]
                if rec["system"].startswith("tcp:"):
                    own = rec["window_mean_mbit"][int(rec["system"][4:])]
                    rec["ratio_own_link"] = rec["goodput_mbps"] / own if own else None
                rec["goodput_ratio_trace_mean"] = rec["goodput_mbps"] / out["trace_mean_sum_mbit"]
            add_ratios(run, lambda rec: sum(rec["window_mean_mbit"]), len(links))
            out["runs"].append(run)
        topo.stop()
    out["summary"] = summarize(out["runs"])
    return out


def _median(xs: list) -> float | None:
    """Median of the values present (``None`` when there are none)."""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarize(runs: list[dict]) -> dict:
    """Medians over runs per system label."""
    out = {}
    for lab_ in dict.fromkeys(k for run in runs for k in run):
        recs = [run[lab_] for run in runs if lab_ in run]
        ro = [rec.get("reorder") or {} for rec in recs]
        out[lab_] = {
            "runs": len(recs),
            "errors": sum(bool(rec.get("error")) for rec in recs),
            **{
                k: _median([rec.get(k) for rec in recs])
                for k in (
                    "goodput_mbps",
                    "goodput_after_2s_mbps",
                    "goodput_ratio",
                    "ratio_to_ceiling",
                    "ratio_best_single",
                    "ratio_single_sum",
                    "retransmissions",
                )
            },
            **{
                f"rtt_{k}": _median([rec["rtt"].get(k) for rec in recs])
                for k in ("idle_median_ms", "during_median_ms", "during_p95_ms", "added_ms")
            },
        }
        if any(ro):
            out[lab_]["reorder"] = {
                k: _median([x.get(k) for x in ro])
                for k in ("mean_occupancy", "reorder_density", "held_fraction")
            } | {
                k: _median([x.get("deltas", {}).get(k) for x in ro])
                for k in ("skipped_gaps", "late", "lost_skips")
            }
    return out


def select(sc: Scenario, only: list[str] | None) -> tuple[list[dict], list[dict]]:
    """Cases and trace pairs named in ``only`` (``fixed`` and ``traces`` name the groups)."""
    cases, pairs = sc.bench["case"], sc.bench.get("trace_pair", [])
    if not only:
        # ``named_only`` cases (the Gbit/s tbf one) run only when named.
        return [c for c in cases if not c.get("named_only")], pairs
    wanted = set(only)
    known = {c["name"] for c in cases} | {p["name"] for p in pairs} | {"fixed", "traces"}
    if wanted - known:
        raise LabError(f"unknown aggregate cases {sorted(wanted - known)}; known: {sorted(known)}")
    return (
        [
            c
            for c in cases
            if c["name"] in wanted or ("fixed" in wanted and not c.get("named_only"))
        ],
        [p for p in pairs if "traces" in wanted or p["name"] in wanted],
    )


def table(results: list[dict]) -> None:
    head = ("system", "Mbit/s", "ratio", "/ceil", "/best", "/sum1", "retx", "idle", "during",
            "p95", "occ", "dens")  # fmt: skip
    for c in results:
        title = f"{c['name']}" + (f" (sum {c['sum_mbit']:g} Mbit/s)" if "sum_mbit" in c else "")
        print(f"\n{title}")
        if c.get("error"):
            print(f"  FAILED: {c['error'][:300]}")
            continue
        print(
            "  {:19} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>7} {:>6} {:>5} {:>6}".format(
                *head
            )
        )
        for lab_, s in sorted(c["summary"].items(), key=lambda kv: order(kv[0])):
            ro = s.get("reorder") or {}

            def f(x: float | None, fmt: str) -> str:
                return format(x, fmt) if x is not None else "-".rjust(int(fmt.partition(".")[0]))

            print(
                f"  {lab_:19} {f(s['goodput_mbps'], '6.1f')} {f(s['goodput_ratio'], '6.3f')} "
                f"{f(s['ratio_to_ceiling'], '6.3f')} {f(s['ratio_best_single'], '6.2f')} "
                f"{f(s['ratio_single_sum'], '6.2f')} {f(s['retransmissions'], '6.0f')} "
                f"{f(s['rtt_idle_median_ms'], '6.1f')} {f(s['rtt_during_median_ms'], '7.1f')} "
                f"{f(s['rtt_during_p95_ms'], '6.1f')} {f(ro.get('mean_occupancy'), '5.2f')} "
                f"{f(ro.get('reorder_density'), '6.3f')}"
            )


def main(
    runs: int | None = None,
    seconds: float | None = None,
    only: list[str] | None = None,
    tag: str | None = None,
    cc: str | None = None,
):
    """Run the fixed cases and the trace pairs (``only``: names, or ``fixed`` / ``traces``)."""
    sc = load("aggregate")
    if cc:
        sc = dataclasses.replace(sc, bench={**sc.bench, "cc": cc})
    b = sc.bench
    seconds = seconds or b["seconds"]
    runs = runs or b["runs"]
    cases, pairs = select(sc, only)
    progress(
        f"aggregate: {len(cases)} cases + {len(pairs)} trace pairs x {runs} runs, "
        f"{seconds:g} s per flow, upload cli -> srv, {b['cc']}\n{sc.picture}"
    )
    results: list[dict] = []
    for case in cases:
        progress(f"case {case['name']}: {case['rates_mbit']} Mbit/s, {case['delays_ms']} ms")
        try:
            results.append(run_case(sc, case, seconds, runs))
        except LabError as exc:
            progress(f"case {case['name']} failed: {exc}")
            results.append({**case, "error": str(exc)[-2000:]})
    traces: list[dict] = []
    skipped: list[dict] = []
    for pair in pairs:
        progress(f"trace pair {pair['name']}")
        try:
            traces.append(run_pair(sc, pair, seconds, runs))
        except TracesUnavailable as exc:
            progress(f"trace pair {pair['name']} skipped: {exc}")
            skipped.append({"name": pair["name"], "reason": str(exc)})
        except LabError as exc:
            progress(f"trace pair {pair['name']} failed: {exc}")
            traces.append({"name": pair["name"], "error": str(exc)[-2000:]})
    quick = bool(only) or seconds < b["seconds"]
    data = {
        "params": {**b, "seconds": seconds, "runs": runs, "direction": "upload cli -> srv"},
        "efficiency": {"multihome": TUNNEL_EFF, "stream": STREAM_EFF, "plain": PLAIN_EFF},
        "cases": results,
        "traces": traces,
        "skipped": skipped,
    }
    name = f"aggregate-{tag}" if tag else "aggregate-quick" if quick else "aggregate"
    save(name, data, plot(results, traces))
    print(
        "\nratio = goodput / summed rate; /ceil = over the header ceiling; /best, /sum1 = over "
        "the best single link, the sum of single links (same run); ping medians in ms"
    )
    table(results + traces)
    for s in skipped:
        print(f"\n{s['name']}: skipped ({s['reason']})")
    return data
