"""Suite ``quic``: one QUIC bulk download through ``aggregate``, against the best link alone.

Role: issue 19 ("UDP too: a QUIC bulk transfer through ``aggregate`` on the fixed cases and
two trace pairs, beside TCP: goodput against the best link alone"). On the ``aggregate``
suite's scenario (lab/scenarios/aggregate.toml: its links, queues, fixed cases 50+20,
100+10, 30+20+10, 50+20-lossy and trace pairs, the traces converted at run time by
lab/bench/aggregate_traces.py), one topology per case, and in each run on the same links:

- ``quic-aggregate``: quic-go's example client fetching one file over HTTP/3 from its example
  server through the multihome tunnel (``aggregate``, the server's tunnel address);
- ``quic:<i>``: the same over link ``i`` alone, no tunnel (the best of them is the peer);
- ``tcp-aggregate``: one CUBIC TCP flow (lab.tools.bidixfer) through the tunnel, and
  ``tcp:<i>``, plain TCP over each link alone, for comparison.

Direction: download, ``srv`` -> ``cli``, for every system: the example client can only GET.
(The ``aggregate`` suite uploads; the fixed cases' links are symmetric and the traces drive
both directions, so its cases carry over, but its figures are not this suite's peers.)

Goodput: the body bytes the client reported / the time from its first sight of the
response's headers (polled every 10 ms) to its exit. The example server serves a file of a
fixed size, so each transfer is sized in two steps: a ~3-s sizing fetch at a guessed rate
(the links' rates; on a lossy link twice Mathis's bound), then the measured fetch sized to
last ``seconds`` at the larger of the guess (up to twice the sizing goodput) and the sizing
fetch's goodput. Trace
pairs restart their traces when the measured fetch starts, as the ``aggregate`` suite does.

Usage (root; ~16 min with the defaults: 20 s per transfer, 1 run)::

    .venv/bin/python -m lab.bench quic [--runs N] [--seconds S] [--cases NAME ...]

Invariants: all systems of a case cross the same linkem processes; ratios use the single-link
goodputs of the same run; a partial run (``--cases``, or ``--seconds`` below 20) is written as
``quic-quick.json``. The QUIC programs are built on first use (lab/bench/quic_tool.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lab.bench import quic_tool
from lab.bench.aggregate import (
    _median,
    case_losses,
    case_overrides,
    mean_loss,
    next_port,
    select,
    subset,
    trace_overrides,
)
from lab.bench.aggregate_run import reorder_delta, set_scheduler
from lab.bench.aggregate_traces import TracesUnavailable, mean_mbit, pair_traces
from lab.bench.common import figure, progress, save
from lab.bench.transfer import run_transfer
from lab.netns import Lab, LabError, Proc
from lab.scenario import load
from lab.topology import TUN_SERVER, Topology, link_ip

SECONDS = 20.0
# The trace pairs measured (the issue asks for two: the synthetic pair and one real pair).
PAIRS = ("synthetic-wifi+lte", "mptraces-8_1")
SIZING_S = 3.0
# The data sender's (the server's) counters around a tunnelled transfer: CoDel's drops at
# the tunnel's ingress (the inner flow's congestion signal) and the link losses repaired.
SENDER_COUNTERS = ("codel_drops", "queue_overflow_drops", "repaired", "reinjected", "tail_probes")
MIN_BYTES, MAX_BYTES = 1_000_000, 1_000_000_000


@dataclass
class QuicServer:
    """The example server of one case: it serves ``www`` on ``port`` at every srv address."""

    topo: Topology
    www: Path
    port: int
    proc: Proc


def fetch(srv: QuicServer, host: str, size: int, timeout: float, *,
          on_start: Callable[[], None] | None = None) -> dict:  # fmt: skip
    """One GET of a ``size``-byte file from the QUIC server; the client's figures."""
    name = f"{size}"
    path = srv.www / name
    if not path.exists():
        with open(path, "wb") as f:  # sparse: reads as zeros, costs no disk
            f.truncate(size)
    url = f"https://{host}:{srv.port}/{name}"
    t0 = time.monotonic()
    client = srv.topo.cli.spawn(
        [str(quic_tool.CLIENT), "-insecure", "-q", url], f"quic{next_port()}"
    )
    if on_start is not None:
        on_start()
    t_resp = None
    while client.alive():
        now = time.monotonic()
        if t_resp is None and quic_tool.response_started(client.output()):
            t_resp = now
        if now - t0 > timeout:
            client.stop()
            return {"error": f"no response body within {timeout:g} s", "size": size}
        time.sleep(0.01)
    t_end = time.monotonic()
    return result(client, size, t0, t_resp, t_end)


