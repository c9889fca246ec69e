"""Reloading the client's configuration without a drop (`multihome reload`, SIGHUP).

The client starts with one of two links in its config. During a checksummed TCP transfer from
the LAN host, the config gains the second link and ``multihome reload`` applies it: the transfer
completes intact (SHA-256 of every byte), the session is the same one (same id, no new
handshake), and the new link carries a share of the bytes. A broken file and a change of a key
fixed at start are then refused with the file's line and the key, and nothing changes. Last, a
SIGHUP applies a file without the first link: it leaves the status and a second transfer runs
intact over the remaining link.

Links: two veths with tbf at ``RATE`` Mbit/s each way, so one link alone takes about
``MIB / (RATE / 8)`` seconds and two take about half that.
"""

from __future__ import annotations

import signal
import time
import tomllib

import tomli_w

from lab.topology import LinkSpec, Topology

RATE = 20.0  # Mbit/s per link
MIB = 24  # the transfer across the reload: ~10 s on one link, ~6 s once both carry it
# The new link must carry a real share, not a few probes: at least 1 MiB of the 24 MiB after
# the reload (an even split of what is left after the first 3 MiB would be ~10 MiB).
MIN_NEW_LINK_BYTES = 1 << 20


def reload(topo: Topology) -> tuple[int, str, str]:
    res = topo.cli.run(
        [str(topo.binary), "reload", "--socket", str(topo.sockets["client"])],
        check=False,
        timeout=10,
    )
    return res.returncode, res.stdout, res.stderr


def links(topo: Topology) -> dict[str, dict]:
    sess = topo.session("client")
    assert sess is not None
    return {lk["name"]: lk for lk in sess["links"]}


def test_reload_adds_and_removes_links_without_a_drop(lab, multihome_bin) -> None:
    specs = [LinkSpec("fast", rate_mbit=RATE), LinkSpec("slow", rate_mbit=RATE)]
    topo = Topology(lab, specs, policy="aggregate", binary=multihome_bin, client_links=1)
    topo.start()
    path = topo.dir / "client.toml"
    one_link = path.read_text()
    cfg = tomllib.loads(one_link)
    before = topo.session("client")
    assert before is not None and list(links(topo)) == ["fast"]
    handshakes = topo.counters("client")["handshakes"]

    # 1. A link added in the middle of a transfer.
    xfer = topo.transfer(MIB, "cubic")
    xfer.wait_progress(3 << 20, timeout=20)
    cfg["link"].append({"name": "slow", "interface": "l1", "server": "10.0.2.1:7000"})
    path.write_text(tomli_w.dumps(cfg))
    rc, out, err = reload(topo)
    print(f"multihome reload (link added): rc={rc}\n{out}{err}")
    assert rc == 0, err
    assert "link `slow` added" in out
    at_reload = links(topo)
    result = xfer.wait(timeout=60)
    assert result.intact, f"transfer corrupted across the reload: {result}"
    after = links(topo)
    session = topo.session("client")
    assert session is not None
    new_bytes = after["slow"]["tx_bytes"] - at_reload.get("slow", {"tx_bytes": 0})["tx_bytes"]
    print(
        f"transfer {MIB} MiB intact in {result.seconds:.1f} s; link slow carried "
        f"{new_bytes / (1 << 20):.1f} MiB after the reload; session {session['session_id']}"
    )
    assert session["session_id"] == before["session_id"], "a new session"
    assert topo.counters("client")["handshakes"] == handshakes, "a new handshake"
    assert after["slow"]["state"] == "up"
    assert new_bytes >= MIN_NEW_LINK_BYTES, f"the new link carried {new_bytes} bytes"

    # 2. A broken file, and a key fixed at start: refused, the configuration in force kept.
    good = path.read_text()
    line = 1 + good.splitlines().index("mtu = 1420")
    path.write_text(good.replace("mtu = 1420", 'mtu = "1420"'))
    rc, out, err = reload(topo)
    print(f"multihome reload (a string for a number): rc={rc}\n{err}")
    assert rc == 1 and f"client.toml:{line}: invalid type" in err and "refused" in err
    path.write_text(good.replace("mtu = 1420", "mtu = 1300"))
    rc, out, err = reload(topo)
    print(f"multihome reload (mtu changed): rc={rc}\n{err}")
    assert rc == 1 and f"client.toml:{line}: `mtu` changed" in err
    assert set(links(topo)) == {"fast", "slow"}

    # 3. SIGHUP with the first link removed: it leaves, the other carries everything.
    cfg["link"] = [lk for lk in cfg["link"] if lk["name"] != "fast"]
    path.write_text(tomli_w.dumps(cfg))
    topo.daemons["client"].popen.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 5
    while set(links(topo)) != {"slow"} and time.monotonic() < deadline:
        time.sleep(0.05)
    assert set(links(topo)) == {"slow"}, links(topo)
    assert "reload: link `fast` removed" in topo.daemons["client"].output()
    result = topo.transfer(4, "cubic", seed=2, port=9001).wait(timeout=30)
    assert result.intact, f"transfer over the remaining link corrupted: {result}"
    session = topo.session("client")
    assert session is not None and session["session_id"] == before["session_id"]
    assert topo.daemons["client"].alive()


