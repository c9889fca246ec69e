"""The sender probe's parsers (lab/bench/sender_probe.py), on output as `ss` and the daemon
print it."""

from __future__ import annotations

from lab.bench.sender_probe import parse_ss, path_rows

SS = (
    "State      Recv-Q Send-Q Local Address:Port Peer Address:Port Process\n"
    "ESTAB      0      0      10.50.0.2:22   10.50.0.9:41000\n"
    "\t cubic wscale:7,7 rto:204 rtt:1.5/0.7 mss:1448 cwnd:10 bytes_acked:100 delivered:3\n"
    "CLOSE-WAIT 0      399712     10.50.0.2:9601    10.50.0.1:60862\n"
    "\t cubic wscale:10,10 rto:2824 rtt:898.732/481.126 ato:40 mss:1368 pmtu:1500 "
    "rcvmss:536 advmss:1448 cwnd:44 ssthresh:90 bytes_sent:3034408 bytes_retrans:1368 "
    "bytes_acked:4172400 bytes_received:1 segs_out:2220 data_segs_out:2219 "
    "delivered:3119 busy:3808ms unacked:145 retrans:41/107 lost:75 sacked:67 "
    "rcv_space:14480 notsent:243760 minrtt:71.802\n"
)


def test_parse_ss_reads_the_transfer_socket_by_port() -> None:
    row = parse_ss(SS, 9601)
    assert row == {
        "cwnd": 44,
        "ssthresh": 90,
        "rto": 2824,
        "rtt_ms": 898.732,
        "rttvar_ms": 481.126,
        "unacked": 145,
        "retrans": 41,
        "retrans_total": 107,
        "lost": 75,
        "sacked": 67,
        "bytes_acked": 4172400,
        "delivered": 3119,
    }
    # `bytes_retrans`, `data_segs_out` and `minrtt` are other fields, not these.
    assert parse_ss(SS)["cwnd"] == 10, "without a port: the first socket"
    assert parse_ss(SS, 5555) is None
    assert parse_ss("") is None


def test_path_rows_keep_the_named_fields_of_the_first_session() -> None:
    status = {
        "sessions": [
            {
                "links": [
                    {"id": 0, "state": "suspect", "standby": True, "srtt_ms": 539.0,
                     "fwd_queue_ms": 459.0, "pacing_rate_bps": 4.87e6, "inflight_bytes": 144000,
                     "tx_packets": 3172, "remote": "10.0.1.2:58801"},
                ]
            }
        ]
    }  # fmt: skip
    (row,) = path_rows(status)
    assert row["state"] == "suspect" and row["pacing_rate_bps"] == 4.87e6
    assert "remote" not in row
    assert path_rows({"sessions": []}) == []
