//! Workloads as a cluster runs them, through the shipped policies over
//! real TLS with AdmissionReview v1 JSON: controller updates (a changed
//! template is judged as a new pod, an unchanged one never), exemptions of
//! GPU infrastructure by exact image repository, DaemonSets that run on
//! GPU nodes without a GPU, and privileged init containers of GPU pods.
use crate::common;

use common::{admission_review as review, config, NoNamespaces, TestServer};
use gpu_admission::admission::Admission;
use gpu_admission::bundle::{self, PolicySource};
use serde_json::{json, Value};
use std::sync::Arc;

fn shipped_admission() -> Admission {
    let loaded = bundle::load(&PolicySource::Embedded).expect("shipped policies load");
    Admission::new(loaded.bundle, Arc::new(NoNamespaces))
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

/// The user kube-controller-manager's DaemonSet controller creates pods as.
const DAEMON_SET_CONTROLLER: &str = "system:serviceaccount:kube-system:daemon-set-controller";

/// `/mutate` then `/validate` of the patched object, as kube-apiserver runs
/// them on CREATE: the patched object and the validation answer.
async fn admit(server: &TestServer, uid: &str, object: &Value, username: &str) -> (Value, Answer) {
    let (status, mutated) = server
        .post_review("/mutate", &review(uid, "CREATE", object, None, username))
        .await;
    assert_eq!(status, 200, "{mutated}");
    assert_eq!(mutated["response"]["allowed"], true, "{mutated}");
    let mut patched = object.clone();
    if let Some(patch) = common::review_patch(&mutated) {
        json_patch::patch(&mut patched, &patch).expect("patch applies");
    }
    let answer = validate(server, &review(uid, "CREATE", &patched, None, username)).await;
    (patched, answer)
}

fn daemonset(name: &str, namespace: &str, pod_spec: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec}}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infrastructure_is_recognised_by_exact_image_and_every_container() {
    let server = TestServer::start_with(config(), Arc::new(shipped_admission())).await;
    let user = "alice@example.com";
    let toleration =
        json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]);
    let leak = json!([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]);

    // The device plugin, by tag or digest, in a namespace on the admin-set
    // list: allowed; the same elsewhere: its image alone exempts nothing.
    for image in [
        "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
        "nvcr.io/nvidia/k8s-device-plugin@sha256:7d2c6d4b8a3e1f0c9b5a2e6d4f8c1b3a5e7d9f0b2c4a6e8d0f1b3c5a7e9d2f4b6",
    ] {
        let spec = json!({
            "tolerations": toleration,
            "containers": [{"name": "nvidia-device-plugin-ctr", "image": image, "env": leak}]
        });
        let plugin = daemonset("nvidia-device-plugin-daemonset", "gpu-operator", spec.clone());
        let (_, answer) = admit(&server, "plugin", &plugin, user).await;
        assert!(answer.allowed, "{image}: {}", answer.message);
        assert!(answer.warnings.is_empty(), "{image}: {:?}", answer.warnings);
        let elsewhere = daemonset("nvidia-device-plugin-daemonset", "kube-gpu", spec);
        let (_, answer) = admit(&server, "plugin", &elsewhere, user).await;
        assert!(!answer.allowed, "{image}: exempt by its image alone");
    }

    // A look-alike image is not the device plugin.
    let miner = daemonset(
        "k8s-device-plugin",
        "kube-gpu",
        json!({
            "tolerations": toleration,
            "containers": [{"name": "plugin", "image": "docker.io/someone/k8s-device-plugin-miner:latest", "env": leak}]
        }),
    );
    let (_, answer) = admit(&server, "miner", &miner, user).await;
    assert!(!answer.allowed, "look-alike image was exempt");
    assert!(
        answer.message.contains(
            "gpu-visible-devices-leak: DaemonSet k8s-device-plugin: container plugin sets NVIDIA_VISIBLE_DEVICES"
        ),
        "{}",
        answer.message
    );

    // A device-plugin sidecar does not carry another container through.
    let sidecar = daemonset(
        "nvidia-device-plugin-daemonset",
        "kube-gpu",
        json!({
            "tolerations": toleration,
            "containers": [
                {"name": "nvidia-device-plugin-ctr", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"},
                {"name": "helper", "image": "python:3.12-slim", "command": ["python", "/opt/job/run.py"], "env": leak}
            ]
        }),
    );
    let (_, answer) = admit(&server, "sidecar", &sidecar, user).await;
    assert!(!answer.allowed, "device-plugin sidecar exempted the pod");
    assert!(
        answer
            .message
            .contains("container helper sets NVIDIA_VISIBLE_DEVICES"),
        "{}",
        answer.message
    );

    // A pod of the device plugin in a namespace on the admin-set list:
    // exempt when the DaemonSet controller creates it, judged like any pod
    // when a person writes the DaemonSet ownerReference.
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "nvidia-device-plugin-daemonset-x7k2p", "namespace": "gpu-operator",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                "name": "nvidia-device-plugin-daemonset", "uid": "5b0c0a57-8f1e-4c1e-9d55-0b6c2f1f6e21",
                "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"tolerations": toleration, "containers": [{"name": "nvidia-device-plugin-ctr",
            "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0", "env": leak}]}
    });
    let (_, answer) = admit(&server, "ds-pod", &pod, DAEMON_SET_CONTROLLER).await;
    assert!(answer.allowed, "{}", answer.message);
    let (_, answer) = admit(&server, "forged-pod", &pod, user).await;
    assert!(!answer.allowed, "a forged ownerReference exempted the pod");
    assert!(
        answer
            .message
            .contains("gpu-visible-devices-leak: container nvidia-device-plugin-ctr"),
        "{}",
        answer.message
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_agent_daemonsets_are_warned_not_denied() {
    let server = TestServer::start_with(config(), Arc::new(shipped_admission())).await;
    let user = "alice@example.com";

    // A log agent tolerating the GPU taints by key.
    let fluent_bit = daemonset(
        "fluent-bit",
        "logging",
        json!({
            "tolerations": [
                {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "containers": [{"name": "fluent-bit", "image": "cr.fluentbit.io/fluent/fluent-bit:3.1.9",
                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}}]
        }),
    );
    let (patched, answer) = admit(&server, "fluent-bit", &fluent_bit, user).await;
    assert_eq!(patched, fluent_bit, "templates are never mutated");
    assert!(answer.allowed, "{}", answer.message);
    assert_eq!(answer.warnings.len(), 1, "{:?}", answer.warnings);
    assert!(
        answer.warnings[0].starts_with(
            "gpu-node-isolation-daemonset: DaemonSet fluent-bit: asks for no GPU but tolerates the GPU node taint"
        ),
        "{:?}",
        answer.warnings
    );
    // Its pods, created by the DaemonSet controller: neither denied nor warned.
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "fluent-bit-", "namespace": "logging",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "fluent-bit",
                "uid": "0f5d2c1e-3b4a-4c6d-8e9f-1a2b3c4d5e6f", "controller": true, "blockOwnerDeletion": true}]},
        "spec": fluent_bit["spec"]["template"]["spec"].clone()
    });
    let (_, answer) = admit(&server, "fluent-bit-pod", &pod, DAEMON_SET_CONTROLLER).await;
    assert!(answer.allowed, "{}", answer.message);
    assert!(answer.warnings.is_empty(), "{:?}", answer.warnings);

    // The NVIDIA DRA kubelet plugin: GPU infrastructure, not even warned.
    let dra = daemonset(
        "nvidia-dra-driver-gpu-kubelet-plugin",
        "nvidia-dra-driver-gpu",
        json!({
            "nodeSelector": {"nvidia.com/gpu.present": "true"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "initContainers": [{"name": "init-container", "image": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.0"}],
            "containers": [
                {"name": "compute-domains", "image": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.0",
                 "securityContext": {"privileged": true}},
                {"name": "gpus", "image": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.0",
                 "securityContext": {"privileged": true}}
            ]
        }),
    );
    let (_, answer) = admit(&server, "dra", &dra, user).await;
    assert!(answer.allowed, "{}", answer.message);
    assert!(answer.warnings.is_empty(), "{:?}", answer.warnings);

    // A Deployment parking CPU work on GPU nodes is still denied.
    let api = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "api", "namespace": "ml"},
        "spec": {"selector": {"matchLabels": {"app": "api"}},
            "template": {"metadata": {"labels": {"app": "api"}}, "spec": {
                "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
                "containers": [{"name": "api", "image": "ghcr.io/example/api:1.4.2"}]}}}
    });
    let (_, answer) = admit(&server, "api", &api, user).await;
    assert!(!answer.allowed);
    assert!(
        answer
            .message
            .contains("gpu-node-isolation: Deployment api: pod asks for no GPU"),
        "{}",
        answer.message
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn privileged_init_containers_of_gpu_pods_are_warned_regular_ones_denied() {
    let server = TestServer::start_with(config(), Arc::new(shipped_admission())).await;
    let user = "system:serviceaccount:jhub:hub";
    // JupyterHub's singleuser pod with the default block-cloud-metadata step.
    let notebook = |privileged_notebook: bool| {
        let mut container = json!({
            "name": "notebook",
            "image": "quay.io/jupyter/pytorch-notebook:cuda12-2024-10-07",
            "args": ["jupyterhub-singleuser"],
            "resources": {"requests": {"cpu": "2", "memory": "8Gi"},
                "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}}
        });
        if privileged_notebook {
            container["securityContext"] = json!({"privileged": true});
        }
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "jupyter-alice", "namespace": "jhub",
                "labels": {"component": "singleuser-server", "hub.jupyter.org/username": "alice"}},
            "spec": {
                "initContainers": [{
                    "name": "block-cloud-metadata",
                    "image": "quay.io/jupyterhub/k8s-network-tools:4.0.0",
                    "command": ["iptables", "--append", "OUTPUT", "--protocol", "tcp",
                        "--destination", "169.254.169.254", "--destination-port", "80", "--jump", "DROP"],
                    "securityContext": {"privileged": true, "runAsUser": 0}
                }],
                "containers": [container]
            }
        })
    };
    let (patched, answer) = admit(&server, "jupyter", &notebook(false), user).await;
    assert!(
        patched["spec"]["tolerations"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["key"] == "sku")),
        "the GPU pod is placed: {patched}"
    );
    assert!(answer.allowed, "{}", answer.message);
    assert!(
        answer.warnings.iter().any(|w| w.starts_with(
            "gpu-privileged-init: init container block-cloud-metadata is privileged in a GPU pod"
        )),
        "{:?}",
        answer.warnings
    );
    let (_, answer) = admit(&server, "jupyter-privileged", &notebook(true), user).await;
    assert!(!answer.allowed, "privileged notebook container allowed");
    assert!(
        answer
            .message
            .contains("gpu-privileged: container notebook is privileged in a GPU pod"),
        "{}",
        answer.message
    );
    server.stop().await;
}
