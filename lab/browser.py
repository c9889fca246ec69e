"""Headless Chromium for the lab, driven over the DevTools protocol through a pipe.

Role: open a page in a real browser (Debian's ``chromium``) inside a lab namespace, evaluate
JavaScript in it (read what the page shows while its scripts keep running) and take
screenshots. Used by the dashboard's end-to-end test.

Why a pipe: ``--remote-debugging-pipe`` makes Chromium read protocol messages (JSON, each
ended by a NUL byte) from fd 3 and write its answers to fd 4, so no WebSocket client and no
port are needed. One browser stays open for the whole test, so the page is observed live
instead of being reloaded for every look.

Invariants: the browser is a child of :class:`Browser` (through ``ip netns exec``) and is
killed on ``close`` whatever happens; every call has a timeout; its profile lives in the
lab's folder. Chromium as root needs ``--no-sandbox``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from lab.netns import LabError, Namespace


def chromium_binary() -> str:
    """Debian's ``chromium`` ($CHROMIUM overrides)."""
    path = (
        os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    )
    if not path:
        raise LabError("chromium not found: apt-get install chromium (scripts/setup.sh does)")
    return path


class Browser:
    """One headless Chromium in namespace ``ns`` with one page of ``width`` x ``height``."""

    def __init__(self, ns: Namespace, profile: Path, width: int = 1280, height: int = 1400) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        args = [
            chromium_binary(),
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            # The page is never in front of anyone: keep its timers at full rate anyway.
            "--disable-background-timer-throttling",
            "--disable-renderer-backgrounding",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            "about:blank",
        ]
        # bash (not sh: dash takes one-digit fds only) puts the pipe ends at fds 3 and 4,
        # where Chromium expects them.
        script = f'exec "$@" 3<&{to_chrome_r} 4>&{from_chrome_w}'
        self.log = profile.parent / f"{profile.name}.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                ns.cmd(["bash", "-c", script, "chromium", *args]),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(to_chrome_r, from_chrome_w),
                start_new_session=True,
            )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._next_id = 0
        self.session: str | None = None
        try:
            target = self.call("Target.createTarget", url="about:blank")["targetId"]
            self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
                "sessionId"
            ]
            self.call(
                "Emulation.setDeviceMetricsOverride",
                width=width,
                height=height,
                deviceScaleFactor=1,
                mobile=False,
            )
            # Screenshots show the page's whole width, not a strip under a scrollbar.
            self.call("Emulation.setScrollbarsHidden", hidden=True)
        except BaseException:
            self.close()
            raise

    def call(self, method: str, timeout: float = 15, **params: Any) -> dict:
        """Sends one command (to the page once attached) and returns its result."""
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        try:
            os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        except BrokenPipeError:
            raise LabError(f"chromium exited; log:\n{self.log_tail()}") from None
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") != self._next_id:
                continue  # an event, or the answer of another session
            if "error" in reply:
                raise LabError(f"chromium {method}: {reply['error']}")
            return reply.get("result", {})

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._from_chrome], [], [], max(0.0, left))
            if not ready:
                raise LabError(f"chromium did not answer in time; log:\n{self.log_tail()}")
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise LabError(f"chromium exited; log:\n{self.log_tail()}")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def open(self, url: str) -> None:
        """Navigates to ``url`` (returns once the navigation is committed)."""
        res = self.call("Page.navigate", url=url)
        if res.get("errorText"):
            raise LabError(f"opening {url}: {res['errorText']}")

    def eval(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable)."""
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in res:
            raise LabError(f"{expression}: {res['exceptionDetails']}")
        return res["result"].get("value")

    def wait_for(self, expression: str, timeout: float, poll: float = 0.05) -> tuple[Any, float]:
        """Polls ``expression`` until it is truthy; returns its value and the seconds taken."""
        start = time.monotonic()
        while True:
            value = self.eval(expression)
            if value:
                return value, time.monotonic() - start
            if time.monotonic() - start > timeout:
                raise LabError(f"not true after {timeout}s: {expression}")
            time.sleep(poll)

    def screenshot(self, path: Path) -> Path:
        """A PNG of the whole page."""
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data["data"]))
        return path

    def close(self) -> None:
        # Chromium's helpers (renderer, GPU, zygote) share its process group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        for fd in (self._to_chrome, self._from_chrome):
            with contextlib.suppress(OSError):
                os.close(fd)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
