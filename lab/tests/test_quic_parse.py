"""The ``quic`` suite's reading of quic-go's example client (lab/bench/quic_tool.py).

Pure parsing, no namespaces: the byte count comes from what the client printed, a client
that printed no body is an error (None), never zero; and the suite's first rate guess.
"""

from __future__ import annotations

from lab.bench.aggregate import mean_loss
from lab.bench.quic_tool import body_bytes, guess_mbit, response_started, server_listening

QUIET_LOG = """\
2026/11/28 14:01:02 GET https://10.200.0.1:9301/25000000
2026/11/28 14:01:02 Got response for https://10.200.0.1:9301/25000000: &http.Response{}
2026/11/28 14:01:06 Response Body: 25000000 bytes
"""


def test_quiet_client_log_gives_body_bytes_and_start() -> None:
    assert body_bytes(QUIET_LOG) == 25_000_000
    assert response_started(QUIET_LOG)


def test_verbose_form_and_last_body_wins() -> None:
    log = "Response Body: 10 bytes\nResponse Body (4096 bytes):\n<data>\n"
    assert body_bytes(log) == 4096


def test_failed_client_has_no_body() -> None:
    log = "GET https://10.0.1.1:9301/1000\n2026/11/28 timeout: no recent network activity\n"
    assert body_bytes(log) is None
    assert not response_started(log)
    assert not server_listening(log)
    assert server_listening("listening on 0.0.0.0:9301\n")


def test_rate_guess_clean_link_and_lossy_link() -> None:
    assert guess_mbit(50, 10, 0.0) == 45.0
    # 1 % loss at 20 ms RTT: twice Mathis's bound (~12 Mbit/s), far below the 50 Mbit/s rate.
    lossy = guess_mbit(50, 10, 0.01)
    assert 11 < lossy < 13


def test_mean_loss_of_a_case_loss_value() -> None:
    """The suites' loss values: a probability as is; Gilbert-Elliott's long-run rate (the
    aggregate suite's bursty case: p = 0.04, r = 0.33, every frame lost while bad)."""
    assert mean_loss(0.01) == 0.01
    ge = {"p": 0.04, "r": 0.33, "loss_bad": 1.0, "loss_good": 0.0}
    assert abs(mean_loss(ge) - 0.04 / 0.37) < 1e-12
    assert abs(mean_loss({"p": 0.1, "r": 0.1, "loss_bad": 0.5, "loss_good": 0.1}) - 0.3) < 1e-12
