"""The thesis's evaluation reproduced on emulated links (``python -m lab.race.experiment``).

Role: for each configuration — wired+wired (low Bernoulli loss), wireless+wireless
(Gilbert-Elliott bursty loss on both, one uplink better on average), wired+wireless — build
the race topology with ``linkem`` on both access links, fetch a few thousand objects over every
uplink (the dataset), evaluate the predictors offline (:mod:`lab.race.evaluate`: CDF tails,
availability, uplink shares) and, with ``--live``, run race, avmet, static, probe and stagger
in ``multihome race`` on wireless+wireless with the LAN host fetching through the gateway, each
on a fresh topology. Writes ``bench/results/race-eval-<config>.json`` with a CDF-tail plot
(``.png``) and the dataset the offline evaluation replayed (``-dataset.jsonl.gz``).
:func:`run` and :func:`finish` are the machinery :mod:`lab.race.traces` reuses for its
real-trace configurations (and uploads).

Uplink 0 is always the *worse* one, so a predictor that only trusts its initial tie (ties go
to uplink 0) is visibly wrong; AvMet has to learn. The datasets are about 1500 objects, not the
thesis's 50 000, so AvMet's α is 0.99 (≈ 100 connections of memory) in every configuration;
the delay D keeps the thesis's values (100 ms wired, 4.5 s wireless).
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lab.netns import Lab
from lab.race.evaluate import evaluate, plot, shares, summary
from lab.race.topology import HTTP_PORT, ORIGIN, RaceTopology, UplinkSpec, gw_ip, tool_cmd_race
from lab.results import write_result
from lab.topology import multihome_binary


def ge(p: float, r: float, bad: float, good: float) -> dict:
    """Gilbert-Elliott loss: long-run (p·bad + r·good)/(p+r), bursts of 1/r frames."""
    return {"p": p, "r": r, "loss_bad": bad, "loss_good": good}


WIRED_FAST = {"both": {"delay": "8ms", "jitter": "1ms", "rate": "50mbit", "loss": 0.002}}
WIRED_DSL = {"both": {"delay": "15ms", "jitter": "2ms", "rate": "10mbit", "loss": 0.003}}
# Both wireless links have the same base delay and a jitter of the same order, so a handshake
# time says little about which link is better; the better one has 4x the rate and about a
# sixth of the (bursty) loss, so it still wins more races on average.
WIRELESS_GOOD = {
    "both": {
        "delay": "10ms",
        "jitter": "8ms",
        "rate": "20mbit",
        "loss": ge(0.005, 0.2, 0.5, 0.002),
    }
}
WIRELESS_BAD = {
    "both": {"delay": "10ms", "jitter": "8ms", "rate": "5mbit", "loss": ge(0.02, 0.15, 0.6, 0.01)}
}
WIRED_CABLE = {"both": {"delay": "10ms", "jitter": "1ms", "rate": "20mbit", "loss": 0.001}}

CONFIGS: dict[str, tuple[list[UplinkSpec], int]] = {
    # name: ([worse uplink, better uplink], AvMet delay in ms)
    "wired-wired": ([UplinkSpec("dsl", WIRED_DSL), UplinkSpec("campus", WIRED_FAST)], 100),
    "wireless-wireless": (
        [
            UplinkSpec("gw_dsl", WIRELESS_BAD, offloads=False),
            UplinkSpec("gw_mit", WIRELESS_GOOD, offloads=False),
        ],
        4500,
    ),
    "wired-wireless": (
        [UplinkSpec("wireless", WIRELESS_BAD, offloads=False), UplinkSpec("dsl", WIRED_CABLE)],
        100,
    ),
}


def predictors(delay_ms: int, alpha: float = 0.99) -> dict[str, dict]:
    return {
        "race": {"predictor": "race"},
        "avmet": {"predictor": "avmet", "avmet_alpha": alpha, "avmet_delay_ms": delay_ms},
        "probe": {"predictor": "probe"},
        "stagger": {"predictor": "stagger", "stagger_delay_ms": 250},
    }


def collect(
    topo: RaceTopology, out: Path, count: int, rate: float, *, seed: int, upload: bool = False
) -> dict:
    uplinks = [f"--uplink=u{i}={gw_ip(i)}" for i in range(len(topo.uplinks))]
    cmd = tool_cmd_race(
        "fetch",
        "dataset",
        "--host",
        ORIGIN,
        "--port",
        str(HTTP_PORT),
        "--count",
        str(count),
        "--rate",
        str(rate),
        "--seed",
        str(seed),
        "--out",
        str(out),
        # Enough threads that a stalled uplink's fetches never delay another uplink's start.
        "--workers",
        "256",
        *uplinks,
        *(["--upload"] if upload else []),
    )
    res = topo.gw.run(cmd, timeout=count / rate + 400)
    return json.loads(res.stdout.strip().splitlines()[-1][len("RESULT ") :])


def live_shares(status: dict) -> dict[str, float]:
    """Fraction of the races each uplink carried, from the daemon's counters."""
    ups = status.get("uplinks", [])
    total = sum(u["chosen"] for u in ups) or 1
    return {u["name"]: u["chosen"] / total for u in ups}


