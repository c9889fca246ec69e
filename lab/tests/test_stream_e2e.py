"""End-to-end tests of stream mode (docs/STREAM.md): the client ends the LAN host's TCP
(TPROXY) and carries it over kernel MPTCP, a subflow per link, to the server, which opens
the connection to the origin.

Bounds come from the links: two tbf links of FAST and SLOW Mbit/s. One MPTCP subflow carries
at most (1500 - 52 - 20) / 1514 of its link rate as application bytes (IPv4 + TCP with
timestamps 52, the DSS option's 20, Ethernet 14), so the first link alone gives at most
FAST * 0.943; more than 1.1 times that proves the second link carried its share.
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.mptcp import counters as mptcp_counters
from lab.netns import Lab, Proc
from lab.topology import ORIGIN, LinkSpec, Topology, link_ip

FAST, SLOW = 100.0, 50.0
SUBFLOW_EFFICIENCY = (1500 - 52 - 20) / 1514
PORT = 9400

# A one-connection TCP server in the origin; MODE says what it does with the connection.
SERVER = textwrap.dedent(
    """
    import hashlib, random, socket, struct, sys
    mode = sys.argv[1]
    ls = socket.create_server(("0.0.0.0", int(sys.argv[2])))
    print("LISTENING", flush=True)
    c, _ = ls.accept()
    if mode == "download":  # send argv[3] MiB of seeded random bytes, print their SHA-256
        h, rnd = hashlib.sha256(), random.Random(7)
        for _ in range(int(sys.argv[3])):
            chunk = rnd.randbytes(1 << 20)
            h.update(chunk); c.sendall(chunk)
        c.close(); print("SENT", h.hexdigest(), flush=True)
    elif mode == "echo-sha":  # read to EOF, answer with the SHA-256 of what came, close
        h, n = hashlib.sha256(), 0
        while d := c.recv(65536):
            h.update(d); n += len(d)
        c.sendall(f"{h.hexdigest()} {n}".encode()); c.close()
    elif mode == "reset":  # read 5 bytes, then reset
        c.recv(5)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)); c.close()
    elif mode == "expect-reset":  # wait for the client's reset
        try:
            while c.recv(65536):
                pass
            print("EOF", flush=True)
        except ConnectionResetError:
            print("RESET", flush=True)
    """
)

# The LAN host's side, MODE as above; prints what the application saw.
CLIENT = textwrap.dedent(
    """
    import hashlib, os, socket, struct, sys
    mode = sys.argv[1]
    try:
        s = socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=10)
    except ConnectionRefusedError:
        print("REFUSED", flush=True)
        sys.exit(0)
    if mode.startswith("download"):  # read to EOF: SHA-256, bytes, longest wait between reads
        import time
        if mode == "download-halfclosed":  # nothing to send: shut our side at once
            s.shutdown(socket.SHUT_WR)
        s.settimeout(60)
        h, n, last, gap = hashlib.sha256(), 0, None, 0.0
        while d := s.recv(1 << 16):
            now = time.monotonic()
            gap = max(gap, now - last) if last is not None else gap
            h.update(d); n += len(d); last = now
        print("RECEIVED", h.hexdigest(), n, f"{gap:.3f}", flush=True)
    elif mode == "echo-sha":
        data = os.urandom(3 << 20)
        s.sendall(data); s.shutdown(socket.SHUT_WR)
        answer = b""
        while d := s.recv(65536):
            answer += d
        ok = answer.decode() == f"{hashlib.sha256(data).hexdigest()} {len(data)}"
        print("HALFCLOSE-OK" if ok else "HALFCLOSE-BAD " + answer.decode(), flush=True)
    elif mode == "expect-reset":
        s.sendall(b"hello")
        try:
            print("EOF" if s.recv(100) == b"" else "DATA", flush=True)
        except ConnectionResetError:
            print("RESET", flush=True)
    elif mode == "reset":
        s.sendall(b"hello")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)); s.close()
        print("SENT-RESET", flush=True)
    """
)


@pytest.fixture
def stream_topo(lab: Lab, multihome_bin: Path) -> Iterator[Topology]:
    topo = Topology(
        lab,
        [LinkSpec("fast", rate_mbit=FAST), LinkSpec("slow", rate_mbit=SLOW)],
        binary=multihome_bin,
        client_sections={"stream": {"lan": ["lan0"]}},
        server_extra={"stream": True},
    )
    topo.start()
    yield topo


def origin_server(topo: Topology, mode: str, *args: str) -> Proc:
    proc = topo.org.spawn(["python3", "-c", SERVER, mode, str(PORT), *args], f"stream-srv-{mode}")
    deadline = time.monotonic() + 10
    while "LISTENING" not in proc.output():
        assert proc.alive() and time.monotonic() < deadline, proc.tail()
        time.sleep(0.05)
    return proc


def lan_client(topo: Topology, mode: str) -> str:
    return topo.lan.run(
        ["python3", "-c", CLIENT, mode, ORIGIN, str(PORT)], timeout=30
    ).stdout.strip()


def stream_status(topo: Topology, side: str) -> dict:
    return topo.status(side)["stream"]


def test_a_200_mib_transfer_arrives_intact_over_both_links(stream_topo: Topology) -> None:
    before = mptcp_counters(stream_topo.srv)
    result = stream_topo.transfer(200, "cubic").wait(timeout=120)
    assert result.received_sha256 == result.expected_sha256, "bytes corrupted or lost"
    after = mptcp_counters(stream_topo.srv)
    joins = after.get("MPJoinAckRx", 0) - before.get("MPJoinAckRx", 0)
    assert joins >= 1, "the server saw no subflow join: one link only"
    one_link = FAST * SUBFLOW_EFFICIENCY
    assert result.mbps > 1.1 * one_link, (
        f"{result.mbps:.1f} Mbit/s is not above 1.1 x the first link alone ({one_link:.1f})"
    )
    cli = stream_status(stream_topo, "client")
    assert cli["closed"] >= 1 and cli["reset"] == 0 and cli["subflows"] >= 1, cli
    assert cli["bytes_up"] >= 200 << 20, cli


def test_half_close_carries_the_answer_after_the_end_of_the_request(
    stream_topo: Topology,
) -> None:
    srv = origin_server(stream_topo, "echo-sha")
    assert lan_client(stream_topo, "echo-sha") == "HALFCLOSE-OK"
    srv.wait(10)


def test_a_reset_by_the_origin_reaches_the_application(stream_topo: Topology) -> None:
    srv = origin_server(stream_topo, "reset")
    assert lan_client(stream_topo, "expect-reset") == "RESET"
    srv.wait(10)
    assert stream_status(stream_topo, "client")["reset"] == 1


def test_a_reset_by_the_application_reaches_the_origin(stream_topo: Topology) -> None:
    srv = origin_server(stream_topo, "expect-reset")
    assert lan_client(stream_topo, "reset") == "SENT-RESET"
    srv.wait(10)
    assert "RESET" in srv.output()


def test_a_refused_destination_is_refused_for_the_application(stream_topo: Topology) -> None:
    # Nothing listens on the origin's port: the server's connect is refused, and the held
    # SYN is answered with a reset, so the application's connect() itself fails.
    out = lan_client(stream_topo, "expect-reset")
    assert out == "REFUSED"
    st = stream_status(stream_topo, "client")
    assert st["refused"] == 1 and st["connected"] == 0, st


def test_a_link_that_delivers_nothing_costs_one_stagger_not_a_timeout(
    stream_topo: Topology,
) -> None:
    # Link 0 (first in the config) is up with its address but drops everything: the first
    # subflow's attempt over link 1 starts 250 ms later and wins. Bound: that stagger, the
    # handshake's round trips (sub-ms here) and the Python start-up, well under the 10-s
    # connect timeout a single attempt on link 0 would wait.
    stream_topo.blackhole(0)
    srv = origin_server(stream_topo, "echo-sha")
    started = time.monotonic()
    assert lan_client(stream_topo, "echo-sha") == "HALFCLOSE-OK"
    elapsed = time.monotonic() - started
    srv.wait(10)
    assert elapsed < 3.0, f"{elapsed:.2f} s: the connection waited for the dead link"


def mptcp_subflow_ccs(topo: Topology) -> list[str]:
    """The congestion control of each of the client's MPTCP subflows (``ss -tin``: the
    info line under a socket starts with the algorithm's name)."""
    lines = topo.cli.run(["ss", "-tin"]).stdout.splitlines()
    return [ln.split()[0] for ln in lines if "tcp-ulp-mptcp" in ln and ln[:1].isspace()]


