#!/usr/bin/env bash
# vendor/cel must be the published cel 0.13.0 plus exactly the changes
# recorded in vendor/cel/vendor.patch (see vendor/cel/PATCHES.md).
#
#   ci/vendor-cel-diff.sh --check       fail if vendor/cel and the recorded
#                                       diff disagree
#   ci/vendor-cel-diff.sh --regenerate  rewrite vendor/cel/vendor.patch
#
# The published source comes from crates.io through cargo itself (a
# throwaway project depending on cel = "=0.13.0", `cargo fetch`), and the
# .crate file is checked against the checksum cargo resolved. Needs the Rust
# toolchain, bash, GNU diff, tar, gzip, sed and sha256sum; git is used, when
# present, to leave out files .gitignore ignores.
#
# Not compared:
# - in the published crate: Cargo.toml.orig and .cargo_vcs_info.json
#   (packaging metadata; cargo reads the normalized Cargo.toml, which is
#   compared) and Cargo.lock (vendor/cel/Cargo.lock is resolved locally and
#   not committed);
# - in vendor/cel: PATCHES.md and vendor.patch (this diff's own records),
#   and anything git ignores.
set -euo pipefail
cd "$(dirname "$0")/.."

CRATE=cel
VERSION=0.13.0
VENDOR=vendor/cel
RECORD=$VENDOR/vendor.patch

usage() {
  echo "usage: $0 --check | --regenerate" >&2
  exit 2
}
[ $# -eq 1 ] || usage
case "$1" in
  --check | --regenerate) mode=$1 ;;
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
rm -f "$work/b/$CRATE/PATCHES.md" "$work/b/$CRATE/vendor.patch"

# Deterministic: bytewise file order, relative a/ b/ paths, no timestamps.
(
  cd "$work"
  LC_ALL=C TZ=UTC diff -ruN "a/$CRATE" "b/$CRATE" || [ $? -eq 1 ]
) | sed -E 's/^((---|\+\+\+) [^\t]*)\t.*$/\1/' >"$work/current.patch"

case "$mode" in
  --regenerate)
    cp "$work/current.patch" "$RECORD"
    echo "vendor-cel-diff: wrote $RECORD ($(grep -c '^diff ' "$RECORD") files differ from $CRATE $VERSION)"
    ;;
  --check)
    if [ ! -f "$RECORD" ]; then
      echo "vendor-cel-diff: $RECORD is missing; run ci/vendor-cel-diff.sh --regenerate" >&2
      exit 1
    fi
    if ! diff -u --label "$RECORD (recorded)" --label "vendor/cel (actual)" \
      "$RECORD" "$work/current.patch" >"$work/drift"; then
      echo "vendor-cel-diff: $VENDOR differs from $CRATE $VERSION by more or less than $RECORD records." >&2
      echo "Where the recorded diff and the actual one disagree:" >&2
      head -n 200 "$work/drift" >&2
      echo "If the change to $VENDOR is intended, describe it in $VENDOR/PATCHES.md and run" >&2
      echo "ci/vendor-cel-diff.sh --regenerate." >&2
      exit 1
    fi
    echo "vendor-cel-diff: $VENDOR is $CRATE $VERSION plus $RECORD"
    ;;
esac
