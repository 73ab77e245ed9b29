//! PolicyReports in the cluster, against the in-process API server: the
//! writes the periodic report makes through kube's client (create,
//! replace only on change, delete, the bound), and `serve
//! --report-interval --policy-reports on` writing them after its first run,
//! taking over the reports a previous leader left. The same reports as
//! OpenReports (`audit -o openreports`, `serve --reports openreports`),
//! checked against the fields of the OpenReports CRDs, and a report name
//! another owner holds named in the log, the metrics and the report page.
use crate::common;

use common::fake_apiserver::{FakeApiServer, Recorded, Resource, NAMESPACES};
use common::in_cluster::InCluster;
use gpu_admission::audit::{Finding, Report};
use gpu_admission::cluster::policy_reports::{ClusterPolicyReports, Schema};
use gpu_admission::periodic::policy_reports::{sync, PolicyReportSettings, SyncOutcome};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

const POLICY_REPORTS: Resource = Resource::new(
    "wgpolicyk8s.io",
    "v1alpha2",
    "PolicyReport",
    "policyreports",
    true,
);
const OPEN_REPORTS: Resource =
    Resource::new("openreports.io", "v1alpha1", "Report", "reports", true);
const LEASES: Resource = Resource::new("coordination.k8s.io", "v1", "Lease", "leases", true);
const PODS: Resource = Resource::new("", "v1", "Pod", "pods", true);

fn finding(policy: &str, namespace: &str, name: &str, action: &'static str, gpus: i64) -> Finding {
    Finding {
        policy: policy.into(),
        action,
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        namespace: Some(namespace.into()),
        name: name.into(),
        uid: Some(format!("uid-{namespace}-{name}")),
        message: format!("{policy}: Job {name} breaks it"),
        gpus,
        gpus_pending: 0,
    }
}

fn report(findings: Vec<Finding>) -> Report {
    Report {
        findings,
        ..Report::default()
    }
}

/// The reports in the fake, by namespace and name.
fn stored(fake: &FakeApiServer) -> BTreeMap<(String, String), Value> {
    fake.read(|cluster| cluster.objects(&POLICY_REPORTS))
        .into_iter()
        .map(|r| {
            let key = (
                r["metadata"]["namespace"].as_str().unwrap().to_string(),
                r["metadata"]["name"].as_str().unwrap().to_string(),
            );
            (key, r)
        })
        .collect()
}

fn writes(fake: &FakeApiServer) -> Vec<(String, String)> {
    fake.requests()
        .iter()
        .filter(|r| r.is_write())
        .map(|r: &Recorded| (r.method.clone(), r.path.clone()))
        .collect()
}