@dataclass
class Run:
    """One configuration's run: its uplinks, AvMet's parameters and the workload."""

    specs: list[UplinkSpec]
    delay_ms: int
    alpha: float = 0.99
    upload: bool = False
    count: int = 1500
    rate: float = 10.0
    live_count: int = 400
    notes: dict = field(default_factory=dict)
    # More predictor configurations replayed offline only (name: [race] keys).
    extra_predictors: dict = field(default_factory=dict)
    # Judges a result before it is written, given the dataset file and the predictors
    # replayed; the keys it returns are added to the result.
    checks: Callable[[dict, Path, dict], dict] | None = None


def live(specs: list[UplinkSpec], best: str, cfg: Run, binary: Path) -> dict:
    """Each predictor running in the daemon, the LAN host fetching (or uploading) through it.

    Every predictor gets a fresh topology, so each sees the same stretch of a trace-driven
    link (linkem starts its traces with the topology) and the same loss draws."""
    runs = {
        "race": {},
        "avmet": {"avmet_alpha": cfg.alpha, "avmet_delay_ms": cfg.delay_ms},
        "static": {"static_uplink": best},
        "probe": {"probe_target": f"{ORIGIN}:{HTTP_PORT}", "probe_interval_ms": 1000},
        "stagger": {"stagger_delay_ms": 250},
    }
    out = {}
    for name, extra in runs.items():
        with Lab() as lab:
            topo = RaceTopology(lab, specs, binary=binary)
            topo.start_origin()
            topo.start_race(name, **extra)
            time.sleep(2 if name == "probe" else 0.2)  # a few probes before the first fetch
            path = lab.dir / f"live-{name}.jsonl"
            cmd = [
                *("fetch", "live", "--host", ORIGIN, "--count", str(cfg.live_count)),
                *("--rate", str(cfg.rate), "--seed", "11", "--out", str(path), "--workers", "256"),
                *(["--upload"] if cfg.upload else []),
            ]
            topo.lan.run(tool_cmd_race(*cmd), timeout=cfg.live_count / cfg.rate + 400)
            rows = [json.loads(x) for x in path.read_text().splitlines()]
            times = [r["total"] if r["status"] == "ok" else None for r in rows]
            status = topo.status()
            out[name] = {**summary(times), "shares": live_shares(status), "status": status}
            topo.stop_race()
        print(f"  live {name}: done", flush=True)
    return out


def run(name: str, cfg: Run, *, with_live: bool) -> dict:
    """Dataset, offline evaluation and (``with_live``) the live runs of one configuration;
    writes ``bench/results/race-eval-<name>.json`` with its plot and dataset; returns the
    result."""
    binary = multihome_binary()
    with Lab() as lab:
        topo = RaceTopology(lab, cfg.specs, binary=binary)
        topo.start_origin()
        dataset = lab.dir / f"{name}.jsonl"
        t0 = time.monotonic()
        collected = collect(topo, dataset, cfg.count, cfg.rate, seed=3, upload=cfg.upload)
        print(f"{name}: dataset {collected} in {time.monotonic() - t0:.0f} s", flush=True)
        text = dataset.read_text()
    live_of = (lambda best: live(cfg.specs, best, cfg, binary)) if with_live else None
    return finish(name, cfg, text, live_of=live_of)


