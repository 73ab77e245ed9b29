//! The live-cluster paths against an in-process API server that speaks
//! the list/watch protocol: the Namespace reflector behind
//! namespaceSelector and namespaceObject, `serve` in a cluster (readiness
//! and labels), and `audit` reading a cluster.
use crate::common;

use common::fake_apiserver::{
    wait_until, FakeApiServer, Recorded, Resource, NAMESPACES, NODEPOOLS, NODES, RESOURCE_CLAIMS,
    RESOURCE_CLAIM_TEMPLATES,
};
use common::in_cluster::InCluster;
use futures_util::FutureExt as _;
use gpu_admission::cluster::ClusterNamespaces;
use gpu_admission::k8s::NamespaceLookup;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

fn namespace(name: &str, labels: &[(&str, &str)]) -> Value {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": labels},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    })
}

/// The labels `lookup` sees on namespace `name`, if it knows it.
fn labels(lookup: &ClusterNamespaces, name: &str) -> Option<BTreeMap<String, String>> {
    let object = lookup.namespace(name)?;
    assert_eq!(object["kind"], "Namespace");
    Some(serde_json::from_value(object["metadata"]["labels"].clone()).unwrap_or_default())
}

fn lists(requests: &[Recorded]) -> Vec<Recorded> {
    requests
        .iter()
        .filter(|r| r.path == "/api/v1/namespaces" && !r.is_watch())
        .cloned()
        .collect()
}

fn watches(requests: &[Recorded]) -> Vec<Recorded> {
    requests
        .iter()
        .filter(|r| r.path == "/api/v1/namespaces" && r.is_watch())
        .cloned()
        .collect()
}

/// 1,201 namespaces: three pages of the reflector's 500.
const MANY: usize = 1_201;

