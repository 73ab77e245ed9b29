//! Structure of the shipped policy library: every policy has a binding, its
//! params exist, its CEL parses, and its tests cover a denial (or warning)
//! and an allowed case on every kind of object it judges.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kube_cel::cel::Program;
use serde_json::{json, Value};

fn policies_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("policies")
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| {
            let v: serde_yaml::Value = serde::Deserialize::deserialize(d)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            serde_json::to_value(v).unwrap()
        })
        .filter(|v| !v.is_null())
        .collect()
}

fn library() -> Vec<Value> {
    yaml_files(&policies_dir())
        .iter()
        .flat_map(|p| documents(p))
        .collect()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn name(v: &Value) -> &str {
    v["metadata"]["name"].as_str().unwrap()
}

#[test]
fn every_document_is_a_known_kind() {
    for doc in library() {
        let kind = (doc["apiVersion"].as_str(), doc["kind"].as_str());
        assert!(
            matches!(
                kind,
                (
                    Some("admissionregistration.k8s.io/v1"),
                    Some("ValidatingAdmissionPolicy" | "ValidatingAdmissionPolicyBinding")
                ) | (Some("v1"), Some("ConfigMap"))
                    | (Some("gpu-admission.io/v1alpha1"), Some("PodTemplateSource"))
            ),
            "unexpected document {kind:?}"
        );
    }
}

#[test]
fn every_policy_has_one_binding_and_its_params() {
    let docs = library();
    let policies = of_kind(&docs, "ValidatingAdmissionPolicy");
    let bindings = of_kind(&docs, "ValidatingAdmissionPolicyBinding");
    let configmaps = of_kind(&docs, "ConfigMap");
    assert!(policies.len() >= 15, "{} policies", policies.len());
    for p in &policies {
        let mine: Vec<_> = bindings
            .iter()
            .filter(|b| b["spec"]["policyName"] == name(p))
            .collect();
        assert_eq!(mine.len(), 1, "{}: bindings", name(p));
        let binding = mine[0];
        let actions = binding["spec"]["validationActions"].as_array().unwrap();
        assert!(!actions.is_empty(), "{}", name(p));
        match binding["spec"].get("paramRef") {
            Some(r) => {
                assert_eq!(p["spec"]["paramKind"]["kind"], "ConfigMap", "{}", name(p));
                assert!(
                    configmaps.iter().any(|c| c["metadata"]["name"] == r["name"]
                        && c["metadata"]["namespace"] == r["namespace"]),
                    "{}: params {r} not shipped",
                    name(p)
                );
            }
            None => assert!(p["spec"].get("paramKind").is_none(), "{}", name(p)),
        }
    }
    for b in &bindings {
        assert!(
            policies
                .iter()
                .any(|p| name(p) == b["spec"]["policyName"].as_str().unwrap()),
            "binding {} names no policy",
            name(b)
        );
    }
}

/// Every expression of every policy, with where it sits.
fn expressions(policy: &Value) -> Vec<(String, String)> {
    let spec = &policy["spec"];
    let mut out = Vec::new();
    for section in [
        "matchConditions",
        "variables",
        "validations",
        "auditAnnotations",
    ] {
        for (i, item) in spec[section].as_array().into_iter().flatten().enumerate() {
            for field in ["expression", "messageExpression", "valueExpression"] {
                if let Some(e) = item[field].as_str() {
                    out.push((
                        format!("{}.{section}[{i}].{field}", name(policy)),
                        e.to_string(),
                    ));
                }
            }
        }
    }
    out
}

#[test]
fn every_expression_parses() {
    let docs = library();
    for p in of_kind(&docs, "ValidatingAdmissionPolicy") {
        let exprs = expressions(p);
        assert!(!exprs.is_empty(), "{}", name(p));
        for (at, e) in exprs {
            if let Err(err) = Program::compile(&e) {
                panic!("{at}: {err}\n{e}");
            }
        }
    }
}

#[test]
fn messages_are_one_line() {
    let docs = library();
    for p in of_kind(&docs, "ValidatingAdmissionPolicy") {
        for v in p["spec"]["validations"].as_array().unwrap() {
            let text = v["message"]
                .as_str()
                .or(v["messageExpression"].as_str())
                .unwrap();
            assert!(!text.contains('\n'), "{}: {text:?}", name(p));
        }
    }
}

/// The kinds a policy's resourceRules can name, by (API group, resource).
const KINDS: &[(&str, &str, &str)] = &[
    ("", "pods", "Pod"),
    ("batch", "jobs", "Job"),
    ("batch", "cronjobs", "CronJob"),
    ("argoproj.io", "cronworkflows", "CronWorkflow"),
    ("kaito.sh", "workspaces", "Workspace"),
    ("kaito.sh", "inferencesets", "InferenceSet"),
    ("kaito.sh", "ragengines", "RAGEngine"),
    ("karpenter.sh", "nodepools", "NodePool"),
    ("kueue.x-k8s.io", "resourceflavors", "ResourceFlavor"),
    (
        "containerservice.azure.com",
        "managedclustersagentpools",
        "ManagedClustersAgentPool",
    ),
    (
        "containerservice.azure.com",
        "managedclusters",
        "ManagedCluster",
    ),
    (
        "infrastructure.cluster.x-k8s.io",
        "azuremanagedmachinepools",
        "AzureManagedMachinePool",
    ),
    (
        "infrastructure.cluster.x-k8s.io",
        "azureasomanagedmachinepools",
        "AzureASOManagedMachinePool",
    ),
    (
        "infrastructure.cluster.x-k8s.io",
        "azureasomanagedcontrolplanes",
        "AzureASOManagedControlPlane",
    ),
    ("resource.k8s.io", "resourceclaims", "ResourceClaim"),
    (
        "resource.k8s.io",
        "resourceclaimtemplates",
        "ResourceClaimTemplate",
    ),
];

/// The controllers whose pod templates the engine judges with pod policies.
const CONTROLLERS: &[(&str, &str)] = &[
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
    ("apps/v1", "DaemonSet"),
    ("apps/v1", "ReplicaSet"),
    ("v1", "ReplicationController"),
    ("batch/v1", "Job"),
    ("batch/v1", "CronJob"),
];

/// (policy, kind) pairs a policy judges but by design never flags, with
/// why. They still need a case showing the policy quiet on that kind, and
/// one flagging it makes the entry stale (the test then fails).
const NEVER_FLAGGED: &[(&str, &str, &str)] = &[
    (
        "gpu-tolerate-all",
        "DaemonSet",
        "its matchConditions leave DaemonSet pods out: node agents must run on every node",
    ),
    (
        "gpu-node-isolation",
        "DaemonSet",
        "a DaemonSet runs on every node by design: gpu-node-isolation-daemonset warns instead",
    ),
    (
        "gpu-node-isolation-daemonset",
        "Pod",
        "it warns on a DaemonSet's template only, never on the pods of any controller",
    ),
    (
        "gpu-node-isolation-daemonset",
        "Deployment",
        "gpu-node-isolation denies these; this policy judges DaemonSets only",
    ),
    (
        "gpu-node-isolation-daemonset",
        "StatefulSet",
        "gpu-node-isolation denies these; this policy judges DaemonSets only",
    ),
    (
        "gpu-node-isolation-daemonset",
        "ReplicaSet",
        "gpu-node-isolation denies these; this policy judges DaemonSets only",
    ),
    (
        "gpu-node-isolation-daemonset",
        "ReplicationController",
        "gpu-node-isolation denies these; this policy judges DaemonSets only",
    ),
    (
        "gpu-node-isolation-daemonset",
        "Job",
        "gpu-node-isolation denies these; this policy judges DaemonSets only",
    ),
    (
        "gpu-node-isolation-daemonset",
        "CronJob",
        "gpu-node-isolation denies these; this policy judges DaemonSets only",
    ),
];

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// Whether `rule` selects (group, resource) for `operation`.
fn rule_selects(rule: &Value, group: &str, resource: &str, operation: &str) -> bool {
    let any = |list: Vec<&str>, x: &str| list.iter().any(|v| *v == "*" || *v == x);
    any(strings(&rule["apiGroups"]), group)
        && any(strings(&rule["resources"]), resource)
        && any(strings(&rule["operations"]), operation)
}

/// The kinds `policy` judges: those its resourceRules name, and the pod
/// controllers when it judges pods (the engine runs pod policies on a pod
/// built from each controller's template), each with the operations it
/// judges them on.
fn judged_kinds(policy: &Value) -> BTreeSet<&'static str> {
    let rules = policy["spec"]["matchConstraints"]["resourceRules"]
        .as_array()
        .unwrap_or_else(|| panic!("{}: no resourceRules", name(policy)));
    let mut kinds = BTreeSet::new();
    for rule in rules {
        for resource in strings(&rule["resources"]) {
            // A subresource (pods/ephemeralcontainers) is judged on its object's kind.
            let base = resource.split('/').next().unwrap_or_default();
            let known = KINDS
                .iter()
                .filter(|(g, r, _)| *r == base && strings(&rule["apiGroups"]).contains(g));
            let mut found = false;
            for (_, _, kind) in known {
                found = true;
                kinds.insert(*kind);
                if *kind == "Pod" {
                    kinds.extend(CONTROLLERS.iter().map(|(_, k)| *k));
                }
            }
            assert!(
                found,
                "{}: resource {resource} of {:?} is not in KINDS",
                name(policy),
                strings(&rule["apiGroups"])
            );
        }
    }
    kinds
}

