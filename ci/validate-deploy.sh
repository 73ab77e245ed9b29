#!/usr/bin/env bash
# Offline checks of the deployment manifests, for CI and for anyone editing deploy/.
#
# 1. deploy/policies/ is in step with policies/ (deploy/sync-policies.sh --check).
# 2. deploy/, deploy/overlays/cert-manager, deploy/overlays/report,
#    deploy/overlays/openreports and deploy/overlays/self-managed-certs
#    build with kustomize. The report overlay adds the flag, the pod name,
#    list and watch on every audited kind and the Lease (get/update by
#    name, create, in the webhook's namespace only), and PolicyReports
#    (list/create, and get/update/delete of the name gpu-admission only);
#    the openreports overlay the same on openreports.io Reports with
#    --reports=openreports, and nothing on PolicyReports; the base keeps
#    its namespaces-only RBAC. The
#    self-managed-certs overlay swaps the TLS flags and mount for
#    --manage-certs and grants its one Secret and Lease (by name, plus
#    create) and get/patch of the two webhook configurations by name,
#    nothing more.
# 3. Every rendered object validates strictly (unknown fields are errors)
#    against the Kubernetes OpenAPI schemas of the oldest supported version
#    (1.30: webhook matchConditions are GA there) and the newest one, with
#    kubernetes-validate, which ships the schemas: no cluster, no network
#    beyond the package install. cert-manager kinds have no schema there:
#    they get structural checks instead (fields, references between them).
# 4. The objects agree with each other: webhook -> Service -> container
#    ports, volumes -> ConfigMap/Secret, selectors -> pod labels, the
#    webhook's own namespace excluded, the server's flags. The NetworkPolicy
#    selects the server's pods and opens exactly their ports (8443 to all,
#    9090 to labelled monitoring namespaces, 8081 to no pod: the kubelet's
#    probes come from the node); the grace period outlasts the
#    preStop pause, the drain window and the drain timeout; the memory
#    request equals the limit; the priority class has its ResourceQuota.
#    The GpuPolicyException CRD has the model's names, accepts the model's
#    example and refuses broken ones (jsonschema and its CEL rules with
#    cel-python); both webhook configurations send it to the server; one
#    policy guards it, with the exempt-label policy's admin groups, and the
#    namespace label gpu-admission.io/exceptions is kept to admins. The
#    GpuBudget CRD, likewise, has its names, accepts the model's example
#    and refuses broken ones; the server only reads pods and GpuBudgets.
# 5. The webhooks' matchConditions are evaluated (CEL, cel-python) on the
#    cases in deploy/tests/match-conditions.yaml: GPU pods are sent, CPU
#    pods are not.
# 6. When a gpu-admission binary is at hand ($GPU_ADMISSION, else
#    target/debug or target/release, as `cargo test` leaves it), it is run
#    the way the Deployment runs it: the rendered args, the policies
#    ConfigMap and a TLS Secret from `gpu-admission certs` laid out as the
#    kubelet mounts them (..data symlinks), on loopback ports. The probes
#    must answer, /mutate and /validate must answer AdmissionReviews over
#    TLS for the in-cluster Service name, the policies in the ConfigMap must
#    show as loaded in /metrics, a broken policy swapped in through ..data
#    must count as a failed reload that keeps the last good set, and SIGTERM
#    must end it cleanly.
#
# With --rendered DIR, steps 3 to 6 run on objects rendered elsewhere (the
# Helm chart, by ci/chart-checks.sh) instead of the kustomize builds: DIR
# holds base.yaml, cert-manager.yaml and report.yaml in the roles of deploy/
# and its two overlays, and any other DIR/*.yaml is checked like base.yaml
# (schemas, references, NetworkPolicy, shutdown) without running the server;
# DIR/openreports.yaml, when there, also as the openreports overlay.
# --label NAME names the source in the messages.
#
# Installs what it needs (pinned Python packages in a venv under
# ${XDG_CACHE_HOME:-~/.cache}/gpu-admission-ci) and finishes in seconds once
# installed. Without kustomize (or kubectl 1.27+) it renders with a small
# fallback, says so, and checks the rest as usual.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/gpu-admission-ci"
kubernetes_validate_version="1.37.0"
cel_python_version="0.5.0"
k8s_versions="1.30.0 1.37.0"

step() { printf '\n== %s\n' "$*"; }

rendered=""
label="deploy"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rendered) rendered="$(cd "$2" && pwd)"; shift 2 ;;
    --label) label="$2"; shift 2 ;;
    -h | --help) sed -n '2,57p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "validate-deploy: unknown argument: $1" >&2; exit 2 ;;
  esac
