//! Workload custom resources (KubeRay, Kubeflow, JobSet, LeaderWorkerSet,
//! KServe, Volcano, Argo) as a cluster running the shipped configuration
//! treats them: `deploy/base/`'s webhook configurations decide what reaches
//! the server, then `/validate` over TLS judges every pod template the
//! shipped `PodTemplateSource` documents (policies/workload-kinds.yaml)
//! name, at `kubectl apply`.
mod common;

use common::webhooks::{Cluster, Review};
use serde_json::{json, Value};

const WEBHOOK: &str = "workload-kinds.validate.gpu-admission.io";
const PREMIUM: [(&str, &str); 2] = [
    ("gpu-admission.io/tier", "premium"),
    ("gpu-admission.io/premium-gpus", "true"),
];

/// A GPU container asking for `gpus` whole GPUs, with CPU and memory
/// requests and a command that exits.
fn gpu_container(name: &str, gpus: u32) -> Value {
    let n = gpus.to_string();
    json!({"name": name, "image": "nvcr.io/nvidia/pytorch:24.08-py3",
        "command": ["torchrun", "train.py"],
        "resources": {"requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": n},
            "limits": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": n}}})
}

fn pod_template(container: Value) -> Value {
    json!({"metadata": {"labels": {"app": "train"}}, "spec": {"containers": [container]}})
}

/// One object of each shipped kind, its GPU template holding `container`,
/// and the label the messages give that template.
fn workloads(container: Value) -> Vec<(Value, &'static str)> {
    let t = pod_template(container.clone());
    let head = pod_template(json!({"name": "ray-head", "image": "rayproject/ray:2.41.0",
        "resources": {"requests": {"cpu": "2", "memory": "8Gi"}}}));
    let ray_cluster = json!({"headGroupSpec": {"rayStartParams": {}, "template": head},
        "workerGroupSpecs": [{"groupName": "gpu-workers", "replicas": 2, "maxReplicas": 4,
            "rayStartParams": {}, "template": t}]});
    let meta = |kind: &str| json!({"name": format!("{}-a", kind.to_ascii_lowercase()), "namespace": "llm"});
    let object = |api: &str, kind: &str, spec: Value| json!({"apiVersion": api, "kind": kind, "metadata": meta(kind), "spec": spec});
    let replica_specs = json!({"Worker": {"replicas": 2, "template": t}});
    let jobset_spec = json!({"replicatedJobs": [{"name": "workers", "replicas": 2,
        "template": {"spec": {"parallelism": 1, "template": t}}}]});
    let argo_template = json!({"name": "train", "container": container});
    vec![
        (
            object("ray.io/v1", "RayCluster", ray_cluster.clone()),
            "workerGroupSpecs[gpu-workers]",
        ),
        (
            object(
                "ray.io/v1",
                "RayJob",
                json!({"entrypoint": "python train.py", "rayClusterSpec": ray_cluster}),
            ),
            "rayClusterSpec.workerGroupSpecs[gpu-workers]",
        ),
        (
            object(
                "ray.io/v1",
                "RayService",
                json!({"serveConfigV2": "", "rayClusterConfig": ray_cluster}),
            ),
            "rayClusterConfig.workerGroupSpecs[gpu-workers]",
        ),
        (
            object(
                "kubeflow.org/v1",
                "PyTorchJob",
                json!({"pytorchReplicaSpecs": replica_specs}),
            ),
            "pytorchReplicaSpecs.Worker",
        ),
        (
            object(
                "kubeflow.org/v1",
                "TFJob",
                json!({"tfReplicaSpecs": replica_specs}),
            ),
            "tfReplicaSpecs.Worker",
        ),
        (
            object(
                "kubeflow.org/v2beta1",
                "MPIJob",
                json!({"mpiReplicaSpecs": replica_specs}),
            ),
            "mpiReplicaSpecs.Worker",
        ),
        (
            object("kubeflow.org/v1", "Notebook", json!({"template": t})),
            "template",
        ),
        (
            object(
                "trainer.kubeflow.org/v1alpha1",
                "TrainJob",
                json!({
                "runtimeRef": {"name": "torch-distributed"},
                "trainer": {"image": "nvcr.io/nvidia/pytorch:24.08-py3", "numNodes": 2,
                    "command": ["torchrun", "train.py"],
                    "resourcesPerNode": container["resources"].clone()}}),
            ),
            "trainer",
        ),
        (
            object(
                "trainer.kubeflow.org/v1alpha1",
                "TrainingRuntime",
                json!({"template": {"spec": jobset_spec}}),
            ),
            "template.spec.replicatedJobs[workers]",
        ),
        (
            object("jobset.x-k8s.io/v1alpha2", "JobSet", jobset_spec.clone()),
            "replicatedJobs[workers]",
        ),
        (
            object(
                "leaderworkerset.x-k8s.io/v1",
                "LeaderWorkerSet",
                json!({"replicas": 1,
                "leaderWorkerTemplate": {"size": 2, "workerTemplate": t}}),
            ),
            "leaderWorkerTemplate.workerTemplate",
        ),
        (
            object(
                "serving.kserve.io/v1beta1",
                "InferenceService",
                json!({"predictor": {
                "minReplicas": 1,
                "model": {"modelFormat": {"name": "pytorch"}, "storageUri": "pvc://models/llm",
                    "resources": container["resources"].clone()}}}),
            ),
            "predictor",
        ),
        (
            object(
                "batch.volcano.sh/v1alpha1",
                "Job",
                json!({"minAvailable": 2, "schedulerName": "volcano",
                "tasks": [{"name": "worker", "replicas": 2, "template": t}]}),
            ),
            "tasks[worker]",
        ),
        (
            object(
                "argoproj.io/v1alpha1",
                "Workflow",
                json!({"entrypoint": "train",
                "templates": [argo_template.clone()]}),
            ),
            "templates[train]",
        ),
        (
            object(
                "argoproj.io/v1alpha1",
                "WorkflowTemplate",
                json!({"entrypoint": "train",
                "templates": [argo_template.clone()]}),
            ),
            "templates[train]",
        ),
        (
            object(
                "argoproj.io/v1alpha1",
                "CronWorkflow",
                json!({"schedule": "0 3 * * *",
                "workflowSpec": {"entrypoint": "train", "templates": [argo_template]}}),
            ),
            "workflowSpec.templates[train]",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shipped_kind_is_judged_at_apply_and_names_its_template() {
    let cluster = Cluster::start().await;
    for (object, _) in workloads(gpu_container("trainer", 1)) {
        let kind = object["kind"].as_str().unwrap().to_string();
        let outcome = cluster
            .admit(&Review::create(object).namespace_labels(&PREMIUM))
            .await;
        assert_eq!(outcome.validated_by, [WEBHOOK], "{kind}");
        // Templates are placed when their pods are created, not in the object.
        assert!(
            outcome.mutated_by.is_empty(),
            "{kind}: {:?}",
            outcome.mutated_by
        );
        assert!(outcome.allowed, "{kind} with 1 GPU: {}", outcome.message());
    }
    for (object, label) in workloads(gpu_container("trainer", 16)) {
        let kind = object["kind"].as_str().unwrap().to_string();
        let name = object["metadata"]["name"].as_str().unwrap().to_string();
        let outcome = cluster
            .admit(&Review::create(object).namespace_labels(&PREMIUM))
            .await;
        assert!(!outcome.allowed, "{kind} with 16 GPUs allowed");
        let prefix = format!("gpu-count-limits: {kind} llm/{name} {label}: ");
        assert!(
            outcome.message().contains(&prefix),
            "{kind}: {prefix:?} not in {}",
            outcome.message()
        );
    }
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raycluster_pinned_to_a_one_gpu_size_with_sleeping_workers_is_denied() {
    let cluster = Cluster::start().await;
    let mut worker = gpu_container("ray-worker", 8);
    worker["command"] = json!(["sleep", "infinity"]);
    let rc = json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "rc", "namespace": "llm"},
        "spec": {"headGroupSpec": {"rayStartParams": {}, "template": pod_template(
                json!({"name": "ray-head", "image": "rayproject/ray:2.41.0"}))},
            "workerGroupSpecs": [{"groupName": "gpu-workers", "replicas": 2, "rayStartParams": {},
                "template": {"spec": {
                    "nodeSelector": {"node.kubernetes.io/instance-type": "Standard_NC24ads_A100_v4"},
                    "containers": [worker]}}}]}});
    let outcome = cluster
        .admit(&Review::create(rc).namespace_labels(&PREMIUM))
        .await;
    assert!(!outcome.allowed);
    let message = outcome.message();
    assert!(
        message.contains("gpu-count-limits: RayCluster llm/rc workerGroupSpecs[gpu-workers]: pod asks for 8 GPUs but the largest node it can land on (Standard_NC24ads_A100_v4) has 1"),
        "{message}"
    );
    assert!(
        outcome.warnings.iter().any(|w| w.contains(
            "gpu-keep-alive: RayCluster llm/rc workerGroupSpecs[gpu-workers]: container ray-worker keeps itself alive"
        )),
        "{:?}",
        outcome.warnings
    );
    // The CPU head is not a GPU pod: nothing is said of it.
    assert!(!message.contains("headGroupSpec"), "{message}");
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_are_judged_only_when_a_template_changes() {
    let cluster = Cluster::start().await;
    let (good, _) = workloads(gpu_container("trainer", 1)).remove(0);
    let (bad, _) = workloads(gpu_container("trainer", 16)).remove(0);
    // Created before the policy existed: scaling it, labelling it or its
    // status are never denied.
    let mut scaled = bad.clone();
    scaled["spec"]["workerGroupSpecs"][0]["replicas"] = json!(0);
    let outcome = cluster
        .admit(&Review::update(bad.clone(), scaled).namespace_labels(&PREMIUM))
        .await;
    assert_eq!(outcome.validated_by, [WEBHOOK]);
    assert!(outcome.allowed, "{}", outcome.message());
    let mut labelled = bad.clone();
    labelled["metadata"]["labels"] = json!({"team": "llm"});
    let outcome = cluster
        .admit(&Review::update(bad.clone(), labelled).namespace_labels(&PREMIUM))
        .await;
    assert!(!outcome.sent(), "a labels-only update was sent");
    let status = Review::update(bad.clone(), bad.clone()).subresource("status");
    assert!(!cluster.admit(&status).await.sent());
    // A template change is judged as a creation.
    let outcome = cluster
        .admit(&Review::update(good, bad).namespace_labels(&PREMIUM))
        .await;
    assert!(!outcome.allowed);
    assert!(outcome.message().contains("workerGroupSpecs[gpu-workers]"));
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_with_hundreds_of_templates_is_denied_not_judged_one_by_one() {
    let cluster = Cluster::start().await;
    let templates: Vec<Value> = (0..300)
        .map(|i| json!({"name": format!("step-{i}"), "container": {"image": "busybox", "command": ["true"]}}))
        .collect();
    let wf = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "wide", "namespace": "ml"},
        "spec": {"entrypoint": "step-0", "templates": templates}});
    let outcome = cluster.admit(&Review::create(wf)).await;
    assert!(!outcome.allowed);
    assert_eq!(
        outcome.message(),
        "gpu-admission: Workflow ml/wide holds 300 pod templates; at most 256 are judged: split it into smaller objects"
    );
    cluster.stop().await;
}