def test_server_reload_changes_peers_without_a_drop(lab, multihome_bin) -> None:
    """The server renames its peer, adds another and changes default_policy during a transfer
    (``multihome reload --config``, as the systemd unit's ExecReload does): the transfer is
    intact and the session the same. The peer removed by SIGHUP is cut off at once; listed
    again, its client is let back in (it handshakes anew) and traffic flows again."""
    specs = [LinkSpec("fast", rate_mbit=RATE), LinkSpec("slow", rate_mbit=RATE)]
    topo = Topology(lab, specs, policy="aggregate", binary=multihome_bin)
    topo.start()
    path = topo.dir / "server.toml"
    cfg = tomllib.loads(path.read_text())
    before = topo.session("server")
    assert before is not None and before["peer"] == "home"

    def server_reload() -> tuple[int, str, str]:
        res = topo.srv.run(
            [str(topo.binary), "reload", "--config", str(path)], check=False, timeout=10
        )
        return res.returncode, res.stdout, res.stderr

    xfer = topo.transfer(8, "cubic")
    xfer.wait_progress(2 << 20, timeout=20)
    home = cfg["peer"][0]
    office_key = topo.keygen("office")
    cfg["peer"] = [
        {"name": "office", "public_key": office_key, "allowed_ips": ["10.200.0.3/32"]},
        {**home, "name": "home2"},
    ]
    cfg["server"]["default_policy"] = "redundant"
    path.write_text(tomli_w.dumps(cfg))
    rc, out, err = server_reload()
    print(f"multihome reload --config server.toml: rc={rc}\n{out}{err}")
    assert rc == 0, err
    for change in ("peer `office` added", "peer `home2` now", "default_policy redundant"):
        assert change in out, out
    result = xfer.wait(timeout=60)
    assert result.intact, f"transfer corrupted across the server's reload: {result}"
    after = topo.session("server")
    assert after is not None and after["peer"] == "home2"
    assert after["session_id"] == before["session_id"], "a new session"

    # The client's peer removed (SIGHUP): its session ends at once.
    cfg["peer"] = cfg["peer"][:1]
    path.write_text(tomli_w.dumps(cfg))
    topo.daemons["server"].popen.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 5
    while topo.status("server")["sessions"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert topo.status("server")["sessions"] == [], "the removed peer kept its session"
    assert "reload: peer `home2` removed" in topo.daemons["server"].output()

    # Listed again: the client's next handshake is answered and traffic flows.
    cfg["peer"].append(home)
    path.write_text(tomli_w.dumps(cfg))
    rc, out, err = server_reload()
    assert rc == 0 and "peer `home` added" in out, out + err
    deadline = time.monotonic() + 15
    while not topo.status("server")["sessions"] and time.monotonic() < deadline:
        time.sleep(0.1)
    back = topo.session("server")
    print(f"session back after {15 - (deadline - time.monotonic()):.1f} s: {back and back['peer']}")
    assert back is not None and back["peer"] == "home"
    result = topo.transfer(2, "cubic", seed=3, port=9002).wait(timeout=30)
    assert result.intact, f"transfer after the peer came back corrupted: {result}"
