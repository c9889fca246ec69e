"""End-to-end tests of the multihome tunnel in network namespaces (see lab/topology.py).

Every pass bound is derived from the link parameters set here, with the slack written beside
it. Goodput over a tbf of R Mbit/s through the tunnel is at most R * efficiency, where
efficiency = inner TCP payload per outer wire byte = (tun MTU - 52) / (tun MTU + 120): 52 =
inner IPv4 + TCP with timestamps; 120 = the tunnel's 78 bytes per packet (header, AEAD tag,
piggybacked ack; crates/multihome config/client.rs) + outer IPv4/UDP 28 + Ethernet 14.
"""

from __future__ import annotations

import json
import math
import re
import signal
import time
from pathlib import Path

import pytest

from lab.netns import Lab, LabError, Namespace, tool_cmd
from lab.topology import ORIGIN, OUTSIDER_PREFIX, LinkSpec, Topology, link_ip
from lab.traffic import parse_result
from lab.voip import voip_calls

FAST, SLOW = 100.0, 50.0  # Mbit/s, tbf on both directions of each link
MIB_BITS = 8 * (1 << 20)
DETECT_MS = 1000  # the contract's default detect_ms
# Slack on link-down detection: 50 ms status poll + up to ~100 ms for one `multihome status`
# round trip + up to a quarter of detect_ms for the daemon's probe/timer granularity,
# rounded up to 500 ms.
DETECT_SLACK_MS = 500
# Scheduling slack of the Python sender and receiver of a UDP stream, which read the clock
# around sendto/recv: one scheduler tick (4 ms at HZ=250) twice, plus rounding.
HOST_SLACK_MS = 10
# Counters a refused or malformed datagram lands in (the contract's names plus the daemon's
# unknown_index/malformed/spoofed/handshake ones). Not rx_duplicates: redundant copies are legit.
REJECT_RE = re.compile(
    r"garbage|unauth|replay|unknown_peer|unknown_index|malformed|spoofed|handshake_fail|bad_mac1"
)


def two_links(
    lab: Lab,
    binary: Path,
    policy: str = "aggregate",
    *,
    delays_ms: tuple[float, float] | None = None,
    **kw: object,
) -> Topology:
    """fast + slow links: tbf on direct veths, or with ``delays_ms`` (one-way, fast and slow)
    linkem links of the same rates with those delays and 150 kB drop-tail queues."""
    if delays_ms is None:
        links = [LinkSpec("fast", rate_mbit=FAST), LinkSpec("slow", rate_mbit=SLOW)]
    else:
        links = [
            LinkSpec(
                name,
                linkem={
                    "both": {"rate": f"{rate:g}mbit", "delay": f"{d:g}ms", "queue_bytes": 150_000}
                },
                seed=i + 1,
            )
            for i, (name, rate, d) in enumerate(
                (("fast", FAST, delays_ms[0]), ("slow", SLOW, delays_ms[1]))
            )
        ]
    topo = Topology(lab, links, policy=policy, binary=binary, **kw)  # type: ignore[arg-type]
    topo.start()
    return topo


def efficiency(topo: Topology) -> float:
    out = topo.cli.ip("-o", "link", "show", "mh0").stdout
    mtu = int(out.split(" mtu ")[1].split()[0])
    # TCP payload (inner IPv4 + TCP with timestamps: 52 bytes) per Ethernet frame of a full
    # datagram: TUN MTU + 52 tunnel + 28 outer IPv4/UDP + 14 Ethernet (docs/PROTOCOL.md §11).
    return (mtu - 52) / (mtu + 94)


def link_tx(topo: Topology) -> dict[str, int]:
    sess = topo.session("client")
    assert sess is not None
    return {lk["name"]: lk["tx_bytes"] for lk in sess["links"]}


def rejects(counters: dict[str, int]) -> int:
    return sum(v for k, v in counters.items() if REJECT_RE.search(k) and isinstance(v, int))


# No rerun. Over these tbf links (sub-millisecond RTT, a token bucket that passes bursts at
# line rate) `aggregate` once starved the fast link in ~1 run in 5 with an inner BBR flow
# (72 Mbit/s); docs/AGGREGATION.md §1 has the three rate-sampling rules that fixed it.
def expected_cipher() -> str:
    """The data cipher `cipher = "auto"` negotiates between two daemons on this machine."""
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    return "aes-256-gcm" if {"aes", "pclmulqdq"} <= flags else "chacha20-poly1305"


