//! The kinds the webhook is sent and the audit may read have their own
//! metrics label, and the audit reads every kind its ClusterRole lets it
//! list: a kind added to the deployment is not silently counted as `other`
//! or left out of the audit.
use gpu_admission::admission::METRIC_KINDS;
use gpu_admission::bundle::{self, PolicySource};
use gpu_admission::inventory::{AUDITED, BUDGETS, DRA_DEVICES};
use gpu_admission::review::plural_resource;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

fn documents(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| {
            serde_json::to_value(<serde_yaml::Value as serde::Deserialize>::deserialize(d).unwrap())
                .unwrap()
        })
        .filter(|v| !v.is_null())
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// (group, resource) of every rule in `rules`.
fn resources(rules: &Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for rule in rules.as_array().into_iter().flatten() {
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                out.insert((group.clone(), resource));
            }
        }
    }
    out
}

fn kind_of(resource: &str) -> Option<&'static str> {
    METRIC_KINDS
        .iter()
        .copied()
        .find(|k| plural_resource(k) == resource)
}

#[test]
fn every_kind_the_webhooks_are_sent_has_its_own_metrics_label() {
    let mut sent = BTreeSet::new();
    for file in [
        "deploy/base/validating-webhook.yaml",
        "deploy/base/mutating-webhook.yaml",
    ] {
        for doc in documents(file) {
            for webhook in doc["webhooks"].as_array().into_iter().flatten() {
                sent.extend(resources(&webhook["rules"]));
            }
        }
    }
    assert!(sent.contains(&("kaito.sh".into(), "inferencesets".into())));
    for (group, resource) in &sent {
        // A subresource request (pods/ephemeralcontainers) carries its
        // object's kind.
        let resource = resource.split('/').next().unwrap_or_default();
        assert!(
            kind_of(resource).is_some(),
            "{resource}.{group} is sent to the webhook but has no METRIC_KINDS entry"
        );
    }
}

#[test]
fn the_audit_reads_every_kind_its_cluster_role_may_list() {
    let role = documents("deploy/base/rbac.yaml")
        .into_iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "gpu-admission-audit")
        .expect("ClusterRole gpu-admission-audit");
    let listable: BTreeSet<(String, String)> = resources(&role["rules"])
        .into_iter()
        .filter(|(g, r)| !(g.is_empty() && r == "namespaces"))
        .collect();
    // Nodes are read besides the judged kinds, for the GPU pools, and
    // GpuPolicyExceptions, which the judging honours.
    let nodes = (String::new(), "nodes".to_string());
    let exceptions = (
        "gpu-admission.io".to_string(),
        "gpupolicyexceptions".to_string(),
    );
    assert!(listable.contains(&nodes), "the audit role lists nodes");
    assert!(
        listable.contains(&exceptions),
        "the audit role lists GpuPolicyExceptions"
    );
    // GpuBudgets too: what namespaces hold against them is reported.
    let budgets = (BUDGETS.0.to_string(), plural_resource(BUDGETS.1));
    assert!(
        listable.contains(&budgets),
        "the audit role lists GpuBudgets"
    );
    // DeviceClasses and ResourceSlices are read beside them too: the GPUs
    // DRA serves on nodes.
    let devices: Vec<(String, String)> = DRA_DEVICES
        .iter()
        .map(|(g, k)| (g.to_string(), plural_resource(k)))
        .collect();
    for kind in &devices {
        assert!(listable.contains(kind), "the audit role lists {kind:?}");
    }
    let listable: BTreeSet<(String, String)> = listable
        .into_iter()
        .filter(|k| *k != nodes && *k != exceptions && *k != budgets && !devices.contains(k))
        .collect();
    // The built-in kinds, and the workload custom resources of the shipped
    // PodTemplateSources (which give their resource names).
    let shipped = bundle::load(&PolicySource::Embedded).expect("shipped policies load");
    let sources = shipped.bundle.policies.template_sources();
    let audited: BTreeSet<(String, String)> = AUDITED
        .iter()
        .map(|(g, k)| (g.to_string(), plural_resource(k)))
        .chain(
            sources
                .custom()
                .iter()
                .map(|s| (s.group.clone(), s.resource.clone())),
        )
        .collect();
    assert_eq!(
        audited, listable,
        "AUDITED and the audit ClusterRole differ"
    );
    for kind in AUDITED
        .iter()
        .map(|(_, k)| *k)
        .chain(sources.custom().iter().map(|s| s.kind.as_str()))
    {
        assert!(METRIC_KINDS.contains(&kind), "{kind} has no metrics label");
    }
}
