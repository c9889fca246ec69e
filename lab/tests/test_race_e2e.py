"""End-to-end tests of ``multihome race`` in network namespaces (see lab/race/topology.py).

The uplinks are plain veths (sub-millisecond RTT), so every time bound below is the configured
delay or timeout plus slack for a loaded 2-core machine: 0.5 s (a Python client start-up is
not in the measured time; the slack covers scheduling of the daemon and the origin).

The daemon holds each client's SYN while it races (the default, ``hold_syns``), so a
connection every uplink refused, or that timed out on every uplink, fails in the client's
connect() with ECONNREFUSED — ``fetch get`` reports ``refused`` only for exactly that
exception, a reset after connecting is ``reset``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from lab import prometheus
from lab.netns import Lab
from lab.race.topology import ORIGIN, RaceTopology, UplinkSpec, origin_side_ip
from lab.tools.tcpxfer import expected_sha256

SLACK_S = 0.5


def topo(lab: Lab, binary: Path) -> RaceTopology:
    t = RaceTopology(lab, [UplinkSpec("a"), UplinkSpec("b")], binary=binary)
    t.start_origin()
    return t


def uplink(status: dict, name: str) -> dict:
    return next(u for u in status["uplinks"] if u["name"] == name)


def test_refused_on_one_uplink_connects_refused_on_all_is_refused(
    lab: Lab, multihome_bin: Path
) -> None:
    """Figure 3-3: an RST on one uplink is ignored; only when every uplink refuses is the
    client refused, and then as a refusal of its own SYN (ECONNREFUSED), not a reset."""
    t = topo(lab, multihome_bin)
    t.start_race("race")
    t.refuse(0)
    res = t.get("/bytes/5000")
    assert res["status"] == "ok" and res["bytes"] == 5000, res
    st = t.status()
    assert uplink(st, "a")["refusals"] == 1, st
    assert uplink(st, "b")["chosen"] == 1, st
    assert st["counters"]["unheld_connections"] == 0, "the SYN was held: " + str(st)

    t.refuse(1)
    res = t.get("/bytes/5000")
    assert res["status"] == "refused", res
    assert res["connect"] < SLACK_S, res
    st = t.status()
    assert st["counters"]["races_refused"] == 1, st
    assert uplink(st, "b")["refusals"] == 1, st
    assert st["counters"]["syns_held"] == 0 and st["counters"]["syns_admitted"] == 0, st


def test_blackholed_uplink_costs_at_most_the_delay(lab: Lab, multihome_bin: Path) -> None:
    """AvMet prefers uplink a (ties go to the first); with a blackholed, each connection is
    held for the configured delay D, then completes over b."""
    delay_ms = 300
    t = topo(lab, multihome_bin)
    t.start_race("avmet", avmet_delay_ms=delay_ms, avmet_alpha=0.99)
    t.blackhole(0)
    for _ in range(4):
        res = t.get("/bytes/20000")
        assert res["status"] == "ok", res
        assert res["total"] <= delay_ms / 1000 + SLACK_S, res
    st = t.status()
    assert uplink(st, "b")["chosen"] == 4, st
    assert uplink(st, "a")["abandoned"] == 4, st
    assert st["avmet"]["curbest"] > 0.5, st  # b won every race


def test_unreachable_destination_times_out_to_a_refusal(lab: Lab, multihome_bin: Path) -> None:
    """No uplink answers: the client's SYN stays held (its retransmission after 1 s is
    dropped, not answered) until the connect timeout, then the client is refused."""
    timeout_ms = 1500
    t = topo(lab, multihome_bin)
    t.start_race("race", connect_timeout_ms=timeout_ms)
    t.blackhole(0)
    t.blackhole(1)
    res = t.get("/bytes/100", timeout=10)
    assert res["status"] == "refused", res
    assert timeout_ms / 1000 <= res["connect"] <= timeout_ms / 1000 + SLACK_S, res
    st = t.status()
    assert st["counters"]["races_failed"] == 1, st
    assert [u["timeouts"] for u in st["uplinks"]] == [1, 1], st
    assert st["counters"]["unheld_connections"] == 0, st


def test_connection_limit_refuses_and_logs(lab: Lab, multihome_bin: Path) -> None:
    """With max_connections = 2 and both uplinks dead, two connection attempts are held in
    their race; a third is refused at once and the daemon says why."""
    t = topo(lab, multihome_bin)
    daemon = t.start_race("race", max_connections=2, connect_timeout_ms=5000)
    t.blackhole(0)
    t.blackhole(1)
    script = (
        "import socket,time\n"
        "held=[]\n"
        "for _ in range(2):\n"
        "  h=socket.socket(); h.setblocking(False)\n"
        f"  h.connect_ex(('{ORIGIN}',80)); held.append(h)\n"
        "time.sleep(0.3)\n"
        "s=socket.socket(); s.settimeout(2)\n"
        "t=time.monotonic()\n"
        "try:\n"
        f"  s.connect(('{ORIGIN}',80)); print('connected')\n"
        "except ConnectionRefusedError:\n  print('refused', time.monotonic()-t)\n"
    )
    out = t.lan.run(["python3", "-c", script], timeout=30).stdout
    assert out.startswith("refused"), out
    assert float(out.split()[1]) < 1.0, out
    st = t.status()
    assert st["counters"]["busy_refusals"] >= 1, st
    assert "connection limit reached" in daemon.output()


def test_without_held_syns_refusal_is_a_reset(lab: Lab, multihome_bin: Path) -> None:
    """``hold_syns = false``: the kernel completes the client's handshake before the race,
    so refusing can only reset the accepted connection (the documented fallback)."""
    t = topo(lab, multihome_bin)
    t.start_race("race", hold_syns=False)
    t.refuse(0)
    t.refuse(1)
    res = t.get("/bytes/100")
    assert res["status"] == "reset" or "reset" in res.get("error", ""), res
    st = t.status()
    assert st["counters"]["races_refused"] == 1, st
    assert st["counters"]["unheld_connections"] == 1, st


def test_udp_flow_keeps_its_uplink(lab: Lab, multihome_bin: Path) -> None:
    """Each new UDP flow gets the uplink AvMet prefers when it starts and keeps it: a flow
    begun while b was best stays on b after AvMet moves to a; a new flow takes a."""
    t = topo(lab, multihome_bin)
    t.start_race("avmet", avmet_alpha=0.5, avmet_delay_ms=0)
    a_seen, b_seen = origin_side_ip(0), origin_side_ip(1)
    t.refuse(0)
    assert t.get("/bytes/100")["status"] == "ok"  # b wins: AvMet now prefers b
    assert t.status()["best"] == "b"
    assert t.udp(40001) == [b_seen] * 3  # not the main table's uplink a
    t.unrefuse(0)
    t.refuse(1)
    assert t.get("/bytes/100")["status"] == "ok"  # a wins: AvMet prefers a again
    assert t.status()["best"] == "a"
    assert t.udp(40001) == [b_seen] * 3, "the flow keeps its uplink"
    assert t.udp(40002) == [a_seen] * 3, "a new flow takes the new best"
    st = t.status()
    assert [u["udp_flows"] for u in st["uplinks"]] == [1, 1], st


def test_dscp_pins_an_uplink(lab: Lab, multihome_bin: Path) -> None:
    lab_topo = RaceTopology(
        lab, [UplinkSpec("a"), UplinkSpec("b", extra={"dscp": 10})], binary=multihome_bin
    )
    lab_topo.start_origin()
    lab_topo.start_race("race")
    res = lab_topo.get("/bytes/1000", tos=10 << 2)
    assert res["status"] == "ok", res
    st = lab_topo.status()
    assert uplink(st, "a")["attempts"] == 0, st
    assert uplink(st, "b")["chosen"] == 1, st
    # The pin is listed as a flow class (the dashboard's policies panel reads it).
    rules = st["policies"]["rules"]
    assert rules == [{"name": "dscp 10", "dscp": 10, "policy": "only:b"}], st["policies"]


def test_100_mib_download_intact(lab: Lab, multihome_bin: Path) -> None:
    """Intact, and the dashboard's API shows it: the chosen uplink's interface received the
    100 MiB, and its plotted download rate rose."""
    t = topo(lab, multihome_bin)
    t.start_race("race", dashboard="127.0.0.1:8088")
    res = t.get("/seeded/100/7", sha256=True, timeout=120)
    assert res["status"] == "ok", res
    assert res["bytes"] == 100 << 20, res
    assert res["sha256"] == expected_sha256(100, 7), res
    st = t.status()
    assert st["counters"]["relayed_down_bytes"] > 100 << 20, st
    time.sleep(1.1)  # one more of the dashboard's once-a-second samples
    via_url = [str(multihome_bin), "status", "--url", "127.0.0.1:8088", "--json"]
    dash = json.loads(t.gw.run(via_url, timeout=10).stdout)
    chosen = next(u for u in dash["uplinks"] if u["chosen"] == 1)
    assert chosen["state"] == "up" and chosen["rx_bytes"] > 100 << 20, dash["uplinks"]
    fetch = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())"
    hist = t.gw.run(["python3", "-c", fetch, "http://127.0.0.1:8088/api/history"], timeout=10)
    series = {s["link"]: s for s in json.loads(hist.stdout)["series"]}
    assert max(v or 0 for v in series[chosen["name"]]["rx_bps"]) > 1e6, series
    # Prometheus on the same address counts the same bytes (docs/API.md).
    types, values = prometheus.parse(prometheus.get(t.gw, "http://127.0.0.1:8088/metrics"))
    assert types["multihome_race_uplink_rx_bytes_total"] == "counter", types
    assert values[("multihome_race_relayed_down_bytes_total", 'role="race"')] > 100 << 20
    up = f'role="race",uplink="{chosen["name"]}"'
    assert values[("multihome_race_uplink_chosen_total", up)] == 1, values
    assert values[("multihome_race_uplink_rx_bytes_total", up)] > 100 << 20, values
    assert values[("multihome_race_uplink_up", up)] == 1, values


# ---- NAT mode (mode = "nat"): the client's own SYN over every uplink, kernel NAT after ----


def test_uploads_cross_the_gateway_in_both_modes(lab: Lab, multihome_bin: Path) -> None:
    """The thesis's upload scenario (§4.5.3) needs the client's bytes to reach the origin: an
    8 MiB POST through the gateway is ok only when the origin counted all 8 MiB, in proxy mode
    (relayed) and in NAT mode (kernel NAT); each is one chosen race."""
    t = topo(lab, multihome_bin)
    for mode in ("proxy", "nat"):
        t.start_race("race", mode=mode)
        res = t.get("/upload", upload=8 << 20)
        assert res["status"] == "ok" and res["bytes"] == 8 << 20, (mode, res)
        st = t.status()
        assert st["counters"]["races_chosen"] == 1, (mode, st)
        t.stop_race()


def test_nat_mode_refused_on_one_uplink_connects_refused_on_all_is_refused(
    lab: Lab, multihome_bin: Path
) -> None:
    """Figure 3-3 in NAT mode: the copies of the client's SYN are refused on a, accepted on
    b; the connection completes over b. Refused on both: the client is refused once."""
    t = topo(lab, multihome_bin)
    t.start_race("race", mode="nat")
    t.refuse(0)
    res = t.get("/bytes/5000")
    assert res["status"] == "ok" and res["bytes"] == 5000, res
    st = t.status()
    assert st["mode"] == "nat", st
    assert uplink(st, "a")["refusals"] == 1, st
    assert uplink(st, "b")["chosen"] == 1, st
    assert st["counters"]["nat_handed"] == 1, st
    t.refuse(1)
    res = t.get("/bytes/5000")
    assert res["status"] == "refused", res
    assert res["connect"] < SLACK_S, res
    st = t.status()
    assert st["counters"]["races_refused"] == 1, st
    assert st["counters"]["nat_handed"] == 1, st


def test_nat_mode_data_path_is_kernel_nat(lab: Lab, multihome_bin: Path) -> None:
    """Once connected, the data crosses the gateway as plain kernel NAT: conntrack shows the
    client's connection translated to the winning uplink's address with the client's port,
    the daemon relays nothing, and 200 MiB arrive intact."""
    t = topo(lab, multihome_bin)
    t.start_race("static", static_uplink="b", mode="nat")
    res = t.get("/seeded/200/11", sha256=True, timeout=180)
    assert res["status"] == "ok", res
    assert res["bytes"] == 200 << 20, res
    assert res["sha256"] == expected_sha256(200, 11), res
    st = t.status()
    assert st["counters"]["relayed_down_bytes"] == 0, st
    assert st["counters"]["relayed_up_bytes"] == 0, st
    assert st["counters"]["nat_handed"] == 1, st
    ct = t.gw.run(["cat", "/proc/net/nf_conntrack"]).stdout
    entry = next(
        line for line in ct.splitlines() if f"dst={ORIGIN} sport" in line and "dport=80 " in line
    )
    # original: 192.168.60.2:P -> origin; reply: origin -> b's address:P (same port).
    assert "src=192.168.60.2" in entry and "dst=10.62.0.2" in entry, entry
    sport = entry.split("sport=")[1].split()[0]
    assert entry.count(f"port={sport}") == 2, entry


def test_nat_mode_slots_end_with_the_race(lab: Lab, multihome_bin: Path) -> None:
    """NAT mode hands a connection to the kernel once its race is decided, so a connection
    holds a `max_connections` slot only while it races: with max_connections = 4, 40
    sequential connections (each decided in well under a millisecond, 10 per slot) all
    connect and deliver their first byte, and none is refused as busy. When a decided
    connection kept its slot through the 5 s it lingers for late answers, the 5th was
    refused."""
    t = topo(lab, multihome_bin)
    t.start_race("race", mode="nat", max_connections=4)
    out = t.hello(40)
    assert len(out) == 40 and None not in out and max(out) < SLACK_S, out
    st = t.status()
    assert st["counters"]["busy_refusals"] == 0, st
    assert st["counters"]["nat_handed"] == 40, st
