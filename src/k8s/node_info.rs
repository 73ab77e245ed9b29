//! The cluster's Nodes as the GPU boundary reads them: name, labels,
//! taints, allocatable resources and conditions, kept current by a watch.
//! Everything else a Node carries (images, addresses, annotations, the
//! conditions no one reads) is dropped before it is stored, so the cache
//! stays small on clusters of thousands of nodes.
use super::json::{items, str_at, string_map, Pointer};
use super::taints::Taint;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// What the GPU boundary reads of one Node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeInfo {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// `status.allocatable`, quantities as the API writes them.
    pub allocatable: BTreeMap<String, String>,
    /// `status.conditions`.
    pub conditions: Vec<NodeCondition>,
}

/// One entry of a Node's `status.conditions`, without its times (a
/// heartbeat changes nothing kept).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NodeCondition {
    #[serde(rename = "type")]
    pub kind: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    pub reason: String,
    pub message: String,
}

impl NodeInfo {
    /// From a Node as JSON, leniently.
    pub fn from_value(node: &Value) -> NodeInfo {
        NodeInfo {
            name: str_at(node, "/metadata/name").to_string(),
            labels: string_map(node.at("/metadata/labels")),
            taints: items(node.at("/spec/taints"))
                .filter_map(Taint::from_value)
                .collect(),
            allocatable: string_map(node.at("/status/allocatable")),
            conditions: items(node.at("/status/conditions"))
                .map(|c| NodeCondition {
                    kind: str_at(c, "/type").to_string(),
                    status: str_at(c, "/status").to_string(),
                    reason: str_at(c, "/reason").to_string(),
                    message: str_at(c, "/message").to_string(),
                })
                .collect(),
        }
    }

    /// The value of label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_node_is_read_leniently() {
        let node = NodeInfo::from_value(&json!({
            "metadata": {"name": "aks-gpu-1", "labels": {"kubernetes.azure.com/agentpool": "gpu", "n": 1}},
            "spec": {"taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}, "junk"]},
            "status": {"allocatable": {"nvidia.com/gpu": "1", "cpu": "23"}, "images": [{"names": ["x"]}],
                "conditions": [{"type": "XIDErrors", "status": "True", "reason": "XIDErrors",
                    "lastHeartbeatTime": "2026-12-01T10:00:00Z", "message": "XID 79"}]}
        }));
        assert_eq!(node.name, "aks-gpu-1");
        assert_eq!(node.label("kubernetes.azure.com/agentpool"), Some("gpu"));
        assert_eq!(node.label("n"), None);
        assert_eq!(node.taints.len(), 1);
        assert_eq!(node.allocatable["nvidia.com/gpu"], "1");
        assert_eq!(
            node.conditions,
            [NodeCondition {
                kind: "XIDErrors".into(),
                status: "True".into(),
                reason: "XIDErrors".into(),
                message: "XID 79".into(),
            }]
        );
        assert_eq!(NodeInfo::from_value(&json!(null)), NodeInfo::default());
    }
}