def test_subflows_keep_the_configured_congestion_control_across_a_restart(
    stream_topo: Topology,
) -> None:
    # Reno is built into every kernel and is nobody's default: seeing it on the subflows
    # means the setting reached them, on both links, after the daemons restarted.
    stream_topo.stop_for_restart()
    stream_topo.set_stream(True, "reno")
    stream_topo.start()
    stream_topo.reconfigure(client_extra={"aggregate_scheduler": "weighted"})
    transfer = stream_topo.transfer(120, "cubic")
    seen: list[str] = []
    deadline = time.monotonic() + 20
    while len(seen) < 2 and time.monotonic() < deadline:
        seen = mptcp_subflow_ccs(stream_topo)
        time.sleep(0.2)
    result = transfer.wait(timeout=60)
    assert result.received_sha256 == result.expected_sha256, "bytes corrupted or lost"
    assert len(seen) >= 2 and set(seen) == {"reno"}, f"subflows' congestion control: {seen}"


def outage_until_subflow_closed(topo: Topology) -> None:
    """Link 0 drops everything until the client has closed a subflow (within 3 s of the
    cut: a probe interval and a Suspect bound, with room for a loaded machine), then heals."""
    topo.blackhole(0)
    cut = time.monotonic()
    while stream_status(topo, "client")["subflows_closed"] < 1:
        assert time.monotonic() < cut + 3, stream_status(topo, "client")
        time.sleep(0.05)
    topo.unblackhole(0)


