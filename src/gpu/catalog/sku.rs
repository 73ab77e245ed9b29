//! One Azure GPU VM size: its facts as the catalog file gives them, the
//! node labels a node of the size carries, and the names it answers to.
use serde_json::{json, Value};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// One Azure GPU VM size.
#[derive(Clone, Debug, PartialEq)]
pub struct Sku {
    /// ARM name, e.g. `Standard_NC24ads_A100_v4`.
    pub name: String,
    /// Other spellings seen in the wild (KAITO's `Standard_ND96asr_A100_v4`).
    pub aliases: Vec<String>,
    /// Short GPU model: `T4`, `A100`, `H100`, `MI300X`, ...
    pub gpu_model: String,
    /// `nvidia` or `amd`.
    pub manufacturer: String,
    /// Physical GPUs per VM; fractional for vGPU slices (1/6 A10 = 0.1667).
    pub gpus: f64,
    /// GPU devices a node of this size advertises (`nvidia.com/gpu`
    /// capacity, ARM "GPUs"): 1 for a vGPU slice.
    pub gpu_devices: u32,
    /// Total GPU memory of the VM in GiB, when known.
    pub gpu_memory_gib: Option<f64>,
    pub vcpus: u32,
    /// Memory of the VM in GiB as Azure's size pages give it, when known.
    pub memory_gib: Option<f64>,
    /// What a node of the size leaves for pods: `vcpus` and `memory_gib`
    /// less AKS's node reserve, worked out when the row is read.
    pub room: super::Allocatable,
    /// Azure size family as the docs name it (`NCv3`, `NC_A100_v4`).
    pub family: String,
    /// The name without `Standard_` and the vCPU count (`NCads_A100_v4`),
    /// as in Karpenter's `karpenter.azure.com/sku-series` label.
    pub series: String,
    pub retired: bool,
    /// Retirement date (`YYYY-MM-DD`), past or announced.
    pub retired_on: Option<String>,
    /// False for sizes AKS does not support for GPU node pools (NVv4).
    pub aks_supported: bool,
    /// High-end GPUs (A100, H100, H200, GB200/GB300, MI300X).
    pub premium: bool,
    /// Listed in Karpenter's supported-GPU table, so Karpenter labels its
    /// nodes with the GPU count and manufacturer.
    pub karpenter_gpu: bool,
    /// AKS can partition its GPUs with Multi-Instance GPU (an agent pool's
    /// `gpuInstanceProfile`): A100, H100 and H200 sizes.
    pub mig: bool,
    /// The MIG profiles of its GPU (`data/mig-profiles.csv`), for a size
    /// whose GPUs support MIG and are in that table; `None` otherwise.
    pub mig_gpu: Option<std::sync::Arc<super::mig::MigGpu>>,
    /// Where the row's facts come from.
    pub source: String,
}

impl Sku {
    /// Less than one physical GPU (a vGPU slice).
    pub fn is_fractional(&self) -> bool {
        self.gpus < 1.0
    }

    /// The accelerator token of the size name, as Karpenter's
    /// `karpenter.azure.com/sku-gpu-name` label carries it (`A100` for
    /// `Standard_NC24ads_A100_v4`); `None` when the name has none
    /// (`Standard_NC6s_v3`).
    pub fn gpu_name_label(&self) -> Option<&str> {
        let bare = strip_standard(&self.name);
        let tokens: Vec<&str> = bare.split('_').collect();
        if tokens.len() < 3 {
            return None;
        }
        tokens[1..tokens.len() - 1]
            .iter()
            .rev()
            .find(|t| !t.eq_ignore_ascii_case("xl") && !t.eq_ignore_ascii_case("ndr"))
            .copied()
    }

