"""End-to-end tests of IPv6 inside the tunnel and on its links (lab/ipv6.py's address plan).

What a user sees: over a link that has only IPv6 addresses, and over a dual-stack client (one
IPv4 link, one IPv6 link), TCP transfers over inner IPv4 and inner IPv6 arrive intact (sha256
of the stream), IPv6 leaves the server through its NAT, both links carry traffic, and cutting
the IPv4 link keeps an inner IPv6 connection alive. The TUN device's own link-local traffic
(its router solicitation from fe80::) is not routed out of the server: the server counts it
as spoofed (`rx_spoofed`), as for any source outside the client's `allowed_ips`.
"""

from __future__ import annotations

import time
import tomllib
from pathlib import Path

import tomli_w

from lab import ipv6
from lab.netns import Lab
from lab.topology import ORIGIN, PORT, LinkSpec, Topology, link_ip
from lab.traffic import TcpTransfer, parse_result

MIB_BITS = 8 * (1 << 20)
RATE = 50.0  # Mbit/s, tbf on both directions of each link
DETECT_MS = 1000  # the default detect_ms
# As in test_tunnel_e2e: status poll, one status round trip and timer granularity.
DETECT_SLACK_MS = 500


def transfer(topo: Topology, dst: str, mib: int, port: int) -> TcpTransfer:
    """A checksummed TCP transfer from the LAN host to the origin's address ``dst``."""
    return TcpTransfer(topo.lan, topo.org, dst, mib=mib, cc="cubic", port=port)


def link_tx(topo: Topology) -> dict[str, int]:
    sess = topo.session("client")
    assert sess is not None
    return {lk["name"]: lk["tx_bytes"] for lk in sess["links"]}


def seconds_for(mib: int, mbit: float) -> float:
    """Time for ``mib`` MiB at half of ``mbit`` (tunnel and TCP overheads, a busy machine)."""
    return mib * MIB_BITS / (0.5 * mbit * 1e6)


def test_ipv6_only_link_carries_ipv4_and_ipv6(lab: Lab, multihome_bin: Path) -> None:
    """Client and server share only IPv6 addresses; inner IPv4 and IPv6 arrive intact."""
    topo = Topology(
        lab,
        [LinkSpec("v6", rate_mbit=RATE, family=6)],
        policy="best",
        binary=multihome_bin,
        ipv6=True,
    )
    topo.start()
    # Outside: no IPv4 on the link; each side sees the other's IPv6 address.
    assert "inet " not in topo.cli.ip("-o", "addr", "show", "dev", "l0").stdout
    link = topo.session("client")["links"][0]
    assert link["remote"] == f"[{ipv6.link_ip6(0, 'srv')}]:7000", link
    remote = topo.session("server")["links"][0]["remote"]
    assert remote.startswith(f"[{ipv6.link_ip6(0, 'cli')}]:"), remote
    mib = 16
    for dst, port, nat in ((ORIGIN, 9000, "10.50.0.1:"), (ipv6.ORIGIN6, 9001, "[fd00:50::1]:")):
        xfer = transfer(topo, dst, mib, port)
        res = xfer.wait(timeout=seconds_for(mib, RATE) + 10)
        assert res.intact, (dst, res)
        # The origin saw the server's uplink address: the flow left through the server's NAT.
        peer = parse_result(xfer.receiver)["peer"]
        assert peer.startswith(nat), (dst, peer)
        print(f"inner {dst} over an IPv6-only link: {res.mbps:.1f} Mbit/s")


def test_dual_stack_client_fails_over_to_ipv6(lab: Lab, multihome_bin: Path) -> None:
    """One IPv4 and one IPv6 link: both carry traffic; the IPv4 link is cut mid-transfer and
    the inner IPv6 TCP connection completes intact over the IPv6 link."""
    topo = Topology(
        lab,
        [LinkSpec("v4", rate_mbit=RATE), LinkSpec("v6", rate_mbit=RATE, family=6)],
        policy="aggregate",
        binary=multihome_bin,
        ipv6=True,
    )
    topo.start()
    assert topo.link_states() == {"v4": "up", "v6": "up"}
    # Inner IPv4 first, striped over both links.
    before = link_tx(topo)
    res = transfer(topo, ORIGIN, 16, 9000).wait(timeout=seconds_for(16, 2 * RATE) + 10)
    assert res.intact, res
    after = link_tx(topo)
    sent = {k: after[k] - before[k] for k in after}
    # Both links carried the flow: at least a tenth of the bytes each (half is the even split).
    assert min(sent.values()) >= 0.1 * sum(sent.values()), sent
    # Then inner IPv6, with the IPv4 link cut after a quarter of it.
    mib = 48
    before = link_tx(topo)
    xfer = transfer(topo, ipv6.ORIGIN6, mib, 9001)
    xfer.wait_progress(12 << 20, timeout=20)
    mid = link_tx(topo)
    topo.link_down(0)
    assert not xfer.done(), "transfer finished before the cut; grow it"
    detect_s = topo.wait_link_state("v4", "down", timeout=10)
    assert detect_s * 1000 <= DETECT_MS + DETECT_SLACK_MS, f"down after {detect_s:.3f}s"
    assert topo.link_states()["v6"] == "up", topo.link_states()
    t_cut = time.monotonic()
    res = xfer.wait(timeout=seconds_for(mib, RATE) + DETECT_MS / 1000 + 10)
    assert res.intact, res
    end = link_tx(topo)
    assert all(mid[k] > before[k] for k in mid), (before, mid)
    # After the cut only the IPv6 link can carry the rest (at least the last 3/4 of it).
    assert end["v6"] - mid["v6"] >= (mib - 12) << 20, (mid, end)
    print(
        f"v4 down in {detect_s * 1000:.0f} ms; v6 flow done {time.monotonic() - t_cut:.1f} s later"
    )


