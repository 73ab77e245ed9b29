//! Namespace SKU tiers: which GPU sizes a namespace may use, and the
//! node-affinity requirement that keeps a GPU pod on them.
//!
//! The tiers are the data of the `gpu-sku-allowlist` ConfigMap, which the
//! `gpu-sku-allowlist` policy reads as its params: one key per tier, each a
//! comma-separated list of SKU names or `*`. A namespace picks its tier with
//! the label `gpu-admission.io/tier` (`default` when unlabelled, or when its
//! tier has no key); premium SKUs need the label
//! `gpu-admission.io/premium-gpus=true` as well (see docs/tiers.md).
use crate::gpu::catalog::{labels, Catalog, Sku};
use crate::gpu::selection::{SkuRequirement, SkuSelection};
use crate::gpu::PodGpuRequest;
use crate::k8s::doc::{comma_list, is_config_map};
use crate::k8s::{
    NodeSelection, NodeSelectorOperator as Operator, NodeSelectorRequirement as Requirement,
    NodeSelectorTerm as Term,
};
use serde_json::Value;
use std::collections::BTreeMap;

/// Name of the ConfigMap (in the policy folder) holding the tiers.
pub const TIERS_CONFIG_MAP: &str = "gpu-sku-allowlist";
/// Namespace label naming the tier.
pub const TIER_LABEL: &str = "gpu-admission.io/tier";
/// Namespace label opting in to premium SKUs.
pub const PREMIUM_LABEL: &str = "gpu-admission.io/premium-gpus";
/// The tier of namespaces without the label (or with an unknown tier).
pub const DEFAULT_TIER: &str = "default";

/// The SKU lists of each tier, as written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SkuTiers {
    tiers: BTreeMap<String, Vec<String>>,
}

impl SkuTiers {
    /// Reads the `data` of the tiers ConfigMap; `None` for any other document.
    pub fn from_config_map(doc: &Value) -> Option<SkuTiers> {
        if !is_config_map(doc, TIERS_CONFIG_MAP) {
            return None;
        }
        let tiers = doc
            .get("data")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(tier, list)| Some((tier.clone(), comma_list(list.as_str()?))))
            .collect();
        Some(SkuTiers { tiers })
    }

    /// The catalog SKUs a namespace with `namespace_labels` may use, in
    /// catalog order; `None` when that is every SKU (or no tier applies).
    pub fn allowed<'a>(
        &self,
        catalog: &'a Catalog,
        namespace_labels: &BTreeMap<String, String>,
    ) -> Option<Vec<&'a Sku>> {
        let (tier, premium) = self.tier_of(namespace_labels)?;
        self.allowed_in(catalog, tier, premium)
    }

    /// The tier whose list applies to a namespace with `namespace_labels`
    /// (its own, or the default one) and whether it opted in to premium
    /// SKUs; `None` when no tier applies.
    pub fn tier_of(&self, namespace_labels: &BTreeMap<String, String>) -> Option<(&str, bool)> {
        let tier = namespace_labels
            .get(TIER_LABEL)
            .map_or(DEFAULT_TIER, String::as_str);
        let (name, _) = self
            .tiers
            .get_key_value(tier)
            .or_else(|| self.tiers.get_key_value(DEFAULT_TIER))?;
        let premium = namespace_labels.get(PREMIUM_LABEL).map(String::as_str) == Some("true");
        Some((name, premium))
    }

    /// The tier names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tiers.keys().map(String::as_str)
    }

    /// [`SkuTiers::allowed`] for tier `tier` with or without the premium
    /// opt-in.
    pub fn allowed_in<'a>(
        &self,
        catalog: &'a Catalog,
        tier: &str,
        premium: bool,
    ) -> Option<Vec<&'a Sku>> {
        let list = self.tiers.get(tier)?;
        let every = list.iter().any(|n| n == "*");
        // Each listed name looked up once (as `Sku::is_named` matches:
        // case, `Standard_`, aliases), then the catalog kept in its order.
        let listed: Vec<&Sku> = list.iter().filter_map(|n| catalog.get(n)).collect();
        let allowed: Vec<&Sku> = catalog
            .skus()
            .iter()
            .filter(|s| every || listed.iter().any(|l| std::ptr::eq(*l, *s)))
            .filter(|s| premium || !s.premium)
            .collect();
        (allowed.len() < catalog.len()).then_some(allowed)
    }
}

