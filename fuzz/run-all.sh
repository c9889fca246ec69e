#!/usr/bin/env bash
# Runs every cargo-fuzz target of this directory for SECONDS each, one after the other.
# Needs a nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`). Stops with a
# non-zero status at the first target that finds a crash; the reproducer is then in
# fuzz/artifacts/<target>/. Corpora accumulate in fuzz/corpus/<target>/ (cache it in CI).
#
# Environment: FUZZ_TARGET_DIR (build directory, default fuzz/target — keep it apart
# from normal builds: the instrumented flags would force rebuilds), FUZZ_SANITIZER
# (default none: the core is safe Rust, so ASan mostly costs speed; use "address" for
# long runs), FUZZ_PROFILE (default release; "dev" builds faster and
# runs ~50 times fewer inputs a second: the CI pass, which mostly replays the corpora).
set -euo pipefail
secs=${1:?usage: fuzz/run-all.sh SECONDS}
here=$(cd "$(dirname "$0")" && pwd)
target_dir=${FUZZ_TARGET_DIR:-$here/target}
sanitizer=${FUZZ_SANITIZER:-none}
profile=()
case "${FUZZ_PROFILE:-release}" in
    release) ;;
    dev) profile=(--dev) ;;
    *) echo "fuzz: FUZZ_PROFILE must be release or dev, not ${FUZZ_PROFILE}" >&2; exit 2 ;;
esac
cd "$here/.."
fuzz=(cargo +nightly fuzz)
# Install what is missing (nightly for libFuzzer's instrumentation, cargo-fuzz). Where a
# nightly toolchain cannot be had, fall back to the stable smoke run of the same bodies.
if ! rustup toolchain list | grep -q '^nightly'; then
    rustup toolchain install nightly --profile minimal || true
fi
if ! rustup toolchain list | grep -q '^nightly'; then
    echo "fuzz: no nightly toolchain; running the stable smoke test of every target instead"
    exec cargo test --release --manifest-path "$here/Cargo.toml"
fi
"${fuzz[@]}" --version >/dev/null 2>&1 || cargo install -q cargo-fuzz
"${fuzz[@]}" build "${profile[@]}" --fuzz-dir "$here" --target-dir "$target_dir" -s "$sanitizer"
for t in $("${fuzz[@]}" list --fuzz-dir "$here"); do
    echo "== fuzz $t for ${secs}s"
    "${fuzz[@]}" run "${profile[@]}" --fuzz-dir "$here" --target-dir "$target_dir" -s "$sanitizer" "$t" \
        -- -max_total_time="$secs" -rss_limit_mb=2048 -print_final_stats=1
done
