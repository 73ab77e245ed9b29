//! `gpu-admission audit` over a `kubectl get -o json` List: violations per
//! policy and namespace, the GPUs the violating objects hold, and the
//! PolicyReport form.
use gpu_admission::admission::Admission;
use gpu_admission::audit::{self, SummaryRow};
use gpu_admission::bundle::{self, PolicySource};
use gpu_admission::k8s::namespaces::StaticNamespaces;
use gpu_admission::offline::read_manifest;
use std::path::Path;
use std::sync::Arc;

fn fixture(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/audit")
        .join(path)
}

fn run() -> audit::Report {
    let loaded = bundle::load(&PolicySource::Dir(fixture("policies"))).unwrap();
    let admission = Admission::new(loaded.bundle, Arc::new(StaticNamespaces::new()));
    let objects = read_manifest(&fixture("cluster-list.json")).unwrap();
    audit::audit(&admission, &objects)
}

fn row(
    policy: &str,
    namespace: &str,
    action: &'static str,
    violations: usize,
    gpus: i64,
) -> SummaryRow {
    SummaryRow {
        policy: policy.into(),
        namespace: namespace.into(),
        action,
        violations,
        gpus,
    }
}

#[test]
fn summary_counts_violations_and_the_gpus_they_hold() {
    let report = run();
    assert_eq!(report.objects, 8);
    // The ReplicaSet and its pod are judged through their Deployment.
    assert_eq!(report.evaluated, 6);
    assert_eq!(
        audit::summary(&report),
        vec![
            // trainer holds 4; the Succeeded pod holds none.
            row("gpu-max-2", "ml", "deny", 2, 4),
            // 1 + 2 from running notebooks, 0 from the finished pod.
            row("no-keepalive", "ml", "warn", 3, 3),
            // A Deployment of 3 replicas at 1 GPU each.
            row("no-keepalive", "serving", "warn", 1, 3),
        ]
    );
    let text = audit::render_text(&report);
    assert!(
        text.contains("6 GPUs held by 4 objects violating no-keepalive"),
        "{text}"
    );
    assert!(
        text.contains("Deployment serving/warm-pool: [warn] Deployment warm-pool:"),
        "{text}"
    );
    assert_eq!(report.passed.get("apps"), Some(&1));
}

#[test]
fn policy_reports_per_namespace() {
    let report = run();
    let docs = audit::policy_reports(&report, 1_800_000_000);
    let ml = docs
        .iter()
        .find(|d| d["metadata"]["namespace"] == "ml")
        .expect("a report for ml");
    assert_eq!(ml["apiVersion"], "wgpolicyk8s.io/v1alpha2");
    assert_eq!(ml["kind"], "PolicyReport");
    assert_eq!(ml["summary"]["fail"], 2);
    assert_eq!(ml["summary"]["warn"], 3);
    let results = ml["results"].as_array().unwrap();
    let trainer = results
        .iter()
        .find(|r| r["resources"][0]["name"] == "trainer")
        .unwrap();
    assert_eq!(trainer["result"], "fail");
    assert_eq!(trainer["policy"], "gpu-max-2");
    assert_eq!(trainer["properties"]["gpus"], "4");
    assert_eq!(trainer["timestamp"]["seconds"], 1_800_000_000);
    let apps = docs
        .iter()
        .find(|d| d["metadata"]["namespace"] == "apps")
        .unwrap();
    assert_eq!(apps["summary"]["pass"], 1);
    assert!(apps["results"].as_array().unwrap().is_empty());
}

/// A workload custom resource in the dump holds the GPUs of all its
/// templates: replicas × GPUs per pod over its worker groups.
#[test]
fn workload_custom_resources_count_every_template() {
    let loaded = bundle::load(&PolicySource::Dir(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("policies"),
    ))
    .unwrap();
    let admission = Admission::new(loaded.bundle, Arc::new(StaticNamespaces::new()));
    let worker = |group: &str, replicas: i64, gpus: &str| {
        serde_json::json!({"groupName": group, "replicas": replicas, "rayStartParams": {},
            "template": {"spec": {"containers": [{"name": "ray-worker", "image": "rayproject/ray:2.41.0-gpu",
                "command": ["sleep", "infinity"],
                "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}})
    };
    let rc = serde_json::json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "rc", "namespace": "llm", "uid": "rc-1"},
        "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [
                {"name": "ray-head", "image": "rayproject/ray:2.41.0"}]}}},
            "workerGroupSpecs": [worker("a", 2, "1"), worker("b", 3, "2")]}});
    let report = audit::audit(&admission, &[rc]);
    assert_eq!(report.gpus_held, 2 + 3 * 2);
    assert_eq!(
        report.gpus_in_violation, 8,
        "sleeping workers hold their GPUs"
    );
    let finding = report
        .findings
        .iter()
        .find(|f| f.policy == "gpu-keep-alive")
        .expect("keep-alive finding");
    assert_eq!((finding.kind.as_str(), finding.gpus), ("RayCluster", 8));
    assert!(finding
        .message
        .contains("RayCluster llm/rc workerGroupSpecs[a]: "));
}