def finish(
    name: str,
    cfg: Run,
    text: str,
    *,
    live_of: Callable[[str], dict] | None = None,
    live_results: dict | None = None,
    live_revision: str | None = None,
    write_dataset: bool = True,
) -> dict:
    """Offline evaluation of the dataset ``text``, the live runs (``live_of(static best)``,
    or earlier ``live_results`` from ``live_revision``), checks, result file, plot, dataset."""
    binary = multihome_binary()
    names = [s.name for s in cfg.specs]
    what = "upload" if cfg.upload else "download"
    with tempfile.TemporaryDirectory(prefix="race-eval-") as tmp:
        dataset = Path(tmp) / f"{name}.jsonl"
        dataset.write_text(text)
        preds = {**predictors(cfg.delay_ms, cfg.alpha), **cfg.extra_predictors}
        curves, choices = evaluate(binary, dataset, names, preds, Path(tmp))
        results = {
            k: {**summary(v), "shares": shares(choices[k], names)} for k, v in curves.items()
        }
        best = next(k for k in curves if k.startswith("static best"))[13:-1]
        if live_of is not None:
            live_results = live_of(best)
        data = {
            "bench": "race-eval",
            "config": name,
            "direction": what,
            "links": {s.name: _public(s.linkem) for s in cfg.specs},
            "objects": cfg.count,
            "rate_per_s": cfg.rate,
            "avmet": {"alpha": cfg.alpha, "delay_ms": cfg.delay_ms},
            "notes": cfg.notes,
            "offline": results,
            "live": live_results,
            **({"live_revision": live_revision} if live_revision else {}),
        }
        if cfg.checks is not None:
            data |= cfg.checks(data, dataset, preds)
    path = write_result(f"race-eval-{name}", data)
    title = f"{name}: upper 10 % of the {what}-time CDF"
    plot(curves, title, path.with_suffix(".png"), xlabel=f"{what} time (s)")
    if write_dataset:
        with gzip.open(path.parent / f"{path.stem}-dataset.jsonl.gz", "wt") as f:
            f.write(text)
    print(f"wrote {path}")
    print_table(results, live_results)
    return data


def _public(config: object) -> object:
    """A linkem config as recorded in results: trace files by name, not by machine path."""
    if isinstance(config, dict):
        return {k: _public(v) for k, v in config.items()}
    if isinstance(config, str) and config.startswith("trace:"):
        return "trace:" + Path(config[len("trace:") :]).name
    return config


def print_table(results: dict, live_results: dict | None) -> None:
    for k, v in results.items():
        a = v["availability"]
        sh = " ".join(f"{n}:{x:.2f}" for n, x in v["shares"].items())
        print(
            f"  {k:24} 2s {a['2s']:.4f} 10s {a['10s']:.4f} 180s {a['180s']:.4f}  "
            f"p50 {_f(v['p50_s'])} p95 {_f(v['p95_s'])} p99 {_f(v['p99_s'])}  {sh}"
        )
    for k, v in (live_results or {}).items():
        sh = " ".join(f"{n}:{x:.2f}" for n, x in v["shares"].items())
        print(
            f"  live {k:19} p50 {_f(v['p50_s'])} p95 {_f(v['p95_s'])} p99 {_f(v['p99_s'])} "
            f"avail10 {v['availability']['10s']:.4f}  {sh}"
        )


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def run_config(name: str, count: int, rate: float, with_live: bool, live_count: int) -> None:
    specs, delay_ms = CONFIGS[name]
    cfg = Run(specs, delay_ms, count=count, rate=rate, live_count=live_count)
    run(name, cfg, with_live=with_live)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=[*CONFIGS, "all"], default="all")
    parser.add_argument("--count", type=int, default=1500)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--live", action="store_true", help="also the live run (wireless+wireless)")
    parser.add_argument("--live-count", type=int, default=400)
    args = parser.parse_args()
    names = list(CONFIGS) if args.config == "all" else [args.config]
    for name in names:
        run_config(
            name, args.count, args.rate, args.live and name == "wireless-wireless", args.live_count
        )


if __name__ == "__main__":
    main()
