//! GPU knowledge: resource names, what a pod asks for, the SKU catalog.
pub mod catalog;
pub mod facts;
pub mod pools;
pub mod request;
pub mod resources;
pub mod selection;

pub use request::{
    pod_gpu_request, ContainerGpuRequest, ContainerKind, GpuQuantity, PodGpuRequest,
};
pub use resources::{GpuResources, ResourcePatternError, DEFAULT_GPU_RESOURCES};

/// GPUs one pod of `object` asks for, as the scheduler counts them: a Pod's
/// own, or a pod of a controller's template; 0 for anything else.
pub fn gpus_per_pod(object: &serde_json::Value, resources: &GpuResources) -> i64 {
    let is_pod = object.get("apiVersion").and_then(|v| v.as_str()) == Some("v1")
        && object.get("kind").and_then(|v| v.as_str()) == Some("Pod");
    let spec = if is_pod {
        object.get("spec")
    } else {
        crate::k8s::workloads::pod_template(object).and_then(|t| t.get("spec"))
    };
    spec.map_or(0, |spec| {
        i64::try_from(pod_gpu_request(spec, resources).total()).unwrap_or(i64::MAX)
    })
}
