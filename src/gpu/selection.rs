//! Which SKUs a node selection can land on.
//!
//! One matcher serves pods (nodeSelector + required node affinity, whose
//! terms are ORed) and Karpenter NodePools (one list of requirements, all
//! ANDed), both read into [`NodeSelection`]. Each catalog SKU is judged by
//! the labels a node of that size carries ([`Sku::node_labels`]); a
//! requirement on any other label (zone, agent pool, team labels) says
//! nothing about the SKU and is taken as satisfiable.
use super::catalog::{labels, Catalog, Sku, SkuLabel};
use crate::k8s::{
    NodeSelection, NodeSelectorOperator as Operator, NodeSelectorRequirement as Requirement,
};

/// The SKU questions asked of one node-selector requirement.
pub trait SkuRequirement {
    /// Does a node of `sku` satisfy this requirement? Keys that do not
    /// describe the SKU are taken as satisfiable.
    fn matches_sku(&self, sku: &Sku) -> bool;
    /// True when no node without a GPU can satisfy this requirement.
    fn requires_gpu_node(&self, catalog: &Catalog) -> bool;
}

impl SkuRequirement for Requirement {
    fn matches_sku(&self, sku: &Sku) -> bool {
        matches_sku_as(self, SkuLabel::of(&self.key), sku)
    }

    fn requires_gpu_node(&self, catalog: &Catalog) -> bool {
        let key = self.key.as_str();
        let op = self.operator;
        let first_int = || self.values.first().and_then(|v| v.parse::<i64>().ok());
        // `In` with values, every one of them a GPU value.
        let all_in = |gpu: &dyn Fn(&str) -> bool| {
            op == Operator::In && !self.values.is_empty() && self.values.iter().all(|v| gpu(v))
        };
        if is_size_key(key) {
            return all_in(&|v| catalog.is_gpu_sku(v));
        }
        match key {
            labels::SKU_FAMILY => all_in(&|v| v == "N"),
            // A series is a GPU series when the catalog has its sizes
            // (`NCads_A100_v4`); any other value may name CPU sizes.
            labels::SKU_SERIES => all_in(&|v| catalog.is_gpu_series(v)),
            labels::SKU_GPU_COUNT | GFD_GPU_COUNT => match op {
                Operator::In => all_in(&|v| v.parse::<i64>().is_ok_and(|n| n > 0)),
                Operator::NotIn => {
                    key == labels::SKU_GPU_COUNT && self.values.iter().any(|v| v == "0")
                }
                Operator::Gt => first_int().is_some_and(|n| n >= 0),
                Operator::Gte => first_int().is_some_and(|n| n >= 1),
                Operator::Exists => key == GFD_GPU_COUNT,
                _ => false,
            },
            // The GPU Operator's and GPU feature discovery's own labels
            // (`nvidia.com/gpu.deploy.*`, `nvidia.com/gpu.count`,
            // `nvidia.com/mig.capable`...) are put on GPU nodes only; a
            // value of "false" is how the operator turns a component off.
            _ if key.starts_with("nvidia.com/gpu.") || key.starts_with("nvidia.com/mig.") => {
                op == Operator::Exists || all_in(&|v| v != "false")
            }
            _ if GPU_ONLY_KEYS.contains(&key) => op == Operator::Exists || all_in(&|_| true),
            _ => false,
        }
    }
}

/// [`SkuRequirement::matches_sku`] with the key classified once by the caller.
fn matches_sku_as(r: &Requirement, key: Option<SkuLabel>, sku: &Sku) -> bool {
    if met_by_absence(r, key) {
        return true;
    }
    match key {
        None => true,
        // VM size names are case-insensitive in Azure and some tools
        // spell them differently (KAITO's ND96asr_A100_v4).
        Some(SkuLabel::Size) => match r.operator {
            Operator::In => r.values.iter().any(|v| sku.is_named(v)),
            Operator::NotIn => !r.values.iter().any(|v| sku.is_named(v)),
            _ => r.matches_value(Some(&sku.name)),
        },
        // GFD's product label is on NVIDIA nodes with the device plugin's
        // feature discovery; its value names the GPU, matched by model.
        Some(SkuLabel::GpuProduct) => {
            let named = || r.values.iter().any(|v| sku.has_gpu_product(v));
            match r.operator {
                Operator::In => named(),
                Operator::NotIn => !named(),
                Operator::Exists => sku.manufacturer == "nvidia",
                Operator::DoesNotExist => sku.manufacturer != "nvidia",
                _ => false,
            }
        }
        Some(k) => r.matches_value(sku.label_of(k).as_deref()),
    }
}