fn numbered(i: usize) -> String {
    format!("team-{i:04}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_reflector_lists_in_pages_then_follows_the_watch() {
    let fake = FakeApiServer::start(vec![NAMESPACES]).await;
    fake.change(|cluster| {
        for i in 0..MANY {
            cluster.apply(namespace(&numbered(i), &[("tier", "cpu")]));
        }
        cluster.apply(namespace("ml", &[("gpu-admission.io/tier", "research")]));
    });
    fake.hold_continued_lists(true);
    let (lookup, task) = ClusterNamespaces::start(fake.client());

    // The first page is in, the second is held: not synced, nothing visible.
    fake.wait_for_requests("the second page to be requested", |r| {
        lists(r).iter().any(|l| l.param("continue").is_some())
    })
    .await;
    assert_eq!(lookup.wait_until_synced().now_or_never(), None);
    assert_eq!(labels(&lookup, &numbered(0)), None, "a page is not a list");
    assert_eq!(labels(&lookup, "ml"), None);
    fake.hold_continued_lists(false);
    let synced = tokio::time::timeout(Duration::from_secs(30), lookup.wait_until_synced())
        .await
        .expect("the cache syncs once the list completes");
    assert!(synced);

    let first_list = lists(&fake.requests());
    assert_eq!(first_list.len(), 3, "{first_list:?}");
    assert!(first_list.iter().all(|l| l.param("limit") == Some("500")));
    assert_eq!(first_list[0].param("continue"), None);
    assert!(first_list[1].param("continue").is_some());
    assert!(first_list[2].param("continue").is_some());
    assert_ne!(
        first_list[1].param("continue"),
        first_list[2].param("continue")
    );
    for i in [0, 499, 500, 1_000, MANY - 1] {
        let seen =
            labels(&lookup, &numbered(i)).unwrap_or_else(|| panic!("{} listed", numbered(i)));
        assert_eq!(seen["tier"], "cpu");
        assert_eq!(seen["kubernetes.io/metadata.name"], numbered(i));
    }
    assert_eq!(
        labels(&lookup, "ml").unwrap()["gpu-admission.io/tier"],
        "research"
    );
    assert_eq!(labels(&lookup, "absent"), None);

    // The watch starts where the list ended, and asks for bookmarks.
    let listed_at = fake.read(|c| c.resource_version());
    fake.wait_for_requests("a watch", |r| !watches(r).is_empty())
        .await;
    let watch = &watches(&fake.requests())[0];
    assert_eq!(
        watch.param("resourceVersion"),
        Some(listed_at.to_string().as_str())
    );
    assert_eq!(watch.param("allowWatchBookmarks"), Some("true"));

    // MODIFIED, DELETED, ADDED events reach the cache.
    fake.change(|c| {
        c.apply(namespace(
            "ml",
            &[("gpu-admission.io/tier", "premium"), ("team", "vision")],
        ))
    });
    wait_until("the MODIFIED labels", || {
        labels(&lookup, "ml").is_some_and(|l| l.get("team").map(String::as_str) == Some("vision"))
    })
    .await;
    assert_eq!(
        labels(&lookup, "ml").unwrap()["gpu-admission.io/tier"],
        "premium"
    );
    fake.change(|c| c.delete(&NAMESPACES, "", &numbered(7)));
    wait_until("the DELETED namespace to go", || {
        labels(&lookup, &numbered(7)).is_none()
    })
    .await;
    fake.change(|c| c.apply(namespace("fresh", &[("tier", "gpu")])));
    wait_until("the ADDED namespace", || labels(&lookup, "fresh").is_some()).await;

    // A bookmark moves the resume point: a watch ended after it resumes
    // from the bookmark, not from the last object event.
    let bookmark = fake.change(|c| c.bookmark(&NAMESPACES));
    let before = watches(&fake.requests()).len();
    // A watch ended before it sent the bookmark resumes from the earlier
    // point and is sent the bookmark again: end watches until one resumes
    // from the bookmark.
    wait_until("a watch resumed from the bookmark", || {
        let requests = fake.requests();
        let resumed = watches(&requests)[before..]
            .iter()
            .any(|w| w.param("resourceVersion") == Some(bookmark.to_string().as_str()));
        if !resumed {
            fake.change(|c| c.end_watches());
        }
        resumed
    })
    .await;

    // Changes the watch never carries, then history compacted: the
    // resumed watch is answered 410 Expired, and the reflector relists.
    let before = fake.requests().len();
    fake.change(|c| {
        c.end_watches();
        c.apply(namespace("ml", &[("gpu-admission.io/tier", "default")]));
        c.delete(&NAMESPACES, "", &numbered(8));
        c.apply(namespace("late", &[("tier", "gpu")]));
        c.compact();
    });
    wait_until("the relisted state", || {
        labels(&lookup, "late").is_some()
            && labels(&lookup, &numbered(8)).is_none()
            && labels(&lookup, "ml")
                .is_some_and(|l| !l.contains_key("team") && l["gpu-admission.io/tier"] == "default")
    })
    .await;
    let after = fake.requests()[before..].to_vec();
    let expired = after
        .iter()
        .position(|r| r.is_watch() && r.expired)
        .unwrap_or_else(|| panic!("a watch answered 410: {after:?}"));
    assert!(
        after[expired..]
            .iter()
            .any(|r| !r.is_watch() && r.param("continue").is_none()),
        "a fresh list after the 410: {after:?}"
    );
    // Everything else survived the relist.
    assert!(labels(&lookup, &numbered(9)).is_some());
    assert!(labels(&lookup, "fresh").is_some());
    assert_eq!(labels(&lookup, &numbered(7)), None);
    task.abort();
}

const PODS: Resource = Resource::new("", "v1", "Pod", "pods", true);
const CRONJOBS: Resource = Resource::new("batch", "v1", "CronJob", "cronjobs", true);

/// What `audit` reads: the kinds it lists, served as a cluster with
/// CronJobs forbidden, Karpenter not installed, KAITO without RAGEngine,
/// and the ASO group vanishing during discovery (its resource list 404s).
fn audited_kinds() -> Vec<Resource> {
    vec![
        NAMESPACES,
        PODS,
        Resource::new("apps", "v1", "Deployment", "deployments", true),
        Resource::new("apps", "v1", "StatefulSet", "statefulsets", true),
        Resource::new("apps", "v1", "DaemonSet", "daemonsets", true),
        Resource::new("apps", "v1", "ReplicaSet", "replicasets", true),
        Resource::new("batch", "v1", "Job", "jobs", true),
        CRONJOBS,
        Resource::new("kaito.sh", "v1beta1", "Workspace", "workspaces", true),
        Resource::new(
            "containerservice.azure.com",
            "v1api20231001",
            "ManagedClustersAgentPool",
            "managedclustersagentpools",
            true,
        ),
    ]
}

/// Labels every namespace carries, in the cluster and on the command line:
/// without them an A100 is not allowed.
const LABELS: [(&str, &str); 2] = [
    ("gpu-admission.io/tier", "standard"),
    ("gpu-admission.io/premium-gpus", "true"),
];

/// 1,000 pods in `batch` (every 40th holds a GPU doing nothing) beside the
/// audit fixture's objects: more pods than one page of 500.
fn workload() -> Vec<Value> {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/audit/cluster-list.json");
    let mut objects = gpu_admission::offline::read_manifest(&fixture).unwrap();
    for i in 0..1_000 {
        let idle = i % 40 == 0;
        let limits = if idle {
            json!({"nvidia.com/gpu": "1"})
        } else {
            json!({"cpu": "1", "memory": "1Gi"})
        };
        let command = if idle {
            json!(["sh", "-c", "sleep infinity"])
        } else {
            json!(["python", "step.py"])
        };
        objects.push(json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": format!("step-{i:04}"), "namespace": "batch", "uid": format!("uid-step-{i:04}")},
            "spec": {"containers": [{"name": "main", "image": "python:3.12", "command": command, "resources": {"limits": limits}}]},
            "status": {"phase": "Running"},
        }));
    }
    objects.push(json!({
        "apiVersion": "kaito.sh/v1beta1",
        "kind": "Workspace",
        "metadata": {"name": "falcon-7b", "namespace": "ml", "uid": "uid-falcon"},
        "resource": {"instanceType": "Standard_NC12s_v3", "labelSelector": {"matchLabels": {"apps": "falcon-7b"}}},
        "inference": {"preset": {"name": "falcon-7b"}},
    }));
    objects.push(json!({
        "apiVersion": "kaito.sh/v1beta1",
        "kind": "Workspace",
        "metadata": {"name": "llama-a100", "namespace": "ml", "uid": "uid-llama"},
        "resource": {"instanceType": "Standard_NC24ads_A100_v4", "labelSelector": {"matchLabels": {"apps": "llama"}}},
        "inference": {"preset": {"name": "llama-3.1-8b-instruct"}},
    }));
    objects.push(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "finetune", "namespace": "ml", "uid": "uid-finetune"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "train", "image": "nvcr.io/nvidia/pytorch:24.01-py3", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}},
    }));
    objects
}

fn run_audit(args: &[&str], kubeconfig: &std::path::Path) -> (Value, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
        .arg("audit")
        .args(args)
        .args(["-o", "json"])
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "audit {args:?} failed: {stderr}");
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("audit {args:?} printed no JSON report ({e}): {stderr}"));
    (report, stderr)
}

