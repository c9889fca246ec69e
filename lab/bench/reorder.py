"""Suite ``reorder``: reordering is not loss (issue 19) — goodput and resends on links that reorder.

Role: the lab figure beside the deterministic tests of RACK-style loss declaration
(crates/proto/src/path/gaps.rs; crates/proto/src/endpoint/tests/reordering.rs,
crates/sim/tests/reordering.rs). Two links of ``RATE_MBIT`` Mbit/s, ``DELAYS_MS`` one way,
drop-tail queues of 50 ms, on the aggregate scenario's links a and b (lab/scenarios/
aggregate.toml); each link's linkem adds uniform jitter of ±J ms with ``reorder = true``
(frames overtake each other, as on Wi-Fi and load-balanced routes) for J in ``JITTERS_MS``,
with and without ``LOSS`` random loss on both links. Per case one topology, and through it in
turn one CUBIC upload (``cli`` -> ``srv``) of ``--seconds`` per policy in ``POLICIES`` (both
daemons restarted between policies, the links stay).

Beside them, as the peer in the same run, plain TCP over link a alone (the link ``best``
picks), no tunnel: what the link's reordering and losses do to a TCP that sees them raw
(``best`` paces TCP on that link, orders it and repairs what the link loses, as ``aggregate``
does on every link).

Reported per flow: goodput; packets the client sent again (``repaired`` on the server's NACK
plus ``reinjected`` from a path judged failing, deltas of the client's counters) against the
packets the links really lost upstream (linkem's ``dropped_loss`` + ``dropped_queue`` of the
``a2b`` direction, deltas); the server's declared losses, spurious declarations and the
reorder windows it learned; the inner TCP's retransmissions and the duplicates the server
discarded.

Bars (issue 19): goodput >= 0.95 of the same policy's goodput without jitter at the same loss
(``ratio_to_no_reorder``), and resent <= 2 x really lost (``resent_over_lost``).

Usage (root, ~9 min with the defaults: 24 flows of 15 s)::

    .venv/bin/python -m lab.bench reorder [--runs N] [--seconds S]

Invariants: every policy of a case crosses the same linkem processes; counters are deltas of
snapshots taken around each transfer; with ``--runs`` > 1 the summary holds medians.
"""

from __future__ import annotations

import statistics
import time

from lab.bench.aggregate import next_port, subset
from lab.bench.aggregate_run import measure
from lab.bench.common import figure, progress, save
from lab.netns import Lab, LabError
from lab.scenario import load
from lab.topology import Topology

RATE_MBIT = 60
DELAYS_MS = (10, 20)
QUEUE_BYTES = RATE_MBIT * 1_000_000 // 8 * 50 // 1000  # 50 ms at the link rate
JITTERS_MS = (0, 2, 5, 10)
LOSS = 0.01
POLICIES = ("aggregate", "best")
SECONDS = 15.0
RATIO_BAR = 0.95
RESEND_BAR = 2.0


def set_policy(topo: Topology, policy: str) -> None:
    """(Re)start both daemons with the client's default policy set to ``policy``."""
    # ``measure`` asks for the earliest scheduler: set here, it restarts nothing there (a
    # restart there would reset the counters snapshotted around the flow).
    topo.reconfigure(policy=policy, client_extra={"aggregate_scheduler": "earliest"})


def link_drops(topo: Topology) -> int:
    """Frames the links dropped so far upstream (``a2b``: cli -> srv), loss and full queue."""
    total = 0
    for link in topo.emulated.values():
        up = link.stats()["a2b"]
        total += up["dropped_loss"]["frames"] + up["dropped_queue"]["frames"]
    return total


def server_paths(topo: Topology) -> list[dict]:
    sess = topo.session("server") or {}
    return sess.get("links", [])


def one_flow(topo: Topology, policy: str, seconds: float) -> dict:
    """One upload through ``policy``: goodput, resends against real losses, RACK's counters."""
    set_policy(topo, policy)
    c0, d0 = topo.counters("client"), link_drops(topo)
    tx0 = (topo.session("client") or {}).get("tx_ip_packets", 0)
    s0 = {p["name"]: p for p in server_paths(topo)}
    srv0 = topo.counters("server")
    rec = measure(topo, "multihome", seconds=seconds, port=next_port(), scheduler="earliest")
    c1, d1, srv1 = topo.counters("client"), link_drops(topo), topo.counters("server")
    s1 = server_paths(topo)

    def delta(key: str) -> int:
        return sum(p.get(key, 0) - s0.get(p["name"], {}).get(key, 0) for p in s1 if key in p)

    resent = sum(c1.get(k, 0) - c0.get(k, 0) for k in ("repaired", "reinjected"))
    sent = (topo.session("client") or {}).get("tx_ip_packets", 0) - tx0
    lost = d1 - d0
    return {
        "policy": policy,
        "goodput_mbps": rec["goodput_mbps"],
        "goodput_after_2s_mbps": rec.get("goodput_after_2s_mbps"),
        "error": rec.get("error"),
        "resent": resent,
        "repaired": c1.get("repaired", 0) - c0.get("repaired", 0),
        "reinjected": c1.get("reinjected", 0) - c0.get("reinjected", 0),
        "lost": lost,
        "packets_sent": sent,
        "resent_per_10k": resent * 1e4 / sent if sent else None,
        "resent_over_lost": resent / lost if lost else (0.0 if resent == 0 else None),
        "declared_lost": delta("rx_declared_lost"),
        "spurious_lost": delta("rx_spurious_losses"),
        "rx_reordered": delta("rx_reordered"),
        "rx_duplicates": srv1.get("rx_duplicates", 0) - srv0.get("rx_duplicates", 0),
        "reorder_window_ms": {p["name"]: p.get("reorder_window_ms") for p in s1},
        "retransmissions": rec["retransmissions"],
        "rtt_during_median_ms": rec["rtt"]["during_median_ms"],
        "skipped_gaps": (rec.get("reorder") or {}).get("deltas", {}).get("skipped_gaps"),
    }


