"""End-to-end tests of the name service (lab/naming.py): servers sharing records through a
real etcd cluster, a client that resolves its server and moves to another when it dies,
forged and replayed records refused, the embedded store surviving a restart.

Failover bound, from the parameters set here (detect_ms = 1000, docs/PROTOCOL.md §6.4, §6.6;
crates/multihome/src/daemon/naming.rs): the client carried data within the last keepalive
interval (the transfer just before the kill), so its paths are probed every detect / 4 and
the dead server's paths go Down within detect + probe interval = 1000 + 250 ms (an idle
client would take up to keepalive + detect = 6 s, §6.6); the client looks every tick
(250 ms); the resolve round waits 100 ms after the first answer; the new handshake is one
round trip (< 1 ms here); the test polls status every 50 ms plus up to ~100 ms per
`multihome status`. Sum 1.75 s; the issue's bar is 3 s, which is asserted.
"""

from __future__ import annotations

import time
from pathlib import Path

from lab.naming import (
    KIND_IDENTITY,
    REFUSED_BAD_SIGNATURE,
    REFUSED_OVERSIZED,
    REFUSED_STALE,
    REFUSED_UNSIGNED,
    NamingLab,
    ask,
    name_of,
    server_ip,
    wait_for,
)
from lab.netns import Lab

FAILOVER_BAR_S = 3.0


def test_failover_through_etcd(lab: Lab, multihome_bin: Path) -> None:
    """Two servers on a 3-member etcd: the client's server is killed; within 3 s it is
    served by the other, a new transfer arrives intact, and its record names the new server."""
    nl = NamingLab(lab, servers=2, clients=1, store="etcd", binary=multihome_bin)
    nl.start()
    wait_for(
        lambda: nl.served_by(0) is not None, 20, "client established through a resolved server"
    )
    first = nl.served_by(0)
    assert first is not None
    assert nl.transfer(0, 4, port=9001).wait(30).intact
    # Its record, read through the *other* server's resolver (shared through etcd, in that
    # server's watched copy within milliseconds), names the server in use.
    other = 1 - first
    me = nl.keys["client0"]
    wait_for(lambda: nl.status(0)["naming"]["published_seq"] is not None, 5, "record published")
    seq = nl.status(0)["naming"]["published_seq"]
    wait_for(lambda: nl.resolve(0, me, other)["seq"] >= seq, 2, "record at the other server")
    rec = nl.resolve(0, me, other)
    srv = nl.resolve(0, nl.keys[f"server{first}"], other, server=True)
    assert rec["server"] == srv["name"], (rec, srv)
    assert rec["links"][0]["address"] == "10.63.0.1"
    # What the client's `status` shows: the server in use and its record's publication.
    text = nl.status_text(0)
    assert f"at 10.60.{first}.1:7000, record published" in text, text
    assert f"(seq {seq})" in text or "(seq " in text, text

    nl.kill_server(first)
    t0 = time.monotonic()
    wait_for(lambda: nl.served_by(0) == other, 10, "client served by the other server")
    took = time.monotonic() - t0
    assert took <= FAILOVER_BAR_S, f"failover took {took:.2f}s"
    st = nl.status(0)["naming"]
    assert st["failovers"] == 1
    assert st["server_address"] == f"10.60.{other}.1:7000"
    assert nl.transfer(0, 4, port=9002).wait(30).intact
    wait_for(
        lambda: (
            nl.resolve(0, me, other)["server"]
            == nl.resolve(0, nl.keys[f"server{other}"], other, server=True)["name"]
        ),
        5,
        "record names the new server",
    )


def test_embedded_store_refuses_forgeries_and_survives_restart(
    lab: Lab, multihome_bin: Path
) -> None:
    """One server, embedded store: a record altered after signing, the same without its
    signature, an oversized one and a replayed copy are refused (status codes 20, 18, 17,
    23), change nothing and show in the server's `status` per reason; after the server
    restarts the client's record is still served, from disk."""
    nl = NamingLab(lab, servers=1, clients=1, store="embedded", binary=multihome_bin)
    nl.start()
    wait_for(lambda: nl.served_by(0) == 0, 20, "client established")
    wait_for(lambda: nl.status(0)["naming"]["published_seq"] is not None, 5, "record published")
    me = nl.keys["client0"]
    before = nl.resolve(0, me, 0)
    # The stored bytes, as a resolver serves them.
    status, recs = ask(
        nl.cli[0], server_ip(0), 1, bytes([KIND_IDENTITY]) + bytes.fromhex(before["name"])
    )
    assert status == 0 and len(recs) == 1
    good = recs[0]
    assert name_of(good).hex() == before["name"]
    # Forged: the link's address changed after signing (its last byte, before port + sig).
    forged = bytearray(good)
    forged[-64 - 3] ^= 0x01
    assert ask(nl.cli[0], server_ip(0), 3, bytes(forged))[0] == REFUSED_BAD_SIGNATURE
    unsigned = bytes(forged[:-64]) + bytes(64)
    assert ask(nl.cli[0], server_ip(0), 3, unsigned)[0] == REFUSED_UNSIGNED
    assert ask(nl.cli[0], server_ip(0), 3, good + bytes(700))[0] == REFUSED_OVERSIZED
    # Replayed: the very record already stored.
    assert ask(nl.cli[0], server_ip(0), 3, good)[0] == REFUSED_STALE
    after = nl.resolve(0, me, 0)
    assert (after["seq"], after["links"]) == (before["seq"], before["links"])
    # The server's operator sees each refusal by reason, in JSON and in the table view.
    refused = nl.server_status(0)["naming"]["refused"]
    assert refused["total"] == 4, refused
    assert (refused["bad_signature"], refused["unsigned"]) == (1, 1), refused
    assert (refused["oversized"], refused["stale"]) == (1, 1), refused
    text = nl.server_status(0, text=True)
    assert "refused 4 (unsigned 1, bad_signature 1, stale 1, oversized 1)" in text, text
    # Restart: stop the client first (it would publish again), then the server.
    nl.daemons["client0"].stop()
    nl.daemons["server0"].stop()
    nl.start_server(0)
    kept = nl.resolve(0, me, 0)
    assert (kept["seq"], kept["links"]) == (before["seq"], before["links"])