/// `serve` flags for the periodic report on every replica, served at
/// `/report` on the metrics listener.
/// The GPU budgets' pod watch lists pods too: off, the report's reads
/// are the only ones of pods.
const REPORTING: &[&str] = &[
    "--metrics-listen",
    "127.0.0.1:0",
    "--report-interval",
    "1m",
    "--report-lease",
    "off",
    "--gpu-budgets",
    "off",
];

/// The first report `/report?format=json` serves (503 "no report yet"
/// until the first audit is done).
async fn first_report(metrics: std::net::SocketAddr) -> Value {
    for _ in 0..300 {
        let (status, body) = common::plain_get(metrics, "/report?format=json").await;
        match status.as_u16() {
            200 => return serde_json::from_str::<Value>(&body).unwrap(),
            503 => assert!(body.contains("no report yet"), "{body}"),
            other => panic!("/report answered {other}: {body}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no report within 30 s")
}

/// Findings in a stable order, so reports read in different orders compare.
fn sorted_findings(report: &Value) -> Vec<Value> {
    let mut findings = report["findings"].as_array().unwrap().clone();
    findings.sort_by_key(|f| f.to_string());
    findings
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_of_the_cluster_pages_skips_what_it_cannot_read_and_agrees_with_the_file() {
    let fake = FakeApiServer::start(audited_kinds()).await;
    let objects = workload();
    fake.change(|cluster| {
        for name in ["default", "apps", "ml", "serving", "batch"] {
            cluster.apply(namespace(name, &LABELS));
        }
        for object in &objects {
            cluster.apply(object.clone());
        }
        cluster.apply(json!({
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": "nightly", "namespace": "ml", "uid": "uid-nightly"},
            "spec": {"schedule": "0 2 * * *", "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "eval", "image": "python:3.12", "resources": {"limits": {"nvidia.com/gpu": "16"}}}]}}}}},
        }));
        cluster.forbid(&CRONJOBS);
        cluster.vanish("containerservice.azure.com/v1api20231001");
    });
    let tmp = tempfile::tempdir().unwrap();
    let kubeconfig = fake.kubeconfig(tmp.path());
    let (from_cluster, warnings) = tokio::task::spawn_blocking(move || run_audit(&[], &kubeconfig))
        .await
        .unwrap();

    // Pods were read in pages of 500, each continuing the last.
    let pods: Vec<Recorded> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path == "/api/v1/pods")
        .collect();
    assert_eq!(pods.len(), 3, "1,006 pods in pages of 500: {pods:?}");
    assert!(pods
        .iter()
        .all(|p| p.param("limit") == Some("500") && !p.is_watch()));
    assert_eq!(pods[0].param("continue"), None);
    assert!(pods[1].param("continue").is_some());
    assert_ne!(pods[1].param("continue"), pods[2].param("continue"));

    // What it could not read is named, with the reason.
    for expected in [
        "skipping CronJob.batch: not allowed to list it (cronjobs.batch is forbidden",
        "skipping NodePool.karpenter.sh: the cluster does not serve it",
        "skipping RAGEngine.kaito.sh: the cluster does not serve it",
        "skipping ManagedClustersAgentPool.containerservice.azure.com: the cluster does not serve it (the server could not find the requested resource)",
    ] {
        assert!(warnings.contains(expected), "no {expected:?} in:\n{warnings}");
    }
    let forbidden: Vec<Recorded> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path == CRONJOBS.collection())
        .collect();
    assert!(!forbidden.is_empty() && forbidden.iter().all(|r| r.status == 403));

    // The same objects as a file give the same report.
    let dump = tmp.path().join("dump.json");
    let served: Vec<Value> = fake.read(|c| {
        audited_kinds()
            .iter()
            .filter(|r| r.kind != "Namespace" && r.kind != "CronJob")
            .flat_map(|r| c.objects(r))
            .collect()
    });
    assert_eq!(served.len(), objects.len());
    std::fs::write(
        &dump,
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": served})).unwrap(),
    )
    .unwrap();
    let labels: Vec<String> = LABELS.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let labels = labels.join(",");
    let kubeconfig = tmp.path().join("kubeconfig");
    let (from_file, _) = tokio::task::spawn_blocking(move || {
        run_audit(
            &["-f", dump.to_str().unwrap(), "--namespace-labels", &labels],
            &kubeconfig,
        )
    })
    .await
    .unwrap();
    assert_eq!(from_cluster["objects"], objects.len());
    assert_eq!(from_cluster["objects"], from_file["objects"]);
    assert_eq!(from_cluster["evaluated"], from_file["evaluated"]);
    assert_eq!(from_cluster["passed"], from_file["passed"]);
    let findings = sorted_findings(&from_cluster);
    assert_eq!(findings, sorted_findings(&from_file));

    // The findings cover every page and the CRD kind, and nothing forbidden.
    let named = |kind: &str, name: &str| {
        findings
            .iter()
            .any(|f| f["kind"] == kind && f["name"] == name)
    };
    assert!(named("Pod", "step-0000"), "{findings:#?}");
    assert!(named("Pod", "step-0520"), "{findings:#?}");
    assert!(named("Pod", "step-0960"), "{findings:#?}");
    assert!(!named("Pod", "step-0001"), "{findings:#?}");
    assert!(named("Workspace", "falcon-7b"), "{findings:#?}");
    // The namespace labels reached the policies: the A100 is allowed.
    assert!(
        !findings
            .iter()
            .any(|f| f["name"] == "llama-a100" && f["policy"] == "gpu-sku-allowlist"),
        "{findings:#?}"
    );
    assert!(!findings.iter().any(|f| f["kind"] == "CronJob"));
}

/// A CREATE review of a KAITO Workspace on H100s in namespace `research`.
fn h100_workspace_review() -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0b5e7c1d-3a2f-4e8b-9c6d-1f2a3b4c5d6e",
            "kind": {"group": "kaito.sh", "version": "v1beta1", "kind": "Workspace"},
            "resource": {"group": "kaito.sh", "version": "v1beta1", "resource": "workspaces"},
            "name": "deepseek-r1",
            "namespace": "research",
            "operation": "CREATE",
            "userInfo": {"username": "alice@example.com", "groups": ["system:authenticated"]},
            "object": {
                "apiVersion": "kaito.sh/v1beta1",
                "kind": "Workspace",
                "metadata": {"name": "deepseek-r1", "namespace": "research"},
                "resource": {
                    "count": 6,
                    "instanceType": "Standard_NC80adis_H100_v5",
                    "labelSelector": {"matchLabels": {"apps": "deepseek-r1"}},
                },
                "inference": {"preset": {"name": "deepseek-r1-0528"}},
            },
        },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_in_a_cluster_is_ready_once_namespaces_are_listed_and_judges_with_their_labels() {
    let fake = FakeApiServer::start(vec![NAMESPACES]).await;
    fake.change(|cluster| {
        for i in 0..600 {
            cluster.apply(namespace(&numbered(i), &[]));
        }
        cluster.apply(namespace("research", &LABELS));
    });
    fake.hold_continued_lists(true);
    let server = InCluster::serve(&fake);

    // Listening, policies loaded, the Namespace list half read: not ready.
    fake.wait_for_requests("the second page of Namespaces", |r| {
        lists(r).iter().any(|l| l.param("continue").is_some())
    })
    .await;
    assert_eq!(
        server.request("GET", "/readyz", b"").await,
        (503, "namespaces not synced\n".to_string())
    );
    fake.hold_continued_lists(false);
    server.wait_until_ready().await;

    // The namespace opts in to premium GPUs: the H100 Workspace passes.
    let review = h100_workspace_review();
    let (allowed, message) = server.validate(&review).await;
    assert!(allowed, "{message}");

    // Its labels change in the cluster; the next review sees that.
    fake.change(|c| c.apply(namespace("research", &[LABELS[0]])));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (allowed, message) = server.validate(&review).await;
        if !allowed {
            assert!(message.contains("gpu-sku-allowlist"), "{message}");
            assert!(
                message.contains("uses premium SKU Standard_NC80adis_H100_v5"),
                "{message}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the label change never reached /validate"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A ResourceClaimTemplate in `ml` asking for `count` devices of `class`.
fn claim_template(name: &str, class: &str, count: u64) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": class, "allocationMode": "ExactCount", "count": count}}
        ]}}},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_cache_follows_resource_claims_and_templates() {
    use gpu_admission::cluster::watch::{CacheMetrics, Settings};
    use gpu_admission::cluster::ClusterClaims;
    use gpu_admission::k8s::ClaimLookup;
    let fake = FakeApiServer::start(vec![RESOURCE_CLAIMS, RESOURCE_CLAIM_TEMPLATES]).await;
    fake.change(|cluster| {
        cluster.apply(claim_template("single-gpu", "gpu.nvidia.com", 1));
        cluster.apply(json!({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "shared", "namespace": "ml",
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}]},
            "spec": {"devices": {"requests": [{"name": "m", "exactly": {"deviceClassName": "mig.nvidia.com"}}]}},
            "status": {"reservedFor": [{"resource": "pods", "name": "a", "uid": "1"}]},
        }));
    });
    let (lookup, task) =
        ClusterClaims::start_with(fake.client(), Settings::default(), CacheMetrics::default());
    let synced = tokio::time::timeout(Duration::from_secs(30), lookup.wait_until_synced())
        .await
        .expect("the cache syncs once both kinds are listed");
    assert!(synced);
    let template = lookup
        .resource_claim_template("ml", "single-gpu")
        .expect("the template is cached");
    assert_eq!(template["kind"], "ResourceClaimTemplate");
    assert_eq!(
        template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"],
        "gpu.nvidia.com"
    );
    assert!(lookup
        .resource_claim_template("other", "single-gpu")
        .is_none());
    let claim = lookup
        .resource_claim("ml", "shared")
        .expect("the claim is cached");
    assert_eq!(claim["kind"], "ResourceClaim");
    // Only the spec is read: status and managed fields are not kept.
    assert!(claim.get("status").is_none_or(Value::is_null), "{claim}");
    assert!(claim["metadata"]
        .get("managedFields")
        .is_none_or(Value::is_null));

    // A template created later is seen by the next lookup.
    fake.change(|c| c.apply(claim_template("four-gpus", "gpu.nvidia.com", 4)));
    wait_until("the new template to be cached", || {
        lookup.resource_claim_template("ml", "four-gpus").is_some()
    })
    .await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_in_a_cluster_places_pods_that_claim_gpus_through_its_templates() {
    let fake =
        FakeApiServer::start(vec![NAMESPACES, RESOURCE_CLAIMS, RESOURCE_CLAIM_TEMPLATES]).await;
    fake.change(|cluster| {
        cluster.apply(namespace("ml", &[]));
        cluster.apply(claim_template("single-gpu", "gpu.nvidia.com", 1));
    });
    let server = InCluster::serve(&fake);
    server.wait_until_ready().await;
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "7d0c7a52-1f0e-4c0b-9d55-2b4a3c1e9f10",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "dra-train",
            "namespace": "ml",
            "operation": "CREATE",
            "userInfo": {"username": "alice@example.com", "groups": ["system:authenticated"]},
            "object": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "dra-train", "namespace": "ml"},
                "spec": {
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}],
                    "containers": [{
                        "name": "trainer",
                        "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                        "resources": {"requests": {"cpu": "4", "memory": "16Gi"}, "claims": [{"name": "gpu"}]},
                    }],
                },
            },
        },
    });
    let (status, body) = server
        .request("POST", "/mutate", &serde_json::to_vec(&review).unwrap())
        .await;
    assert_eq!(status, 200, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    let patch = body["response"]["patch"]
        .as_str()
        .expect("a placement patch");
    use base64::Engine as _;
    let patch = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .unwrap();
    let patch: Value = serde_json::from_slice(&patch).unwrap();
    let tolerations = patch
        .as_array()
        .unwrap()
        .iter()
        .find(|op| op["path"] == "/spec/tolerations")
        .expect("the GPU toleration is added");
    assert_eq!(
        tolerations["value"],
        json!([{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}])
    );
}

