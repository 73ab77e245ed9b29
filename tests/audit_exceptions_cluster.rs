//! `audit` reading a cluster honours the GpuPolicyExceptions it lists; a
//! cluster that does not serve the kind, or an audit that may not list it,
//! honours none and says so once in the report.
use crate::common;
use common::fake_apiserver::{FakeApiServer, Resource, NAMESPACES};
use serde_json::{json, Value};

const PODS: Resource = Resource::new("", "v1", "Pod", "pods", true);
const EXCEPTIONS: Resource = Resource::new(
    "gpu-admission.io",
    "v1alpha1",
    "GpuPolicyException",
    "gpupolicyexceptions",
    true,
);

fn privileged_pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "research", "uid": format!("uid-{name}")},
        "spec": {"nodeName": "gpu-0", "containers": [{
            "name": "bench", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "securityContext": {"privileged": true},
            "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "4", "memory": "16Gi"},
                          "requests": {"nvidia.com/gpu": "1", "cpu": "4", "memory": "16Gi"}}}]},
        "status": {"phase": "Running"},
    })
}

/// Runs `gpu-admission audit -o json` against the fake cluster.
async fn audit(fake: &FakeApiServer) -> (Value, String) {
    let tmp = tempfile::tempdir().unwrap();
    let kubeconfig = fake.kubeconfig(tmp.path());
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
            .args(["audit", "-o", "json"])
            .env("KUBECONFIG", &kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "audit failed: {stderr}");
        let report = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("no JSON report ({e}): {stderr}"));
        (report, stderr)
    })
    .await
    .unwrap()
}

fn populate(fake: &FakeApiServer, with_exception: bool) {
    fake.change(|cluster| {
        cluster.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "research"}}));
        cluster.apply(privileged_pod("nccl-bench-0"));
        cluster.apply(privileged_pod("notebook"));
        if with_exception {
            cluster.apply(json!({
                "apiVersion": "gpu-admission.io/v1alpha1", "kind": "GpuPolicyException",
                "metadata": {"name": "nccl-bench", "namespace": "research"},
                "spec": {"policies": ["gpu-privileged"], "match": {"kinds": ["Pod"], "names": ["nccl-bench-*"]},
                         "reason": "NCCL benchmark", "expiresAt": "2099-01-01T00:00:00Z",
                         "requestedBy": "alice@example.com"},
            }));
        }
    });
}

fn names(report: &Value, field: &str) -> Vec<String> {
    report[field]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| format!("{} {}", f["name"], f["policy"]))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_of_a_cluster_honours_the_exceptions_it_lists() {
    let fake = FakeApiServer::start(vec![NAMESPACES, PODS, EXCEPTIONS]).await;
    populate(&fake, true);
    let (report, _) = audit(&fake).await;
    assert_eq!(
        names(&report, "findings"),
        ["\"notebook\" \"gpu-privileged\""]
    );
    assert_eq!(
        names(&report, "excepted"),
        ["\"nccl-bench-0\" \"gpu-privileged\""]
    );
    let listed = &report["exceptions"];
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["name"], "nccl-bench");
    assert_eq!(listed[0]["requestedBy"], "alice@example.com");
    assert_eq!(listed[0]["state"], "active");
    assert_eq!(
        listed[0]["letThrough"][0],
        "Pod research/nccl-bench-0 through gpu-privileged (deny)"
    );
    assert!(report.get("exceptionNotes").is_none(), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_kind_or_the_right_to_list_it_no_exception_is_honoured_and_the_report_says_so()
{
    // The cluster does not serve the kind.
    let fake = FakeApiServer::start(vec![NAMESPACES, PODS]).await;
    populate(&fake, false);
    let (report, _) = audit(&fake).await;
    assert_eq!(report["findings"].as_array().unwrap().len(), 2);
    let notes = report["exceptionNotes"].as_array().unwrap();
    assert_eq!(notes.len(), 1, "{notes:?}");
    let note = notes[0].as_str().unwrap();
    assert!(
        note.starts_with(
            "skipping GpuPolicyException.gpu-admission.io: the cluster does not serve it"
        ),
        "{note}"
    );
    assert!(
        note.ends_with(": no GpuPolicyException was read, so none is honoured"),
        "{note}"
    );

    // Served, but the audit may not list it.
    let fake = FakeApiServer::start(vec![NAMESPACES, PODS, EXCEPTIONS]).await;
    populate(&fake, true);
    fake.change(|cluster| cluster.forbid(&EXCEPTIONS));
    let (report, _) = audit(&fake).await;
    assert_eq!(report["findings"].as_array().unwrap().len(), 2);
    assert!(report["excepted"].as_array().unwrap().is_empty());
    let notes = report["exceptionNotes"].as_array().unwrap();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0]
            .as_str()
            .unwrap()
            .starts_with("skipping GpuPolicyException.gpu-admission.io: not allowed to list it"),
        "{notes:?}"
    );
}