def test_a_link_the_tunnel_finds_dead_loses_its_subflow_and_gets_one_back(
    stream_topo: Topology,
) -> None:
    # Link 0 drops everything mid-transfer: the tunnel has it Suspect within a few probe
    # intervals, the client closes its subflow (the kernel resends that subflow's data in
    # flight over link 1) and opens a new one once the tunnel has the link Up again. The
    # user sees every byte arrive, once. While a stream connection is open the tunnel
    # probes fast, so the close comes within a probe interval (0.25 s) and a Suspect bound
    # (2 srtt + 4 rttvar, at least 0.1 s) of the cut: 3 s allows for a loaded machine.
    before = mptcp_counters(stream_topo.srv)
    transfer = stream_topo.transfer(200, "cubic")
    time.sleep(2)
    outage_until_subflow_closed(stream_topo)
    deadline = time.monotonic() + 15
    while stream_status(stream_topo, "client")["subflows_reopened"] < 1:
        assert time.monotonic() < deadline, stream_status(stream_topo, "client")
        time.sleep(0.1)
    result = transfer.wait(timeout=90)
    assert result.received_sha256 == result.expected_sha256, "bytes corrupted or lost"
    joins = mptcp_counters(stream_topo.srv).get("MPJoinAckRx", 0) - before.get("MPJoinAckRx", 0)
    assert joins >= 2, f"{joins} subflow joins: the link's subflow was not opened again"


