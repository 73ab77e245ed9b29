#!/usr/bin/env bash
# vendor/cel must be the published cel 0.13.0 plus exactly the patch series
# in vendor/cel/patches (NN-topic.patch, applied in order; see
# vendor/cel/PATCHES.md).
#
#   ci/vendor-cel-diff.sh --check       fail unless every patch of the series
#                                       applies exactly, in order, to the
#                                       published crate and the result is
#                                       vendor/cel
#   ci/vendor-cel-diff.sh --add NN-topic
#                                       record what vendor/cel changes beyond
#                                       the series as a new last patch
#   ci/vendor-cel-diff.sh --refresh     rewrite the last patch so that the
#                                       series gives vendor/cel again
#
# The published source comes from crates.io through cargo itself (a
# throwaway project depending on cel = "=0.13.0", `cargo fetch`), and the
# .crate file is checked against the checksum cargo resolved. Needs the Rust
# toolchain, bash, GNU diff, git (to apply the patches, and to leave out
# files .gitignore ignores), tar, gzip, sed and sha256sum.
#
# Not compared:
# - in the published crate: Cargo.toml.orig and .cargo_vcs_info.json
#   (packaging metadata; cargo reads the normalized Cargo.toml, which is
#   compared) and Cargo.lock (vendor/cel/Cargo.lock is resolved locally and
#   not committed);
# - in vendor/cel: PATCHES.md and patches/ (the series' own records), and
#   anything git ignores.
set -euo pipefail
cd "$(dirname "$0")/.."

CRATE=cel
VERSION=0.13.0
VENDOR=vendor/cel
SERIES=$VENDOR/patches

usage() {
  echo "usage: $0 --check | --add NN-topic | --refresh" >&2
  exit 2
}
topic=
case "${1:-}" in
  --check | --refresh)
    [ $# -eq 1 ] || usage
    mode=$1
    ;;
  --add)
    [ $# -eq 2 ] || usage
    mode=$1
    topic=$2
    [[ "$topic" =~ ^[0-9][0-9]-[a-z0-9-]+$ ]] || {
      echo "vendor-cel-diff: a patch is named NN-topic (two digits, lower-case words)" >&2
      exit 2
    }
    ;;
  *) usage ;;
esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The published crate, through cargo's registry access.
mkdir -p "$work/probe/src"
: >"$work/probe/src/lib.rs"
cat >"$work/probe/Cargo.toml" <<EOF
[package]
name = "vendor-cel-upstream"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
$CRATE = { version = "=$VERSION", default-features = false }

[workspace]
EOF
cargo generate-lockfile --quiet --manifest-path "$work/probe/Cargo.toml"
cargo fetch --quiet --manifest-path "$work/probe/Cargo.toml"
checksum=$(sed -n "/^name = \"$CRATE\"\$/,/^\$/s/^checksum = \"\([0-9a-f]*\)\"\$/\1/p" \
  "$work/probe/Cargo.lock")
if [ -z "$checksum" ]; then
  echo "vendor-cel-diff: no checksum for $CRATE $VERSION in the resolved Cargo.lock" >&2
  exit 1
fi
crate_file=
for f in "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/"$CRATE-$VERSION.crate"; do
  [ -f "$f" ] || continue
  if [ "$(sha256sum "$f" | cut -d' ' -f1)" = "$checksum" ]; then
    crate_file=$f
    break
  fi
done
if [ -z "$crate_file" ]; then
  echo "vendor-cel-diff: $CRATE-$VERSION.crate with checksum $checksum not found in cargo's cache" >&2
  exit 1
fi

mkdir -p "$work/a" "$work/b"
tar -xzf "$crate_file" -C "$work/a"
mv "$work/a/$CRATE-$VERSION" "$work/a/$CRATE"
rm -f "$work/a/$CRATE/Cargo.toml.orig" "$work/a/$CRATE/.cargo_vcs_info.json" \
  "$work/a/$CRATE/Cargo.lock"