    /// CPU architecture of the host: Grace (GB200/GB300) hosts are arm64.
    pub fn arch(&self) -> &'static str {
        if self.gpu_model.starts_with("GB") {
            "arm64"
        } else {
            "amd64"
        }
    }

    /// The value of one SKU-describing label ([`labels::SKU_KEYS`]) on a node
    /// of this size; `None` when such a node lacks the label (or the key
    /// does not describe the size).
    pub fn label(&self, key: &str) -> Option<Cow<'_, str>> {
        self.label_of(SkuLabel::of(key)?)
    }

    /// [`Sku::label`] for a key already classified.
    pub fn label_of(&self, key: SkuLabel) -> Option<Cow<'_, str>> {
        Some(match key {
            SkuLabel::Size => Cow::Borrowed(self.name.as_str()),
            SkuLabel::Family => Cow::Borrowed("N"),
            SkuLabel::Series => Cow::Borrowed(self.series.as_str()),
            SkuLabel::Cpu => Cow::Owned(self.vcpus.to_string()),
            SkuLabel::Arch => Cow::Borrowed(self.arch()),
            SkuLabel::GpuName => Cow::Borrowed(self.gpu_name_label()?),
            // Karpenter counts GPUs only for sizes in its GPU table.
            SkuLabel::GpuCount if self.karpenter_gpu => Cow::Owned(self.gpu_devices.to_string()),
            SkuLabel::GpuCount => Cow::Borrowed("0"),
            SkuLabel::GpuManufacturer if self.karpenter_gpu => {
                Cow::Borrowed(self.manufacturer.as_str())
            }
            SkuLabel::Accelerator if self.manufacturer == "nvidia" => Cow::Borrowed("nvidia"),
            SkuLabel::GpuManufacturer | SkuLabel::Accelerator => return None,
            // A product name is matched, not stated: see `has_gpu_product`.
            SkuLabel::GpuProduct => return None,
        })
    }

    /// Does a node of this size carry the NVIDIA GPU product `product` (the
    /// value of GPU feature discovery's `nvidia.com/gpu.product`, e.g.
    /// `NVIDIA-A100-80GB-PCIe`, `Tesla-T4`, `NVIDIA-H100-NVL-SHARED`)? The
    /// model must match; a memory token (`80GB`) must match the memory of one
    /// GPU of the size.
    pub fn has_gpu_product(&self, product: &str) -> bool {
        if self.manufacturer != "nvidia" {
            return false;
        }
        let upper = product.trim().to_ascii_uppercase();
        let upper = upper.strip_suffix("-SHARED").unwrap_or(&upper);
        let mut tokens: Vec<&str> = upper
            .split(['-', '_', ' '])
            .filter(|t| !t.is_empty())
            .collect();
        while tokens
            .first()
            .is_some_and(|t| matches!(*t, "NVIDIA" | "TESLA"))
        {
            tokens.remove(0);
        }
        let model = self.gpu_model.to_ascii_uppercase();
        let model: Vec<&str> = model.split_whitespace().collect();
        if model.is_empty() || !tokens.starts_with(&model) {
            return false;
        }
        let per_gpu = self
            .gpu_memory_gib
            .filter(|_| self.gpus > 0.0)
            .map(|m| m / self.gpus);
        tokens[model.len()..].iter().all(|t| {
            let gb = t.strip_suffix("GB").and_then(|n| n.parse::<f64>().ok());
            match (gb, per_gpu) {
                (Some(gb), Some(mem)) => (mem - gb).abs() <= gb * 0.1,
                _ => true,
            }
        })
    }

    /// The SKU-describing labels a node of this size carries on AKS (node
    /// pools and Karpenter). Keys absent here are absent on the node.
    pub fn node_labels(&self) -> BTreeMap<&'static str, String> {
        labels::SKU_KEYS
            .iter()
            .filter_map(|k| Some((*k, self.label(k)?.into_owned())))
            .collect()
    }

    /// Does `name` name this size? Case-insensitive, `Standard_` optional,
    /// aliases accepted.
    pub fn is_named(&self, name: &str) -> bool {
        fn bare(n: &str) -> &str {
            let n = n.trim();
            match (n.get(..9), n.get(9..)) {
                (Some(p), Some(rest)) if p.eq_ignore_ascii_case("standard_") => rest,
                _ => n,
            }
        }
        let wanted = bare(name);
        std::iter::once(&self.name)
            .chain(self.aliases.iter())
            .any(|n| bare(n).eq_ignore_ascii_case(wanted))
    }

    /// The `azure.sku(name)` map of the CEL extensions.
    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "gpuModel": self.gpu_model,
            "manufacturer": self.manufacturer,
            "gpus": self.gpus,
            "gpuDevices": self.gpu_devices,
            "fractional": self.is_fractional(),
            "gpuMemoryGiB": self.gpu_memory_gib,
            "vcpus": self.vcpus,
            "memoryGiB": self.memory_gib,
            "family": self.family,
            "series": self.series,
            "retired": self.retired,
            "retiredOn": self.retired_on,
            "aksSupported": self.aks_supported,
            "premium": self.premium,
            "mig": self.mig,
            "migProfiles": self.mig_profiles_value(),
        })
    }

    /// `migProfiles` of `azure.sku(name)`: each MIG profile one GPU of the
    /// size offers and how many instances of it one GPU holds (empty when
    /// the size has no MIG, or its GPU is not in the MIG table).
    pub fn mig_profiles_value(&self) -> Value {
        let profiles: serde_json::Map<String, Value> = self
            .mig_gpu
            .iter()
            .flat_map(|g| g.profiles.iter())
            .map(|(p, n)| (p.clone(), json!(n)))
            .collect();
        Value::Object(profiles)
    }
}