@pytest.mark.parametrize(
    ("policy", "cc"), [("aggregate", "cubic"), ("aggregate", "bbr"), ("best", "cubic")]
)
def test_bulk_transfer_intact(lab: Lab, multihome_bin: Path, policy: str, cc: str) -> None:
    """200 MiB LAN host -> origin over 100 + 50 Mbit/s arrives intact, at a policy's rate."""
    topo = two_links(lab, multihome_bin, policy)
    eff = efficiency(topo)
    before = link_tx(topo)
    mib = 200
    # Give up if slower than half the slow link: nothing sane is that slow.
    res = topo.transfer(mib, cc).wait(timeout=mib * MIB_BITS / (0.5 * SLOW * eff * 1e6) + 10)
    assert res.intact, res
    after = link_tx(topo)
    sent = {k: after[k] - before[k] for k in after}
    share_slow = sent["slow"] / max(1, sum(sent.values()))
    print(f"{policy}/{cc}: {res.mbps:.1f} Mbit/s, slow-link share {share_slow:.2f}, eff {eff:.3f}")
    # Both daemons run `cipher = "auto"`: AES-256-GCM exactly when this CPU has AES-NI.
    assert topo.status("client")["sessions"][0]["cipher"] == expected_cipher()
    if policy == "aggregate":
        # Striping must beat the fast link alone, whose goodput ceiling is FAST * eff.
        assert res.mbps > FAST * eff, (res.mbps, sent)
        # Rate-proportional striping puts ~SLOW/(FAST+SLOW) = 1/3 on the slow link; half that.
        assert share_slow >= 0.5 * SLOW / (FAST + SLOW), sent
    else:
        # `best` ranks links by RTT; both idle RTTs are equal here (tbf adds no delay), so
        # either link is a correct choice. What `best` promises is one link at a time at
        # nearly that link's rate: 90 % of the bytes on the chosen link, and 70 % of its
        # goodput ceiling (the rest is slack for TCP start-up on a loaded 2-core machine).
        chosen = max(sent, key=lambda k: sent[k])
        rate = {"fast": FAST, "slow": SLOW}[chosen]
        assert sent[chosen] >= 0.9 * sum(sent.values()), sent
        assert res.mbps >= 0.7 * rate * eff, (res.mbps, sent)


def test_link_cut_mid_transfer(lab: Lab, multihome_bin: Path, linkem_bin: Path) -> None:
    """The fast link is cut mid-transfer: detected `down` in time, the TCP flow completes.

    linkem links with delay (5 and 15 ms one way); the cut is `linkem down`: the queue is
    flushed and nothing passes, while both interfaces stay up, as when a modem loses service.
    """
    topo = two_links(lab, multihome_bin, "aggregate", delays_ms=(5, 15))
    eff = efficiency(topo)
    mib = 120
    xfer = topo.transfer(mib, "cubic")
    xfer.wait_progress(30 << 20, timeout=30)
    topo.link_down(0)
    t_hole = time.monotonic()
    assert not xfer.done(), "transfer finished before the cut; grow it"
    detect_s = topo.wait_link_state("fast", "down", timeout=10)
    assert detect_s * 1000 <= DETECT_MS + DETECT_SLACK_MS, f"down after {detect_s:.3f}s"
    assert topo.link_states()["slow"] == "up", topo.link_states()
    # The rest goes over the slow link; allow half its goodput plus detection and 10 s.
    remaining_bits = (mib << 20) * 8
    res = xfer.wait(timeout=remaining_bits / (0.5 * SLOW * eff * 1e6) + DETECT_MS / 1000 + 10)
    assert res.intact, res
    elapsed = time.monotonic() - t_hole
    topo.link_up(0)
    # Probes keep running on a down link, so it must come back (generous: 10 detect times).
    topo.wait_link_state("fast", "up", timeout=10 * DETECT_MS / 1000)
    print(f"detected down in {detect_s * 1000:.0f} ms; completed {elapsed:.1f} s after hole")


