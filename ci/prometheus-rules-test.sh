#!/usr/bin/env bash
# The alerts shipped in deploy/observability/prometheus-rules.yaml, tested
# with Prometheus' own tool: the PrometheusRule's spec.groups become a plain
# rules file, `promtool check rules` validates it and `promtool test rules`
# runs deploy/observability/tests/*.test.yaml on it (each alert fires on a
# synthetic series of its failure and stays quiet on a healthy one).
#
# Installs what is missing (as root, with apt-get): Debian's prometheus
# package, which ships promtool, and python3-yaml. Takes a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v promtool >/dev/null || missing+=(prometheus)
python3 -c 'import yaml' 2>/dev/null || missing+=(python3-yaml)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "== installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - deploy/observability/prometheus-rules.yaml "$work/rules.yaml" <<'PY'
import sys, yaml
with open(sys.argv[1]) as f:
    rule = yaml.safe_load(f)
if rule.get("kind") != "PrometheusRule":
    sys.exit(f"{sys.argv[1]}: not a PrometheusRule")
with open(sys.argv[2], "w") as f:
    yaml.safe_dump({"groups": rule["spec"]["groups"]}, f, sort_keys=False)
PY
cp deploy/observability/tests/*.test.yaml "$work/"

promtool check rules "$work/rules.yaml"
# Every alert has a test.
for alert in $(python3 -c 'import sys, yaml; print("\n".join(r["alert"] for g in yaml.safe_load(open(sys.argv[1]))["groups"] for r in g["rules"] if "alert" in r))' "$work/rules.yaml"); do
  grep -q "alertname: $alert\$" "$work"/*.test.yaml || { echo "no promtool test for $alert" >&2; exit 1; }
done
(cd "$work" && promtool test rules ./*.test.yaml)
