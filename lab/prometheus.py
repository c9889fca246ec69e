"""Reading the daemons' Prometheus metrics in the lab: a GET from inside a namespace, and a
parser that checks the exposition format while it reads (one TYPE line per family, before
its samples, which form one contiguous group; counters end in ``_total``)."""

from __future__ import annotations

import re
from typing import Protocol

SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\} (\S+)$")

# A GET with the namespace's own Python, so nothing is installed there.
FETCH = (
    "import sys, urllib.request; "
    "sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())"
)


class Runs(Protocol):
    def run(self, cmd: list[str], **kw: object) -> object: ...


def get(ns: Runs, url: str) -> str:
    """The body of GET ``url`` from inside namespace ``ns``."""
    return ns.run(["python3", "-c", FETCH, url], timeout=10).stdout  # type: ignore[attr-defined]


def parse(text: str) -> tuple[dict[str, str], dict[tuple[str, str], float]]:
    """Types by family and values by (name, labels), checking the format as it goes."""
    types: dict[str, str] = {}
    values: dict[tuple[str, str], float] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name, kind = line[7:].split(" ")
            assert name not in types, f"{name} typed twice"
            assert kind in ("counter", "gauge"), line
            assert (kind == "counter") == name.endswith("_total"), line
            types[name], current = kind, name
        elif line.startswith("# HELP "):
            continue
        else:
            m = SAMPLE_RE.match(line)
            assert m, f"not a sample line: {line!r}"
            assert m.group(1) == current, f"{m.group(1)} outside its family group"
            values[(m.group(1), m.group(2))] = float(m.group(3))
    return types, values
