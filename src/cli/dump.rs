//! A dump of a cluster (`kubectl get nodes,nodepools,namespaces -o json`,
//! the files `audit -f` reads) as the offline commands use it: the nodes
//! pods are judged against (with the GPUs DRA DeviceClasses and
//! ResourceSlices serve on them), each namespace's labels, and its
//! GpuBudgets with the pods they count.
use crate::budgets;
use crate::gpu::capacity::PoolKind;
use crate::gpu::dra_devices::is_dra_device_object;
use crate::gpu::{DraDevices, StaticNodes};
use crate::k8s::claims::ClaimKind;
use crate::k8s::json::{str_at, Pointer};
use crate::k8s::namespaces::with_name_label;
use crate::offline;
use serde_json::Value;
use std::collections::BTreeMap;

/// What a dump of a cluster (`kubectl get nodes,nodepools,namespaces -o
/// json`, the files `audit -f` reads) says of where pods land and of its
/// namespaces: its Nodes, its Karpenter NodePools, its DRA DeviceClasses
/// and ResourceSlices and its Namespaces. Other objects of the dump are
/// left out.
#[derive(Clone, Debug, Default)]
pub struct ClusterDump {
    pub nodes: Vec<Value>,
    pub pools: Vec<Value>,
    pub devices: Vec<Value>,
    pub namespaces: Vec<Value>,
    /// Its GpuBudgets and Pods (what the budgets hold), with the DRA
    /// ResourceClaims and ResourceClaimTemplates pods claim GPUs through.
    pub budgets: Vec<Value>,
}

impl ClusterDump {
    /// The Nodes, NodePools, DeviceClasses, ResourceSlices and Namespaces
    /// of `files`.
    pub fn read(files: &[std::path::PathBuf]) -> anyhow::Result<ClusterDump> {
        let mut dump = ClusterDump::default();
        for file in files {
            offline::read_objects(file, &mut |object| {
                if crate::audit::is_node(&object) {
                    dump.nodes.push(object);
                } else if PoolKind::of(&object) == Some(PoolKind::NodePool) {
                    dump.pools.push(object);
                } else if is_dra_device_object(&object) {
                    dump.devices.push(object);
                } else if is_namespace(&object) {
                    dump.namespaces.push(object);
                } else if ["Pod", budgets::KIND].contains(&str_at(&object, "/kind"))
                    || ClaimKind::of(&object).is_some()
                {
                    dump.budgets.push(object);
                }
                Ok(())
            })?;
        }
        Ok(dump)
    }

    /// The nodes pods are judged against, as `serve` judges them against
    /// the nodes, NodePools and DRA devices it watches; `None` when the dump holds
    /// neither (pods are then judged by labels, as without a cluster).
    pub fn node_lookup(&self) -> Option<StaticNodes> {
        if self.nodes.is_empty() && self.pools.is_empty() {
            return None;
        }
        let devices = DraDevices::read(&self.devices);
        Some(StaticNodes::of_objects(
            &self.nodes,
            self.pools.clone(),
            &devices,
        ))
    }

    /// Each Namespace of the dump and its labels: `base` (the labels given
    /// on the command line), overridden by the namespace's own.
    pub fn namespace_labels(
        &self,
        base: &BTreeMap<String, String>,
    ) -> Vec<(String, BTreeMap<String, String>)> {
        self.namespaces
            .iter()
            .filter_map(|ns| namespace_labels(ns, base))
            .collect()
    }
}

/// A core/v1 Namespace.
pub fn is_namespace(object: &Value) -> bool {
    object.get("apiVersion").and_then(Value::as_str) == Some("v1")
        && object.get("kind").and_then(Value::as_str) == Some("Namespace")
}

/// The name of Namespace `ns` and its labels: `base`, overridden by its
/// own, with `kubernetes.io/metadata.name` as kube-apiserver sets it.
pub fn namespace_labels(
    ns: &Value,
    base: &BTreeMap<String, String>,
) -> Option<(String, BTreeMap<String, String>)> {
    let name = ns.at("/metadata/name").and_then(Value::as_str)?;
    let own: BTreeMap<String, String> = ns
        .at("/metadata/labels")
        .and_then(|l| serde_json::from_value(l.clone()).ok())
        .unwrap_or_default();
    let mut merged = base.clone();
    merged.extend(own);
    Some((name.to_string(), with_name_label(name, merged)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cluster_dump_gives_nodes_pools_and_namespace_labels() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.json");
        let dump = json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "aks-gpunp-1",
                "labels": {"kubernetes.azure.com/agentpool": "gpunp"}},
                "status": {"allocatable": {"nvidia.com/gpu": "1"}}},
            {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"},
                "spec": {"template": {"spec": {"requirements": []}}}},
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "research",
                "labels": {"gpu-admission.io/tier": "standard"}}},
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "research"}},
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "dgx-1"}},
            {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
                "spec": {"extendedResourceName": "nvidia.com/gpu"}},
            {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "dgx-1-gpus"},
                "spec": {"driver": "gpu.nvidia.com", "nodeName": "dgx-1", "pool": {"name": "dgx-1"},
                    "devices": [{"name": "gpu-0"}]}}
        ]});
        std::fs::write(&path, dump.to_string()).unwrap();
        let read = ClusterDump::read(&[path]).unwrap();
        let counts = (read.nodes.len(), read.pools.len(), read.devices.len());
        assert_eq!((counts, read.namespaces.len()), ((2, 1, 2), 1));
        let snapshot = crate::gpu::NodeLookup::nodes(&read.node_lookup().unwrap()).unwrap();
        assert_eq!(snapshot.nodes.len(), 2);
        // The GPU DRA serves on a node is counted as its own.
        assert_eq!(snapshot.nodes[1].allocatable["nvidia.com/gpu"], "1");
        // The namespace's own labels win over the command line's.
        let base = BTreeMap::from([
            ("gpu-admission.io/tier".to_string(), "premium".to_string()),
            ("team".to_string(), "ml".to_string()),
        ]);
        let labels = read.namespace_labels(&base);
        assert_eq!(labels.len(), 1);
        let (name, labels) = &labels[0];
        assert_eq!(name, "research");
        assert_eq!(labels["gpu-admission.io/tier"], "standard");
        assert_eq!(labels["team"], "ml");
        assert_eq!(labels["kubernetes.io/metadata.name"], "research");
        // Nothing of where pods land: judged by labels.
        assert!(ClusterDump::default().node_lookup().is_none());
    }
}