def test_aggregate_over_unequal_delays(lab: Lab, multihome_bin: Path, linkem_bin: Path) -> None:
    """DSL/LTE-like one-way delays (5 and 25 ms): 150 MiB intact, both links used, and faster
    than the fast link alone.

    The receiver must hold the fast link's packets for the slow one's extra 20 ms; `aggregate`
    promises the same as with equal delays (test_bulk_transfer_intact): the slow link carries
    at least half its rate share, SLOW / (FAST + SLOW) / 2 = 1/6, and one TCP flow beats the
    fast link's goodput ceiling FAST * eff.
    """
    topo = two_links(lab, multihome_bin, "aggregate", delays_ms=(5, 25))
    eff = efficiency(topo)
    before = link_tx(topo)
    mib = 150
    res = topo.transfer(mib, "cubic").wait(timeout=mib * MIB_BITS / (0.5 * SLOW * eff * 1e6) + 10)
    assert res.intact, res
    after = link_tx(topo)
    sent = {k: after[k] - before[k] for k in after}
    share_slow = sent["slow"] / max(1, sum(sent.values()))
    print(f"5/25 ms: {res.mbps:.1f} Mbit/s (fast ceiling {FAST * eff:.1f}), slow {share_slow:.3f}")
    assert share_slow >= 0.5 * SLOW / (FAST + SLOW), sent
    assert res.mbps > FAST * eff, (res.mbps, sent)


def test_redundant_udp_under_random_loss(lab: Lab, multihome_bin: Path) -> None:
    """`redundant`: 2000 packets at 200/s while each link drops 20 %: ≤ 1 % lost, no dups.
    (At 50/s the test took 40 s and lost the same: 6 of 2000 in one run; at 200/s 6–10 in
    three.)

    With two independent copies the floor of plain duplication is p^2 = 4 %; 1 % (the issue's
    bound) needs more than one copy per link or repair, e.g. adaptive k on lossy paths.
    """
    loss_pct = 20.0
    topo = two_links(lab, multihome_bin, "redundant")
    # Loss starts after the handshake, so the test measures forwarding, not session setup.
    for veth in topo.veths:
        veth.loss(loss_pct)
    out = topo.udp_stream(count=2000, pps=200).wait()
    print(out)
    assert out["duplicates"] == 0, out
    assert out["loss"] <= 0.01, (
        f"delivered loss {out['loss']:.2%} (floor of 2 plain copies: {(loss_pct / 100) ** 2:.0%})"
        f": {out}"
    )


def test_client_address_change_mid_transfer(lab: Lab, multihome_bin: Path) -> None:
    """The client's address on the fast link changes mid-transfer; the server follows it."""
    topo = two_links(lab, multihome_bin, "aggregate")
    eff = efficiency(topo)
    mib = 120
    xfer = topo.transfer(mib, "cubic")
    xfer.wait_progress(30 << 20, timeout=30)
    new_ip = topo.renumber_client(0, subnet=101)
    assert not xfer.done(), "transfer finished before the address change; grow it"
    # The server learns the new source from the next authenticated packet (roaming).
    deadline = time.monotonic() + 5
    remotes: list[str] = []
    while time.monotonic() < deadline:
        sess = topo.session("server")
        remotes = [lk.get("remote", "") for lk in sess["links"]] if sess else []
        if any(r.startswith(f"{new_ip}:") for r in remotes):
            break
        time.sleep(0.1)
    assert any(r.startswith(f"{new_ip}:") for r in remotes), remotes
    res = xfer.wait(timeout=(mib << 20) * 8 / (0.5 * SLOW * eff * 1e6) + 10)
    assert res.intact, res
    assert topo.link_states()["fast"] == "up", topo.link_states()