# vendor/cel as it is in the work tree, without what git ignores.
mkdir -p "$work/b/$CRATE"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z --cached --others --exclude-standard -- "$VENDOR" |
    while IFS= read -r -d '' f; do
      [ -e "$f" ] || continue # deleted but not yet staged
      mkdir -p "$work/b/$CRATE/$(dirname "${f#"$VENDOR"/}")"
      cp -p "$f" "$work/b/$CRATE/${f#"$VENDOR"/}"
    done
else
  cp -pR "$VENDOR/." "$work/b/$CRATE/"
  rm -f "$work/b/$CRATE/Cargo.lock"
fi
rm -rf "$work/b/$CRATE/PATCHES.md" "$work/b/$CRATE/patches"

# The series, in order: applies patches 1..n to a copy of the published
# crate in $work/s$n.
patches=()
while IFS= read -r -d '' f; do patches+=("$f"); done < <(
  find "$SERIES" -maxdepth 1 -name '[0-9][0-9]-*.patch' -print0 2>/dev/null | LC_ALL=C sort -z
)
apply_series() {
  local n=$1 dir="$work/s$1" i
  rm -rf "$dir"
  mkdir -p "$dir"
  cp -pR "$work/a/$CRATE" "$dir/$CRATE"
  for ((i = 0; i < n; i++)); do
    if ! (cd "$dir" && git apply -p1 --whitespace=nowarn "$OLDPWD/${patches[$i]}"); then
      echo "vendor-cel-diff: ${patches[$i]} does not apply to $CRATE $VERSION plus the patches before it" >&2
      exit 1
    fi
  done
}
# Deterministic: bytewise file order, relative a/ b/ paths, no timestamps.
diff_to_tree() {
  local from=$1
  rm -rf "$work/d"
  mkdir -p "$work/d/a" "$work/d/b"
  cp -pR "$from/$CRATE" "$work/d/a/$CRATE"
  cp -pR "$work/b/$CRATE" "$work/d/b/$CRATE"
  (
    cd "$work/d"
    LC_ALL=C TZ=UTC diff -ruN "a/$CRATE" "b/$CRATE" || [ $? -eq 1 ]
  ) | sed -E 's/^((---|\+\+\+) [^\t]*)\t.*$/\1/'
}

n=${#patches[@]}
case "$mode" in
  --check)
    apply_series "$n"
    diff_to_tree "$work/s$n" >"$work/rest.patch"
    if [ -s "$work/rest.patch" ]; then
      echo "vendor-cel-diff: $VENDOR differs from $CRATE $VERSION plus the $n patches of $SERIES." >&2
      echo "What vendor/cel has beyond the series:" >&2
      head -n 200 "$work/rest.patch" >&2
      echo "If the change is intended, describe it in $VENDOR/PATCHES.md and run" >&2
      echo "ci/vendor-cel-diff.sh --add NN-topic (a new topic) or --refresh (the last one)." >&2
      exit 1
    fi
    echo "vendor-cel-diff: $VENDOR is $CRATE $VERSION plus the $n patches of $SERIES"
    ;;
  --add)
    apply_series "$n"
    diff_to_tree "$work/s$n" >"$work/rest.patch"
    if [ ! -s "$work/rest.patch" ]; then
      echo "vendor-cel-diff: $VENDOR has nothing beyond the series; no patch written" >&2
      exit 1
    fi
    if compgen -G "$SERIES/${topic%%-*}-*.patch" >/dev/null; then
      echo "vendor-cel-diff: a patch numbered ${topic%%-*} exists already" >&2
      exit 1
    fi
    mkdir -p "$SERIES"
    cp "$work/rest.patch" "$SERIES/$topic.patch"
    echo "vendor-cel-diff: wrote $SERIES/$topic.patch ($(grep -c '^diff ' "$SERIES/$topic.patch") files)"
    ;;
  --refresh)
    [ "$n" -gt 0 ] || { echo "vendor-cel-diff: no patch to refresh" >&2; exit 1; }
    apply_series $((n - 1))
    diff_to_tree "$work/s$((n - 1))" >"$work/rest.patch"
    cp "$work/rest.patch" "${patches[$((n - 1))]}"
    echo "vendor-cel-diff: rewrote ${patches[$((n - 1))]} ($(grep -c '^diff ' "${patches[$((n - 1))]}") files)"
    ;;
esac
