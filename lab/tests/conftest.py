"""Fixtures for the lab tests: root check, a per-test :class:`Lab`, the multihome binary.

Invariants: every test that touches the network gets a fresh :class:`Lab` whose namespaces and
processes are gone after the test, pass or fail; on failure the daemon and tool logs are
attached to the report. Tests never skip for lack of root or binary — CI must run them — so a
missing binary is built with ``cargo build --release -p multihome`` (or ``-p linkem``,
``-p voipgen``) once per session.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.linkem import linkem_binary
from lab.netns import REPO_ROOT, Lab
from lab.topology import multihome_binary
from lab.voip import voipgen_binary


@pytest.fixture(scope="session")
def root() -> None:
    if os.geteuid() != 0:
        pytest.fail("the lab tests need root (network namespaces, tc, nftables); run with sudo")


def _built(path: Path, package: str) -> Path:
    """``path``, after ``cargo build --release -p package`` if it is missing."""
    if not path.exists():
        res = subprocess.run(
            ["cargo", "build", "--release", "-p", package],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=3600,
            check=False,
        )
        if res.returncode != 0 or not path.exists():
            pytest.fail(f"cargo build --release -p {package} failed:\n{res.stderr[-4000:]}")
    return path


@pytest.fixture(scope="session")
def multihome_bin(root: None) -> Path:
    """The release binary; built once if it is missing."""
    return _built(multihome_binary(), "multihome")


@pytest.fixture(scope="session")
def voipgen_bin(root: None) -> Path:
    """The VoIP load generator's release binary ($VOIPGEN_BIN or target/release/voipgen)."""
    return _built(voipgen_binary(), "voipgen")


@pytest.fixture(scope="session")
def linkem_bin(root: None) -> Path:
    """The link emulator's release binary ($LINKEM_BIN or target/release/linkem)."""
    return _built(linkem_binary(), "linkem")


@pytest.fixture
def lab(root: None, request: pytest.FixtureRequest) -> Iterator[Lab]:
    with Lab() as the_lab:
        request.node.lab = the_lab
        yield the_lab


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # noqa: ANN201
    """On failure, attach the tail of every process log the test's lab produced."""
    rep = yield
    the_lab = getattr(item, "lab", None)
    if rep.failed and the_lab is not None and call.when == "call":
        for proc in the_lab.procs:
            rep.sections.append((f"log {proc.name} (pid {proc.pid})", proc.tail(60)))
    return rep
