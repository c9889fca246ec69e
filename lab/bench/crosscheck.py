"""Suite ``crosscheck``: the same two-link scenario in the lab and in the simulator (issue 6).

Role: issue 6's fidelity check, "the same two-link scenario in the simulator and in the lab
gives goodput within 10 % of each other". One TCP flow (CUBIC) uploads ``cli`` -> ``srv`` for
20 s over link a (10 Mbit/s, 10 ms one way) and link b (5 Mbit/s, 30 ms), first in the lab
(lab/scenarios/crosscheck.toml: linkem links, the real daemons) through multihome
(``aggregate``, earliest scheduler) and as plain TCP over each link alone, then the same three
in ``multihome-sim`` (sim/scenarios/crosscheck.toml: the same core over linkem's pipeline, the
simulator's TCP model with CUBIC). It reports each system's goodput on both sides and the
ratio sim / lab; the plain-TCP pairs tell the link and TCP models apart from the tunnel.

Usage (root; ~3 min for the lab's 3 runs of 3 flows, the simulator takes a second)::

    .venv/bin/python -m lab.bench crosscheck [--runs N]
    .venv/bin/python -m lab.bench crosscheck --lab-from bench/results/crosscheck.json

``--lab-from`` reuses the lab runs of an earlier result (same scenario files) and runs only
the simulator: the way to work on the simulator's models against one lab measurement; the
result says which lab runs it used.

The simulator is ``$MULTIHOME_SIM_BIN`` or ``<target dir>/release/multihome-sim``
(``cargo build --release -p multihome-sim``); its per-run reports go to
sim/results/crosscheck/ as for any scenario.

Invariants: before anything runs, the two scenario files are checked to describe the same
links (rate, one-way delay, drop-tail queue per direction), TUN MTU, policy and scheduler, flow
direction, congestion control and length, and the same systems; a mismatch is an error, never
a comparison. Goodput is application bytes over the receiver's transfer time on both sides.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import subprocess
import time
import tomllib
from pathlib import Path

from lab.bench.aggregate_run import measure, set_scheduler
from lab.bench.common import progress, save
from lab.bench.crosscheck_plot import plot
from lab.netns import REPO_ROOT, Lab, LabError
from lab.scenario import Scenario, load
from lab.topology import TUN_MTU

# Lab system label -> the simulator's sweep value.
SYSTEMS = {"multihome": "multihome", "tcp:0": "tcp0", "tcp:1": "tcp1"}
_PORT = [9400]


def sim_binary() -> Path:
    """Where the simulator is: $MULTIHOME_SIM_BIN, else <target dir>/release/multihome-sim."""
    if os.environ.get("MULTIHOME_SIM_BIN"):
        return Path(os.environ["MULTIHOME_SIM_BIN"])
    target = os.environ.get("CARGO_TARGET_DIR") or str(REPO_ROOT / "target")
    return Path(target) / "release" / "multihome-sim"


def seconds_of(text: str) -> float:
    """``"20.5s"``, ``"10ms"`` -> seconds."""
    for unit, scale in (("ms", 1e-3), ("us", 1e-6), ("s", 1.0)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * scale
    raise LabError(f"duration {text!r}: expected s, ms or us")


def _link(params: dict) -> tuple:
    """A link's comparable parameters: (rate, one-way delay in s, queue bytes)."""
    return (params.get("rate"), seconds_of(params.get("delay", "0ms")), params.get("queue_bytes"))


