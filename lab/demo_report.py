"""The demo's report: a markdown summary and three plots (PNG and SVG) in one folder.

Role: turn the dictionary :func:`lab.demo.run` measured into ``report.md`` (which opens with the
one line that matters, :func:`headline`, and the per-link picture), ``summary.json``,
``links.{png,svg}`` (per-link download rate over the whole demo, from the status deltas),
``failover.{png,svg}`` (goodput in 100 ms bins while LTE fails and returns) and
``voip.{png,svg}`` (one-way latency of every VoIP packet, lost ones marked).

Invariant: every number in report.md is computed from the same data saved in summary.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _save(fig: plt.Figure, out_dir: Path, name: str) -> None:
    fig.tight_layout()
    fig.savefig(out_dir / f"{name}.png", dpi=110)
    fig.savefig(out_dir / f"{name}.svg")
    plt.close(fig)


def plot_links(out_dir: Path, d: dict) -> None:
    fig, ax = plt.subplots(figsize=(9, 3.5))
    samples = d["monitor"]
    names = list(samples[0]["links"]) if samples else []
    ts = [s["t"] for s in samples]
    ys = [[s["links"].get(n, {}).get("down", 0.0) for s in samples] for n in names]
    if names:
        ax.stackplot(ts, ys, labels=names, alpha=0.8)
    ev = d["events"]
    for key, label in (("bulk_start", "bulk"), ("fail_start", "VoIP + bulk")):
        if key in ev:
            ax.axvline(ev[key], color="k", lw=0.6, ls=":")
            ax.text(ev[key], ax.get_ylim()[1] * 0.95, f" {label}", fontsize=8, va="top")
    if "lte_down" in ev:
        ax.axvspan(ev["lte_down"], ev.get("lte_up", ts[-1] if ts else 0), color="red", alpha=0.1)
        ax.text(ev["lte_down"], 1, " LTE down", color="red", fontsize=8)
    ax.set_xlabel("time since start of the demo (s)")
    ax.set_ylabel("download per link (Mbit/s)")
    ax.set_title("per-link throughput (tunnel bytes, multihome status, 1 s)")
    ax.legend(loc="upper right", fontsize=8)
    _save(fig, out_dir, "links")


def plot_failover(out_dir: Path, d: dict) -> None:
    fig, ax = plt.subplots(figsize=(9, 3.5))
    t, m = zip(*d["fail_series"], strict=True) if d["fail_series"] else ((), ())
    ax.plot(t, m, lw=0.8, label="bulk download goodput (iperf3, 100 ms bins)")
    f = d["fail"]
    ax.axvspan(f["down_at_s"], f["up_at_s"], color="red", alpha=0.1, label="LTE down")
    ax.axhline(d["alone_mbps"]["dsl"], color="grey", ls="--", lw=0.8, label="DSL alone")
    ax.set_xlabel("time since start of step 4 (s)")
    ax.set_ylabel("Mbit/s")
    ax.set_title(f"failover: longest gap {f['gap_s']:.1f} s (under 10 % of DSL alone)")
    ax.legend(fontsize=8)
    _save(fig, out_dir, "failover")


def plot_voip(out_dir: Path, d: dict) -> None:
    fig, ax = plt.subplots(figsize=(9, 3.5))
    pk = d["voip"]["packets"]
    if pk:
        ax.scatter([p[1] for p in pk], [p[2] for p in pk], s=3, label="one-way latency")
    got = {p[0] for p in pk}
    n = d["voip"]["expected"]
    lost = [i / 50 for i in range(n) if i not in got]
    if lost:
        ax.scatter(lost, [0] * len(lost), marker="|", color="red", s=80, label="lost")
    f = d["fail"]
    ax.axvspan(f["down_at_s"], f["up_at_s"], color="red", alpha=0.1, label="LTE down")
    ax.set_xlabel("send time since start of step 4 (s)")
    ax.set_ylabel("one-way latency (ms)")
    ax.set_title("VoIP-like stream, policy redundant (50 packets/s)")
    ax.legend(fontsize=8)
    _save(fig, out_dir, "voip")


def headline(d: dict) -> str:
    """The one line that matters: bonded vs each link alone, the failover gap, VoIP loss."""
    a, f, v = d["alone_mbps"], d["fail"], d["voip"]
    return (
        f"Bonded {d['bonded_mbps']:.1f} Mbit/s vs DSL alone {a['dsl']:.1f} and LTE alone "
        f"{a['lte']:.1f} ({d['bonded_mbps'] / sum(a.values()):.2f} x the sum); "
        f"LTE cut: longest gap {f['gap_s']:.1f} s; VoIP lost {v['lost']} of "
        f"{v['expected']} packets ({v['loss']:.2%})"
    )


def markdown(d: dict) -> str:
    a, f, v = d["alone_mbps"], d["fail"], d["voip"]
    lat = v["latency_ms_all"]
    best_alone = max(a.values())
    resumed = (
        f"{f['lte_resumed_after_s']:.0f} s"
        if f.get("lte_resumed_after_s") is not None
        else f"not within the {f['lte_observed_after_up_s']:.0f} s observed"
    )
    return f"""# multihome demo — revision {d["revision"]}{" (dirty tree)" if d["dirty"] else ""}