def result(client: Proc, size: int, t0: float, t_resp: float | None, t_end: float) -> dict:
    log = client.output()
    got = quic_tool.body_bytes(log)
    rc = client.popen.returncode
    if got is None or rc != 0:
        return {"error": f"client rc {rc}, no body: {log[-400:]}", "size": size}
    secs = t_end - (t_resp or t0)
    return {
        "size": size,
        "received_bytes": got,
        "seconds": secs,
        "seconds_total": t_end - t0,
        "goodput_mbps": got * 8 / secs / 1e6 if secs > 0 else 0.0,
        "error": None if got == size else f"body {got} of {size} bytes",
    }


def quic_transfer(srv: QuicServer, host: str, guess: float, seconds: float, *,
                  on_start: Callable[[], None] | None) -> dict:  # fmt: skip
    """A sizing fetch at ``guess`` Mbit/s, then one sized to last ``seconds``."""
    clamp = lambda b: int(min(MAX_BYTES, max(MIN_BYTES, b)))  # noqa: E731
    probe = fetch(srv, host, clamp(guess * 1e6 / 8 * SIZING_S), 10 * SIZING_S + 20)
    # A 3-s fetch is mostly start-up: it undershoots the rate, so the guess (the links'
    # rates) counts up to twice what the sizing fetch reached.
    got = probe.get("goodput_mbps") or guess
    size = clamp(max(got, min(guess, 2 * got)) * 1e6 / 8 * seconds)
    before = snapshot(srv.topo, tunnel=host == TUN_SERVER)
    rec = fetch(srv, host, size, 4 * seconds + 30, on_start=on_start)
    rec |= observed(before, snapshot(srv.topo, tunnel=host == TUN_SERVER))
    rec["sizing_goodput_mbps"] = probe.get("goodput_mbps")
    rec.setdefault("goodput_mbps", 0.0)
    return rec


def snapshot(topo: Topology, *, tunnel: bool) -> dict:
    """What the links carried and dropped downstream (srv -> cli) so far, and for a tunnelled
    transfer the data receiver's (the client's) reorder counters."""
    out: dict = {"links": {}}
    for i, link in topo.emulated.items():
        down = link.stats()["b2a"]
        drops = down["dropped_loss"]["frames"] + down["dropped_queue"]["frames"]
        out["links"][topo.links[i].name] = (down["delivered"]["bytes"], drops)
    if tunnel:
        sent = topo.counters("server")
        out["sender"] = {k: sent.get(k, 0) for k in SENDER_COUNTERS}
        sess = topo.session("client") or {}
        out["reorder"] = dict(sess.get("reorder", {})) | {
            "rx_ip_packets": sess.get("rx_ip_packets", 0)
        }
    return out


def observed(before: dict, after: dict) -> dict:
    """Per-link bytes and drops downstream over one transfer; reorder counter deltas."""
    links = {
        n: (b - before["links"][n][0], d - before["links"][n][1])
        for n, (b, d) in after["links"].items()
    }
    total = sum(b for b, _ in links.values())
    out: dict = {
        "link_bytes_down": {n: b for n, (b, _) in links.items()},
        "link_share_down": {n: b / total for n, (b, _) in links.items()} if total else None,
        "link_drops_down": {n: d for n, (_, d) in links.items()},
    }
    if "reorder" in after:
        out["reorder"] = reorder_delta(before["reorder"], after["reorder"])
        out["sender"] = {k: v - before["sender"][k] for k, v in after["sender"].items()}
    return out


