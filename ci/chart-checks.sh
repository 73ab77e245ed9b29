#!/usr/bin/env bash
# Offline checks of the Helm chart charts/gpu-admission, for CI and for
# anyone editing it.
#
# 1. charts/gpu-admission/files/ is in step with deploy/ (the policies, the
#    namespace-exemption policy, the alerts, the dashboard):
#    charts/sync-files.sh --check.
# 2. helm lint --strict, with the default values and each values file in
#    charts/gpu-admission/ci/, with helm 4 and helm 3; both render the
#    same objects for each of them.
# 3. The chart renders what deploy/ renders (with its crds/, as
#    `helm template --include-crds`). After normalising labels (the
#    ones Helm adds, and app.kubernetes.io/part-of, which the chart sets on
#    every object and kustomize only on deploy/base): the default values
#    give `kubectl kustomize deploy` less its Namespace (Helm's release
#    namespace; namespace.create=true gives it too), cert-manager mode
#    deploy/overlays/cert-manager, report.enabled deploy/overlays/report
#    (and with report.reports=openreports deploy/overlays/openreports), and
#    the observability switches deploy/observability/ (the dashboard's JSON
#    as parsed). Every object the chart renders carries Helm's labels (but
#    the CRD of crds/, which Helm installs untemplated). Custom
#    tiers land in the allow-list ConfigMap, an extra policy beside the
#    shipped ones, budgets.narrowing in the server's --budget-narrowing;
#    policies.existingConfigMap is projected into the folder.
# 4. values.schema.json refuses values of the wrong type or out of range,
#    and the templates refuse what the schema cannot express.
# 5. Every object rendered for the value sets (defaults, cert-manager,
#    report, self-managed certificates, custom tiers and policies) is
#    checked by ci/validate-deploy.sh --rendered: strict schemas of
#    Kubernetes 1.30 and 1.37, references between the objects, the
#    NetworkPolicy, shutdown timing, and the server run as the Deployment
#    runs it (the custom tiers and policy loaded from the rendered ConfigMap).
#
# Needs helm (ci/install-tools.sh fetches it when missing) and kustomize or
# kubectl (the one beside the fetched helm will do).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
chart="$root/charts/gpu-admission"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/gpu-admission-ci"
ns="gpu-admission"

