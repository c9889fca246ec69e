"""Offline evaluation of the race predictors on a fetch dataset (§4.1.1–4.4 of Rao,
"Gateway Selection in Multi-hop Wireless Networks", MIT M.Eng. thesis, 2005).

Role: replay a dataset written by ``lab.race.fetch dataset`` through ``multihome race
--replay`` once per predictor (the daemon's own sans-IO core, in virtual time), add the
single-link and *ideal* (fastest link per object) baselines, and produce the seed's outputs:
the upper tail of the CDF of download time (figures 4-2, 4-3, 4-6) and availability — the
fraction of objects fetched within 2 s, 10 s and 180 s (figures 4-7, 4-8) — plus p50/p95/p99.

Invariants: objects that no uplink fetched are excluded, as in the seed ("data points where
neither link could connect were excluded"); an object a predictor fails to fetch counts as
never fetched (infinite time). *Static best* is the single uplink with the best availability
within 10 s (ties: lower mean), chosen in hindsight as the seed's static best gateway is.

Usage: ``python -m lab.race.evaluate DATASET --uplinks a,b [--plot out.png]``.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
from pathlib import Path

import tomli_w

from lab.topology import multihome_binary

WINDOWS_S = (2.0, 10.0, 180.0)


def load(dataset: Path) -> tuple[list[dict], list[dict]]:
    objects, probes = [], []
    for line in dataset.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            (probes if "probe" in row else objects).append(row)
    return objects, probes


def replay(binary: Path, dataset: Path, uplinks: list[str], race: dict, work: Path) -> list:
    """Per object ``{"seconds", "uplink"}`` (None: not fetched) under the predictor configured
    by ``race``, in dataset order."""
    cfg = {
        "race": {"probe_target": "127.0.0.1:9", "seed": 1, **race},
        "uplink": [{"name": n, "interface": f"u{i}"} for i, n in enumerate(uplinks)],
    }
    path = work / f"replay-{race['predictor']}-{race.get('static_uplink', '')}.toml"
    path.write_text(tomli_w.dumps(cfg))
    res = subprocess.run(
        [str(binary), "race", "--config", str(path), "--replay", str(dataset)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
    return sorted(rows, key=lambda r: r["id"])


def link_times(objects: list[dict], i: int) -> list:
    return [o["links"][i]["total"] if o["links"][i]["status"] == "ok" else None for o in objects]


def summary(times: list) -> dict:
    n = len(times)
    done = sorted(t for t in times if t is not None)

    def pct(q: float) -> float | None:
        k = math.ceil(q * n) - 1
        return done[k] if 0 <= k < len(done) else None

    return {
        "objects": n,
        "fetched": len(done),
        "availability": {f"{w:g}s": sum(t <= w for t in done) / n for w in WINDOWS_S},
        "p50_s": pct(0.50),
        "p95_s": pct(0.95),
        "p99_s": pct(0.99),
        "mean_s": sum(done) / len(done) if done else None,
    }


def shares(choices: list, uplinks: list[str]) -> dict[str, float]:
    """Fraction of the objects carried by each uplink (objects not fetched count for none)."""
    n = len(choices) or 1
    return {name: sum(c == i for c in choices) / n for i, name in enumerate(uplinks)}


def evaluate(
    binary: Path, dataset: Path, uplinks: list[str], predictors: dict[str, dict], work: Path
) -> tuple[dict[str, list], dict[str, list]]:
    """Times per object for each predictor, each single link, static best and ideal, and the
    uplink index each of them used per object (None: not fetched)."""
    objects, _ = load(dataset)
    keep = [i for i, o in enumerate(objects) if any(lk["status"] == "ok" for lk in o["links"])]
    curves: dict[str, list] = {}
    choices: dict[str, list] = {}
    for i, name in enumerate(uplinks):
        curves[f"link {name}"] = link_times(objects, i)
        choices[f"link {name}"] = [i if t is not None else None for t in curves[f"link {name}"]]
    for name, race in predictors.items():
        rows = replay(binary, dataset, uplinks, race, work)
        curves[name] = [r["seconds"] for r in rows]
        choices[name] = [r["uplink"] for r in rows]
    per_link = list(zip(*(link_times(objects, i) for i in range(len(uplinks))), strict=True))
    curves["ideal"] = [min((t for t in ts if t is not None), default=None) for ts in per_link]
    choices["ideal"] = [
        min((i for i, t in enumerate(ts) if t is not None), key=lambda i: ts[i], default=None)
        for ts in per_link
    ]
    curves = {k: [v[i] for i in keep] for k, v in curves.items()}
    choices = {k: [v[i] for i in keep] for k, v in choices.items()}
    singles = [f"link {n}" for n in uplinks]
    best = max(
        singles,
        key=lambda k: (
            summary(curves[k])["availability"]["10s"],
            -(summary(curves[k])["mean_s"] or 1e9),
        ),
    )
    curves[f"static best ({best[5:]})"] = curves[best]
    choices[f"static best ({best[5:]})"] = choices[best]
    return curves, choices


def plot(
    curves: dict[str, list],
    title: str,
    path: Path,
    tail: float = 0.1,
    xlabel: str = "download time (s)",
) -> None:
    import matplotlib  # noqa: PLC0415 - only the plotting path needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, times in curves.items():
        if name.startswith("link "):
            continue
        n = len(times)
        done = sorted(t for t in times if t is not None)
        ys = [(k + 1) / n for k in range(len(done))]
        style = {"ideal": ":", "race": "-", "avmet": "-", "stagger": "-."}.get(
            name.split()[0], "--"
        )
        ax.step(done, ys, where="post", label=name, linestyle=style)
    ax.set_xscale("log")
    ax.set_ylim(1 - tail, 1.0)
    ax.set_xlim(0.01, 200)
    for w in WINDOWS_S:
        ax.axvline(w, color="grey", linewidth=0.5)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of objects fetched")
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(True, which="both", linewidth=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--uplinks", required=True, help="names, comma-separated, in order")
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args()
    uplinks = args.uplinks.split(",")
    preds = {
        "race": {"predictor": "race"},
        "avmet": {"predictor": "avmet"},
        "probe": {"predictor": "probe"},
        "stagger": {"predictor": "stagger"},
    }
    curves, choices = evaluate(
        multihome_binary(), args.dataset, uplinks, preds, args.dataset.parent
    )
    for name, times in curves.items():
        print(name, json.dumps({**summary(times), "shares": shares(choices[name], uplinks)}))
    if args.plot:
        plot(curves, args.dataset.name, args.plot)


if __name__ == "__main__":
    main()
