//! AKS agent pools as Azure Service Operator and Cluster API Azure write
//! them: the ASO agent pool spec (standalone, inline in a ManagedCluster's
//! `agentPoolProfiles`, or embedded in CAPZ's `spec.resources[]`) and
//! CAPZ's own AzureManagedMachinePool; and which pools an UPDATE changes.
use serde_json::Value;

use super::capacity::{CapacityRequest, PoolKind};
use crate::k8s::json::{int_of, items as list, str_at, Pointer as _};
use crate::k8s::Taint;

/// Reads an ASO agent pool spec (`ManagedClustersAgentPool.spec`, or one
/// `ManagedCluster.spec.agentPoolProfiles[]` entry, which has the same
/// fields) written at `field` (`spec`, `spec.agentPoolProfiles[gpu1]`).
/// `cluster_version` is the ManagedCluster's `kubernetesVersion`, which a
/// profile without `orchestratorVersion` runs.
pub(super) fn read_agent_pool(
    req: &mut CapacityRequest,
    spec: &Value,
    field: &str,
    cluster_version: Option<&str>,
) {
    let str_at = |p: &str| spec.at(p).and_then(Value::as_str).map(str::to_string);
    let int_at = |p: &str| spec.at(p).and_then(int_of);
    req.sizes.extend(str_at("/vmSize"));
    for mode in ["autoscale", "manual"] {
        let p = format!("/virtualMachinesProfile/scale/{mode}");
        for entry in list(spec.at(&p)) {
            if let Some(size) = entry.get("size").and_then(Value::as_str) {
                let nodes = ["maxCount", "count"]
                    .iter()
                    .find_map(|k| entry.get(*k).and_then(int_of));
                if let Some(nodes) = nodes {
                    req.scale.push((size.to_string(), nodes));
                }
                if !req.sizes.iter().any(|s| s.eq_ignore_ascii_case(size)) {
                    req.sizes.push(size.to_string());
                }
            }
        }
    }
    req.sizes_field = if spec.get("virtualMachinesProfile").is_some() {
        format!("{field}.vmSize / {field}.virtualMachinesProfile.scale")
    } else {
        format!("{field}.vmSize")
    };
    req.taints_field = format!("{field}.nodeTaints");
    req.spec_field = field.to_string();
    req.taints = list(spec.get("nodeTaints"))
        .filter_map(Value::as_str)
        .filter_map(Taint::parse)
        .collect();
    req.count = int_at("/maxCount").or_else(|| int_at("/count"));
    req.os_type = str_at("/osType");
    req.orchestrator_version =
        str_at("/orchestratorVersion").or_else(|| cluster_version.map(str::to_string));
    req.os_sku = str_at("/osSKU");
    req.gpu_driver = str_at("/gpuProfile/driver");
    req.gpu_management_mode = str_at("/gpuProfile/nvidia/managementMode");
    req.gpu_instance_profile = str_at("/gpuInstanceProfile");
    let autoscale: Vec<&Value> = list(spec.at("/virtualMachinesProfile/scale/autoscale")).collect();
    req.autoscaling =
        spec.get("enableAutoScaling") == Some(&Value::Bool(true)) || !autoscale.is_empty();
    req.min_count = int_at("/minCount").or_else(|| {
        autoscale
            .iter()
            .filter_map(|a| a.get("minCount").and_then(int_of))
            .reduce(|a, b| a + b)
    });
}

/// Reads a CAPZ `AzureManagedMachinePool` spec: `sku` is the VM size,
/// `taints[]` are `{key, value, effect}` objects, `scaling` turns the
/// autoscaler on between `minSize` and `maxSize` (without it, the node
/// count is the owning MachinePool's `replicas`, not known here).
pub(super) fn read_machine_pool(req: &mut CapacityRequest, spec: &Value) {
    if let Some(name) = spec.get("name").and_then(Value::as_str) {
        if !name.trim().is_empty() {
            req.name = name.to_string();
        }
    }
    req.sizes_field = "spec.sku".into();
    req.taints_field = "spec.taints".into();
    req.sizes
        .extend(spec.get("sku").and_then(Value::as_str).map(str::to_string));
    req.taints = list(spec.get("taints"))
        .filter_map(Taint::from_value)
        .collect();
    req.os_type = spec
        .get("osType")
        .and_then(Value::as_str)
        .map(str::to_string);
    if let Some(scaling) = spec.get("scaling").filter(|s| s.is_object()) {
        req.autoscaling = true;
        req.min_count = scaling.get("minSize").and_then(int_of);
        req.count = scaling.get("maxSize").and_then(int_of);
    }
}

/// The pools an object that holds several creates, in the order written:
/// each an agent pool.
pub(super) fn inline_pools(kind: PoolKind, object: &Value) -> Vec<CapacityRequest> {
    pool_sources(kind, object)
        .into_iter()
        .map(|source| {
            let mut pool = CapacityRequest::empty(PoolKind::AgentPool, &source.name);
            pool.path = source.path.clone();
            read_agent_pool(
                &mut pool,
                source.spec,
                &source.field,
                source.cluster_version,
            );
            pool.sizes.retain(|s| !s.trim().is_empty());
            pool
        })
        .collect()
}

