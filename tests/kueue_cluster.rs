//! Kueue in a cluster running the shipped configuration: a queued Job is
//! judged when it is created, as it will run; Kueue's controller admitting
//! it (the unsuspend UPDATE that writes its ResourceFlavor's node selection)
//! is not judged again, while the same change by a user is; ResourceFlavors
//! are judged themselves.
use crate::common;

use common::shared_data::shared_data;
use common::webhooks::{Cluster, Review};
use gpu_admission::kueue::DEFAULT_CONTROLLER;
use gpu_admission::offline::read_manifest;
use serde_json::{json, Value};

const JOB_CONTROLLER: &str = "system:serviceaccount:kube-system:job-controller";
const A100: &str = "Standard_NC24ads_A100_v4";

/// A Job as the AKS docs queue it: suspended, in LocalQueue `gpu-queue`.
fn queued_job(gpus: i64) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "namespace": "team-a", "uid": "job-uid-1",
            "labels": {"kueue.x-k8s.io/queue-name": "gpu-queue"}},
        "spec": {"suspend": true, "parallelism": 2, "completions": 2, "backoffLimit": 2,
            "activeDeadlineSeconds": 3600,
            "template": {"metadata": {"labels": {"app": "train"}},
                "spec": {"restartPolicy": "Never",
                    "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
                    "containers": [{"name": "worker", "image": "nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04",
                        "resources": {
                            "requests": {"cpu": "3", "memory": "16Gi", "nvidia.com/gpu": gpus.to_string()},
                            "limits": {"cpu": "3", "memory": "16Gi", "nvidia.com/gpu": gpus.to_string()}}}]}}}
    })
}

/// What Kueue's controller writes when it admits `job` on a flavor whose
/// nodeLabels name `instance_type`.
fn admitted(job: &Value, instance_type: &str) -> Value {
    let mut job = job.clone();
    job["metadata"]["annotations"] = json!({"kueue.x-k8s.io/workload": "job-train-5c1f2"});
    job["spec"]["suspend"] = json!(false);
    let template = &mut job["spec"]["template"];
    template["metadata"]["labels"]["kueue.x-k8s.io/podset"] = json!("main");
    template["spec"]["nodeSelector"] = json!({"node.kubernetes.io/instance-type": instance_type});
    job
}

fn flavor(name: &str, node_labels: Value) -> Value {
    json!({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
        "metadata": {"name": name}, "spec": {"nodeLabels": node_labels}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_jobs_are_judged_at_creation_and_kueues_admission_is_not() {
    let cluster = Cluster::start().await;

    let outcome = cluster.admit(&Review::create(queued_job(1))).await;
    assert_eq!(
        outcome.validated_by,
        ["workloads.validate.gpu-admission.io"]
    );
    assert!(outcome.allowed, "{}", outcome.message());

    // Suspended or not, a 16-GPU pod fits no node of the default tier.
    let outcome = cluster.admit(&Review::create(queued_job(16))).await;
    assert!(!outcome.allowed, "a queued 16-GPU Job was allowed");
    assert!(
        outcome.message().contains("Job train:"),
        "{}",
        outcome.message()
    );

    // Kueue admits the Job on an A100 flavor, outside team-a's tier: its
    // update is sent (the template changed) and allowed.
    let job = queued_job(1);
    let unsuspend = Review::update(job.clone(), admitted(&job, A100));
    let by_kueue = unsuspend
        .clone()
        .by(DEFAULT_CONTROLLER, &["system:serviceaccounts"]);
    let outcome = cluster.admit(&by_kueue).await;
    assert_eq!(
        outcome.validated_by,
        ["workloads.validate.gpu-admission.io"]
    );
    assert!(outcome.allowed, "{}", outcome.message());

    // The same change by a user is judged as any template change is.
    let outcome = cluster.admit(&unsuspend).await;
    assert!(!outcome.allowed, "alice's unsuspend to an A100 was allowed");
    assert!(
        outcome.message().contains("gpu-sku-allowlist") && outcome.message().contains(A100),
        "{}",
        outcome.message()
    );

    // Kueue's update that also changes the image is not Kueue admitting
    // the Job: judged.
    let mut changed = admitted(&job, A100);
    changed["spec"]["template"]["spec"]["containers"][0]["image"] =
        json!("nvcr.io/nvidia/cuda:12.5");
    let outcome = cluster
        .admit(&Review::update(job.clone(), changed).by(DEFAULT_CONTROLLER, &[]))
        .await;
    assert!(
        !outcome.allowed,
        "Kueue's update with a new image was allowed"
    );

    // The pods the Job controller then makes carry the flavor's selection,
    // and pods are judged as pods: outside the namespace's tier they are
    // denied. The flavor, not the pod, is where this is caught early:
    // `gpu-admission audit` reports flavors outside the tiers of the
    // namespaces their ClusterQueues serve.
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "train-x7k2p", "namespace": "team-a",
            "labels": {"app": "train", "kueue.x-k8s.io/podset": "main", "batch.kubernetes.io/job-name": "train"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                "uid": "job-uid-1", "controller": true, "blockOwnerDeletion": true}]},
        "spec": admitted(&job, A100)["spec"]["template"]["spec"].clone()
    });
    let outcome = cluster
        .admit(&Review::create(pod.clone()).by(JOB_CONTROLLER, &["system:serviceaccounts"]))
        .await;
    assert!(
        !outcome.allowed,
        "a pod pinned outside its tier was allowed"
    );
    assert!(
        outcome.message().contains("gpu-sku-allowlist"),
        "{}",
        outcome.message()
    );
    // On a flavor inside the tier, the pods run.
    pod["spec"]["nodeSelector"] =
        json!({"node.kubernetes.io/instance-type": "Standard_NC4as_T4_v3"});
    let outcome = cluster
        .admit(&Review::create(pod).by(JOB_CONTROLLER, &["system:serviceaccounts"]))
        .await;
    assert!(outcome.allowed, "{}", outcome.message());

    cluster.stop().await;
}

