#!/usr/bin/env bash
# Copies what the chart shares with deploy/ into charts/gpu-admission/files/:
#
#   files/policies/KEY             deploy/policies/ (itself synced from
#                                  policies/ by deploy/sync-policies.sh),
#                                  one file per ConfigMap key, as the
#                                  kustomization names them
#   files/namespace-exemption.yaml deploy/namespace-exemption/policy/
#   files/exception-guard.yaml     deploy/exceptions/policy/
#   crds/gpubudgets.yaml           deploy/budgets/crd.yaml
#   crds/gpupolicyexceptions.yaml  deploy/exceptions/crd.yaml (Helm
#                                  installs crds/ as they are)
#   files/prometheus-rules.yaml    deploy/observability/
#   files/grafana-dashboard.json   deploy/observability/
#
# Helm reads only files inside the chart, so these are copies; --check
# (run by ci/chart-checks.sh) fails when one differs from its source.
#
# Usage: charts/sync-files.sh [--check]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/charts/gpu-admission/files"
check=false
case "${1:-}" in
  --check) check=true ;;
  "") ;;
  -h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "sync-files: unknown argument: $1" >&2; exit 2 ;;
esac

generate() {
  local out="$1" entry key rel
  mkdir -p "$out/policies"
  # The keys and files of the configMapGenerator in deploy/policies.
  while IFS= read -r entry; do
    if [[ "$entry" == *=* ]]; then key="${entry%%=*}" rel="${entry#*=}"; else key="$entry" rel="$entry"; fi
    cp "$root/deploy/policies/$rel" "$out/policies/$key"
  done < <(sed -n 's/^      - \(.*\)$/\1/p' "$root/deploy/policies/kustomization.yaml" | grep -v '^app\.' | grep '\.\(yaml\|yml\|json\)$')
  cp "$root/deploy/namespace-exemption/policy/exempt-label-admins.yaml" "$out/namespace-exemption.yaml"
  cp "$root/deploy/exceptions/policy/exception-guard.yaml" "$out/exception-guard.yaml"
  cp "$root/deploy/observability/prometheus-rules.yaml" "$out/prometheus-rules.yaml"
  cp "$root/deploy/observability/grafana-dashboard.json" "$out/grafana-dashboard.json"
}

crds="$root/charts/gpu-admission/crds"
generate_crds() {
  mkdir -p "$1"
  cp "$root/deploy/exceptions/crd.yaml" "$1/gpupolicyexceptions.yaml"
  cp "$root/deploy/budgets/crd.yaml" "$1/gpubudgets.yaml"
}

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
generate "$tmp/files"
generate_crds "$tmp/crds"
if $check; then
  if ! diff -r "$tmp/files" "$dest" > "$tmp/diff" 2>&1 || ! diff -r "$tmp/crds" "$crds" >> "$tmp/diff" 2>&1; then
    cat "$tmp/diff" >&2
    echo "sync-files: charts/gpu-admission/files/ or crds/ is out of date with deploy/: run charts/sync-files.sh" >&2
    exit 1
  fi
  echo "charts/gpu-admission/files/ and crds/ are up to date with deploy/" >&2
else
  rm -rf "$dest" "$crds"
  mv "$tmp/files" "$dest"
  mv "$tmp/crds" "$crds"
  echo "charts/gpu-admission/files/: $(find "$dest" -type f | wc -l) files; crds/: $(find "$crds" -type f | wc -l)" >&2
fi