/// `serve --report-interval` in the cluster: `/report` is 503 until the
/// first audit, then serves the report `gpu-admission audit -o json` makes
/// of the same cluster (Pods read a page at a time), with its totals in
/// the `gpu_admission_audit_*` metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_audits_the_cluster_periodically_and_serves_the_report() {
    let mut kinds = audited_kinds();
    kinds.push(Resource::new("", "v1", "Node", "nodes", false));
    let fake = FakeApiServer::start(kinds).await;
    fake.change(|cluster| {
        for name in ["default", "apps", "ml", "serving", "batch"] {
            cluster.apply(namespace(name, &LABELS));
        }
        // Two GPU nodes of one AKS pool, one without the GPU taint.
        for (name, taints) in [
            (
                "aks-gpu-0",
                json!([{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]),
            ),
            ("aks-gpu-1", json!([])),
        ] {
            cluster.apply(json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.azure.com/agentpool": "gpu",
                    "node.kubernetes.io/instance-type": "Standard_NC24ads_A100_v4"}},
                "spec": {"taints": taints},
                "status": {"allocatable": {"cpu": "23", "nvidia.com/gpu": "1"}}}));
        }
        for object in workload() {
            cluster.apply(object);
        }
    });
    let server = InCluster::serve_with(&fake, REPORTING);
    let metrics = server.metrics_addr.expect("serve logs its metrics address");
    let report = first_report(metrics).await;
    // Pods were read in pages of 500 (1,006 of them: three pages).
    let pods: Vec<Recorded> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path == "/api/v1/pods" && !r.is_watch())
        .collect();
    assert_eq!(pods.len(), 3, "{pods:?}");
    assert!(pods.iter().all(|p| p.param("limit") == Some("500")));
    assert!(pods[1].param("continue").is_some() && pods[2].param("continue").is_some());

    let tmp = tempfile::tempdir().unwrap();
    let kubeconfig = fake.kubeconfig(tmp.path());
    let (cli, _) = tokio::task::spawn_blocking(move || run_audit(&[], &kubeconfig))
        .await
        .unwrap();
    assert_eq!(report["objects"], cli["objects"]);
    assert_eq!(report["evaluated"], cli["evaluated"]);
    assert_eq!(report["passed"], cli["passed"]);
    assert_eq!(sorted_findings(&report), sorted_findings(&cli));
    assert!(report["findings"].as_array().unwrap().len() > 20);
    // The INFO line of the run gives its totals.
    let done = "periodic report done";
    common::fake_apiserver::wait_until("the run's line", || server.logged(done)).await;
    let line = &server.log_line(done).unwrap()["fields"];
    assert_eq!(
        line["findings"],
        report["findings"].as_array().unwrap().len()
    );
    for (field, total) in [
        ("gpus_held", &report["gpusHeld"]),
        ("gpus_pending", &report["gpusPending"]),
        ("gpus_in_violation", &report["gpusInViolation"]),
        ("gpus_idle", &report["nodes"]["gpusIdle"]),
        ("gpus_unusable", &report["nodes"]["gpusUnusable"]),
    ] {
        assert!(total.is_i64(), "{field}: {total}");
        assert_eq!(&line[field], total, "{field}: {line}");
    }
    // Nodes are read by both, into the same pools and findings.
    assert_eq!(report["gpusHeld"], cli["gpusHeld"]);
    assert_eq!(report["gpusPending"], cli["gpusPending"]);
    assert_eq!(report["nodes"]["gpuNodes"], 2, "{:#}", report["nodes"]);
    assert_eq!(report["nodes"]["pools"], cli["nodes"]["pools"]);
    assert_eq!(report["nodes"]["findings"], cli["nodes"]["findings"]);
    let untainted: Vec<&Value> = report["nodes"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["rule"] == "gpu-node-untainted")
        .map(|f| &f["node"])
        .collect();
    assert_eq!(untainted, [&json!("aks-gpu-1")]);

    let (status, page) = common::plain_get(metrics, "/report").await;
    assert_eq!(status.as_u16(), 200);
    // The page of `audit -o html`, with the cluster it read named.
    assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
    assert!(page.contains("GPU admission report"), "{page}");
    assert!(page.contains("GPUs held by violating workloads"), "{page}");
    let held = report["gpusHeld"].as_i64().unwrap();
    assert!(
        page.contains(&format!("id=\"total-gpus-held\" data-value=\"{held}\"")),
        "the page's totals are the JSON's: {page}"
    );

    let (_, text) = common::plain_get(metrics, "/metrics").await;
    let idle = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["namespace"] == "batch" && f["policy"] == "gpu-keep-alive")
        .count();
    assert!(idle > 0, "{report:#}");
    assert!(
        text.lines().any(|l| l.starts_with(
            r#"gpu_admission_audit_violations{policy="gpu-keep-alive",namespace="batch","#
        )),
        "{text}"
    );
    let sample = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
            .trim()
            .parse()
            .unwrap()
    };
    assert_eq!(
        sample("gpu_admission_audit_objects"),
        cli["objects"].as_f64().unwrap()
    );
    assert!(sample("gpu_admission_audit_last_run_timestamp_seconds") > 1.7e9);
    assert_eq!(sample("gpu_admission_audit_run_errors_total"), 0.0);
    assert_eq!(sample("gpu_admission_audit_leader"), 1.0);

    // SIGTERM stops the report thread with the server.
    let mut server = server;
    let status = server.terminate();
    assert!(status.success(), "{status:?}");
}

