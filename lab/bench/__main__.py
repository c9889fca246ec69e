"""``python -m lab.bench SUITE``: run a benchmark suite, write JSON + plots to bench/results/.

Suites: ``simult-flows`` (kernel MPTCP selftest matrix, multihome vs kernel MPTCP),
``overhead`` (one path: direct, multihome, OpenVPN, wireguard-go), ``failover`` (a link cut
mid-transfer: gap and survival per multihome policy and kernel MPTCP), ``aggregate`` (one TCP
flow over unequal links and trace pairs: goodput against the summed rate, RTT, reorder; issue
4), ``crosscheck`` (one two-link scenario in the lab and in the simulator: goodput within 10 %,
issue 6), ``copies-cpu`` (VoIP streams through ``redundant`` copies: daemon CPU per packet
and loss against packets/s, user-space copies vs the kernel fast path vs plain routing;
issue 17), ``realtime-media`` (a video call + voice with a 150 ms deadline over lossy and
trace links: frames on time and extra bytes per policy, issue 17), ``detours`` (Brennan's
detour experiments: slide-33 network, kernel MPTCP, multihome and plain TCP with and
without a detour; issue 15), ``detour-relay`` (what forwarding a detour costs the relay's
CPU; issue 15), ``naming`` (resolver publish/lookup latency on the embedded store and
etcd, failover of 100 clients when their server dies; issue 18), ``vehicular`` (60-80 MB
downloads from a car passing Wi-Fi hotspots: a resuming TCP/IP application vs multihome with
store-and-forward; issue 16), ``handoff-voice`` (a 64 kbit/s voice stream through Wi-Fi
handoffs with LTE beside: loss and delay around each handoff per policy, simulator and a lab
cross-check; issue 16), ``vehicular-lte`` (§4.2.2 of the same study on one drive: striping
over Wi-Fi and a steady LTE link against the sum of each alone, lab and simulator; issue 16),
``outage`` (a download across a 30 s outage with a new address:
multihome against plain TCP; issue 16), ``reorder`` (links whose jitter reorders, with and
without 1 % loss: goodput and packets resent against packets really lost, ``aggregate`` and
``best``; issue 19), ``scale`` (1 000 real clients x 2 links on one server: bring-up,
steady traffic, churn, roaming, memory per idle session also at 10 000, bulk goodput beside a
spoofed handshake flood; lab/bench/scale.py), ``cellular-drive`` (pairs of Mahimahi cellular
driving traces with multi-second outages: a bulk download and a voice stream under ``best``,
``aggregate``, ``redundant``: longest stall while any link delivers, link state changes
against the traces' outages, goodput, voice loss; issue 19), ``quic`` (a QUIC bulk download,
quic-go's example client and server, through ``aggregate`` on the aggregate suite's fixed
cases and two trace pairs, beside TCP: goodput against the best link alone; issue 19),
``all``. Needs root; builds its own namespaces and removes them, even after a failure.
"""

from __future__ import annotations

import argparse
import sys

from lab.bench import (
    aggregate,
    cellular_drive,
    copies_cpu,
    crosscheck,
    detour_relay,
    detours,
    failover,
    handoff_voice,
    naming,
    outage,
    overhead,
    quic,
    realtime_media,
    reorder,
    scale,
    simult_flows,
    vehicular,
    vehicular_lte,
)
from lab.bench.common import build_binaries

