//! Workloads as a cluster runs them, through the shipped policies over
//! real TLS with AdmissionReview v1 JSON: controller updates (a changed
//! template is judged as a new pod, an unchanged one never), exemptions of
//! GPU infrastructure by exact image repository, DaemonSets that run on
//! GPU nodes without a GPU, and privileged init containers of GPU pods.
mod common;

use common::{config, NoNamespaces, TestServer};
use gpu_admission::admission::Admission;
use gpu_admission::bundle::{self, PolicySource};
use serde_json::{json, Value};
use std::sync::Arc;

fn shipped_admission() -> Admission {
    let loaded = bundle::load(&PolicySource::Embedded).expect("shipped policies load");
    Admission::new(loaded.bundle, Arc::new(NoNamespaces))
}

/// An AdmissionReview as kube-apiserver sends it for `object` (and, on
/// UPDATE, `old`), made by `username`.
fn review(
    uid: &str,
    operation: &str,
    object: &Value,
    old: Option<&Value>,
    username: &str,
) -> Value {
    let kind = object["kind"].as_str().unwrap_or("Pod");
    let api_version = object["apiVersion"].as_str().unwrap_or("v1");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let resource = format!("{}s", kind.to_ascii_lowercase());
    let options_kind = if operation == "UPDATE" {
        "UpdateOptions"
    } else {
        "CreateOptions"
    };
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "requestKind": {"group": group, "version": version, "kind": kind},
            "requestResource": {"group": group, "version": version, "resource": resource},
            "name": object["metadata"]["name"].as_str().unwrap_or(""),
            "namespace": object["metadata"]["namespace"].as_str().unwrap_or("default"),
            "operation": operation,
            "userInfo": {"username": username, "groups": ["system:authenticated"]},
            "object": object,
            "oldObject": old,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": options_kind}
        }
    })
}

/// What `/validate` said: allowed, the denial message, the warnings.
struct Answer {
    allowed: bool,
    message: String,
    warnings: Vec<String>,
}

