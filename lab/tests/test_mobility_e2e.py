"""End-to-end tests of link policies (issue 16) in network namespaces: `only`, `prefer` and
`backup` shown by the bytes each link carries (the daemons' per-link `tx_bytes`, datagrams
with their tunnel overhead), both ways — upstream by the client's own rules, downstream by
the rules the client stated to the server (docs/PROTOCOL.md §8.5).

Links as in test_tunnel_e2e.py: fast 100 Mbit/s, slow 50 Mbit/s (tbf both ways). A link a
policy keeps idle still carries keepalives: a PING every detect/4 = 250 ms each way and
their ACKs, under 100 bytes each, so at most 2 × 4 × 100 B = 800 B/s per direction — the
bound below allows 16 KiB plus that per second of the run.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from lab.netns import Lab
from lab.tests.test_tunnel_e2e import SLOW, efficiency, two_links
from lab.topology import Topology

MIB = 24
KEEPALIVE_BPS = 800  # see the module doc
IDLE_SLACK = 16 << 10


def link_bytes(topo: Topology, side: str) -> dict[str, int]:
    """tx_bytes per link of ``side``'s session (the server names paths by id: 0 fast, 1 slow)."""
    sess = topo.session(side)
    assert sess is not None, side
    names = {"0": "fast", "1": "slow"}
    return {names.get(str(lk["name"]), lk["name"]): lk["tx_bytes"] for lk in sess["links"]}


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items()}


def idle_bound(seconds: float) -> int:
    return IDLE_SLACK + int(KEEPALIVE_BPS * seconds)


def upload_and_download(topo: Topology) -> tuple[dict[str, int], dict[str, int], float]:
    """A MIB upload then a MIB download (iperf3 reverse); the per-link bytes each daemon
    sent meanwhile, and the seconds it took."""
    topo.wait_established(all_links_up=True)
    time.sleep(0.5)  # the statement rides in the first datagrams; let it be acknowledged
    c0, s0 = link_bytes(topo, "client"), link_bytes(topo, "server")
    t0 = time.monotonic()
    res = topo.transfer(MIB, "cubic").wait(timeout=MIB * 8 * 2**20 / (0.3 * SLOW * 1e6) + 10)
    assert res.intact, res
    topo.iperf3("cubic", seconds=3, reverse=True)
    secs = time.monotonic() - t0
    return (
        delta(link_bytes(topo, "client"), c0),
        delta(link_bytes(topo, "server"), s0),
        secs,
    )


@pytest.mark.parametrize(
    ("policy", "idle", "busy"),
    [
        ("backup:fast", "fast", "slow"),
        ("prefer:slow", "fast", "slow"),
        ("only:slow", "fast", "slow"),
    ],
)
def test_link_policy_by_bytes_per_link(
    lab: Lab, multihome_bin: Path, policy: str, idle: str, busy: str
) -> None:
    """With both links up, the link the policy keeps out carries keepalives only, both ways,
    although it is the faster one (`best` would use it); the other carries the transfer."""
    topo = two_links(lab, multihome_bin, policy)
    up, down, secs = upload_and_download(topo)
    stated = topo.session("server")["stated"]
    print(
        f"{policy}: client sent {up}, server sent {down} in {secs:.1f} s; server applies {stated}"
    )
    assert stated["epoch"] >= 1 and stated["default"] == policy.replace("fast", "0").replace(
        "slow", "1"
    ), stated
    assert up[idle] <= idle_bound(secs), up
    assert down[idle] <= idle_bound(secs), down
    assert up[busy] >= MIB << 20, up
    assert down[busy] >= 1 << 20, down


def test_backup_takes_over_only_while_the_other_link_is_down(lab: Lab, multihome_bin: Path) -> None:
    """`backup:fast`: while slow is cut (2 s, `linkem`-free blackhole), fast carries the
    upload; once slow is back and Up, fast returns to keepalives (measured after 1 s)."""
    topo = two_links(lab, multihome_bin, "backup:fast")
    eff = efficiency(topo)
    topo.wait_established(all_links_up=True)
    mib = 60
    xfer = topo.transfer(mib, "cubic")
    xfer.wait_progress(8 << 20, timeout=30)
    before = link_bytes(topo, "client")
    topo.link_down(1)
    time.sleep(2)
    during = delta(link_bytes(topo, "client"), before)
    topo.link_up(1)
    topo.wait_link_state("slow", "up", timeout=5)
    time.sleep(1)
    mark = link_bytes(topo, "client")
    time.sleep(2)
    after = delta(link_bytes(topo, "client"), mark)
    res = xfer.wait(timeout=(mib << 20) * 8 / (0.3 * SLOW * eff * 1e6) + 10)
    assert res.intact, res
    print(f"backup: during the cut {during}, 1-3 s after slow is back {after}")
    assert during["fast"] >= 4 << 20, during
    assert after["fast"] <= idle_bound(2), after
