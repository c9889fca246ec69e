"""Scenarios as data: TOML files under lab/scenarios/ that describe links, policy and picture.

Role: load a scenario file, turn its links into :class:`~lab.topology.LinkSpec` (generating the
synthetic traces it names with ``linkem trace-gen`` into the lab's folder), and build the
:class:`~lab.topology.Topology`. ``python -m lab.scenario`` lists the scenarios and prints one.

File format (every key but ``name`` and ``[[link]]`` optional)::

    name = "home"
    description = "one line"
    picture = '''ASCII picture of the topology'''
    [tunnel]                      # multihome client settings
    policy = "aggregate"          # [policy] default
    detect_ms = 1000
    client = { aggregate_scheduler = "earliest" }   # any other [client] keys
    [[tunnel.rule]]               # [[policy.rule]] entries, verbatim
    [[link]]
    name = "dsl"
    emulator = "linkem"           # or "tbf" (rate_mbit, loss_pct, tbf_latency_ms = its queue
                                  # in ms at the rate, on a direct veth)
    offloads = false              # per-packet frames on this link
    seed = 1                      # linkem's loss/jitter seed
    [link.linkem.both]            # linkem's config, verbatim (both / a2b = up / b2a = down)
    delay = "10ms"
    [link.traces.b2a]             # a trace installed as that direction's rate
    kind = "lte"                  # synthetic: linkem trace-gen --kind/--mean-mbit/--seconds/--seed
    mean_mbit = 30
    # or file = "../shared/data/mahimahi/X.down": a real trace, read in place (path from the
    # repository root); the scenario is unavailable, not failed, when the file is absent.
    [bench]                       # parameters for the code that runs the scenario

Invariants: nothing is copied from ../shared/data; a scenario whose real trace is absent raises
:class:`ScenarioUnavailable` so callers can skip it cleanly.
"""

from __future__ import annotations

import argparse
import copy
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from lab.linkem import trace_gen
from lab.netns import REPO_ROOT, Lab, LabError
from lab.topology import LinkSpec, Topology

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"


class ScenarioUnavailable(LabError):
    """The scenario needs outside data (a real trace) that is not on this machine."""


@dataclass
class Scenario:
    name: str
    description: str
    picture: str
    links: list[dict]
    tunnel: dict = field(default_factory=dict)
    bench: dict = field(default_factory=dict)
    path: Path | None = None

    def link_specs(self, out_dir: Path, overrides: dict[str, dict] | None = None) -> list[LinkSpec]:
        """LinkSpecs for the links; traces are generated into ``out_dir``.

        ``overrides`` maps a link name to linkem settings merged into its ``both`` section
        (e.g. ``{"a": {"rate": "15mbit", "delay": "25ms"}}``) for parameter sweeps.
        """
        specs = []
        for link in self.links:
            name = link["name"]
            emulator = link.get("emulator", "linkem")
            if emulator == "tbf":
                specs.append(
                    LinkSpec(
                        name,
                        rate_mbit=link.get("rate_mbit"),
                        loss_pct=link.get("loss_pct", 0.0),
                        tbf_latency_ms=link.get("tbf_latency_ms", 50),
                        offloads=link.get("offloads", True),
                    )
                )
                continue
            if emulator != "linkem":
                raise LabError(f"{self.name}: link {name}: emulator must be linkem or tbf")
            config = copy.deepcopy(link.get("linkem", {}))
            if overrides and name in overrides:
                config.setdefault("both", {}).update(overrides[name])
            for direction, trace in link.get("traces", {}).items():
                config.setdefault(direction, {})["rate"] = "trace:" + str(
                    self._trace(out_dir, name, direction, trace)
                )
            specs.append(
                LinkSpec(
                    name,
                    linkem=config,
                    offloads=link.get("offloads", True),
                    seed=link.get("seed", 1),
                )
            )
        return specs

    def _trace(self, out_dir: Path, link: str, direction: str, trace: dict) -> Path:
        if "file" in trace:
            path = (REPO_ROOT / trace["file"]).resolve()
            if not path.is_file():
                raise ScenarioUnavailable(f"{self.name}: real trace {trace['file']} is absent")
            return path
        return trace_gen(
            out_dir / f"{link}-{direction}.trace",
            trace["kind"],
            trace["mean_mbit"],
            trace.get("seconds", 60),
            trace.get("seed", 1),
        )

    def topology(
        self, lab: Lab, *, overrides: dict[str, dict] | None = None, **kw: object
    ) -> Topology:
        """Build (not start) the topology; ``kw`` overrides the tunnel settings."""
        tunnel = {**self.tunnel, **kw}
        return Topology(
            lab,
            self.link_specs(lab.dir, overrides),
            policy=tunnel.get("policy", "aggregate"),
            rules=tunnel.get("rule"),
            detect_ms=tunnel.get("detect_ms"),
            client_extra=tunnel.get("client"),
        )


def load(name_or_path: str | Path) -> Scenario:
    """Load ``lab/scenarios/<name>.toml`` or a path to a scenario file."""
    path = Path(name_or_path)
    if not path.suffix:
        path = SCENARIO_DIR / f"{name_or_path}.toml"
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise LabError(f"scenario {path}: {exc}") from exc
    unknown = set(data) - {"name", "description", "picture", "tunnel", "link", "bench"}
    if unknown:
        raise LabError(f"scenario {path}: unknown keys {sorted(unknown)}")
    if not data.get("link"):
        raise LabError(f"scenario {path}: no [[link]]")
    return Scenario(
        name=data["name"],
        description=data.get("description", ""),
        picture=data.get("picture", ""),
        links=data["link"],
        tunnel=data.get("tunnel", {}),
        bench=data.get("bench", {}),
        path=path,
    )


def available() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.toml"))


def main() -> None:
    parser = argparse.ArgumentParser(description="list the lab's scenarios or show one")
    parser.add_argument("name", nargs="?", help="scenario to show")
    args = parser.parse_args()
    if args.name is None:
        for name in available():
            print(f"{name:16} {load(name).description}")
        return
    sc = load(args.name)
    print(f"{sc.name}: {sc.description}\n{sc.picture}")


if __name__ == "__main__":
    main()
