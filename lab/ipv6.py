"""The IPv6 address plan of the tunnel topology (lab/topology.py), inside and outside.

Role: with ``Topology(..., ipv6=True)`` every host of the topology is dual-stack inside the
tunnel — the LAN host, the client's and the server's TUN devices and the origin get an IPv6
address beside their IPv4 one, the client routes the origin's IPv6 prefix into the tunnel and
the server's peer entry allows the client's IPv6 addresses — and ``LinkSpec(family=6)`` makes
a link IPv6-only outside (the client reaches the server over it by IPv6 addresses alone)::

    lan fd00:168:50::2 -- cli (mh0 fd00:200::2) ~~ tunnel ~~ srv (mh0 fd00:200::1) -- org fd00:50::2
    link i, family 6:   cli l<i> fd00:0:<i+1>::2/64 ===== fd00:0:<i+1>::1/64 l<i> srv

Invariants: the plan mirrors the IPv4 one (``10.0.<i+1>.x`` links, ``10.200.0.x`` tunnel,
``10.50.0.0/24`` origin, ``192.168.50.0/24`` LAN); as in IPv4 the origin has no route back to
the LAN or the tunnel, so an IPv6 reply reaches the LAN host only through the server's NAT
(its ``inet`` masquerade table covers both families). IPv6 addresses are added without
duplicate address detection (``nodad``): a tentative address cannot be bound or sent from,
and DAD would add a second of start-up per address.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lab.topology import Topology

LAN6_PREFIX = "fd00:168:50::/64"
LAN6_GW = "fd00:168:50::1"
LAN6_HOST = "fd00:168:50::2"
ORIGIN6_PREFIX = "fd00:50::/64"
SRV_UPLINK6 = "fd00:50::1"
ORIGIN6 = "fd00:50::2"
TUN_CLIENT6 = "fd00:200::2"
TUN_SERVER6 = "fd00:200::1"
# A full tunnel datagram over an IPv6 link: TUN MTU + 52 tunnel + 48 outer IPv6/UDP = 1500.
TUN_MTU6 = 1400


def link_ip6(i: int, side: str) -> str:
    """Link ``i``'s IPv6 address on ``side`` (``cli`` or ``srv``)."""
    return f"fd00:0:{i + 1}::{2 if side == 'cli' else 1}"


def build_inner(topo: Topology) -> None:
    """IPv6 addresses on the LAN and the origin's network, and forwarding on the client."""
    # The client forwards the LAN host's IPv6 packets into its TUN device.
    topo.cli.sysctl("net.ipv6.conf.all.forwarding", 1)
    topo.lan.addr_add("lan0", f"{LAN6_HOST}/64")
    topo.cli.addr_add("lan0", f"{LAN6_GW}/64")
    topo.lan.route_replace("default", via=LAN6_GW)
    topo.srv.addr_add("up0", f"{SRV_UPLINK6}/64")
    topo.org.addr_add("up0", f"{ORIGIN6}/64")


def client_settings(client: dict) -> None:
    """The client's ``[client]`` section made dual-stack inside the tunnel."""
    client["tun_address"] = [client["tun_address"], f"{TUN_CLIENT6}/64"]
    client["routes"] = [*client["routes"], ORIGIN6_PREFIX]


def server_settings(server: dict) -> None:
    """The server's config made dual-stack inside the tunnel (its first peer is the client)."""
    server["server"]["tun_address"] = [server["server"]["tun_address"], f"{TUN_SERVER6}/64"]
    home = server["peer"][0]
    home["allowed_ips"] = [*home["allowed_ips"], f"{TUN_CLIENT6}/128", LAN6_PREFIX]
