"""Suite ``naming``: the name service's publish and lookup latency, and failover of clients.

Role: on lab/naming.py's topology,

1. *latency* (``CASES``): one server's resolver with the embedded store, then with a
   3-member etcd cluster; ``multihome naming-load`` (crates/naming/src/load.rs) from a client
   namespace fills 10 000 identity records, then for ``seconds`` publishes 1 000 updates/s and
   looks up 1 000 names/s, open loop, timing each request from send to answer (p50/p95/p99);
   at the end every record is looked up and compared with the last sequence number the
   resolver acknowledged (missing or older = *lost*). etcd cases: as is; with the cluster's
   leader killed (SIGKILL by PID) halfway; with lookups sent to a second server sharing the
   cluster (its watched copy; lookups answered older than an acknowledged publish count as
   *behind*); and, for comparison, with lookups read from etcd directly by the load
   generator, linearizable then serializable (what a resolver reading etcd per lookup pays).
   Each run records the CPU share of every process over the timed phase and the members'
   WAL fsyncs. Raw path in the same run: the ping RTT between the load generator and the
   resolver (a lookup cannot be faster than one round trip).
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
import os
import re
import time
from datetime import datetime
from pathlib import Path

from lab.bench.common import figure, progress, save
from lab.naming import RESOLVER_PORT, NamingLab, server_ip, wait_for
from lab.netns import Lab, LabError, Namespace

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


# The raw path of a lookup's one wake-up: a process of its own that sleeps 1 ms at a time
# and records how late it woke (the machine's wait for a CPU, beside the resolver's).
WAKEUP_PROBE = """
import json, sys, time
end, late = time.monotonic() + float(sys.argv[1]), []
while time.monotonic() < end:
    t = time.monotonic()
    time.sleep(0.001)
    late.append(time.monotonic() - t - 0.001)
late.sort()
q = lambda p: round(1e3 * late[int(p * (len(late) - 1))], 3)
print(json.dumps({"n": len(late), "p50_ms": q(0.5), "p95_ms": q(0.95), "p99_ms": q(0.99),
                  "max_ms": q(1.0)}))
"""


def cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) process ``pid`` used so far; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


ETCD_METRICS = (
    "etcd_disk_wal_fsync_duration_seconds_sum",
    "etcd_disk_wal_fsync_duration_seconds_count",
    "etcd_disk_backend_commit_duration_seconds_sum",
    "etcd_disk_backend_commit_duration_seconds_count",
    "etcd_server_proposals_committed_total",
)


def etcd_metrics(nl: NamingLab, j: int) -> dict[str, float]:
    """A few of member ``j``'s own metrics (WAL fsyncs, backend commits, proposals)."""
    url = f"http://10.61.{j}.1:2379/metrics"
    code = f"import urllib.request;print(urllib.request.urlopen('{url}',timeout=3).read().decode())"
    res = nl.srv[0].run(["python3", "-c", code], check=False, timeout=10)
    out = {}
    for line in res.stdout.splitlines():
        name, _, value = line.partition(" ")
        if name in ETCD_METRICS:
            out[name] = float(value)
    return out


def udp_counters(ns: Namespace) -> dict[str, int]:
    """The namespace's UDP counters (/proc/net/snmp): datagrams in, dropped for a full
    receive buffer."""
    lines = [ln.split() for ln in ns.run(["cat", "/proc/net/snmp"]).stdout.splitlines()]
    udp = [ln[1:] for ln in lines if ln and ln[0] == "Udp:"]
    table = dict(zip(udp[0], map(int, udp[1]), strict=True))
    return {k: table[k] for k in ("InDatagrams", "RcvbufErrors")}


def usage(nl: NamingLab, procs: dict[str, int]) -> dict:
    """CPU seconds per process, UDP drops per namespace and the etcd members' metrics, now."""
    snap: dict = {"cpu_s": {name: cpu_s(pid) for name, pid in procs.items()}, "etcd": {}}
    snap["udp"] = {"load": udp_counters(nl.cli[0])}
    snap["udp"] |= {f"server{i}": udp_counters(ns) for i, ns in enumerate(nl.srv)}
    for j, m in enumerate(nl.etcd):
        if m.proc is not None and m.proc.alive():
            snap["etcd"][f"m{j}"] = etcd_metrics(nl, j)
    return snap