def plain_flow(topo: Topology, seconds: float) -> dict:
    """Plain TCP over link a alone (the link ``best`` picks), no tunnel: the peer."""
    d0 = link_drops(topo)
    rec = measure(topo, "tcp:0", seconds=seconds, port=next_port())
    return {
        "policy": "tcp-a",
        "goodput_mbps": rec["goodput_mbps"],
        "goodput_after_2s_mbps": rec.get("goodput_after_2s_mbps"),
        "error": rec.get("error"),
        "lost": link_drops(topo) - d0,
        "retransmissions": rec["retransmissions"],
        "rtt_during_median_ms": rec["rtt"]["during_median_ms"],
    }


def run_case(jitter_ms: int, loss: float, seconds: float, runs: int) -> list[dict]:
    sc = subset(load("aggregate"), 2)
    overrides = {
        lk["name"]: {
            "rate": f"{RATE_MBIT}mbit",
            "delay": f"{d}ms",
            "queue_bytes": QUEUE_BYTES,
        }
        | ({"jitter": f"{jitter_ms}ms", "reorder": True} if jitter_ms else {})
        | ({"loss": loss} if loss else {})
        for lk, d in zip(sc.links, DELAYS_MS, strict=True)
    }
    out = []
    with Lab() as lab:
        topo = sc.topology(lab, overrides=overrides)
        try:
            for r in range(runs):
                for policy in POLICIES:
                    rec = {
                        "jitter_ms": jitter_ms,
                        "loss": loss,
                        "run": r,
                        **one_flow(topo, policy, seconds),
                    }
                    progress(
                        f"  jitter {jitter_ms:2d} ms loss {loss:.0%} {policy:9} run {r + 1}: "
                        f"{rec['goodput_mbps']:6.1f} Mbit/s, resent {rec['resent']:5d}, "
                        f"lost {rec['lost']:5d}, declared {rec['declared_lost']:5d} "
                        f"(spurious {rec['spurious_lost']}), windows {rec['reorder_window_ms']}"
                        + (f"  ERROR {str(rec['error'])[:80]}" if rec["error"] else "")
                    )
                    out.append(rec)
                    time.sleep(1)
                rec = {"jitter_ms": jitter_ms, "loss": loss, "run": r, **plain_flow(topo, seconds)}
                progress(
                    f"  jitter {jitter_ms:2d} ms loss {loss:.0%} plain TCP, link a run {r + 1}: "
                    f"{rec['goodput_mbps']:6.1f} Mbit/s, lost {rec['lost']}, "
                    f"retransmissions {rec['retransmissions']}"
                )
                out.append(rec)
        finally:
            topo.stop()
    return out


