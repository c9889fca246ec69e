"""Reference tunnels for the overhead suite: OpenVPN (no encryption) and wireguard-go.

Role: start a point-to-point tunnel between ``cli`` (10.0.1.2) and ``srv`` (10.0.1.1) over
link 0 of a topology and return the server's inner address, or raise :class:`Unavailable`
with the reason when the program is not on this machine (the suite then skips it and says so).

* OpenVPN 2.6 in p2p mode without ``--secret`` or TLS: no encryption, no authentication
  (OpenVPN's fastest setting, the DESIGN.md §4 reference figure). UDP port 1194, inner
  10.201.0.2 -> 10.201.0.1, tun MTU 1500 (OpenVPN's default).
* wireguard-go (userspace WireGuard, encrypted: ChaCha20-Poly1305), configured through its
  UAPI socket with keys made by ``multihome keygen`` (both are X25519 keys in base64). UDP port
  51820, inner 10.202.0.2 -> 10.202.0.1, MTU 1420 (wg-quick's default). The binary is found
  at $WIREGUARD_GO, on PATH as ``wireguard-go``, or where ``go install
  golang.zx2c4.com/wireguard@latest`` puts it (~/go/bin/wireguard; the module path
  golang.zx2c4.com/wireguard-go is not served by the Go module proxy).

Invariant: every process is started through the lab (stopped by PID at cleanup); the UAPI
sockets live under /var/run/wireguard with interface names unique to this lab run.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import time
from pathlib import Path

from lab.netns import LabError
from lab.topology import Topology, link_ip

OPENVPN_INNER = ("10.201.0.2", "10.201.0.1")
WG_INNER = ("10.202.0.2", "10.202.0.1")
WG_PORT = 51820
UAPI_DIR = Path("/var/run/wireguard")


class Unavailable(LabError):
    """The reference tunnel's program is not installed here."""


def start_openvpn(topo: Topology) -> str:
    binary = shutil.which("openvpn")
    if binary is None:
        raise Unavailable("openvpn not installed (apt-get install openvpn)")
    ends = ((topo.srv, "srv", 1, 0), (topo.cli, "cli", 0, 1))
    procs = []
    for ns, side, me, peer in ends:
        local, remote = link_ip(0, side), link_ip(0, "cli" if side == "srv" else "srv")
        proc = ns.spawn(
            [
                binary,
                "--dev",
                "ovpn0",
                "--dev-type",
                "tun",
                "--proto",
                "udp",
                "--local",
                local,
                "--remote",
                remote,
                "--port",
                "1194",
                "--ifconfig",
                OPENVPN_INNER[me],
                OPENVPN_INNER[peer],
                "--verb",
                "3",
            ],
            "openvpn",
        )
        procs.append(proc)
    for proc in procs:  # each end completes once it has heard its peer
        _wait_for(proc, "Initialization Sequence Completed", 15, "openvpn")
    return OPENVPN_INNER[1]


def _wait_for(proc, text: str, timeout: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while text not in proc.output():
        if not proc.alive() or time.monotonic() > deadline:
            raise LabError(f"{what} did not come up:\n{proc.tail()}")
        time.sleep(0.05)


def wireguard_go_binary() -> str:
    candidates = [
        os.environ.get("WIREGUARD_GO"),
        shutil.which("wireguard-go"),
        str(Path.home() / "go" / "bin" / "wireguard"),
        str(Path("~root/go/bin/wireguard").expanduser()),  # under sudo, $HOME may be the user's
    ]
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    raise Unavailable(
        "wireguard-go not found: go install golang.zx2c4.com/wireguard@latest (or set WIREGUARD_GO)"
    )


def _uapi(iface: str, body: str, timeout: float = 5) -> None:
    path = UAPI_DIR / f"{iface}.sock"
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise LabError(f"wireguard-go UAPI socket {path} never appeared")
        time.sleep(0.05)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(str(path))
        s.sendall(body.encode())
        reply = b""
        while not reply.endswith(b"\n\n"):
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
    if b"errno=0" not in reply:
        raise LabError(f"wireguard-go UAPI {iface}: {reply.decode(errors='replace')}")


def _hex_key(b64: str) -> str:
    return base64.b64decode(b64.strip()).hex()


def start_wireguard_go(topo: Topology) -> str:
    binary = wireguard_go_binary()
    keys = {}
    for side in ("wgc", "wgs"):
        pub = topo.keygen(side)
        priv = (topo.dir / f"{side}.key").read_text()
        keys[side] = (_hex_key(priv), _hex_key(pub))
    ifaces = {"srv": f"wgs{topo.lab.suffix}", "cli": f"wgc{topo.lab.suffix}"}
    for side, ns, me, peer, inner in (
        ("srv", topo.srv, "wgs", "wgc", WG_INNER[1]),
        ("cli", topo.cli, "wgc", "wgs", WG_INNER[0]),
    ):
        iface = ifaces[side]
        ns.spawn([binary, "-f", iface], "wireguard-go", env={"LOG_LEVEL": "error"})
        endpoint = f"{link_ip(0, 'srv' if side == 'cli' else 'cli')}:{WG_PORT}"
        _uapi(
            iface,
            f"set=1\nprivate_key={keys[me][0]}\nlisten_port={WG_PORT}\nreplace_peers=true\n"
            f"public_key={keys[peer][1]}\nendpoint={endpoint}\n"
            f"allowed_ip={WG_INNER[0] if side == 'srv' else WG_INNER[1]}/32\n\n",
        )
        ns.ip("link", "set", iface, "mtu", "1420")
        ns.addr_add(iface, f"{inner}/24")
        ns.ip("link", "set", iface, "up")
    return WG_INNER[1]