/// `serve --kueue-controller` names Kueue's controller: its admission is not
/// judged again, and the same update by the default username is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kueues_controller_is_the_one_named() {
    const QUEUES: &str = "system:serviceaccount:queues:kueue-controller-manager";
    let cluster = Cluster::start_with_kueue_controllers(vec![QUEUES.to_string()]).await;
    let job = queued_job(1);
    let unsuspend = Review::update(job.clone(), admitted(&job, A100));
    let groups = &["system:serviceaccounts"];
    let outcome = cluster.admit(&unsuspend.clone().by(QUEUES, groups)).await;
    assert!(outcome.allowed, "{}", outcome.message());
    let outcome = cluster
        .admit(&unsuspend.by(DEFAULT_CONTROLLER, groups))
        .await;
    assert!(
        !outcome.allowed,
        "the default username's unsuspend to an A100 was allowed"
    );
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_flavors_are_judged() {
    let cluster = Cluster::start().await;

    let retired = flavor(
        "v100",
        json!({"node.kubernetes.io/instance-type": "Standard_NC6s_v3"}),
    );
    let outcome = cluster.admit(&Review::create(retired)).await;
    assert_eq!(
        outcome.validated_by,
        ["resourceflavors.validate.gpu-admission.io"]
    );
    assert!(!outcome.allowed, "a flavor on a retired size was allowed");
    assert!(
        outcome
            .message()
            .contains("ResourceFlavor v100 (spec.nodeLabels) uses Standard_NC6s_v3"),
        "{}",
        outcome.message()
    );

    let t4 = flavor(
        "t4",
        json!({"node.kubernetes.io/instance-type": "Standard_NC4as_T4_v3"}),
    );
    let outcome = cluster.admit(&Review::create(t4)).await;
    assert!(outcome.allowed, "{}", outcome.message());

    cluster.stop().await;
}

/// Every flavor of the published samples is allowed; each waste variant
/// is denied, naming the flavor and the size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_flavors_and_their_waste_variants() {
    let Some(dir) = shared_data("crd-samples") else {
        return;
    };
    let cluster = Cluster::start().await;
    let flavors = |folder: &str| -> Vec<(String, Value)> {
        let mut out = Vec::new();
        let mut files: Vec<_> = std::fs::read_dir(dir.join(folder))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                let name = p.file_name().unwrap().to_string_lossy();
                name.starts_with("resourceflavor-") || name.starts_with("kueue-")
            })
            .collect();
        files.sort();
        for file in files {
            for object in read_manifest(&file).unwrap() {
                if object["kind"] == "ResourceFlavor" {
                    out.push((file.display().to_string(), object));
                }
            }
        }
        out
    };
    let samples = flavors("samples");
    assert!(samples.len() >= 4, "{samples:?}");
    for (file, object) in samples {
        let outcome = cluster.admit(&Review::create(object)).await;
        assert!(outcome.allowed, "{file}: {}", outcome.message());
    }
    let waste = [
        (
            "resourceflavor-aks-gpu-retired-nc6s-v3.yaml",
            "gpu",
            "Standard_NC6s_v3",
        ),
        (
            "resourceflavor-odh-gpu-cpu-size.yaml",
            "gpu-flavor",
            "Standard_D8s_v5",
        ),
    ];
    for (file, name, size) in waste {
        let objects = read_manifest(&dir.join("waste").join(file)).unwrap();
        let object = objects
            .into_iter()
            .find(|o| o["kind"] == "ResourceFlavor" && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{file}: no flavor {name}"));
        let outcome = cluster.admit(&Review::create(object)).await;
        assert!(!outcome.allowed, "{file}: allowed");
        let message = outcome.message();
        assert!(
            message.contains(&format!("ResourceFlavor {name} ")) && message.contains(size),
            "{file}: {message}"
        );
    }
    cluster.stop().await;
}