/// Size labels only some nodes of a size carry: Karpenter's
/// `karpenter.azure.com/sku-*` (nodes of classic AKS node pools have none),
/// AKS's `kubernetes.azure.com/accelerator` (set on node pools, not by every
/// provisioner) and GPU feature discovery's `nvidia.com/gpu.product` (only
/// where GFD or the GPU Operator runs). A requirement met by the label's
/// absence (`NotIn`, `DoesNotExist`) therefore leaves every size possible:
/// read as excluding sizes, one such term would take a pod out of every
/// check of the sizes it can land on.
fn met_by_absence(r: &Requirement, key: Option<SkuLabel>) -> bool {
    key.is_some()
        && matches!(r.operator, Operator::NotIn | Operator::DoesNotExist)
        && may_be_absent(&r.key)
}

/// See [`met_by_absence`].
fn may_be_absent(key: &str) -> bool {
    key.starts_with("karpenter.azure.com/sku-")
        || key == labels::ACCELERATOR
        || key == labels::GPU_PRODUCT
}

/// GFD / GPU-operator label with the GPU count.
const GFD_GPU_COUNT: &str = "nvidia.com/gpu.count";

/// Labels only GPU nodes carry: selecting them (In / Exists) selects GPU nodes.
const GPU_ONLY_KEYS: &[&str] = &[
    labels::SKU_GPU_NAME,
    labels::SKU_GPU_MANUFACTURER,
    labels::ACCELERATOR,
    "accelerator",
    "kubernetes.azure.com/dcgm-exporter",
    "nvidia.com/gpu.present",
    "nvidia.com/gpu.product",
    "nvidia.com/gpu.memory",
    "nvidia.com/gpu.family",
    "nvidia.com/mig.config",
    "feature.node.kubernetes.io/pci-10de.present",
    // The AMD GPU Operator's node labeller labels AMD GPU nodes only.
    "amd.com/gpu.family",
];

fn is_size_key(key: &str) -> bool {
    key == labels::INSTANCE_TYPE || key == labels::INSTANCE_TYPE_BETA || key == labels::SKU_NAME
}

/// The SKU questions asked of a whole node selection.
pub trait SkuSelection {
    /// VM sizes named by `In` requirements on the instance-type or
    /// sku-name labels, in order, without repeats.
    fn named_sizes(&self) -> Vec<String>;
    /// Can a node of `sku` satisfy the selection?
    fn allows(&self, sku: &Sku) -> bool;
    /// The catalog SKUs the selection allows, in catalog order.
    fn skus<'a>(&self, catalog: &'a Catalog) -> Vec<&'a Sku>;
    /// True when every way to satisfy the selection needs a GPU node.
    fn targets_gpu_nodes(&self, catalog: &Catalog) -> bool;
}

impl SkuSelection for NodeSelection {
    fn named_sizes(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for r in self.all_requirements() {
            if r.operator == Operator::In && is_size_key(&r.key) {
                super::extend_new(&mut out, &r.values);
            }
        }
        out
    }

    fn allows(&self, sku: &Sku) -> bool {
        classified(self, None).allows(sku)
    }

    fn skus<'a>(&self, catalog: &'a Catalog) -> Vec<&'a Sku> {
        let classified = classified(self, Some(catalog));
        match classified.named_sizes() {
            // Only the sizes named need judging (placement pins GPU pods to
            // a few), put back in catalog order.
            Some(named) => {
                let mut at: Vec<usize> = named.iter().filter_map(|s| catalog.position(s)).collect();
                at.sort_unstable();
                at.dedup();
                let all = catalog.skus();
                at.into_iter()
                    .map(|i| &all[i])
                    .filter(|s| classified.allows(s))
                    .collect()
            }
            None => catalog
                .skus()
                .iter()
                .filter(|s| classified.allows(s))
                .collect(),
        }
    }

    fn targets_gpu_nodes(&self, catalog: &Catalog) -> bool {
        if self.required.iter().any(|r| r.requires_gpu_node(catalog)) {
            return true;
        }
        match &self.terms {
            None => false,
            Some(terms) => {
                !terms.is_empty()
                    && terms.iter().all(|t| {
                        t.matches_nothing
                            || t.requirements.iter().any(|r| r.requires_gpu_node(catalog))
                    })
                    && terms.iter().any(|t| !t.matches_nothing)
            }
        }
    }
}