def usage_delta(a: dict, b: dict, seconds: float) -> dict:
    """What each process used of a core over the timed phase, and the members' fsyncs."""
    share = {
        name: round((b["cpu_s"][name] - a["cpu_s"][name]) / seconds, 3)
        for name in a["cpu_s"]
        if a["cpu_s"][name] is not None and b["cpu_s"].get(name) is not None
    }
    etcd = {}
    for m, before in a["etcd"].items():
        after = b["etcd"].get(m)
        if not after:
            continue
        d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in ETCD_METRICS}
        n_fsync = d["etcd_disk_wal_fsync_duration_seconds_count"]
        n_commit = d["etcd_disk_backend_commit_duration_seconds_count"]
        etcd[m] = {
            "wal_fsyncs_per_s": round(n_fsync / seconds, 1),
            "wal_fsync_mean_ms": round(
                1e3 * d["etcd_disk_wal_fsync_duration_seconds_sum"] / max(n_fsync, 1), 2
            ),
            "backend_commit_mean_ms": round(
                1e3 * d["etcd_disk_backend_commit_duration_seconds_sum"] / max(n_commit, 1), 2
            ),
            "proposals_per_s": round(d["etcd_server_proposals_committed_total"] / seconds, 1),
        }
    udp = {ns: {k: b["udp"][ns][k] - a["udp"][ns][k] for k in a["udp"][ns]} for ns in a["udp"]}
    return {"cores": share, "etcd": etcd, "udp": udp}


def latency(
    store: str,
    seconds: int,
    *,
    kill_leader: bool = False,
    rate: int = RATE,
    lookup_rate: int = LOOKUP_RATE,
    etcd_read: str | None = None,
    other_server: bool = False,
) -> dict:
    """One latency run. ``etcd_read`` (``linearizable`` or ``serializable``): the load
    generator looks names up in etcd itself with that read, not through the resolver — what
    a resolver reading etcd per lookup would see (the comparison for the watched copy).
    ``other_server``: a second server shares the store, and lookups go to its resolver."""
    with Lab() as lab:
        servers = 2 if other_server else 1
        nl = NamingLab(lab, servers=servers, clients=1, store=store, lease_s=10)
        if store == "etcd":
            nl.start_etcd()
        nl.write_configs()
        server = nl.start_server(0)
        if other_server:
            nl.start_server(1)
        time.sleep(1)  # the resolver thread connects to its store
        rtt = ping_rtt_ms(nl)
        cmd = [str(nl.binary), "naming-load", "--resolver", f"{server_ip(0)}:{RESOLVER_PORT}"]
        cmd += ["--records", str(RECORDS), "--rate", str(rate), "--lookup-rate", str(lookup_rate)]
        cmd += ["--seconds", str(seconds)]
        if etcd_read:
            cmd += ["--etcd", ",".join(nl.etcd_endpoints()), "--etcd-read", etcd_read]
        if other_server:
            cmd += ["--lookup-resolver", f"{server_ip(1)}:{RESOLVER_PORT}"]
        load = nl.cli[0].spawn(cmd, f"load-{store}")
        procs = {"server": server.pid, "load": load.pid}
        procs |= {f"etcd{j}": m.proc.pid for j, m in enumerate(nl.etcd) if m.proc}
        # The timed phase starts after the fill, which the load reports.
        wait_for(lambda: "filled" in load.output() or not load.alive(), 300, "load filled")
        probe = nl.cli[0].spawn(["python3", "-c", WAKEUP_PROBE, str(seconds - 1)], "probe")
        t0, before = time.monotonic(), usage(nl, procs)
        killed = None
        if kill_leader:
            time.sleep(seconds / 2)
            killed = etcd_leader(nl)
            progress(f"killing etcd member {killed} (the leader)")
            nl.kill_etcd(killed)
        time.sleep(max(0.0, seconds - 0.5 - (time.monotonic() - t0)))
        used = usage_delta(before, usage(nl, procs), time.monotonic() - t0)
        probe.wait(30)
        out = probe.output().strip().splitlines()
        used["wakeup"] = json.loads(out[-1]) if out else None
        load.wait(seconds + 600)
        # What each resolver's operator sees (requests, drops, refusals, the etcd copy).
        resolvers = [nl.server_status(i).get("naming") for i in range(servers)]
        result = json.loads(load.output().strip().splitlines()[-1])
        result |= {"store": store, "ping_rtt_ms": rtt, "killed_leader": killed, "usage": used}
        result |= {"resolvers": resolvers}
        result |= {
            "lookups_from": f"etcd ({etcd_read} read)"
            if etcd_read
            else ("the other server's resolver" if other_server else "resolver")
        }
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