/// What a SKU-describing label key says about the size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkuLabel {
    /// `node.kubernetes.io/instance-type`, its `beta.` form, `sku-name`.
    Size,
    Family,
    Series,
    Cpu,
    Arch,
    GpuName,
    GpuCount,
    GpuManufacturer,
    Accelerator,
    /// GPU feature discovery's `nvidia.com/gpu.product` (NVIDIA nodes with
    /// the device plugin's GFD or the GPU Operator).
    GpuProduct,
}

impl SkuLabel {
    /// Classifies a node label key; `None` for keys that do not describe
    /// the size (zone, agent pool, team labels).
    pub fn of(key: &str) -> Option<SkuLabel> {
        Some(match key {
            labels::INSTANCE_TYPE | labels::INSTANCE_TYPE_BETA | labels::SKU_NAME => SkuLabel::Size,
            labels::SKU_FAMILY => SkuLabel::Family,
            labels::SKU_SERIES => SkuLabel::Series,
            labels::SKU_CPU | labels::SKU_CPU_ALIAS => SkuLabel::Cpu,
            labels::ARCH => SkuLabel::Arch,
            labels::SKU_GPU_NAME => SkuLabel::GpuName,
            labels::SKU_GPU_COUNT => SkuLabel::GpuCount,
            labels::SKU_GPU_MANUFACTURER => SkuLabel::GpuManufacturer,
            labels::ACCELERATOR => SkuLabel::Accelerator,
            labels::GPU_PRODUCT => SkuLabel::GpuProduct,
            _ => return None,
        })
    }
}

/// Node label keys that describe a VM size.
pub mod labels {
    pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
    pub const INSTANCE_TYPE_BETA: &str = "beta.kubernetes.io/instance-type";
    pub const SKU_NAME: &str = "karpenter.azure.com/sku-name";
    pub const SKU_FAMILY: &str = "karpenter.azure.com/sku-family";
    pub const SKU_SERIES: &str = "karpenter.azure.com/sku-series";
    pub const SKU_CPU: &str = "karpenter.azure.com/sku-cpu";
    pub const SKU_CPU_ALIAS: &str = "kubernetes.azure.com/sku-cpu";
    pub const SKU_GPU_NAME: &str = "karpenter.azure.com/sku-gpu-name";
    pub const SKU_GPU_COUNT: &str = "karpenter.azure.com/sku-gpu-count";
    pub const SKU_GPU_MANUFACTURER: &str = "karpenter.azure.com/sku-gpu-manufacturer";
    pub const ACCELERATOR: &str = "kubernetes.azure.com/accelerator";
    pub const ARCH: &str = "kubernetes.io/arch";
    pub const GPU_PRODUCT: &str = "nvidia.com/gpu.product";

    /// Every key [`super::Sku::node_labels`] decides: a requirement on one
    /// of these is judged per SKU; any other key says nothing about the SKU.
    pub const SKU_KEYS: &[&str] = &[
        INSTANCE_TYPE,
        INSTANCE_TYPE_BETA,
        SKU_NAME,
        SKU_FAMILY,
        SKU_SERIES,
        SKU_CPU,
        SKU_CPU_ALIAS,
        SKU_GPU_NAME,
        SKU_GPU_COUNT,
        SKU_GPU_MANUFACTURER,
        ACCELERATOR,
        ARCH,
    ];
}

