#!/usr/bin/env bash
# The release's version is written in several places; they must agree:
#
#   Cargo.toml                         version (the source of truth)
#   gpu-admission --version            what the binary says ($GPU_ADMISSION, else
#                                      target/debug or target/release; `cargo test`
#                                      leaves one there)
#   charts/gpu-admission/Chart.yaml    appVersion (the image tag it installs) and
#                                      version (the chart's own, released together)
#   deploy/base/kustomization.yaml     the image's newTag
#   CHANGELOG.md                       its newest release heading (## X.Y.Z)
#   README.md, docs/, Dockerfile,      every image reference gpu-admission:X.Y.Z
#   deploy/                            (install commands, examples)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
failed=0
say() { printf '%-44s %s\n' "$1" "$2"; }
differs() { echo "FAIL $1: $2, Cargo.toml says $version" >&2; failed=1; }

version="$(sed -n '/^\[package\]/,/^\[/ s/^version = "\([^"]*\)"$/\1/p' Cargo.toml)"
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+([-+].*)?$ ]] || { echo "FAIL Cargo.toml: no package version" >&2; exit 1; }
say "Cargo.toml" "$version"

binary="${GPU_ADMISSION:-}"
if [[ -z "$binary" ]]; then
  for candidate in "${CARGO_TARGET_DIR:-$root/target}/debug/gpu-admission" "${CARGO_TARGET_DIR:-$root/target}/release/gpu-admission"; do
    if [[ -x "$candidate" ]]; then binary="$candidate"; break; fi
  done
fi
if [[ -z "$binary" ]]; then
  echo "FAIL no gpu-admission binary to ask (cargo build, or set GPU_ADMISSION)" >&2
  failed=1
else
  said="$("$binary" --version)"
  say "gpu-admission --version" "$said"
  [[ "$said" == "gpu-admission $version" ]] || differs "gpu-admission --version" "says '$said'"
fi

app="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' charts/gpu-admission/Chart.yaml)"
chart="$(sed -n 's/^version: *\(.*\)$/\1/p' charts/gpu-admission/Chart.yaml)"
say "charts/gpu-admission/Chart.yaml" "appVersion $app, version $chart"
[[ "$app" == "$version" ]] || differs "Chart.yaml appVersion" "$app"
[[ "$chart" == "$version" ]] || differs "Chart.yaml version" "$chart"

tag="$(sed -n '/- name: gpu-admission$/,/newTag/ s/^ *newTag: *\(.*\)$/\1/p' deploy/base/kustomization.yaml)"
say "deploy/base/kustomization.yaml" "newTag $tag"
[[ "$tag" == "$version" ]] || differs "deploy/base/kustomization.yaml newTag" "${tag:-none}"

newest="$( (sed -n 's/^## \([0-9][^ ]*\).*$/\1/p' CHANGELOG.md 2> /dev/null || true) | head -1)"
say "CHANGELOG.md" "newest release $newest"
[[ "$newest" == "$version" ]] || differs "CHANGELOG.md" "its newest release is '${newest:-none}'"

# Image references with a version in the docs and manifests.
refs="$(grep -rnoE 'gpu-admission:[0-9]+\.[0-9]+\.[0-9]+[^ `"]*' README.md docs Dockerfile deploy charts 2> /dev/null \
  | grep -v -- "gpu-admission:$version\(-ci\)\{0,1\}$" || true)"
count="$(grep -rnoE 'gpu-admission:[0-9]+\.[0-9]+\.[0-9]+' README.md docs Dockerfile deploy charts 2> /dev/null | wc -l)"
say "image references (README, docs, ...)" "$count with a version"
if [[ -n "$refs" ]]; then
  echo "$refs" | sed 's/^/FAIL another version: /' >&2
  failed=1
fi
grep -q "gpu-admission:$version" README.md || { echo "FAIL README.md names no gpu-admission:$version image" >&2; failed=1; }

if [[ $failed -ne 0 ]]; then
  echo "versions disagree: set each to the Cargo.toml version" >&2
  exit 1
fi
echo "versions agree: $version"
