#!/usr/bin/env bash
# Regenerates src/policy/schemas.json, the built-in kinds' field tree that
# policy expressions are type checked against, from the OpenAPI schemas of
# the k8s-openapi version Cargo.lock names (its sources as cargo unpacks
# them). `cargo test --test suite schemas::` checks the committed file is the same.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo fetch --locked
UPDATE_SCHEMAS=1 cargo test --locked --test suite schemas::
git status --short src/policy/schemas.json