/// A RayJob queued by Kueue: judged at creation through its templates;
/// Kueue admitting it (suspend off, the flavor's node selection written
/// into each pod template) is not judged again; the same by a user is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_workload_custom_resources_are_admitted_by_kueue_without_a_second_verdict() {
    let cluster = Cluster::start().await;
    let template = |gpus: &str| {
        json!({"spec": {"tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
            "containers": [{"name": "ray-worker", "image": "rayproject/ray:2.41.0-gpu",
                "resources": {"requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": gpus},
                    "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": gpus}}}]}})
    };
    let job = json!({"apiVersion": "ray.io/v1", "kind": "RayJob",
        "metadata": {"name": "finetune", "namespace": "team-a",
            "labels": {"kueue.x-k8s.io/queue-name": "gpu-queue"}},
        "spec": {"suspend": true, "entrypoint": "python finetune.py",
            "rayClusterSpec": {
                "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [
                    {"name": "ray-head", "image": "rayproject/ray:2.41.0",
                     "resources": {"requests": {"cpu": "2", "memory": "8Gi"}}}]}}},
                "workerGroupSpecs": [{"groupName": "gpu-workers", "replicas": 2, "rayStartParams": {},
                    "template": template("1")}]}}});
    let outcome = cluster.admit(&Review::create(job.clone())).await;
    assert_eq!(
        outcome.validated_by,
        ["workload-kinds.validate.gpu-admission.io"]
    );
    assert!(outcome.allowed, "{}", outcome.message());
    let mut too_big = job.clone();
    too_big["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"] = template("16");
    let outcome = cluster.admit(&Review::create(too_big)).await;
    assert!(!outcome.allowed, "a queued 16-GPU RayJob was allowed");
    assert!(
        outcome
            .message()
            .contains("RayJob team-a/finetune rayClusterSpec.workerGroupSpecs[gpu-workers]: "),
        "{}",
        outcome.message()
    );

    let mut admitted = job.clone();
    admitted["spec"]["suspend"] = json!(false);
    admitted["metadata"]["annotations"] =
        json!({"kueue.x-k8s.io/workload": "rayjob-finetune-3a9c1"});
    for pointer in [
        "/spec/rayClusterSpec/headGroupSpec/template/spec",
        "/spec/rayClusterSpec/workerGroupSpecs/0/template/spec",
    ] {
        admitted.pointer_mut(pointer).unwrap()["nodeSelector"] =
            json!({"node.kubernetes.io/instance-type": A100});
    }
    let denial = kueue_admits_what_a_user_may_not(&cluster, &job, &admitted).await;
    assert!(denial.contains(A100), "{denial}");
    // Kueue's update that also changes a GPU count is judged.
    let mut changed = admitted;
    changed["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
        ["resources"]["limits"]["nvidia.com/gpu"] = json!("16");
    let outcome = cluster
        .admit(&Review::update(job, changed).by(DEFAULT_CONTROLLER, &[]))
        .await;
    assert!(!outcome.allowed, "Kueue's update with 16 GPUs was allowed");
    cluster.stop().await;
}

/// A TrainJob queued by Kueue, which writes the flavor's node selection
/// into the trainer through `runtimePatches`: Kueue admitting it is not
/// judged again; the same update by a user is, with the patch applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kueue_admitting_a_trainjob_through_its_runtime_patches_is_not_judged_again() {
    let cluster = Cluster::start().await;
    let job = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "finetune", "namespace": "team-a",
            "labels": {"kueue.x-k8s.io/queue-name": "gpu-queue"}},
        "spec": {"suspend": true, "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"image": "nvcr.io/nvidia/pytorch:24.08-py3", "numNodes": 2,
                "command": ["torchrun", "finetune.py"],
                "resourcesPerNode": {"requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                    "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}}}}});
    let outcome = cluster.admit(&Review::create(job.clone())).await;
    assert!(outcome.allowed, "{}", outcome.message());
    let mut admitted = job.clone();
    admitted["spec"]["suspend"] = json!(false);
    admitted["spec"]["runtimePatches"] = json!([{"manager": "kueue.x-k8s.io/manager",
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": "node",
            "template": {"spec": {"template": {"spec": {
                "nodeSelector": {"node.kubernetes.io/instance-type": A100}}}}}}]}}}}]);
    let denial = kueue_admits_what_a_user_may_not(&cluster, &job, &admitted).await;
    assert!(
        denial.contains("TrainJob team-a/finetune trainer: ") && denial.contains(A100),
        "{denial}"
    );
    cluster.stop().await;
}

/// Kueue's controller updating `old` to `new` is allowed; the same update
/// by a user is denied, with this message.
async fn kueue_admits_what_a_user_may_not(cluster: &Cluster, old: &Value, new: &Value) -> String {
    let unsuspend = Review::update(old.clone(), new.clone());
    let by_kueue = unsuspend
        .clone()
        .by(DEFAULT_CONTROLLER, &["system:serviceaccounts"]);
    let outcome = cluster.admit(&by_kueue).await;
    assert!(outcome.allowed, "{}", outcome.message());
    let outcome = cluster.admit(&unsuspend).await;
    assert!(
        !outcome.allowed,
        "a user's unsuspend to an A100 was allowed"
    );
    outcome.message().to_string()
}
