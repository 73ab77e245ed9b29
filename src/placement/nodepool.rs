//! The GPU taint on Karpenter NodePools.
//!
//! A NodePool that can launch only GPU sizes and carries no GPU taint lets
//! every pod land on its expensive nodes. When the placement profile that
//! serves the pool's GPUs says `nodePoolTaintPolicy: Add`, `/mutate`
//! appends the profile's `nodePoolTaint` to `spec.template.spec.taints` and
//! warns; with `Require` it leaves the pool to the validating policies.
use super::{profile::NodePoolTaintPolicy, Plan, Profile, ProfileSet};
use crate::gpu::capacity::{CapacityRequest, PoolKind};
use crate::gpu::catalog::Catalog;
use crate::gpu::taints::is_gpu_taint;
use crate::k8s::json::Pointer as _;
use crate::k8s::{Patch, ShapeError};
use crate::review::{Operation, Request};
use serde_json::Value;

/// Prefix of the warnings placement gives.
const WARNING_PREFIX: &str = "gpu-placement";

/// Whether `req` is a `karpenter.sh` NodePool (any version) on its main
/// resource.
pub(super) fn is_node_pool(req: &Request) -> bool {
    req.kind.group == "karpenter.sh"
        && req.kind.kind == "NodePool"
        && req.sub_resource.as_deref().unwrap_or_default().is_empty()
}

/// Plans the mutation of a NodePool request: CREATE and UPDATE.
pub(super) fn plan_request(profiles: &ProfileSet, req: &Request) -> Plan {
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return Plan::default();
    }
    (req.object.as_ref()).map_or_else(Plan::default, |pool| plan_node_pool(profiles, pool))
}

/// Plans the mutation of one NodePool object (raw JSON as the apiserver
/// sent it): the profile's `nodePoolTaint` when the pool launches only GPU
/// nodes, has no GPU taint, and its profile says `Add`.
fn plan_node_pool(profiles: &ProfileSet, pool: &Value) -> Plan {
    let Some(request) = CapacityRequest::from_object(pool) else {
        return Plan::default();
    };
    if request.kind != PoolKind::NodePool {
        return Plan::default();
    }
    let catalog = profiles.catalog();
    if !request.gpu_only(catalog) {
        // CPU pools and mixed pools are for the validating policies.
        return Plan::default();
    }
    // Any GPU taint (sku=gpu, nvidia.com/gpu, amd.com/gpu with NoSchedule or
    // NoExecute) already keeps other pods off, and a second one would repel
    // GPU pods that tolerate only the first.
    if request.taints.iter().any(is_gpu_taint) {
        return Plan::default();
    }
    let name = pool_name(pool);
    let profile = match pool_profile(profiles, &request, catalog) {
        Ok(Some(profile)) => profile,
        Ok(None) => return Plan::default(),
        Err(message) => {
            return warning_only(format!("{WARNING_PREFIX}: NodePool {name} {message}"))
        }
    };
    let Some(taint) = &profile.node_pool_taint else {
        return Plan::default();
    };
    // The profile's own taint, when it is not one of the above.
    if request
        .taints
        .iter()
        .any(|t| t.key == taint.key && t.value == taint.value && t.effect == taint.effect)
    {
        return Plan::default();
    }
    if profile.node_pool_taint_policy == NodePoolTaintPolicy::Require {
        return Plan::default();
    }
    // Kubernetes refuses two taints with the same key and effect on a node.
    if let Some(clash) = request
        .taints
        .iter()
        .find(|t| t.key == taint.key && t.effect == taint.effect)
    {
        return warning_only(format!(
            "{WARNING_PREFIX}: NodePool {name} launches GPU nodes without a GPU taint; \
             did not add {taint} because it already has {}",
            clash
        ));
    }
    let ops = match taint_ops(pool, taint.to_json()) {
        Ok(ops) => ops,
        Err(ShapeError { path, .. }) => {
            tracing::warn!(profile = %profile.name, path = %path, "NodePool not patched: unexpected shape");
            return Plan::default();
        }
    };
    Plan {
        profile: Some(profile.name.clone()),
        patch: json_patch::Patch(ops),
        warnings: vec![format!(
            "{WARNING_PREFIX}: NodePool {name} launches GPU nodes without a GPU taint; \
             added {taint} so that only pods that tolerate it land there"
        )],
    }
}

