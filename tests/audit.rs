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
            // A Deployment of 3 replicas at 1 GPU each, counted through
            // its pods read: one Running; the two with no pod are
            // requested, not placed (its status says 3 ready).
            row("no-keepalive", "serving", "warn", 1, 1),
        ]
    );
    let warm = report
        .findings
        .iter()
        .find(|f| f.name == "warm-pool")
        .unwrap();
    assert_eq!((warm.gpus, warm.gpus_pending), (1, 2));
    let text = audit::render_text(&report);
    assert!(
        text.contains("4 GPUs held by 4 objects violating no-keepalive"),
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
    let docs = audit::policy_reports(&report, 1_800_000_000, Default::default());
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

/// GpuPolicyExceptions judged at a fixed time: what one lets through is
/// not a finding (shown and counted apart), one ending within a week is
/// listed first, an expired one lets nothing through and is flagged.
#[test]
fn exceptions_let_findings_through_and_are_listed_with_their_state() {
    use gpu_admission::exceptions::StaticExceptions;
    let loaded = bundle::load(&PolicySource::Dir(fixture("policies"))).unwrap();
    let exception = |text: &str| {
        let value: serde_json::Value = serde_yaml::from_str(text).unwrap();
        Arc::new(loaded.bundle.policies.read_exception(&value).unwrap())
    };
    let notebooks = exception(
        "apiVersion: gpu-admission.io/v1alpha1\nkind: GpuPolicyException\nmetadata: {name: notebooks, namespace: ml}\nspec:\n  policies: [no-keepalive]\n  match: {kinds: [Pod], names: [\"idle-notebook*\"]}\n  reason: course notebooks kept warm until the exam\n  expiresAt: \"2026-06-04T00:00:00Z\"\n  requestedBy: alice@example.com\n",
    );
    let pool = exception(
        "apiVersion: gpu-admission.io/v1alpha1\nkind: GpuPolicyException\nmetadata: {name: warm-pool, namespace: serving}\nspec:\n  policies: [\"*\"]\n  match: {selector: {matchLabels: {app: warm-pool}}}\n  reason: launch week\n  expiresAt: \"2026-05-01T00:00:00Z\"\n",
    );
    let at = gpu_admission::exceptions::parse_time("2026-06-01T00:00:00Z").unwrap();
    let lookup = StaticExceptions::new(vec![pool, notebooks]).at(at);
    let admission = Admission::new(loaded.bundle, Arc::new(StaticNamespaces::new()))
        .with_exceptions(Arc::new(lookup));
    let objects = read_manifest(&fixture("cluster-list.json")).unwrap();
    let report = audit::audit(&admission, &objects);

    let excepted: Vec<(&str, &str, &str, &str)> = (report.excepted.iter())
        .map(|e| {
            (
                e.name.as_str(),
                e.policy.as_str(),
                e.action,
                e.exception.as_str(),
            )
        })
        .collect();
    assert_eq!(
        excepted,
        [
            ("idle-notebook", "no-keepalive", "warn", "ml/notebooks"),
            ("idle-notebook-2", "no-keepalive", "warn", "ml/notebooks"),
        ]
    );
    assert_eq!(report.findings.len(), 4, "{:?}", report.findings);
    assert!(report
        .findings
        .iter()
        .all(|f| !f.name.starts_with("idle-notebook")));
    assert_eq!(
        audit::summary(&report),
        vec![
            row("gpu-max-2", "ml", "deny", 2, 4),
            row("no-keepalive", "serving", "warn", 1, 1),
            row("no-keepalive", "ml", "warn", 1, 0),
        ]
    );
    assert_eq!(report.passed.get("ml"), Some(&2));

    let listed: Vec<(String, &str, bool, usize)> = (report.exceptions.iter())
        .map(|e| (e.id(), e.state, e.expiring_soon, e.let_through.len()))
        .collect();
    assert_eq!(
        listed,
        [
            ("ml/notebooks".to_string(), "active", true, 2),
            ("serving/warm-pool".to_string(), "expired", false, 0),
        ]
    );
    let notebooks = &report.exceptions[0];
    assert_eq!(notebooks.requested_by.as_deref(), Some("alice@example.com"));
    assert_eq!(
        notebooks.match_.describe(),
        "kinds Pod; names idle-notebook*"
    );
    assert_eq!(
        notebooks.let_through[0],
        "Pod ml/idle-notebook through no-keepalive (warn)"
    );
    assert_eq!(
        report.exceptions[1].match_.selector.as_deref(),
        Some("app=warm-pool")
    );

    let text = audit::render_text(&report);
    assert!(
        text.starts_with("8 objects read, 6 evaluated, 4 findings, 2 allowed by exceptions\n"),
        "{text}"
    );
    assert!(
        text.contains("GpuPolicyExceptions: 2, 1 expiring within 7 days, 1 expired; 2 policy results let through (not counted as findings)\n  ml/notebooks [EXPIRING SOON]\n"),
        "{text}"
    );
    assert!(
        text.contains("  serving/warm-pool [EXPIRED: delete it]\n"),
        "{text}"
    );
    assert!(
        text.contains("Pod ml/idle-notebook: [warn] no-keepalive: a container runs `sleep infinity`; run the workload or delete the pod — allowed by exception ml/notebooks (course notebooks kept warm until the exam, expires 2026-06-04T00:00:00Z)\n"),
        "{text}"
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["excepted"].as_array().unwrap().len(), 2);
    assert_eq!(json["exceptions"][0]["state"], "active");
    assert_eq!(json["exceptions"][0]["expiringSoon"], true);
    assert_eq!(json["exceptions"][0]["expiresAt"], "2026-06-04T00:00:00Z");
    assert_eq!(json["exceptions"][0]["match"]["names"][0], "idle-notebook*");
    // In PolicyReports the violations fail or warn, what exceptions let
    // through is skipped, naming the exception.
    let reports = audit::policy_reports(&report, 0, Default::default());
    let results: Vec<&serde_json::Value> = reports
        .iter()
        .flat_map(|r| r["results"].as_array().unwrap())
        .collect();
    assert_eq!(results.len(), 6);
    let skipped: Vec<&&serde_json::Value> =
        results.iter().filter(|r| r["result"] == "skip").collect();
    assert_eq!(skipped.len(), 2);
    assert_eq!(skipped[0]["properties"]["exception"], "ml/notebooks");
    assert_eq!(
        skipped[0]["properties"]["exceptionExpiresAt"],
        "2026-06-04T00:00:00Z"
    );
    let ml = reports
        .iter()
        .find(|r| r["metadata"]["namespace"] == "ml")
        .unwrap();
    assert_eq!(ml["summary"]["skip"], 2);
}