def check_same(sc: Scenario, sim: dict) -> dict:
    """Raise unless the simulator's scenario is the lab's; return what both describe."""
    b = sc.bench
    errors = []
    lab_links = [_link(lk.get("linkem", {}).get("both", {})) for lk in sc.links]
    sim_links = [_link(lk["hops"][0].get("both", {})) for lk in sim.get("links", [])]
    if any(len(lk["hops"]) != 1 for lk in sim.get("links", [])):
        errors.append("every simulated link must be one hop, as a lab link is")
    if lab_links != sim_links:
        errors.append(f"links: lab {lab_links} vs sim {sim_links}")
    for lk in sc.links:
        extra = set(lk.get("linkem", {})) - {"both"}
        if extra:
            errors.append(f"lab link {lk['name']}: per-direction settings {sorted(extra)}")
    tunnel = sim.get("tunnel", {})
    lab_sched = sc.tunnel.get("client", {}).get("aggregate_scheduler", "earliest")
    checks = {
        "TUN MTU": (TUN_MTU, tunnel.get("mtu")),
        "policy": (sc.tunnel.get("policy", "aggregate"), tunnel.get("policy", "aggregate")),
        "scheduler": (lab_sched, tunnel.get("scheduler", "earliest")),
    }
    flows = sim.get("flows", [])
    if len(flows) != 1:
        errors.append(f"the simulator must run one flow, not {len(flows)}")
    else:
        f = flows[0]
        length = seconds_of(sim["duration"]) - seconds_of(f.get("start", "0.5s"))
        checks |= {
            "flow": (("bulk", "up"), (f.get("kind"), f.get("direction"))),
            "congestion control": (b["cc"], f.get("cc", "newreno")),
            "seconds": (float(b["seconds"]), round(length, 6)),
        }
    errors += [f"{k}: lab {a!r} vs sim {s!r}" for k, (a, s) in checks.items() if a != s]
    axes = {a["name"]: a for a in sim.get("sweep", [])}
    system = axes.get("system", {})
    if list(axes) != ["system"] or system.get("values") != list(SYSTEMS.values()):
        errors.append(f"the simulator's one sweep axis must be system = {list(SYSTEMS.values())}")
    else:
        enabled = system["set"].get("tunnel.enabled")
        alone = [_link(p) for p in system["set"].get("links.0.hops.0.both", [])]
        if enabled != [True, False, False] or alone != [lab_links[0], *lab_links[:2]]:
            errors.append("system axis: multihome over both links, tcp0/tcp1 over link a/b alone")
    if errors:
        raise LabError("crosscheck scenarios differ: " + "; ".join(errors))
    return {"links": lab_links, **{k: a for k, (a, _) in checks.items()}}


def run_lab(sc: Scenario, runs: int) -> dict[str, list[dict]]:
    """``runs`` rounds of multihome, tcp:0, tcp:1 on one topology; records per system."""
    b = sc.bench
    out: dict[str, list[dict]] = {lab_: [] for lab_ in SYSTEMS}
    with Lab() as lab:
        topo = sc.topology(lab)
        set_scheduler(topo, sc.tunnel.get("client", {}).get("aggregate_scheduler", "earliest"))
        for r in range(runs):
            for system in SYSTEMS:
                _PORT[0] += 1
                rec = measure(
                    topo,
                    system,
                    seconds=b["seconds"],
                    port=_PORT[0],
                    scheduler="earliest" if system == "multihome" else None,
                    cc=b["cc"],
                )
                rec.pop("rtt", None)  # pings are not what this suite compares
                out[system].append(rec)
                err = f"  ERROR {str(rec['error'])[:80]}" if rec.get("error") else ""
                progress(
                    f"  lab run {r + 1}/{runs} {system:9} {rec['goodput_mbps']:6.2f} Mbit/s, "
                    f"retrans {rec['retransmissions']:4d}{err}"
                )
                time.sleep(1)
        topo.stop()
    return out