pub(super) fn strip_standard(name: &str) -> &str {
    name.strip_prefix("Standard_").unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::super::Catalog;
    use super::*;
    use serde_json::json;

    fn catalog() -> Catalog {
        Catalog::embedded()
    }

    #[test]
    fn sku_json_matches_the_cel_contract() {
        let v = catalog().sku_value("standard_nv6ads_a10_v5");
        let want = json!({"name": "Standard_NV6ads_A10_v5", "gpuModel": "A10",
            "manufacturer": "nvidia", "gpuMemoryGiB": 4.0, "vcpus": 6, "memoryGiB": 55.0,
            "family": "NVadsA10_v5", "series": "NVads_A10_v5", "retired": false, "retiredOn": null,
            "aksSupported": true, "premium": false, "fractional": true});
        crate::gpu::assert_fields(&v, want);
        assert!(v["gpus"].as_f64().unwrap() < 0.2);
        assert_eq!(catalog().sku_value("Standard_D4s_v5"), Value::Null);
        assert!(catalog().is_gpu_sku("Standard_NC6s_v3"));
        assert!(!catalog().is_gpu_sku("Standard_D4s_v5"));
    }

    #[test]
    fn node_labels_follow_karpenter_and_aks() {
        let c = catalog();
        let a100 = c.get("Standard_NC24ads_A100_v4").unwrap().node_labels();
        for (label, value) in [
            (labels::SKU_FAMILY, "N"),
            (labels::SKU_GPU_NAME, "A100"),
            (labels::SKU_GPU_COUNT, "1"),
            (labels::SKU_GPU_MANUFACTURER, "nvidia"),
            (labels::ACCELERATOR, "nvidia"),
            (labels::INSTANCE_TYPE, "Standard_NC24ads_A100_v4"),
        ] {
            assert_eq!(a100[label], value, "{label}");
        }
        // No accelerator token in the name: no sku-gpu-name label.
        let v100 = c.get("Standard_NC6s_v3").unwrap().node_labels();
        assert!(!v100.contains_key(labels::SKU_GPU_NAME));
        // Not in Karpenter's GPU table: count "0", no manufacturer.
        let ncc = c.get("Standard_NCC40ads_H100_v5").unwrap().node_labels();
        assert_eq!(ncc[labels::SKU_GPU_COUNT], "0");
        assert!(!ncc.contains_key(labels::SKU_GPU_MANUFACTURER));
        let gb = c.get("Standard_ND128isr_NDR_GB200_v6").unwrap();
        assert_eq!(gb.gpu_name_label(), Some("GB200"));
        assert_eq!(gb.node_labels()[labels::ARCH], "arm64");
        let rtx = c.get("Standard_NC24lds_xl_RTXPRO6000BSE_v6").unwrap();
        assert_eq!(rtx.gpu_name_label(), Some("RTXPRO6000BSE"));
    }

    #[test]
    fn gpu_product_names_the_model_and_memory_of_one_gpu() {
        let c = catalog();
        // Sizes without `Standard_`, each with the products it has (+) or
        // has not (-). A10 is not A100, and the other way round.
        let cases = [
            "NC24ads_A100_v4 +NVIDIA-A100-80GB-PCIe +NVIDIA-A100-80GB-PCIe-SHARED -NVIDIA-A10",
            "ND96asr_v4 +NVIDIA-A100-SXM4-40GB -NVIDIA-A100-80GB-PCIe",
            "NC4as_T4_v3 +Tesla-T4",
            "NV36ads_A10_v5 -NVIDIA-A100-80GB-PCIe +NVIDIA-A10",
            "NC40ads_H100_v5 +NVIDIA-H100-NVL -NVIDIA-H100-80GB-HBM3",
            "ND96isr_H100_v5 +NVIDIA-H100-80GB-HBM3",
            "NC6s_v3 +Tesla-V100-PCIE-16GB",
            "NC144lds_xl_RTXPRO6000BSE_v6 +NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
            "ND96isr_MI300X_v5 -MI300X",
        ];
        for case in cases {
            let mut words = case.split(' ');
            let sku = c.get(words.next().unwrap()).unwrap();
            for product in words {
                let (has, product) = product.split_at(1);
                let name = &sku.name;
                assert_eq!(sku.has_gpu_product(product), has == "+", "{name} {product}");
            }
        }
        let product = SkuLabel::of(labels::GPU_PRODUCT);
        assert_eq!(product, Some(SkuLabel::GpuProduct));
    }

    #[test]
    fn is_named_accepts_case_prefix_and_alias() {
        let c = catalog();
        let nd = c.get("Standard_ND96asr_v4").unwrap();
        assert!(nd.is_named("standard_nd96asr_v4"));
        assert!(nd.is_named("ND96asr_v4"));
        assert!(nd.is_named(" Standard_ND96asr_A100_v4 "));
        assert!(!nd.is_named("Standard_ND96amsr_A100_v4"));
        assert!(!nd.is_named(""));
    }

    #[test]
    fn label_values_match_node_labels() {
        let c = catalog();
        for sku in c.skus() {
            for (k, v) in sku.node_labels() {
                let name = &sku.name;
                assert_eq!(sku.label(k).as_deref(), Some(v.as_str()), "{name} {k}");
            }
            assert_eq!(sku.label("topology.kubernetes.io/zone"), None);
        }
        let amd = c.get("Standard_ND96isr_MI300X_v5").unwrap();
        assert_eq!(amd.label(labels::ACCELERATOR), None);
        let manufacturer = amd.label(labels::SKU_GPU_MANUFACTURER);
        assert_eq!(manufacturer.as_deref(), Some("amd"));
        assert_eq!(amd.label(labels::SKU_GPU_COUNT).as_deref(), Some("8"));
    }
}
