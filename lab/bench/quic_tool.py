"""The QUIC programs of the ``quic`` suite: quic-go's example HTTP/3 server and client.

Role: install once, describe and drive the QUIC implementation the suite measures, and parse
what its client prints. The programs are the example server (``example``: an HTTP/3 file
server, ``-www DIR -bind ADDR -cert -key``) and client (``example/client``: fetches the URLs
it is given, ``-q`` prints only ``Response Body: N bytes``) of quic-go, a maintained QUIC
implementation in Go, at a pinned version. They are built from the Go module proxy with
``go install MODULE/example@VERSION`` into a cache outside the repository
(``$MULTIHOME_QUIC_DIR``, else ``~/.cache/multihome/quic-go@VERSION``); nothing of quic-go
is kept in the repository.

Go: quic-go v0.65.0 needs Go >= 1.26. A Go older than that but >= 1.21 (Debian's
``golang-go``) fetches the right toolchain itself from the Go module proxy
(``GOTOOLCHAIN=auto``, the default); a machine with no Go at all needs one first
(``apt-get install golang-go``, or a Go toolchain on ``PATH``, or ``$GO``).

Congestion control: quic-go's default, NewReno (its ``cubicSender`` built with
``reno = true``); the example programs expose no choice.

Invariant: the client's byte count is the one it printed (the response body it read), never
an expected size; a client that printed none is an error, not zero.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from pathlib import Path

from lab.netns import LabError

MODULE = "github.com/quic-go/quic-go"
VERSION = "v0.65.0"
CONGESTION_CONTROL = "NewReno (quic-go default: cubicSender with reno=true)"
CACHE = Path(
    os.environ.get("MULTIHOME_QUIC_DIR")
    or Path.home() / ".cache" / "multihome" / f"quic-go@{VERSION}"
)
SERVER = CACHE / "bin" / "example"
CLIENT = CACHE / "bin" / "client"

_BODY_RE = re.compile(r"Response Body(?: \((\d+) bytes\)|: (\d+) bytes)")


class QuicUnavailable(LabError):
    """The QUIC programs are not installed and cannot be built here."""


def go_binary() -> str | None:
    """``$GO``, else ``go`` on PATH, else /usr/local/go/bin/go (the tarball's place)."""
    for cand in (os.environ.get("GO"), shutil.which("go"), "/usr/local/go/bin/go"):
        if cand and Path(cand).is_file():
            return cand
    return None


def ensure_installed() -> dict:
    """Build the server and client into :data:`CACHE` if absent; describe what is used."""
    go = go_binary()
    if not (SERVER.is_file() and CLIENT.is_file()):
        if go is None:
            raise QuicUnavailable(
                "the quic suite needs quic-go's example programs, built with Go: install Go "
                "(apt-get install golang-go, or put a Go toolchain on PATH or in $GO), then "
                "rerun; or build them by hand: GOBIN="
                f"{CACHE / 'bin'} go install {MODULE}/example@{VERSION} "
                f"{MODULE}/example/client@{VERSION}"
            )
        env = {**os.environ, "GOBIN": str(CACHE / "bin")}
        pkgs = [f"{MODULE}/example@{VERSION}", f"{MODULE}/example/client@{VERSION}"]
        res = subprocess.run(
            [go, "install", *pkgs], env=env, capture_output=True, text=True, check=False
        )
        if res.returncode != 0 or not (SERVER.is_file() and CLIENT.is_file()):
            raise QuicUnavailable(
                f"go install {' '.join(pkgs)} failed (rc {res.returncode}); quic-go {VERSION} "
                f"needs Go >= 1.26 (GOTOOLCHAIN=auto fetches it from the Go module proxy):\n"
                f"{res.stderr[-1500:]}"
            )
    go_version = None
    if go is not None:
        out = subprocess.run([go, "version"], capture_output=True, text=True, check=False)
        go_version = out.stdout.strip() or None
    return {
        "implementation": "quic-go",
        "module": MODULE,
        "version": VERSION,
        "programs": "example (HTTP/3 file server) and example/client (HTTP/3 GET)",
        "congestion_control": CONGESTION_CONTROL,
        "go": go_version,
    }


def self_signed(dir_: Path) -> tuple[Path, Path]:
    """A throw-away ECDSA certificate and key for the server (the client runs -insecure)."""
    cert, key = dir_ / "quic-cert.pem", dir_ / "quic-key.pem"
    cmd = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
    cmd += ["-nodes", "-days", "2", "-subj", "/CN=multihome-lab", "-keyout", str(key)]
    cmd += ["-out", str(cert)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise LabError(f"openssl could not make the QUIC server's certificate:\n{res.stderr}")
    return cert, key


def body_bytes(log: str) -> int | None:
    """Bytes of the last response body the client reported, or None if it reported none.

    ``-q`` prints ``Response Body: N bytes``; without it ``Response Body (N bytes):``.
    """
    found = _BODY_RE.findall(log)
    if not found:
        return None
    quiet, loud = found[-1]
    return int(quiet or loud)


def response_started(log: str) -> bool:
    """Whether the client has the response's headers (it logs ``Got response for URL``)."""
    return "Got response for " in log


def guess_mbit(rate: float, delay_ms: float, loss: float) -> float:
    """A first guess of one flow's goodput on a link: its rate, or Mathis's loss bound x 2."""
    if not loss:
        return rate * 0.9
    rtt = 2 * delay_ms / 1000
    return min(rate * 0.9, 2 * 1.22 * 1252 * 8 / (rtt * math.sqrt(loss)) / 1e6)


def server_listening(log: str) -> bool:
    return "listening on " in log
