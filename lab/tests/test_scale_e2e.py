"""Many sessions on one server: 200 real clients x 2 links (``multihome loadgen``, lab/scale.py).

Each session is the real client endpoint with its own key and two real UDP sockets on its own
addresses; the server is the real daemon with 200 ``[[peer]]`` entries. Asserted on what the
sessions and the sink saw: every session comes up; numbered packets from every session reach
the sink and their echoes come back (counted per session); 5 % of the sessions leave (CLOSE)
and join again with the same key, 5 % move link 0 to a new address, and both keep carrying
traffic; the server refused no one (no rate limiting, no unknown peer). The server runs two
data-path threads: both hold sessions, and every session is listed once.
"""

from __future__ import annotations

from pathlib import Path

from lab.netns import Lab
from lab.scale import ScaleLab, phase_results, wait_event

SESSIONS = 200


def test_200_sessions_on_one_server(lab: Lab, multihome_bin: Path) -> None:
    s = ScaleLab(lab, multihome_bin, SESSIONS, threads=2)
    s.keys()
    s.start_server()
    lg = s.loadgen(
        ["up", "steady:3", "churn:4", "roam:4"],
        echo=True, rate_kbit=32, packet_bytes=400, fraction=0.05, up_timeout=20,
    )  # fmt: skip
    wait_event(lg, lambda e: e.get("event") == "summary", 60)
    res = {p["phase"]: p for p in phase_results(lg)}
    print(res)
    up = res["up"]
    assert up["up"] == SESSIONS, up
    for name in ("steady", "churn", "roam"):
        p = res[name]
        # 10 packets/s per session: every session sent in every phase.
        assert p["sent"] >= SESSIONS * 10 * p["seconds"] * 0.8, p
        assert p["loss_pct"] <= 0.5, p
        assert p["echo_loss_pct"] <= 0.5, p
    for name in ("churn", "roam"):
        p = res[name]
        assert p["acted_on"] == SESSIONS // 20, p
        assert p["back_up"] == p["acted_on"], p
        assert p["acted_sent"] > 0, p
    status = s.server_status()
    counters = status["counters"]
    sessions = status["sessions"]
    assert len(sessions) == SESSIONS, len(sessions)
    per_thread = [sum(1 for x in sessions if x["thread"] == t) for t in (0, 1)]
    # Keys map to threads uniformly: 100 each, give or take a binomial spread.
    assert min(per_thread) >= SESSIONS // 4, per_thread
    # Initiations land on either thread by source; those for the other's peers move.
    assert counters["handed_off"] > 0, counters
    assert counters["handoff_drops"] == 0, counters
    assert counters["handshakes"] >= SESSIONS + res["churn"]["acted_on"], counters
    assert counters["rx_handshake_rate_limited"] == 0, counters
    assert counters["rx_unknown_peer"] == 0, counters
