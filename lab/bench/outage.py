"""Suite ``outage``: a download across a 30 s total outage of the client's only link (issue 16).

Role: the figure beside the end-to-end test ``test_download_survives_a_30s_outage_with_a_new
_address``: how long after the link's return the receiving application gets bytes again,
per mechanism, on the set-up of lab/outage.py (50 Mbit/s, 5 ms one way, the outage played
by the drive player: coverage lost, association 1.5 s before the end, then a new address).

Cases, one topology each, a 16 MB download started before the cut (cut after 3 MB):

- ``multihome``: through the tunnel (``only:wifi``, store-and-forward), new address;
- ``tcp-same-address``: plain TCP, the link cut for 30 s with nothing else changed
  (``linkem down``/``up``: no carrier loss, the address stays): the TCP sender's
  retransmission timer, doubled at each expiry, decides when bytes flow again;
- ``tcp-new-address``: plain TCP, new address: the connection is dead (its address is
  gone); the figure is that nothing arrives within ``WAIT_S`` of the return;
- ``tcp-resume``: plain TCP with the resuming application (lab/tools/rangeget.py
  ``--resume``, Mukherjee's "smart application"): it reconnects from the new address and
  asks for the rest.

Reported per case and run: seconds from the return to the first new bytes at the
application (``None``: none within ``WAIT_S``), whether the file arrived intact, and its
total time.
"""

from __future__ import annotations

import statistics
import time

from lab import outage
from lab.bench.common import figure, progress, save
from lab.bench.vehicular_drive import DrivePlayer
from lab.netns import Lab
from lab.topology import ORIGIN, Topology

CASES = ("multihome", "tcp-same-address", "tcp-new-address", "tcp-resume")
SIZE = 16_000_000
CUT_AFTER = 3_000_000
WAIT_S = 60.0
PORT = 8080


def one(case: str, seed: int) -> dict:
    """One run of ``case``: the return-to-bytes time and the transfer's fate."""
    with Lab() as lab:
        tunnel = case == "multihome"
        topo = Topology(lab, [outage.wifi_spec()], policy="only:wifi", tunnel=tunnel)
        DrivePlayer.prepare(topo)
        if tunnel:
            topo.start()
        outage.serve(topo.org, PORT)
        where = topo.lan if tunnel else topo.cli
        dl = outage.download(where, ORIGIN, PORT, SIZE, seed=seed, resume=case == "tcp-resume")
        dl.wait_got(CUT_AFTER, timeout=20)
        player = None
        if case == "tcp-same-address":
            topo.link_down(0)
            time.sleep(outage.OUTAGE_S)
            topo.link_up(0)
            back = time.monotonic()
        else:
            player = outage.play_outage(topo)
            back = outage.wait_return(player, timeout=outage.OUTAGE_S + 10)
        deadline = back + WAIT_S
        while dl.proc.alive() and time.monotonic() < deadline:
            if case == "tcp-new-address" and outage.first_after(dl, back) is not None:
                break
            time.sleep(0.1)
        first = outage.first_after(dl, back)
        res = dl.result(timeout=1) if not dl.proc.alive() else {"intact": False, "error": "running"}
        if player is not None:
            player.stop()
        return {
            "case": case,
            "seed": seed,
            "first_bytes_after_return_s": first,
            "intact": res.get("intact"),
            "seconds": res.get("seconds"),
            "reconnects": res.get("reconnects"),
            "got_at_end": dl.got(),
        }


def plot(records: list[dict]):  # noqa: ANN201 - a matplotlib Figure
    fig, (ax,) = figure(width=7, height=3.5)
    for i, case in enumerate(CASES):
        xs = [r["first_bytes_after_return_s"] for r in records if r["case"] == case]
        shown = [x if x is not None else WAIT_S for x in xs]
        ax.scatter(shown, [i] * len(shown), color="tab:blue" if case == "multihome" else "tab:red")
        if any(x is None for x in xs):
            ax.annotate("nothing within 60 s", (WAIT_S, i), fontsize=8, ha="right", va="bottom")
    ax.set_yticks(range(len(CASES)), CASES)
    ax.set_xscale("log")
    ax.set_xlim(0.01, WAIT_S * 1.3)
    ax.set_xlabel("seconds from the link's return to the first new bytes at the application")
    ax.set_title(
        f"a {outage.OUTAGE_S:.0f} s outage of the only link "
        "(a new address after it, but for tcp-same-address)",
        fontsize=10,
    )
    ax.grid(alpha=0.3)
    return fig


def main(runs: int = 2) -> None:
    records = []
    for run in range(runs):
        for case in CASES:
            rec = one(case, seed=run + 1)
            progress(
                f"{case} run {run + 1}: first bytes {rec['first_bytes_after_return_s']} s after "
                f"the return, intact {rec['intact']}, {rec['seconds']} s in all"
            )
            records.append(rec)
    summary = {}
    for case in CASES:
        xs = [r["first_bytes_after_return_s"] for r in records if r["case"] == case]
        done = [x for x in xs if x is not None]
        summary[case] = {
            "runs": len(xs),
            "first_bytes_after_return_s_median": statistics.median(done) if done else None,
            "first_bytes_after_return_s": xs,
            "none_within_s": WAIT_S if len(done) < len(xs) else None,
            "intact": [r["intact"] for r in records if r["case"] == case],
        }
    params = {
        "outage_s": outage.OUTAGE_S,
        "dhcp_s": outage.DHCP_S,
        "rate_mbit": outage.RATE_MBIT,
        "one_way_delay_ms": outage.DELAY_MS,
        "size_bytes": SIZE,
        "cut_after_bytes": CUT_AFTER,
        "wait_s": WAIT_S,
    }
    save("outage", {"params": params, "records": records, "summary": summary}, plot(records))