def test_wrong_key_refused_and_garbage_ignored(lab: Lab, multihome_bin: Path) -> None:
    """A client with an unknown key never gets a session; garbage is counted and ignored."""
    topo = two_links(lab, multihome_bin, "aggregate")
    base = topo.counters("server")
    rogue_sock = topo.start_rogue_client()
    answered = 0
    deadline = time.monotonic() + 6  # several handshake attempts at any sane retry interval
    while time.monotonic() < deadline:
        try:
            sessions = topo.status("client", sock=rogue_sock).get("sessions", [])
            answered += 1
        except LabError:
            sessions = []  # its control socket is not there yet
        assert not any(s.get("established") for s in sessions), sessions
        time.sleep(0.2)
    assert answered > 0, f"rogue client never answered status:\n{topo.logs()}"
    refused = topo.counters("server")
    assert rejects(refused) > rejects(base), (base, refused)
    topo.daemons["rogue"].stop()

    # Garbage while a transfer runs: samples of real datagrams make truncated/flipped/replays.
    xfer = topo.transfer(100, "cubic")
    xfer.wait_progress(5 << 20, timeout=30)
    samples = topo.dir / "samples.hex"
    topo.srv.run(
        tool_cmd("garbage", "capture", "--iface", "l0", "--out", str(samples), "--timeout", "3"),
        check=False,
    )
    before = topo.counters("server")
    out = topo.add_outsider()
    n = 3000
    sender = out.spawn(
        tool_cmd(
            "garbage",
            "send",
            "--host",
            link_ip(0, "srv"),
            "--samples",
            str(samples),
            "--count",
            str(n),
            "--pps",
            "1000",
        ),
        "garbage",
    )
    sender.wait(30)
    sent = parse_result(sender)
    res = xfer.wait(timeout=100 * MIB_BITS / (0.5 * SLOW * efficiency(topo) * 1e6) + 10)
    assert res.intact, res
    after = topo.counters("server")
    # Each datagram lands in one reject counter; 10 % slack for socket-buffer overflow drops.
    print(f"garbage {sent}: reject counters +{rejects(after) - rejects(before)}")
    assert rejects(after) - rejects(before) >= 0.9 * n, (sent, before, after)
    assert topo.session("client")["established"]
    # No replay or forgery may move the client's paths to the attacker's address.
    remotes = [lk.get("remote", "") for lk in topo.session("server")["links"]]
    assert not any(r.startswith(f"{OUTSIDER_PREFIX}.") for r in remotes), remotes


def binomial_ceiling(n: int, p: float, tail: float = 1e-3) -> int:
    """The least c with P(X > c) <= ``tail`` for X ~ Binomial(n, p): the most losses a run of
    n packets shows, one run in 1/tail, when each is lost with probability p."""
    cdf = 0.0
    for c in range(n + 1):
        cdf += math.comb(n, c) * p**c * (1 - p) ** (n - c)
        if 1 - cdf <= tail:
            return c
    return n


def test_realtime_voice_over_lossy_links(lab: Lab, multihome_bin: Path, linkem_bin: Path) -> None:
    """A 64 kbit/s voice stream (160-byte UDP every 20 ms) classified `realtime` (150 ms)
    over two links of 10 and 30 ms one way losing 2 % and 3 % at random each way.

    Bound (docs/PROTOCOL.md §8.6): FEC parity on the other link is sized so that at most
    0.1 % stays unrecoverable; the issue's bar is p1·p2 + 0.2 % = 0.26 % per packet. Over
    N = 2000 packets that is 5.2 expected losses (σ = 2.3), and Binomial(2000, 0.0026)
    exceeds binomial_ceiling(2000, 0.0026) = 13 only once in 1000 runs: the assert allows
    13 (0.65 %), so a tunnel that meets the bound fails it at most once in 1000 runs.
    Parity follows *measured* loss, so a warm-up stream of 10 s (500 packets, not counted)
    first lets both links' loss be measured.
    Lateness: every received packet's one-way delay (send and receive CLOCK_MONOTONIC, which
    the namespaces share) must be within the deadline. Packets rebuilt from parity come
    latest: a block closes when its oldest packet has waited deadline − parity delivery −
    10 ms (≈ 130 ms here), so they arrive at ≈ 140 ms (first run: max 141.3 ms). A packet
    counts late only beyond HOST_SLACK_MS (the clocks are read in Python around
    ``sendto``/``recv``), and those beyond the bare deadline are printed. The receiver
    delivers a rebuilt packet only 2 ms or more before its deadline by its own estimate
    (docs/PROTOCOL.md §8.6): before that guard, two runs of three showed one packet at
    150.3–150.4 ms.
    """
    p1, p2, deadline_ms, n = 0.02, 0.03, 150, 2000
    rule = {
        "name": "voice",
        "protocol": "udp",
        "ports": "5004-5005",
        "policy": "realtime",
        "deadline_ms": deadline_ms,
    }
    topo = two_links(lab, multihome_bin, "best", delays_ms=(10, 30), rules=[rule])
    for veth, p in zip(topo.veths, (p1, p2), strict=True):
        veth.loss(p * 100)
    topo.udp_stream(count=500, pps=50, size=160, port=5005).wait()
    log = lab.dir / "voice.json"
    out = topo.udp_stream(count=n, pps=50, size=160, port=5004, log=str(log)).wait()
    delays_ms = sorted((rx - tx) / 1e6 for _, tx, rx in json.loads(log.read_text()))
    late = sum(d > deadline_ms + HOST_SLACK_MS for d in delays_ms)
    strictly_late = sum(d > deadline_ms for d in delays_ms)
    ceiling = binomial_ceiling(n, p1 * p2 + 0.002)
    counters = topo.counters("client")
    print(
        f"voice: lost {out['lost']}/{n} ({out['loss']:.2%}; allowed {ceiling}), late {late} "
        f"(past the bare deadline: {strictly_late}), "
        f"p50 {delays_ms[len(delays_ms) // 2]:.1f} ms, max {delays_ms[-1]:.1f} ms, "
        f"fec_recovered(server) {topo.counters('server').get('fec_recovered')}, "
        f"client { ({k: v for k, v in counters.items() if 'rt_' in k or 'fec' in k}) }"
    )
    assert out["duplicates"] == 0, out
    assert out["lost"] <= ceiling, out
    assert late == 0, delays_ms[-10:]