fn cluster_node(name: &str, pool: &str, gpus: u32) -> Value {
    let mut labels =
        json!({"kubernetes.azure.com/agentpool": pool, "kubernetes.io/hostname": name});
    let mut taints = json!([]);
    if gpus > 0 {
        labels["kubernetes.azure.com/accelerator"] = json!("nvidia");
        labels["node.kubernetes.io/instance-type"] = json!("Standard_NC4as_T4_v3");
        taints = json!([{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]);
    }
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
        "spec": {"taints": taints, "providerID": format!("azure:///{name}")},
        "status": {"allocatable": {"cpu": "3860m", "nvidia.com/gpu": gpus.to_string()},
            "images": [{"names": ["mcr.microsoft.com/oss/kubernetes/pause:3.6"], "sizeBytes": 299514}],
            "conditions": [{"type": "Ready", "status": "True"}]},
    })
}

fn pod_review(uid: &str, pod: Value) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "apps", "operation": "CREATE",
        "userInfo": {"username": "alice@example.com", "groups": ["system:authenticated"]},
        "object": pod, "oldObject": null, "dryRun": false}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_judges_where_pods_land_against_the_nodes_it_watches() {
    let fake = FakeApiServer::start(vec![NAMESPACES, NODES, NODEPOOLS]).await;
    fake.change(|cluster| {
        cluster.apply(namespace("apps", &[]));
        cluster.apply(cluster_node("aks-system-1", "system", 0));
        cluster.apply(cluster_node("aks-gpupool-1", "gpupool", 1));
        // A GPU NodePool that scales from zero: no node of it exists yet.
        cluster.apply(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "a100-spot"},
            "spec": {"template": {"metadata": {"labels": {"workload": "llm"}}, "spec": {
                "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
                "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                    "values": ["Standard_NC24ads_A100_v4"]}],
                "taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]}}},
        }));
    });
    let server = InCluster::serve(&fake);
    server.wait_until_ready().await;
    // Tolerating everything and selecting the GPU pool by its name: only
    // the node cache knows that pool is a GPU pool.
    let by_pool = pod_review(
        "by-pool",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "agent", "namespace": "apps"},
            "spec": {"nodeSelector": {"kubernetes.azure.com/agentpool": "gpupool"},
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "agent", "image": "python:3.12"}]}}),
    );
    let (allowed, message) = server.validate(&by_pool).await;
    assert!(!allowed);
    assert!(
        message.contains("gpu-node-isolation: pod asks for no GPU but its nodeSelector / required node affinity selects GPU nodes (it can land on aks-gpupool-1)"),
        "{message}"
    );
    // A CPU pod aimed at the NodePool by a label of its template: Karpenter
    // would create an A100 node for it.
    let by_nodepool = pod_review(
        "by-nodepool",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "apps"},
            "spec": {"nodeSelector": {"karpenter.sh/nodepool": "a100-spot"},
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "web", "image": "nginx:1.27"}]}}),
    );
    let message = server.denial_eventually(&by_nodepool, "the NodePool").await;
    assert!(
        message.contains("(it can land on NodePool/a100-spot)"),
        "{message}"
    );
    // A pool added later is seen once the watch brings its node.
    let new_pool = pod_review(
        "new-pool",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "batch", "namespace": "apps"},
            "spec": {"nodeName": "aks-gpu2-1", "containers": [{"name": "batch", "image": "python:3.12"}]}}),
    );
    let (allowed, message) = server.validate(&new_pool).await;
    assert!(allowed, "an unknown node is no GPU node: {message}");
    fake.change(|cluster| cluster.apply(cluster_node("aks-gpu2-1", "gpu2", 1)));
    let message = server.denial_eventually(&new_pool, "the new node").await;
    assert!(
        message.contains("is bound by spec.nodeName to GPU node aks-gpu2-1"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_without_access_to_nodes_is_ready_and_judges_by_labels() {
    let fake = FakeApiServer::start(vec![NAMESPACES, NODES]).await;
    fake.change(|cluster| {
        cluster.apply(namespace("apps", &[]));
        cluster.forbid(&NODES);
    });
    let server = InCluster::serve(&fake);
    server.wait_until_ready().await;
    let by_label = pod_review(
        "by-label",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "agent", "namespace": "apps"},
            "spec": {"nodeSelector": {"nvidia.com/gpu.deploy.dcgm-exporter": "true"},
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "agent", "image": "python:3.12"}]}}),
    );
    let (allowed, message) = server.validate(&by_label).await;
    assert!(!allowed);
    assert!(message.contains("selects GPU nodes"), "{message}");
}