done
if [[ -n "$rendered" ]]; then
  for f in base cert-manager report; do
    [[ -f "$rendered/$f.yaml" ]] || { echo "validate-deploy: $rendered/$f.yaml is missing" >&2; exit 2; }
  done
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Kustomize: a standalone kustomize, else the one built into kubectl (1.27+
# embeds kustomize v5; older ones may lack fields this kustomization uses).
kustomize_cmd=()
find_kustomize() {
  if command -v kustomize > /dev/null; then
    kustomize_cmd=(kustomize build)
  elif command -v kubectl > /dev/null \
    && kubectl version --client 2> /dev/null | grep -Eq 'Kustomize Version: v([5-9]|[1-9][0-9])'; then
    kustomize_cmd=(kubectl kustomize)
  fi
}

step "tools"
# VALIDATE_DEPLOY_RENDERER=fallback exercises the fallback even where kustomize is.
if [[ "${VALIDATE_DEPLOY_RENDERER:-}" != fallback ]]; then
  find_kustomize
fi
if [[ ${#kustomize_cmd[@]} -gt 0 ]]; then
  echo "kustomize: ${kustomize_cmd[*]} ($( (kustomize version 2> /dev/null || kubectl version --client 2> /dev/null | grep Kustomize) | head -1))"
else
  echo "kustomize: none on PATH (kustomize, or kubectl 1.27+): rendering with the fallback below, which is not kustomize"
fi

venv="$cache/venv"
stamp="$venv/.kubernetes-validate-$kubernetes_validate_version-cel-python-$cel_python_version"
if [[ ! -e "$stamp" ]]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  timeout 300 "$venv/bin/pip" install -q --disable-pip-version-check \
    "kubernetes-validate==$kubernetes_validate_version" "cel-python==$cel_python_version"
  touch "$stamp"
fi
python="$venv/bin/python"
echo "python: kubernetes-validate $kubernetes_validate_version, cel-python $cel_python_version"

step "deploy/policies/ is in step with policies/"
"$root/deploy/sync-policies.sh" --check

# The fallback renderer: only the kustomization features deploy/ uses
# (resources, namespace, labels without selectors, images, configMapGenerator
# without a hash suffix, strategic-merge patches of metadata, JSON patches
# with add, replace, remove and test), and an error on
# anything else, so that it cannot quietly render what kustomize would not.
# When kustomize is present, the two renderings are compared, which keeps the
# fallback honest.
cat > "$work/render.py" <<'EOF'
import os, sys
import yaml

CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration",
                  "ValidatingWebhookConfiguration", "CustomResourceDefinition", "PriorityClass"}


class Unsupported(Exception):
    pass


def allow(d, keys, where):
    extra = set(d) - set(keys)
    if extra:
        raise Unsupported(f"{where}: {sorted(extra)} not supported by the fallback renderer")


def render(folder):
    k = yaml.safe_load(open(os.path.join(folder, "kustomization.yaml")))
    allow(k, {"apiVersion", "kind", "resources", "namespace", "labels", "images", "configMapGenerator", "patches"},
          folder)
    objs = []
    for r in k.get("resources", []):
        path = os.path.join(folder, r)
        if os.path.isdir(path):
            objs += render(path)
        else:
            objs += [d for d in yaml.safe_load_all(open(path)) if d]
    for g in k.get("configMapGenerator", []):
        allow(g, {"name", "files", "literals", "options"}, f"{folder}: configMapGenerator")
        opts = g.get("options", {})
        allow(opts, {"disableNameSuffixHash", "labels"}, f"{folder}: configMapGenerator options")
        if opts.get("disableNameSuffixHash") is not True:
            raise Unsupported(f"{folder}: name hash suffixes are not supported by the fallback renderer")
        data = {}
        for f in g.get("files", []):
            name, _, rel = f.partition("=") if "=" in f else (os.path.basename(f), "", f)
            data[name] = open(os.path.join(folder, rel)).read()
        for lit in g.get("literals", []):
            name, _, value = lit.partition("=")
            data[name] = value
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": g["name"]}}
        if opts.get("labels"):
            cm["metadata"]["labels"] = dict(opts["labels"])
        if data:
            cm["data"] = data
        objs.append(cm)
    for p in k.get("patches", []):
        allow(p, {"patch", "target"}, f"{folder}: patches")
        patch = yaml.safe_load(p["patch"])
        if "target" in p:
            json6902(objs, p["target"], patch, folder)
            continue
        if not isinstance(patch, dict):
            raise Unsupported(f"{folder}: only strategic-merge patches are supported by the fallback renderer")
        allow(patch, {"apiVersion", "kind", "metadata"}, f"{folder}: patch")
        allow(patch["metadata"], {"name", "annotations", "labels"}, f"{folder}: patch metadata")
        targets = [o for o in objs if o["kind"] == patch["kind"] and o["metadata"]["name"] == patch["metadata"]["name"]]
        if len(targets) != 1:
            raise Unsupported(f"{folder}: a patch matches {len(targets)} objects")
        for field in ("annotations", "labels"):
            if field in patch["metadata"]:
                targets[0]["metadata"].setdefault(field, {}).update(patch["metadata"][field])
    ns = k.get("namespace")
    for o in objs:
        if not ns:
            break
        if o["kind"] not in CLUSTER_SCOPED:
            o["metadata"]["namespace"] = ns
        for s in o.get("subjects", []):
            if s.get("kind") == "ServiceAccount":
                s["namespace"] = ns
        for w in o.get("webhooks", []):
            if "service" in w.get("clientConfig", {}):
                w["clientConfig"]["service"]["namespace"] = ns
    for entry in k.get("labels", []):
        allow(entry, {"pairs", "includeSelectors"}, f"{folder}: labels")
        if entry.get("includeSelectors"):
            raise Unsupported(f"{folder}: labels with includeSelectors are not supported by the fallback renderer")
        for o in objs:
            o["metadata"].setdefault("labels", {}).update(entry["pairs"])
    for image in k.get("images", []):
        allow(image, {"name", "newName", "newTag"}, f"{folder}: images")
        for o in objs:
            pod = o.get("spec", {}).get("template", {}).get("spec", {})
            for c in pod.get("containers", []) + pod.get("initContainers", []):
                ref = c["image"].split("@")[0]
                name = ref.rsplit(":", 1)[0] if ":" in ref.rsplit("/", 1)[-1] else ref
                if name == image["name"]:
                    new = image.get("newName", name)
                    c["image"] = f'{new}:{image["newTag"]}' if "newTag" in image else new
    return objs


def json6902(objs, target, ops, folder):
    """RFC 6902 add, replace, remove and test, on the one object `target` names by kind and name."""
    allow(target, {"kind", "name"}, f"{folder}: patch target")
    targets = [o for o in objs if o["kind"] == target["kind"] and o["metadata"]["name"] == target["name"]]
    if len(targets) != 1 or not isinstance(ops, list):
        raise Unsupported(f"{folder}: a JSON patch must be a list of operations on exactly one object")
    for op in ops:
        allow(op, {"op", "path", "value"}, f"{folder}: patch operation")
        if op["op"] not in ("add", "replace", "remove", "test"):
            raise Unsupported(f"{folder}: JSON patch op {op['op']} is not supported by the fallback renderer")
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        node = targets[0]
        for t in tokens[:-1]:
            node = node[int(t)] if isinstance(node, list) else node[t]
        last = tokens[-1]
        key = int(last) if isinstance(node, list) and last != "-" else last
        if op["op"] == "test":
            if node[key] != op["value"]:
                raise Unsupported(f"{folder}: JSON patch test of {op['path']} fails: {node[key]!r}")
        elif op["op"] == "remove":
            del node[key]
        elif isinstance(node, list):
            if last == "-" and op["op"] == "add":
                node.append(op["value"])
            elif op["op"] == "add":
                node.insert(int(last), op["value"])
            else:
                node[int(last)] = op["value"]
        elif op["op"] == "replace" and last not in node:
            raise Unsupported(f"{folder}: JSON patch replaces missing {op['path']}")
        else:
            node[last] = op["value"]


def ident(o):
    return (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])


if __name__ == "__main__":
    try:
        objs = sorted(render(sys.argv[1]), key=ident)
    except (Unsupported, OSError, KeyError, yaml.YAMLError) as e:
        sys.exit(f"fallback renderer: {e}")
    if len(sys.argv) > 2:
        theirs = sorted((d for d in yaml.safe_load_all(open(sys.argv[2])) if d), key=ident)
        if objs != theirs:
            differing = [ident(b) for a, b in zip(objs, theirs) if a != b]
            sys.exit(f"fallback renderer differs from kustomize: {len(objs)} vs {len(theirs)} objects, "
                     f"first difference {differing[:1]}")
        print(f"fallback renderer agrees with kustomize ({len(objs)} objects)")
    else:
        yaml.safe_dump_all(objs, sys.stdout, sort_keys=False)
EOF

extra=()
if [[ -n "$rendered" ]]; then
  step "rendered objects ($label)"
  for f in "$rendered"/*.yaml; do
    cp "$f" "$work/"
    echo "$label: $(basename "$f"): $(grep -c '^kind:' "$f") objects"
    case "$(basename "$f")" in base.yaml | cert-manager.yaml | report.yaml) ;; *) extra+=("$work/$(basename "$f")") ;; esac
  done
else
  step "kustomize build"
  for target in deploy deploy/overlays/cert-manager deploy/overlays/report deploy/overlays/openreports deploy/overlays/self-managed-certs; do
    out="$work/$(basename "$target").yaml"
    if [[ ${#kustomize_cmd[@]} -gt 0 ]]; then
      "${kustomize_cmd[@]}" "$root/$target" > "$out"
      "$python" "$work/render.py" "$root/$target" "$out"
    else
      "$python" "$work/render.py" "$root/$target" > "$out"
    fi
    echo "$target/: $(grep -c '^kind:' "$out") objects"
  done
  mv "$work/deploy.yaml" "$work/base.yaml"
  extra+=("$work/openreports.yaml")
fi

step "schemas, references and matchConditions"
cat > "$work/check.py" <<'EOF'
import base64, http.client, json, os, re, shutil, signal, socket, ssl, subprocess, sys, time, urllib.error, urllib.request, warnings
import yaml
import kubernetes_validate
import celpy

warnings.filterwarnings("ignore")
base_file, overlay_file, cases_file, versions = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split()
binary, run_dir, report_file, self_managed_file = sys.argv[5], sys.argv[6], sys.argv[7], sys.argv[8]
source, extra_files = sys.argv[9], sys.argv[10:]
BASE = "deploy/" if source == "deploy" else f"{source}: defaults"
CM = "cert-manager overlay" if source == "deploy" else f"{source}: cert-manager"
REPORT = "report overlay" if source == "deploy" else f"{source}: report"
errors = []
checks = 0


def check(cond, msg):
    global checks
    checks += 1
    if not cond:
        errors.append(msg)


def load(path):
    return [d for d in yaml.safe_load_all(open(path)) if d]


def ident(o):
    m = o.get("metadata", {})
    return f'{o.get("kind")} {m.get("namespace", "") + "/" if m.get("namespace") else ""}{m.get("name")}'


def find(objs, kind, name=None):
    return [o for o in objs if o.get("kind") == kind and (name is None or o["metadata"]["name"] == name)]


def one(objs, kind, name=None):
    found = find(objs, kind, name)
    check(len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}")
    return found[0] if found else {}


def schemas(objs, label):
    for o in objs:
        if o["apiVersion"].startswith("cert-manager.io/"):
            continue
        for v in versions:
            try:
                kubernetes_validate.validate(o, v, strict=True)
                check(True, "")
            except kubernetes_validate.ValidationError as e:
                path = ".".join(str(p) for p in e.path)
                check(False, f"{label}: {ident(o)}: Kubernetes {v}: {path}: {e.message}")
            except kubernetes_validate.SchemaNotFoundError:
                check(False, f"{label}: {ident(o)}: no schema for {o['apiVersion']} in Kubernetes {v}")


def references(objs, label):
    dep = one(objs, "Deployment", "gpu-admission")
    svc = one(objs, "Service", "gpu-admission")
    ns = dep.get("metadata", {}).get("namespace")
    pod = dep.get("spec", {}).get("template", {})
    labels = pod.get("metadata", {}).get("labels", {})
    spec = pod.get("spec", {})
    container = (spec.get("containers") or [{}])[0]
    ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}

    def selects(selector):
        return bool(selector) and all(labels.get(k) == v for k, v in selector.items())

    check(dep.get("spec", {}).get("replicas", 1) >= 2, f"{label}: Deployment needs 2+ replicas")
    check(selects(dep["spec"]["selector"]["matchLabels"]), f"{label}: Deployment selector misses its pods")
    check(selects(svc["spec"]["selector"]), f"{label}: Service selector misses the pods")
    pdb = one(objs, "PodDisruptionBudget", "gpu-admission")
    check(selects(pdb["spec"]["selector"]["matchLabels"]), f"{label}: PodDisruptionBudget selector misses the pods")
    check(one(objs, "Namespace", ns) != {}, f"{label}: no Namespace {ns}")
    for p in svc["spec"]["ports"]:
        check(p["targetPort"] in ports, f"{label}: Service port {p['name']} targets unknown port {p['targetPort']}")
    check(ports.get("metrics") == 9090, f"{label}: the metrics port is 9090 named metrics")
    check(ports.get("health") == 8081, f"{label}: the probe port is 8081 named health")
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = container.get(probe, {}).get("httpGet", {})
        check(get.get("path") == path and get.get("port") == "health",
              f"{label}: {probe} must GET {path} on the probe port (health), apart from metrics traffic")

    args = container.get("args", [])
    check(args[:1] == ["serve"], f"{label}: container args start with serve")
    mounts = {m["name"]: m for m in container.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for m in mounts.values():
        check("subPath" not in m, f"{label}: {m['name']} is a subPath mount: updates would never reach it")
    flag_dirs = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in args if a.startswith("--") and "=" in a}
    pol = mounts.get("policies", {})
    check(flag_dirs.get("--policies") == pol.get("mountPath"), f"{label}: --policies is not the policies mount")
    cm_name = volumes.get("policies", {}).get("configMap", {}).get("name")
    check(cm_name and find(objs, "ConfigMap", cm_name), f"{label}: policies volume names ConfigMap {cm_name}, not rendered")
    if "--manage-certs" in args:
        # The certificate comes from its Secret through the API.
        check("tls" not in mounts and "tls" not in volumes and "--tls-cert" not in flag_dirs
              and "--tls-key" not in flag_dirs,
              f"{label}: --manage-certs with a TLS mount or --tls-cert/--tls-key")
    else:
        tls = mounts.get("tls", {}).get("mountPath")
        check(flag_dirs.get("--tls-cert") == f"{tls}/tls.crt" and flag_dirs.get("--tls-key") == f"{tls}/tls.key",
              f"{label}: --tls-cert/--tls-key are not in the tls mount")
        secret_name = volumes.get("tls", {}).get("secret", {}).get("secretName")
        check(secret_name == "gpu-admission-tls", f"{label}: the tls volume is the Secret gpu-admission-tls")

    sec = container.get("securityContext", {})
    psec = spec.get("securityContext", {})
    check(psec.get("runAsNonRoot") is True, f"{label}: pod runs as non-root")
    check(psec.get("seccompProfile", {}).get("type") == "RuntimeDefault", f"{label}: seccomp RuntimeDefault")
    check(sec.get("readOnlyRootFilesystem") is True, f"{label}: read-only root filesystem")
    check(sec.get("allowPrivilegeEscalation") is False, f"{label}: no privilege escalation")
    check(sec.get("capabilities", {}).get("drop") == ["ALL"], f"{label}: all capabilities dropped")
    res = container.get("resources", {})
    check(res.get("requests") and res.get("limits"), f"{label}: requests and limits set")

    svc_ports = {p["port"] for p in svc["spec"]["ports"]}
    for kind, path in (("MutatingWebhookConfiguration", "/mutate"), ("ValidatingWebhookConfiguration", "/validate")):
        cfg = one(objs, kind, "gpu-admission")
        for w in cfg.get("webhooks", []):
            where = f"{label}: {kind} webhook {w['name']}"
            ref = w["clientConfig"].get("service", {})
            check(ref.get("name") == svc["metadata"]["name"] and ref.get("namespace") == ns,
                  f"{where}: clientConfig names Service {ref.get('namespace')}/{ref.get('name')}")
            check(ref.get("port", 443) in svc_ports, f"{where}: Service has no port {ref.get('port', 443)}")
            check(ref.get("path") == path, f"{where}: path must be {path}")
            check(w.get("sideEffects") == "None", f"{where}: sideEffects None")
            check(w.get("admissionReviewVersions") == ["v1"], f"{where}: admissionReviewVersions [v1]")
            check(w.get("failurePolicy") in ("Fail", "Ignore"), f"{where}: failurePolicy set")
            check(1 <= w.get("timeoutSeconds", 10) <= 10, f"{where}: timeoutSeconds 1..10")
            if kind.startswith("Mutating"):
                check(w.get("reinvocationPolicy") == "IfNeeded", f"{where}: reinvocationPolicy IfNeeded")
            namespaced = any(r.get("scope") == "Namespaced" for r in w.get("rules", []))
            if namespaced:
                exprs = w.get("namespaceSelector", {}).get("matchExpressions", [])
                excluded = {v for e in exprs if e["key"] == "kubernetes.io/metadata.name" and e["operator"] == "NotIn"
                            for v in e["values"]}
                check({"kube-system", ns} <= excluded, f"{where}: must exclude kube-system and {ns}")
                # A label in the selector exempts whoever can set it: only
                # labels the shipped ValidatingAdmissionPolicy keeps to admins.
                labels = {e["key"] for e in exprs} - {"kubernetes.io/metadata.name"}
                check(labels <= guarded_labels(objs),
                      f"{where}: namespaceSelector honours labels anyone may set: "
                      f"{sorted(labels - guarded_labels(objs))} (guard them in deploy/namespace-exemption)")
    return ns


def guarded_labels(objs):
    """Namespace labels that the shipped ValidatingAdmissionPolicies let
    only admins set: the string of their `label` variable, or each string
    of their `guarded` list."""
    out = set()
    for p in find(objs, "ValidatingAdmissionPolicy"):
        rules = p.get("spec", {}).get("matchConstraints", {}).get("resourceRules", [])
        if not any("namespaces" in r.get("resources", []) for r in rules):
            continue
        bound = any(b.get("spec", {}).get("policyName") == p["metadata"]["name"]
                    and "Deny" in b.get("spec", {}).get("validationActions", [])
                    for b in find(objs, "ValidatingAdmissionPolicyBinding"))
        for v in p.get("spec", {}).get("variables", []):
            if bound and v.get("name") == "label":
                out.add(v["expression"].strip().strip("'\""))
            if bound and v.get("name") == "guarded":
                text = v["expression"].strip()
                if text.startswith("[") and text.endswith("]"):
                    out.update(x.strip().strip("'\"") for x in text[1:-1].split(",") if x.strip())
    return out


# The server's duration flags (server::parse_duration): 500ms, 20s, 1m30s.
DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}


def seconds(text):
    parts = re.findall(r"([0-9.]+)([a-z]+)", text)
    if not parts or "".join(n + u for n, u in parts) != text or any(u not in DURATION_UNITS for _, u in parts):
        return None
    return sum(float(n) * DURATION_UNITS[u] for n, u in parts)


# Flags that bound shutdown, with the server's defaults.
SHUTDOWN_FLAGS = {"--shutdown-delay": "0s", "--drain-window": "5s", "--drain-timeout": "30s"}
MONITORING_LABEL = "gpu-admission.io/metrics-scraper"


def network_policy(objs, label):
    """The NetworkPolicy selects the server's pods and opens exactly their
    ports: https to any source, metrics only to labelled namespaces, the
    probe port to no pod (the kubelet comes from the node)."""
    dep = one(objs, "Deployment", "gpu-admission")
    pod = dep.get("spec", {}).get("template", {})
    labels = pod.get("metadata", {}).get("labels", {})
    container = (pod.get("spec", {}).get("containers") or [{}])[0]
    ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    netpol = one(objs, "NetworkPolicy", "gpu-admission")
    spec = netpol.get("spec", {})
    where = f"{label}: NetworkPolicy gpu-admission"
    check(netpol.get("metadata", {}).get("namespace") == dep.get("metadata", {}).get("namespace"),
          f"{where}: not in the Deployment's namespace")
    selector = spec.get("podSelector", {})
    check(set(selector) == {"matchLabels"} and selector["matchLabels"]
          and all(labels.get(k) == v for k, v in selector["matchLabels"].items()),
          f"{where}: podSelector {selector} does not select the Deployment's pods {labels}")
    check(spec.get("policyTypes") == ["Ingress"], f"{where}: policyTypes must be [Ingress] (egress stays open)")
    opened = {}
    for rule in spec.get("ingress", []):
        for p in rule.get("ports", []):
            check(p.get("protocol", "TCP") == "TCP" and "endPort" not in p, f"{where}: {p} is not one TCP port")
            port = ports.get(p.get("port"), p.get("port"))
            check(port not in opened, f"{where}: port {port} is in two rules")
            opened[port] = rule.get("from")
    # The probe port is for the kubelet, which comes from the node: no pod
    # may reach it, so no rule opens it.
    served = {p for name, p in ports.items() if name != "health"}
    check(set(opened) == served,
          f"{where}: opens ports {sorted(opened, key=str)}, the container serves {sorted(served)} to pods")
    check("https" in ports and opened.get(ports["https"]) is None,
          f"{where}: the webhook port must be open to any source (the API server's address is not portable)")
    metrics_from = opened.get(ports.get("metrics")) or []
    check(metrics_from == [{"namespaceSelector": {"matchLabels": {MONITORING_LABEL: "true"}}}],
          f"{where}: the metrics port must be open only to namespaces labelled {MONITORING_LABEL}=true, "
          f"got {metrics_from}")


def shutdown_and_priority(objs, label):
    """The grace period outlasts everything shutdown may take, the memory
    request equals the limit, and the priority class can be admitted."""
    dep = one(objs, "Deployment", "gpu-admission")
    spec = dep.get("spec", {}).get("template", {}).get("spec", {})
    container = (spec.get("containers") or [{}])[0]
    where = f"{label}: Deployment gpu-admission"
    flags = dict(SHUTDOWN_FLAGS)
    for a in container.get("args", []):
        flag, _, value = a.partition("=")
        if flag in flags:
            flags[flag] = value
    check("--drain-timeout" in {a.partition("=")[0] for a in container.get("args", [])},
          f"{where}: set --drain-timeout explicitly (its default alone outlasts the grace period)")
    durations = {f: seconds(v) for f, v in flags.items()}
    for f, v in durations.items():
        check(v is not None, f"{where}: {f}={flags[f]} is not a duration")
    pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
    grace = spec.get("terminationGracePeriodSeconds", 30)
    needed = pre_stop + sum(v or 0 for v in durations.values())
    check(grace > needed,
          f"{where}: terminationGracePeriodSeconds {grace} must exceed preStop {pre_stop}s + "
          + " + ".join(f"{f} {flags[f]}" for f in flags) + f" = {needed:g}s")
    res = container.get("resources", {})
    memory = (res.get("requests", {}).get("memory"), res.get("limits", {}).get("memory"))
    check(memory[0] is not None and memory[0] == memory[1],
          f"{where}: memory request {memory[0]} must equal the limit {memory[1]}")
    priority = spec.get("priorityClassName")
    check(priority == "system-cluster-critical", f"{where}: priorityClassName system-cluster-critical")
    if priority and priority.startswith("system-"):
        replicas = dep.get("spec", {}).get("replicas", 1)
        surge = dep.get("spec", {}).get("strategy", {}).get("rollingUpdate", {}).get("maxSurge", 1)
        quotas = [q for q in find(objs, "ResourceQuota")
                  if q["metadata"].get("namespace") == dep["metadata"].get("namespace")
                  and {"scopeName": "PriorityClass", "operator": "In", "values": [priority]}
                  in q.get("spec", {}).get("scopeSelector", {}).get("matchExpressions", [])]
        check(len(quotas) == 1, f"{where}: {priority} needs one ResourceQuota scoped to it in its namespace, "
                                f"found {len(quotas)}")
        for q in quotas:
            pods = q["spec"].get("hard", {}).get("pods")
            check(pods is not None and int(pods) >= 2 * (replicas + (surge if isinstance(surge, int) else 1)),
                  f"{label}: ResourceQuota {q['metadata']['name']}: pods {pods} leaves no room for a rollout "
                  f"of {replicas} replicas with their terminating pods")


def cert_manager(objs, label, ns):
    issuers = {o["metadata"]["name"]: o for o in find(objs, "Issuer")}
    certs = {o["metadata"]["name"]: o for o in find(objs, "Certificate")}
    for name, o in issuers.items():
        check(o["apiVersion"] == "cert-manager.io/v1", f"{label}: Issuer {name}: apiVersion cert-manager.io/v1")
        kinds = [k for k in ("selfSigned", "ca", "acme", "vault", "venafi") if k in o.get("spec", {})]
        check(len(kinds) == 1, f"{label}: Issuer {name}: exactly one issuer type, found {kinds}")
        if "ca" in o["spec"]:
            check(any(c["spec"]["secretName"] == o["spec"]["ca"].get("secretName") and c["spec"].get("isCA")
                      for c in certs.values()), f"{label}: Issuer {name}: its CA Secret is no CA Certificate's")
    for name, o in certs.items():
        spec = o.get("spec", {})
        check(o["apiVersion"] == "cert-manager.io/v1", f"{label}: Certificate {name}: apiVersion cert-manager.io/v1")
        check(o["metadata"].get("namespace") == ns, f"{label}: Certificate {name} is not in {ns}")
        check(spec.get("secretName"), f"{label}: Certificate {name}: spec.secretName required")
        ref = spec.get("issuerRef", {})
        check(ref.get("kind", "Issuer") == "Issuer" and ref.get("name") in issuers,
              f"{label}: Certificate {name}: issuerRef {ref.get('name')} is not an Issuer here")
        known = {"isCA", "commonName", "secretName", "duration", "renewBefore", "privateKey", "issuerRef",
                 "dnsNames", "usages"}
        check(set(spec) <= known, f"{label}: Certificate {name}: unexpected fields {sorted(set(spec) - known)}")
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        cfg = one(objs, kind, "gpu-admission")
        inject = cfg.get("metadata", {}).get("annotations", {}).get("cert-manager.io/inject-ca-from", "")
        cns, _, cname = inject.partition("/")
        cert = certs.get(cname, {})
        check(cns == ns and cert, f"{label}: {kind}: inject-ca-from {inject!r} names no Certificate here")
        if cert:
            check(cert["spec"]["secretName"] == "gpu-admission-tls",
                  f"{label}: {kind}: injected Certificate does not issue the mounted Secret")
            svc_dns = f"gpu-admission.{ns}.svc"
            check(svc_dns in cert["spec"].get("dnsNames", []), f"{label}: Certificate {cname} lacks {svc_dns}")


def rules_granted(objs, ns, subject_kind="ServiceAccount", subject="gpu-admission"):
    """(apiGroup, resource, verb, resourceName or None, namespace or None) the server's ServiceAccount is granted."""
    granted = set()
    for binding in find(objs, "ClusterRoleBinding") + find(objs, "RoleBinding"):
        if not any(s.get("kind") == subject_kind and s.get("name") == subject and s.get("namespace") == ns
                   for s in binding.get("subjects", [])):
            continue
        ref = binding["roleRef"]
        scope = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        roles = [o for o in find(objs, ref["kind"], ref["name"])
                 if ref["kind"] == "ClusterRole" or o["metadata"].get("namespace") == scope]
        check(len(roles) == 1, f"{binding['kind']} {binding['metadata']['name']} refers to missing {ref['kind']} {ref['name']}")
        for role in roles:
            for rule in role.get("rules", []):
                for g in rule.get("apiGroups", []):
                    for r in rule.get("resources", []):
                        for v in rule.get("verbs", []):
                            for n in rule.get("resourceNames") or [None]:
                                granted.add((g, r, v, n, scope))
    return granted


def report_overlay(base, report, ns, label=REPORT):
    """The report overlay adds the flag, the pod name, list/watch on the audited kinds and the Lease; the base has none of it."""

    def container(objs):
        dep = one(objs, "Deployment", "gpu-admission")
        return (dep.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or [{}])[0]

    args = container(report).get("args", [])
    intervals = [a.split("=", 1)[1] for a in args if a.startswith("--report-interval=")]
    check(len(intervals) == 1 and (seconds(intervals[0]) or 0) >= 60, f"{label}: one --report-interval of a minute or more, got {intervals}")
    check(not any(a.startswith("--report-interval") for a in container(base).get("args", [])),
          f"{BASE}: the periodic report is opt-in (no --report-interval in the base)")
    leases = [a.split("=", 1)[1] for a in args if a.startswith("--report-lease=")]
    lease = leases[0] if leases else "gpu-admission-report"
    check(lease != "off", f"{label}: two replicas need the Lease")
    env = {e["name"]: e for e in container(report).get("env", [])}
    check(env.get("POD_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name",
          f"{label}: POD_NAME from metadata.name (the Lease holder identity)")
    check(env.get("POD_NAMESPACE", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace",
          f"{label}: POD_NAMESPACE from metadata.namespace (where the Lease lives)")
    res = container(report).get("resources", {})
    check(res.get("requests", {}).get("memory") == res.get("limits", {}).get("memory"),
          f"{label}: memory request equals the limit")

    # Nodes: the report's GPU pools, idle GPU nodes and findings on nodes.
    audited = [("", "pods"), ("", "nodes"), ("apps", "deployments"), ("apps", "statefulsets"), ("apps", "daemonsets"),
               ("apps", "replicasets"), ("batch", "jobs"), ("batch", "cronjobs"), ("karpenter.sh", "nodepools"),
               ("kaito.sh", "workspaces"), ("kaito.sh", "inferencesets"), ("kaito.sh", "ragengines"),
               ("containerservice.azure.com", "managedclustersagentpools"),
               ("containerservice.azure.com", "managedclusters"),
               ("infrastructure.cluster.x-k8s.io", "azuremanagedmachinepools"),
               ("infrastructure.cluster.x-k8s.io", "azureasomanagedmachinepools"),
               ("infrastructure.cluster.x-k8s.io", "azureasomanagedcontrolplanes"),
               ("resource.k8s.io", "resourceclaims"), ("resource.k8s.io", "resourceclaimtemplates"),
               ("resource.k8s.io", "deviceclasses"), ("resource.k8s.io", "resourceslices"),
               ("gpu-admission.io", "gpupolicyexceptions")]
    # The workload custom resources of policies/workload-kinds.yaml.
    audited += [(g, r) for g, rs in (
        ("ray.io", ["rayclusters", "rayjobs", "rayservices"]),
        ("kubeflow.org", ["pytorchjobs", "tfjobs", "mpijobs", "xgboostjobs", "paddlejobs", "jaxjobs", "notebooks"]),
        ("trainer.kubeflow.org", ["trainjobs", "trainingruntimes", "clustertrainingruntimes"]),
        ("jobset.x-k8s.io", ["jobsets"]), ("leaderworkerset.x-k8s.io", ["leaderworkersets"]),
        ("serving.kserve.io", ["inferenceservices", "servingruntimes", "clusterservingruntimes"]),
        ("batch.volcano.sh", ["jobs"]),
        ("argoproj.io", ["workflows", "workflowtemplates", "clusterworkflowtemplates", "cronworkflows"]),
        ("sparkoperator.k8s.io", ["sparkapplications"]))
        for r in rs]
    granted = rules_granted(report, ns)
    # The audit role alone (bound to whoever runs `gpu-admission audit`)
    # reads every audited kind, nodes included.
    audit_role = {(g, r, v) for rule in one(report, "ClusterRole", "gpu-admission-audit").get("rules", [])
                  for g in rule.get("apiGroups", []) for r in rule.get("resources", []) for v in rule.get("verbs", [])}
    for g, r in audited:
        check((g, r, "list") in audit_role, f"{label}: ClusterRole gpu-admission-audit does not list {r}.{g or 'core'}")
    check(all(v in ("get", "list", "watch") for _, _, v in audit_role), f"{label}: ClusterRole gpu-admission-audit only reads")
    for g, r in audited:
        for v in ("list", "watch"):
            check((g, r, v, None, None) in granted, f"{label}: the server may not {v} {r}.{g or 'core'} cluster-wide")
    for v in ("get", "update"):
        check((("coordination.k8s.io", "leases", v, lease, ns) in granted), f"{label}: the server may not {v} Lease {ns}/{lease}")
    check(("coordination.k8s.io", "leases", "create", None, ns) in granted, f"{label}: the server may not create Leases in {ns}")
    check(not any(g == "coordination.k8s.io" and scope is None for g, _, _, _, scope in granted),
          f"{label}: Lease access is limited to the webhook's namespace")
    # A SubjectAccessReview is a question (the authorizer checks of
    # policies), not a change to the cluster.
    asks = ("authorization.k8s.io", "subjectaccessreviews", "create")
    # The reports of the API chosen (--reports), and of no other: listed
    # and created anywhere, read, updated and deleted only under the one
    # name the server writes.
    check("--policy-reports=on" in args, f"{label}: --policy-reports=on")
    chosen = [a.split("=", 1)[1] for a in args if a.startswith("--reports=")] or ["policyreport"]
    apis = {"policyreport": ("wgpolicyk8s.io", "policyreports"), "openreports": ("openreports.io", "reports")}
    group, resource = apis.get(chosen[-1], ("?", "?"))
    check(len(chosen) == 1 and chosen[0] in apis, f"{label}: one --reports of {sorted(apis)}, got {chosen}")
    for v in ("list", "create"):
        check((group, resource, v, None, None) in granted,
              f"{label}: the server may not {v} {resource}.{group} cluster-wide")
    for v in ("get", "update", "delete"):
        check((group, resource, v, "gpu-admission", None) in granted,
              f"{label}: the server may not {v} the {resource}.{group} named gpu-admission")
    check(not any(g == group and v in ("get", "update", "delete", "patch") and n != "gpu-admission"
                  for g, r, v, n, _ in granted),
          f"{label}: {resource}.{group} reads, updates and deletes are limited to the name gpu-admission")
    check(not any(g in (a for a, _ in apis.values()) and g != group for g, _, _, _, _ in granted),
          f"{label}: RBAC for {group} reports only, the API --reports chose")
    check(not any(v not in ("get", "list", "watch") and g not in ("coordination.k8s.io", group)
                  and (g, r, v) != asks
                  for g, r, v, _, _ in granted),
          f"{label}: the server writes nothing but its Lease and its {resource}.{group}")

    base_granted = rules_granted(base, ns)
    check({(g, r) for g, r, _, _, _ in base_granted} <= {("", "namespaces"), ("", "nodes"), ("karpenter.sh", "nodepools"),
                                                           ("resource.k8s.io", "resourceclaims"),
                                                           ("resource.k8s.io", "resourceclaimtemplates"),
                                                           ("resource.k8s.io", "deviceclasses"),
                                                           ("resource.k8s.io", "resourceslices"),
                                                           ("authorization.k8s.io", "subjectaccessreviews"),
                                                           ("gpu-admission.io", "gpupolicyexceptions"),
                                                           ("gpu-admission.io", "gpubudgets"), ("", "pods")},
          f"{BASE}: the base grants the server only namespaces, nodes, NodePools, DRA claims and devices, GpuPolicyExceptions, "
          f"GpuBudgets, pods and SubjectAccessReviews, got {sorted(base_granted)}")
    check(not any(v not in ("get", "list", "watch") for g, r, v, _, _ in base_granted if r in ("pods", "gpubudgets")),
          f"{BASE}: the server only reads pods and GpuBudgets")
    check(not any(v not in ("get", "list", "watch") for g, r, v, _, _ in base_granted if r in ("nodes", "nodepools")),
          f"{BASE}: the server only reads nodes and NodePools")
    check(not any(v != "create" for g, r, v, _, _ in base_granted if r == "subjectaccessreviews"),
          f"{BASE}: SubjectAccessReviews may only be created")
    print(f"{label}: --report-interval={intervals[0] if intervals else '?'}, Lease {ns}/{lease}, "
          f"{len(audited)} audited kinds listable, {resource}.{group} written")


def self_managed_overlay(base, objs, ns):
    """--manage-certs, the pod name, and RBAC for one Secret, one Lease and the two webhook configurations by name."""
    label = "self-managed-certs overlay"
    dep = one(objs, "Deployment", "gpu-admission")
    container = (dep.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or [{}])[0]
    args = container.get("args", [])
    flags = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in args if a.startswith("--") and "=" in a}
    check("--manage-certs" in args, f"{label}: serve --manage-certs")
    secret = flags.get("--cert-secret", "gpu-admission-certs")
    lease = flags.get("--cert-lease", "gpu-admission-certs")
    check(lease != "off", f"{label}: two replicas need the certificate Lease")
    configs = {flags.get("--mutating-webhook-configuration", "gpu-admission"),
               flags.get("--validating-webhook-configuration", "gpu-admission")}
    check(configs == {"gpu-admission"}, f"{label}: the webhook configurations kept are the shipped ones, got {configs}")
    env = {e["name"]: e for e in container.get("env", [])}
    for name, field in (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace")):
        check(env.get(name, {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == field,
              f"{label}: {name} from {field}")
    check(not any(w.get("clientConfig", {}).get("caBundle") for o in objs for w in o.get("webhooks", [])),
          f"{label}: caBundle is written by the server, not committed")
    check(find(objs, "Secret") == [], f"{label}: the certificate Secret is made by the server, never rendered")
    added = rules_granted(objs, ns) - rules_granted(base, ns)
    expected = {("", "secrets", "create", None, ns),
                ("", "secrets", "get", secret, ns), ("", "secrets", "update", secret, ns),
                ("coordination.k8s.io", "leases", "create", None, ns),
                ("coordination.k8s.io", "leases", "get", lease, ns),
                ("coordination.k8s.io", "leases", "update", lease, ns)}
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        for verb in ("get", "patch"):
            expected.add(("admissionregistration.k8s.io", kind, verb, "gpu-admission", None))
    check(added == expected, f"{label}: grants {sorted(added - expected, key=str)} beyond what it needs, "
                             f"lacks {sorted(expected - added, key=str)}")
    print(f"self-managed-certs overlay: Secret {ns}/{secret}, Lease {ns}/{lease}, "
          f"caBundle of the gpu-admission webhook configurations; {len(added)} grants, all by name but create")


EXCEPTION = {  # The model's example GpuPolicyException.
    "apiVersion": "gpu-admission.io/v1alpha1", "kind": "GpuPolicyException",
    "metadata": {"name": "nccl-bench", "namespace": "research"},
    "spec": {"policies": ["gpu-privileged"],
             "match": {"kinds": ["Pod", "Job"], "names": ["nccl-bench", "nccl-bench-*"],
                       "selector": {"matchLabels": {"app": "nccl-bench"}},
                       "expression": "object.metadata.name.startsWith('nccl-')"},
             "reason": "NCCL bandwidth benchmark needs privileged for one day; OPS-1234",
             "expiresAt": "2026-12-31T00:00:00Z", "requestedBy": "alice@example.com"}}


BUDGET = {  # The model's example GpuBudget (docs/budgets.md).
    "apiVersion": "gpu-admission.io/v1alpha1", "kind": "GpuBudget",
    "metadata": {"name": "team-nlp", "namespace": "gpu-admission"},
    "spec": {"models": {"A100": 8, "T4": 16}, "sizes": {"Standard_NC24ads_A100_v4": 4}, "total": 20,
             "namespaceSelector": {"matchLabels": {"team": "nlp"},
                                   "matchExpressions": [{"key": "stage", "operator": "NotIn", "values": ["dev"]}]}}}


def crd_checked(objs, label, kind, short_names, example, broken):
    """The gpu-admission.io CRD of `kind` as the model has it: group, scope
    and names, v1alpha1 served and stored, the model's `example` accepted,
    and each `broken` change of its spec refused."""
    plural = kind.lower() + "s"
    name = f"{plural}.gpu-admission.io"
    crd = find(objs, "CustomResourceDefinition", name)
    check(len(crd) == 1, f"{label}: no CustomResourceDefinition {name}")
    if not crd:
        return
    spec = crd[0]["spec"]
    names = spec.get("names", {})
    check((spec.get("group"), spec.get("scope"), names.get("kind"), names.get("plural"), names.get("singular"),
           names.get("shortNames")) == ("gpu-admission.io", "Namespaced", kind, plural, kind.lower(), short_names),
          f"{label}: the CRD's group, scope or names differ from gpu-admission.io {kind}/{short_names}")
    versions = [v for v in spec.get("versions", []) if v.get("name") == "v1alpha1"]
    check(len(versions) == 1 and versions[0].get("served") is True and versions[0].get("storage") is True,
          f"{label}: the {kind} CRD serves and stores v1alpha1")
    if len(versions) != 1:
        return
    schema = versions[0]["schema"]["openAPIV3Schema"]
    errs = crd_errors(schema, example)
    check(errs == [], f"{label}: the {kind} CRD refuses the model's example: {errs}")
    for why, change in broken.items():
        obj = json.loads(json.dumps(example))
        change(obj["spec"])
        check(crd_errors(schema, obj) != [], f"{label}: the {kind} CRD accepts an object {why}")


def budgets(objs, label):
    """The GpuBudget CRD as the model has it: names, the model's example
    accepted, what the model refuses refused."""
    crd_checked(objs, label, "GpuBudget", ["gpub"], BUDGET, {
        "with no limit": lambda s: s.clear(),
        "with a negative model limit": lambda s: s.update(models={"A100": -1}),
        "with a limit that is not a number": lambda s: s.update(models={"A100": "8"}),
        "with a negative total": lambda s: s.update(total=-1),
        "with an unknown selector operator": lambda s: s.update(namespaceSelector={"matchExpressions": [
            {"key": "team", "operator": "Like"}]}),
    })


def crd_errors(schema, obj):
    """What kube-apiserver would refuse in `obj` under the CRD's schema: the
    JSON-schema part (types, required, bounds) with jsonschema, and the
    x-kubernetes-validations rules with CEL (cel-python), where `self` is
    the value at their node."""
    import copy, jsonschema
    out = [e.message for e in jsonschema.Draft7Validator(copy.deepcopy(schema)).iter_errors(obj)]

    def rules(node, value, path):
        if not isinstance(node, dict):
            return
        env = celpy.Environment()
        for r in node.get("x-kubernetes-validations", []):
            try:
                ok = env.program(env.compile(r["rule"])).evaluate({"self": celpy.json_to_cel(value)})
            except Exception as e:  # a rule cel-python cannot run is a failure to look at
                ok = e
            if isinstance(ok, Exception) or not bool(ok):
                out.append(f"{path}: {r.get('message', r['rule'])}")
        if isinstance(value, dict):
            for k, sub in node.get("properties", {}).items():
                if k in value:
                    rules(sub, value[k], f"{path}.{k}")
        if isinstance(value, list) and "items" in node:
            for i, v in enumerate(value):
                rules(node["items"], v, f"{path}[{i}]")

    rules(schema, obj, "")
    return out


def exceptions(objs, label):
    """The GpuPolicyException CRD as the model has it, the webhook entries
    that reach the server for it, and the guard policy bound with Deny."""
    crd_checked(objs, label, "GpuPolicyException", ["gpuex"], EXCEPTION, {
        "without spec.reason": lambda s: s.pop("reason"),
        "with an empty spec.reason": lambda s: s.update(reason=""),
        "with match.kinds alone": lambda s: s.update(match={"kinds": ["Pod"]}),
        "with no spec.policies": lambda s: s.update(policies=[]),
        "with 33 spec.policies": lambda s: s.update(policies=[f"p{i}" for i in range(33)]),
        "with a 1025-character reason": lambda s: s.update(reason="x" * 1025),
    })
    for kind, name, policy in (("MutatingWebhookConfiguration", "exceptions.mutate.gpu-admission.io", "Ignore"),
                               ("ValidatingWebhookConfiguration", "exceptions.validate.gpu-admission.io", None)):
        hooks = [w for c in find(objs, kind) for w in c.get("webhooks", []) if w["name"] == name]
        check(len(hooks) == 1 and any(r.get("apiGroups") == ["gpu-admission.io"] and "v1alpha1" in r.get("apiVersions", [])
                                      and r.get("resources") == ["gpupolicyexceptions"]
                                      and set(r.get("operations", [])) == {"CREATE", "UPDATE"}
                                      for r in hooks[0].get("rules", [])),
              f"{label}: {kind} has no {name} for CREATE and UPDATE of gpupolicyexceptions v1alpha1")
        if policy and hooks:
            check(hooks[0].get("failurePolicy") == policy, f"{label}: {name}: failurePolicy {policy}")
    guards = [p for p in find(objs, "ValidatingAdmissionPolicy")
              if any("gpupolicyexceptions" in r.get("resources", [])
                     for r in p.get("spec", {}).get("matchConstraints", {}).get("resourceRules", []))]
    check(len(guards) == 1 and any(b.get("spec", {}).get("policyName") == guards[0]["metadata"]["name"]
                                   and b["spec"].get("validationActions") == ["Deny"]
                                   for b in find(objs, "ValidatingAdmissionPolicyBinding")),
          f"{label}: one ValidatingAdmissionPolicy on gpupolicyexceptions, bound with [Deny]")
    admin_groups = {p["metadata"]["name"]: v["expression"] for p in find(objs, "ValidatingAdmissionPolicy")
                    for v in p.get("spec", {}).get("variables", []) if v.get("name") == "adminGroups"}
    check(len(set(admin_groups.values())) == 1,
          f"{label}: the exception guard and the exempt-label policy name different admin groups: {admin_groups}")
    check("gpu-admission.io/exceptions" in guarded_labels(objs),
          f"{label}: the namespace label gpu-admission.io/exceptions is not kept to admins")


def match_conditions(objs):
    webhooks = {}
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for w in one(objs, kind, "gpu-admission").get("webhooks", []):
            webhooks[w["name"]] = w
    env = celpy.Environment()
    programs = {}
    for name, w in webhooks.items():
        for mc in w.get("matchConditions", []):
            try:
                programs.setdefault(name, []).append((mc["name"], env.program(env.compile(mc["expression"]))))
            except Exception as e:  # a parse error is a finding, not a crash
                check(False, f"{name}: matchCondition {mc['name']}: does not compile: {e}")
    cases = yaml.safe_load(open(cases_file))["cases"]
    passed = failed = 0
    for case in cases:
        name = case["webhook"]
        if name not in webhooks:
            check(False, f"case {case['name']!r}: no webhook {name}")
            failed += 1
            continue
        # request as kube-apiserver shows it; a case may set the user,
        # operation or subresource (default: alice creates the object).
        request = {"operation": "CREATE", "subResource": "",
                   "userInfo": {"username": "alice@example.com", "groups": ["system:authenticated"]}}
        request.update(case.get("request", {}))
        activation = {"object": celpy.json_to_cel(case["object"]),
                      "oldObject": celpy.json_to_cel(case.get("oldObject")),
                      "request": celpy.json_to_cel(request)}
        sent = True
        for mc_name, prog in programs.get(name, []):
            try:
                result = prog.evaluate(activation)
            except Exception as e:
                check(False, f"case {case['name']!r}: {name} {mc_name}: evaluation error: {e}")
                result = False
            if isinstance(result, Exception) or not bool(result):
                sent = False
        ok = sent == case["sent"]
        check(ok, f"case {case['name']!r}: {name} sent={sent}, expected {case['sent']}")
        passed, failed = passed + ok, failed + (not ok)
    print(f"matchConditions: {passed} cases as expected, {failed} not")


def kubelet_volume(path, files, version=0):
    """Lays out files the way the kubelet mounts a ConfigMap or Secret, and
    updates them the way it does: a new timestamped folder, a ..data symlink
    renamed over the old one, top-level symlinks for new keys, the old folder
    removed."""
    stamp = os.path.join(path, f"..2026_01_01_00_00_0{version}.000000001")
    os.makedirs(stamp)
    for key, data in files.items():
        with open(os.path.join(stamp, key), "wb") as f:
            f.write(data)
    old = os.path.realpath(os.path.join(path, "..data")) if version else None
    os.symlink(os.path.basename(stamp), os.path.join(path, "..data_tmp"))
    os.rename(os.path.join(path, "..data_tmp"), os.path.join(path, "..data"))
    for key in files:
        link = os.path.join(path, key)
        if not os.path.islink(link):
            os.symlink(os.path.join("..data", key), link)
    if old:
        shutil.rmtree(old)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServiceConnection(http.client.HTTPSConnection):
    """HTTPS to loopback, verified for the in-cluster Service name."""

    def __init__(self, service_name, port, context):
        super().__init__(service_name, port, context=context, timeout=5)

    def connect(self):
        sock = socket.create_connection(("127.0.0.1", self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


def mutation_smoke(answer, pod):
    """The /mutate answer for a GPU pod: a base64 JSON patch that adds the
    shipped profile's toleration and a required GPU node-affinity term."""
    check(answer.get("patchType") == "JSONPatch", f"server: /mutate patchType is {answer.get('patchType')!r}")
    try:
        ops = json.loads(base64.b64decode(answer.get("patch", ""), validate=True))
    except (ValueError, TypeError) as e:
        check(False, f"server: /mutate patch is not base64 JSON: {e}")
        return
    check(isinstance(ops, list) and all(isinstance(o, dict) and o.get("op") == "add" for o in ops),
          f"server: /mutate patch is not a list of add operations: {str(ops)[:200]}")
    if not isinstance(ops, list):
        return
    values = {o.get("path"): o.get("value") for o in ops if isinstance(o, dict)}
    toleration = {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
    check(values.get("/spec/tolerations") == [toleration],
          f"server: /mutate does not add the toleration sku=gpu:NoSchedule: {str(ops)[:300]}")
    # A missing parent comes whole: the affinity is added in one operation.
    affinity = values.get("/spec/affinity") or {}
    terms = (((affinity.get("nodeAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
             .get("nodeSelectorTerms"))
    check(isinstance(terms, list) and any(
        e.get("key") == "kubernetes.azure.com/accelerator" and e.get("values") == ["nvidia"]
        for t in terms for e in t.get("matchExpressions", [])),
          f"server: /mutate does not require a node with kubernetes.azure.com/accelerator=nvidia: {str(ops)[:300]}")
    check(not any(o.get("path", "").startswith("/spec/containers") for o in ops if isinstance(o, dict)),
          f"server: /mutate changes the containers: {str(ops)[:300]}")


def review(uid, pod):
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "name": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"], "operation": "CREATE",
        "userInfo": {"username": "system:serviceaccount:ml:trainer"}, "object": pod, "oldObject": None,
        "dryRun": False, "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}}


def run_server(objs, binary, run_dir):
    dep = one(objs, "Deployment", "gpu-admission")
    ns = dep["metadata"]["namespace"]
    spec = dep["spec"]["template"]["spec"]
    container = spec["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    local = {name: free_port() for name in ports}
    svc = one(objs, "Service", "gpu-admission")
    service_name = f'{svc["metadata"]["name"]}.{ns}.svc'

    certs = os.path.join(run_dir, "certs")
    made = subprocess.run([binary, "certs", "--out", certs, "--dns", service_name],
                          capture_output=True, timeout=30)
    check(made.returncode == 0, f"gpu-admission certs failed: {made.stderr.decode()[-500:]}")
    if made.returncode != 0:
        return
    volumes = {}
    for v in spec["volumes"]:
        path = os.path.join(run_dir, "volumes", v["name"])
        if "configMap" in v:
            cm = one(objs, "ConfigMap", v["configMap"]["name"])
            files = {k: d.encode() for k, d in cm.get("data", {}).items()}
        else:
            files = {k: open(os.path.join(certs, k), "rb").read() for k in ("tls.crt", "tls.key", "ca.crt")}
        kubelet_volume(path, files)
        volumes[v["name"]] = path
    mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}

    args = []
    for a in container["args"]:
        a = a.replace("$(POD_NAMESPACE)", ns)
        flag, _, value = a.partition("=")
        if flag in ("--listen", "--metrics-listen", "--health-listen"):
            port = int(value.rsplit(":", 1)[1])
            name = next(n for n, p in ports.items() if p == port)
            a = f"{flag}=127.0.0.1:{local[name]}"
        for mount_path, path in mounts.items():
            a = a.replace(mount_path, path)
        args.append(a)
    errors_before = len(errors)
    env = dict(os.environ, **{e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
    # Offline: no kubeconfig or in-cluster config, so no namespace cache talks to a real cluster.
    env["KUBECONFIG"] = os.path.join(run_dir, "no-kubeconfig")
    env.pop("KUBERNETES_SERVICE_HOST", None)
    env.pop("KUBERNETES_SERVICE_PORT", None)
    log = open(os.path.join(run_dir, "server.log"), "wb")
    proc = subprocess.Popen([binary] + args, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        def probe(name):
            get = container[name]["httpGet"]
            url = f'http://127.0.0.1:{local[get["port"]]}{get["path"]}'
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    return r.status
            except urllib.error.HTTPError as e:
                return e.code
            except OSError:
                return None

        deadline = time.monotonic() + 15
        while probe("readinessProbe") != 200 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        check(probe("readinessProbe") == 200, "server: readinessProbe never answered 200 with the Deployment's args")
        check(probe("livenessProbe") == 200, "server: livenessProbe does not answer 200")

        # The mounted ConfigMap must reach the server: with policies in it, some are loaded.
        cm = one(objs, "ConfigMap", next(v["configMap"]["name"] for v in spec["volumes"] if "configMap" in v))
        policies = sum(1 for text in cm.get("data", {}).values() for d in yaml.safe_load_all(text)
                       if isinstance(d, dict) and d.get("kind") == "ValidatingAdmissionPolicy")
        def metric(name):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{local['metrics']}/metrics", timeout=2) as r:
                    text = r.read().decode()
            except OSError:
                return None
            values = [float(line.split()[-1]) for line in text.splitlines() if line.split(" ")[0] == name]
            return values[0] if values else None

        if policies:
            loaded = metric("gpu_admission_policies_loaded")
            check(loaded is not None and loaded > 0,
                  f"server: the policies ConfigMap holds {policies} ValidatingAdmissionPolicy documents, "
                  f"but gpu_admission_policies_loaded is {loaded}")
            # A ConfigMap update that breaks a policy: the kubelet swaps ..data;
            # the server must notice, count a failed reload and keep the last good set.
            failures = metric("gpu_admission_policy_reload_failures_total") or 0
            broken = dict(cm.get("data", {}))
            broken["zz-broken.yaml"] = ("apiVersion: admissionregistration.k8s.io/v1\n"
                                        "kind: ValidatingAdmissionPolicy\nmetadata: {name: zz-broken}\n"
                                        "spec:\n  validations:\n    - expression: 'object.spec.('\n")
            kubelet_volume(volumes["policies"], {k: v.encode() for k, v in broken.items()}, version=1)
            deadline = time.monotonic() + 15
            while (metric("gpu_admission_policy_reload_failures_total") or 0) <= failures \
                    and time.monotonic() < deadline:
                time.sleep(0.2)
            check((metric("gpu_admission_policy_reload_failures_total") or 0) > failures,
                  "server: a broken policy swapped in through ..data did not show in "
                  "gpu_admission_policy_reload_failures_total within 15 s")
            check(metric("gpu_admission_policies_loaded") == loaded,
                  "server: a failed reload changed gpu_admission_policies_loaded (the last good set must stay)")
            check(probe("readinessProbe") == 200, "server: not ready after a failed policy reload")

        ctx = ssl.create_default_context(cafile=os.path.join(certs, "ca.crt"))
        gpu_pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train", "namespace": "ml"},
                   "spec": {"containers": [{"name": "trainer", "image": "busybox",
                                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
        for kind, path in (("MutatingWebhookConfiguration", "/mutate"), ("ValidatingWebhookConfiguration", "/validate")):
            w = one(objs, kind, "gpu-admission")["webhooks"][0]
            svc_port = next(p for p in svc["spec"]["ports"] if p["port"] == w["clientConfig"]["service"].get("port", 443))
            uid = f"smoke-{path[1:]}"
            try:
                conn = ServiceConnection(service_name, local[svc_port["targetPort"]], ctx)
                conn.request("POST", f'{w["clientConfig"]["service"]["path"]}?timeout={w["timeoutSeconds"]}s',
                             body=json.dumps(review(uid, gpu_pod)), headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                body = json.loads(resp.read() or b"{}")
                conn.close()
                answer = body.get("response", {})
                check(resp.status == 200 and answer.get("uid") == uid and answer.get("allowed") is True,
                      f"server: {path} over TLS as {service_name}: expected HTTP 200 allowing the GPU pod, "
                      f"got HTTP {resp.status}, {str(body)[:200]}")
                if path == "/mutate":
                    mutation_smoke(answer, gpu_pod)
                else:
                    check("patch" not in answer, f"server: /validate answered with a patch: {str(answer)[:200]}")
            except (OSError, ssl.SSLError, ValueError) as e:
                check(False, f"server: {path} over TLS as {service_name}: {e}")

        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=min(15, spec.get("terminationGracePeriodSeconds", 30)))
        except subprocess.TimeoutExpired:
            code = None
        check(code == 0, f"server: exit status {code} after SIGTERM (expected 0 within the grace period)")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    if len(errors) > errors_before:
        tail = open(os.path.join(run_dir, "server.log"), "rb").read().decode(errors="replace")[-1500:]
        print("server log (last lines):\n" + tail)
    print(f"server: ran {os.path.basename(binary)} with the Deployment's args, mounts and probes")


base, overlay, report = load(base_file), load(overlay_file), load(report_file)
schemas(base, BASE)
schemas(overlay, CM)
schemas(report, REPORT)
ns = references(base, BASE)
references(overlay, CM)
references(report, REPORT)
report_overlay(base, report, ns)
checked = [(base, BASE), (overlay, CM), (report, REPORT)]
# The self-managed-certs overlay (kustomize only; a chart's renders come
# as extra files).
if self_managed_file != "-":
    self_managed = load(self_managed_file)
    schemas(self_managed, "self-managed-certs overlay")
    references(self_managed, "self-managed-certs overlay")
    self_managed_overlay(base, self_managed, ns)
    checked.append((self_managed, "self-managed-certs overlay"))
for objs, label in checked:
    network_policy(objs, label)
    shutdown_and_priority(objs, label)
    exceptions(objs, label)
    budgets(objs, label)
check(not any(w.get("clientConfig", {}).get("caBundle")
              for o in base for w in o.get("webhooks", [])), f"{BASE}: caBundle is filled by install-certs.sh, not committed")
check(find(base, "Secret") == [], f"{BASE}: the TLS Secret is never rendered from the repository")
cert_manager(overlay, CM, ns)
skipped = len(find(overlay, "Issuer")) + len(find(overlay, "Certificate"))
print(f"schemas: Kubernetes {', '.join(versions)}; {skipped} cert-manager objects checked structurally (no schema offline)")
match_conditions(base)
for path in extra_files:
    objs, where = load(path), f"{source}: {os.path.basename(path)[:-5]}"
    schemas(objs, where)
    references(objs, where)
    network_policy(objs, where)
    shutdown_and_priority(objs, where)
    if os.path.basename(path) == "openreports.yaml":
        report_overlay(base, objs, ns, where)
    print(f"{where}: {len(objs)} objects checked")
if binary:
    run_server(base, binary, run_dir)
else:
    print("server: no gpu-admission binary built (cargo build, or set GPU_ADMISSION): not run")
for e in errors:
    print(f"FAIL {e}")
print(f"deploy checks: {checks - len(errors)} ok, {len(errors)} failed")
sys.exit(1 if errors else 0)
EOF
binary="${GPU_ADMISSION:-}"
if [[ -z "$binary" ]]; then
  for candidate in "$root/target/debug/gpu-admission" "$root/target/release/gpu-admission"; do
    if [[ -x "$candidate" ]]; then binary="$candidate"; break; fi
  done
fi
if [[ -n "$binary" ]] && ! "$binary" serve --help 2> /dev/null | grep -q -- --tls-cert; then
  echo "$binary has no 'serve --tls-cert': not running it"
  binary=""
fi

self_managed="-"
if [[ -z "$rendered" ]]; then self_managed="$work/self-managed-certs.yaml"; fi
"$python" "$work/check.py" "$work/base.yaml" "$work/cert-manager.yaml" \
  "$root/deploy/tests/match-conditions.yaml" "$k8s_versions" "$binary" "$work/run" "$work/report.yaml" \
  "$self_managed" "$label" ${extra[@]+"${extra[@]}"}
