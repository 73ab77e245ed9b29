//! GPU taints and the tolerations that meet them: which taints keep pods
//! without a GPU toleration off a node, and which tolerations aim at GPU
//! nodes (or at every node).
use serde_json::Value;

use crate::k8s::json::items;
use crate::k8s::{Taint, Toleration, TolerationOperator};

/// A taint that keeps pods without a GPU toleration off the node:
/// `sku=gpu` (AKS how-tos, KAITO) or a GPU resource name
/// (`nvidia.com/gpu`, `amd.com/gpu`), with NoSchedule or NoExecute.
pub fn is_gpu_taint(taint: &Taint) -> bool {
    let gpu_key = (taint.key == "sku" && taint.value == "gpu")
        || taint.key == "nvidia.com/gpu"
        || taint.key == "amd.com/gpu";
    taint.repels() && gpu_key
}

/// Does a toleration list tolerate a GPU taint by name (`sku=gpu` or any
/// `sku` value, `nvidia.com/gpu`, `amd.com/gpu`) for NoSchedule? A toleration
/// of every taint (`operator: Exists` without a key) does not count here: it
/// is what node-wide DaemonSets carry, not a sign of aiming at GPU nodes (see
/// [`tolerates_every_taint`]).
pub fn tolerates_gpu_taint(tolerations: &Value) -> bool {
    items(Some(tolerations))
        .map(Toleration::from_value)
        .any(|t| tolerates_gpu(&t))
}

/// Does a toleration list tolerate every NoSchedule taint (`operator:
/// Exists` with an empty key and an empty or NoSchedule effect)?
pub fn tolerates_every_taint(tolerations: &Value) -> bool {
    items(Some(tolerations))
        .map(Toleration::from_value)
        .any(|t| {
            covers_no_schedule(&t) && t.key.is_empty() && t.operator == TolerationOperator::Exists
        })
}

fn covers_no_schedule(t: &Toleration) -> bool {
    t.effect.is_empty() || t.effect == "NoSchedule"
}

fn tolerates_gpu(t: &Toleration) -> bool {
    if !covers_no_schedule(t) {
        return false;
    }
    match t.key.as_str() {
        "sku" => t.operator == TolerationOperator::Exists || t.value == "gpu",
        // The taint's value varies (`present`, empty): any value counts.
        "nvidia.com/gpu" | "amd.com/gpu" => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tolerations_that_count_as_gpu() {
        let t = |v: Value| tolerates_gpu_taint(&json!([v]));
        assert!(t(
            json!({"key": "sku", "operator": "Exists", "effect": "NoSchedule"})
        ));
        assert!(t(
            json!({"key": "sku", "operator": "Equal", "value": "gpu"})
        ));
        assert!(t(
            json!({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"})
        ));
        assert!(t(json!({"key": "amd.com/gpu", "operator": "Exists"})));
        // Tolerating every taint is not aiming at GPU nodes.
        assert!(!t(json!({"operator": "Exists"})));
        assert!(!t(
            json!({"key": "sku", "operator": "Equal", "value": "cpu", "effect": "NoSchedule"})
        ));
        assert!(!t(
            json!({"key": "sku", "value": "gpu", "effect": "NoExecute"})
        ));
        assert!(!t(
            json!({"key": "CriticalAddonsOnly", "operator": "Exists"})
        ));
        assert!(!tolerates_gpu_taint(&json!("junk")));
    }

    #[test]
    fn tolerations_of_every_taint() {
        let t = |v: Value| tolerates_every_taint(&json!([v]));
        assert!(t(json!({"operator": "Exists"})));
        assert!(t(json!({"operator": "Exists", "effect": "NoSchedule"})));
        assert!(!t(json!({"operator": "Exists", "effect": "NoExecute"})));
        assert!(!t(json!({"key": "sku", "operator": "Exists"})));
        assert!(!t(json!({"operator": "Equal", "value": "x"})));
        assert!(!tolerates_every_taint(&json!({"operator": "Exists"})));
    }
}