SUITES = (
    "simult-flows",
    "overhead",
    "failover",
    "aggregate",
    "crosscheck",
    "copies-cpu",
    "realtime-media",
    "detours",
    "detour-relay",
    "naming",
    "vehicular",
    "handoff-voice",
    "outage",
    "vehicular-lte",
    "reorder",
    "scale",
    "cellular-drive",
    "quic",
)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.bench", description=__doc__)
    parser.add_argument("suite", choices=[*SUITES, "all"])
    parser.add_argument(
        "--runs",
        type=int,
        help="runs per case (simult-flows 5, failover 3, aggregate 1, vehicular 4 per range, "
        "outage 2, reorder 1, cellular-drive 1, quic 1)",
    )
    parser.add_argument(
        "--cases",
        nargs="*",
        help="simult-flows: only these case indexes (0-5); aggregate: only these cases or "
        "trace pairs by name (50+20 100+10 30+20+10 synthetic-wifi+lte mptraces-7_1 "
        "mptraces-8_1 mptraces-11_1), or the groups 'fixed' and 'traces' (quic: the same names; "
        "'traces' there is synthetic-wifi+lte and mptraces-8_1); cellular-drive: "
        "trace pairs by name (lab/bench/cellular_drive.py PAIRS); realtime-media: "
        "these cases or trace pairs by name; detours: "
        "NETWORK/VARIATION (symmetric|core-limited / normal|loss|delay); vehicular: AP-gap "
        "ranges 100-300 300-500 and the cross-check point fixed-400; naming: latency cases by "
        "name (lab/bench/naming.py CASES) and 'failover'",
    )
    parser.add_argument(
        "--scheduler",
        choices=["earliest", "weighted"],
        help="simult-flows: multihome's aggregate_scheduler (a diagnostic variant)",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        help="overhead: seconds per TCP test; aggregate: seconds per flow (default 30); "
        "copies-cpu: seconds per point (default 5); "
        "realtime-media: seconds per measured stream (default 20); "
        "detours, detour-relay: seconds per run (default 20, 10); "
        "naming: seconds of timed load per store (default 20); "
        "handoff-voice: seconds of voice in each lab run (default 120); "
        "reorder: seconds per flow (default 15); quic: seconds per transfer (default 20); "
        "cellular-drive: seconds per policy run (default 60)",
    )
    parser.add_argument(
        "--skip-sim",
        action="store_true",
        help="handoff-voice: use the simulator's results already in sim/results",
    )
    parser.add_argument("--skip-lab", action="store_true", help="handoff-voice: the simulator only")
    parser.add_argument("--quick", action="store_true", help="detours: CUBIC only, 8-s runs")
    parser.add_argument(
        "--cc",
        choices=["cubic", "bbr"],
        help="aggregate: congestion control of every flow (default: the scenario's, cubic); "
        "stream mode's subflows use it too",
    )
    parser.add_argument(
        "--tag",
        help="aggregate, failover: file a partial run as bench/results/<suite>-TAG.json (a "
        "named result kept beside the suite's, e.g. one case with more runs or an A/B)",
    )
    parser.add_argument(
        "--download",
        action="store_true",
        help="failover: stream mode alone, the origin sending (saved as failover-download)",
    )
    parser.add_argument(
        "--stream-set",
        nargs="*",
        metavar="KEY=VALUE",
        help="failover: keys of the client's [stream] for stream mode's runs, e.g. "
        "remove_addr=false",
    )
    parser.add_argument(
        "--policies",
        nargs="*",
        help="cellular-drive: only these policies (best aggregate redundant stream); a partial "
        "run is filed as cellular-drive-quick",
    )
    parser.add_argument(
        "--no-mptcp", action="store_true", help="cellular-drive: leave kernel MPTCP's run out"
    )
    parser.add_argument(
        "--probe",
        action="store_true",
        help="cellular-drive: sample the origin's TCP (ss -tin, 20 ms) and the server's paths "
        "(100 ms) in every run, stored in the results (filed as cellular-drive-quick)",
    )
    parser.add_argument(
        "--mechanisms",
        nargs="*",
        choices=detours.MECHANISMS,
        help="detours: only these mechanisms",
    )
    parser.add_argument("--repeats", type=int, default=2, help="overhead: repeats per system")
    parser.add_argument(
        "--clients", type=int, default=100, help="naming: clients in the failover run"
    )
    parser.add_argument(
        "--sessions", type=int, default=1000, help="scale: client sessions on the server"
    )
    parser.add_argument(
        "--idle-sessions",
        type=int,
        default=10_000,
        help="scale: idle sessions of the memory run (0: skip it)",
    )
    parser.add_argument(
        "--detect-ms",
        type=int,
        default=1000,
        help="scale: every session's detect_ms (idle paths are probed every quarter of it)",
    )
    parser.add_argument(
        "--server-threads",
        type=int,
        help="scale: the server's data-path threads (default: the daemon's, one per core)",
    )
    parser.add_argument(
        "--flood-only",
        action="store_true",
        help="scale: only bring-up and the bulk phases without and with the handshake flood",
    )
    parser.add_argument(
        "--lab-from", help="crosscheck: reuse the lab runs of this result; run the simulator only"
    )
    parser.add_argument(
        "--streams",
        type=int,
        nargs="*",
        help="copies-cpu: full-duplex streams per point (default 1 10 50 100 200 300 400 600 800)",
    )
    parser.add_argument(
        "--isolate",
        action="store_true",
        help="copies-cpu: RPS on every veth to CPU 1, daemons pinned to CPU 0 (the veth "
        "peers' receive processing off the daemons, at the price of an IPI per hand-over)",
    )
    args = parser.parse_args()
    suites = SUITES if args.suite == "all" else (args.suite,)
    build_binaries()
    for suite in suites:
        if suite == "simult-flows":
            only = None if args.cases is None else [int(c) for c in args.cases]
            simult_flows.main(runs=args.runs, only=only, scheduler=args.scheduler)
        elif suite == "overhead":
            overhead.main(seconds=args.seconds, repeats=args.repeats)
        elif suite == "aggregate":
            aggregate.main(
                runs=args.runs, seconds=args.seconds, only=args.cases, tag=args.tag, cc=args.cc
            )
        elif suite == "realtime-media":
            realtime_media.main(seconds=args.seconds, only=args.cases)
        elif suite == "detours":
            detours.main(
                seconds=args.seconds, only=args.cases, quick=args.quick, mechanisms=args.mechanisms
            )
        elif suite == "detour-relay":
            detour_relay.main(["--seconds", str(args.seconds or 10)])
        elif suite == "crosscheck":
            crosscheck.main(runs=args.runs, lab_from=args.lab_from)
        elif suite == "copies-cpu":
            copies_cpu.main(
                streams=tuple(args.streams or copies_cpu.STREAMS),
                seconds=args.seconds or copies_cpu.SECONDS,
                isolate=args.isolate,
            )
        elif suite == "naming":
            naming.main(seconds=int(args.seconds or 20), clients=args.clients, only=args.cases)
        elif suite == "vehicular":
            vehicular.main(runs=args.runs, only=args.cases)
        elif suite == "handoff-voice":
            handoff_voice.main(
                seconds=args.seconds,
                sim_from="sim/results" if args.skip_sim else None,
                lab=not args.skip_lab,
            )
        elif suite == "outage":
            outage.main(runs=args.runs or 2)
        elif suite == "vehicular-lte":
            vehicular_lte.main()
        elif suite == "reorder":
            reorder.main(runs=args.runs, seconds=args.seconds)
        elif suite == "cellular-drive":
            cellular_drive.main(
                runs=args.runs,
                seconds=args.seconds,
                only=args.cases,
                with_mptcp=not args.no_mptcp,
                policies=args.policies,
                probe=args.probe,
            )
        elif suite == "scale":
            scale.main(
                sessions=args.sessions,
                idle_sessions=args.idle_sessions,
                seconds=args.seconds or 10,
                detect_ms=args.detect_ms,
                flood_only=args.flood_only,
                server_threads=args.server_threads,
            )
        elif suite == "quic":
            quic.main(runs=args.runs, seconds=args.seconds, only=args.cases)
        else:
            failover.main(
                runs=args.runs or 3,
                download=args.download,
                stream_set=failover.parse_stream_set(args.stream_set),
                tag=args.tag,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