**{headline(d)}**

![per-link throughput](links.png)

Emulated home: lab/scenarios/{d.get("scenario", "home")}.toml (the default, home: DSL 20/5
Mbit/s constant, 10 ms each way; LTE a synthetic trace, 30/8 Mbit/s mean with short outages,
30 ms ± 3 ms). Bulk TCP: iperf3 -C {d["cc"]}, download. Policy: UDP port 5004 redundant,
everything else aggregate.

## Each link alone vs bonded (download)

Each link alone and the bonded download meet the same 15 s of the links' traces (restarted
from their time zero before each run), and each figure is the mean of 100 ms bins after 2 s.

| | Mbit/s |
|---|---|
| DSL alone (bare link, no tunnel) | {a["dsl"]:.1f} |
| LTE alone (bare link, no tunnel) | {a["lte"]:.1f} |
| sum of the links alone | {sum(a.values()):.1f} |
| **bonded through multihome** (mean of 100 ms bins after 2 s) | **{d["bonded_mbps"]:.1f}** |
| bonded / best link alone | {d["bonded_mbps"] / best_alone:.2f} |
| bonded / sum of the links alone | {d["bonded_mbps"] / sum(a.values()):.2f} |

## LTE fails and comes back (bulk download + VoIP at the same time)

| | |
|---|---|
| LTE down / back at (s into step 4) | {f["down_at_s"]:.1f} / {f["up_at_s"]:.1f} |
| goodput before / during / after (Mbit/s) | {f["before_mbps"]:.1f} / {f["during_mbps"]:.1f} \
/ {f["after_mbps"]:.1f} |
| longest gap (100 ms bins under 10 % of DSL alone) | {f["gap_s"]:.1f} s |
| longest gap with no data at all | {f["zero_gap_s"]:.1f} s |
| LTE carrying download again after it returned | {resumed} |

![failover](failover.png)

## VoIP-like stream (redundant policy, 50 packets/s of 172 bytes, LAN -> origin)

| | |
|---|---|
| packets sent / received / lost | {v["expected"]} / {v["received"]} / {v["lost"]} \
({v["loss"]:.2%}) |
| lost from 0.5 s before to 3 s after the LTE cut | {v["lost_around_failover"]} |
| duplicates delivered to the application | {v["duplicates"]} |
| one-way latency p50 / p99 / max | {lat["p50"]:.1f} / {lat["p99"]:.1f} / {lat["max"]:.1f} ms |

![VoIP latency](voip.png)
"""


def write_report(out_dir: Path, d: dict) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").write_text(json.dumps(d, indent=1, default=str) + "\n")
    plot_links(out_dir, d)
    plot_failover(out_dir, d)
    plot_voip(out_dir, d)
    report = out_dir / "report.md"
    report.write_text(markdown(d))
    return report