/// Whether a case's object is judged by `policy`, directly or through its
/// pod template.
fn case_is_judged_by(policy: &Value, object: &Value, old: Option<&Value>, operation: &str) -> bool {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let group = group_of(api_version);
    let resource = gpu_admission::review::plural_resource(kind);
    let rules = policy["spec"]["matchConstraints"]["resourceRules"]
        .as_array()
        .unwrap();
    // A controller's template is judged as a pod CREATE, on the
    // controller's CREATE and on an UPDATE that changes the template.
    let template_judged = gpu_admission::k8s::workloads::pod_template(object).is_some()
        && (operation == "CREATE"
            || (operation == "UPDATE"
                && gpu_admission::k8s::workloads::template_changed(object, old)));
    rules.iter().any(|r| {
        rule_selects(r, group, &resource, operation)
            || (template_judged && rule_selects(r, "", "pods", "CREATE"))
    })
}

#[test]
fn controllers_are_the_ones_the_engine_judges() {
    for (api_version, kind) in CONTROLLERS {
        let template = json!({"metadata": {}, "spec": {"containers": []}});
        let object = if *kind == "CronJob" {
            json!({"apiVersion": api_version, "kind": kind,
                   "spec": {"jobTemplate": {"spec": {"template": template}}}})
        } else {
            json!({"apiVersion": api_version, "kind": kind, "spec": {"template": template}})
        };
        assert!(
            gpu_admission::k8s::workloads::pod_template(&object).is_some(),
            "{kind}"
        );
    }
    for (_, resource, kind) in KINDS {
        assert_eq!(gpu_admission::review::plural_resource(kind), *resource);
    }
}