def tcp_transfer(topo: Topology, system: str, seconds: float, cc: str,
                 on_start: Callable[[], None] | None) -> dict:  # fmt: skip
    """One CUBIC download of ``seconds`` (lab.tools.bidixfer), through the tunnel or a link."""
    sys_ = "multihome" if system == "tcp-aggregate" else system
    before = snapshot(topo, tunnel=sys_ == "multihome")

    def during(_client: Proc) -> None:
        if on_start is not None:
            on_start()

    res = run_transfer(topo, sys_, cc=cc, server_send_seconds=seconds, timeout=seconds + 90,
                       port=next_port(), during=during)  # fmt: skip
    rx = res.get("client", {})
    secs, got = rx.get("seconds"), rx.get("received", 0)
    return {
        "received_bytes": got,
        "seconds": secs,
        "goodput_mbps": got * 8 / secs / 1e6 if secs else 0.0,
        "error": res.get("error") or rx.get("error"),
    } | observed(before, snapshot(topo, tunnel=sys_ == "multihome"))


def start_server(topo: Topology, lab: Lab) -> QuicServer:
    www = lab.dir / "quic-www"
    www.mkdir(exist_ok=True)
    port = next_port()
    cert, key = quic_tool.self_signed(lab.dir)
    cmd = [str(quic_tool.SERVER), "-bind", f"0.0.0.0:{port}", "-www", str(www)]
    server = topo.srv.spawn([*cmd, "-cert", str(cert), "-key", str(key)], "quic-server")
    deadline = time.monotonic() + 10
    while not quic_tool.server_listening(server.output()):
        if not server.alive() or time.monotonic() > deadline:
            raise LabError(f"the QUIC server did not start:\n{server.tail()}")
        time.sleep(0.05)
    time.sleep(0.2)  # "listening on" is printed just before the socket is bound
    return QuicServer(topo, www, port, server)


def one_run(srv: QuicServer, guesses: list[float], seconds: float, *, cc: str,
            on_start: Callable[[], None] | None, tag: str) -> dict:  # fmt: skip
    """Every system once on the same links; ratios to this run's best single link."""
    run: dict = {}
    hosts = {"quic-aggregate": TUN_SERVER} | {
        f"quic:{i}": link_ip(i, "srv") for i in range(len(guesses))
    }
    for system, host in hosts.items():
        guess = sum(guesses) if system == "quic-aggregate" else guesses[int(system[5:])]
        run[system] = quic_transfer(srv, host, guess, seconds, on_start=on_start)
        show(tag, system, run[system])
        time.sleep(1)
    for system in ["tcp-aggregate", *(f"tcp:{i}" for i in range(len(guesses)))]:
        run[system] = tcp_transfer(srv.topo, system, seconds, cc, on_start)
        show(tag, system, run[system])
        time.sleep(1)
    for proto in ("quic", "tcp"):
        singles = [run[k]["goodput_mbps"] for k in run if k.startswith(f"{proto}:")]
        best = max(singles, default=0.0)
        run[f"{proto}-aggregate"]["ratio_best_single"] = (
            run[f"{proto}-aggregate"]["goodput_mbps"] / best if best else None
        )
        run[f"{proto}-aggregate"]["best_single_mbps"] = best
    tcp = run["tcp-aggregate"]["goodput_mbps"]
    run["quic-aggregate"]["ratio_to_tcp_aggregate"] = (
        run["quic-aggregate"]["goodput_mbps"] / tcp if tcp else None
    )
    return run


