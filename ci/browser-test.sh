#!/usr/bin/env bash
# The HTML audit report in a real browser: Debian's chromium, headless,
# driven by playwright-core (tests/browser/report.mjs). Builds the report
# from the fixture cluster dump with the example prices and a recorded
# utilization answer, checks the page against the JSON audit of the same
# dump (totals, GPUs per namespace, costs, GPU nodes and pools, top
# offenders, every chart's bars, policies, capacity objects, unhealthy GPU
# capacity, GPU efficiency first on the page and right-sizing), that it
# loads with no console error and no network request, and saves a
# screenshot as target/report-screenshot.png.
#
# Installs what is missing: chromium (apt-get, as root) and playwright-core
# (npm ci, from tests/browser/package-lock.json; it drives the system
# chromium and downloads no browser of its own).
#
# Usage: ci/browser-test.sh [--update-docs]
#   --update-docs  also writes the README's picture, docs/report.png
set -euo pipefail
cd "$(dirname "$0")/.."

docs=()
case "${1:-}" in
  "") ;;
  --update-docs) docs=(--docs docs/report.png) ;;
  *) echo "usage: ci/browser-test.sh [--update-docs]" >&2; exit 2 ;;
esac

chromium="${CHROMIUM:-/usr/bin/chromium}"
if [ ! -x "$chromium" ]; then
  echo "== installing chromium (and a font for the screenshot)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null
fi
command -v node >/dev/null || { echo "browser-test: node (20 or later) is needed" >&2; exit 1; }

if [ ! -d tests/browser/node_modules/playwright-core ]; then
  echo "== npm ci (playwright-core)"
  (cd tests/browser && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
fi

bin="${GPU_ADMISSION:-target/debug/gpu-admission}"
if [ -z "${GPU_ADMISSION:-}" ]; then
  cargo build --locked --quiet --bin gpu-admission
fi
out=target/report
mkdir -p "$out"
inputs=(--prices data/prices/azure-eastus-example.yaml --utilization tests/fixtures/report/utilization.json)
"$bin" audit -f tests/fixtures/report/cluster.json "${inputs[@]}" -o html >"$out/report.html"
"$bin" audit -f tests/fixtures/report/cluster.json "${inputs[@]}" -o json >"$out/report.json"

CHROMIUM="$chromium" node tests/browser/report.mjs \
  "$out/report.html" "$out/report.json" target/report-screenshot.png "${docs[@]}"