/// One audit run everywhere: for one cluster whose GPU pods are bound by
/// `nodeName` to A100 nodes in a standard-tier namespace, `/report`,
/// `audit` of the cluster and `audit -f` of a dump of it reach the same
/// findings with the same messages, judged against the nodes each read,
/// and the same GPUs held and requested, counted through the pods of the
/// controllers (a Deployment's pod bound and still pulling its image is
/// held, not "not placed" because it is not ready yet), in total and per
/// namespace; and, with one price file and one Prometheus, the same idle
/// pods, costs and figures per namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_periodic_report_audit_of_the_cluster_and_of_a_dump_agree_on_node_reach() {
    let mut kinds = audited_kinds();
    kinds.push(Resource::new("", "v1", "Node", "nodes", false));
    let fake = FakeApiServer::start(kinds).await;
    let mut objects = vec![namespace(
        "research",
        &[("gpu-admission.io/tier", "standard")],
    )];
    for i in 0..3 {
        objects.push(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": format!("aks-a100-{i}"), "labels": {
                "kubernetes.azure.com/agentpool": "a100",
                "kubernetes.azure.com/accelerator": "nvidia",
                "node.kubernetes.io/instance-type": "Standard_NC24ads_A100_v4"}},
            "spec": {"taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "23", "memory": "210Gi", "nvidia.com/gpu": "1"}}}));
    }
    for i in 0..6 {
        let limits = if i % 3 == 2 {
            json!({"cpu": "1", "memory": "1Gi"})
        } else {
            json!({"nvidia.com/gpu": "1", "cpu": "4", "memory": "32Gi"})
        };
        objects.push(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("trainer-{i}"), "namespace": "research",
                         "uid": format!("uid-trainer-{i}")},
            "spec": {"nodeName": format!("aks-a100-{}", i % 3),
                     "containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.08-py3",
                                     "command": ["python", "train.py"],
                                     "resources": {"requests": limits.clone(), "limits": limits}}]},
            "status": {"phase": "Running"}}));
    }
    objects.extend(controllers_and_their_pods());
    fake.change(|cluster| {
        for object in &objects {
            cluster.apply(object.clone());
        }
    });
    let tmp = tempfile::tempdir().unwrap();
    let prices = tmp.path().join("prices.yaml");
    std::fs::write(&prices, "date: \"2026-11-01\"\nsource: test prices\nprices:\n  - {region: eastus, size: Standard_NC24ads_A100_v4, perHour: 4.0}\n").unwrap();
    let prices = prices.to_str().unwrap().to_string();
    // trainer-0 and chat-7c9-a idle all day, trainer-1 busy; the other
    // pods have no series.
    let prometheus = fake_prometheus(&[
        ("research", "trainer-0", 0.0),
        ("research", "trainer-1", 0.8),
        ("serving", "chat-7c9-a", 0.01),
    ])
    .await;
    let measured = ["--prometheus", &prometheus];
    let mut serve = REPORTING.to_vec();
    serve.extend(measured);
    serve.extend(["--report-prices", &prices]);
    let server = InCluster::serve_with(&fake, &serve);
    let metrics = server.metrics_addr.expect("serve logs its metrics address");
    let report = first_report(metrics).await;

    let kubeconfig = fake.kubeconfig(tmp.path());
    let dump = tmp.path().join("dump.json");
    std::fs::write(
        &dump,
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": objects})).unwrap(),
    )
    .unwrap();
    let dump_arg = dump.to_str().unwrap().to_string();
    let args = [measured[0], measured[1], "--prices", &prices].map(str::to_string);
    let (cluster, of_dump) = tokio::task::spawn_blocking(move || {
        let args = args.each_ref().map(String::as_str);
        (
            run_audit(&args, &kubeconfig).0,
            run_audit(&[&["-f", &dump_arg][..], &args].concat(), &kubeconfig).0,
        )
    })
    .await
    .unwrap();
    let findings = sorted_findings(&report);
    assert_eq!(findings, sorted_findings(&cluster));
    assert_eq!(findings, sorted_findings(&of_dump));
    // The pods bound to A100 nodes: each GPU pod is outside its tier, each
    // CPU pod on a GPU node.
    let on_a100 = |policy: &str| {
        (findings.iter())
            .filter(|f| f["policy"] == policy && f["message"].as_str().unwrap().contains("A100"))
            .count()
    };
    assert_eq!(on_a100("gpu-sku-allowlist"), 4, "{findings:#?}");
    let bound_cpu_pods = (findings.iter())
        .filter(|f| {
            f["message"]
                .as_str()
                .unwrap()
                .contains("bound by spec.nodeName to GPU node")
        })
        .count();
    assert_eq!(bound_cpu_pods, 2, "{findings:#?}");
    let figures = [
        "objects",
        "evaluated",
        "gpusHeld",
        "gpusInViolation",
        "gpusPending",
        "gpusCounted",
        "namespaces",
        "utilization",
        "money",
    ];
    for figure in figures {
        assert_eq!(report[figure], cluster[figure], "{figure}");
        assert_eq!(report[figure], of_dump[figure], "{figure}");
    }
    // Held: the 4 trainers, chat's 2 bound pods (one not ready yet),
    // finetune's running pod; not placed: finetune's unbound pod, eval's 2.
    assert_eq!(
        (&report["gpusHeld"], &report["gpusPending"]),
        (&json!(7), &json!(3))
    );
    assert_eq!(report["gpusCounted"], json!({"pod": 5, "pods": 2}));
    // Per namespace the same: research's 4 trainers, each violating its
    // tier (each at its node's 4 an hour); serving's chat (2), finetune (1
    // and 1; no deadline: a finding, at the mean, 4) and eval (0 and 2);
    // an idle pod in each, at its node's price; GPU-seconds of the pods
    // with a series, a day each: trainer-0 and -1 (used 0 and 80 %),
    // chat-7c9-a (1 %).
    assert_eq!(
        report["namespaces"],
        json!({"research": {"gpusHeld": 4, "gpusPending": 0, "gpusInViolation": 4, "gpusIdle": 1,
                "gpuSecondsAllocated": 172_800.0, "gpuSecondsUsed": 69_120.0,
                "violationsPerDay": 384.0, "idlePodsPerDay": 96.0},
            "serving": {"gpusHeld": 3, "gpusPending": 3, "gpusInViolation": 1, "gpusIdle": 1,
                "gpuSecondsAllocated": 86_400.0, "gpuSecondsUsed": 864.0,
                "violationsPerDay": 96.0, "idlePodsPerDay": 96.0}})
    );
    assert_eq!(report["money"]["idlePodsPerDay"], 192.0);
    assert_eq!(
        report["utilization"]["idlePods"].as_array().unwrap().len(),
        2
    );
    for audit in [&report, &cluster, &of_dump] {
        assert_eq!(audit["nodes"]["gpusRequested"], audit["gpusHeld"]);
    }
}

