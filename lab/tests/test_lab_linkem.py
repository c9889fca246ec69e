"""Self-tests of the lab's emulated links (linkem), scenarios and the demo, without the tunnel.

Pass bounds come from the configured link: linkem's own accuracy (delay ±1 ms at the median,
rate ±5 %; crates/linkem/README.md) plus the slack written beside each bound.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from lab import scenario
from lab.netns import Lab, LabError
from lab.topology import ORIGIN, LinkSpec, Topology
from lab.traffic import ping_rtts_ms


def emulated(lab: Lab, **both: object) -> Topology:
    cfg = {"both": dict(both)}
    return Topology(lab, [LinkSpec("a", linkem=cfg), LinkSpec("b", linkem={})], tunnel=False)


def test_linkem_link_delay_rate_and_outage(lab: Lab, linkem_bin: Path) -> None:
    """10 ms each way, 20 Mbit/s: RTT, TCP rate, down/up and a live change, through the lab."""
    rate, delay_ms = 20.0, 10.0
    topo = emulated(lab, delay=f"{delay_ms:g}ms", rate=f"{rate:g}mbit", queue_bytes=100_000)
    rtts = ping_rtts_ms(topo.lan, ORIGIN, count=30, interval=0.02)
    # Two linkem crossings (2 x 10 ms) + veths and forwarding (< 0.5 ms); ±1 ms per direction.
    assert abs(statistics.median(rtts[1:]) - 2 * delay_ms) <= 2.5, rtts
    mbps = topo.iperf3("cubic", seconds=5)["mbps"]
    # Payload 1448 of 1514 wire bytes = 0.956 R; 10 % slack below for TCP start-up.
    assert 0.85 * rate <= mbps <= 1.02 * rate, mbps
    link = topo.emulated[0]
    link.down()
    res = topo.lan.run(["ping", "-n", "-c", "3", "-i", "0.2", "-W", "1", ORIGIN], check=False)
    assert " 0 received" in res.stdout, res.stdout
    link.up()
    link.set("both", delay="30ms")
    rtts = ping_rtts_ms(topo.lan, ORIGIN, count=10, interval=0.05)
    assert abs(statistics.median(rtts) - 60) <= 2.5, rtts
    stats = link.stats()
    assert stats["a2b"]["dropped_outage"]["frames"] >= 3, stats


def test_scenarios_load_and_build_links(root: None, linkem_bin: Path, tmp_path: Path) -> None:
    """Every scenario parses, has a picture, and turns into LinkSpecs (traces generated)."""
    names = scenario.available()
    assert {"home", "simult-flows", "failover", "overhead"} <= set(names)
    for name in names:
        sc = scenario.load(name)
        assert sc.picture.strip(), name
        try:
            specs = sc.link_specs(tmp_path)
        except scenario.ScenarioUnavailable:
            assert name == "lte-real", name  # only the real-trace scenario may be absent
            continue
        assert [s.name for s in specs] == [lk["name"] for lk in sc.links]
    home = scenario.load("home").link_specs(tmp_path)
    lte = home[1].linkem
    assert lte is not None and lte["b2a"]["rate"].startswith("trace:")
    trace = Path(lte["b2a"]["rate"][len("trace:") :])
    stamps = [int(x) for x in trace.read_text().split()]
    # One line per 1500-byte opportunity: mean rate = lines * 1500 * 8 / period.
    mean_mbit = len(stamps) * 1500 * 8 / (stamps[-1] / 1000) / 1e6
    assert abs(mean_mbit - 30) <= 1.5, mean_mbit


def test_scenario_rejects_unknown_keys(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nlinks = []\n')
    with pytest.raises(LabError, match="unknown keys"):
        scenario.load(bad)
