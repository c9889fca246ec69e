#!/usr/bin/env bash
# Installs everything multihome needs on a fresh Debian 12 machine (run as root; with sudo
# where it exists), then builds the release binaries. Idempotent: re-running only does what
# is missing. Prints one line per step; each step's own output (apt, rustup, pip, cargo) goes
# to a log that is shown only if the step fails.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '==> %s\n' "$*"; }
logs=$(mktemp -d "${TMPDIR:-/tmp}/multihome-setup.XXXXXX")
# Runs a step with its output in $logs/NAME.log; on failure shows the log's end and stops.
quiet() {
    local name=$1
    shift
    if ! "$@" >"$logs/$name.log" 2>&1; then
        echo "setup.sh: this step failed: $*" >&2
        tail -n 40 "$logs/$name.log" >&2
        echo "setup.sh: the whole output is in $logs/$name.log" >&2
        exit 1
    fi
}

if [ "$(id -u)" -ne 0 ]; then
    echo "setup.sh: run as root (it installs packages and the lab needs network namespaces)" >&2
    exit 1
fi

# iptables: `multihome race` queues SYNs with the xtables NFQUEUE target (nftables' own
# `queue` statement needs CONFIG_NFT_QUEUE, which kernels may lack).
# etcd-server, etcd-client: the shared record store of several servers, and etcdctl, with
# which the lab waits for its members to be healthy (lab and tests start their own members);
# protobuf-compiler + libprotobuf-dev: the etcd client crate compiles etcd's
# .proto files at build time. chromium: the dashboard's end-to-end test opens it headless.
# curl: rustup, where Rust is missing.
PKGS=(iproute2 nftables iptables iperf3 ethtool mptcpd iputils-ping procps python3 python3-venv
      python3-pip socat openvpn build-essential pkg-config etcd-server etcd-client protobuf-compiler
      libprotobuf-dev chromium curl ca-certificates git)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    say "apt: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    quiet apt-update apt-get update
    quiet apt-install apt-get install -y --no-install-recommends "${missing[@]}"
fi

for d in "$HOME/.cargo/bin" ~root/.cargo/bin; do
    [ -x "$d/cargo" ] && export PATH="$d:$PATH"
done
if ! command -v cargo >/dev/null 2>&1; then
    # Debian 12's own rustc (1.63) is too old: the toolchain comes from rustup.
    say "rust: installing the stable toolchain with rustup (https://rustup.rs)"
    quiet rustup sh -c "curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs \
        | sh -s -- -y --profile minimal --component rustfmt,clippy"
    export PATH="$HOME/.cargo/bin:$PATH"
fi
rustc_minor=$(rustc --version | sed -E 's/^rustc 1\.([0-9]+).*/\1/')
if [ "$rustc_minor" -lt 85 ] 2>/dev/null; then
    if command -v rustup >/dev/null 2>&1; then
        say "rust: updating the toolchain ($(rustc --version) is older than 1.85)"
        quiet rustup-update rustup update stable
    else
        echo "setup.sh: $(rustc --version) is older than 1.85; install Rust with rustup (https://rustup.rs)" >&2
        exit 1
    fi
fi
if command -v rustup >/dev/null 2>&1; then
    quiet rustup-components rustup component add rustfmt clippy
fi

say "python: virtualenv .venv with the lab's dependencies"
# As root pip warns on every call that it runs as root (the venv makes that safe) and about
# its own version: noise that hides what matters.
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
[ -x .venv/bin/python ] || quiet venv python3 -m venv .venv
# Debian 12's venv pip (23.0) is upgraded first, as the set-up always did before the lab is
# installed; each pip step is tried three times, since one failed fetch from the package index
# must not fail a whole set-up.
retry() {
    local i
    for i in 1 2 3; do
        "$@" && return 0
        echo "  (attempt $i failed; retrying in $((i * 5)) s)"
        sleep $((i * 5))
    done
    return 1
}
quiet pip-upgrade retry .venv/bin/pip install -q --upgrade pip
quiet pip retry .venv/bin/pip install -q -e . ruff
# Matplotlib builds its font cache on first import and says so; done here, quietly, so the
# demo's report prints nothing but itself.
quiet matplotlib .venv/bin/python -c "import matplotlib.pyplot"

# MULTIHOME_SETUP_BUILD=0 leaves the binaries to the caller: scripts/test.sh, whose test build
# makes them anyway (with its dev-dependencies' features, so this build would not be reused).
if [ "${MULTIHOME_SETUP_BUILD:-1}" = 0 ]; then
    say "cargo: not building the binaries (MULTIHOME_SETUP_BUILD=0)"
    built=""
else
    say "cargo: building the release binaries (a few minutes the first time)"
    quiet cargo cargo build --release -p multihome -p linkem
    built=" target/release/multihome,"
fi
rm -rf "$logs"
echo "setup done: $(rustc --version | cut -d' ' -f1-2),$built .venv/bin/python"