/// For every policy and every kind it judges (its resourceRules, and the
/// pod controllers for pod policies), the shipped tests hold a case of that
/// kind where the policy denies or warns (unless NEVER_FLAGGED says it
/// cannot), and one where it is shown not to:
/// the case names it in `notPolicies`, leaves it out of `onlyPolicies`, or
/// expects `allowed: true` (a denying policy) or `noWarnings` (a warning
/// one).
#[test]
fn every_policy_is_tested_denying_and_allowing_on_every_kind_it_judges() {
    let docs = library();
    let tests: Vec<(PathBuf, Value)> = yaml_files(&policies_dir().join("tests"))
        .into_iter()
        .flat_map(|f| documents(&f).into_iter().map(move |d| (f.clone(), d)))
        .collect();
    let bindings = of_kind(&docs, "ValidatingAdmissionPolicyBinding");
    let mut gaps = Vec::new();
    for p in of_kind(&docs, "ValidatingAdmissionPolicy") {
        let policy = name(p);
        let actions: Vec<&str> = bindings
            .iter()
            .filter(|b| b["spec"]["policyName"] == policy)
            .flat_map(|b| strings(&b["spec"]["validationActions"]))
            .collect();
        let mut denied: BTreeSet<&str> = BTreeSet::new();
        let mut allowed: BTreeSet<&str> = BTreeSet::new();
        for (file, t) in &tests {
            assert_eq!(t["kind"], "PolicyTest", "{}", file.display());
            for case in t["spec"]["cases"].as_array().unwrap() {
                let object = &case["object"];
                assert!(
                    object.is_object(),
                    "{}: {}: inline object",
                    file.display(),
                    case["name"]
                );
                let operation = case["operation"].as_str().unwrap_or("CREATE");
                if !case_is_judged_by(p, object, case.get("oldObject"), operation) {
                    continue;
                }
                let kind = object["kind"].as_str().unwrap();
                let Some(kind) = KINDS
                    .iter()
                    .map(|(_, _, k)| *k)
                    .chain(CONTROLLERS.iter().map(|(_, k)| *k))
                    .find(|k| *k == kind)
                else {
                    continue;
                };
                let expect = &case["expect"];
                let names = |key: &str| -> Vec<&str> {
                    expect[key]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|e| e["policy"].as_str())
                        .collect()
                };
                if names("denied").contains(&policy) || names("warned").contains(&policy) {
                    denied.insert(kind);
                }
                let shown_quiet = strings(&expect["notPolicies"]).contains(&policy)
                    || (expect["onlyPolicies"].is_array()
                        && !strings(&expect["onlyPolicies"]).contains(&policy))
                    || (actions.contains(&"Deny") && expect["allowed"] == true)
                    || (!actions.contains(&"Deny")
                        && actions.contains(&"Warn")
                        && expect["noWarnings"] == true);
                if shown_quiet {
                    allowed.insert(kind);
                }
            }
        }
        let kinds = judged_kinds(p);
        for (_, kind, why) in NEVER_FLAGGED.iter().filter(|(n, _, _)| *n == policy) {
            assert!(
                kinds.contains(kind),
                "NEVER_FLAGGED: {policy} does not judge {kind}"
            );
            assert!(
                !denied.contains(kind),
                "NEVER_FLAGGED says {policy} never flags a {kind} ({why}), but a case expects it to"
            );
        }
        for kind in kinds {
            let never = NEVER_FLAGGED
                .iter()
                .any(|(n, k, _)| *n == policy && *k == kind);
            if !denied.contains(kind) && !never {
                gaps.push(format!("({policy}, {kind}, missing deny)"));
            }
            if !allowed.contains(kind) {
                gaps.push(format!("({policy}, {kind}, missing allow)"));
            }
        }
    }
    assert!(
        gaps.is_empty(),
        "{} coverage gap(s):\n{}",
        gaps.len(),
        gaps.join("\n")
    );
}