def show(tag: str, system: str, rec: dict) -> None:
    err = f"  ERROR {str(rec['error'])[:100]}" if rec.get("error") else ""
    size = f", {rec['received_bytes'] / 1e6:.0f} MB in {rec['seconds']:.1f} s" if rec.get(
        "seconds") else ""  # fmt: skip
    share = rec.get("link_share_down") or {}
    extra = " share " + "/".join(f"{n} {v:.2f}" for n, v in share.items()) if share else ""
    extra += f", drops {sum((rec.get('link_drops_down') or {}).values())}"
    ro = rec.get("reorder") or {}
    if ro:
        d = ro.get("deltas", {})
        extra += f", held {ro.get('held_fraction') or 0:.3f} skipped {d.get('skipped_gaps')}"
        extra += f" late {d.get('late')} lost_skips {d.get('lost_skips')}"
        snd = rec.get("sender") or {}
        extra += f", codel {snd.get('codel_drops')} repaired {snd.get('repaired')}"
    progress(f"  {tag:20} {system:15} {rec['goodput_mbps']:6.1f} Mbit/s{size}{extra}{err}")


def run_case(sc, case: dict, seconds: float, runs: int) -> dict:  # noqa: ANN001
    b = sc.bench
    rates, delays = case["rates_mbit"], case["delays_ms"]
    n = len(rates)
    overrides = case_overrides(sc, case)
    guesses = [
        quic_tool.guess_mbit(r, d, mean_loss(p))
        for r, d, p in zip(rates, delays, case_losses(case), strict=True)
    ]
    out: dict = {**case, "sum_mbit": sum(rates), "links": overrides, "runs": []}
    with Lab() as lab:
        topo = subset(sc, n).topology(lab, overrides=overrides)
        set_scheduler(topo, "earliest")
        srv = start_server(topo, lab)
        for r in range(runs):
            tag = f"{case['name']} {r + 1}/{runs}"
            run = one_run(srv, guesses, seconds, cc=b["cc"], on_start=None, tag=tag)
            out["runs"].append(run)
        topo.stop()
    out["summary"] = summarize(out["runs"])
    return out


def run_pair(sc, pair: dict, seconds: float, runs: int) -> dict:  # noqa: ANN001
    b = sc.bench
    out: dict = {"name": pair["name"], "runs": []}
    with Lab() as lab:
        links = pair_traces(pair, lab.dir)
        overrides = trace_overrides(links, b)
        out["links"] = [{k: v for k, v in lk.items() if k not in ("ms", "path")} for lk in links]
        out["trace_mean_sum_mbit"] = sum(lk["trace_mean_mbit"] for lk in links)
        out["window_mean_mbit"] = [mean_mbit(lk["ms"], 0, seconds) for lk in links]
        topo = subset(sc, len(links)).topology(lab, overrides=overrides)
        set_scheduler(topo, "earliest")

        srv = start_server(topo, lab)
        guesses = [m * 0.9 for m in out["window_mean_mbit"]]
        restart = topo.restart_traces
        for r in range(runs):
            tag = f"{pair['name']} {r + 1}/{runs}"
            run = one_run(srv, guesses, seconds, cc=b["cc"], on_start=restart, tag=tag)
            out["runs"].append(run)
        topo.stop()
    out["summary"] = summarize(out["runs"])
    return out


def summarize(runs: list[dict]) -> dict:
    """Medians over runs: each system's goodput, and the ratios of the two tunnels."""
    out: dict = {}
    for system in dict.fromkeys(k for run in runs for k in run):
        recs = [run[system] for run in runs if system in run]
        out[system] = {
            "runs": len(recs),
            "errors": sum(bool(rec.get("error")) for rec in recs),
            "goodput_mbps": _median([rec.get("goodput_mbps") for rec in recs]),
        }
        for k in ("ratio_best_single", "best_single_mbps", "ratio_to_tcp_aggregate"):
            if any(k in rec for rec in recs):
                out[system][k] = _median([rec.get(k) for rec in recs])
        shares = [rec.get("link_share_down") or {} for rec in recs]
        out[system]["link_share_down"] = {
            n: _median([sh.get(n) for sh in shares])
            for n in dict.fromkeys(k for sh in shares for k in sh)
        }
        ro = [rec.get("reorder") or {} for rec in recs]
        if any(ro):
            out[system]["reorder"] = {
                k: _median([x.get(k) for x in ro])
                for k in ("held_fraction", "reorder_density", "mean_occupancy")
            } | {
                k: _median([x.get("deltas", {}).get(k) for x in ro])
                for k in ("skipped_gaps", "late", "lost_skips")
            }
            out[system]["sender"] = {
                k: _median([(rec.get("sender") or {}).get(k) for rec in recs])
                for k in SENDER_COUNTERS
            }
    return out