/// A Prometheus query API answering every query with a day of engine
/// activity peaking at `peak` for each `(namespace, pod, peak)`, read at
/// 2026-12-02T00:00:00Z; its base URL.
async fn fake_prometheus(pods: &[(&str, &str, f64)]) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let result: Vec<Value> = (pods.iter())
        .flat_map(|(namespace, pod, peak)| {
            ["max", "mean"].map(|stat| {
                json!({"metric": {"namespace": namespace, "pod": pod, "stat": stat,
                    "metric": "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "window": "24h"},
                    "value": [1_796_169_600.0, peak.to_string()]})
            })
        })
        .collect();
    let body = json!({"status": "success", "data": {"resultType": "vector", "result": result}});
    let answer = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.to_string().len()
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                // A GET: the request ends with its headers.
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = conn.write_all(answer.as_bytes()).await;
            });
        }
    });
    url
}

/// In namespace serving: Deployment chat (2 replicas of 1 GPU, 1 ready)
/// whose second pod is bound to aks-a100-1 and still pulling its image;
/// Job finetune (2 × 1 GPU, 1 ready) with one pod running on aks-a100-2
/// and one unschedulable; and a Pending pod eval (2 GPUs) on no node.
fn controllers_and_their_pods() -> Vec<Value> {
    let spec = |gpus: &str| {
        json!({"containers": [{"name": "main", "image": "vllm/vllm-openai:v0.8.5",
            "resources": {"limits": {"nvidia.com/gpu": gpus, "cpu": "4", "memory": "32Gi"}}}]})
    };
    let meta = |name: &str, owner: Option<(&str, &str)>| {
        let mut m = json!({"name": name, "namespace": "serving", "uid": format!("uid-{name}")});
        if let Some((kind, owner)) = owner {
            m["ownerReferences"] = json!([{"apiVersion": if kind == "Job" { "batch/v1" } else { "apps/v1" },
                "kind": kind, "name": owner, "uid": format!("uid-{owner}"), "controller": true}]);
        }
        m
    };
    let pod = |name: &str, owner: (&str, &str), node: Option<&str>, status: Value| {
        let mut spec = spec("1");
        if let Some(node) = node {
            spec["nodeName"] = json!(node);
        }
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta(name, Some(owner)),
            "spec": spec, "status": status})
    };
    let pulling = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"},
        {"type": "Ready", "status": "False"}],
        "containerStatuses": [{"name": "main", "ready": false, "restartCount": 0,
            "image": "vllm/vllm-openai:v0.8.5", "imageID": "",
            "state": {"waiting": {"reason": "ContainerCreating"}}}]});
    let unschedulable = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled",
        "status": "False", "reason": "Unschedulable"}]});
    let running = json!({"phase": "Running", "startTime": "2026-12-01T00:00:00Z",
        "conditions": [{"type": "Ready", "status": "True"}]});
    vec![
        namespace("serving", &[]),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("chat", None),
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "chat"}},
                "template": {"metadata": {"labels": {"app": "chat"}}, "spec": spec("1")}},
            "status": {"replicas": 2, "readyReplicas": 1, "availableReplicas": 1}}),
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": meta("chat-7c9", Some(("Deployment", "chat"))),
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "chat"}},
                "template": {"metadata": {"labels": {"app": "chat"}}, "spec": spec("1")}},
            "status": {"replicas": 2, "readyReplicas": 1}}),
        pod(
            "chat-7c9-a",
            ("ReplicaSet", "chat-7c9"),
            Some("aks-a100-0"),
            running.clone(),
        ),
        pod(
            "chat-7c9-b",
            ("ReplicaSet", "chat-7c9"),
            Some("aks-a100-1"),
            pulling,
        ),
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta("finetune", None),
            "spec": {"parallelism": 2, "completions": 2,
                "template": {"spec": {"restartPolicy": "Never", "containers": spec("1")["containers"]}}},
            "status": {"active": 2, "ready": 1, "startTime": "2026-12-01T00:00:00Z"}}),
        pod(
            "finetune-a",
            ("Job", "finetune"),
            Some("aks-a100-2"),
            running,
        ),
        pod(
            "finetune-b",
            ("Job", "finetune"),
            None,
            unschedulable.clone(),
        ),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta("eval", None),
            "spec": spec("2"), "status": unschedulable}),
    ]
}