fn key(namespace: &str, name: &str) -> (String, String) {
    (namespace.to_string(), name.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_reports_are_created_updated_bounded_and_deleted_through_the_api() {
    let fake = FakeApiServer::start(vec![NAMESPACES, POLICY_REPORTS]).await;
    // Kyverno's report in ml is not ours and stays as it is.
    fake.change(|cluster| {
        cluster.apply(json!({
            "apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
            "metadata": {"name": "cpol-require-labels", "namespace": "ml",
                         "labels": {"app.kubernetes.io/managed-by": "kyverno"}},
            "summary": {"pass": 4, "fail": 0, "warn": 0, "error": 0, "skip": 0},
            "results": [],
        }))
    });
    let settings = PolicyReportSettings {
        max_results: 3,
        writes_per_second: 50,
        ..PolicyReportSettings::default()
    };
    let store = ClusterPolicyReports::new(fake.client(), Schema::PolicyReport);
    let at = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + s);
    let run = |findings: Vec<Finding>, s: u64| {
        let store = &store;
        let settings = &settings;
        async move {
            sync(store, &report(findings), at(s), settings, &|| false)
                .await
                .unwrap()
        }
    };

    let first = vec![
        finding("gpu-privileged", "ml", "train", "deny", 8),
        finding("gpu-keep-alive", "batch", "sleeper", "warn", 1),
    ];
    let done = run(first.clone(), 0).await;
    assert_eq!(
        done,
        SyncOutcome {
            created: 2,
            ..SyncOutcome::default()
        }
    );
    let reports = stored(&fake);
    assert_eq!(reports.len(), 3, "{reports:#?}");
    let ml = &reports[&key("ml", "gpu-admission")];
    assert_eq!(ml["summary"]["fail"], 1);
    assert_eq!(
        ml["results"][0]["resources"][0],
        json!({"apiVersion": "batch/v1", "kind": "Job", "name": "train", "namespace": "ml", "uid": "uid-ml-train"})
    );
    assert_eq!(ml["results"][0]["properties"]["gpus"], "8");
    assert_eq!(
        ml["results"][0]["timestamp"],
        json!({"seconds": 1_800_000_000u64, "nanos": 0})
    );
    assert_eq!(
        writes(&fake),
        [
            ("POST".into(), POLICY_REPORTS.namespaced_collection("batch")),
            ("POST".into(), POLICY_REPORTS.namespaced_collection("ml")),
        ]
    );

    // Nothing changed: one list, no write.
    let before = writes(&fake).len();
    let again = run(first.clone(), 60).await;
    assert_eq!(again.unchanged, 2);
    assert_eq!(writes(&fake).len(), before);

    // A new writer (another replica leading now) with more findings in ml
    // than the bound: ml's report is replaced in place, the costliest
    // three kept, the first result with the time it was first seen.
    let store_b = ClusterPolicyReports::new(fake.client(), Schema::PolicyReport);
    let mut more = first.clone();
    more.extend(
        (0..4).map(|i| finding("gpu-sku-allowlist", "ml", &format!("a100-{i}"), "audit", i)),
    );
    let updated = sync(&store_b, &report(more), at(120), &settings, &|| false)
        .await
        .unwrap();
    assert_eq!(
        (updated.updated, updated.unchanged, updated.created),
        (1, 1, 0)
    );
    let reports = stored(&fake);
    assert_eq!(reports.len(), 3, "updated, not duplicated");
    let ml = &reports[&key("ml", "gpu-admission")];
    let kept: Vec<(&str, &str, u64)> = ml["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["resources"][0]["name"].as_str().unwrap(),
                r["properties"]["gpus"].as_str().unwrap(),
                r["timestamp"]["seconds"].as_u64().unwrap() - 1_800_000_000,
            )
        })
        .collect();
    assert_eq!(
        kept,
        [
            ("train", "8", 0),
            ("a100-3", "3", 120),
            ("a100-2", "2", 120)
        ]
    );
    assert_eq!(
        (
            ml["summary"]["fail"].as_u64(),
            ml["summary"]["warn"].as_u64()
        ),
        (Some(1), Some(4)),
        "every finding counted"
    );
    assert_eq!(
        ml["metadata"]["annotations"]["gpu-admission.io/results-left-out"],
        "2"
    );
    assert_eq!(
        writes(&fake)[before..],
        [(
            "PUT".to_string(),
            format!(
                "{}/gpu-admission",
                POLICY_REPORTS.namespaced_collection("ml")
            )
        )]
    );

    // batch has no finding left: its report is deleted; Kyverno's stays.
    let only_ml = vec![finding("gpu-privileged", "ml", "train", "deny", 8)];
    let collected = run(only_ml, 180).await;
    assert_eq!((collected.deleted, collected.updated), (1, 1));
    let reports = stored(&fake);
    assert_eq!(
        reports.keys().cloned().collect::<Vec<_>>(),
        [key("ml", "cpol-require-labels"), key("ml", "gpu-admission")]
    );
    assert!(reports[&key("ml", "gpu-admission")]["metadata"]
        .get("annotations")
        .is_none_or(|a| a.get("gpu-admission.io/results-left-out").is_none()));

    // The list asked for our reports by label.
    let lists: Vec<Recorded> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path == POLICY_REPORTS.collection())
        .collect();
    assert!(!lists.is_empty());
    assert!(lists
        .iter()
        .all(|l| l.param("labelSelector") == Some("app.kubernetes.io/managed-by=gpu-admission")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_the_crd_is_said_so() {
    let fake = FakeApiServer::start(vec![NAMESPACES]).await;
    let store = ClusterPolicyReports::new(fake.client(), Schema::PolicyReport);
    let err = sync(
        &store,
        &report(vec![finding("gpu-privileged", "ml", "train", "deny", 8)]),
        SystemTime::now(),
        &PolicyReportSettings::default(),
        &|| false,
    )
    .await
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("does not serve wgpolicyk8s.io/v1alpha2 PolicyReports"),
        "{text}"
    );
    assert!(writes(&fake).is_empty());
}

/// Labels every namespace carries: without them an A100 is not allowed.
fn namespace(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {
            "gpu-admission.io/tier": "standard",
            "gpu-admission.io/premium-gpus": "true",
        }},
        "status": {"phase": "Active"},
    })
}