def dup_table(topo: Topology) -> str | None:
    """The client's kernel fast-path table (``nft list table ip multihome_dup``), or None."""
    res = topo.cli.run(["nft", "list", "table", "ip", "multihome_dup"], check=False)
    return res.stdout if res.returncode == 0 else None


def test_kernel_fast_path_copies_and_cleans_up(lab: Lab, multihome_bin: Path) -> None:
    """`kernel_copies = true`: a `redundant` packet with copies is sealed once and the
    kernel copies it onto the other link (nftables `dup`); the table is there while the
    client runs, gone after a clean exit, left by a SIGKILL and replaced (one table, the new
    sockets' ports) by the next start, gone after that one's exit.

    Link 0 drops 30 % each way: 500 packets at 100/s forced to 2 copies (`copies = 2`) all
    arrive, each sealed once (`tx_kernel_copies`), the copy the server got second refused by
    its replay window (`rx_replayed`: the copies are the same datagram).
    """
    rule = {"name": "dup", "protocol": "udp", "ports": "5004", "policy": "redundant", "copies": 2}
    topo = two_links(lab, multihome_bin, "best", rules=[rule], client_extra={"kernel_copies": True})
    table = dup_table(topo)
    assert table is not None and table.count(" dup to ") == 2, table
    topo.veths[0].loss(30)
    out = topo.udp_stream(count=500, pps=100).wait()
    client, server = topo.counters("client"), topo.counters("server")
    print(
        out, {"tx_kernel_copies": client["tx_kernel_copies"], "rx_replayed": server["rx_replayed"]}
    )
    assert out["lost"] == 0 and out["duplicates"] == 0, out
    # Every packet asks for 2 copies, but one sent while 30 % loss has link 0 judged Suspect
    # or Down goes on the other link alone: one copy, nothing for the kernel to duplicate
    # (measured: 475 and 500 of 500). Most must have been copied by the kernel.
    assert client["tx_kernel_copies"] >= 0.8 * 500, client
    # The server refuses the later copy whenever link 0 passed its copy upstream (70 %).
    assert server["rx_replayed"] >= 0.4 * 500, server
    # Clean exit: the table goes with the daemon.
    assert topo.daemons["client"].stop() == 0
    assert dup_table(topo) is None
    # A crash leaves it; the next start replaces it with its own sockets' ports.
    topo.daemons["client"] = topo._daemon(topo.cli, "client", topo.dir / "client.toml")
    topo.wait_established()
    before = dup_table(topo)
    topo.daemons["client"].stop(signal.SIGKILL)
    assert dup_table(topo) == before, "SIGKILL: nothing removed it"
    topo.daemons["client"] = topo._daemon(topo.cli, "client", topo.dir / "client.toml")
    topo.wait_established()
    after = dup_table(topo)
    assert after is not None and after.count(" dup to ") == 2 and after != before, after
    assert topo.cli.run(["nft", "list", "tables"]).stdout.count("multihome_dup") == 1
    assert topo.daemons["client"].stop() == 0
    assert dup_table(topo) is None


def server_dup_table(topo: Topology) -> str | None:
    """The server's kernel fast-path table (``ip multihome_dup_server``), or None."""
    res = topo.srv.run(["nft", "list", "table", "ip", "multihome_dup_server"], check=False)
    return res.stdout if res.returncode == 0 else None


def tx_packets(ns: Namespace, dev: str) -> int:
    return int(ns.run(["cat", f"/sys/class/net/{dev}/statistics/tx_packets"]).stdout)


