"""Self-tests of the lab helpers with plain IP forwarding (no tunnel).

They check that the topology forwards and NATs, that tbf limits the rate it is told, that
nftables random loss drops the fraction it is told, that a blackhole stops and its removal
restores traffic, and that cleanup leaves no namespace or process behind. The e2e suite's pass
bounds rely on these helpers being right.
"""

from __future__ import annotations

import math
import os

from lab.netns import Lab, lab_namespaces, tool_cmd
from lab.topology import ORIGIN, LinkSpec, Topology
from lab.traffic import parse_result, ping_rtts_ms


def plain(lab: Lab, **kw: float) -> Topology:
    return Topology(lab, [LinkSpec("a", **kw), LinkSpec("b")], tunnel=False)


def test_transfer_intact_and_natted(lab: Lab) -> None:
    topo = plain(lab)
    xfer = topo.transfer(mib=32, cc="cubic")
    res = xfer.wait(timeout=60)
    assert res.intact, res
    # The origin has no route back: it must see the server's uplink address (NAT).
    assert "10.50.0.1:" in xfer.receiver.output()


def test_tbf_rate(lab: Lab) -> None:
    rate = 20.0
    topo = plain(lab, rate_mbit=rate)
    for cc in ("cubic", "bbr"):
        mbps = topo.iperf3(cc, seconds=5)["mbps"]
        # TCP goodput over a tbf of R: payload 1448 of 1514 wire bytes ~ 0.956 R; 10 % slack.
        assert 0.85 * rate <= mbps <= 1.02 * rate, (cc, mbps)


def test_random_loss_fraction(lab: Lab) -> None:
    pct, n = 20.0, 2000
    topo = plain(lab, loss_pct=pct)
    out = topo.udp_stream(count=n, pps=1000).wait()
    p = pct / 100
    sd = math.sqrt(n * p * (1 - p)) / n
    # Binomial: 4 standard deviations either side (false alarm ~6e-5).
    assert abs(out["loss"] - p) <= 4 * sd, out
    assert out["duplicates"] == 0
    topo.veths[0].clear_loss()
    assert topo.udp_stream(count=500, pps=1000, port=5005).wait()["lost"] == 0


def test_blackhole_and_restore(lab: Lab) -> None:
    topo = plain(lab)
    assert ping_rtts_ms(topo.lan, ORIGIN, count=3)
    topo.blackhole(0)
    res = topo.lan.run(["ping", "-n", "-c", "3", "-i", "0.2", "-W", "1", ORIGIN], check=False)
    assert res.returncode != 0 and " 0 received" in res.stdout, res.stdout
    topo.unblackhole(0)
    assert len(ping_rtts_ms(topo.lan, ORIGIN, count=5, interval=0.2)) >= 4


def test_cleanup_removes_everything(root: None) -> None:
    with Lab() as lab:
        ns = lab.ns("x")
        proc = ns.spawn(["sleep", "600"], "sleeper")
        names = {ns.name}
        assert names <= set(lab_namespaces())
    assert not names & set(lab_namespaces())
    assert proc.popen.returncode is not None
    assert not os.path.exists(f"/proc/{proc.pid}/status") or proc.popen.poll() is not None


def test_garbage_tool_captures_and_mutates(lab: Lab) -> None:
    topo = plain(lab)
    stream = topo.udp_stream(count=300, pps=200, port=7000)
    samples = lab.dir / "samples.hex"
    cap = topo.srv.run(
        tool_cmd(
            "garbage",
            "capture",
            "--iface",
            "l0",
            "--port",
            "7000",
            "--count",
            "20",
            "--out",
            str(samples),
        ),
    )
    assert '"captured": 20' in cap.stdout, cap.stdout
    stream.wait()
    sender = topo.lan.spawn(
        tool_cmd(
            "garbage",
            "send",
            "--host",
            ORIGIN,
            "--port",
            "7001",
            "--samples",
            str(samples),
            "--count",
            "400",
            "--pps",
            "2000",
        ),
        "garbage",
    )
    sender.wait(10)
    kinds = parse_result(sender)["kinds"]
    assert kinds == {"random": 100, "truncated": 100, "flipped": 100, "replayed": 100}