# Latency cases: name -> arguments of latency(). The first four answer lookups through a
# resolver while 1 000 updates/s run (the bar applies); "no updates" is the same resolver
# on etcd without them (what the update load costs lookups); the last two read etcd
# directly (what a resolver reading etcd per lookup would pay).
CASES = {
    "embedded": {"store": "embedded"},
    "etcd": {"store": "etcd"},
    "etcd, leader killed": {"store": "etcd", "kill_leader": True},
    "etcd, lookups via another server": {"store": "etcd", "other_server": True},
    "etcd, no updates": {"store": "etcd", "rate": 0},
    "etcd direct, linearizable": {"store": "etcd", "etcd_read": "linearizable"},
    "etcd direct, serializable": {"store": "etcd", "etcd_read": "serializable"},
}
BAR_CASES = tuple(c for c, a in CASES.items() if "etcd_read" not in a and "rate" not in a)


def summarize(lat: list[dict], fo: dict | None) -> dict:
    fs = fo["failover_s"] if fo else []
    worst = max(fs) if fs else None
    barred = [r for r in lat if r["case"] in BAR_CASES]
    return {
        "lookup_p95_ms": {r["case"]: r["lookup"]["p95_ms"] for r in lat},
        "publish_p95_ms": {r["case"]: r["publish"]["p95_ms"] for r in lat},
        "records_lost": {r["case"]: r["verify"]["missing"] + r["verify"]["stale"] for r in lat},
        "failover_max_s": worst,
        "pass": {
            "lookup_p95": bool(barred)
            and all(0 <= r["lookup"]["p95_ms"] <= LOOKUP_P95_BAR_MS for r in barred),
            "failover": fo is not None
            and worst is not None
            and worst <= FAILOVER_BAR_S
            and len(fs) == fo["moved"]
            and fo["without_server"] == 0,
            "no_loss": all(r["verify"]["missing"] + r["verify"]["stale"] == 0 for r in lat),
        },
    }


def plot(lat: list[dict], fo: dict | None):  # noqa: ANN201 (a matplotlib Figure)
    fig, (ax1, ax2) = figure(ncols=2, width=13, height=5)
    width = 0.13
    for n, r in enumerate(lat):
        for m, (op, q) in enumerate(
            (op, q) for op in ("publish", "lookup") for q in ("p50_ms", "p95_ms", "p99_ms")
        ):
            value = r[op][q]
            if value <= 0:
                continue
            ax1.bar(
                n + (m - 2.5) * width,
                value,
                width,
                color=f"C{m}",
                label=f"{op} {q[:3]}" if n == 0 else None,
            )
    ax1.axhline(LOOKUP_P95_BAR_MS, color="k", ls="--", lw=1, label="lookup p95 bar")
    ax1.set_xticks(range(len(lat)), [r["case"] for r in lat], fontsize=7, rotation=20, ha="right")
    ax1.set_yscale("log")
    ax1.set_ylabel("latency (ms)")
    ax1.set_title(f"{RECORDS} records, {RATE} updates/s + {LOOKUP_RATE} lookups/s", pad=34)
    ax1.legend(fontsize=7, ncol=4, loc="lower center", bbox_to_anchor=(0.5, 1.0))
    fs = fo["failover_s"] if fo else []
    if fs:
        ax2.plot(fs, [(i + 1) / len(fs) for i in range(len(fs))], drawstyle="steps-post")
        ax2.set_title(f"{fo['moved']} clients of a killed server ({fo['clients']} in all)")
    ax2.axvline(FAILOVER_BAR_S, color="k", ls="--", lw=1, label="bar 3 s")
    ax2.set_xlabel("time from server kill to new session (s)")
    ax2.set_ylabel("fraction of moved clients")
    ax2.legend()
    return fig


def main(seconds: int = 20, clients: int = 100, only: list[str] | None = None) -> None:
    """All cases and the failover run, or ``only`` these (case names, or ``failover``)."""
    unknown = set(only or []) - {*CASES, "failover"}
    if unknown:
        raise LabError(f"naming: unknown cases {sorted(unknown)}; known: {[*CASES, 'failover']}")
    lat = []
    for case, kwargs in CASES.items():
        if only and case not in only:
            continue
        progress(f"latency: {case}")
        lat.append({"case": case} | latency(seconds=seconds, **kwargs))
        progress(json.dumps(lat[-1]))
    fo = None
    if not only or "failover" in only:
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