/// Pods in `batch`, every other one holding a GPU and sleeping forever.
fn batch_pods(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let (limits, command) = if i % 2 == 0 {
                (json!({"nvidia.com/gpu": "1"}), json!(["sh", "-c", "sleep infinity"]))
            } else {
                (json!({"cpu": "1"}), json!(["python", "step.py"]))
            };
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("step-{i:02}"), "namespace": "batch", "uid": format!("uid-step-{i:02}")},
                "spec": {"containers": [{"name": "main", "image": "python:3.12", "command": command,
                                         "resources": {"limits": limits}}]},
                "status": {"phase": "Running"},
            })
        })
        .collect()
}

/// The pods of tests/fixtures/audit/cluster-list.json and `batch` pods of
/// [`batch_pods`].
fn cluster_pods(batch: usize) -> Vec<Value> {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/audit/cluster-list.json");
    let mut objects = gpu_admission::offline::read_manifest(&fixture).unwrap();
    objects.retain(|o| o["kind"] == "Pod");
    objects.extend(batch_pods(batch));
    objects
}

/// `serve --report-interval 1m --policy-reports on` (with `extra` flags)
/// against `fake`, once its first sync has deleted the report in the
/// `retired` namespace (the last write of a sync). Killed when dropped.
async fn serve_first_sync(fake: &FakeApiServer, dir: &std::path::Path, extra: &[&str]) -> Kill {
    let kubeconfig = fake.kubeconfig(dir);
    let server = Kill(
        std::process::Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
            .args(["serve", "--listen", "127.0.0.1:0", "--health-listen", "off"])
            .args(["--metrics-listen", "127.0.0.1:0", "--node-cache", "off"])
            .args(["--report-interval", "1m", "--policy-reports", "on"])
            .args(extra)
            .arg("--certs-dir")
            .arg(dir.join("certs"))
            .env("KUBECONFIG", &kubeconfig)
            .env("KUBERNETES_SERVICE_HOST", fake.addr.ip().to_string())
            .env("KUBERNETES_SERVICE_PORT", fake.addr.port().to_string())
            .env("POD_NAMESPACE", "gpu-admission")
            .env("POD_NAME", "gpu-admission-7c9f-a")
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    fake.wait_for_requests("the first run's policy reports", |requests| {
        requests.iter().any(|r| {
            r.method == "DELETE"
                && r.path
                    .ends_with("/namespaces/retired/policyreports/gpu-admission")
        })
    })
    .await;
    server
}

/// A child process, killed when dropped.
struct Kill(std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `serve --report-interval 1m --policy-reports on` with a Lease: after its
/// first run the findings are PolicyReports, the ones a previous leader
/// left are updated or deleted, not duplicated, and the bound holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_writes_policy_reports_after_its_first_run() {
    let fake = FakeApiServer::start(vec![NAMESPACES, PODS, LEASES, POLICY_REPORTS]).await;
    let objects = cluster_pods(20);
    // What a previous leader wrote: a stale report in batch and one in a
    // namespace that has no finding any more.
    let stale = |namespace: &str| {
        json!({
            "apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
            "metadata": {"name": "gpu-admission", "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": "gpu-admission"}},
            "summary": {"pass": 0, "fail": 1, "warn": 0, "error": 0, "skip": 0},
            "results": [{"source": "gpu-admission", "policy": "gpu-privileged", "rule": "gpu-privileged",
                         "result": "fail", "severity": "high", "category": "GPU", "message": "old",
                         "resources": [{"apiVersion": "v1", "kind": "Pod", "name": "gone", "namespace": namespace}],
                         "properties": {"action": "deny", "gpus": "1"},
                         "timestamp": {"seconds": 1_700_000_000u64, "nanos": 0}}],
        })
    };
    fake.change(|cluster| {
        for name in ["default", "apps", "ml", "serving", "batch", "retired"] {
            cluster.apply(namespace(name));
        }
        for object in objects {
            cluster.apply(object);
        }
        cluster.apply(stale("batch"));
        cluster.apply(stale("retired"));
    });
    let batch_uid = stored(&fake)[&key("batch", "gpu-admission")]["metadata"]["uid"].clone();

    let dir = tempfile::tempdir().unwrap();
    let _server = serve_first_sync(&fake, dir.path(), &["--policy-report-max-results", "4"]).await;
    let reports = stored(&fake);
    let namespaces: Vec<&str> = reports.keys().map(|k| k.0.as_str()).collect();
    assert!(!namespaces.contains(&"retired"), "{namespaces:?}");
    assert!(
        namespaces.contains(&"batch") && namespaces.contains(&"ml"),
        "{namespaces:?}"
    );
    assert!(reports.keys().all(|k| k.1 == "gpu-admission"));

    // batch: the previous leader's object, replaced in place, bounded.
    let batch = &reports[&key("batch", "gpu-admission")];
    assert_eq!(
        batch["metadata"]["uid"], batch_uid,
        "updated, not recreated"
    );
    let results = batch["results"].as_array().unwrap();
    assert_eq!(results.len(), 4);
    assert!(results.iter().all(|r| r["resources"][0]["name"] != "gone"));
    let counted =
        batch["summary"]["fail"].as_u64().unwrap() + batch["summary"]["warn"].as_u64().unwrap();
    let left_out: u64 = batch["metadata"]["annotations"]["gpu-admission.io/results-left-out"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(counted, 4 + left_out);
    assert!(left_out >= 6, "ten idle GPU pods at least: {batch:#}");
    assert!(results.iter().all(|r| r["properties"]["gpus"] == "1"));

    // Only the Lease holder wrote: the Lease names this pod.
    let lease = fake.read(|cluster| cluster.objects(&LEASES));
    assert_eq!(lease.len(), 1);
    assert_eq!(lease[0]["spec"]["holderIdentity"], "gpu-admission-7c9f-a");
}

/// The results of a PolicyReport without their timestamps (when a result
/// was first seen is the writer's to say, not the audit's).
fn results_without_time(report: &Value) -> Vec<Value> {
    let mut results = report["results"].as_array().cloned().unwrap_or_default();
    for result in &mut results {
        result.as_object_mut().unwrap().remove("timestamp");
    }
    results
}

/// One writer: what `serve --policy-reports on` writes for a cluster and
/// what `audit -f DUMP -o policyreport` prints for a dump of the same
/// objects say the same, result for result (rule, GPUs pending, capped
/// messages and order included), and the namespaces the periodic report
/// leaves without a report have nothing to say offline either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_of_a_dump_writes_the_policy_reports_serve_writes() {
    let fake = FakeApiServer::start(vec![NAMESPACES, PODS, LEASES, POLICY_REPORTS]).await;
    let mut objects = cluster_pods(12);
    objects.extend(
        ["default", "apps", "ml", "serving", "batch", "retired"]
            .into_iter()
            .map(namespace),
    );
    fake.change(|cluster| {
        for object in &objects {
            cluster.apply(object.clone());
        }
        // Deleted as the last write of the first sync: the run is over.
        cluster.apply(json!({
            "apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
            "metadata": {"name": "gpu-admission", "namespace": "retired",
                         "labels": {"app.kubernetes.io/managed-by": "gpu-admission"}},
            "summary": {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0},
            "results": [],
        }));
    });
    let dir = tempfile::tempdir().unwrap();
    let _server = serve_first_sync(&fake, dir.path(), &[]).await;
    let in_cluster = stored(&fake);
    assert!(in_cluster.len() >= 2, "{in_cluster:#?}");

    let dump = dir.path().join("dump.json");
    std::fs::write(
        &dump,
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": objects})).unwrap(),
    )
    .unwrap();
    let offline = audit_documents("policyreport", &dump);
    for ((namespace, _), written) in &in_cluster {
        let printed = offline
            .iter()
            .find(|d| d["metadata"]["namespace"] == namespace.as_str())
            .unwrap_or_else(|| panic!("no offline report for {namespace}"));
        assert_eq!(printed["kind"], written["kind"], "{namespace}");
        assert_eq!(printed["summary"], written["summary"], "{namespace}");
        assert_eq!(
            results_without_time(printed),
            results_without_time(written),
            "{namespace}"
        );
        assert!(!results_without_time(written).is_empty(), "{namespace}");
    }
    // What the cluster has no report for has nothing to say offline.
    for printed in &offline {
        let namespace = printed["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default();
        if namespace.is_empty() || in_cluster.contains_key(&key(namespace, "gpu-admission")) {
            continue;
        }
        let summary = &printed["summary"];
        assert_eq!(
            (&summary["fail"], &summary["warn"], &summary["skip"]),
            (&json!(0), &json!(0), &json!(0)),
            "{printed:#}"
        );
    }
}

/// The fields of the OpenReports CRDs, as tests/fixtures/openreports keeps
/// them.
fn openreports_schema() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/openreports/v1alpha1.yaml");
    serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// What the OpenReports CRDs find wrong in `report`.
fn openreports_errors(report: &Value) -> Vec<String> {
    let no_rules = |rule: &str, _: &Value| panic!("the OpenReports CRDs have no rules: {rule}");
    common::crd_schema::errors(&openreports_schema()["report"], report, &no_rules)
}

/// `gpu-admission audit -o FORMAT -f FILE`'s documents.
fn audit_documents(format: &str, file: &std::path::Path) -> Vec<Value> {
    let file = file.as_os_str();
    let out = common::run_cli([
        "audit".as_ref(),
        "-o".as_ref(),
        format.as_ref(),
        "-f".as_ref(),
        file,
    ]);
    serde_yaml::Deserializer::from_str(&out)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect()
}

/// `audit -o openreports` prints Reports (and a ClusterReport for the
/// cluster-scoped objects) that the OpenReports CRDs accept field for
/// field, holding the results `-o policyreport` prints.
#[test]
fn audit_prints_openreports_the_crd_accepts_with_the_policy_reports_results() {
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/report/cluster.json");
    let open = audit_documents("openreports", &fixture);
    let policy = audit_documents("policyreport", &fixture);
    assert_eq!(open.len(), policy.len());
    let kinds: Vec<&str> = open.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert!(
        kinds.contains(&"Report") && kinds.contains(&"ClusterReport"),
        "{kinds:?}"
    );
    let mut results = 0;
    for (o, p) in open.iter().zip(&policy) {
        let errors = openreports_errors(o);
        assert!(errors.is_empty(), "{errors:#?}\n{o:#}");
        let namespace = &o["metadata"]["namespace"];
        assert_eq!(namespace, &p["metadata"]["namespace"]);
        assert_eq!(o["kind"] == "ClusterReport", namespace.is_null());
        assert_eq!(o["apiVersion"], "openreports.io/v1alpha1");
        assert_eq!(o["source"], "gpu-admission");
        assert_eq!(o["summary"], p["summary"], "{namespace}");
        assert_eq!(
            results_without_time(o),
            results_without_time(p),
            "{namespace}"
        );
        results += o["results"].as_array().unwrap().len();
    }
    assert!(results >= 5, "{results} results");
    // The check itself refuses what the CRDs refuse.
    let mut broken = open[0].clone();
    broken["results"][0]["properties"]["gpus"] = json!(4);
    broken["results"][0]["severity"] = json!("urgent");
    broken["results"][0]
        .as_object_mut()
        .unwrap()
        .remove("policy");
    broken["results"][0]["timestamp"] = json!({"seconds": 1});
    broken["owner"] = json!("x");
    let errors = openreports_errors(&broken);
    for said in [
        ".results[0].properties.gpus: must be of type string",
        ".results[0].severity: \"urgent\" is not one of",
        ".results[0]: policy is required",
        ".results[0].timestamp: nanos is required",
        ".owner: not in the schema (dropped)",
    ] {
        assert!(
            errors.iter().any(|e| e.starts_with(said)),
            "{said}: {errors:#?}"
        );
    }
}

/// `serve --policy-reports on --reports openreports`: after its first run
/// the findings are openreports.io Reports the CRD accepts, the ones of
/// `-o policyreport`; where Kubewarden already holds a Report named
/// gpu-admission, that Report is left as it is and the server says so: a
/// warning naming the namespace and the owner, a series of
/// gpu_admission_audit_report_conflicts, and a line on the report page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_writes_openreports_and_names_who_holds_a_report_name() {
    let fake = FakeApiServer::start(vec![NAMESPACES, PODS, LEASES, OPEN_REPORTS]).await;
    let objects = cluster_pods(6);
    let kubewardens = json!({
        "apiVersion": "openreports.io/v1alpha1", "kind": "Report",
        "metadata": {"name": "gpu-admission", "namespace": "ml",
                     "labels": {"app.kubernetes.io/managed-by": "kubewarden"}},
        "source": "kubewarden",
        "summary": {"pass": 1, "fail": 0, "warn": 0, "error": 0, "skip": 0},
        "results": [],
    });
    fake.change(|cluster| {
        for name in ["default", "apps", "ml", "serving", "batch"] {
            cluster.apply(namespace(name));
        }
        for object in objects {
            cluster.apply(object);
        }
        cluster.apply(kubewardens.clone());
    });
    let server = InCluster::serve_with(
        &fake,
        &[
            "--metrics-listen",
            "127.0.0.1:0",
            "--node-cache",
            "off",
            "--report-interval",
            "1m",
            "--policy-reports",
            "on",
            "--reports",
            "openreports",
        ],
    );
    let said = "the Report ml/gpu-admission belongs to kubewarden";
    common::fake_apiserver::wait_until("the warning", || server.logged(said)).await;
    let warning = server.log_line(said).unwrap();
    assert_eq!(warning["level"], "WARN", "{warning}");
    assert_eq!(warning["fields"]["namespace"], "ml", "{warning}");
    assert_eq!(warning["fields"]["owner"], "kubewarden", "{warning}");
    assert_eq!(
        server
            .metric(r#"gpu_admission_audit_report_conflicts{namespace="ml",owner="kubewarden"}"#)
            .await,
        1.0
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let page = loop {
        let page = server.metrics_get("/report").await;
        if page.contains("id=\"reports-held\"") || tokio::time::Instant::now() > deadline {
            break page;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        page.contains(r#"<li class="report-held" data-namespace="ml" data-owner="kubewarden">"#),
        "{page}"
    );

    // Kubewarden's Report is untouched; the others are ours, as the CRD
    // wants them, with the results of -o policyreport.
    let stored: BTreeMap<String, Value> = fake
        .read(|cluster| cluster.objects(&OPEN_REPORTS))
        .into_iter()
        .map(|r| (r["metadata"]["namespace"].as_str().unwrap().to_string(), r))
        .collect();
    assert_eq!(stored["ml"]["source"], "kubewarden");
    assert_eq!(stored["ml"]["results"], json!([]));
    assert!(stored.contains_key("batch"), "{stored:#?}");
    // In ml only a create was tried, and refused.
    let in_ml: Vec<(String, u16)> = (fake.requests().iter())
        .filter(|r| r.is_write() && r.path.contains("/namespaces/ml/"))
        .map(|r| (r.method.clone(), r.status))
        .collect();
    assert_eq!(in_ml, [("POST".to_string(), 409)]);
    let dir = tempfile::tempdir().unwrap();
    let dump = dir.path().join("dump.json");
    let mut all = fake.read(|cluster| cluster.objects(&PODS));
    all.extend(fake.read(|cluster| cluster.objects(&NAMESPACES)));
    std::fs::write(
        &dump,
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": all})).unwrap(),
    )
    .unwrap();
    let offline = audit_documents("policyreport", &dump);
    for (namespace, written) in stored.iter().filter(|(n, _)| *n != "ml") {
        let errors = openreports_errors(written);
        assert!(errors.is_empty(), "{errors:#?}\n{written:#}");
        assert_eq!(written["kind"], "Report");
        assert_eq!(
            written["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "gpu-admission"
        );
        assert_eq!(
            written["scope"],
            json!({"apiVersion": "v1", "kind": "Namespace", "name": namespace})
        );
        let printed = (offline.iter())
            .find(|d| d["metadata"]["namespace"] == namespace.as_str())
            .unwrap();
        assert_eq!(
            results_without_time(written),
            results_without_time(printed),
            "{namespace}"
        );
    }
}
