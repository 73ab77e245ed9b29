//! The GPU pods the engine benches evaluate, and the shipped bundle.
#![allow(dead_code)]

use gpu_admission::admission::Admission;
use gpu_admission::bundle::{self, PolicySource};
use gpu_admission::k8s::namespaces::StaticNamespaces;
use gpu_admission::k8s::NamespaceLookup;
use gpu_admission::policy::Passes;
use gpu_admission::review::{Operation, Request};
use serde_json::json;
use std::sync::Arc;

/// A two-container training pod that tolerates `sku=gpu` and selects
/// NVIDIA nodes (placement adds only the sizes of its namespace's tier).
pub fn placed_gpu_pod() -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "trainer-0", "namespace": "ml", "labels": {"team": "vision", "app": "trainer"}},
        "spec": {
            "nodeSelector": {"kubernetes.azure.com/accelerator": "nvidia"},
            "containers": [
                {"name": "train", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                 "command": ["python", "train.py"],
                 "ports": [{"containerPort": 8080}],
                 "resources": {"requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "2"},
                               "limits": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "2"}}},
                {"name": "metrics", "image": "mcr.microsoft.com/oss/prometheus:v2",
                 "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}
            ],
            "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
        }
    })
}

/// The same pod as its owner writes it: no GPU toleration, no node
/// selection, so `/mutate` adds both.
pub fn unplaced_gpu_pod() -> serde_json::Value {
    let mut pod = placed_gpu_pod();
    let spec = pod["spec"].as_object_mut().expect("spec");
    spec.remove("nodeSelector");
    spec.remove("tolerations");
    pod
}

/// A web server pod that asks for no GPU (most pods a cluster admits):
/// `/validate` judges it too, whether it would take a GPU node's place.
pub fn cpu_pod() -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-7c9f8d-x2x4k", "namespace": "ml", "labels": {"app": "web", "pod-template-hash": "7c9f8d"}},
        "spec": {
            "containers": [
                {"name": "web", "image": "mcr.microsoft.com/oss/nginx/nginx:1.27",
                 "ports": [{"containerPort": 8080}],
                 "resources": {"requests": {"cpu": "250m", "memory": "256Mi"},
                               "limits": {"memory": "256Mi"}}}
            ]
        }
    })
}

/// The shipped policies and placement profiles, with namespace `ml` known.
pub fn shipped_admission() -> (Admission, usize) {
    shipped_admission_in(Arc::new(
        StaticNamespaces::new().with("ml", Default::default()),
    ))
}

/// [`shipped_admission`] looking namespaces up in `namespaces`. With
/// GPU_ADMISSION_BENCH_POLICIES set, the policies of that folder instead of
/// the shipped ones (to weigh one policy's change against another's); with
/// GPU_ADMISSION_BENCH_WITHOUT set to a plan pass (`policy::Passes::NAMES`),
/// planned without it (to weigh what the pass saves).
pub fn shipped_admission_in(namespaces: Arc<dyn NamespaceLookup>) -> (Admission, usize) {
    let source = std::env::var_os("GPU_ADMISSION_BENCH_POLICIES")
        .map_or(PolicySource::Embedded, |dir| PolicySource::Dir(dir.into()));
    let mut loaded = bundle::load(&source).expect("the policies load");
    replan_as_asked(&mut loaded.bundle);
    let policies = loaded.bundle.policies.len();
    (Admission::new(loaded.bundle, namespaces), policies)
}

/// With GPU_ADMISSION_BENCH_WITHOUT set to a plan pass, `bundle`'s
/// policies planned again without it.
pub fn replan_as_asked(bundle: &mut gpu_admission::admission::Bundle) {
    if let Ok(pass) = std::env::var("GPU_ADMISSION_BENCH_WITHOUT") {
        let passes = Passes::without(&pass).expect("a plan pass of policy::Passes::NAMES");
        bundle.policies = bundle.policies.replanned(passes).expect("replanned");
    }
}

/// A pod CREATE request.
pub fn create(pod: serde_json::Value) -> Request {
    Request::for_object(pod, Operation::Create, None)
}

/// `pod` with the `/mutate` patch applied, as the apiserver stores it and
/// then sends it to `/validate`. Panics unless there was a patch.
pub fn mutated(admission: &Admission, pod: serde_json::Value) -> serde_json::Value {
    let outcome = admission.mutate(&create(pod.clone()));
    let patch = outcome
        .response
        .patch
        .expect("the pod needs a placement patch");
    let mut pod = pod;
    json_patch::patch(&mut pod, &patch).expect("the patch applies");
    pod
}
