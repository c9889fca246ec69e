"""A vehicle driving past Wi-Fi access points: the coverage model and its seeded schedule.

Role: turn the drive of *Network-Assisted Multihoming for Emerging Heterogeneous Wireless
Access Scenarios* (Mukherjee, §4.2.1-4.2.2) into timed attachment events for one Wi-Fi link:
when the client loses its access point, when it associates with the next one, and when that
one's DHCP server has given it a new address. ``crates/sim/src/drive.rs`` implements the same
model for the simulator (same parameters, same arithmetic; its random stream is the
simulator's, so the two agree on distributions, and draw by draw only when every range is
degenerate, as in the cross-check).

Coverage model (stated because the paper does not give every number):

- The road is a straight line; the car moves at ``speed`` (10 m/s, the paper's §4.2.2).
- Access points stand on the road at ``x_0 = range_m`` (the drive starts where AP 0's
  coverage begins) and ``x_(i+1) = x_i + d_i``, ``d_i`` uniform in ``gap_m`` ([100, 300] m or
  [300, 500] m, the paper's two settings).
- Each AP serves ``range_m`` metres either side of it (effective range 100 m: coverage 200 m
  of road, 20 s at 10 m/s; the paper does not state the range, 100 m is a usual outdoor
  802.11 figure and gives its "good connectivity, poor connectivity and temporary
  disconnections": with [100, 300] m coverage overlaps whenever d < 200 m, with [300, 500] m
  every gap is 100-300 m, 10-30 s).
- Where coverages overlap the client hands off at the midpoint between the two APs; where
  they do not, it is disconnected from the end of one coverage to the start of the next.
- At every association (handoff or reconnection) the client gets a new address after a DHCP
  delay uniform in ``dhcp_s`` (1-2 s, the paper's figure): the link carries nothing from the
  end of the previous association until then. An association shorter than its DHCP delay
  carries nothing at all (it is skipped, and its address is never used).
- Optionally (``edge_m`` > 0) the loss rate rises linearly from 0 to ``edge_loss`` over the
  last ``edge_m`` metres before the client leaves an AP's coverage (the edge of coverage).

The schedule is a list of :class:`Attachment`: ``up`` (address configured, traffic flows),
``down`` (coverage lost), ``index`` (a new address each time). Attachment 0 starts at t = 0
with its address already configured (the drive starts connected, after a DHCP already done).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class DriveParams:
    """The drive: speed (m/s), AP gap range (m), effective range (m), DHCP delay range (s)."""

    gap_m: tuple[float, float] = (100.0, 300.0)
    speed: float = 10.0
    range_m: float = 100.0
    dhcp_s: tuple[float, float] = (1.0, 2.0)
    edge_m: float = 0.0
    edge_loss: float = 0.0


@dataclass
class Attachment:
    """One association that carried traffic: address ``index`` usable from ``up`` to ``down``.

    ``enter`` is when the client came under this AP (association; DHCP running until ``up``).
    ``edge`` lists (time, loss) steps from ``edge_start`` to ``down`` when edge losses are on.
    """

    index: int
    enter: float
    up: float
    down: float
    edge: list[tuple[float, float]] = field(default_factory=list)


def service_intervals(params: DriveParams, horizon_s: float, rng: random.Random) -> list:
    """(enter, leave) times of each AP's service along the road until ``horizon_s``."""
    v, r = params.speed, params.range_m
    aps = [r]
    while aps[-1] - r < v * horizon_s + params.gap_m[1]:
        aps.append(aps[-1] + rng.uniform(*params.gap_m))
    out = []
    for i, x in enumerate(aps[:-1]):
        lo = x - r if i == 0 else max(x - r, (aps[i - 1] + x) / 2)
        hi = min(x + r, (x + aps[i + 1]) / 2)
        if lo / v < horizon_s:
            out.append((lo / v, hi / v))
    return out


def edge_steps(params: DriveParams, down: float, step_s: float = 1.0) -> list[tuple[float, float]]:
    """Loss steps over the last ``edge_m`` metres before ``down``: (time, loss), rising."""
    if params.edge_m <= 0 or params.edge_loss <= 0:
        return []
    span = params.edge_m / params.speed
    n = max(1, round(span / step_s))
    return [(down - span + k * span / n, params.edge_loss * (k + 1) / n) for k in range(n)]


def schedule(params: DriveParams, horizon_s: float, seed: int) -> list[Attachment]:
    """The attachments of a drive of ``horizon_s`` seconds (seeded, reproducible)."""
    rng = random.Random(seed)
    out: list[Attachment] = []
    for k, (enter, leave) in enumerate(service_intervals(params, horizon_s, rng)):
        dhcp = 0.0 if k == 0 else rng.uniform(*params.dhcp_s)
        up = enter + dhcp
        if up >= leave:
            continue
        att = Attachment(index=len(out), enter=enter, up=up, down=leave)
        att.edge = [s for s in edge_steps(params, leave) if s[0] > up]
        out.append(att)
    return out


def connected_fraction(atts: list[Attachment], start: float, end: float) -> float:
    """Share of [start, end) during which an address is usable."""
    busy = sum(max(0.0, min(a.down, end) - max(a.up, start)) for a in atts)
    return busy / max(end - start, 1e-9)


def shifted(atts: list[Attachment], t0: float) -> list[Attachment]:
    """The schedule seen from ``t0`` (times minus t0), attachments ending before t0 dropped."""
    return [
        Attachment(a.index, a.enter - t0, a.up - t0, a.down - t0, [(t - t0, p) for t, p in a.edge])
        for a in atts
        if a.down > t0
    ]