def start_download(topo: Topology, mode: str, mib: int) -> tuple[Proc, Proc]:
    """The origin sending ``mib`` MiB to the LAN host, which reads them in ``mode``."""
    origin = origin_server(topo, "download", str(mib))
    host = topo.lan.spawn(["python3", "-c", CLIENT, mode, ORIGIN, str(PORT)], f"stream-{mode}")
    return origin, host


def assert_downloaded_intact(host: Proc, origin: Proc, mib: int) -> None:
    """Every byte the origin sent arrived, once, in order."""
    host.wait(120)
    origin.wait(10)
    got = host.output().split()
    sent = origin.output().split()
    assert got[:1] == ["RECEIVED"] and sent[-2:-1] == ["SENT"], (host.tail(), origin.tail())
    assert got[1] == sent[-1] and int(got[2]) == mib << 20, "bytes corrupted or lost"


def server_subflows_to(topo: Topology, addr: str) -> list[str]:
    """The server's established TCP sockets (MPTCP subflows) to the client address ``addr``."""
    out = topo.srv.run(["ss", "-tnH", "state", "established", "dst", addr]).stdout
    return [line for line in out.splitlines() if line.strip()]


def test_a_download_whose_link_dies_stops_on_that_link_at_the_server_too(
    stream_topo: Topology,
) -> None:
    # The origin sends to the LAN host; link 0 (which carries the connection's initial
    # subflow, address id 0) drops everything mid-download. The client closes its subflow
    # there, and first removes its address (REMOVE_ADDR, sent on link 1's subflow): the
    # server closes its end of the dead subflow and resends what it had in flight on it
    # over link 1, rather than sending on into the dead link until its own timeouts
    # (without the removal, its end stays established for minutes). Bound: the client
    # acts within 3 s of the cut (the dead-link test's bound) and the option takes one
    # one-way trip over link 1, so 3.5 s. Every byte arrives, once, in order.
    before = mptcp_counters(stream_topo.srv)
    origin, host = start_download(stream_topo, "download", 150)
    time.sleep(2)
    dead = link_ip(0, "cli")
    assert server_subflows_to(stream_topo, dead), "the server had no subflow on link 0"
    stream_topo.blackhole(0)
    cut = time.monotonic()
    while server_subflows_to(stream_topo, dead):
        assert time.monotonic() < cut + 3.5, (
            server_subflows_to(stream_topo, dead),
            stream_status(stream_topo, "client"),
        )
        time.sleep(0.05)
    cli = stream_status(stream_topo, "client")
    assert cli["subflows_closed"] >= 1 and cli["addrs_removed"] >= 1, cli
    removed = mptcp_counters(stream_topo.srv).get("RmAddr", 0) - before.get("RmAddr", 0)
    assert removed >= 1, "the server received no REMOVE_ADDR"
    stream_topo.unblackhole(0)
    assert_downloaded_intact(host, origin, 150)


def test_a_half_closed_download_gets_a_subflow_back_after_an_outage(
    stream_topo: Topology,
) -> None:
    # The LAN host shuts its sending side at once and downloads (as a one-request client
    # such as `nc -N` does). Link 0 goes dark and comes back mid-download:
    # the client closes its subflow there and must be able to open a new one. Kernel MPTCP
    # accepts no MP_JOIN once it has seen a DATA_FIN, so the half-close must travel as a
    # record alone, not as a DATA_FIN, until both directions are done.
    before = mptcp_counters(stream_topo.srv)
    origin, host = start_download(stream_topo, "download-halfclosed", 150)
    time.sleep(2)
    outage_until_subflow_closed(stream_topo)
    joins_before = before.get("MPJoinAckRx", 0)
    deadline = time.monotonic() + 15
    while mptcp_counters(stream_topo.srv).get("MPJoinAckRx", 0) - joins_before < 2:
        assert time.monotonic() < deadline, (
            mptcp_counters(stream_topo.srv),
            stream_status(stream_topo, "client"),
        )
        time.sleep(0.1)
    assert_downloaded_intact(host, origin, 150)