/// The profile for a GPU-only pool: for each GPU manufacturer among the
/// sizes it can launch, the highest-priority profile with a `nodePoolTaint`
/// serving that manufacturer's GPU resource. Profiles with a
/// `namespaceSelector` or `podSelector` describe some pods, not the cluster's
/// pools, and are passed over. `Ok(None)` when some manufacturer has no such
/// profile; `Err` when the manufacturers' profiles disagree on the taint.
fn pool_profile<'a>(
    profiles: &'a ProfileSet,
    request: &CapacityRequest,
    catalog: &Catalog,
) -> Result<Option<&'a Profile>, String> {
    let mut manufacturers: Vec<&str> = Vec::new();
    for sku in request.gpu_skus(catalog) {
        if let Some(sku) = catalog.get(&sku) {
            if !manufacturers.contains(&sku.manufacturer.as_str()) {
                manufacturers.push(&sku.manufacturer);
            }
        }
    }
    if manufacturers.is_empty() {
        return Ok(None);
    }
    let mut chosen: Vec<&Profile> = Vec::new();
    for manufacturer in manufacturers {
        let Some(resource) = manufacturer_resource(manufacturer) else {
            return Ok(None);
        };
        let Some(profile) = profiles.profiles().iter().find(|p| {
            p.node_pool_taint.is_some()
                && p.namespace_selector.is_none()
                && p.pod_selector.is_none()
                && p.resources.matches(resource)
        }) else {
            return Ok(None);
        };
        if !chosen.iter().any(|c| c.name == profile.name) {
            chosen.push(profile);
        }
    }
    // Profiles are in precedence order; the first that applies names the patch.
    let chosen: Vec<&Profile> = profiles
        .profiles()
        .iter()
        .filter(|p| chosen.iter().any(|c| c.name == p.name))
        .collect();
    let Some(&first) = chosen.first() else {
        return Ok(None);
    };
    if let Some(other) = chosen.iter().find(|p| {
        p.node_pool_taint != first.node_pool_taint
            || p.node_pool_taint_policy != first.node_pool_taint_policy
    }) {
        return Err(format!(
            "launches GPU nodes of placement profiles {} and {}, which ask for different node pool taints; none added",
            first.name, other.name
        ));
    }
    Ok(Some(first))
}

/// The device-plugin resource of a catalog manufacturer.
fn manufacturer_resource(manufacturer: &str) -> Option<&'static str> {
    match manufacturer.to_ascii_lowercase().as_str() {
        "nvidia" => Some("nvidia.com/gpu"),
        "amd" => Some("amd.com/gpu"),
        _ => None,
    }
}

fn pool_name(pool: &Value) -> &str {
    ["/metadata/name", "/metadata/generateName"]
        .iter()
        .filter_map(|p| pool.at(p).and_then(Value::as_str))
        .find(|n| !n.is_empty())
        .unwrap_or("(unnamed)")
}

fn warning_only(message: String) -> Plan {
    Plan {
        warnings: vec![message],
        ..Plan::default()
    }
}

