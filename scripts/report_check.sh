#!/usr/bin/env bash
# `make report-check`: the bundled example watched headless with the default detectors, its
# session log rendered as the HTML report, and the page screenshotted by a real headless
# Chromium (issue 46: the report must render, chart and cards included, in a browser).
# Writes report.html and report.png to $REPORT_DIR (default: a new temporary folder).
set -euo pipefail
VENV=${VENV:-.venv}
EXAMPLE=${EXAMPLE:-examples/gaslighting.txt}
OUT=${REPORT_DIR:-$(mktemp -d)}
BROWSER=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$BROWSER" ]; then
  echo "report-check: no headless Chromium found (Debian: apt-get install chromium)" >&2
  exit 2
fi
mkdir -p "$OUT"
"$VENV/bin/guardian" watch --headless --instant --log "$OUT/session.jsonl" "$EXAMPLE" > /dev/null
"$VENV/bin/guardian" report "$OUT/session.jsonl" -f html -o "$OUT/report.html" --force
"$BROWSER" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1100,2400 \
  --screenshot="$OUT/report.png" "file://$(realpath "$OUT/report.html")" 2> "$OUT/chromium.log"
test -s "$OUT/report.png"
echo "report-check: $OUT/report.html rendered to $OUT/report.png"