def copy_port(table: str) -> str:
    """The copy socket's port the table matches (``udp sport <port> udp sport set``)."""
    m = re.search(r"udp sport (\d+) udp sport set", table)
    assert m, table
    return m.group(1)


def test_server_kernel_fast_path_copies_and_cleans_up(
    lab: Lab, multihome_bin: Path, voipgen_bin: Path
) -> None:
    """`[server] kernel_copies = true`: a downstream `redundant` packet (`redundant_copies =
    2`) is sealed once and the kernel copies it onto the session's other path, addressed to
    the client's socket on that link (nftables `dup` after rewriting the headers); the table
    follows the session's paths, is gone after a clean exit, left by a SIGKILL and replaced
    (one table, the new copy socket's port) by the next start, gone after that one's exit.

    Two full-duplex voice streams of 250 packets each way (500 per direction) with link 0
    dropping 30 % each way: nothing is lost downstream, as link 1 carries a copy of every
    packet (a packet is lost only if both copies are; link 1 loses none). Bounds: the server
    seals ≥ 0.8 × 500 packets once for the kernel to copy (one sent while link 0 is judged
    Down goes alone, as in the client's test); link 1 carries ≥ 0.8 × 500 datagrams
    downstream (the copies; the daemon's own counters omit them, the device counts them) and
    link 0 ≥ 0.5 × 500 (70 % of the originals and copies get through its egress drop);
    the client's replay window refuses the later copy of every packet both links delivered,
    ≥ 0.4 × 500 (0.7 of them).
    """
    rule = {"name": "voice", "protocol": "udp", "ports": "5004", "policy": "redundant"}
    rule["copies"] = 2
    server_extra = {"kernel_copies": True, "redundant_copies": 2}
    topo = two_links(lab, multihome_bin, "best", rules=[rule], server_extra=server_extra)
    table = server_dup_table(topo)
    assert table is not None and " dup to " not in table, table
    # The table follows the sessions' paths within its 250 ms refresh; a packet sent before
    # it lists the client's second path goes out uncopied (docs/PROTOCOL.md §8.3).
    deadline = time.monotonic() + 3
    while " dup to " not in (server_dup_table(topo) or "") and time.monotonic() < deadline:
        time.sleep(0.05)
    topo.veths[0].loss(30)
    before = {dev: tx_packets(topo.srv, dev) for dev in ("l0", "l1")}
    res = voip_calls(topo.lan, topo.org, ORIGIN, streams=2, count=250, binary=voipgen_bin)
    sent = {dev: tx_packets(topo.srv, dev) - n for dev, n in before.items()}
    client, server = topo.counters("client"), topo.counters("server")
    table = server_dup_table(topo)
    print(res, sent, server["tx_kernel_copies"], client["rx_replayed"], table)
    assert res.down["lost"] == 0 and res.down["duplicates"] == 0, res
    assert table is not None and table.count(" dup to ") == 2, table
    assert server["tx_kernel_copies"] >= 0.8 * 500, server
    assert sent["l1"] >= 0.8 * 500 and sent["l0"] >= 0.5 * 500, sent
    assert client["rx_replayed"] >= 0.4 * 500, client
    # Clean exit: the table goes with the daemon.
    assert topo.daemons["server"].stop() == 0
    assert server_dup_table(topo) is None
    # A crash leaves it; the next start replaces it with its own copy socket's port.
    before_table = restart_server(topo)
    topo.daemons["server"].stop(signal.SIGKILL)
    assert server_dup_table(topo) == before_table, "SIGKILL: nothing removed it"
    after = restart_server(topo)
    assert copy_port(after) != copy_port(before_table), (before_table, after)
    assert topo.srv.run(["nft", "list", "tables"]).stdout.count("multihome_dup_server") == 1
    assert topo.daemons["server"].stop() == 0
    assert server_dup_table(topo) is None


def restart_server(topo: Topology) -> str:
    """Start the server again; return its fast-path table once it is installed."""
    topo.daemons["server"] = topo._daemon(topo.srv, "server", topo.dir / "server.toml")
    deadline = time.monotonic() + 15
    old = server_dup_table(topo)
    while time.monotonic() < deadline:
        table = server_dup_table(topo)
        if table is not None and table != old:
            return table
        topo._check_alive("server")
        time.sleep(0.05)
    raise LabError(f"the restarted server installed no table\n{topo.logs()}")
