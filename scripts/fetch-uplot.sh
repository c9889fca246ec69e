#!/usr/bin/env bash
# Re-fetches the charting library the dashboard embeds (uPlot, MIT licence) from the npm
# registry into crates/runtime/assets/vendor/uplot/, checking the tarball against the
# integrity hash npm publishes for that version. The files are committed, so builds never
# need the network; run this only to move to another version (change VERSION and
# INTEGRITY together: `npm view uplot@X dist.integrity`).
set -euo pipefail
VERSION=1.6.32
INTEGRITY=sha512-KIMVnG68zvu5XXUbC4LQEPnhwOxBuLyW1AHtpm6IKTXImkbLgkMy+jabjLgSLMasNuGGzQm/ep3tOkyTxpiQIw==
cd "$(dirname "$0")/.."
dest=crates/runtime/assets/vendor/uplot
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "uplot@$VERSION" >/dev/null)
tgz="$tmp/uplot-$VERSION.tgz"
got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
if [ "$got" != "$INTEGRITY" ]; then
    echo "fetch-uplot: integrity mismatch for uplot@$VERSION: $got" >&2
    exit 1
fi
tar -xzf "$tgz" -C "$tmp"
mkdir -p "$dest"
cp "$tmp/package/dist/uPlot.iife.min.js" "$tmp/package/dist/uPlot.min.css" \
    "$tmp/package/LICENSE" "$dest/"
echo "$VERSION" > "$dest/VERSION"
echo "fetch-uplot: uplot $VERSION in $dest"
