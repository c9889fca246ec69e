"""The ``aggregate`` suite's choice of cases and its Gbit/s case's links (lab/bench/aggregate.py).

Pure, no namespaces: the 1000+1000 case (issue 20) runs only when named, so the suite's own
result and ``--cases fixed`` stay what they were; its links are kernel tbf on direct veths at
the case's rate with the suite's queue, not linkem processes.
"""

from __future__ import annotations

import pytest

from lab.bench.aggregate import select, tbf_links
from lab.netns import LabError
from lab.scenario import load

GBIT = "1000+1000"


def names(cases: list[dict]) -> list[str]:
    return [c["name"] for c in cases]


def test_gbit_case_runs_only_when_named() -> None:
    sc = load("aggregate")
    assert GBIT not in names(select(sc, None)[0])
    assert GBIT not in names(select(sc, ["fixed"])[0])
    assert "50+20" in names(select(sc, ["fixed"])[0])
    cases, pairs = select(sc, [GBIT])
    assert names(cases) == [GBIT] and pairs == []


def test_gbit_case_links_are_tbf_at_its_rate(tmp_path) -> None:  # noqa: ANN001
    sc = load("aggregate")
    case = next(c for c in sc.bench["case"] if c["name"] == GBIT)
    specs = tbf_links(sc, case).link_specs(tmp_path)
    assert [(s.name, s.rate_mbit, s.linkem) for s in specs] == [
        ("a", 1000, None),
        ("b", 1000, None),
    ]
    assert all(s.offloads and s.tbf_latency_ms == sc.bench["queue_ms"] for s in specs)


def test_tbf_case_refuses_delay_or_loss() -> None:
    sc = load("aggregate")
    with pytest.raises(LabError):
        tbf_links(sc, {"name": "x", "rates_mbit": [1000, 1000], "delays_ms": [5, 0]})
    with pytest.raises(LabError):
        tbf_links(sc, {"name": "x", "rates_mbit": [1000], "delays_ms": [0], "loss": [0.01]})