/// The required terms that place a GPU pod only on `allowed` sizes: each of
/// the profile's terms with a `node.kubernetes.io/instance-type In [...]`
/// requirement naming the allowed sizes it (and the pod's own selection)
/// can land on. A term that can land on none of them is left out.
///
/// Sizes that are retired or that AKS does not support for GPU nodes are
/// never pinned, nor sizes without MIG for a pod that asks for MIG slices.
///
/// `None` leaves the profile's terms as they are: when the pod's own
/// selection allows no usable size of the tier (the validating side then
/// denies it and names the pod's selector, or the placement profile and
/// the opt-in when placement chose the sizes), or when no term of the
/// profile leads to an allowed size of the pod's GPU maker (a tier names no
/// size of it).
pub fn narrow(
    profile_terms: &[Term],
    pod_spec: &Value,
    request: &PodGpuRequest,
    allowed: &[&Sku],
    catalog: &Catalog,
) -> Option<Vec<Term>> {
    let own = own_selection(pod_spec);
    // MIG slices exist only on sizes whose GPUs support MIG.
    let mig: Vec<&Sku>;
    let allowed = if request.asks_for_mig() {
        mig = allowed.iter().copied().filter(|s| s.mig).collect();
        &mig[..]
    } else {
        allowed
    };
    narrow_for(
        profile_terms,
        own.as_ref(),
        makers(request).as_deref(),
        allowed,
        catalog,
    )
}

/// A pod's own node selection as narrowing reads it; `None` when it leaves
/// every SKU open (no nodeSelector, no required terms). An empty term list
/// is no affinity to placement (which then creates the terms); reading it
/// as "no node" would narrow only on reinvocation.
pub(super) fn own_selection(pod_spec: &Value) -> Option<NodeSelection> {
    let mut own = NodeSelection::from_pod_spec(pod_spec);
    if own.terms.as_ref().is_some_and(Vec::is_empty) {
        own.terms = None;
    }
    (!own.required.is_empty() || own.terms.is_some()).then_some(own)
}

/// [`narrow`] for a pod whose own selection is `own` (`None`: every SKU)
/// and whose GPU resources `makers` can serve (`None`: any).
pub(super) fn narrow_for(
    profile_terms: &[Term],
    own: Option<&NodeSelection>,
    makers: Option<&[&str]>,
    allowed: &[&Sku],
    catalog: &Catalog,
) -> Option<Vec<Term>> {
    let own_skus = own.map(|own| own.skus(catalog));
    let candidates: Vec<&Sku> = allowed
        .iter()
        .copied()
        .filter(|s| makers.is_none_or(|m| m.contains(&s.manufacturer.as_str())))
        .filter(|s| {
            own_skus
                .as_ref()
                .is_none_or(|own| own.iter().any(|o| std::ptr::eq(*o, *s)))
        })
        // No pin to a size no GPU node of can be created: pinned to those
        // alone, the pod would be denied for sizes placement chose.
        .filter(|s| s.aks_supported && !s.retired)
        .collect();
    if candidates.is_empty() {
        return None;
    }
    let whole = [Term::new(Vec::new())];
    let terms = if profile_terms.is_empty() {
        &whole[..]
    } else {
        profile_terms
    };
    let narrowed: Vec<Term> = terms
        .iter()
        .filter_map(|term| {
            let sizes: Vec<&str> = candidates
                .iter()
                .filter(|s| term.requirements.iter().all(|r| r.matches_sku(s)))
                .map(|s| s.name.as_str())
                .collect();
            if sizes.is_empty() {
                return None;
            }
            let mut requirements = term.requirements.clone();
            requirements.push(Requirement::new(
                labels::INSTANCE_TYPE,
                Operator::In,
                &sizes,
            ));
            Some(Term::new(requirements))
        })
        .collect();
    (!narrowed.is_empty()).then_some(narrowed)
}

