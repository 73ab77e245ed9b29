//! Structure of the shipped policy library: every policy has a binding, its
//! params exist, its CEL parses, and its tests cover a denial (or warning)
//! and an allowed case.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kube_cel::cel::Program;
use serde_json::Value;

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

#[test]
fn every_policy_is_tested_denying_and_allowing() {
    let docs = library();
    let tests: Vec<(PathBuf, Value)> = yaml_files(&policies_dir().join("tests"))
        .into_iter()
        .flat_map(|f| documents(&f).into_iter().map(move |d| (f.clone(), d)))
        .collect();
    let mut files_with_allowed: BTreeSet<PathBuf> = BTreeSet::new();
    let mut flagged: Vec<(String, PathBuf)> = Vec::new();
    for (file, t) in &tests {
        assert_eq!(
            t["apiVersion"],
            "gpu-admission.io/v1alpha1",
            "{}",
            file.display()
        );
        assert_eq!(t["kind"], "PolicyTest", "{}", file.display());
        for case in t["spec"]["cases"].as_array().unwrap() {
            assert!(case["name"].is_string(), "{}", file.display());
            assert!(
                case["object"].is_object(),
                "{}: {}",
                file.display(),
                case["name"]
            );
            let expect = &case["expect"];
            if expect["allowed"] == true {
                files_with_allowed.insert(file.clone());
            }
            for key in ["denied", "warned"] {
                for s in expect[key].as_array().into_iter().flatten() {
                    if let Some(policy) = s["policy"].as_str() {
                        flagged.push((policy.to_string(), file.clone()));
                    }
                }
            }
        }
    }
    for p in of_kind(&docs, "ValidatingAdmissionPolicy") {
        let files: Vec<&PathBuf> = flagged
            .iter()
            .filter(|(policy, _)| policy == name(p))
            .map(|(_, f)| f)
            .collect();
        assert!(!files.is_empty(), "{}: no case it denies or warns", name(p));
        assert!(
            files.iter().any(|f| files_with_allowed.contains(*f)),
            "{}: no allowed case next to its denials",
            name(p)
        );
    }
}

/// `gpu-admission test policies/`, as CI runs it: every case passes.
#[test]
fn shipped_policy_tests_pass() {
    let args = gpu_admission::cli::test::TestArgs {
        dir: policies_dir(),
        policies: None,
        catalog: None,
        verbose: false,
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
    assert_eq!(loaded.bundle.placement.len(), 2);
}

/// docs/denials.md shows, for each manifest it lists, the exact message the
/// webhook denies it with: the examples stay true to the shipped policies.
#[test]
fn denials_doc_matches_the_policies() {
    use gpu_admission::admission::Admission;
    use gpu_admission::namespaces::StaticNamespaces;
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
    assert_eq!(sections.len(), 5, "five mistakes");
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
