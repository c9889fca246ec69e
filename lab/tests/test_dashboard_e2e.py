"""The daemon's web dashboard in a real browser, and its Prometheus metrics against real traffic.

The dashboard test opens the client's dashboard in headless Chromium (Debian's ``chromium``,
lab/browser.py) inside the client's namespace and watches the live page: both links listed
up, the plots gaining samples, a cut link shown down within the detection time plus one page
refresh, the failover in the event list. A screenshot is kept in results/artefacts/.

The metrics test sends a known UDP stream through the tunnel and checks the scraped
counters against it, with bounds derived from the packet sizes (docs/PROTOCOL.md §11): a data
datagram carries its inner packet plus the tunnel's 52 bytes (header, inner header, DATA
frame header, AEAD tag) plus at most one piggybacked ACK; a datagram without data (ACK or
PING) is under 80 bytes.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from lab.browser import Browser
from lab.netns import REPO_ROOT, Lab
from lab.prometheus import FETCH, parse
from lab.topology import LinkSpec, Topology

DASHBOARD = "127.0.0.1:8088"
METRICS = "127.0.0.1:9108"
DETECT_MS = 1000  # the default detect_ms
# The daemon's own slack on detection, as in test_tunnel_e2e.py (a quarter of detect_ms for
# its probe/timer granularity, rounded up), plus 100 ms for polling the page every 50 ms.
SLACK_MS = 500 + 100
REFRESH_MS = 1000  # the page polls the API once a second (dashboard.js REFRESH_MS)
ARTEFACTS = REPO_ROOT / "results" / "artefacts"

# What a data datagram adds to its inner IP packet: 52 bytes of tunnel overhead
# (wire::OVERHEAD_BYTES) plus a piggybacked ACK frame (at most 26 bytes).
DATA_OVERHEAD_MAX = 52 + 26
# Largest datagram without data (ACK and PING only).
CONTROL_MAX = 80


def row_state(link: str) -> str:
    return f"document.querySelector('#links tr[data-link=\"{link}\"]')?.dataset.state"


def test_dashboard_in_a_browser(lab: Lab, multihome_bin: Path, linkem_bin: Path) -> None:
    """Links appear, plots move, a cut shows down within detect + one refresh, events list it."""
    links = [
        LinkSpec(name, linkem={"both": {"rate": f"{r}mbit", "delay": f"{d}ms"}}, seed=i + 1)
        for i, (name, r, d) in enumerate((("fast", 50, 5), ("slow", 20, 15)))
    ]
    topo = Topology(
        lab,
        links,
        policy="aggregate",
        binary=multihome_bin,
        client_extra={"dashboard": DASHBOARD},
    )
    topo.start()
    # Some traffic for the throughput plots, 1.6 Mbit/s for longer than the test looks (the
    # lab stops it at the end).
    topo.udp_stream(count=6000, pps=200, size=1000, idle_s=1.0)
    with Browser(topo.cli, lab.dir / "chromium") as b:
        b.open(f"http://{DASHBOARD}/")
        for name in ("fast", "slow"):
            b.wait_for(f"{row_state(name)} === 'up'", timeout=10)
        points = "Number(document.getElementById('chart-tx').dataset.points)"
        last = "Number(document.getElementById('chart-tx').dataset.last)"
        p1, t1 = b.eval(points), b.eval(last)
        b.wait_for(f"{points} >= {p1 + 2}", timeout=5)
        assert b.eval(last) > t1, "the plots' newest sample did not advance"
        sent = "document.querySelector('#links tr[data-link=\"fast\"]').cells[5].textContent"
        b.wait_for(f"parseFloat({sent}) > 0", timeout=5)
        legend = "[...document.querySelectorAll('#chart-tx .u-series')].map(e => e.textContent)"
        assert sorted(b.eval(legend)) == ["server/fast", "server/slow"], b.eval(legend)

        topo.link_down(0)
        _, shown_s = b.wait_for(f"{row_state('fast')} === 'down'", timeout=10)
        assert shown_s * 1000 <= DETECT_MS + REFRESH_MS + SLACK_MS, f"down shown after {shown_s}s"
        assert b.eval(row_state("slow")) == "up"
        # The event is found by the next once-a-second sample, then shown by the next refresh.
        failover = "[...document.querySelectorAll('#events li')].map(e => e.textContent)"
        b.wait_for(
            f"{failover}.some(t => t.includes('link fast down: traffic on slow'))",
            timeout=2 * REFRESH_MS / 1000 + 1,
        )
        time.sleep(1.5)  # one more sample and refresh, so the dip shows in the plots
        shot = b.screenshot(ARTEFACTS / "dashboard.png")
        print(f"down shown {shown_s * 1000:.0f} ms after the cut; screenshot {shot}")
        assert shot.stat().st_size > 20_000, "screenshot suspiciously small"
        assert not b.eval("document.getElementById('error').hidden === false")


# ---- Prometheus ----

EXPECTED_TYPES = {
    "multihome_handshakes_total": "counter",
    "multihome_session_established": "gauge",
    "multihome_link_up": "gauge",
    "multihome_link_srtt_ms": "gauge",
    "multihome_link_loss": "gauge",
    "multihome_link_tx_bytes_total": "counter",
    "multihome_link_rx_bytes_total": "counter",
    "multihome_link_tx_packets_total": "counter",
    "multihome_link_rx_packets_total": "counter",
}


def scrape(topo: Topology, ns: str, addr: str, path: str = "/metrics") -> str:
    """GET http://addr/path from inside namespace ``ns``."""
    return topo.run_in(ns, ["python3", "-c", FETCH, f"http://{addr}{path}"], timeout=10).stdout


