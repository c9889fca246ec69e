#!/usr/bin/env bash
# Installs everything multihome needs on a fresh Debian 12 machine (run as root), then
# builds the release binaries. Idempotent: re-running only does what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\n==> %s\n' "$*"; }

if [ "$(id -u)" -ne 0 ]; then
    echo "setup.sh: run as root (it installs packages and the lab needs network namespaces)" >&2
    exit 1
fi

# iptables: `multihome race` queues SYNs with the xtables NFQUEUE target (nftables' own
# `queue` statement needs CONFIG_NFT_QUEUE, which kernels may lack).
# etcd-server: the shared record store of several servers (lab and tests start their own
# members); protobuf-compiler + libprotobuf-dev: the etcd client crate compiles etcd's
# .proto files at build time. chromium: the dashboard's end-to-end test opens it headless.
PKGS=(iproute2 nftables iptables iperf3 ethtool mptcpd iputils-ping procps python3 python3-venv
      python3-pip socat openvpn build-essential pkg-config etcd-server protobuf-compiler
      libprotobuf-dev chromium)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    say "apt: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
    for d in "$HOME/.cargo/bin" ~root/.cargo/bin; do
        [ -x "$d/cargo" ] && export PATH="$d:$PATH"
    done
fi
if ! command -v cargo >/dev/null 2>&1; then
    echo "setup.sh: no Rust toolchain found; install Rust >= 1.85 with rustup (https://rustup.rs)" >&2
    exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

say "python: virtualenv .venv with the lab's dependencies"
# As root pip warns on every call that it runs as root (the venv makes that safe) and about
# its own version: noise that hides what matters.
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip >/dev/null
.venv/bin/pip install -q -e . ruff >/dev/null

say "cargo: building release binaries"
cargo build --release -q -p multihome -p linkem 2>&1 | tail -20
echo "setup done: target/release/multihome, .venv/bin/python"
