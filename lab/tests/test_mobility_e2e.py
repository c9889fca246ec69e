"""End-to-end tests of mobility (issue 16) in network namespaces: link policies `only`,
`prefer` and `backup` shown by the bytes each link carries (the daemons' per-link
`tx_bytes`, datagrams with their tunnel overhead), both ways — upstream by the client's own
rules, downstream by the rules the client stated to the server (docs/PROTOCOL.md §8.5); a
download across a 30 s total outage with a new address (store-and-forward, §16); the hold
limit reached while the server serves another client.

Links as in test_tunnel_e2e.py: fast 100 Mbit/s, slow 50 Mbit/s (tbf both ways). A link a
policy keeps idle still carries keepalives while the session carries data: a PING every
detect/4 = 250 ms each way and their ACKs, under 100 bytes each, so at most 2 × 4 × 100 B =
800 B/s per direction (once the session is idle, 3 datagrams per 5 s) — the bound below
allows 16 KiB plus that per second of the run.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from lab import outage
from lab.bench.vehicular_drive import DrivePlayer
from lab.netns import Lab
from lab.tests.test_tunnel_e2e import SLOW, efficiency, two_links
from lab.topology import (
    LAN_HOST,
    LAN_PREFIX,
    ORIGIN,
    SRV_UPLINK,
    LinkSpec,
    Topology,
    link_ip,
)
from lab.traffic import TcpTransfer, UdpStream

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


# ---- a 30 s total outage with a new address (lab/outage.py) ----

OUTAGE_MB = 16  # the tunnelled download: about 3 s of the 50 Mbit/s link
PLAIN_MB = 400  # plain TCP beside it: still running when the link goes
MB = 1_000_000


def test_download_survives_a_30s_outage_with_a_new_address(lab: Lab, multihome_bin: Path) -> None:
    """A bulk download through the tunnel (origin to LAN host) and plain TCP beside it
    (server namespace to client, no tunnel) on the client's one link; the link goes for
    30 s and comes back with a new address (lab/outage.py). The tunnelled download
    delivers every byte (sha256) and its first new bytes reach the application within 1 s
    of the new address; during the outage the server's status says, in plain text, what it
    holds and for how long. Plain TCP's connection died with its address: not one byte
    after the return."""
    topo = Topology(lab, [outage.wifi_spec()], policy="only:wifi", binary=multihome_bin)
    DrivePlayer.prepare(topo)
    topo.start()
    outage.serve(topo.org, 8080)
    outage.serve(topo.srv, 8081)
    tunnel = outage.download(topo.lan, ORIGIN, 8080, OUTAGE_MB * MB, seed=1)
    plain = outage.download(topo.cli, link_ip(0, "srv"), 8081, PLAIN_MB * MB, seed=2)
    tunnel.wait_got(3 * MB, timeout=15)
    plain.wait_got(1 * MB, timeout=15)
    before = tunnel.got(), plain.got()
    player = outage.play_outage(topo)
    time.sleep(outage.OUTAGE_S / 2)
    held_text = topo.status_text("server")
    hold = topo.session("server")["hold"]
    back = outage.wait_return(player, timeout=outage.OUTAGE_S)
    res = tunnel.result(timeout=60)
    time.sleep(1)
    first = outage.first_after(tunnel, back)
    plain_after = outage.first_after(plain, back)
    after_hold = topo.session("server")["hold"]
    player.stop()
    print(
        f"tunnel: {before[0]} B before the cut, first new bytes {first} s after the new "
        f"address, {res['bytes']} B intact={res['intact']} in {res['seconds']:.1f} s; "
        f"server hold at mid-outage {hold}, after {after_hold}; plain TCP: {before[1]} B "
        f"before, first bytes after the return: {plain_after}, got {plain.got()} B\n"
        f"server status at mid-outage:\n{held_text}"
    )
    assert res["intact"], res
    assert first is not None and first < 1.0, (first, tunnel.resumed())
    assert hold["packets"] > 0 and hold["dropped_bytes"] == hold["dropped_age"] == 0, hold
    hold_line = next(ln for ln in held_text.splitlines() if ln.strip().startswith("hold:"))
    assert " packets (" in hold_line and " held for " in hold_line, held_text
    assert after_hold["packets"] == 0 and after_hold["released"] >= hold["packets"], after_hold
    assert plain_after is None, plain.resumed()


# ---- the hold limit reached ----

HOLD_MB = 1  # the server's hold_max_mb (its smallest)
UDP_BYTES = 1200
UDP_PPS = 2000
UDP_SECONDS = 8  # 19 MB of packets for the held client: 18 times the hold
RSS_SLACK = 8 << 20


def rss_bytes(pid: int) -> int:
    """The process's resident set (VmRSS of /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) << 10
    raise AssertionError(f"no VmRSS for pid {pid}")


