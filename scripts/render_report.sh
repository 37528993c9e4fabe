#!/usr/bin/env bash
# Renders a sweep folder's HTML report in headless Chromium and screenshots its first screen,
# to check that the verdict grid is visible without scrolling.
#
#   scripts/render_report.sh DIR [OUT.png] [WIDTHxHEIGHT]
#
# DIR: a sweep folder (`seedsweep report DIR` is run when DIR/report.html is missing).
# OUT.png: default DIR/report-first-screen.png; size default 1400x900.
# Needs the release binary (target/release/seedsweep, or $SEEDSWEEP) and chromium
# (Debian/Ubuntu: apt-get install -y chromium).
set -euo pipefail
dir=${1:?usage: scripts/render_report.sh DIR [OUT.png] [WIDTHxHEIGHT]}
out=${2:-$dir/report-first-screen.png}
size=${3:-1400x900}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${SEEDSWEEP:-${CARGO_TARGET_DIR:-$root/target}/release/seedsweep}
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$browser" ] || { echo "render_report.sh: no chromium on PATH (apt-get install -y chromium)" >&2; exit 1; }
[ -f "$dir/report.html" ] || "$bin" report -q "$dir"
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
"$browser" --headless --no-sandbox --disable-gpu --disable-background-networking \
  --disable-component-update --disable-sync --no-first-run --user-data-dir="$profile" \
  --hide-scrollbars --screenshot="$out" --window-size="${size/x/,}" \
  "file://$(cd "$dir" && pwd)/report.html" 2>/dev/null
echo "wrote $out" >&2