/// The requirements with their keys classified, so each SKU costs only
/// value comparisons. With the catalog at hand, the sizes an `In` or
/// `NotIn` on a size label names are looked up once (names are matched as
/// [`Sku::is_named`] matches them: case, `Standard_` and aliases), so each
/// SKU of that catalog is then a few pointer comparisons.
fn classified<'a>(sel: &'a NodeSelection, catalog: Option<&'a Catalog>) -> Classified<'a> {
    Classified {
        required: classify(&sel.required, catalog),
        terms: sel.terms.as_ref().map(|terms| {
            terms
                .iter()
                .map(|t| (t.matches_nothing, classify(&t.requirements, catalog)))
                .collect()
        }),
    }
}

fn classify<'a>(reqs: &'a [Requirement], catalog: Option<&'a Catalog>) -> ClassifiedReqs<'a> {
    let mut classified: ClassifiedReqs<'a> = reqs
        .iter()
        .map(|r| {
            let key = SkuLabel::of(&r.key);
            let sizes = match (key, r.operator, catalog) {
                (Some(SkuLabel::Size), Operator::In | Operator::NotIn, Some(catalog)) => {
                    Some(r.values.iter().filter_map(|v| catalog.get(v)).collect())
                }
                _ => None,
            };
            ClassifiedRequirement {
                key,
                r,
                sizes,
                by_absence: met_by_absence(r, key),
            }
        })
        .collect();
    // Sizes looked up first: a few pointer comparisons rule most SKUs out
    // before any label of theirs is worked out (the requirements are
    // ANDed, so their order does not change the answer).
    classified.sort_by_key(|c| c.sizes.is_none());
    classified
}

/// One requirement, classified.
struct ClassifiedRequirement<'a> {
    key: Option<SkuLabel>,
    r: &'a Requirement,
    /// The catalog SKUs an `In` / `NotIn` on a size label names, when
    /// looked up in the catalog the SKUs judged come from.
    sizes: Option<Vec<&'a Sku>>,
    /// Met on every size ([`met_by_absence`]).
    by_absence: bool,
}

impl ClassifiedRequirement<'_> {
    fn matches(&self, sku: &Sku) -> bool {
        if self.by_absence {
            return true;
        }
        match &self.sizes {
            Some(sizes) => {
                let named = sizes.iter().any(|s| std::ptr::eq(*s, sku));
                named == (self.r.operator == Operator::In)
            }
            None => matches_sku_as(self.r, self.key, sku),
        }
    }
}

type ClassifiedReqs<'a> = Vec<ClassifiedRequirement<'a>>;

struct Classified<'a> {
    required: ClassifiedReqs<'a>,
    /// (term matches nothing, its requirements)
    terms: Option<Vec<(bool, ClassifiedReqs<'a>)>>,
}