class RssSampler:
    """The largest RSS of a process, sampled every 50 ms in a thread until stopped."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss_bytes(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, rss_bytes(self.pid))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(timeout=2)
        return self.peak


def test_hold_limit_drops_the_oldest_and_the_server_serves_others(
    lab: Lab, multihome_bin: Path
) -> None:
    """The server holds at most hold_max_mb = 1 for a client whose link is cut while 19 MB
    of UDP are sent to it: the oldest packets are dropped and counted (status, also in plain
    text), the client gets exactly the newest ones once its link is back, the server's RSS
    grows by far less than what was sent, and a second client's 64 MiB upload through the
    same server meanwhile arrives intact."""
    topo = Topology(
        lab,
        [LinkSpec("wifi", rate_mbit=50)],
        policy="best",
        binary=multihome_bin,
        server_extra={"hold_max_mb": HOLD_MB},
    )
    topo.add_client("other", "10.200.0.3")
    topo.start()
    topo.start_client("other")
    # The origin reaches the LAN host through the server (not only by replies to NAT).
    topo.org.route_replace(LAN_PREFIX, via=SRV_UPLINK)
    # The server's next hop to the client is the client itself here, not a router: its ARP
    # entry fails during the cut, and the first released flight would die in the neighbour
    # queue (docs/PROTOCOL.md §16, Limits). A router's entry would not expire: pin it.
    mac = json.loads(topo.cli.ip("-j", "link", "show", "l0").stdout)[0]["address"]
    topo.srv.ip(
        "neigh", "replace", link_ip(0, "cli"), "lladdr", mac, "dev", "l0", "nud", "permanent"
    )
    server_pid = topo.daemons["server"].pid
    topo.link_down(0)
    # An idle session's server probes every 2.5 x keepalive_ms (12.5 s) and declares the
    # link Down detect_ms (1 s) after an unanswered probe (PROTOCOL.md §6.6), plus margin.
    deadline = time.monotonic() + 2.5 * 5 + 1 + 1.5
    while topo.session("server")["links"][0]["state"] != "down":
        assert time.monotonic() < deadline, topo.session("server")
        time.sleep(0.1)
    base = rss_bytes(server_pid)
    sampler = RssSampler(server_pid)
    count = UDP_PPS * UDP_SECONDS
    log = lab.dir / "held.json"
    stream = UdpStream(
        topo.org, topo.lan, LAN_HOST, count=count, pps=UDP_PPS, size=UDP_BYTES, log=str(log)
    )
    other = TcpTransfer(topo.outsider, topo.org, ORIGIN, mib=64, cc="cubic", port=9001)
    other_res = other.wait(timeout=60)
    stream.sender.wait(UDP_SECONDS + 10)
    time.sleep(0.5)
    held = topo.session("server")["hold"]
    text = topo.status_text("server")
    topo.link_up(0)
    got = stream.wait()
    peak = sampler.stop()
    after = topo.session("server")["hold"]
    seqs = sorted(p[0] for p in json.loads(log.read_text()))
    print(
        f"sent {count} x {UDP_BYTES} B while cut; held {held}; after {after}; received {len(seqs)} "
        f"(seq {seqs[0] if seqs else '-'}..{seqs[-1] if seqs else '-'}); server RSS "
        f"{base >> 10} KiB before, peak {peak >> 10} KiB; other client: {other_res}\n{text}"
    )
    assert other_res.intact, other_res
    assert held["bytes"] <= HOLD_MB << 20 < held["bytes"] + UDP_BYTES + 28, held
    dropped = after["dropped_bytes"]
    assert dropped == count - len(seqs) > count // 2, (dropped, len(seqs), count)
    assert seqs == list(range(count - len(seqs), count)), "the oldest go first"
    assert f"dropped {held['dropped_bytes']} oldest at the byte limit" in text, text
    assert peak - base < RSS_SLACK, (base, peak)
    assert got["received"] == len(seqs), got