def _median(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


SYSTEMS = (*POLICIES, "tcp-a")
KEYS = ("goodput_mbps", "resent", "lost", "packets_sent", "resent_per_10k", "declared_lost",
        "spurious_lost", "resent_over_lost", "retransmissions", "rx_duplicates")  # fmt: skip


def summarize(records: list[dict]) -> list[dict]:
    """Per (system, loss, jitter): medians, the ratio to jitter 0, and the two bars."""
    out = []
    for system in SYSTEMS:
        for loss in (0.0, LOSS):
            mine = [r for r in records if r["policy"] == system and r["loss"] == loss]
            base = _median([r["goodput_mbps"] for r in mine if r["jitter_ms"] == 0])
            for j in JITTERS_MS:
                rs = [r for r in mine if r["jitter_ms"] == j]
                if not rs:
                    continue
                s = {"policy": system, "loss": loss, "jitter_ms": j, "runs": len(rs)}
                s |= {k: _median([r.get(k) for r in rs]) for k in KEYS}
                g = s["goodput_mbps"]
                s["ratio_to_no_reorder"] = g / base if g is not None and base else None
                s["meets_goodput_bar"] = (
                    s["ratio_to_no_reorder"] >= RATIO_BAR if s["ratio_to_no_reorder"] else None
                )
                if s["resent"] is not None:
                    s["meets_resend_bar"] = s["resent"] <= RESEND_BAR * s["lost"]
                out.append(s)
    return out


COLORS = {"aggregate": "tab:blue", "best": "tab:orange", "tcp-a": "tab:green"}


def plot(summary: list[dict]):  # noqa: ANN201 - a matplotlib Figure
    fig, (ax_g, ax_r) = figure(ncols=2, width=12, height=4.5)
    for system in SYSTEMS:
        color = COLORS[system]
        for loss, style in ((0.0, "-"), (LOSS, "--")):
            rs = [s for s in summary if s["policy"] == system and s["loss"] == loss]
            if not rs:
                continue
            xs = [s["jitter_ms"] for s in rs]
            name = "plain TCP, link a" if system == "tcp-a" else system
            lab_ = f"{name}, loss {loss:.0%}"
            ax_g.plot(xs, [s["goodput_mbps"] for s in rs], style, marker="o", color=color,
                      label=lab_)  # fmt: skip
            if system == "tcp-a":
                continue
            ax_r.plot(xs, [s["resent"] for s in rs], style, marker="o", color=color,
                      label=f"resent, {lab_}")  # fmt: skip
            ax_r.plot(xs, [s["lost"] for s in rs], style, marker="x", color=color, alpha=0.4,
                      label=f"really lost, {lab_}")  # fmt: skip
    ax_g.set_xlabel("jitter that reorders, ± ms per link")
    ax_g.set_ylabel("goodput, Mbit/s")
    ax_g.set_title(f"one CUBIC upload, 2 x {RATE_MBIT} Mbit/s ({DELAYS_MS[0]}, {DELAYS_MS[1]} ms)",
                   fontsize=10)  # fmt: skip
    ax_g.set_ylim(bottom=0)
    ax_r.set_xlabel("jitter that reorders, ± ms per link")
    ax_r.set_ylabel("packets (upstream)")
    ax_r.set_title("packets resent vs really lost (linkem drops)", fontsize=10)
    ax_r.set_yscale("symlog", linthresh=10)
    for ax in (ax_g, ax_r):
        ax.set_xticks(JITTERS_MS)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="center left", framealpha=0.6)
    return fig


def _f(x: float | None, fmt: str) -> str:
    return format(x, fmt) if x is not None else "-".rjust(int(fmt.partition(".")[0]))


def table(summary: list[dict]) -> None:
    print(f"\n{'system':9} {'loss':>4} {'jit':>3} {'Mbit/s':>7} {'/j0':>5} {'resent':>7} "
          f"{'lost':>6} {'/10k':>6} {'decl':>6} {'spur':>5} {'retx':>5}  bars")  # fmt: skip
    for s in summary:
        bars = f"goodput {'ok' if s['meets_goodput_bar'] else 'NO'}"
        if "meets_resend_bar" in s:
            bars += f", resend {'ok' if s['meets_resend_bar'] else 'NO'}"
        print(
            f"{s['policy']:9} {s['loss']:4.0%} {s['jitter_ms']:3d} {_f(s['goodput_mbps'], '7.1f')} "
            f"{_f(s['ratio_to_no_reorder'], '5.2f')} {_f(s['resent'], '7.0f')} "
            f"{_f(s['lost'], '6.0f')} {_f(s['resent_per_10k'], '6.2f')} "
            f"{_f(s['declared_lost'], '6.0f')} {_f(s['spurious_lost'], '5.0f')} "
            f"{_f(s['retransmissions'], '5.0f')}  {bars}"
        )


def main(runs: int | None = None, seconds: float | None = None) -> dict:
    runs, seconds = runs or 1, seconds or SECONDS
    progress(
        f"reorder: jitter {JITTERS_MS} ms x loss (0, {LOSS:.0%}) x {POLICIES}, {runs} run(s), "
        f"{seconds:g} s per flow, 2 x {RATE_MBIT} Mbit/s ({DELAYS_MS} ms), upload cli -> srv"
    )
    records: list[dict] = []
    errors: list[dict] = []
    for loss in (0.0, LOSS):
        for j in JITTERS_MS:
            try:
                records += run_case(j, loss, seconds, runs)
            except LabError as exc:
                progress(f"jitter {j} ms loss {loss:.0%} failed: {exc}")
                errors.append({"jitter_ms": j, "loss": loss, "error": str(exc)[-2000:]})
    summary = summarize(records)
    params = {
        "rate_mbit": RATE_MBIT,
        "delays_ms": DELAYS_MS,
        "queue_bytes": QUEUE_BYTES,
        "jitters_ms": JITTERS_MS,
        "jitter": "uniform +-J ms per frame, reorder = true (linkem)",
        "loss": LOSS,
        "policies": POLICIES,
        "seconds": seconds,
        "runs": runs,
        "cc": "cubic",
        "direction": "upload cli -> srv",
        "bars": {"ratio_to_no_reorder": RATIO_BAR, "resent_over_lost": RESEND_BAR},
    }
    data = {"params": params, "records": records, "summary": summary, "errors": errors}
    save("reorder", data, plot(summary))
    table(summary)
    return data
