#!/usr/bin/env bash
# The package's install test (CI stage "package"; run as root on Debian 12): builds the .deb
# with cargo-deb from the release binary the test run already built (--no-build), installs it
# with apt, checks that its files are in place, verifies every systemd unit with
# `systemd-analyze verify` (which needs no running systemd: it loads the units offline, and
# checks that ExecStart's binary and the Documentation= man pages exist), runs the installed
# binary's `check-config` on every installed example, then purges the package and checks
# that nothing of it is left. Refuses to run where multihome is installed already.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH" DEBIAN_FRONTEND=noninteractive

say() { printf '==> %s\n' "$*"; }
fail() { printf 'package test FAILED: %s\n' "$*" >&2; exit 1; }

if [ "$(id -u)" -ne 0 ]; then fail "run as root (it installs and purges a package)"; fi
if dpkg-query -W -f='${Status}' multihome 2>/dev/null | grep -q installed; then
    fail "multihome is installed on this machine; this test installs and purges it: remove it first"
fi
# What the package may create outside dpkg's file list: none of it may be here before
# (/run/multihome may: a daemon started by hand, e.g. by the lab tests, keeps its sockets
# there, and the package leaves that folder alone unless it is empty).
LEFTOVERS=(/etc/multihome /var/lib/multihome /usr/share/doc/multihome)
for p in "${LEFTOVERS[@]}"; do
    if [ -e "$p" ]; then fail "$p exists before the package is installed"; fi
done
[ -e /run/multihome ] || LEFTOVERS+=(/run/multihome)

target=${CARGO_TARGET_DIR:-target}
bin=$target/release/multihome
if [ ! -x "$bin" ]; then
    say "building the release binary (not built by an earlier stage)"
    cargo build --release -q -p multihome
fi
if ! command -v cargo-deb >/dev/null 2>&1; then
    say "installing cargo-deb (once; kept in ~/.cargo/bin)"
    cargo install cargo-deb --locked -q
fi

say "building the .deb: manual pages from the CLI, then cargo deb --no-build --strip"
rm -rf "$target/release/man" "$target/debian"
"$bin" man --out "$target/release/man"
gzip -9n "$target"/release/man/*.1
cargo deb -q -p multihome --no-build --strip -o "$target/debian/" >/dev/null
deb=$(realpath "$target"/debian/multihome_*.deb)
dpkg-deb --field "$deb" Package Version Architecture Depends Recommends Installed-Size
echo "file: $deb ($(du -h "$deb" | cut -f1))"

say "apt-get install ./$(basename "$deb")"
apt-get install -y -q "$deb" >/tmp/multihome-apt.log 2>&1 || { cat /tmp/multihome-apt.log; fail "apt-get install"; }
files=$(dpkg -L multihome)
for f in /usr/bin/multihome /usr/share/doc/multihome/INSTALL.md \
    /usr/share/doc/multihome/examples/client.toml \
    /usr/share/doc/multihome/examples/grafana-multihome.json /usr/share/man/man1/multihome.1.gz \
    /usr/share/man/man1/multihome-reload.1.gz /usr/share/man/man1/multihome-check-config.1.gz; do
    grep -qx "$f" <<<"$files" || fail "$f is not in the package"
    [ -e "$f" ] || fail "$f is not installed"
done
[ -d /etc/multihome ] && [ "$(stat -c %a /etc/multihome)" = 700 ] || fail "/etc/multihome (0700) missing"
units=$(grep -E '^/(usr/)?lib/systemd/system/multihome-.*\.service$' <<<"$files")
echo "installed: $(grep -c . <<<"$files") paths; $(wc -l <<<"$units") units; $(grep -c 'man1/' <<<"$files") man pages; $(grep -c 'examples/.*\.toml' <<<"$files") example configs"
/usr/bin/multihome --version

say "systemd-analyze verify (each template as an instance)"
for u in $units; do
    systemd-analyze verify "$u" || fail "systemd-analyze verify $u"
    echo "ok   $(basename "$u")"
done

say "installed binary: check-config on every installed example"
for f in /usr/share/doc/multihome/examples/*.toml; do
    /usr/bin/multihome check-config --offline "$f" || fail "check-config $f"
done
# The full check too (key file read, interfaces looked up), on a copy of the relay example
# with a key of its own; and a broken file must fail with its line.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp /usr/share/doc/multihome/examples/relay.toml "$tmp/"
/usr/bin/multihome keygen --private-key-file "$tmp/relay.key" >/dev/null
/usr/bin/multihome check-config "$tmp/relay.toml" || fail "check-config (full) relay.toml"
sed 's/^detect_ms = 1000/detect_ms = 5/' /usr/share/doc/multihome/examples/client.toml >"$tmp/bad.toml"
if /usr/bin/multihome check-config --offline "$tmp/bad.toml" 2>"$tmp/err"; then
    fail "check-config accepted detect_ms = 5"
fi
cat "$tmp/err"
grep -q "bad.toml:$(grep -n '^detect_ms' "$tmp/bad.toml" | cut -d: -f1): detect_ms = 5 is out of range" "$tmp/err" \
    || fail "check-config's error does not name the line"

say "apt-get purge multihome"
apt-get purge -y -q multihome >/tmp/multihome-apt.log 2>&1 || { cat /tmp/multihome-apt.log; fail "apt-get purge"; }
if dpkg-query -W -f='${Status}' multihome 2>/dev/null | grep -q .; then
    fail "dpkg still knows multihome: $(dpkg-query -W -f='${Status}' multihome)"
fi
left=()
while read -r f; do
    # Folders the package shares with others (/usr/bin, ...) stay; its own files must not.
    if [ -e "$f" ] && [ ! -d "$f" ]; then left+=("$f"); fi
done <<<"$files"
for p in "${LEFTOVERS[@]}"; do
    if [ -e "$p" ]; then left+=("$p"); fi
done
if [ ${#left[@]} -gt 0 ]; then fail "left behind after purge: ${left[*]}"; fi
echo "nothing left: none of the $(grep -c . <<<"$files") packaged paths, nor ${LEFTOVERS[*]}"
say "package test passed"