impl<'a> Classified<'a> {
    /// Every SKU the selection can allow, when an `In` on a size label
    /// says so: one in the requirements every node must meet, or one in
    /// each term that can match anything. `None` when some way to satisfy
    /// the selection names no size. Repeats and order as they come.
    fn named_sizes(&self) -> Option<Vec<&'a Sku>> {
        let in_sizes = |reqs: &ClassifiedReqs<'a>| {
            reqs.iter()
                .find(|c| c.r.operator == Operator::In && c.sizes.is_some())
                .and_then(|c| c.sizes.clone())
        };
        if let Some(sizes) = in_sizes(&self.required) {
            return Some(sizes);
        }
        let mut named = Vec::new();
        for (nothing, reqs) in self.terms.as_ref()? {
            if !nothing {
                named.extend(in_sizes(reqs)?);
            }
        }
        Some(named)
    }

    fn allows(&self, sku: &Sku) -> bool {
        let all = |reqs: &ClassifiedReqs<'_>| reqs.iter().all(|c| c.matches(sku));
        all(&self.required)
            && match &self.terms {
                None => true,
                Some(terms) => terms.iter().any(|(nothing, reqs)| !nothing && all(reqs)),
            }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::with_terms as terms;
    use serde_json::{json, Value};

    fn reqs(requirements: Value) -> NodeSelection {
        NodeSelection::from_requirements(&requirements)
    }

    /// One requirement; no `values` when `values` is empty.
    fn one(key: &str, op: &str, values: &[&str]) -> NodeSelection {
        let mut r = json!({"key": key, "operator": op});
        if !values.is_empty() {
            r["values"] = json!(values);
        }
        reqs(json!([r]))
    }

    fn selector(labels: Value) -> NodeSelection {
        NodeSelection::from_pod_spec(&json!({ "nodeSelector": labels }))
    }

    fn names(sel: &NodeSelection, c: &Catalog) -> Vec<String> {
        sel.skus(c).iter().map(|s| s.name.clone()).collect()
    }

    #[test]
    fn no_selectors_allow_every_sku_and_do_not_target_gpus() {
        let c = Catalog::embedded();
        let sel = NodeSelection::from_pod_spec(&json!({"containers": []}));
        assert_eq!(sel.skus(&c).len(), c.len());
        assert!(!sel.targets_gpu_nodes(&c));
    }

    #[test]
    fn node_selector_on_instance_type_picks_that_sku() {
        let c = Catalog::embedded();
        let sel = selector(
            json!({"node.kubernetes.io/instance-type": "Standard_NC4as_T4_v3", "kubernetes.io/os": "linux"}),
        );
        assert_eq!(names(&sel, &c), ["Standard_NC4as_T4_v3"]);
        assert!(sel.targets_gpu_nodes(&c));
        // A CPU size: no GPU SKU.
        let cpu = selector(json!({"node.kubernetes.io/instance-type": "Standard_D4s_v5"}));
        assert!(cpu.skus(&c).is_empty());
        assert!(!cpu.targets_gpu_nodes(&c));
    }

    #[test]
    fn affinity_terms_are_ored() {
        let c = Catalog::embedded();
        let sel = NodeSelection::from_pod_spec(&terms(json!([
            {"matchExpressions": [{"key": "karpenter.azure.com/sku-gpu-name", "operator": "In", "values": ["T4"]}]},
            {"matchExpressions": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["standard_nc24ads_a100_v4"]}]}
        ])));
        let t4 = ["NC4as_T4_v3", "NC8as_T4_v3", "NC16as_T4_v3", "NC64as_T4_v3"];
        let want: Vec<String> = (t4.iter().chain(&["NC24ads_A100_v4"]))
            .map(|s| format!("Standard_{s}"))
            .collect();
        assert_eq!(names(&sel, &c), want);
        assert!(sel.targets_gpu_nodes(&c));
        // A term without a GPU requirement: not only GPU nodes.
        let sel = NodeSelection::from_pod_spec(&terms(json!([
            {"matchExpressions": [{"key": "kubernetes.azure.com/accelerator", "operator": "In", "values": ["nvidia"]}]},
            {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["eastus-1"]}]}
        ])));
        assert!(!sel.targets_gpu_nodes(&c));
    }

    #[test]
    fn operators_not_in_exists_does_not_exist_gt_lt() {
        let c = Catalog::embedded();
        // Gt 4 GPUs: only the 8-GPU sizes.
        let eight = one("karpenter.azure.com/sku-gpu-count", "Gt", &["4"]);
        assert!(eight.skus(&c).iter().all(|s| s.gpu_devices == 8));
        assert!(!eight.skus(&c).is_empty());
        assert!(eight.targets_gpu_nodes(&c));
        // Lt 2 GPUs excludes 8-GPU sizes.
        let small = one("karpenter.azure.com/sku-gpu-count", "Lt", &["2"]);
        let small = small.skus(&c);
        assert!(small.iter().all(|s| s.gpu_devices < 2 || !s.karpenter_gpu));
        // DoesNotExist sku-gpu-name: every size, since nodes of classic
        // node pools carry no Karpenter label at all.
        let none = one("karpenter.azure.com/sku-gpu-name", "DoesNotExist", &[]);
        assert_eq!(none.skus(&c).len(), c.len());
        assert!(!none.targets_gpu_nodes(&c));
        // Exists sku-gpu-name targets GPU nodes.
        let any = one("karpenter.azure.com/sku-gpu-name", "Exists", &[]);
        assert!(any.targets_gpu_nodes(&c));
        // NotIn on Karpenter's size name removes nothing (a classic node of
        // that size lacks the label); on the instance type, it removes it.
        let not = one(
            "karpenter.azure.com/sku-name",
            "NotIn",
            &["Standard_NC6s_v3"],
        );
        assert_eq!(not.skus(&c).len(), c.len());
        assert!(!not.targets_gpu_nodes(&c));
        let not = one(
            "node.kubernetes.io/instance-type",
            "NotIn",
            &["Standard_NC6s_v3"],
        );
        assert_eq!(not.skus(&c).len(), c.len() - 1);
    }

    #[test]
    fn sku_family_n_targets_gpus_and_other_families_exclude_them() {
        let c = Catalog::embedded();
        let n = reqs(json!([
            {"key": "karpenter.azure.com/sku-family", "operator": "In", "values": ["N"]},
            {"key": "karpenter.azure.com/sku-gpu-manufacturer", "operator": "In", "values": ["nvidia"]}
        ]));
        assert!(n.targets_gpu_nodes(&c));
        let nvidia = n.skus(&c);
        assert!((nvidia.iter()).all(|s| s.manufacturer == "nvidia" && s.karpenter_gpu));
        // "NC" is a wrong value seen in the wild: it matches nothing.
        for family in ["D", "NC"] {
            let sel = one("karpenter.azure.com/sku-family", "In", &[family]);
            assert!(sel.skus(&c).is_empty(), "{family}");
        }
    }

    #[test]
    fn a_label_some_nodes_lack_never_narrows_by_its_absence() {
        let c = Catalog::embedded();
        // Pinned to an H100 size: an extra term met by a missing Karpenter,
        // accelerator or GFD label leaves it there.
        for (key, op) in [
            ("karpenter.azure.com/sku-gpu-count", "DoesNotExist"),
            ("karpenter.azure.com/sku-family", "DoesNotExist"),
            ("karpenter.azure.com/sku-name", "NotIn"),
            ("karpenter.azure.com/sku-gpu-manufacturer", "DoesNotExist"),
            ("kubernetes.azure.com/accelerator", "DoesNotExist"),
            ("nvidia.com/gpu.product", "NotIn"),
        ] {
            let mut extra = json!({"key": key, "operator": op});
            if op == "NotIn" {
                extra["values"] = json!(["Standard_ND96isr_H100_v5", "NVIDIA-H100-80GB-HBM3"]);
            }
            let pinned = reqs(json!([
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["Standard_ND96isr_H100_v5"]},
                extra
            ]));
            let h100 = names(&pinned, &c);
            assert_eq!(h100, ["Standard_ND96isr_H100_v5"], "{key} {op}");
            assert!(pinned.targets_gpu_nodes(&c), "{key} {op}");
        }
        // Labels every node has still narrow by their absence.
        let arch = one("kubernetes.io/arch", "NotIn", &["amd64"]);
        assert!(arch.skus(&c).iter().all(|s| s.arch() != "amd64"));
    }

    #[test]
    fn a_gpu_series_targets_gpus_and_a_cpu_series_does_not() {
        let c = Catalog::embedded();
        let series = "karpenter.azure.com/sku-series";
        let gpu = one(series, "In", &["NCads_A100_v4", "NVads_A10_v5"]);
        assert!(gpu.targets_gpu_nodes(&c));
        assert!(!gpu.skus(&c).is_empty());
        let skus = gpu.skus(&c);
        assert!((skus.iter()).all(|s| s.series == "NCads_A100_v4" || s.series == "NVads_A10_v5"));
        // One CPU series among the values: a node without a GPU satisfies it.
        let mixed = one(series, "In", &["NCads_A100_v4", "Dpls_v6"]);
        assert!(!mixed.targets_gpu_nodes(&c));
        for op in ["NotIn", "Exists"] {
            let other = one(series, op, &["NCads_A100_v4"]);
            assert!(!other.targets_gpu_nodes(&c), "{op}");
        }
    }

    #[test]
    fn kaito_nodepool_alias_and_arch() {
        let c = Catalog::embedded();
        let kaito = reqs(json!([
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["Standard_ND96asr_A100_v4"]},
            {"key": "karpenter.azure.com/placement-scope", "operator": "In", "values": ["regional"]}
        ]));
        assert_eq!(names(&kaito, &c), ["Standard_ND96asr_v4"]);
        let amd64 = selector(json!({"kubernetes.io/arch": "amd64"}));
        assert!(!names(&amd64, &c).contains(&"Standard_ND128isr_GB300_v6".to_string()));
    }

    #[test]
    fn empty_term_matches_nothing_and_unknown_operator_is_ignored() {
        let c = Catalog::embedded();
        let spec = terms(json!([{}]));
        assert!(NodeSelection::from_pod_spec(&spec).skus(&c).is_empty());
        let odd = NodeSelection::from_requirements(
            &json!([{"key": "karpenter.azure.com/sku-family", "operator": "Near", "values": ["N"]}, "junk", 3]),
        );
        assert_eq!(odd.skus(&c).len(), c.len());
        assert!(!odd.targets_gpu_nodes(&c));
    }

    #[test]
    fn named_sizes_collects_in_values_of_size_keys() {
        let sel = reqs(json!([
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["Standard_NC6s_v3", "Standard_D4s_v5"]},
            {"key": "karpenter.azure.com/sku-name", "operator": "In", "values": ["Standard_NC6s_v3", "Standard_NV32as_v4"]},
            {"key": "karpenter.azure.com/sku-name", "operator": "NotIn", "values": ["Standard_NC24ads_A100_v4"]},
            {"key": "karpenter.azure.com/sku-family", "operator": "In", "values": ["N"]}
        ]));
        let want = ["Standard_NC6s_v3", "Standard_D4s_v5", "Standard_NV32as_v4"];
        assert_eq!(sel.named_sizes(), want);
    }

    #[test]
    fn non_string_node_selector_values_are_read_as_text() {
        let c = Catalog::embedded();
        let sel = selector(json!({"karpenter.azure.com/sku-gpu-count": 8}));
        assert!(sel.skus(&c).iter().all(|s| s.gpu_devices == 8));
        assert!(sel.targets_gpu_nodes(&c));
    }

    #[test]
    fn gpu_product_selects_the_sizes_of_that_gpu() {
        let c = Catalog::embedded();
        let a100 = selector(json!({"nvidia.com/gpu.product": "NVIDIA-A100-80GB-PCIe"}));
        let want = [
            "NC24ads_A100_v4",
            "NC48ads_A100_v4",
            "NC96ads_A100_v4",
            "ND96amsr_A100_v4",
        ]
        .map(|s| format!("Standard_{s}"));
        assert_eq!(names(&a100, &c), want);
        assert!(a100.targets_gpu_nodes(&c));
        let not_t4 = one("nvidia.com/gpu.product", "NotIn", &["Tesla-T4"]);
        // A T4 node without GPU feature discovery has no product label.
        assert_eq!(not_t4.skus(&c).len(), c.len());
        let any = one("nvidia.com/gpu.product", "Exists", &[]);
        assert!(any.skus(&c).iter().all(|s| s.manufacturer == "nvidia"));
    }

    #[test]
    fn gfd_and_legacy_labels_target_gpu_nodes() {
        let c = Catalog::embedded();
        for sel in [
            json!({"nodeSelector": {"accelerator": "nvidia"}}),
            json!({"nodeSelector": {"nvidia.com/gpu.present": "true"}}),
            json!({"nodeSelector": {"kubernetes.azure.com/accelerator": "nvidia"}}),
            terms(
                json!([{"matchExpressions": [{"key": "amd.com/gpu.family", "operator": "Exists"}]}]),
            ),
        ] {
            let targets = NodeSelection::from_pod_spec(&sel).targets_gpu_nodes(&c);
            assert!(targets, "{sel}");
        }
    }
}

