#!/usr/bin/env bash
# Builds the gpu-admission container image from a release binary, without
# pulling anything, runs it with podman the way the Deployment runs it, and
# checks it over TLS and through a SIGTERM drain.
#
# The image is the Dockerfile's runtime stage (everything after its last
# FROM, read from the Dockerfile itself) on a root filesystem assembled
# here instead of the distroless base: the binary, the libraries ldd names
# for it, the CA certificates, passwd and group entries for nonroot
# (65532), and empty mount points. No shell, no package manager. The
# Dockerfile's builder stage is the release build; this is its runtime half.
#
# Then, from the objects `kubectl kustomize deploy` renders (which the
# chart renders too, see ci/chart-checks.sh):
# 1. the container runs with the Deployment's args, user 65532, a read-only
#    root, all capabilities dropped, no new privileges, the policies
#    ConfigMap and a TLS Secret from `gpu-admission certs` mounted read-only
#    where the Deployment mounts them, the listeners on free loopback ports
#    (host network);
# 2. the image has no shell (running /bin/sh in it fails), and the server
#    is the container's PID 1;
# 3. the probes' paths answer 200; /mutate gives the GPU pod fixture
#    (tests/fixtures/reviews/pod-create-gpu.json) its JSON patch and
#    /validate allows it, over TLS for the Service's DNS name;
# 4. SIGTERM goes to PID 1 (podman kill) while clients keep sending
#    reviews on keep-alive connections and one review is half sent: every
#    review sent gets its answer (none lost), the half-sent one included;
#    the container exits 0 within the Deployment's grace period.
#
# Usage: ci/image.sh [--binary PATH] [--tag TAG] [--keep]
#   --binary  the release binary (default $GPU_ADMISSION, else
#             $CARGO_TARGET_DIR or target/, release/gpu-admission; build it with
#             cargo build --release --locked --bin gpu-admission)
#   --tag     the image name (default gpu-admission:<Cargo.toml version>-ci)
#   --keep    keep the image afterwards (it is removed by default)
# Needs root (podman with runc, as on Debian: ci/install-tools.sh podman
# installs both), python3; kustomize or kubectl (else the one fetched with helm).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
binary="${GPU_ADMISSION:-${CARGO_TARGET_DIR:-$root/target}/release/gpu-admission}"
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -1)"
tag="localhost/gpu-admission:$version-ci"
keep=false
while [[ $# -gt 0 ]]; do
  case "$1" in
    --binary) binary="$2"; shift 2 ;;
    --tag) tag="$2"; shift 2 ;;
    --keep) keep=true; shift ;;
    -h | --help) sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "image: unknown argument: $1" >&2; exit 2 ;;
  esac
done

step() { printf '\n== %s\n' "$*"; }

[[ -x "$binary" ]] || {
  echo "image: no release binary at $binary: cargo build --release --locked --bin gpu-admission" >&2
  exit 1
}
"$root/ci/install-tools.sh" podman
# PyYAML for ci/image-run.py: ci/validate-deploy.sh's venv, else python3's,
# else a venv of its own.
cache="${XDG_CACHE_HOME:-$HOME/.cache}/gpu-admission-ci"
py=""
for candidate in "$cache/venv/bin/python" "$cache/venv-image/bin/python" python3; do
  if command -v "$candidate" > /dev/null && "$candidate" -c 'import yaml' 2> /dev/null; then py="$candidate"; break; fi
done
if [[ -z "$py" ]]; then
  python3 -m venv "$cache/venv-image"
  timeout 300 "$cache/venv-image/bin/pip" install -q --disable-pip-version-check "PyYAML==6.0.2"
  py="$cache/venv-image/bin/python"
fi
# This sandbox (and others like it) refuses crun and the default ulimits.
podman=(podman --runtime runc --cgroup-manager cgroupfs)
run_limits=(--ulimit nofile=20000:20000 --ulimit nproc=4096:4096)