/// Operations appending `taint` to `spec.template.spec.taints`, adding
/// whatever is missing on the way (absent or null) with it.
fn taint_ops(pool: &Value, taint: Value) -> Result<Vec<json_patch::PatchOperation>, ShapeError> {
    let mut patch = Patch::new(pool);
    patch.append(&["spec", "template", "spec", "taints"], vec![taint])?;
    Ok(patch.into_operations())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::review::Operation;
    use json_patch::PatchOperation;
    use serde_json::json;

    /// A profile serving `resources` (space-separated) with the `sku=gpu`
    /// pool taint, and `extra` in its spec.
    fn profile(name: &str, resources: &str, extra: Value) -> Profile {
        let mut spec = json!({
            "resources": resources.split(' ').collect::<Vec<_>>(),
            "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
            "nodePoolTaint": {"key": "sku", "value": "gpu", "effect": "NoSchedule"}
        });
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        Profile::from_value(&json!({"apiVersion": super::super::API_VERSION,
            "kind": super::super::KIND, "metadata": {"name": name}, "spec": spec}))
        .unwrap()
    }

    fn set(profiles: Vec<Profile>) -> ProfileSet {
        ProfileSet::new(profiles).unwrap()
    }

    fn shipped() -> ProfileSet {
        let nvidia = profile("aks-nvidia", "nvidia.com/gpu nvidia.com/mig-*", json!({}));
        set(vec![nvidia, profile("aks-amd", "amd.com/gpu", json!({}))])
    }

    fn pool(requirements: Value, taints: Option<Value>) -> Value {
        let mut p = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
                "requirements": requirements}}}});
        if let Some(t) = taints {
            p["spec"]["template"]["spec"]["taints"] = t;
        }
        p
    }

    /// An A100 pool with one taint.
    fn a100_tainted(taint: Value) -> Value {
        pool(a100(), Some(json!([taint])))
    }

    const FAMILY: &str = "karpenter.azure.com/sku-family";
    const SIZE: &str = "node.kubernetes.io/instance-type";

    /// Requirements that `key` be one of `values`.
    fn req(key: &str, values: &[&str]) -> Value {
        json!([{"key": key, "operator": "In", "values": values}])
    }

    fn a100() -> Value {
        req(SIZE, &["Standard_NC24ads_A100_v4"])
    }

    fn patched(pool: &Value, plan: &Plan) -> Value {
        let mut out = pool.clone();
        json_patch::patch(&mut out, &plan.patch).unwrap();
        out
    }

    #[test]
    fn gpu_only_pool_gets_the_taint_and_a_warning() {
        let p = pool(a100(), None);
        let plan = plan_node_pool(&shipped(), &p);
        assert_eq!(plan.profile.as_deref(), Some("aks-nvidia"));
        let taints = json!([{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]);
        assert_eq!(
            patched(&p, &plan)["spec"]["template"]["spec"]["taints"],
            taints
        );
        let warning = "gpu-placement: NodePool gpu launches GPU nodes without a GPU taint; added sku=gpu:NoSchedule so that only pods that tolerate it land there";
        assert_eq!(plan.warnings, [warning]);
    }

    #[test]
    fn taint_is_appended_to_existing_taints() {
        let p = a100_tainted(json!({"key": "team", "value": "ml", "effect": "NoSchedule"}));
        let plan = plan_node_pool(&shipped(), &p);
        let ops = serde_json::to_value(&plan.patch).unwrap();
        let want = json!([{"op": "add", "path": "/spec/template/spec/taints/-", "value": {"key": "sku", "value": "gpu", "effect": "NoSchedule"}}]);
        assert_eq!(ops, want);
    }

    #[test]
    fn missing_and_null_parents_are_added_in_order() {
        let p = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "bare"},
            "spec": {"template": null, "limits": {"nvidia.com/gpu": "8"}}
        });
        // No requirements: the pool could launch anything, so not GPU-only.
        assert!(plan_node_pool(&shipped(), &p).patch.0.is_empty());
        let mut p = pool(a100(), None);
        p["spec"]["template"]["spec"]["taints"] = Value::Null;
        let ops = serde_json::to_value(&plan_node_pool(&shipped(), &p).patch).unwrap();
        let want = json!([{"op": "add", "path": "/spec/template/spec/taints", "value": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]}]);
        assert_eq!(ops, want);
        // Missing parents come whole, in one operation.
        let taint = json!({"key": "k", "effect": "NoSchedule"});
        let ops = taint_ops(&json!({"metadata": {}}), taint).unwrap();
        let paths: Vec<String> = ops
            .iter()
            .map(|op| match op {
                PatchOperation::Add(a) => a.path.to_string(),
                _ => String::new(),
            })
            .collect();
        assert_eq!(paths, ["/spec"]);
        let mut with_parents = json!({"metadata": {}});
        json_patch::patch(&mut with_parents, &ops).unwrap();
        let want =
            json!({"template": {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}});
        assert_eq!(with_parents["spec"], want);
    }

    #[test]
    fn wrong_shapes_get_no_patch() {
        let mut p = pool(a100(), None);
        p["spec"]["template"]["spec"]["taints"] = json!("sku=gpu:NoSchedule");
        let plan = plan_node_pool(&shipped(), &p);
        assert!(plan.patch.0.is_empty() && plan.profile.is_none());
        let wrong = taint_ops(&json!({"spec": {"template": []}}), json!({}));
        assert_eq!(wrong.unwrap_err().path, "/spec/template");
    }

    #[test]
    fn patched_pool_gets_no_second_patch() {
        let p = pool(a100(), None);
        let once = patched(&p, &plan_node_pool(&shipped(), &p));
        let again = plan_node_pool(&shipped(), &once);
        assert!(again.patch.0.is_empty() && again.warnings.is_empty() && again.profile.is_none());
    }

    #[test]
    fn any_gpu_taint_counts() {
        for taint in [
            json!({"key": "nvidia.com/gpu", "effect": "NoSchedule"}),
            json!({"key": "sku", "value": "gpu", "effect": "NoExecute"}),
        ] {
            let plan = plan_node_pool(&shipped(), &a100_tainted(taint.clone()));
            assert!(plan.patch.0.is_empty(), "{taint}");
        }
        // A weaker effect does not keep CPU pods off.
        let soft =
            a100_tainted(json!({"key": "sku", "value": "gpu", "effect": "PreferNoSchedule"}));
        let plan = plan_node_pool(&shipped(), &soft);
        assert_eq!(plan.patch.0.len(), 1);
    }

    #[test]
    fn a_custom_profile_taint_counts_when_identical() {
        let custom = json!({"tolerations": [{"key": "pool", "operator": "Exists"}],
            "nodePoolTaint": {"key": "pool", "value": "gpu", "effect": "NoSchedule"}});
        let set = set(vec![profile("dedicated", "nvidia.com/gpu", custom)]);
        let p = pool(a100(), None);
        let plan = plan_node_pool(&set, &p);
        assert_eq!(plan.profile.as_deref(), Some("dedicated"));
        assert!(plan.warnings[0].contains("added pool=gpu:NoSchedule"));
        assert!(plan_node_pool(&set, &patched(&p, &plan)).patch.0.is_empty());
    }

    #[test]
    fn same_key_and_effect_with_another_value_is_not_doubled() {
        let p = a100_tainted(json!({"key": "sku", "value": "compute", "effect": "NoSchedule"}));
        let plan = plan_node_pool(&shipped(), &p);
        assert!(plan.patch.0.is_empty() && plan.profile.is_none());
        let warning = "gpu-placement: NodePool gpu launches GPU nodes without a GPU taint; did not add sku=gpu:NoSchedule because it already has sku=compute:NoSchedule";
        assert_eq!(plan.warnings, [warning]);
    }

    #[test]
    fn require_policy_leaves_the_pool_to_validation() {
        let require = json!({"nodePoolTaintPolicy": "Require"});
        let set = set(vec![profile("strict", "nvidia.com/gpu", require)]);
        let plan = plan_node_pool(&set, &pool(a100(), None));
        assert!(plan.patch.0.is_empty() && plan.warnings.is_empty() && plan.profile.is_none());
    }

    #[test]
    fn cpu_and_mixed_pools_are_untouched() {
        let cpu = pool(req(FAMILY, &["D"]), None);
        let mixed = pool(req(FAMILY, &["D", "N"]), None);
        for p in [cpu, mixed] {
            let plan = plan_node_pool(&shipped(), &p);
            assert!(plan.patch.0.is_empty() && plan.warnings.is_empty(), "{p}");
        }
    }

    #[test]
    fn amd_pools_take_the_amd_profile() {
        let require = json!({"nodePoolTaintPolicy": "Require"});
        let amd_first = set(vec![
            profile("aks-amd", "amd.com/gpu", json!({})),
            profile("nvidia-strict", "nvidia.com/gpu", require),
        ]);
        let mi300 = pool(req(SIZE, &["Standard_ND96isr_MI300X_v5"]), None);
        let plan = plan_node_pool(&amd_first, &mi300);
        assert_eq!(plan.profile.as_deref(), Some("aks-amd"));
        // The NVIDIA profile requires the taint: an NVIDIA pool gets none.
        let nvidia = plan_node_pool(&amd_first, &pool(a100(), None));
        assert!(nvidia.patch.0.is_empty());
    }

    #[test]
    fn highest_priority_profile_with_a_pool_taint_wins() {
        let strict = json!({"priority": 10, "nodePoolTaintPolicy": "Require"});
        let team = json!({"priority": 30, "podSelector": {"matchLabels": {"team": "a"}}});
        let set = set(vec![
            profile("aks-nvidia", "nvidia.com/gpu", json!({})),
            profile("h100-strict", "nvidia.com/gpu", strict),
            // Higher still, but without a pool taint: not about pools.
            Profile::from_value(&json!({
                "apiVersion": super::super::API_VERSION, "kind": super::super::KIND,
                "metadata": {"name": "no-pool-taint"},
                "spec": {"resources": ["nvidia.com/gpu"], "priority": 20,
                         "tolerations": [{"key": "x", "operator": "Exists"}]}
            }))
            .unwrap(),
            // Higher still, but scoped to some pods.
            profile("team", "nvidia.com/gpu", team),
        ]);
        let plan = plan_node_pool(&set, &pool(a100(), None));
        assert!(plan.patch.0.is_empty(), "h100-strict requires: {plan:?}");
    }

    #[test]
    fn pools_of_both_manufacturers() {
        // Family N holds NVIDIA and AMD sizes.
        let both = pool(req(FAMILY, &["N"]), None);
        let plan = plan_node_pool(&shipped(), &both);
        assert_eq!(plan.profile.as_deref(), Some("aks-amd"), "first by name");
        assert_eq!(plan.patch.0.len(), 1);
        let amd = json!({"tolerations": [{"key": "amd.com/gpu", "operator": "Exists"}],
            "nodePoolTaint": {"key": "amd.com/gpu", "effect": "NoSchedule"}});
        let nvidia = || profile("aks-nvidia", "nvidia.com/gpu", json!({}));
        let differ = set(vec![nvidia(), profile("aks-amd", "amd.com/gpu", amd)]);
        let plan = plan_node_pool(&differ, &both);
        assert!(plan.patch.0.is_empty() && plan.profile.is_none());
        assert_eq!(plan.warnings.len(), 1);
        let warnings = &plan.warnings;
        assert!(
            warnings[0].contains("aks-amd and aks-nvidia"),
            "{warnings:?}"
        );
        // Already GPU-tainted: no patch and nothing to warn about.
        let mut tainted = both.clone();
        tainted["spec"]["template"]["spec"]["taints"] =
            json!([{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]);
        let plan = plan_node_pool(&differ, &tainted);
        let quiet = plan.patch.0.is_empty() && plan.warnings.is_empty();
        assert!(quiet, "{plan:?}");
        // A manufacturer no profile serves: nothing added.
        let nvidia_only = set(vec![nvidia()]);
        assert!(plan_node_pool(&nvidia_only, &both).patch.0.is_empty());
    }

    #[test]
    fn the_set_catalog_decides_what_a_gpu_size_is() {
        let csv = "name,aliases,gpu_model,manufacturer,gpus,gpu_devices,gpu_memory_gib,vcpus,family,series,retired,retired_on,aks_supported,premium,karpenter_gpu,source\n\
                   Standard_Custom8_X1,,X1,nvidia,1,1,16,8,NCX,NCX1,false,,true,false,true,test\n";
        let catalog = Catalog::from_csv_str(csv, "custom.csv").unwrap();
        let custom = pool(req(SIZE, &["Standard_Custom8_X1"]), None);
        assert!(plan_node_pool(&shipped(), &custom).patch.0.is_empty());
        let set = shipped().with_catalog(std::sync::Arc::new(catalog));
        assert_eq!(plan_node_pool(&set, &custom).patch.0.len(), 1);
    }

    #[test]
    fn requests_create_and_update_only() {
        let p = pool(a100(), None);
        for (op, patched) in [
            (Operation::Create, true),
            (Operation::Update, true),
            (Operation::Delete, false),
            (Operation::Connect, false),
        ] {
            let mut req = Request::for_object(p.clone(), Operation::Create, None);
            req.operation = op;
            assert!(is_node_pool(&req));
            let plan = plan_request(&shipped(), &req);
            assert_eq!(!plan.patch.0.is_empty(), patched, "{op:?}");
        }
        let mut status = Request::for_object(p, Operation::Update, None);
        status.sub_resource = Some("status".into());
        assert!(!is_node_pool(&status));
    }

    #[test]
    fn name_falls_back_to_generate_name() {
        let generated = json!({"metadata": {"generateName": "gpu-"}});
        assert_eq!(pool_name(&generated), "gpu-");
        assert_eq!(pool_name(&json!({})), "(unnamed)");
    }
}
