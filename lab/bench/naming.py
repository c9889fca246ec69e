"""Suite ``naming``: the name service's publish and lookup latency, and failover of clients.

Role: on lab/naming.py's topology,

1. *latency*: one server's resolver with the embedded store, then with a 3-member etcd
   cluster; ``multihome naming-load`` (crates/naming/src/load.rs) from a client namespace
   fills 10 000 identity records, then for ``seconds`` publishes 1 000 updates/s and looks up
   1 000 names/s, open loop, timing each request from send to answer (p50/p95/p99); at the
   end every record is looked up and compared with the last sequence number the resolver
   acknowledged (missing or older = *lost*). The etcd run kills the cluster's leader (SIGKILL
   by PID) halfway through. Raw path in the same run: the ping RTT between the load
   generator and the resolver (a lookup cannot be faster than one round trip).
2. *failover*: three servers sharing etcd, ``clients`` real clients (default 100) spread over
   them by the resolver's choice; the server with the most clients is killed; each client's
   failover time is from the kill to its log's next "session established=true" (its new
   session through another server), read from the log's timestamps.

Pass bars (issue 18): lookup p95 <= 5 ms on either store; every client back through another
server within 3 s, none left without one; 0 records lost when an etcd member dies. Anchors
from the MobilityFirst thesis (*Network-Assisted Multihoming for Emerging Heterogeneous
Wireless Access Scenarios*): GNRS updates and queries of 30-170 ms; DMap 50 ms mean, 100 ms
p95 over the Internet.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime

from lab.bench.common import figure, progress, save
from lab.naming import RESOLVER_PORT, NamingLab, server_ip, wait_for
from lab.netns import Lab, LabError

RECORDS, RATE, LOOKUP_RATE = 10_000, 1_000, 1_000
LOOKUP_P95_BAR_MS, FAILOVER_BAR_S = 5.0, 3.0
ANSI = re.compile(r"\x1b\[[0-9;]*m")
ANCHORS = {"gnrs_update_ms": [30, 170], "dmap_mean_ms": 50, "dmap_p95_ms": 100}


def ping_rtt_ms(nl: NamingLab) -> float:
    """Median ping RTT client namespace -> server 0 (the raw path of a request)."""
    out = nl.cli[0].run(["ping", "-c", "20", "-i", "0.02", "-q", server_ip(0)], timeout=30).stdout
    m = re.search(r"= [\d.]+/([\d.]+)/", out)
    return float(m.group(1)) if m else -1.0


def etcd_leader(nl: NamingLab) -> int:
    eps = ",".join(nl.etcd_endpoints())
    res = nl.srv[0].run(["etcdctl", f"--endpoints={eps}", "endpoint", "status", "-w", "json"])
    for j, st in enumerate(json.loads(res.stdout)):
        if st["Status"]["header"]["member_id"] == st["Status"]["leader"]:
            return j
    raise LabError("no etcd leader")


def latency(store: str, seconds: int, kill_leader: bool) -> dict:
    with Lab() as lab:
        nl = NamingLab(lab, servers=1, clients=1, store=store, lease_s=10)
        if store == "etcd":
            nl.start_etcd()
        nl.write_configs()
        nl.start_server(0)
        time.sleep(1)  # the resolver thread connects to its store
        rtt = ping_rtt_ms(nl)
        cmd = [str(nl.binary), "naming-load", "--resolver", f"{server_ip(0)}:{RESOLVER_PORT}"]
        cmd += ["--records", str(RECORDS), "--rate", str(RATE), "--lookup-rate", str(LOOKUP_RATE)]
        cmd += ["--seconds", str(seconds)]
        load = nl.cli[0].spawn(cmd, f"load-{store}")
        killed = None
        if kill_leader:
            # Kill once the timed phase (after the fill, which the load reports) is half over.
            wait_for(lambda: "filled" in load.output() or not load.alive(), 300, "load filled")
            time.sleep(seconds / 2)
            killed = etcd_leader(nl)
            progress(f"killing etcd member {killed} (the leader)")
            nl.kill_etcd(killed)
        load.wait(seconds + 600)
        result = json.loads(load.output().strip().splitlines()[-1])
        result |= {"store": store, "ping_rtt_ms": rtt, "killed_leader": killed}
        return result


def log_times(text: str, after: float, pattern: str) -> list[float]:
    """Unix times of log lines matching ``pattern`` at or after ``after``."""
    out = []
    for raw in text.splitlines():
        line = ANSI.sub("", raw)  # the daemons' log colours its fields
        if pattern not in line:
            continue
        stamp = line.split()[0]
        try:
            t = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
        except ValueError:
            continue
        if t >= after:
            out.append(t)
    return out


def failover(clients: int) -> dict:
    with Lab() as lab:
        nl = NamingLab(lab, servers=3, clients=clients, store="etcd", lease_s=5)
        progress(f"failover: starting etcd, 3 servers, {clients} clients")
        nl.start()
        wait_for(
            lambda: all(nl.served_by(k) is not None for k in range(clients)),
            120,
            "every client served",
            poll=1.0,
        )
        per = [nl.served_by(k) for k in range(clients)]
        counts = [per.count(i) for i in range(3)]
        victim = max(range(3), key=lambda i: counts[i])
        moved = [k for k in range(clients) if per[k] == victim]
        progress(f"clients per server {counts}; killing server {victim}")
        t_kill = time.time()
        nl.kill_server(victim)
        deadline = time.monotonic() + 30
        times: dict[int, float] = {}
        while time.monotonic() < deadline and len(times) < len(moved):
            for k in moved:
                if k in times:
                    continue
                ts = log_times(nl.daemons[f"client{k}"].output(), t_kill, "established=true")
                if ts:
                    times[k] = ts[0] - t_kill
            time.sleep(0.5)
        after = [nl.served_by(k) for k in range(clients)]
        return {
            "clients": clients,
            "per_server_before": counts,
            "killed": victim,
            "moved": len(moved),
            "failover_s": sorted(times.values()),
            "without_server": sum(1 for a in after if a is None or a == victim),
            "per_server_after": [after.count(i) for i in range(3)],
        }


def summarize(lat: list[dict], fo: dict) -> dict:
    fs = fo["failover_s"]
    worst = max(fs) if fs else None
    return {
        "lookup_p95_ms": {
            r["store"] + ("+kill" if r["killed_leader"] is not None else ""): r["lookup"]["p95_ms"]
            for r in lat
        },
        "records_lost": {r["store"]: r["verify"]["missing"] + r["verify"]["stale"] for r in lat},
        "failover_max_s": worst,
        "pass": {
            "lookup_p95": all(0 <= r["lookup"]["p95_ms"] <= LOOKUP_P95_BAR_MS for r in lat),
            "failover": worst is not None
            and worst <= FAILOVER_BAR_S
            and len(fs) == fo["moved"]
            and fo["without_server"] == 0,
            "no_loss": all(r["verify"]["missing"] + r["verify"]["stale"] == 0 for r in lat),
        },
    }


def plot(lat: list[dict], fo: dict):  # noqa: ANN201 (a matplotlib Figure)
    fig, (ax1, ax2) = figure(ncols=2, width=11, height=4)
    labels, width = [], 0.13
    for n, r in enumerate(lat):
        name = r["store"] + (" (leader killed)" if r["killed_leader"] is not None else "")
        labels.append(name)
        for m, (op, q) in enumerate(("publish", p) for p in ("p50_ms", "p95_ms", "p99_ms")):
            ax1.bar(
                n + (m - 2.5) * width,
                r[op][q],
                width,
                color=f"C{m}",
                label=f"publish {q[:3]}" if n == 0 else None,
            )
        for m, q in enumerate(("p50_ms", "p95_ms", "p99_ms")):
            ax1.bar(
                n + (m + 0.5) * width,
                r["lookup"][q],
                width,
                color=f"C{m + 3}",
                label=f"lookup {q[:3]}" if n == 0 else None,
            )
    ax1.axhline(LOOKUP_P95_BAR_MS, color="k", ls="--", lw=1, label="lookup p95 bar")
    ax1.set_xticks(range(len(lat)), labels)
    ax1.set_yscale("log")
    ax1.set_ylabel("latency (ms)")
    ax1.set_title(f"{RECORDS} records, {RATE} updates/s + {LOOKUP_RATE} lookups/s")
    ax1.legend(fontsize=7)
    fs = fo["failover_s"]
    if fs:
        ax2.plot(fs, [(i + 1) / len(fs) for i in range(len(fs))], drawstyle="steps-post")
    ax2.axvline(FAILOVER_BAR_S, color="k", ls="--", lw=1, label="bar 3 s")
    ax2.set_xlabel("time from server kill to new session (s)")
    ax2.set_ylabel("fraction of moved clients")
    ax2.set_title(f"{fo['moved']} clients of a killed server ({fo['clients']} in all)")
    ax2.legend()
    return fig


def main(seconds: int = 20, clients: int = 100) -> None:
    lat = []
    for store, kill in (("embedded", False), ("etcd", False), ("etcd", True)):
        progress(f"latency: {store}{' with the leader killed' if kill else ''}")
        lat.append(latency(store, seconds, kill))
        progress(json.dumps(lat[-1]))
    fo = failover(clients)
    progress(json.dumps(fo))
    data = {
        "params": {
            "records": RECORDS,
            "rate": RATE,
            "lookup_rate": LOOKUP_RATE,
            "seconds": seconds,
        },
        "anchors": ANCHORS,
        "latency": lat,
        "failover": fo,
        "summary": summarize(lat, fo),
    }
    save("naming", data, plot(lat, fo))
