#!/usr/bin/env bash
# The test suite, as CI runs it: format and lint checks, Rust unit/property/netns tests,
# a short fuzzing pass over every parser, the end-to-end lab tests in network namespaces,
# and the install test of the .deb. Run as root on Debian 12. Exits non-zero on the first
# failing stage.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$(echo ~root)/.cargo/bin:$PATH"

stage() { printf '\n===== %s =====\n' "$*"; }

stage "setup"
# Without its release build: `cargo test --release --workspace` below builds the binaries
# the lab and the package use (multihome's and linkem's integration tests need them). Its
# dev-dependencies turn on features (tempfile and proptest: of rustix, bitflags,
# regex-syntax) that change every workspace crate's build, so setup.sh's would be redone.
MULTIHOME_SETUP_BUILD=0 bash scripts/setup.sh

stage "format and lint"
cargo fmt --all -- --check
# --release: lints the same code (no item here is cfg(debug_assertions)), and the proc
# macros and build scripts it compiles (and etcd's generated client) are the release test
# build's; the dev profile would compile its own, optimised (profile.dev.package."*").
cargo clippy -q --release --workspace --all-targets -- -D warnings
.venv/bin/ruff format --check lab
.venv/bin/ruff check lab

stage "rust tests (unit, property, namespace integration)"
cargo test -q --release --workspace

if [ -x fuzz/run-all.sh ]; then
    stage "fuzz (short pass over every parser)"
    # A debug build: it compiles faster than the release one and still replays every corpus
    # and mutates for 5 s a target; long runs are done by hand (fuzz/README.md).
    FUZZ_PROFILE="${FUZZ_PROFILE:-dev}" fuzz/run-all.sh "${FUZZ_SECONDS:-5}"
fi

stage "end-to-end lab tests (network namespaces)"
.venv/bin/python -m pytest -q lab/tests

stage "package (the .deb built, installed with apt, verified, purged)"
bash scripts/test-package.sh