#[cfg(test)]
mod size_lookup_tests {
    use super::*;
    use crate::gpu::with_terms as terms;
    use serde_json::json;

    /// The sizes `skus` gives for the selection of `spec`, checked against
    /// those `allows` admits one name at a time.
    fn looked_up_as_by_name(c: &Catalog, spec: &serde_json::Value) -> Vec<String> {
        let sel = NodeSelection::from_pod_spec(spec);
        let looked_up: Vec<String> = sel.skus(c).iter().map(|s| s.name.clone()).collect();
        let by_name: Vec<String> = c
            .skus()
            .iter()
            .filter(|s| sel.allows(s))
            .map(|s| s.name.clone())
            .collect();
        assert_eq!(looked_up, by_name, "{spec}");
        looked_up
    }

    /// `skus` looks sizes up in the catalog once; `allows` compares names
    /// per SKU: both must agree on every spelling a size may take.
    #[test]
    fn sizes_looked_up_once_match_as_names_do() {
        let c = Catalog::embedded();
        let spelt = json!([
            "Standard_NC4as_T4_v3",
            "nc8as_t4_v3",
            " STANDARD_ND96ASR_A100_V4 "
        ]);
        let not_in = json!(["Standard_NC4as_T4_v3", "ND96asr_v4", "not-a-size"]);
        let none = json!(["not-a-size"]);
        for (op, values) in [
            ("In", spelt),
            ("NotIn", not_in),
            ("In", none),
            ("In", json!([])),
        ] {
            for key in [
                "node.kubernetes.io/instance-type",
                "karpenter.azure.com/sku-name",
            ] {
                let spec = terms(json!([
                    {"matchExpressions": [{"key": key, "operator": op, "values": values}]}]));
                looked_up_as_by_name(&c, &spec);
            }
        }
    }

