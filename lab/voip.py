"""Full-duplex VoIP-like load between two namespaces with ``voipgen`` (crates/voipgen).

Role: start ``voipgen answer`` in the far namespace and ``voipgen call`` (N streams of
160-byte packets at 50 packets/s each way, 64 kbit/s per one-way stream) in the near one,
wait for both and return what each side received. The answerer replies to each caller
address it sees, so the far end may sit behind NAT (the lab's origin reaches the LAN only
through the server's masquerade).

Invariants: the answerer is listening before the caller starts; a result is returned only
when both sides printed one, otherwise :class:`LabError` carries both logs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from lab.netns import REPO_ROOT, LabError, Namespace
from lab.traffic import parse_result, wait_listening

PPS = 50  # packets/s of one one-way stream: 64 kbit/s of 160-byte payloads
SIZE = 160


def voipgen_binary() -> Path:
    """$VOIPGEN_BIN, else <target dir>/release/voipgen."""
    if os.environ.get("VOIPGEN_BIN"):
        return Path(os.environ["VOIPGEN_BIN"])
    target = os.environ.get("CARGO_TARGET_DIR") or str(REPO_ROOT / "target")
    return Path(target) / "release" / "voipgen"


@dataclass
class VoipResult:
    """What each direction delivered (``up`` = caller to answerer)."""

    up: dict
    down: dict

    @property
    def expected(self) -> int:
        return self.up["expected"] + self.down["expected"]

    @property
    def delivered(self) -> int:
        return self.up["received"] + self.down["received"]

    @property
    def loss(self) -> float:
        return 1 - self.delivered / self.expected if self.expected else 0.0


def voip_calls(
    near: Namespace,
    far: Namespace,
    far_addr: str,
    *,
    streams: int,
    count: int,
    port: int = 5004,
    binary: Path | None = None,
    tag: str = "",
    prefix: list[str] | None = None,
) -> VoipResult:
    """``streams`` full-duplex streams of ``count`` packets each way, near -> far_addr;
    ``prefix`` goes before both commands (e.g. ``taskset -c 1``)."""
    exe = [*(prefix or []), str(binary or voipgen_binary())]
    common = ["--count", str(count), "--pps", str(PPS), "--size", str(SIZE)]
    answer = far.spawn(
        [*exe, "answer", "--bind", f"0.0.0.0:{port}", "--idle", "2", *common], f"voip-ans{tag}"
    )
    wait_listening(answer)
    call = near.spawn(
        [*exe, "call", "--to", f"{far_addr}:{port}", "--streams", str(streams), *common],
        f"voip-call{tag}",
    )
    timeout = count / PPS + 30
    try:
        call.wait(timeout)
        answer.wait(10)
    except LabError as exc:
        raise LabError(f"{exc}\ncaller:\n{call.tail()}\nanswerer:\n{answer.tail()}") from exc
    down, up = parse_result(call), parse_result(answer)
    # The answerer counts streams as they appear; a stream whose every packet was lost
    # would be missing from its count.
    up["expected"] = max(up["expected"], streams * count)
    up["lost"] = up["expected"] - up["received"]
    return VoipResult(up=up, down=down)