/// The paths ([`CapacityRequest::path`]) of the pools of `object` that an
/// UPDATE from `old` adds or changes: a pool is unchanged when `old` holds
/// one at the same path with the same fields.
pub(super) fn changed_pools(kind: PoolKind, object: &Value, old: &Value) -> Vec<String> {
    let before = pool_sources(kind, old);
    pool_sources(kind, object)
        .into_iter()
        .filter(|now| {
            !before
                .iter()
                .any(|was| was.path == now.path && was.spec == now.spec)
        })
        .map(|now| now.path)
        .collect()
}

/// Whether an UPDATE leaves an object that is one pool as it was: every
/// top-level field but `metadata` and `status` (`spec`, or KAITO's
/// top-level `resource`), and its labels. Annotations, finalizers and owner
/// references, which controllers write, do not count.
pub(super) fn same_object(object: &Value, old: &Value) -> bool {
    let (Some(now), Some(was)) = (object.as_object(), old.as_object()) else {
        return object == old;
    };
    let judged = |k: &String| k != "metadata" && k != "status";
    let labels = |v: &Value| v.at("/metadata/labels").cloned();
    now.iter()
        .filter(|(k, _)| judged(k))
        .all(|(k, v)| was.get(k) == Some(v))
        && was
            .keys()
            .filter(|k| judged(k))
            .all(|k| now.contains_key(k))
        && labels(object) == labels(old)
}

/// One pool as its object writes it.
struct PoolSource<'a> {
    name: String,
    /// Where it is written (`spec.agentPoolProfiles[gpu1]`,
    /// `spec.resources[gpu1]`).
    path: String,
    /// Where its agent pool fields are written (the path, or an embedded
    /// object's `spec`).
    field: String,
    /// Its agent pool fields.
    spec: &'a Value,
    /// The `kubernetesVersion` of the ManagedCluster that holds it.
    cluster_version: Option<&'a str>,
}

/// The pools of an object that holds several: a ManagedCluster's
/// `agentPoolProfiles[]`; among a CAPZ object's `spec.resources[]`, each
/// ManagedClustersAgentPool's spec and each ManagedCluster's profiles.
fn pool_sources(kind: PoolKind, object: &Value) -> Vec<PoolSource<'_>> {
    let mut out = Vec::new();
    match kind {
        PoolKind::ManagedCluster => cluster_profiles(object, "spec", &mut out),
        PoolKind::AsoMachinePool | PoolKind::AsoControlPlane => {
            for (i, resource) in list(object.at("/spec/resources")).enumerate() {
                let api_version = str_at(resource, "/apiVersion");
                if api_version.split('/').next() != Some("containerservice.azure.com") {
                    continue;
                }
                let (meta_name, path) = entry(resource, "/metadata/name", "spec.resources", i);
                match str_at(resource, "/kind") {
                    "ManagedClustersAgentPool" => {
                        let Some(spec) = resource.get("spec").filter(|s| s.is_object()) else {
                            continue;
                        };
                        let name = Some(str_at(spec, "/azureName"))
                            .filter(|n| !n.is_empty())
                            .or(meta_name)
                            .unwrap_or_default();
                        out.push(PoolSource {
                            name: name.to_string(),
                            field: format!("{path}.spec"),
                            path,
                            spec,
                            cluster_version: None,
                        });
                    }
                    "ManagedCluster" => {
                        cluster_profiles(resource, &format!("{path}.spec"), &mut out)
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
    out
}

/// The entry `i` of the list at `list`: its name (a non-empty string at
/// `name`) and its path, `list[name]`, or `list[i]` when it has none.
fn entry<'a>(item: &'a Value, name: &str, list: &str, i: usize) -> (Option<&'a str>, String) {
    let name = Some(str_at(item, name)).filter(|n| !n.is_empty());
    let path = match name {
        Some(n) => format!("{list}[{n}]"),
        None => format!("{list}[{i}]"),
    };
    (name, path)
}

/// The `spec.agentPoolProfiles[]` of a ManagedCluster, written at
/// `spec_path`.
fn cluster_profiles<'a>(cluster: &'a Value, spec_path: &str, out: &mut Vec<PoolSource<'a>>) {
    let version = cluster
        .at("/spec/kubernetesVersion")
        .and_then(Value::as_str);
    for (i, profile) in list(cluster.at("/spec/agentPoolProfiles")).enumerate() {
        if !profile.is_object() {
            continue;
        }
        let (name, path) = entry(
            profile,
            "/name",
            &format!("{spec_path}.agentPoolProfiles"),
            i,
        );
        out.push(PoolSource {
            name: name.unwrap_or_default().to_string(),
            field: path.clone(),
            path,
            spec: profile,
            cluster_version: version,
        });
    }
}
