#!/usr/bin/env bash
# Serving certificate for gpu-admission without cert-manager.
#
# 1. `gpu-admission certs` makes a CA and a serving certificate for
#    gpu-admission.<namespace>.svc under --out (default
#    ~/.config/gpu-admission/deploy-certs, outside the repository since it
#    holds the CA key). On later runs it reuses both while valid and issues
#    a new serving certificate from the same CA when the current one is
#    within 30 days of its end (CA: 10 years, serving certificate: 1 year):
#    run this script again to renew, e.g. monthly.
# 2. The Secret gpu-admission-tls (tls.crt, tls.key, ca.crt) is created or
#    updated in the namespace.
# 3. `kubectl apply -k deploy/` (skip with --no-apply, e.g. when a GitOps tool
#    applies the manifests): everything but the webhook configurations, a
#    wait for the Deployment to be ready, then the webhook configurations.
# 4. The CA goes into clientConfig.caBundle of every webhook in both webhook
#    configurations, by `kubectl patch`: a later `kubectl apply -k deploy/`
#    leaves that field alone, since the manifests do not set it.
#
# --rotate makes a new CA and certificate. The caBundle first trusts both the
# new and the previous CA, then the Secret changes, and the server picks up
# the new certificate from the mounted Secret: no request fails. The previous
# CA stays in the caBundle until the script runs again (without --rotate,
# once every replica serves the new certificate) or until the next rotation.
#
# --dry-run prints the kubectl commands that change the cluster instead of
# running them (the files under --out are still made or renewed).
#
# Usage: deploy/install-certs.sh [--out DIR] [--namespace NS] [--rotate] [--no-apply] [--dry-run]
# Environment: GPU_ADMISSION (the binary; default: gpu-admission on PATH, else
# target/release/gpu-admission), KUBECTL (default kubectl).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
out="${XDG_CONFIG_HOME:-$HOME/.config}/gpu-admission/deploy-certs"
namespace="gpu-admission"
service="gpu-admission"
secret="gpu-admission-tls"
config="gpu-admission"
rotate=false
apply=true
dry_run=false
kubectl="${KUBECTL:-kubectl}"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --namespace) namespace="$2"; shift 2 ;;
    --rotate) rotate=true; shift ;;
    --no-apply) apply=false; shift ;;
    --dry-run) dry_run=true; shift ;;
    -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install-certs: unknown argument: $1" >&2; exit 2 ;;
  esac
done

die() { echo "install-certs: $*" >&2; exit 1; }

if $rotate && $dry_run; then
  die "--rotate replaces the files under $out; it cannot be a dry run"
fi
if [[ "$namespace" != gpu-admission ]] && $apply; then
  die "deploy/ installs into the namespace gpu-admission; for --namespace $namespace apply your own overlay and pass --no-apply"
fi

# Runs a command, or shows it with --dry-run.
run() {
  if $dry_run; then
    printf '+'; printf ' %q' "$@"; printf '\n'
  else
    "$@"
  fi
}

find_binary() {
  if [[ -n "${GPU_ADMISSION:-}" ]]; then
    echo "$GPU_ADMISSION"
  elif command -v gpu-admission > /dev/null; then
    command -v gpu-admission
  elif [[ -x "$root/target/release/gpu-admission" ]]; then
    echo "$root/target/release/gpu-admission"
  else
    die "no gpu-admission binary: build it with 'cargo build --release --locked' or set GPU_ADMISSION"
  fi
}

generate() {
  local dir="$1" bin
  bin="$(find_binary)"
  mkdir -p "$dir"
  chmod 700 "$dir"
  "$bin" certs --out "$dir" \
    --dns "$service.$namespace.svc" \
    --dns "$service.$namespace.svc.cluster.local" > /dev/null \
    || die "'$bin certs --out $dir' failed"
  local f
  for f in ca.crt tls.crt tls.key; do
    [[ -s "$dir/$f" ]] || die "'$bin certs' did not write $dir/$f"
  done
  chmod 600 "$dir"/*.key 2> /dev/null || true
}

ca_bundle="$(mktemp)"
trap 'rm -f "$ca_bundle"' EXIT

if $rotate && [[ -s "$out/ca.crt" ]]; then
  previous="$out.previous"
  rm -rf "$previous"
  mv "$out" "$previous"
  generate "$out"
  cat "$out/ca.crt" "$previous/ca.crt" > "$ca_bundle"
  echo "install-certs: new CA and certificate in $out (previous in $previous)" >&2
else
  # Reuses the CA and the serving certificate while they are valid; a
  # serving certificate within 30 days of its end is issued anew by the same
  # CA, so the caBundle does not change.
  generate "$out"
  cat "$out/ca.crt" > "$ca_bundle"
fi
ca_b64="$(base64 < "$ca_bundle" | tr -d '\n')"

# Patches the caBundle of every webhook in a configuration that exists.
patch_ca_bundle() {
  local kind="$1" names name patch=""
  if $dry_run; then
    names="<each webhook>"
  elif ! names="$("$kubectl" get "$kind" "$config" -o jsonpath='{range .webhooks[*]}{.name}{"\n"}{end}' 2> /dev/null)"; then
    echo "install-certs: no $kind $config yet; run this script again after 'kubectl apply -k deploy/'" >&2
    return 0
  fi
  while IFS= read -r name; do
    [[ -n "$name" ]] || continue
    patch+="${patch:+,}{\"name\":\"$name\",\"clientConfig\":{\"caBundle\":\"$ca_b64\"}}"
  done <<< "$names"
  [[ -n "$patch" ]] || return 0
  run "$kubectl" patch "$kind" "$config" --type=strategic -p "{\"webhooks\":[$patch]}"
}

if $rotate; then
  # Trust both CAs before the new certificate is served.
  patch_ca_bundle mutatingwebhookconfiguration
  patch_ca_bundle validatingwebhookconfiguration
fi

if [[ "$namespace" == gpu-admission ]]; then
  run "$kubectl" apply -f "$here/base/namespace.yaml"
elif $dry_run; then
  echo "+ kubectl create namespace $namespace (if missing)"
else
  "$kubectl" create namespace "$namespace" --dry-run=client -o yaml | "$kubectl" apply -f -
fi
secret_yaml="$("$kubectl" create secret generic "$secret" --namespace "$namespace" \
  --type=kubernetes.io/tls \
  --from-file=tls.crt="$out/tls.crt" \
  --from-file=tls.key="$out/tls.key" \
  --from-file=ca.crt="$out/ca.crt" \
  --dry-run=client -o yaml)"
# Server-side apply: a client-side apply would also copy the private key into
# the last-applied-configuration annotation.
if $dry_run; then
  echo "+ kubectl apply --server-side -f - <<< (Secret $namespace/$secret)"
else
  "$kubectl" apply --server-side --force-conflicts --field-manager=gpu-admission-install-certs -f - <<< "$secret_yaml"
fi

if $apply; then
  # The webhook configurations go in last, once a replica is ready: before
  # that, every call from the API server would fail (failurePolicy Fail).
  run "$kubectl" apply -k "$root/deploy" -l 'app.kubernetes.io/component!=admission-webhooks'
  run "$kubectl" -n "$namespace" rollout status deployment/gpu-admission --timeout=300s
  run "$kubectl" apply -k "$root/deploy" -l 'app.kubernetes.io/component=admission-webhooks'
fi

patch_ca_bundle mutatingwebhookconfiguration
patch_ca_bundle validatingwebhookconfiguration

echo "install-certs: done; check with: kubectl -n $namespace rollout status deployment/gpu-admission" >&2
