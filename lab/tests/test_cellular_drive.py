"""The pure arithmetic of the ``cellular-drive`` suite (lab/bench/cellular_drive_traces.py).

No namespaces: trace outages, the stall left while any link delivers, and link state changes
parsed from a daemon log, on hand-made traces whose answers are known.
"""

from __future__ import annotations

from lab.bench import cellular_drive_traces as cd


def steady(until: int, every: int = 10, skip: tuple[int, int] | None = None) -> list[int]:
    """One opportunity every ``every`` ms up to ``until``, none inside ``skip``."""
    return [t for t in range(every, until + 1, every) if not (skip and skip[0] < t < skip[1])]


def test_out_intervals_find_gaps_above_the_threshold_only() -> None:
    ms = steady(10_000, skip=(2_000, 3_500)) + [10_000]
    # A 1.5 s gap is out at a 200 ms threshold; the 10 ms spacing is not.
    assert cd.out_intervals(ms, 0, 10_000, 200) == [(2_000.0, 3_500.0)]
    # Clipped to the window; a gap below the threshold is not out.
    assert cd.out_intervals(ms, 3_000, 5_000, 200) == [(3_000.0, 3_500.0)]
    assert cd.out_intervals(ms, 0, 10_000, 2_000) == []


def test_trace_loops_and_rotation_keeps_the_period() -> None:
    ms = steady(4_000, skip=(500, 1_500))  # period 4 s, out 0.5-1.5 s of every lap
    # The second lap repeats the gap.
    assert cd.out_intervals(ms, 4_000, 8_000, 200) == [(4_500.0, 5_500.0)]
    rot = cd.rotate(ms, 2_000)
    assert rot[-1] == 4_000 and len(rot) == len(ms)
    # Started 2 s in: the gap comes 2 s earlier, and again one period later.
    assert cd.out_intervals(rot, 0, 8_000, 200) == [(2_500.0, 3_500.0), (6_500.0, 7_500.0)]
    # Started inside the gap: the period is kept by one opportunity pinned at its end.
    rot = cd.rotate(ms, 1_000)
    assert rot[-1] == 4_000 and len(rot) == len(ms) + 1
    assert cd.out_intervals(rot, 0, 3_000, 200) == [(0.0, 500.0)]


def test_outages_merge_directions_and_respect_detect_interval() -> None:
    down = steady(20_000, skip=(1_000, 2_500)) + [20_000]
    up = steady(20_000, skip=(2_000, 3_200)) + [20_000]
    other = steady(20_000, skip=(10_000, 10_900)) + [20_000]
    # The up gap overlaps the down gap: one outage; a 0.9 s gap is below detect_ms.
    assert cd.count_outages([down, up], 0, 20_000, 1_000) == 1
    assert cd.count_outages([down, other], 0, 20_000, 1_000) == 1
    assert cd.count_outages([up, other], 0, 20_000, 800) == 2


def test_longest_stall_excludes_time_when_every_link_is_out() -> None:
    # Bytes every 10-ms bin, then nothing for bins 100..149 (0.5 s), then bytes again.
    timeline = [1_000 * (i + 1) if i < 100 else 100_000 for i in range(150)]
    timeline += [100_000 + 1_000 * (i + 1) for i in range(50)]
    assert cd.stalls(timeline, 10) == [(1_000.0, 1_500.0)]
    link_a = [(900.0, 1_400.0)]
    link_b = [(1_100.0, 2_000.0)]
    dead = cd.all_out([link_a, link_b])
    assert dead == [(1_100.0, 1_400.0)]
    got = cd.longest_stall(timeline, 10, dead)
    assert got["raw_ms"] == 500.0
    # 0.3 s of it every link was out: 0.2 s of stall while a link delivered.
    assert got["any_link_ms"] == 200.0
    assert got["any_link_at_ms"] == 1_000.0
    # Before the first byte is connection set-up, not a stall.
    assert cd.stalls([0, 0, 0, 5, 9], 10) == []


def test_state_changes_counted_from_the_log_inside_the_window() -> None:
    ev = " INFO multihome::daemon::core: session event event=PathState"
    log = "\n".join(
        [
            f"2026-11-28T10:00:00.000000Z {ev}(PathId(1), Down)",
            f"2026-11-28T10:00:05.000000Z {ev}(PathId(0), Suspect)",
            f"\x1b[2m2026-11-28T10:00:06.500000Z\x1b[0m \x1b[32m{ev}\x1b[0m(PathId(0), Down)",
            f"2026-11-28T10:00:08.000000Z {ev}(PathId(0), Up)",
            "2026-11-28T10:00:09.000000Z  INFO multihome: session established=true",
        ]
    )
    events = cd.path_events(log)
    assert [(p, s) for _t, p, s in events] == [(1, "down"), (0, "suspect"), (0, "down"), (0, "up")]
    t0 = events[0][0] + 1  # the first Down is before the run
    changes = cd.state_changes(events, t0, t0 + 60, 2)
    assert changes[0]["downs"] == 1 and changes[0]["ups"] == 1 and changes[0]["suspects"] == 1
    assert changes[0]["changes"] == 2
    assert changes[1]["downs"] == 0
    assert changes[0]["events"][1] == [5.5, "down"]