def test_tun_router_solicitation_is_not_tunnelled(lab: Lab, multihome_bin: Path) -> None:
    """The client's TUN device solicits routers from its fe80:: address; the server drops
    that as spoofed and routes nothing from fe80:: out of its TUN device."""
    topo = Topology(lab, [LinkSpec("v4")], policy="best", binary=multihome_bin)
    # Count what the server's kernel receives from the TUN device with a link-local source.
    table = "table inet ipv6lab {\n chain pre {\n type filter hook prerouting priority -300;\n"
    table += ' iifname "mh0" ip6 saddr fe80::/10 counter\n }\n}\n'
    topo.srv.run(["nft", "-f", "-"], input_text=table)
    topo.start()
    # The kernel gives the TUN device a link-local address and solicits routers from it
    # (accept_ra = 1, no forwarding) at once, then again after 4 s.
    assert "inet6 fe80:" in topo.cli.ip("-o", "addr", "show", "dev", "mh0").stdout
    deadline = time.monotonic() + 10
    while topo.counters("server").get("rx_spoofed", 0) < 1:
        assert time.monotonic() < deadline, topo.counters("server")
        time.sleep(0.2)
    # Inner IPv4 still works, and nothing from fe80:: reached the server's network.
    ping = topo.run_in("lan", ["ping", "-c", "3", "-i", "0.2", "-W", "2", ORIGIN])
    assert " 0% packet loss" in ping.stdout, ping.stdout
    rules = topo.srv.run(["nft", "list", "table", "inet", "ipv6lab"]).stdout
    assert "counter packets 0 bytes 0" in rules, rules
    assert link_ip(0, "cli") in topo.session("server")["links"][0]["remote"]


class ResolvingTopology(Topology):
    """The client resolves its server (`servers = "resolve"`, docs/CONFIG.md): the server
    announces one tunnel address per family and its resolver only at its IPv6 address."""

    def write_configs(self) -> None:
        super().write_configs()
        v4, v6 = f"{link_ip(0, 'srv')}:{PORT}", f"[{ipv6.link_ip6(1, 'srv')}]:{PORT}"
        resolver = f"[{ipv6.link_ip6(1, 'srv')}]:7001"
        server = tomllib.loads((self.dir / "server.toml").read_text())
        server["naming"] = {
            "listen": "[::]:7001",
            "store": "embedded",
            "path": "naming.redb",
            "advertise": [v4, v6],
            "resolver_advertise": resolver,
        }
        (self.dir / "server.toml").write_text(tomli_w.dumps(server))
        client = tomllib.loads((self.dir / "client.toml").read_text())
        for key in ("server", "server_public_key"):
            del client["client"][key]
        for link in client["link"]:
            del link["server"]
        client["client"]["servers"] = "resolve"
        client["naming"] = {"resolvers": [resolver], "trusted_servers": [self.server_pub]}
        (self.dir / "client.toml").write_text(tomli_w.dumps(client))


def test_resolved_server_reached_over_each_links_family(lab: Lab, multihome_bin: Path) -> None:
    """A dual-stack client that resolves its server over IPv6 uses the server's IPv4 tunnel
    address on its IPv4 link and its IPv6 one on its IPv6-only link: both links come up."""
    topo = ResolvingTopology(
        lab, [LinkSpec("v4"), LinkSpec("v6", family=6)], policy="best", binary=multihome_bin
    )
    topo.start()
    links = {lk["name"]: lk["remote"] for lk in topo.session("client")["links"]}
    assert links == {
        "v4": f"{link_ip(0, 'srv')}:{PORT}",
        "v6": f"[{ipv6.link_ip6(1, 'srv')}]:{PORT}",
    }
    res = transfer(topo, ORIGIN, 4, 9000).wait(timeout=seconds_for(4, 100) + 10)
    assert res.intact, res


class CrossedTopology(Topology):
    """Link 0 (IPv4 addresses only) is given the server's IPv6 address: a family mistake."""

    def link_server(self, i: int) -> str:
        return super().link_server(1 if i == 0 else i)


def test_link_family_and_mtu_mistakes_are_named(lab: Lab, multihome_bin: Path) -> None:
    """A link whose interface has no address of its server's family stays down and the
    client says why at start; an `mtu` sized for IPv4 links is named on an IPv6 link."""
    topo = CrossedTopology(
        lab,
        [LinkSpec("v4"), LinkSpec("v6", family=6)],
        policy="best",
        binary=multihome_bin,
        client_extra={"mtu": 1420},
    )
    topo.start(timeout=10, all_links_up=False)
    time.sleep(1.5 * DETECT_MS / 1000)
    assert topo.link_states() == {"v4": "down", "v6": "up"}, topo.link_states()
    log = topo.daemons["client"].output()
    family = "link `v4`: interface `l0` has no IPv6 address to reach server [fd00:0:2::1]:7000"
    assert family in log, log
    mtu = "link `v6`: a full datagram over IPv6 takes 1520 bytes, more than interface `l1`'s"
    assert mtu in log and "set mtu = 1400 or less" in log, log
