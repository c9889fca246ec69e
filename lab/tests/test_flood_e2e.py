"""A handshake flood from spoofed sources while a real client connects (PROTOCOL.md §3.5).

Two generators (``lab/tools/hsflood.py``) in the outsider namespace send initiations to the
server's port from addresses in 198.18.0.0/15 (the server routes that prefix back to the
outsider, whose namespace drops the replies): one writes random bytes (a sender that does not
know the server's public key), one writes a right mac1 (an attacker that knows it). The client
daemon starts once the flood runs, must come up through it — the server is under load, so via
a cookie reply and its initiation again with mac2 — and carries a checksummed transfer intact.

Asserted on the daemons' counters: the random flood lands in ``rx_bad_mac1`` (no
Diffie-Hellman); the mac1 flood reaches the Diffie-Hellman only about ``LOAD_THRESHOLD`` times
a second before load sets in, then gets cookie replies; the client accepted a cookie and was
never rate-limited or refused. The server's CPU time per 1000 flood datagrams is printed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from lab.netns import Lab, tool_cmd
from lab.topology import OUTSIDER_PREFIX, PORT, LinkSpec, Topology
from lab.traffic import parse_result

SPOOFED = "198.18.0.0/15"
PPS = 4000  # per generator
SECONDS = 6.0
LOAD_THRESHOLD = 100  # crates/proto/src/endpoint/server/guard.rs
MIB = 8


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_real_client_gets_through_a_spoofed_handshake_flood(lab: Lab, multihome_bin: Path) -> None:
    topo = Topology(
        lab,
        [LinkSpec("a", rate_mbit=50), LinkSpec("b", rate_mbit=50)],
        policy="best",
        binary=multihome_bin,
    )
    out = topo.add_outsider()
    topo.srv.route_replace(SPOOFED, via=f"{OUTSIDER_PREFIX}.2")
    flood: dict[str, object] = {}

    def start_flood() -> None:
        flood["cpu0"] = cpu_seconds(topo.daemons["server"].pid)
        flood["t0"] = time.monotonic()
        for kind in ("random", "mac1"):
            cmd = tool_cmd(
                "hsflood", "--host", f"{OUTSIDER_PREFIX}.1", "--port", str(PORT),
                "--sources", SPOOFED, "--kind", kind, "--server-key", topo.server_pub,
                "--count", str(int(PPS * SECONDS)), "--pps", str(PPS),
                "--seed", str(len(kind)),
            )  # fmt: skip
            flood[kind] = out.spawn(cmd, f"flood-{kind}")
        time.sleep(1.0)  # the server is under load before the client's first initiation

    topo.start(timeout=20, before_client=start_flood)
    up_after = time.monotonic() - flood["t0"]
    res = topo.transfer(MIB, "cubic").wait(timeout=60)
    assert res.intact, res
    sent = {}
    for kind in ("random", "mac1"):
        proc = flood[kind]
        proc.wait(SECONDS + 30)
        sent[kind] = parse_result(proc)
    cpu = cpu_seconds(topo.daemons["server"].pid) - flood["cpu0"]
    s, c = topo.counters("server"), topo.counters("client")
    seen = s["rx_bad_mac1"] + s["tx_cookie_replies"] + s["rx_handshake_failed"]
    print(
        f"flood sent {sent}; client up {up_after:.1f} s after the flood began; transfer "
        f"{res.mbps:.1f} Mbit/s intact; server counters: bad_mac1 {s['rx_bad_mac1']}, "
        f"cookie replies {s['tx_cookie_replies']}, DH failed {s['rx_handshake_failed']}, "
        f"rate-limited {s['rx_handshake_rate_limited']}; server CPU {cpu:.2f} s for {seen} "
        f"flood datagrams = {1000 * cpu / max(seen, 1) * 1000:.1f} ms per 1000 (including "
        f"the transfer)"
    )
    n = PPS * SECONDS
    # Every datagram is counted once; some may be lost to a full socket buffer.
    assert s["rx_bad_mac1"] >= 0.8 * n, (sent, s)
    # The mac1 flood: a few windows' worth reach the DH, the rest get cookies.
    assert s["rx_handshake_failed"] <= 3 * (LOAD_THRESHOLD + 1), s
    assert s["tx_cookie_replies"] >= 0.8 * n - s["rx_handshake_failed"], (sent, s)
    # The real client: a cookie, then its handshake; never refused.
    assert c["rx_cookie_replies"] >= 1, c
    assert c["handshakes"] >= 1 and s["handshakes"] >= 1
    assert s["rx_handshake_rate_limited"] == 0, s
    assert s["rx_unknown_peer"] == 0, s
