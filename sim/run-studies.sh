#!/usr/bin/env bash
# Runs every study scenario of sim/scenarios/ with the release simulator, then draws the
# plots. Results: sim/results/<scenario>/ and sim/results/plots/, figures appended to
# bench/history.jsonl. About 5 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}"
cargo build --release -p multihome-sim
sim="$CARGO_TARGET_DIR/release/multihome-sim"
py=.venv/bin/python
[ -x "$py" ] || py=python3
for f in sim/scenarios/*.toml; do
    "$sim" run "$f"
    # the scenario's figures, one line per sweep point, into bench/history.jsonl
    "$py" -m lab.bench.history append "sim/results/$(grep -m1 '^name = ' "$f" | cut -d'"' -f2)"
done
"$py" sim/plot.py