def table(results: list[dict]) -> None:
    print(f"\n{'case':20} {'QUIC agg':>9} {'QUIC best1':>10} {'/best':>6} {'TCP agg':>8} "
          f"{'TCP best1':>9} {'/best':>6} {'QUIC/TCP':>8}")  # fmt: skip
    for c in results:
        if c.get("error"):
            print(f"{c['name']:20} FAILED: {c['error'][:200]}")
            continue
        q, t = c["summary"]["quic-aggregate"], c["summary"]["tcp-aggregate"]

        def f(x: float | None, w: int, p: int) -> str:
            return f"{x:{w}.{p}f}" if x is not None else "-".rjust(w)

        print(
            f"{c['name']:20} {f(q['goodput_mbps'], 9, 1)} {f(q['best_single_mbps'], 10, 1)} "
            f"{f(q['ratio_best_single'], 6, 2)} {f(t['goodput_mbps'], 8, 1)} "
            f"{f(t['best_single_mbps'], 9, 1)} {f(t['ratio_best_single'], 6, 2)} "
            f"{f(q['ratio_to_tcp_aggregate'], 8, 2)}"
        )


def plot(results: list[dict]):  # noqa: ANN201
    fig, (ax,) = figure(1, width=10, height=4.5)
    ok = [c for c in results if not c.get("error")]
    bars = (("quic-aggregate", "goodput_mbps", "QUIC via aggregate"),
            ("quic-aggregate", "best_single_mbps", "QUIC best link alone"),
            ("tcp-aggregate", "goodput_mbps", "TCP via aggregate"),
            ("tcp-aggregate", "best_single_mbps", "TCP best link alone"))  # fmt: skip
    w = 0.2
    for j, (system, key, lbl) in enumerate(bars):
        ys = [c["summary"][system].get(key) or 0 for c in ok]
        ax.bar([i + (j - 1.5) * w for i in range(len(ok))], ys, w, label=lbl)
    ax.set_xticks(range(len(ok)), [c["name"] for c in ok], fontsize=8)
    ax.set_ylabel("goodput, Mbit/s (download)")
    ax.set_title("QUIC (quic-go) and TCP through multihome aggregate vs the best link alone")
    ax.legend(fontsize=8)
    return fig


def main(runs: int | None = None, seconds: float | None = None, only: list[str] | None = None):
    """Fixed cases and the two trace pairs (``only``: names, or ``fixed`` / ``traces``)."""
    sc = load("aggregate")
    seconds = seconds or SECONDS
    runs = runs or 1
    cases, pairs = select(sc, only)
    if not only or "traces" in only:
        pairs = [p for p in pairs if p["name"] in PAIRS]
    info = quic_tool.ensure_installed()
    progress(f"quic: {info['implementation']} {info['version']}, {info['congestion_control']}; "
             f"{len(cases)} cases + {len(pairs)} trace pairs x {runs} runs, {seconds:g} s "
             "per transfer, download srv -> cli")  # fmt: skip
    results: list[dict] = []
    for item, fn in [*((c, run_case) for c in cases), *((p, run_pair) for p in pairs)]:
        progress(f"case {item['name']}")
        try:
            results.append(fn(sc, item, seconds, runs))
        except TracesUnavailable as exc:
            progress(f"{item['name']} skipped: {exc}")
        except LabError as exc:
            progress(f"{item['name']} failed: {exc}")
            results.append({"name": item["name"], "error": str(exc)[-2000:]})
    quick = bool(only) or seconds < SECONDS
    data = {
        "params": {
            "seconds": seconds,
            "runs": runs,
            "direction": "download srv -> cli",
            "tcp_cc": sc.bench["cc"],
            "sizing_seconds": SIZING_S,
        },  # fmt: skip
        "quic": info,
        "cases": results,
    }
    save("quic-quick" if quick else "quic", data, plot(results))
    table(results)