async fn validate(server: &TestServer, review: &Value) -> Answer {
    let (status, answer) = server.post_review("/validate", review).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["response"]["uid"], review["request"]["uid"]);
    let response = &answer["response"];
    Answer {
        allowed: response["allowed"].as_bool().expect("allowed"),
        message: response["status"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        warnings: response["warnings"]
            .as_array()
            .map(|w| {
                w.iter()
                    .map(|w| w.as_str().unwrap_or_default().to_string())
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// Policy bindings evaluated so far, over every policy and result.
async fn policy_evaluations(server: &TestServer) -> f64 {
    let (_, metrics) = server.get_metrics_listener("/metrics").await;
    metrics
        .lines()
        .filter(|l| l.starts_with("gpu_admission_policy_evaluations_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn gpu_deployment(replicas: i64, privileged: bool) -> Value {
    let mut container = json!({
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.6.3",
        "args": ["--model", "microsoft/phi-4"],
        "resources": {
            "requests": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"},
            "limits": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"}
        }
    });
    if privileged {
        container["securityContext"] = json!({"privileged": true});
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "llm-serve", "namespace": "inference", "generation": 7,
            "labels": {"app": "llm-serve"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "llm-serve"}},
            "template": {
                "metadata": {"labels": {"app": "llm-serve"}},
                "spec": {"containers": [container]}
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_updates_judge_changed_templates_only() {
    let server = TestServer::start_with(config(), Arc::new(shipped_admission())).await;
    let user = "alice@example.com";

    // Updated to a privileged GPU template: judged as a new pod, denied.
    let plain = gpu_deployment(2, false);
    let privileged = gpu_deployment(2, true);
    let answer = validate(
        &server,
        &review("to-privileged", "UPDATE", &privileged, Some(&plain), user),
    )
    .await;
    assert!(!answer.allowed, "privileged template update was allowed");
    assert!(
        answer.message.contains(
            "gpu-privileged: Deployment llm-serve: container vllm is privileged in a GPU pod"
        ),
        "{}",
        answer.message
    );

    // A DaemonSet updated so a container without a GPU sets NVIDIA_VISIBLE_DEVICES=all.
    let daemonset = |env: Value| {
        json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "node-metrics", "namespace": "monitoring"},
            "spec": {"selector": {"matchLabels": {"app": "node-metrics"}},
                "template": {"metadata": {"labels": {"app": "node-metrics"}},
                    "spec": {"tolerations": [{"operator": "Exists"}],
                        "containers": [{"name": "exporter", "image": "quay.io/prometheus/node-exporter:v1.8.2",
                            "env": env, "resources": {"limits": {"cpu": "200m", "memory": "128Mi"}}}]}}}
        })
    };
    let before = daemonset(json!([]));
    let after = daemonset(json!([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]));
    let answer = validate(
        &server,
        &review("ds-leak", "UPDATE", &after, Some(&before), user),
    )
    .await;
    assert!(!answer.allowed, "DaemonSet GPU leak update was allowed");
    assert!(
        answer.message.contains(
            "gpu-visible-devices-leak: DaemonSet node-metrics: container exporter sets NVIDIA_VISIBLE_DEVICES"
        ),
        "{}",
        answer.message
    );

    // A CronJob whose jobTemplate is changed the same way.
    let cronjob = |env: Value| {
        json!({
            "apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "nightly-eval", "namespace": "inference"},
            "spec": {"schedule": "0 2 * * *", "jobTemplate": {"spec": {"activeDeadlineSeconds": 7200,
                "template": {"spec": {"restartPolicy": "Never", "containers": [
                    {"name": "eval", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                     "resources": {"limits": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"}}},
                    {"name": "uploader", "image": "mcr.microsoft.com/azure-cli:2.67.0", "env": env}
                ]}}}}}
        })
    };
    let before = cronjob(json!([]));
    let after = cronjob(json!([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]));
    let answer = validate(
        &server,
        &review("cron", "UPDATE", &after, Some(&before), user),
    )
    .await;
    assert!(!answer.allowed, "CronJob jobTemplate update was allowed");
    assert!(
        answer.message.contains(
            "gpu-visible-devices-leak: CronJob nightly-eval: container uploader sets NVIDIA_VISIBLE_DEVICES"
        ),
        "{}",
        answer.message
    );
    // The same CronJob with only its schedule changed is not judged.
    let mut rescheduled = after.clone();
    rescheduled["spec"]["schedule"] = json!("0 3 * * *");
    let answer = validate(
        &server,
        &review("cron-schedule", "UPDATE", &rescheduled, Some(&after), user),
    )
    .await;
    assert!(answer.allowed, "{}", answer.message);

    let evaluations_before = policy_evaluations(&server).await;
    assert!(evaluations_before > 0.0, "the updates above were evaluated");
    // Scaled to zero while its template would be denied today: allowed, and
    // answered without evaluating any policy.
    let scaled = gpu_deployment(0, true);
    let answer = validate(
        &server,
        &review("scale", "UPDATE", &scaled, Some(&privileged), user),
    )
    .await;
    assert!(answer.allowed, "{}", answer.message);
    assert!(answer.warnings.is_empty(), "{:?}", answer.warnings);
    // Only the controller's labels change: allowed.
    let mut relabelled = privileged.clone();
    relabelled["metadata"]["labels"]["cost-center"] = json!("4711");
    let answer = validate(
        &server,
        &review("labels", "UPDATE", &relabelled, Some(&privileged), user),
    )
    .await;
    assert!(answer.allowed, "{}", answer.message);
    assert!(answer.warnings.is_empty(), "{:?}", answer.warnings);
    assert_eq!(
        policy_evaluations(&server).await,
        evaluations_before,
        "an update that leaves the template alone evaluates no policy"
    );
    server.stop().await;
}