/// The sets of GPU makers [`makers`] can give, in the order
/// [`makers_index`] numbers them: any maker, NVIDIA, AMD, both.
pub(super) const MAKER_SETS: [Option<&[&str]>; 4] = [
    None,
    Some(&["nvidia"]),
    Some(&["amd"]),
    Some(&["nvidia", "amd"]),
];

/// The position in [`MAKER_SETS`] of the makers that can serve `request`.
pub(super) fn makers_index(request: &PodGpuRequest) -> usize {
    match makers(request) {
        None => 0,
        Some(m) => match (m.contains(&"nvidia"), m.contains(&"amd")) {
            (true, false) => 1,
            (false, true) => 2,
            _ => 3,
        },
    }
}

/// The GPU makers whose sizes can serve the pod's GPU resources (by the
/// resource's domain); `None` when a resource could be served by any.
fn makers(request: &PodGpuRequest) -> Option<Vec<&'static str>> {
    let mut out = Vec::new();
    for resource in request.resources() {
        let maker = match resource.split_once('/').map(|(domain, _)| domain) {
            Some("nvidia.com") => "nvidia",
            Some("amd.com") => "amd",
            _ => return None,
        };
        if !out.contains(&maker) {
            out.push(maker);
        }
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{pod_gpu_request, GpuResources};
    use serde_json::json;

    fn tiers() -> SkuTiers {
        let data = json!({
            "default": "Standard_NC4as_T4_v3, standard_nc8as_t4_v3,\n NV36ads_A10_v5",
            "standard": "Standard_NC4as_T4_v3, Standard_NC24ads_A100_v4", "premium": "*"});
        SkuTiers::from_config_map(&config_map(TIERS_CONFIG_MAP, data)).unwrap()
    }

    fn config_map(name: &str, data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "gpu-admission"}, "data": data})
    }

    /// The labels of a namespace of `tier` that opts in to premium GPUs
    /// with `premium` (each left out when empty).
    fn ns(tier: &str, premium: &str) -> BTreeMap<String, String> {
        [(TIER_LABEL, tier), (PREMIUM_LABEL, premium)]
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// What the default tier of [`tiers`] allows, in catalog order.
    const DEFAULT_TIER: [&str; 3] = [
        "Standard_NC4as_T4_v3",
        "Standard_NC8as_T4_v3",
        "Standard_NV36ads_A10_v5",
    ];

    fn names(skus: &[&Sku]) -> Vec<String> {
        skus.iter().map(|s| s.name.clone()).collect()
    }

    #[test]
    fn reads_only_the_tiers_config_map() {
        let other = config_map("other", json!({"default": "*"}));
        assert!(SkuTiers::from_config_map(&other).is_none());
        let mut secret = config_map(TIERS_CONFIG_MAP, Value::Null);
        secret["kind"] = json!("Secret");
        assert!(SkuTiers::from_config_map(&secret).is_none());
        let empty = config_map(TIERS_CONFIG_MAP, Value::Null);
        let empty = SkuTiers::from_config_map(&empty).unwrap();
        assert_eq!(empty.allowed(&Catalog::embedded(), &ns("", "")), None);
    }

    #[test]
    fn tier_label_picks_the_list_and_unknown_tiers_fall_back_to_default() {
        let c = Catalog::embedded();
        let t = tiers();
        let default = t.allowed(&c, &ns("", "")).unwrap();
        assert_eq!(names(&default), DEFAULT_TIER);
        let unknown = t.allowed(&c, &ns("gold", "")).unwrap();
        assert_eq!(names(&unknown), names(&default));
    }

    #[test]
    fn premium_sizes_need_the_opt_in_even_when_listed() {
        let c = Catalog::embedded();
        let t = tiers();
        let standard = t.allowed(&c, &ns("standard", "")).unwrap();
        assert_eq!(names(&standard), ["Standard_NC4as_T4_v3"]);
        let opted = t.allowed(&c, &ns("standard", "true")).unwrap();
        let both = ["Standard_NC4as_T4_v3", "Standard_NC24ads_A100_v4"];
        assert_eq!(names(&opted), both);
        // "*" without the opt-in: every size but the premium ones.
        let star = t.allowed(&c, &ns("premium", "")).unwrap();
        assert!(star.iter().all(|s| !s.premium));
        assert!(star.len() > 40);
        // "*" with the opt-in: every size, nothing to restrict.
        assert_eq!(t.allowed(&c, &ns("premium", "true")), None);
    }

    #[test]
    fn the_profile_set_looks_up_what_each_tier_allows() {
        use crate::placement::ProfileSet;
        let c = Catalog::embedded();
        let cases = [
            ns("", ""),
            ns("gold", ""),
            ns("standard", ""),
            ns("standard", "true"),
            ns("premium", ""),
            ns("premium", "true"),
            ns("", "yes"),
        ];
        let catalog = std::sync::Arc::new(Catalog::embedded());
        // Tiers set before and after the catalog: the lookup follows both.
        let none = || ProfileSet::new(Vec::new()).unwrap();
        let sets = [
            none().with_tiers(tiers()),
            none().with_tiers(tiers()).with_catalog(catalog.clone()),
            none().with_catalog(catalog).with_tiers(tiers()),
        ];
        for set in &sets {
            for namespace in &cases {
                let looked_up = set.tier_allowed(namespace).map(|s| names(&s));
                let worked_out = tiers().allowed(&c, namespace).map(|s| names(&s));
                assert_eq!(looked_up, worked_out, "{namespace:?}");
            }
        }
        let standard = json!({"standard": "Standard_NC4as_T4_v3"});
        let no_default = config_map(TIERS_CONFIG_MAP, standard);
        let no_default = SkuTiers::from_config_map(&no_default).unwrap();
        let set = none().with_tiers(no_default);
        assert_eq!(set.tier_allowed(&ns("", "")).map(|s| s.len()), None);
        let standard = set.tier_allowed(&ns("standard", "")).map(|s| names(&s));
        assert_eq!(standard, Some(vec!["Standard_NC4as_T4_v3".to_string()]));
        assert!(none().tier_allowed(&ns("", "")).is_none());
    }

    /// The terms that pin a pod of `spec` to what `profile` allows in the
    /// default tier.
    fn narrow_pod(spec: Value, profile: &[Term]) -> Option<Vec<Value>> {
        let c = Catalog::embedded();
        let allowed = tiers().allowed(&c, &ns("", "")).unwrap();
        let request = pod_gpu_request(&spec, &GpuResources::default());
        narrow(profile, &spec, &request, &allowed, &c)
            .map(|terms| terms.iter().map(Term::to_json).collect())
    }

    fn term(key: &str, values: &[&str]) -> Term {
        Term::new(vec![Requirement::new(key, Operator::In, values)])
    }

    /// [`narrow_pod`] for a pod asking for one `nvidia.com/gpu`.
    fn narrow_nvidia(extra: Value, profile: &[Term]) -> Option<Vec<Value>> {
        narrow_pod(gpu_spec("nvidia.com/gpu", extra), profile)
    }

    fn gpu_spec(resource: &str, extra: Value) -> Value {
        let mut spec =
            json!({"containers": [{"name": "c", "resources": {"limits": {resource: "1"}}}]});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        spec
    }

    #[test]
    fn sizes_no_gpu_node_can_be_made_of_are_never_pinned() {
        let c = Catalog::embedded();
        let unusable: Vec<&Sku> = (c.skus().iter())
            .filter(|s| s.manufacturer == "amd" && (s.retired || !s.aks_supported))
            .collect();
        assert!(!unusable.is_empty(), "the catalog has such AMD sizes");
        let spec = gpu_spec("amd.com/gpu", json!({}));
        let request = pod_gpu_request(&spec, &GpuResources::default());
        let profile = [term(labels::SKU_GPU_MANUFACTURER, &["amd"])];
        let pinned = narrow(&profile, &spec, &request, &unusable, &c);
        assert_eq!(pinned, None, "pinned to sizes it could never run on");
        // Beside a usable size, only the usable one is pinned.
        let mut with_usable = unusable.clone();
        with_usable.push(c.get("Standard_ND96isr_MI300X_v5").unwrap());
        let terms = narrow(&profile, &spec, &request, &with_usable, &c).unwrap();
        let sizes = &terms[0].to_json()["matchExpressions"][1]["values"];
        assert_eq!(sizes, &json!(["Standard_ND96isr_MI300X_v5"]));
    }

    #[test]
    fn each_profile_term_gets_the_allowed_sizes_it_can_land_on() {
        let profile = [
            term(labels::ACCELERATOR, &["nvidia"]),
            term(labels::SKU_GPU_MANUFACTURER, &["nvidia"]),
        ];
        let out = narrow_nvidia(json!({}), &profile).unwrap();
        let sizes = json!(DEFAULT_TIER);
        assert_eq!(out.len(), 2);
        for t in &out {
            assert_eq!(t["matchExpressions"][1]["key"], labels::INSTANCE_TYPE);
            assert_eq!(t["matchExpressions"][1]["values"], sizes);
        }
        // No profile terms: one term of the sizes alone.
        let out = narrow_nvidia(json!({}), &[]).unwrap();
        assert_eq!(out[0]["matchExpressions"][0]["values"], sizes);
    }

    #[test]
    fn the_pods_own_selection_narrows_the_sizes_and_never_widens_them() {
        let profile = [term(labels::ACCELERATOR, &["nvidia"])];
        let t4 = json!({"nodeSelector": {"karpenter.azure.com/sku-gpu-name": "T4"}});
        let out = narrow_nvidia(t4, &profile).unwrap();
        let t4_sizes = json!(["Standard_NC4as_T4_v3", "Standard_NC8as_T4_v3"]);
        assert_eq!(out[0]["matchExpressions"][1]["values"], t4_sizes);
        // Only sizes outside the tier: left to the validating side.
        let a100 = json!({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-80GB-PCIe"}});
        assert_eq!(narrow_nvidia(a100, &profile), None);
    }

    #[test]
    fn a_profile_term_outside_the_tier_is_dropped_and_no_term_means_no_change() {
        let profile = [
            term(labels::SKU_GPU_MANUFACTURER, &["nvidia"]),
            term(labels::INSTANCE_TYPE, &["Standard_ND96isr_H100_v5"]),
        ];
        let out = narrow_nvidia(json!({}), &profile).unwrap();
        assert_eq!(out.len(), 1);
        let key = &out[0]["matchExpressions"][0]["key"];
        assert_eq!(key, labels::SKU_GPU_MANUFACTURER);
        let pinned = [term(labels::INSTANCE_TYPE, &["Standard_ND96isr_H100_v5"])];
        assert_eq!(narrow_nvidia(json!({}), &pinned), None);
    }

    #[test]
    fn an_empty_term_list_narrows_like_no_affinity() {
        // Placement treats `nodeSelectorTerms: []` as no terms and creates
        // them; narrowing must agree, or only the second /mutate narrows.
        let profile = [term(labels::ACCELERATOR, &["nvidia"])];
        let empty = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}});
        let none = narrow_nvidia(json!({}), &profile);
        assert_eq!(narrow_nvidia(empty, &profile), none);
    }

    #[test]
    fn sizes_follow_the_maker_of_the_gpu_resource() {
        let amd = [term(labels::SKU_GPU_MANUFACTURER, &["amd"])];
        // The tier names no AMD size: nothing to narrow to.
        assert_eq!(narrow_pod(gpu_spec("amd.com/gpu", json!({})), &amd), None);
        // A resource of no known maker can use any allowed size.
        let windows = [term("kubernetes.io/os", &["windows"])];
        let directx = gpu_spec("microsoft.com/directx", json!({}));
        let out = narrow_pod(directx, &windows).unwrap();
        assert_eq!(out[0]["matchExpressions"][1]["values"], json!(DEFAULT_TIER));
    }
}
