//! Workload custom resources (KubeRay, Kubeflow, JobSet, LeaderWorkerSet,
//! KServe, Volcano, Argo, Spark) as a cluster running the shipped configuration
//! treats them: `deploy/base/`'s webhook configurations decide what reaches
//! the server, then `/validate` over TLS judges every pod template the
//! shipped `PodTemplateSource` documents (policies/workload-kinds.yaml)
//! name, at `kubectl apply`.
use crate::common;

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
        (
            object(
                "sparkoperator.k8s.io/v1beta2",
                "SparkApplication",
                spark_spec(json!({"instances": 2, "cores": 8, "memory": "64g",
                    "gpu": {"name": "nvidia.com/gpu",
                        "quantity": container["resources"]["limits"]["nvidia.com/gpu"].clone()}})),
            ),
            "executor",
        ),
    ]
}

/// A Spark RAPIDS application whose executors are `executor`.
fn spark_spec(executor: Value) -> Value {
    json!({"type": "Scala", "mode": "cluster", "sparkVersion": "3.5.1",
        "image": "nvcr.io/nvidia/spark-rapids:24.10", "mainClass": "com.example.Etl",
        "mainApplicationFile": "local:///opt/spark/jars/etl.jar",
        "sparkConf": {"spark.plugins": "com.nvidia.spark.SQLPlugin"},
        "driver": {"cores": 1, "memory": "4g", "serviceAccount": "spark"},
        "executor": executor})
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

const T4: &str = "Standard_NC4as_T4_v3";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trainjob_is_judged_with_the_overrides_and_patches_of_its_trainer() {
    let cluster = Cluster::start().await;
    let pin = json!({"node.kubernetes.io/instance-type": T4});
    let trainjob = |extra: Value| {
        let mut spec = json!({"runtimeRef": {"name": "torch-distributed"},
            "trainer": {"image": "nvcr.io/nvidia/pytorch:24.08-py3", "numNodes": 2,
                "command": ["torchrun", "train.py"],
                "resourcesPerNode": gpu_container("node", 2)["resources"].clone()}});
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "tj", "namespace": "llm"}, "spec": spec})
    };
    let denial = format!("gpu-count-limits: TrainJob llm/tj trainer: pod asks for 2 GPUs but the largest node it can land on ({T4}) has 1");
    let job = |name: &str, spec: Value| json!({"name": name, "template": {"spec": {"template": {"spec": spec}}}});
    for extra in [
        // Kubeflow Trainer v2.0.
        json!({"podSpecOverrides": [{"targetJobs": [{"name": "node"}], "nodeSelector": pin}]}),
        // v2.1.
        json!({"podTemplateOverrides": [{"targetJobs": [{"name": "node"}], "spec": {"nodeSelector": pin}}]}),
        // Later versions.
        json!({"runtimePatches": [{"manager": "platform.example.com/pinning",
            "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [job("node", json!({"nodeSelector": pin}))]}}}}]}),
    ] {
        let outcome = cluster
            .admit(&Review::create(trainjob(extra.clone())).namespace_labels(&PREMIUM))
            .await;
        assert_eq!(outcome.validated_by, [WEBHOOK]);
        assert!(!outcome.allowed, "{extra}");
        assert!(
            outcome.message().contains(&denial),
            "{extra}: {}",
            outcome.message()
        );
    }
    // An override of another job (the initializer) is not the trainer's.
    let other = json!({"podSpecOverrides": [{"targetJobs": [{"name": "dataset-initializer"}], "nodeSelector": pin}]});
    let outcome = cluster
        .admit(&Review::create(trainjob(other)).namespace_labels(&PREMIUM))
        .await;
    assert!(outcome.allowed, "{}", outcome.message());
    // A patch's container fields reach the trainer: privileged is denied.
    let privileged = json!({"runtimePatches": [{"manager": "team",
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [job("node", json!({"containers": [
            {"name": "node", "securityContext": {"privileged": true}}]}))]}}}}]});
    let outcome = cluster
        .admit(&Review::create(trainjob(privileged)).namespace_labels(&PREMIUM))
        .await;
    assert!(!outcome.allowed);
    assert!(
        outcome
            .message()
            .contains("gpu-privileged: TrainJob llm/tj trainer: container node is privileged"),
        "{}",
        outcome.message()
    );
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_argo_workflow_level_pod_spec_patch_is_judged_in_every_template_at_apply() {
    let cluster = Cluster::start().await;
    let workflow = |patch: &str| {
        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "wf", "namespace": "llm"},
            "spec": {"entrypoint": "main", "podSpecPatch": patch,
                "templates": [
                    {"name": "main", "steps": [[{"name": "prep", "template": "prep"}], [{"name": "train", "template": "train"}]]},
                    {"name": "prep", "script": {"image": "python:3.12", "command": ["python"], "source": "print('ok')"}},
                    {"name": "train", "container": gpu_container("", 1)}]}})
    };
    let privileged = "containers:\n  - name: main\n    securityContext:\n      privileged: true\n";
    let outcome = cluster
        .admit(&Review::create(workflow(privileged)).namespace_labels(&PREMIUM))
        .await;
    assert_eq!(outcome.validated_by, [WEBHOOK]);
    assert!(!outcome.allowed);
    assert!(
        outcome.message().contains("gpu-privileged: Workflow llm/wf templates[train]: container main is privileged in a GPU pod"),
        "{}",
        outcome.message()
    );
    // JSON, as Argo also takes it, with parameters it fills in later.
    let env = r#"{"containers": [{"name": "main", "env": [{"name": "WANDB_TAGS", "value": "{{workflow.parameters.tags}}"}]}]}"#;
    let outcome = cluster
        .admit(&Review::create(workflow(env)).namespace_labels(&PREMIUM))
        .await;
    assert!(outcome.allowed, "{}", outcome.message());
    // A patch that cannot be read is a clear denial, not a pod failing later.
    let outcome = cluster
        .admit(
            &Review::create(workflow("containers:\n  - name: main\n   image: ["))
                .namespace_labels(&PREMIUM),
        )
        .await;
    assert!(!outcome.allowed);
    let message = outcome.message();
    assert!(
        message.starts_with("gpu-admission: Workflow llm/wf templates[prep]: spec.podSpecPatch is neither YAML nor JSON ("),
        "{message}"
    );
    assert!(
        message.contains("its pods can be neither judged nor made; fix the patch"),
        "{message}"
    );
    assert!(
        message.contains("\ngpu-admission: Workflow llm/wf templates[train]: spec.podSpecPatch"),
        "{message}"
    );
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spark_applications_ask_their_gpus_by_name_and_quantity_and_are_judged_at_apply() {
    let cluster = Cluster::start().await;
    let app = |executor: Value| {
        json!({"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
            "metadata": {"name": "etl", "namespace": "llm"}, "spec": spark_spec(executor)})
    };
    let executor = |gpus: u32| {
        json!({"instances": 4, "cores": 3, "memory": "16g",
            "nodeSelector": {"node.kubernetes.io/instance-type": T4},
            "gpu": {"name": "nvidia.com/gpu", "quantity": gpus}})
    };
    // One T4 per executor, on the T4 size: allowed, warnings aside none.
    let outcome = cluster
        .admit(&Review::create(app(executor(1))).namespace_labels(&PREMIUM))
        .await;
    assert_eq!(outcome.validated_by, [WEBHOOK]);
    assert!(outcome.allowed, "{}", outcome.message());
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);
    // The executor pod the operator makes from it is placed on a GPU node
    // and allowed.
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "etl-exec-1", "namespace": "llm", "labels": {"spark-role": "executor"}},
        "spec": {"nodeSelector": {"node.kubernetes.io/instance-type": T4},
            "containers": [{"name": "spark-kubernetes-executor", "image": "nvcr.io/nvidia/spark-rapids:24.10",
                "args": ["executor"],
                "resources": {"requests": {"cpu": "3", "memory": "17612Mi"},
                    "limits": {"memory": "17612Mi", "nvidia.com/gpu": "1"}}}]}});
    let outcome = cluster
        .admit(&Review::create(pod).namespace_labels(&PREMIUM))
        .await;
    assert!(outcome.allowed, "{}", outcome.message());
    let placed = outcome.object.unwrap();
    assert_eq!(
        placed["spec"]["tolerations"],
        json!([{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}])
    );
    // Two GPUs per executor on a one-GPU size: never schedules.
    let outcome = cluster
        .admit(&Review::create(app(executor(2))).namespace_labels(&PREMIUM))
        .await;
    assert!(!outcome.allowed);
    assert!(
        outcome.message().contains(&format!("gpu-count-limits: SparkApplication llm/etl executor: pod asks for 2 GPUs but the largest node it can land on ({T4}) has 1")),
        "{}",
        outcome.message()
    );
    // A privileged GPU executor.
    let mut privileged = executor(1);
    privileged["securityContext"] = json!({"privileged": true});
    let outcome = cluster
        .admit(&Review::create(app(privileged)).namespace_labels(&PREMIUM))
        .await;
    assert!(!outcome.allowed);
    assert!(
        outcome.message().contains("gpu-privileged: SparkApplication llm/etl executor: container spark-kubernetes-executor is privileged in a GPU pod"),
        "{}",
        outcome.message()
    );
    cluster.stop().await;
}
