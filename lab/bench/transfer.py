"""One measured connection between ``cli`` and ``srv`` for the suites: multihome or kernel MPTCP.

Role: run :mod:`lab.tools.bidixfer` (server on ``srv``, client on ``cli``) either through the
tunnel (tunnel addresses, plain TCP), as kernel MPTCP (link 0's server address, the kernel
adds the other subflows), as plain TCP over one link alone (``tcp:<i>``), or through
multihome's stream mode (``stream``: client on the LAN host, server on the origin, so the
client daemon intercepts it; the topology must run with stream mode on), and return both
ends' results plus what each emulated link carried in each direction during the run
(linkem's ``delivered`` counters).

Invariant: the connection is always opened by the client side, so the multihome server learns
the flow's policy from the client's packets before it sends (docs/CONFIG.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from lab.mptcp import counters, joined
from lab.netns import LabError, tool_cmd
from lab.topology import ORIGIN, TUN_SERVER, Topology, link_ip
from lab.traffic import parse_result, wait_listening

SYSTEMS = ("multihome", "mptcp", "stream")


def _delivered(topo: Topology) -> dict[str, dict[str, int]]:
    out = {}
    for i, link in topo.emulated.items():
        st = link.stats()
        out[topo.links[i].name] = {d: st[d]["delivered"]["bytes"] for d in ("a2b", "b2a")}
    return out


def run_transfer(
    topo: Topology,
    system: str,
    *,
    cc: str = "cubic",
    client_send_bytes: int = 0,
    client_send_seconds: float = 0.0,
    server_send_bytes: int = 0,
    server_send_seconds: float = 0.0,
    client_close_after: float = 0.0,
    timeout: float = 120,
    port: int = 9100,
    during: object = None,
) -> dict:
    """Run one connection; ``during(client_proc)`` is called once both ends are running.

    ``client_close_after``: the client half-closes no earlier than this (a kernel MPTCP
    download: the server refuses joins once the client's DATA_FIN arrived)."""
    with _kernel_path_manager(topo, system):
        return _run_transfer(
            topo,
            system,
            cc=cc,
            client_send_bytes=client_send_bytes,
            client_send_seconds=client_send_seconds,
            server_send_bytes=server_send_bytes,
            server_send_seconds=server_send_seconds,
            client_close_after=client_close_after,
            timeout=timeout,
            port=port,
            during=during,
        )


@contextlib.contextmanager
def _kernel_path_manager(topo: Topology, system: str) -> Iterator[None]:
    """While kernel MPTCP is measured, the client's namespace uses the in-kernel path
    manager: stream mode switches it to the userspace one, under which the kernel adds no
    subflow of its own."""
    swap = system == "mptcp" and "stream" in topo.client_sections
    if swap:
        topo.cli.sysctl("net.mptcp.pm_type", 0)
    try:
        yield
    finally:
        if swap:
            topo.cli.sysctl("net.mptcp.pm_type", 1)


def _run_transfer(  # noqa: PLR0913 - run_transfer's arguments, passed on
    topo: Topology,
    system: str,
    *,
    cc: str,
    client_send_bytes: int,
    client_send_seconds: float,
    server_send_bytes: int,
    server_send_seconds: float,
    client_close_after: float,
    timeout: float,
    port: int,
    during: object,
) -> dict:
    mptcp = system == "mptcp"
    client_ns, server_ns = topo.cli, topo.srv
    if system == "stream":
        client_ns, server_ns, addr = topo.lan, topo.org, ORIGIN
    elif system.startswith("tcp:"):
        # Plain TCP over one link alone, no tunnel: the single-path baseline.
        addr = link_ip(int(system[4:]), "srv")
    elif system in SYSTEMS:
        addr = link_ip(0, "srv") if mptcp else TUN_SERVER
    else:
        raise LabError(f"system must be one of {SYSTEMS} or tcp:<link index>")
    # A side that only sends hears nothing until the peer's FIN: its stall timeout must
    # outlast the sending time, or it reports a timeout that is not one.
    stall = 30 + max(client_send_seconds, server_send_seconds)
    common = ["--port", str(port), "--cc", cc, "--stall-timeout", f"{stall:g}"]
    if mptcp:
        common.append("--mptcp")
    srv_args = ["--send-bytes", str(server_send_bytes)]
    if server_send_seconds:
        srv_args = ["--send-seconds", str(server_send_seconds)]
    cli_args = ["--send-bytes", str(client_send_bytes)]
    if client_send_seconds:
        cli_args = ["--send-seconds", str(client_send_seconds)]
    if client_close_after:
        cli_args += ["--close-after", f"{client_close_after:g}"]
    before = _delivered(topo)
    mp_before = counters(topo.srv) if mptcp else {}
    server = server_ns.spawn(tool_cmd("bidixfer", "server", *common, *srv_args), f"bx{port}")
    wait_listening(server)
    client = client_ns.spawn(
        tool_cmd(
            "bidixfer",
            "client",
            "--host",
            addr,
            *common,
            *cli_args,
        ),
        f"bxc{port}",
    )
    if callable(during):
        during(client)
    out: dict = {"system": system}
    try:
        client.wait(timeout)
        server.wait(10)
        out["client"] = parse_result(client)
        out["server"] = parse_result(server)
    except LabError as exc:
        for proc in (client, server):
            proc.stop()
        out["error"] = str(exc)[-600:]
        for name, proc in (("client", client), ("server", server)):
            with contextlib.suppress(LabError):
                out[name] = parse_result(proc)
    after = _delivered(topo)
    out["link_bytes"] = {
        name: {d: after[name][d] - before[name][d] for d in ("a2b", "b2a")} for name in after
    }
    if mptcp:
        out["mptcp_counters"] = joined(mp_before, counters(topo.srv))
    return out