work="$(mktemp -d)"
container="gpu-admission-ci-$$"
cleanup() {
  "${podman[@]}" rm -f -t 0 "$container" > /dev/null 2>&1 || true
  if ! $keep; then "${podman[@]}" rmi -f "$tag" > /dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

step "root filesystem"
rootfs="$work/context/rootfs"
mkdir -p "$rootfs"/{usr/local/bin,etc/ssl/certs,tmp,home/nonroot,etc/gpu-admission/policies,etc/gpu-admission/tls}
install -m 0755 "$binary" "$rootfs/usr/local/bin/gpu-admission"
# The dynamic loader and every library the binary links, at the paths ldd
# resolves them to (symlinks followed), as the distroless cc base has them.
while read -r lib; do
  mkdir -p "$rootfs$(dirname "$lib")"
  cp -L "$lib" "$rootfs$lib"
done < <(ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
ca_bundle=/etc/ssl/certs/ca-certificates.crt
[[ -f "$ca_bundle" ]] || { echo "image: no CA bundle at $ca_bundle" >&2; exit 1; }
cp "$ca_bundle" "$rootfs/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$rootfs/etc/group"
chown 65532:65532 "$rootfs/home/nonroot"
chmod 1777 "$rootfs/tmp"
if find "$rootfs" -name sh -o -name bash -o -name busybox | grep -q .; then
  echo "image: a shell got into the root filesystem" >&2
  exit 1
fi
echo "$(find "$rootfs" -type f | wc -l) files, $(du -sh "$rootfs" | cut -f1): $(cd "$rootfs" && find . -type f | sort | tr '\n' ' ')"

step "image (the Dockerfile's runtime stage on that root filesystem)"
# Everything after the Dockerfile's last FROM, with the builder's binary
# replaced by the root filesystem above.
awk '/^FROM /{stage=""; next} {stage = stage $0 "\n"} END {printf "%s", stage}' "$root/Dockerfile" \
  | grep -v '^COPY --from=builder ' > "$work/runtime-stage"
grep -q '^USER 65532:65532$' "$work/runtime-stage" || { echo "image: the Dockerfile's runtime stage no longer runs as 65532" >&2; exit 1; }
grep -q '^ENTRYPOINT \["/usr/local/bin/gpu-admission"\]$' "$work/runtime-stage" \
  || { echo "image: the Dockerfile's ENTRYPOINT is no longer /usr/local/bin/gpu-admission" >&2; exit 1; }
{
  echo "FROM scratch"
  echo "COPY rootfs/ /"
  cat "$work/runtime-stage"
} > "$work/context/Containerfile"
"${podman[@]}" build --quiet --pull=never --network none -t "$tag" -f "$work/context/Containerfile" "$work/context" > /dev/null
"${podman[@]}" image inspect "$tag" --format '{{.Config.User}} {{json .Config.Entrypoint}} {{json .Config.Cmd}}' > "$work/config"
echo "$tag: user, entrypoint, cmd: $(cat "$work/config")"
[[ "$(cat "$work/config")" == '65532:65532 ["/usr/local/bin/gpu-admission"] ["serve"]' ]] \
  || { echo "image: unexpected image config" >&2; exit 1; }
"${podman[@]}" run --rm "${run_limits[@]}" --network none "$tag" --version

step "no shell in the image"
if "${podman[@]}" run --rm "${run_limits[@]}" --network none --entrypoint /bin/sh "$tag" -c true > "$work/sh.log" 2>&1; then
  echo "image: /bin/sh ran in the image" >&2
  exit 1
fi
echo "running /bin/sh fails: $(grep -o 'no such file or directory' "$work/sh.log" | head -1 || tail -1 "$work/sh.log")"

step "run it as the Deployment does"
if command -v kustomize > /dev/null; then
  kustomize build "$root/deploy"
elif command -v kubectl > /dev/null; then
  kubectl kustomize "$root/deploy"
else
  "$("$root/ci/install-tools.sh" helm)/kubectl" kustomize "$root/deploy" # fetched beside helm
fi > "$work/deploy.yaml"
"$binary" certs --out "$work/certs" --dns gpu-admission.gpu-admission.svc > "$work/certs.log" 2>&1 \
  || { cat "$work/certs.log"; exit 1; }
"$py" "$root/ci/image-run.py" prepare "$work/deploy.yaml" "$work/certs" "$work/run" > "$work/run-args"
# The kubelet mounts these group-readable for fsGroup 65532 (defaultMode 0440).
chown -R 65532:65532 "$work/run/volumes"
mapfile -t prepared < "$work/run-args"
# prepared: --security-opt/--cap-drop/--user/--read-only/-v/-e options, then "--", then the args.
split=0
for i in "${!prepared[@]}"; do [[ "${prepared[$i]}" == "--" ]] && split=$i; done
"${podman[@]}" run -d --name "$container" "${run_limits[@]}" --network host \
  "${prepared[@]:0:$split}" "$tag" "${prepared[@]:$((split + 1))}" > /dev/null
"$py" "$root/ci/image-run.py" check "$work/deploy.yaml" "$work/certs" "$work/run" \
  "$root/tests/fixtures/reviews/pod-create-gpu.json" "${podman[*]}" "$container"