def link_sum(values: dict[tuple[str, str], float], name: str) -> dict[str, float]:
    return {
        re.search(r'link="([^"]*)"', labels).group(1): v  # type: ignore[union-attr]
        for (n, labels), v in values.items()
        if n == name
    }


def test_metrics_count_the_traffic(lab: Lab, multihome_bin: Path) -> None:
    """/metrics has the documented names and types, and its byte counters match a UDP stream."""
    topo = Topology(
        lab,
        [LinkSpec("fast", rate_mbit=100), LinkSpec("slow", rate_mbit=50)],
        binary=multihome_bin,
        client_extra={"metrics_listen": METRICS, "dashboard": DASHBOARD},
        server_extra={"metrics_listen": METRICS, "dashboard": DASHBOARD},
    )
    topo.start()
    count, size = 2000, 1000
    inner = size + 28  # UDP payload + UDP and IPv4 headers: the packet entering the tunnel
    cli0 = parse(scrape(topo, "cli", METRICS))[1]
    srv0 = parse(scrape(topo, "srv", METRICS))[1]
    res = topo.udp_stream(count=count, pps=1000, size=size, idle_s=0.5).wait()
    assert res["received"] == count, res
    time.sleep(0.3)
    cli_text = scrape(topo, "cli", METRICS)
    types, cli1 = parse(cli_text)
    srv1 = parse(scrape(topo, "srv", METRICS))[1]
    for name, kind in EXPECTED_TYPES.items():
        assert types.get(name) == kind, (name, types.get(name))
    # The dashboard serves the same families from the same document.
    dash_types = parse(scrape(topo, "cli", DASHBOARD))[0]
    assert dash_types == types
    # The example Grafana dashboard asks only for families the daemon exports.
    grafana = (REPO_ROOT / "examples" / "grafana-multihome.json").read_text()
    wanted = set(re.findall(r"multihome_[a-z_]+", grafana))
    assert wanted and wanted <= set(types), wanted - set(types)

    def delta(after: dict, before: dict, name: str) -> dict[str, float]:
        a, b = link_sum(after, name), link_sum(before, name)
        return {k: a[k] - b.get(k, 0) for k in a}

    tx = delta(cli1, cli0, "multihome_link_tx_bytes_total")
    txp = delta(cli1, cli0, "multihome_link_tx_packets_total")
    assert set(tx) == {"fast", "slow"}, tx
    total, packets = sum(tx.values()), sum(txp.values())
    # Every inner packet went once (no redundancy, no header compression for UDP), in its
    # own datagram (riders are small packets only), plus control datagrams.
    control = packets - count
    assert control >= 0, (packets, count)
    low = count * inner
    high = count * (inner + DATA_OVERHEAD_MAX) + control * CONTROL_MAX
    print(f"client sent {total} bytes in {packets} datagrams for {count} x {inner} B: {tx}")
    assert low <= total <= high, (low, total, high)
    # The server received on each link what the client sent on it (links are numbered there,
    # in the client's order), give or take control datagrams between the two scrapes.
    rx = delta(srv1, srv0, "multihome_link_rx_bytes_total")
    for i, name in enumerate(("fast", "slow")):
        assert abs(rx[str(i)] - tx[name]) <= 20 * CONTROL_MAX, (name, rx, tx)
    for name in ("fast", "slow"):
        assert cli1[("multihome_link_up", f'role="client",peer="server",link="{name}"')] == 1
    assert cli1[("multihome_session_established", 'role="client",peer="server"')] == 1
    # `multihome status --url` reads the dashboard's API: the same document as the socket.
    out = topo.run_in("cli", [str(multihome_bin), "status", "--url", DASHBOARD, "--json"])
    via_http = json.loads(out.stdout)
    via_socket = topo.status("client")
    assert via_http["sessions"][0]["session_id"] == via_socket["sessions"][0]["session_id"]
    assert via_http.keys() == via_socket.keys()
    assert via_http["events"][0]["text"] == "client started"
    # The server's dashboard plots its peer's links, named by path id.
    history = json.loads(scrape(topo, "srv", DASHBOARD, "/api/history"))
    assert [s["key"] for s in history["series"]] == ["home/0", "home/1"], history["series"]
    assert max(v or 0 for v in history["series"][0]["rx_bps"]) > 0, history["series"][0]