step() { printf '\n== %s\n' "$*"; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

step "tools"
helm_bin="$("$root/ci/install-tools.sh" helm)/helm"
helm() { "$helm_bin" "$@"; }
echo "helm: $(helm version --short) ($helm_bin)"
helm3="$("$root/ci/install-tools.sh" helm3)/helm"
echo "helm 3: $("$helm3" version --short) ($helm3)"
if command -v kustomize > /dev/null; then
  kustomize=(kustomize build)
elif command -v kubectl > /dev/null; then
  kustomize=(kubectl kustomize)
else
  kustomize=("$(dirname "$helm_bin")/kubectl" kustomize) # fetched beside helm
fi
echo "kustomize: ${kustomize[*]}"
# The Python of ci/validate-deploy.sh (PyYAML); it is made on its first run.
if [[ ! -x "$cache/venv/bin/python" ]] || ! "$cache/venv/bin/python" -c 'import yaml' 2> /dev/null; then
  "$root/ci/validate-deploy.sh" > "$work/first-run.log" 2>&1 || { cat "$work/first-run.log"; exit 1; }
fi
py="$cache/venv/bin/python"

step "charts/gpu-admission/files/ is in step with deploy/"
"$root/charts/sync-files.sh" --check

values_sets=(defaults)
for f in "$chart"/ci/*-values.yaml; do
  values_sets+=("$(basename "$f" -values.yaml)")
done
values_args() {
  if [[ "$1" != defaults ]]; then echo "-f $chart/ci/$1-values.yaml"; fi
}

step "helm lint --strict (helm 4 and helm 3), the same objects from both"
for set in "${values_sets[@]}"; do
  for h in "$helm_bin" "$helm3"; do
    # shellcheck disable=SC2046
    "$h" lint --strict --quiet "$chart" --namespace "$ns" $(values_args "$set") > "$work/lint" 2>&1 \
      || { cat "$work/lint"; echo "$h lint --strict failed with values: $set" >&2; exit 1; }
  done
  # shellcheck disable=SC2046
  helm template gpu-admission "$chart" --namespace "$ns" $(values_args "$set") > "$work/h4-$set.yaml"
  # shellcheck disable=SC2046
  "$helm3" template gpu-admission "$chart" --namespace "$ns" $(values_args "$set") > "$work/h3-$set.yaml"
  # (The order of the objects differs between the two.)
  "$py" -c 'import json, sys, yaml; a, b = (sorted(json.dumps(d, sort_keys=True) for d in yaml.safe_load_all(open(f)) if d) for f in sys.argv[1:]); sys.exit(0 if a == b else 1)' \
    "$work/h4-$set.yaml" "$work/h3-$set.yaml" \
    || { echo "helm 3 and helm 4 render $set differently: diff $work/h4-$set.yaml $work/h3-$set.yaml" >&2; exit 1; }
  echo "$set: clean, $(grep -c '^kind:' "$work/h4-$set.yaml") objects, the same from helm 3 and 4"
done

# --include-crds: the CRD of crds/ (which Helm installs as it is, before
# the templates) is compared and validated with the rest.
render() { # render OUT [helm template args...]
  local out="$1"
  shift
  helm template gpu-admission "$chart" --namespace "$ns" --include-crds "$@" > "$out"
}

step "helm template renders what kubectl kustomize renders"
"${kustomize[@]}" "$root/deploy" > "$work/k-base.yaml"
"${kustomize[@]}" "$root/deploy/overlays/cert-manager" > "$work/k-cert-manager.yaml"
"${kustomize[@]}" "$root/deploy/overlays/report" > "$work/k-report.yaml"
"${kustomize[@]}" "$root/deploy/overlays/openreports" > "$work/k-openreports.yaml"
render "$work/h-defaults.yaml"
render "$work/h-base.yaml" --set namespace.create=true
render "$work/h-cert-manager.yaml" -f "$chart/ci/cert-manager-values.yaml"
render "$work/h-report.yaml" -f "$chart/ci/report-values.yaml"
render "$work/h-openreports.yaml" -f "$chart/ci/report-values.yaml" --set report.reports=openreports
render "$work/h-observability.yaml" -f "$chart/ci/observability-values.yaml"
render "$work/h-custom.yaml" -f "$chart/ci/custom-values.yaml"
render "$work/h-existing.yaml" --set policies.existingConfigMap=team-policies
helm template other "$chart" --namespace elsewhere --set fullnameOverride=gpa \
  --set report.enabled=true --set certificates.mode=self \
  --set serviceMonitor.enabled=true > "$work/h-renamed.yaml"
render "$work/h-existing-only.yaml" --set policies.existingConfigMap=team-policies --set policies.shipped=false

cat > "$work/compare.py" <<'EOF'
import json, os, sys
import kubernetes_validate
import yaml

work, root, chart = sys.argv[1], sys.argv[2], sys.argv[3]
HELM_LABELS = {"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}
NORMALISED = HELM_LABELS | {"app.kubernetes.io/part-of"}
errors = []


def load(path):
    return [d for d in yaml.safe_load_all(open(path)) if d]


def ident(o):
    m = o["metadata"]
    return f'{o["kind"]} {m.get("namespace", "") + "/" if m.get("namespace") else ""}{m["name"]}'


def normalise(objs, helm):
    out = {}
    for o in objs:
        labels = o["metadata"].get("labels", {})
        # Helm installs crds/ as they are, without its labels.
        if helm and o["kind"] != "CustomResourceDefinition":
            missing = sorted(HELM_LABELS - set(labels))
            if missing or labels.get("app.kubernetes.io/part-of") != "gpu-admission":
                errors.append(f"chart: {ident(o)} lacks the labels {missing or ['app.kubernetes.io/part-of']}")
        for k in NORMALISED:
            labels.pop(k, None)
        if "labels" in o["metadata"] and not labels:
            del o["metadata"]["labels"]
        out[ident(o)] = o
    return out


def same(label, kustomize, helm, only_kustomize=()):
    k, h = normalise(kustomize, False), normalise(helm, True)
    expected_missing = set(only_kustomize)
    for name in sorted(set(k) - set(h) - expected_missing):
        errors.append(f"{label}: {name} is rendered by kustomize, not by the chart")
    for name in sorted(expected_missing - set(k)):
        errors.append(f"{label}: {name} was expected from kustomize only, kustomize does not render it")
    for name in sorted(set(h) - set(k)):
        errors.append(f"{label}: {name} is rendered by the chart, not by kustomize")
    for name in sorted(set(k) & set(h)):
        if k[name] != h[name]:
            a = yaml.safe_dump(k[name], sort_keys=True).splitlines()
            b = yaml.safe_dump(h[name], sort_keys=True).splitlines()
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            errors.append(f"{label}: {name} differs; kustomize: {a[first] if first < len(a) else '(end)'!r}, "
                          f"chart: {b[first] if first < len(b) else '(end)'!r}")
    print(f"{label}: {len(set(k) & set(h))} objects the same"
          + (f", {len(expected_missing)} left to Helm ({', '.join(sorted(expected_missing))})" if expected_missing else ""))


def p(name):
    return os.path.join(work, name)


same("defaults vs deploy/", load(p("k-base.yaml")), load(p("h-defaults.yaml")), [f"Namespace gpu-admission"])
same("namespace.create vs deploy/", load(p("k-base.yaml")), load(p("h-base.yaml")))
same("cert-manager mode vs deploy/overlays/cert-manager", load(p("k-cert-manager.yaml")), load(p("h-cert-manager.yaml")))
same("report.enabled vs deploy/overlays/report", load(p("k-report.yaml")), load(p("h-report.yaml")))
same("report.reports=openreports vs deploy/overlays/openreports", load(p("k-openreports.yaml")),
     load(p("h-openreports.yaml")))

# Observability: the objects of deploy/observability/, and the dashboard.
obs = {ident(o): o for o in load(p("h-observability.yaml"))}
base = {ident(o) for o in load(p("h-defaults.yaml"))}
added = [obs[n] for n in obs if n not in base]
deploy_obs = [o for f in ("servicemonitor.yaml", "prometheus-rules.yaml")
              for o in load(os.path.join(root, "deploy/observability", f))]
dashboards = [o for o in added if o["kind"] == "ConfigMap"]
same("observability vs deploy/observability", deploy_obs, [o for o in added if o["kind"] != "ConfigMap"])
want = json.load(open(os.path.join(root, "deploy/observability/grafana-dashboard.json")))
if len(dashboards) != 1 or [json.loads(v) for v in dashboards[0].get("data", {}).values()] != [want]:
    errors.append("observability: the dashboard ConfigMap does not hold deploy/observability/grafana-dashboard.json")
else:
    print(f"observability: the dashboard ConfigMap holds grafana-dashboard.json ({len(want.get('panels', []))} panels)")
    for v in ("1.30.0", "1.37.0"):  # ServiceMonitor and PrometheusRule have no schema offline
        try:
            kubernetes_validate.validate(dashboards[0], v, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"observability: dashboard ConfigMap, Kubernetes {v}: {e.message}")

# Custom values: the tiers replace the allow-list ConfigMap's data, and the
# extra policy joins the shipped ones.
values = yaml.safe_load(open(os.path.join(chart, "ci/custom-values.yaml")))
custom = load(p("h-custom.yaml"))
policies = next(o for o in custom if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "gpu-admission-policies")
allowlist = [d for d in yaml.safe_load_all(policies["data"]["gpu-sku-allowlist.yaml"])
             if d and d.get("kind") == "ConfigMap" and d["metadata"]["name"] == "gpu-sku-allowlist"]
if [d.get("data") for d in allowlist] != [values["tiers"]]:
    errors.append(f"custom values: gpu-sku-allowlist holds {[d.get('data') for d in allowlist]}, not the tiers {values['tiers']}")
shipped = sorted(os.listdir(os.path.join(chart, "files/policies")))
if sorted(policies["data"]) != sorted(shipped + list(values["policies"]["extra"])):
    errors.append(f"custom values: the policies ConfigMap holds {sorted(policies['data'])}")
exemptions = [d for d in yaml.safe_load_all(policies["data"]["gpu-exemptions.yaml"])
              if d and d.get("kind") == "ConfigMap"]
want_groups = ", ".join(values["namespaceExemptionPolicy"]["adminGroups"])
if [d["data"].get("adminGroups") for d in exemptions] != [want_groups]:
    errors.append(f"custom values: gpu-exemptions' adminGroups is {[d['data'].get('adminGroups') for d in exemptions]}, "
                  f"not namespaceExemptionPolicy.adminGroups {want_groups!r}")
def server_args(objs):
    return next(c["args"] for o in objs if o["kind"] == "Deployment"
                for c in o["spec"]["template"]["spec"]["containers"] if c["name"] == "gpu-admission")
if ("--budget-narrowing" in server_args(custom)) != values["budgets"]["narrowing"] \
        or "--budget-narrowing" in server_args(load(p("h-defaults.yaml"))):
    errors.append("budgets.narrowing: the server's --budget-narrowing is not rendered exactly when it is true")
print(f"custom values: tiers {sorted(values['tiers'])} in gpu-sku-allowlist, "
      f"{len(policies['data'])} policy files ({len(values['policies']['extra'])} extra)")

# policies.existingConfigMap: one folder from both ConfigMaps (a projected
# volume), or from that one alone; the Deployment still validates strictly.
for name, want in (("h-existing.yaml", ["gpu-admission-policies", "team-policies"]),
                   ("h-existing-only.yaml", ["team-policies"])):
    objs = load(p(name))
    dep = next(o for o in objs if o["kind"] == "Deployment")
    vol = next(v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "policies")
    got = [src["configMap"]["name"] for src in vol.get("projected", {}).get("sources", [])]
    generated = [o["metadata"]["name"] for o in objs if o["kind"] == "ConfigMap"]
    if got != want or generated != want[:-1]:
        errors.append(f"{name}: the policies volume mounts {got} and the chart renders ConfigMaps {generated}, "
                      f"expected {want} and {want[:-1]}")
    for v in ("1.30.0", "1.37.0"):
        try:
            kubernetes_validate.validate(dep, v, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{name}: Deployment, Kubernetes {v}: {e.message}")
    print(f"policies.existingConfigMap: the policies volume projects {', '.join(got)}")

# Another name and namespace (fullnameOverride=gpa, namespace elsewhere):
# every reference between the objects follows.
objs = load(p("h-renamed.yaml"))
by = {}
for o in objs:
    by.setdefault(o["kind"], {})[o["metadata"]["name"]] = o
dep = by["Deployment"]["gpa"]
pod = dep["spec"]["template"]["spec"]
args = pod["containers"][0]["args"]
refs = {
    "ServiceAccount": [pod["serviceAccountName"]],
    "ConfigMap": [v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v],
    "Service": [w["clientConfig"]["service"]["name"] for k in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
                for w in by[k]["gpa"]["webhooks"]],
    "ClusterRole": [b["roleRef"]["name"] for b in by["ClusterRoleBinding"].values()],
    "Role": [b["roleRef"]["name"] for b in by["RoleBinding"].values()],
}
for kind, names in refs.items():
    for n in names:
        if n not in by.get(kind, {}):
            errors.append(f"renamed: a reference to {kind} {n}, which is not rendered")
for o in objs:
    ns_ = o["metadata"].get("namespace")
    if ns_ not in (None, "elsewhere"):
        errors.append(f"renamed: {o['kind']} {o['metadata']['name']} in namespace {ns_}")
    if not o["metadata"]["name"].startswith("gpa"):
        errors.append(f"renamed: {o['kind']} {o['metadata']['name']} does not follow fullnameOverride")
# The scrape's job label stays gpu-admission, which the dashboard and the
# alerts select: Prometheus Operator takes it from the Service's label
# jobLabel names (else from the Service's name, gpa here).
monitor = by["ServiceMonitor"]["gpa"]
job = by["Service"]["gpa"]["metadata"].get("labels", {}).get(monitor["spec"].get("jobLabel", ""))
if job != "gpu-admission":
    errors.append(f"renamed: the ServiceMonitor's job label would be {job or 'gpa'!r}, not gpu-admission")
granted = {n for r in by["Role"].values() for rule in r["rules"] for n in rule.get("resourceNames", [])}
def flag(name, default=None):
    return next((a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")), default)
# certificates.mode=self: the server keeps the Secret itself, elected by its
# own Lease, and names both (and the webhook configurations) by flag.
secret = flag("cert-secret") or next(v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v)
lease = flag("report-lease", "gpu-admission-report")
used = [secret, lease] + ([flag("cert-lease")] if "--manage-certs" in args else [])
for hook in ("mutating-webhook-configuration", "validating-webhook-configuration", "cert-service"):
    if "--manage-certs" in args and flag(hook) != "gpa":
        errors.append(f"renamed: --{hook} is {flag(hook)!r}, not gpa")
for name in used:
    if name not in granted:
        errors.append(f"renamed: the server uses {name}, its Roles grant {sorted(granted)}")
webhooks = {n for r in by["ClusterRole"].values() for rule in r["rules"]
            if "mutatingwebhookconfigurations" in rule.get("resources", []) for n in rule.get("resourceNames", [])}
if webhooks != {"gpa"}:
    errors.append(f"renamed: the certificate manager may update webhook configurations {sorted(webhooks)}, not gpa")
# The exceptions policy keeps the release's own guards out of exceptions.
reserved = [v["expression"] for v in by["ValidatingAdmissionPolicy"].get("gpa-exceptions", {}).get("spec", {}).get("variables", [])
            if v["name"] == "reserved"]
if reserved != ["['gpa-exempt-label', 'gpa-exceptions']"] or "gpa-exempt-label" not in by["ValidatingAdmissionPolicy"]:
    errors.append(f"renamed: the exceptions policy reserves {reserved}, not the release's gpa-exempt-label and gpa-exceptions")
print(f"renamed (gpa in elsewhere): {len(objs)} objects, every reference follows; Secret {secret}, Lease {lease}")

for e in errors:
    print(f"FAIL {e}")
sys.exit(1 if errors else 0)
EOF
"$py" "$work/compare.py" "$work" "$root" "$chart"

step "values.schema.json and the templates refuse bad values"
refused=0
refuse() { # refuse MESSAGE-PART helm-args...
  local want="$1"
  shift
  if helm template gpu-admission "$chart" --namespace "$ns" "$@" > /dev/null 2> "$work/err"; then
    echo "FAIL helm template accepted: $*" >&2
    exit 1
  fi
  if ! grep -qF -- "$want" "$work/err"; then
    echo "FAIL helm template refused $* without saying '$want':" >&2
    cat "$work/err" >&2
    exit 1
  fi
  refused=$((refused + 1))
}
refuse "/replicaCount" --set replicaCount=two
refuse "/replicaCount" --set replicaCount=0
refuse "/image/repository" --set image.repository=
refuse "/image/digest" --set image.digest=latest
refuse "/webhooks/failurePolicy" --set webhooks.failurePolicy=Maybe
refuse "/webhooks/mutate/timeoutSeconds" --set webhooks.mutate.timeoutSeconds=60
refuse "/webhooks/validate/timeoutSeconds" --set-string webhooks.validate.timeoutSeconds=5
refuse "/webhooks/exemptNamespaces" --set 'webhooks.exemptNamespaces[0]=Not_A_Namespace'
refuse "/report/enabled" --set-string report.enabled=yes
refuse "/report/interval" --set report.interval=10minutes
refuse "/report/reports" --set report.reports=clusterpolicyreport
refuse "/certificates/mode" --set certificates.mode=vault
refuse "/certificates/caBundle" --set 'certificates.caBundle=-----BEGIN CERTIFICATE-----'
refuse "/resources/limits/memory" --set resources.limits.memory=lots
refuse "/tiers/research" --set tiers.default=x --set-json 'tiers.research=3'
refuse "'no-extension' does not match pattern" --set 'policies.extra.no-extension=x'
refuse "/namespaceExemptionPolicy/adminGroups" --set-json 'namespaceExemptionPolicy.adminGroups=[]'
refuse "/networkPolicy/enabled" --set-string networkPolicy.enabled=false
refuse "/budgets/narrowing" --set-string budgets.narrowing=yes
refuse "additional properties 'replicas' not allowed" --set replicas=3
refuse 'tiers: a "default" key is required' --set 'tiers.research=*'
refuse "policies: with shipped false" --set policies.shipped=false
echo "$refused bad value sets refused, each with its message"

step "rendered objects validate (ci/validate-deploy.sh --rendered)"
for set in defaults custom; do
  dir="$work/rendered-$set"
  mkdir -p "$dir"
  args=(--set namespace.create=true)
  [[ "$set" == defaults ]] || args+=(-f "$chart/ci/$set-values.yaml")
  render "$dir/base.yaml" "${args[@]}"
  render "$dir/cert-manager.yaml" "${args[@]}" -f "$chart/ci/cert-manager-values.yaml"
  render "$dir/report.yaml" "${args[@]}" -f "$chart/ci/report-values.yaml"
  render "$dir/openreports.yaml" "${args[@]}" -f "$chart/ci/report-values.yaml" --set report.reports=openreports
  render "$dir/self.yaml" "${args[@]}" -f "$chart/ci/self-values.yaml"
  "$root/ci/validate-deploy.sh" --rendered "$dir" --label "chart ($set values)"
done