def run_sim(path: Path, link_names: list[str]) -> dict[str, dict]:
    """Run the simulator on ``path``; its figures per lab system label."""
    binary = sim_binary()
    if not binary.exists():
        raise LabError(f"{binary} not found: cargo build --release -p multihome-sim")
    out_root = REPO_ROOT / "sim" / "results"
    res = subprocess.run(
        [str(binary), "run", str(path), "--out", str(out_root)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0:
        raise LabError(f"multihome-sim failed ({res.returncode}): {res.stderr[-2000:]}")
    out = {}
    for label, value in SYSTEMS.items():
        runs = sorted((out_root / "crosscheck").glob(f"system={value}_s*.json"))
        if not runs:
            raise LabError(f"multihome-sim wrote no report for system={value}")
        reports = [json.loads(p.read_text()) for p in runs]
        flows = [r["flows"][0] for r in reports]
        out[label] = {
            "goodput_mbps": statistics.median(f["goodput_mbit"] for f in flows),
            "goodput_per_seed": [f["goodput_mbit"] for f in flows],
            "retransmissions": statistics.median(f["tcp"]["retransmits"] for f in flows),
            "timeouts": statistics.median(f["tcp"]["timeouts"] for f in flows),
            "link_share_up": _share(reports[0]["paths"], link_names)
            if label == "multihome"
            else None,
            "reports": [str(p.relative_to(REPO_ROOT)) for p in runs],
        }
    return out


def _share(paths: list[dict], names: list[str]) -> dict[str, float] | None:
    """Share of the upstream bytes per link, keyed by the lab's link names."""
    total = sum(p["up_bytes"] for p in paths)
    return {names[p["link"]]: p["up_bytes"] / total for p in paths} if total else None


def _mean_share(recs: list[dict]) -> dict[str, float] | None:
    shares = [r["link_share_up"] for r in recs if r.get("link_share_up")]
    if not shares:
        return None
    return {k: statistics.mean(s[k] for s in shares) for k in shares[0]}


def _binary_facts(path: Path) -> dict:
    st = path.stat()
    return {
        "path": str(path),
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(st.st_mtime)),
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest()[:16],
    }


def compare(lab: dict[str, list[dict]], sim: dict[str, dict], tolerance: float) -> dict:
    """Per system: lab median, sim figure, their ratio and whether it is within tolerance."""
    out = {}
    for label in SYSTEMS:
        good = [r["goodput_mbps"] for r in lab[label] if not r.get("error")]
        lab_med = statistics.median(good) if good else None
        s = sim[label]["goodput_mbps"]
        ratio = s / lab_med if lab_med else None
        out[label] = {
            "lab_goodput_mbps": lab_med,
            "lab_runs_mbps": good,
            "lab_retransmissions": statistics.median(r["retransmissions"] for r in lab[label]),
            "lab_link_share_up": _mean_share(lab[label]),
            "sim_goodput_mbps": s,
            "sim_retransmissions": sim[label]["retransmissions"],
            "sim_link_share_up": sim[label]["link_share_up"],
            "ratio_sim_to_lab": ratio,
            "within_tolerance": ratio is not None and abs(ratio - 1) <= tolerance,
        }
    return out


def reuse_lab(path: Path, described: dict) -> tuple[dict[str, list[dict]], int, dict]:
    """The lab runs of an earlier result, if it describes the same scenario."""
    old = json.loads(path.read_text())
    # JSON has lists where the check built tuples.
    if old["params"]["described"] != json.loads(json.dumps(described)):
        raise LabError(f"{path}: its lab runs are of a different scenario")
    lab = old["lab"]
    origin = {"file": str(path), "revision": old.get("revision"), "dirty": old.get("dirty")}
    return lab, len(lab["multihome"]), origin


def main(runs: int | None = None, lab_from: str | None = None) -> dict:
    """Run the lab side, then the simulator, and compare (the lab first: it is the slow part)."""
    sc = load("crosscheck")
    b = sc.bench
    runs = runs or b["runs"]
    sim_path = REPO_ROOT / b["sim_scenario"]
    described = check_same(sc, tomllib.loads(sim_path.read_text()))
    origin = None
    if lab_from:
        lab, runs, origin = reuse_lab(Path(lab_from), described)
        progress(f"crosscheck: lab runs from {lab_from}; simulator only")
    else:
        progress(
            f"crosscheck: {runs} lab runs x {len(SYSTEMS)} systems, {b['seconds']} s each, "
            f"upload cli -> srv, {b['cc']}; then {sim_path.relative_to(REPO_ROOT)}\n{sc.picture}"
        )
        lab = run_lab(sc, runs)
    sim = run_sim(sim_path, [lk["name"] for lk in sc.links])
    cmp = compare(lab, sim, b["tolerance"])
    data = {
        "params": {**b, "runs": runs, "direction": "upload cli -> srv", "described": described},
        "sim_binary": _binary_facts(sim_binary()),
        "lab_from": origin,
        "lab": lab,
        "sim": sim,
        "comparison": cmp,
        "passed": cmp["multihome"]["within_tolerance"],
    }
    save("crosscheck", data, plot(cmp, b["tolerance"]))
    print(f"\n{'system':10} {'lab Mbit/s':>11} {'sim Mbit/s':>11} {'sim/lab':>8}  retrans lab/sim")
    for label, c in cmp.items():
        lab_g = c["lab_goodput_mbps"]
        ratio = c["ratio_sim_to_lab"]
        print(
            f"{label:10} {lab_g if lab_g is not None else float('nan'):11.2f} "
            f"{c['sim_goodput_mbps']:11.2f} {ratio if ratio is not None else float('nan'):8.3f}"
            f"  {c['lab_retransmissions']:.0f}/{c['sim_retransmissions']:.0f}"
            + ("" if c["within_tolerance"] else "  (outside the tolerance)")
        )
    verdict = "within" if data["passed"] else "NOT within"
    print(f"\nmultihome: simulator {verdict} {b['tolerance']:.0%} of the lab")
    return data
