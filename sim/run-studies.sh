#!/usr/bin/env bash
# Runs every study scenario of sim/scenarios/ with the release simulator, then draws the
# plots. Results: sim/results/<scenario>/ and sim/results/plots/. About 5 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/work/target-sim}"
cargo build --release -p multihome-sim
sim="$CARGO_TARGET_DIR/release/multihome-sim"
for f in sim/scenarios/*.toml; do
    "$sim" run "$f"
done
py=.venv/bin/python
[ -x "$py" ] || py=python3
"$py" sim/plot.py