/// `gpu-admission test policies/`, as CI runs it: every case passes.
#[test]
fn shipped_policy_tests_pass() {
    let args = gpu_admission::cli::test::TestArgs {
        dir: policies_dir(),
        policies: None,
        catalog: None,
        verbose: false,
        authz: None,
    };
    let summary = gpu_admission::cli::test::run_tests(&args).unwrap();
    println!("{}", summary.report);
    assert_eq!(summary.failed, 0, "{}", summary.report);
    assert!(summary.passed >= 60, "{}", summary.report);
}

/// The built-in policy set (what `serve` uses without --policies) is the
/// same folder, and it loads.
#[test]
fn embedded_policies_load() {
    let loaded =
        gpu_admission::bundle::load(&gpu_admission::bundle::PolicySource::Embedded).unwrap();
    let from_dir =
        gpu_admission::bundle::load(&gpu_admission::bundle::PolicySource::Dir(policies_dir()))
            .unwrap();
    assert_eq!(loaded.bundle.policies.len(), from_dir.bundle.policies.len());
    assert_eq!(
        loaded.bundle.placement.len(),
        from_dir.bundle.placement.len()
    );
    assert!(loaded.bundle.policies.len() >= 15);
    assert_eq!(loaded.bundle.placement.len(), 3);
}

/// docs/denials.md shows, for each manifest it lists, the exact message the
/// webhook denies it with: the examples stay true to the shipped policies.
#[test]
fn denials_doc_matches_the_policies() {
    use gpu_admission::admission::Admission;
    use gpu_admission::k8s::namespaces::StaticNamespaces;
    use gpu_admission::offline;
    use gpu_admission::review::Operation;
    use std::sync::Arc;

    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/denials.md"))
            .unwrap();
    let loaded =
        gpu_admission::bundle::load(&gpu_admission::bundle::PolicySource::Dir(policies_dir()))
            .unwrap();
    let admission = Admission::new(loaded.bundle, Arc::new(StaticNamespaces::new()));
    let webhooks = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/base/validating-webhook.yaml"),
    )
    .unwrap();
    let sections: Vec<&str> = doc.split("\n## ").skip(1).collect();
    assert_eq!(sections.len(), 10, "ten mistakes");
    for section in sections {
        let yaml = section
            .split("```yaml\n")
            .nth(1)
            .and_then(|s| s.split("\n```").next())
            .unwrap_or_else(|| panic!("no manifest in: {section}"));
        let console = section
            .split("```console\n")
            .nth(1)
            .and_then(|s| s.split("\n```").next())
            .unwrap_or_else(|| panic!("no kubectl output in: {section}"));
        let shown = console
            .split_once("denied the request: ")
            .unwrap_or_else(|| panic!("no denial in: {console}"))
            .1;
        let webhook = console
            .split("admission webhook \"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap();
        assert!(
            webhooks.contains(&format!("- name: {webhook}\n")),
            "{webhook} is not a registered webhook"
        );
        let objects = offline::parse_manifest(yaml).unwrap();
        assert_eq!(objects.len(), 1);
        let req = offline::build_request(objects[0].clone(), None, Operation::Create, None);
        // kubectl prints the status reason the webhook answers with.
        let reason = admission.validate(&req).response.reason.unwrap_or_default();
        assert!(
            console.contains(&format!("Error from server ({reason}): ")),
            "kubectl shows reason {reason}: {console}"
        );
        let got = offline::evaluate(&admission, req);
        assert!(!got.allowed, "{yaml}");
        assert_eq!(shown, got.denials.join("\n"), "{yaml}");
        for line in &got.denials {
            assert!(line.contains("; "), "says what to change: {line}");
        }
    }
}
