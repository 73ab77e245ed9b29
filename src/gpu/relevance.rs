//! Which pods anything GPU-related can concern: the `gpu-relevant`
//! matchCondition of the pods webhook in `deploy/`, as a function. The
//! apiserver sends a pod to `/validate` only when the condition holds, and
//! a built-in controller only when its template's does; a workload custom
//! resource holds several templates, which no one matchCondition can tell
//! apart, so the server asks this of each template pod instead and judges
//! only those the pods webhook would have been sent. The two are kept the
//! same by a test that evaluates the shipped condition on the same pods
//! (`tests/workload_kinds_corpus.rs`).
//!
//! A pod is relevant when it names a GPU resource (a `nvidia.com/`,
//! `amd.com/`, `microsoft.com/` or `volcano.sh/` request or limit in any
//! container or init container) or DRA claims; reaches GPUs behind the
//! scheduler's back (`NVIDIA_VISIBLE_DEVICES`, a mount at the NVIDIA
//! device list, a device-injection annotation (`cdi.k8s.io/`,
//! `nvidia.cdi.k8s.io`, `cdi.nri.io`, `devices.nri.io`,
//! `cdi-devices.nri.io` and their `noderesource.dev` twins: see
//! [`super::injection`]), a sharing scheduler's
//! `gpu-fraction` / `gpu-memory`); or can land on GPU nodes without asking
//! for a GPU (`spec.nodeName`, a toleration of a GPU taint, a node selector
//! or node affinity naming GPU, instance-type or pool node labels).
use super::injection::is_injection_key;
use serde_json::Value;

/// Whether the pods webhook's `gpu-relevant` condition holds for `pod`: a
/// Pod, or a pod template (which keeps `metadata.annotations` and `spec`
/// where a Pod does).
pub fn gpu_relevant(pod: &Value) -> bool {
    let spec = &pod["spec"];
    let annotations = pod["metadata"]["annotations"].as_object();
    list(&spec["resourceClaims"]).next().is_some()
        || list(&spec["initContainers"])
            .chain(list(&spec["containers"]))
            .any(container_relevant)
        || annotations.is_some_and(|a| {
            a.keys()
                .any(|k| is_injection_key(k) || k == "gpu-fraction" || k == "gpu-memory")
        })
        || spec["nodeName"].as_str().is_some_and(|n| !n.is_empty())
        || list(&spec["tolerations"]).any(|t| match t["key"].as_str() {
            None | Some("") | Some("sku") => true,
            Some(key) => key.starts_with("nvidia.com/") || key.starts_with("amd.com/"),
        })
        || spec["nodeSelector"]
            .as_object()
            .is_some_and(|s| s.keys().any(|k| node_label_relevant(k)))
        || node_affinity_relevant(&spec["affinity"]["nodeAffinity"])
}

/// The elements of a JSON list; none for anything else.
fn list(v: &Value) -> impl Iterator<Item = &Value> {
    v.as_array().into_iter().flatten()
}

fn container_relevant(c: &Value) -> bool {
    let names_gpu = |list: &Value| {
        list.as_object().is_some_and(|m| {
            m.keys().any(|k| {
                ["nvidia.com/", "amd.com/", "microsoft.com/", "volcano.sh/"]
                    .iter()
                    .any(|p| k.starts_with(p))
            })
        })
    };
    names_gpu(&c["resources"]["limits"])
        || names_gpu(&c["resources"]["requests"])
        || list(&c["env"]).any(|e| e["name"] == "NVIDIA_VISIBLE_DEVICES")
        || list(&c["volumeMounts"]).any(|m| {
            m["mountPath"]
                .as_str()
                .is_some_and(|p| p.contains("nvidia-container-devices"))
        })
}

fn node_affinity_relevant(affinity: &Value) -> bool {
    let expressions_relevant = |term: &Value| {
        list(&term["matchExpressions"]).any(|e| e["key"].as_str().is_some_and(node_label_relevant))
    };
    list(&affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"])
        .any(expressions_relevant)
        || list(&affinity["preferredDuringSchedulingIgnoredDuringExecution"])
            .any(|p| expressions_relevant(&p["preference"]))
}

/// Node labels that name GPU nodes, their size or their pool.
fn node_label_relevant(key: &str) -> bool {
    const EXACT: [&str; 12] = [
        "accelerator",
        "agentpool",
        "kubernetes.azure.com/accelerator",
        "kubernetes.azure.com/agentpool",
        "kubernetes.io/hostname",
        "kubernetes.azure.com/dcgm-exporter",
        "node.kubernetes.io/instance-type",
        "beta.kubernetes.io/instance-type",
        "karpenter.sh/nodepool",
        "karpenter.azure.com/sku-name",
        "karpenter.azure.com/sku-family",
        "karpenter.azure.com/sku-series",
    ];
    const PREFIXES: [&str; 4] = [
        "karpenter.azure.com/sku-gpu",
        "nvidia.com/",
        "amd.com/",
        "feature.node.kubernetes.io/pci-",
    ];
    EXACT.contains(&key) || PREFIXES.iter().any(|p| key.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec})
    }

    #[test]
    fn a_cpu_pod_is_not_relevant() {
        let cpu = pod(json!({"containers": [{"name": "c", "image": "busybox",
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]}));
        assert!(!gpu_relevant(&cpu));
        assert!(!gpu_relevant(&json!({})));
    }

    #[test]
    fn each_way_to_gpus_is_relevant() {
        let cases = [
            json!({"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}),
            json!({"initContainers": [{"name": "c", "resources": {"requests": {"amd.com/gpu": "1"}}}]}),
            json!({"containers": [{"name": "c", "resources": {"limits": {"volcano.sh/vgpu-number": "1"}}}]}),
            json!({"containers": [{"name": "c", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]}),
            json!({"containers": [{"name": "c", "volumeMounts": [{"name": "d", "mountPath": "/var/run/nvidia-container-devices/all"}]}]}),
            json!({"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}]}),
            json!({"nodeName": "aks-gpu-0"}),
            json!({"tolerations": [{"operator": "Exists"}]}),
            json!({"tolerations": [{"key": "sku", "operator": "Exists"}]}),
            json!({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}),
            json!({"nodeSelector": {"kubernetes.azure.com/agentpool": "gpu"}}),
            json!({"nodeSelector": {"karpenter.azure.com/sku-gpu-count": "1"}}),
            json!({"nodeSelector": {"feature.node.kubernetes.io/pci-10de.present": "true"}}),
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["Standard_NC24ads_A100_v4"]}]}]}}}}),
            json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [
                    {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["gpu"]}]}}]}}}),
        ];
        for spec in cases {
            assert!(gpu_relevant(&pod(spec.clone())), "{spec}");
        }
        let annotated = json!({"metadata": {"annotations": {"gpu-fraction": "0.5"}}, "spec": {}});
        assert!(gpu_relevant(&annotated));
    }

    #[test]
    fn look_alike_keys_are_not_relevant() {
        for spec in [
            json!({"nodeSelector": {"kubernetes.azure.com/agentpool-x": "gpu"}}),
            json!({"nodeSelector": {"example.com/accelerator": "a100"}}),
            json!({"tolerations": [{"key": "gpu", "operator": "Exists"}]}),
            json!({"nodeName": ""}),
            json!({"resourceClaims": []}),
            json!({"containers": [{"name": "c", "resources": {"limits": {"example.com/nvidia.com": "1"}}}]}),
        ] {
            assert!(!gpu_relevant(&pod(spec.clone())), "{spec}");
        }
    }
}