    /// Selections whose sizes are named (placement's pins, a nodeSelector
    /// on the size, several terms) give what judging every SKU gives, in
    /// catalog order without repeats.
    #[test]
    fn named_sizes_give_what_judging_every_sku_gives() {
        let c = Catalog::embedded();
        let size = |values: serde_json::Value| json!({"key": "node.kubernetes.io/instance-type", "operator": "In", "values": values});
        let nvidia = json!({"key": "kubernetes.azure.com/accelerator", "operator": "In", "values": ["nvidia"]});
        let a100 = json!([
            "Standard_NC24ads_A100_v4",
            "standard_nc4as_t4_v3",
            "ND96asr_v4"
        ]);
        let t4 = json!([
            "Standard_NC8as_T4_v3",
            "Standard_NC4as_T4_v3",
            "Standard_NC4as_T4_v3"
        ]);
        let specs = [
            // Placement's pin: two terms naming the same sizes.
            terms(json!([
                {"matchExpressions": [nvidia, size(t4.clone())]},
                {"matchExpressions": [size(t4.clone())]}
            ])),
            // Terms naming different sizes, out of catalog order.
            terms(json!([
                {"matchExpressions": [size(a100.clone())]},
                {"matchExpressions": [nvidia, size(t4.clone())]}
            ])),
            // One term names no size: every SKU is judged.
            terms(json!([
                {"matchExpressions": [size(t4.clone())]},
                {"matchExpressions": [nvidia]}
            ])),
            // A term that matches nothing, beside one that names sizes.
            terms(json!([
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]},
                {"matchExpressions": [size(a100.clone())]}
            ])),
            // No term at all.
            terms(json!([])),
            // The nodeSelector names one size; the terms name others.
            {
                let mut spec = terms(json!([{"matchExpressions": [size(a100.clone())]}]));
                spec["nodeSelector"] =
                    json!({"node.kubernetes.io/instance-type": "Standard_NC24ads_A100_v4"});
                spec
            },
            json!({"nodeSelector": {"karpenter.azure.com/sku-name": "Standard_NC8as_T4_v3"}}),
            // A size named nowhere in the catalog, and NotIn.
            terms(json!([{"matchExpressions": [size(json!(["not-a-size"]))]}])),
            terms(json!([{"matchExpressions": [
                {"key": "node.kubernetes.io/instance-type", "operator": "NotIn", "values": t4}
            ]}])),
        ];
        let mut named = 0;
        for spec in &specs {
            let looked_up = looked_up_as_by_name(&c, spec);
            named += usize::from(!looked_up.is_empty() && looked_up.len() < 5);
        }
        assert!(named >= 4, "the cases name a few sizes: {named}");
    }
}
