//! The Azure GPU SKU catalog: which VM sizes carry GPUs, how many, of what
//! kind, and whether AKS still supports them.
//!
//! The catalog shipped with the binary is `data/azure-gpu-skus.csv`
//! (embedded at build time); a team can replace it with its own file
//! ([`Catalog::from_csv_file`]).
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde_json::{json, Value};

use super::SkuList;

/// The catalog built into the binary.
pub const EMBEDDED_CSV: &str = include_str!("../../data/azure-gpu-skus.csv");

/// Columns a catalog file must have. Other columns are ignored.
const REQUIRED_COLUMNS: &[&str] = &[
    "name",
    "gpu_model",
    "manufacturer",
    "gpus",
    "gpu_memory_gib",
    "vcpus",
    "family",
    "series",
    "retired",
    "retired_on",
    "aks_supported",
    "premium",
];

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
            "family": self.family,
            "series": self.series,
            "retired": self.retired,
            "retiredOn": self.retired_on,
            "aksSupported": self.aks_supported,
            "premium": self.premium,
            "mig": self.mig,
        })
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

/// A bad catalog file. The message names the file, line and column.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("{file}: cannot read: {error}")]
    Io {
        file: String,
        #[source]
        error: std::io::Error,
    },
    #[error("{file}: line {line}: {message}")]
    Line {
        file: String,
        line: u64,
        message: String,
    },
    #[error("{file}: line {line}, column {column} ({field}): {message}")]
    Field {
        file: String,
        line: u64,
        column: usize,
        field: String,
        message: String,
    },
}

/// All known GPU SKUs, looked up by name without regard to case.
#[derive(Clone, Debug)]
pub struct Catalog {
    skus: Vec<Sku>,
    /// Lower-cased name or alias -> index in `skus`.
    index: HashMap<String, usize>,
    /// Name or alias as the file spells it -> index in `skus`: the usual
    /// spelling found without lower-casing it first.
    exact: ExactNames,
    /// The date the rows were last checked against their sources: a
    /// `# as-of: YYYY-MM-DD` comment line before the header.
    as_of: Option<String>,
    /// Every SKU's name, in file order: the `gpu.skus` of a pod whose
    /// node selection allows every SKU, shared by all such pods.
    names: SkuList,
}

impl Default for Catalog {
    fn default() -> Self {
        Self::embedded()
    }
}

impl Catalog {
    /// The catalog shipped in the binary.
    pub fn embedded() -> Catalog {
        match Self::from_csv_str(EMBEDDED_CSV, "data/azure-gpu-skus.csv") {
            Ok(catalog) => catalog,
            // The embedded file is checked by `embedded_catalog_parses`.
            Err(e) => panic!("embedded SKU catalog is invalid: {e}"),
        }
    }

    /// The embedded catalog, parsed once per process.
    pub fn embedded_shared() -> &'static Catalog {
        embedded_static()
    }

    /// [`Catalog::embedded_shared`] as a shared handle, for holders that also
    /// accept a catalog read from a file.
    pub fn embedded_arc() -> std::sync::Arc<Catalog> {
        embedded_static().clone()
    }

    /// Reads a catalog file with the columns of `data/azure-gpu-skus.csv`.
    pub fn from_csv_file(path: &Path) -> Result<Catalog, CatalogError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| CatalogError::Io {
            file: file.clone(),
            error,
        })?;
        Self::from_csv_str(&text, &file)
    }

    /// Parses catalog CSV text; `file` names it in errors.
    pub fn from_csv_str(text: &str, file: &str) -> Result<Catalog, CatalogError> {
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(true)
            .trim(csv::Trim::All)
            .comment(Some(b'#'))
            .from_reader(text.as_bytes());
        let line_err = |line: u64, message: String| CatalogError::Line {
            file: file.to_string(),
            line,
            message,
        };
        let as_of = as_of_line(text).map_err(|(line, message)| line_err(line, message))?;
        let headers = reader
            .headers()
            .map_err(|e| line_err(csv_line(&e).unwrap_or(1), e.to_string()))?
            .clone();
        let columns: HashMap<String, usize> = headers
            .iter()
            .enumerate()
            .map(|(i, h)| (h.to_ascii_lowercase(), i))
            .collect();
        let missing: Vec<&str> = REQUIRED_COLUMNS
            .iter()
            .copied()
            .filter(|c| !columns.contains_key(*c))
            .collect();
        if !missing.is_empty() {
            return Err(line_err(
                1,
                format!("header lacks column(s): {}", missing.join(", ")),
            ));
        }

        let mut catalog = Catalog {
            skus: Vec::new(),
            index: HashMap::new(),
            exact: ExactNames::default(),
            as_of,
            names: SkuList::default(),
        };
        for record in reader.records() {
            let record = record.map_err(|e| line_err(csv_line(&e).unwrap_or(0), e.to_string()))?;
            let line = record.position().map(|p| p.line()).unwrap_or(0);
            let row = Row {
                file,
                line,
                record: &record,
                columns: &columns,
            };
            let sku = row.sku()?;
            for key in std::iter::once(&sku.name).chain(sku.aliases.iter()) {
                let lower = normalize(key);
                if catalog.index.contains_key(&lower) {
                    return Err(row.error("name", format!("{key} is listed twice")));
                }
                catalog.index.insert(lower, catalog.skus.len());
                catalog.exact.insert(key, catalog.skus.len());
            }
            catalog.skus.push(sku);
        }
        catalog.names = catalog
            .skus
            .iter()
            .map(|s| s.name.clone())
            .collect::<Vec<_>>()
            .into();
        Ok(catalog)
    }

    /// The SKU called `name` (case-insensitive; `Standard_` may be left out;
    /// aliases such as KAITO's spelling are accepted).
    pub fn get(&self, name: &str) -> Option<&Sku> {
        Some(&self.skus[self.position_of(name)?])
    }

    /// Where in [`Catalog::skus`] the SKU [`Catalog::get`] finds for
    /// `name` is.
    pub fn position_of(&self, name: &str) -> Option<usize> {
        match self.exact.get(name.trim()) {
            Some(i) => Some(i),
            None => self.index.get(&normalize(name)).copied(),
        }
    }

    /// `azure.sku(name)`: the SKU's map, or null for an unknown name.
    pub fn sku_value(&self, name: &str) -> Value {
        self.get(name).map_or(Value::Null, Sku::to_json)
    }

    /// `azure.isGpuSku(name)`: the name is a GPU SKU of the catalog.
    pub fn is_gpu_sku(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Is `series` (as Karpenter's `karpenter.azure.com/sku-series` label
    /// writes it, e.g. `NCads_A100_v4`) the series of a GPU size of the
    /// catalog? Every size of such a series has GPUs.
    pub fn is_gpu_series(&self, series: &str) -> bool {
        self.skus().iter().any(|s| s.series == series)
    }

    /// When the rows were last checked against their sources
    /// (`YYYY-MM-DD`), if the file says.
    pub fn as_of(&self) -> Option<&str> {
        self.as_of.as_deref()
    }

    /// Every SKU, in file order.
    pub fn skus(&self) -> &[Sku] {
        &self.skus
    }

    /// Every SKU's name, in file order (shared, not copied).
    pub fn names(&self) -> &SkuList {
        &self.names
    }

    /// The names of `skus`, this catalog's SKUs, in catalog order and each
    /// once. A SKU of another catalog is named at its place in `skus`, and
    /// the list is then in the order given.
    pub fn list_of(&self, skus: &[&Sku]) -> SkuList {
        let mut positions = Vec::with_capacity(skus.len());
        for sku in skus {
            match self.position(sku) {
                Some(p) => positions.push(p),
                None => return skus.iter().map(|s| s.name.clone()).collect(),
            }
        }
        positions.sort_unstable();
        positions.dedup();
        positions
            .iter()
            .map(|&p| self.skus[p].name.clone())
            .collect()
    }

    /// Where `sku`, one of this catalog's, is in file order; `None` for a
    /// SKU of another catalog.
    pub fn position(&self, sku: &Sku) -> Option<usize> {
        let at = sku as *const Sku;
        self.skus
            .as_ptr_range()
            .contains(&at)
            .then(|| (at as usize - self.skus.as_ptr() as usize) / std::mem::size_of::<Sku>())
    }

    pub fn len(&self) -> usize {
        self.skus.len()
    }

    pub fn is_empty(&self) -> bool {
        self.skus.is_empty()
    }
}

/// Spellings as the file writes them -> index, found by length and then
/// by content without hashing: the first lookup of nearly every SKU
/// question (names differ mostly at their end: `Standard_NC...`).
#[derive(Clone, Debug, Default)]
struct ExactNames {
    /// Spellings of each length, with their last (up to) eight bytes.
    by_len: Vec<Vec<(u64, Box<str>, usize)>>,
}

impl ExactNames {
    fn insert(&mut self, name: &str, index: usize) {
        if self.by_len.len() <= name.len() {
            self.by_len.resize_with(name.len() + 1, Vec::new);
        }
        let spellings = &mut self.by_len[name.len()];
        match spellings.iter_mut().find(|(_, n, _)| **n == *name) {
            Some(entry) => entry.2 = index,
            None => spellings.push((tail(name), name.into(), index)),
        }
    }

    fn get(&self, name: &str) -> Option<usize> {
        let spellings = self.by_len.get(name.len())?;
        let end = tail(name);
        spellings
            .iter()
            .find(|(t, n, _)| *t == end && **n == *name)
            .map(|(_, _, i)| *i)
    }
}

/// The last (up to) eight bytes of `name` as one number.
fn tail(name: &str) -> u64 {
    let bytes = name.as_bytes();
    let last = &bytes[bytes.len().saturating_sub(8)..];
    let mut word = [0u8; 8];
    word[..last.len()].copy_from_slice(last);
    u64::from_le_bytes(word)
}

/// Lower case, with the `standard_` prefix ensured.
fn normalize(name: &str) -> String {
    let lower = name.trim().to_ascii_lowercase();
    if lower.starts_with("standard_") {
        lower
    } else {
        format!("standard_{lower}")
    }
}

fn strip_standard(name: &str) -> &str {
    name.strip_prefix("Standard_").unwrap_or(name)
}

fn csv_line(e: &csv::Error) -> Option<u64> {
    e.position().map(|p| p.line())
}

/// One data row, with what is needed to name a bad field.
struct Row<'a> {
    file: &'a str,
    line: u64,
    record: &'a csv::StringRecord,
    columns: &'a HashMap<String, usize>,
}

impl Row<'_> {
    fn error(&self, field: &str, message: String) -> CatalogError {
        CatalogError::Field {
            file: self.file.to_string(),
            line: self.line,
            column: self.columns.get(field).map_or(0, |i| i + 1),
            field: field.to_string(),
            message,
        }
    }

    fn text(&self, field: &str) -> &str {
        self.columns
            .get(field)
            .and_then(|&i| self.record.get(i))
            .unwrap_or("")
    }

    fn required(&self, field: &str) -> Result<String, CatalogError> {
        let v = self.text(field);
        if v.is_empty() {
            return Err(self.error(field, "is empty".to_string()));
        }
        Ok(v.to_string())
    }

    fn optional(&self, field: &str) -> Option<String> {
        let v = self.text(field);
        (!v.is_empty()).then(|| v.to_string())
    }

    fn number(&self, field: &str) -> Result<Option<f64>, CatalogError> {
        let v = self.text(field);
        if v.is_empty() {
            return Ok(None);
        }
        match v.parse::<f64>() {
            Ok(n) if n.is_finite() && n >= 0.0 => Ok(Some(n)),
            _ => Err(self.error(field, format!("{v:?} is not a non-negative number"))),
        }
    }

    fn count(&self, field: &str) -> Result<Option<u32>, CatalogError> {
        let v = self.text(field);
        if v.is_empty() {
            return Ok(None);
        }
        v.parse::<u32>()
            .map(Some)
            .map_err(|_| self.error(field, format!("{v:?} is not a whole number")))
    }

    fn flag(&self, field: &str, default: Option<bool>) -> Result<bool, CatalogError> {
        match self.text(field).to_ascii_lowercase().as_str() {
            "true" | "yes" => Ok(true),
            "false" | "no" => Ok(false),
            "" if default.is_some() => Ok(default.unwrap_or_default()),
            other => Err(self.error(field, format!("{other:?} is not true or false"))),
        }
    }

    fn sku(&self) -> Result<Sku, CatalogError> {
        let name = self.required("name")?;
        if !name.to_ascii_lowercase().starts_with("standard_") || name.contains(char::is_whitespace)
        {
            return Err(self.error(
                "name",
                format!("{name:?} is not an Azure VM size name (Standard_...)"),
            ));
        }
        let manufacturer = self.required("manufacturer")?.to_ascii_lowercase();
        if manufacturer != "nvidia" && manufacturer != "amd" {
            return Err(self.error(
                "manufacturer",
                format!("{manufacturer:?} is not nvidia or amd"),
            ));
        }
        let gpus = match self.number("gpus")? {
            Some(g) if g > 0.0 => g,
            _ => return Err(self.error("gpus", "must be a number above 0".to_string())),
        };
        let gpu_devices = match self.count("gpu_devices")? {
            Some(0) => {
                return Err(self.error("gpu_devices", "must be at least 1".to_string()));
            }
            Some(d) => d,
            // A vGPU slice shows as one device; whole GPUs as themselves.
            None => (gpus.floor() as u32).max(1),
        };
        let vcpus = match self.count("vcpus")? {
            Some(v) if v > 0 => v,
            _ => return Err(self.error("vcpus", "must be a whole number above 0".to_string())),
        };
        let retired_on = self.optional("retired_on");
        if let Some(date) = &retired_on {
            if !is_date(date) {
                return Err(
                    self.error("retired_on", format!("{date:?} is not a date (YYYY-MM-DD)"))
                );
            }
        }
        let aliases = self
            .text("aliases")
            .split(';')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(str::to_string)
            .collect();
        Ok(Sku {
            series: self.required("series")?,
            family: self.required("family")?,
            gpu_model: self.required("gpu_model")?,
            gpu_memory_gib: self.number("gpu_memory_gib")?,
            retired: self.flag("retired", None)?,
            aks_supported: self.flag("aks_supported", None)?,
            premium: self.flag("premium", None)?,
            karpenter_gpu: self.flag("karpenter_gpu", Some(true))?,
            mig: self.flag("mig", Some(false))?,
            source: self.text("source").to_string(),
            name,
            aliases,
            manufacturer,
            gpus,
            gpu_devices,
            vcpus,
            retired_on,
        })
    }
}

/// The date of a `# as-of: YYYY-MM-DD` comment among the comment lines
/// that open the file; `Err((line, message))` when it is not a date.
fn as_of_line(text: &str) -> Result<Option<String>, (u64, String)> {
    for (i, line) in text.lines().enumerate() {
        let Some(comment) = line.trim().strip_prefix('#') else {
            break;
        };
        if let Some(date) = comment.trim().strip_prefix("as-of:") {
            let date = date.trim();
            if !is_date(date) {
                return Err((
                    i as u64 + 1,
                    format!("as-of {date:?} is not a date (YYYY-MM-DD)"),
                ));
            }
            return Ok(Some(date.to_string()));
        }
    }
    Ok(None)
}

fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
}

fn embedded_static() -> &'static std::sync::Arc<Catalog> {
    static EMBEDDED: std::sync::OnceLock<std::sync::Arc<Catalog>> = std::sync::OnceLock::new();
    EMBEDDED.get_or_init(|| std::sync::Arc::new(Catalog::embedded()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> Catalog {
        Catalog::embedded()
    }

    #[test]
    fn a_list_names_the_skus_in_catalog_order_each_once() {
        let c = catalog();
        let all: Vec<&Sku> = c.skus().iter().collect();
        let some = [all[7], all[2], all[7], all[4]];
        let list = c.list_of(&some);
        let names: Vec<&str> = list.iter().map(String::as_str).collect();
        let want: Vec<&str> = [2, 4, 7].iter().map(|&i| all[i].name.as_str()).collect();
        assert_eq!(names, want, "catalog order, each once");
        for sku in &all {
            let one = c.list_of(&[sku]);
            assert_eq!((one.len(), one.first()), (1, Some(&sku.name)));
        }
        assert!(c.list_of(&[]).is_empty());
    }

    #[test]
    fn a_list_with_another_catalogs_sku_is_named_as_given() {
        let c = catalog();
        let other = catalog();
        let skus = [&c.skus()[3], &other.skus()[1], &c.skus()[0]];
        let list = c.list_of(&skus);
        let names: Vec<&str> = list.iter().map(String::as_str).collect();
        let want: Vec<&str> = skus.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, want);
    }

    #[test]
    fn catalog_date_from_the_as_of_comment() {
        assert!(Catalog::embedded().as_of().is_some_and(is_date));
        let header = "name,gpu_model,manufacturer,gpus,gpu_memory_gib,vcpus,family,series,retired,retired_on,aks_supported,premium,source";
        let dated = format!("# Azure GPU sizes\n# as-of: 2026-01-31\n{header}\n");
        let c = Catalog::from_csv_str(&dated, "dated.csv").unwrap();
        assert_eq!(c.as_of(), Some("2026-01-31"));
        let c = Catalog::from_csv_str(&format!("{header}\n"), "undated.csv").unwrap();
        assert_eq!(c.as_of(), None);
        let err = Catalog::from_csv_str(&format!("# as-of: last week\n{header}\n"), "bad.csv")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("bad.csv: line 1") && err.contains("not a date"),
            "{err}"
        );
    }

    #[test]
    fn embedded_catalog_parses() {
        let c = Catalog::from_csv_str(EMBEDDED_CSV, "embedded").unwrap();
        assert!(c.len() >= 70, "{} rows", c.len());
        assert_eq!(Catalog::embedded_shared().len(), c.len());
        assert!(std::ptr::eq(
            Catalog::embedded_shared(),
            Catalog::embedded_shared()
        ));
    }

    #[test]
    fn positions_and_shared_names_follow_file_order() {
        let c = catalog();
        for (i, sku) in c.skus().iter().enumerate() {
            assert_eq!(c.position(sku), Some(i));
            assert_eq!(c.names()[i], sku.name);
            // The spelling of the file, and any other, find the same SKU.
            assert!(std::ptr::eq(c.get(&sku.name).unwrap(), sku));
            let shouted = sku.name.to_ascii_uppercase();
            assert!(std::ptr::eq(c.get(&shouted).unwrap(), sku), "{shouted}");
        }
        assert_eq!(c.names().len(), c.len());
        let other = catalog();
        assert_eq!(c.position(&other.skus()[0]), None, "another catalog's");
    }

    #[test]
    fn exact_spellings_are_found_by_length_and_content() {
        let mut names = ExactNames::default();
        // Same length, same last eight bytes; shorter than eight bytes; a
        // spelling inserted again takes the new index.
        for (i, name) in ["xa_T4_v3", "ya_T4_v3", "a", "", "Standard_NC4as_T4_v3"]
            .iter()
            .enumerate()
        {
            names.insert(name, i);
        }
        names.insert("a", 9);
        assert_eq!(names.get("xa_T4_v3"), Some(0));
        assert_eq!(names.get("ya_T4_v3"), Some(1));
        assert_eq!(names.get("za_T4_v3"), None);
        assert_eq!(names.get("a"), Some(9));
        assert_eq!(names.get(""), Some(3));
        assert_eq!(names.get("Standard_NC4as_T4_v3"), Some(4));
        assert_eq!(names.get("standard_NC4as_T4_v3"), None, "exact only");
        assert_eq!(names.get("Standard_NC4as_T4_v3 "), None);
        assert_eq!(names.get("a much longer name than any of them"), None);
    }

    #[test]
    fn position_of_a_name_agrees_with_get() {
        let c = catalog();
        for (i, sku) in c.skus().iter().enumerate() {
            let spellings = std::iter::once(sku.name.clone())
                .chain(sku.aliases.iter().cloned())
                .flat_map(|n| {
                    [
                        format!(" {n}\n"),
                        n.to_ascii_lowercase(),
                        strip_standard(&n).to_string(),
                        n,
                    ]
                });
            for spelling in spellings {
                assert_eq!(c.position_of(&spelling), Some(i), "{spelling:?}");
                assert!(std::ptr::eq(c.get(&spelling).unwrap(), sku), "{spelling:?}");
            }
        }
        for unknown in ["", " ", "Standard_D4s_v5", "kaito-gpu", "Standard_"] {
            assert_eq!(c.position_of(unknown), None, "{unknown:?}");
            assert!(c.get(unknown).is_none(), "{unknown:?}");
        }
    }

    #[test]
    fn lookup_ignores_case_and_standard_prefix() {
        let c = catalog();
        assert_eq!(
            c.get("standard_nc24ads_a100_v4").unwrap().name,
            "Standard_NC24ads_A100_v4"
        );
        assert_eq!(
            c.get("NC24ads_A100_v4").unwrap().name,
            "Standard_NC24ads_A100_v4"
        );
        assert!(c.get("Standard_D4s_v5").is_none());
        assert!(c.get("").is_none());
    }

    #[test]
    fn kaito_spelling_of_nd96asr_resolves_to_azure_name() {
        let c = catalog();
        let sku = c.get("Standard_ND96asr_A100_v4").unwrap();
        assert_eq!(sku.name, "Standard_ND96asr_v4");
        assert_eq!(sku.gpu_model, "A100");
        assert_eq!(sku.gpus, 8.0);
        assert_eq!(sku.gpu_memory_gib, Some(320.0));
    }

    #[test]
    fn ncv3_is_retired_on_2025_09_30() {
        let c = catalog();
        for name in [
            "Standard_NC6s_v3",
            "Standard_NC12s_v3",
            "Standard_NC24rs_v3",
        ] {
            let sku = c.get(name).unwrap();
            assert!(sku.retired, "{name}");
            assert_eq!(sku.retired_on.as_deref(), Some("2025-09-30"));
            assert_eq!(sku.family, "NCv3");
        }
    }

    #[test]
    fn nvv4_is_amd_and_not_supported_on_aks() {
        let c = catalog();
        let sku = c.get("Standard_NV4as_v4").unwrap();
        assert!(!sku.aks_supported);
        assert_eq!(sku.manufacturer, "amd");
        assert_eq!(sku.gpus, 0.125);
    }

    #[test]
    fn fractional_vgpu_sizes_do_not_report_one_gpu() {
        let c = catalog();
        let nv6 = c.get("Standard_NV6ads_A10_v5").unwrap();
        assert!((nv6.gpus - 1.0 / 6.0).abs() < 0.001, "{}", nv6.gpus);
        assert!(nv6.is_fractional());
        // The node still advertises one device.
        assert_eq!(nv6.gpu_devices, 1);
        assert_eq!(c.get("Standard_NV18ads_A10_v5").unwrap().gpus, 0.5);
        assert!(!c.get("Standard_NV36ads_A10_v5").unwrap().is_fractional());
    }

    #[test]
    fn gpu_memory_is_per_vm() {
        let c = catalog();
        assert_eq!(
            c.get("Standard_ND96amsr_A100_v4").unwrap().gpu_memory_gib,
            Some(640.0)
        );
        assert_eq!(
            c.get("Standard_ND128isr_NDR_GB200_v6")
                .unwrap()
                .gpu_memory_gib,
            Some(768.0)
        );
        assert_eq!(
            c.get("Standard_NC48ads_A100_v4").unwrap().gpu_memory_gib,
            Some(160.0)
        );
    }

    #[test]
    fn minimum_aks_size_is_current_and_not_premium() {
        let sku = catalog().get("Standard_NC4as_T4_v3").unwrap().clone();
        assert!(!sku.retired);
        assert!(sku.aks_supported);
        assert!(!sku.premium);
        assert_eq!((sku.vcpus, sku.gpus), (4, 1.0));
    }

    #[test]
    fn mig_marks_the_a100_h100_and_h200_sizes() {
        let c = catalog();
        for name in [
            "Standard_NC24ads_A100_v4",
            "Standard_ND96asr_v4",
            "Standard_NC40ads_H100_v5",
            "Standard_ND96isr_H200_v5",
        ] {
            assert!(c.get(name).unwrap().mig, "{name}");
        }
        for name in [
            "Standard_NC4as_T4_v3",
            "Standard_NV36ads_A10_v5",
            "Standard_ND96isr_MI300X_v5",
        ] {
            assert!(!c.get(name).unwrap().mig, "{name}");
        }
        assert_eq!(c.sku_value("Standard_NC24ads_A100_v4")["mig"], true);
    }

    #[test]
    fn premium_marks_high_end_gpus_only() {
        let c = catalog();
        for name in [
            "Standard_NC24ads_A100_v4",
            "Standard_ND96isr_H100_v5",
            "Standard_ND96isr_H200_v5",
            "Standard_ND128isr_GB300_v6",
            "Standard_ND96isr_MI300X_v5",
        ] {
            assert!(c.get(name).unwrap().premium, "{name}");
        }
        for name in ["Standard_NC4as_T4_v3", "Standard_NV36ads_A10_v5"] {
            assert!(!c.get(name).unwrap().premium, "{name}");
        }
    }

    #[test]
    fn every_row_is_consistent() {
        for sku in catalog().skus() {
            assert!(sku.gpu_devices as f64 >= sku.gpus.floor(), "{}", sku.name);
            if sku.retired {
                assert!(
                    sku.retired_on.is_some(),
                    "{} retired without a date",
                    sku.name
                );
            }
        }
    }

    #[test]
    fn sku_json_matches_the_cel_contract() {
        let v = catalog().sku_value("standard_nv6ads_a10_v5");
        assert_eq!(v["name"], "Standard_NV6ads_A10_v5");
        assert_eq!(v["gpuModel"], "A10");
        assert_eq!(v["manufacturer"], "nvidia");
        assert!(v["gpus"].as_f64().unwrap() < 0.2);
        assert_eq!(v["gpuMemoryGiB"], 4.0);
        assert_eq!(v["vcpus"], 6);
        assert_eq!(v["family"], "NVadsA10_v5");
        assert_eq!(v["series"], "NVads_A10_v5");
        assert_eq!(v["retired"], false);
        assert_eq!(v["retiredOn"], Value::Null);
        assert_eq!(v["aksSupported"], true);
        assert_eq!(v["premium"], false);
        assert_eq!(v["fractional"], true);
        assert_eq!(catalog().sku_value("Standard_D4s_v5"), Value::Null);
        assert!(catalog().is_gpu_sku("Standard_NC6s_v3"));
        assert!(!catalog().is_gpu_sku("Standard_D4s_v5"));
    }

    #[test]
    fn node_labels_follow_karpenter_and_aks() {
        let c = catalog();
        let a100 = c.get("Standard_NC24ads_A100_v4").unwrap().node_labels();
        assert_eq!(a100[labels::SKU_FAMILY], "N");
        assert_eq!(a100[labels::SKU_GPU_NAME], "A100");
        assert_eq!(a100[labels::SKU_GPU_COUNT], "1");
        assert_eq!(a100[labels::SKU_GPU_MANUFACTURER], "nvidia");
        assert_eq!(a100[labels::ACCELERATOR], "nvidia");
        assert_eq!(a100[labels::INSTANCE_TYPE], "Standard_NC24ads_A100_v4");
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
        let has = |size: &str, product: &str| c.get(size).unwrap().has_gpu_product(product);
        assert!(has("Standard_NC24ads_A100_v4", "NVIDIA-A100-80GB-PCIe"));
        assert!(has(
            "Standard_NC24ads_A100_v4",
            "NVIDIA-A100-80GB-PCIe-SHARED"
        ));
        assert!(has("Standard_ND96asr_v4", "NVIDIA-A100-SXM4-40GB"));
        assert!(!has("Standard_ND96asr_v4", "NVIDIA-A100-80GB-PCIe"));
        assert!(has("Standard_NC4as_T4_v3", "Tesla-T4"));
        // A10 is not A100, and the other way round.
        assert!(!has("Standard_NV36ads_A10_v5", "NVIDIA-A100-80GB-PCIe"));
        assert!(!has("Standard_NC24ads_A100_v4", "NVIDIA-A10"));
        assert!(has("Standard_NV36ads_A10_v5", "NVIDIA-A10"));
        assert!(has("Standard_NC40ads_H100_v5", "NVIDIA-H100-NVL"));
        assert!(!has("Standard_NC40ads_H100_v5", "NVIDIA-H100-80GB-HBM3"));
        assert!(has("Standard_ND96isr_H100_v5", "NVIDIA-H100-80GB-HBM3"));
        assert!(has("Standard_NC6s_v3", "Tesla-V100-PCIE-16GB"));
        assert!(has(
            "Standard_NC144lds_xl_RTXPRO6000BSE_v6",
            "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"
        ));
        assert!(!has("Standard_ND96isr_MI300X_v5", "MI300X"));
        assert_eq!(
            SkuLabel::of(labels::GPU_PRODUCT),
            Some(SkuLabel::GpuProduct)
        );
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
                assert_eq!(
                    sku.label(k).as_deref(),
                    Some(v.as_str()),
                    "{} {k}",
                    sku.name
                );
            }
            assert_eq!(sku.label("topology.kubernetes.io/zone"), None);
        }
        let amd = c.get("Standard_ND96isr_MI300X_v5").unwrap();
        assert_eq!(amd.label(labels::ACCELERATOR), None);
        assert_eq!(
            amd.label(labels::SKU_GPU_MANUFACTURER).as_deref(),
            Some("amd")
        );
        assert_eq!(amd.label(labels::SKU_GPU_COUNT).as_deref(), Some("8"));
    }

    const HEADER: &str = "name,gpu_model,manufacturer,gpus,gpu_memory_gib,vcpus,family,series,retired,retired_on,aks_supported,premium\n";

    #[test]
    fn bad_number_names_line_and_column() {
        let text = format!(
            "{HEADER}Standard_NC4as_T4_v3,T4,nvidia,1,16,4,NCasT4_v3,NCas_T4_v3,false,,true,false\nStandard_X,T4,nvidia,one,16,4,F,S,false,,true,false\n"
        );
        let err = Catalog::from_csv_str(&text, "skus.csv")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "skus.csv: line 3, column 4 (gpus): \"one\" is not a non-negative number"
        );
    }

    #[test]
    fn missing_column_is_named() {
        let err = Catalog::from_csv_str("name,gpus\nStandard_X,1\n", "skus.csv")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("skus.csv: line 1: header lacks column(s): gpu_model"),
            "{err}"
        );
    }

    #[test]
    fn bad_flag_date_and_duplicate_are_errors() {
        let row = |r: &str, d: &str| {
            format!("{HEADER}Standard_A,T4,nvidia,1,16,4,F,S,{r},{d},true,false\n")
        };
        let err = Catalog::from_csv_str(&row("maybe", ""), "f")
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2, column 9 (retired)"), "{err}");
        let err = Catalog::from_csv_str(&row("true", "30/09/2025"), "f")
            .unwrap_err()
            .to_string();
        assert!(err.contains("column 10 (retired_on)"), "{err}");
        let dup = format!(
            "{HEADER}Standard_A,T4,nvidia,1,16,4,F,S,false,,true,false\nstandard_a,T4,nvidia,1,16,4,F,S,false,,true,false\n"
        );
        let err = Catalog::from_csv_str(&dup, "f").unwrap_err().to_string();
        assert!(
            err.contains("line 3, column 1 (name): standard_a is listed twice"),
            "{err}"
        );
    }

    #[test]
    fn ragged_row_is_an_error_not_a_panic() {
        let text = format!("{HEADER}Standard_A,T4\n");
        let err = Catalog::from_csv_str(&text, "f").unwrap_err().to_string();
        assert!(err.starts_with("f: line 2:"), "{err}");
    }

    #[test]
    fn file_override_reads_from_disk_and_reports_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("skus.csv");
        std::fs::write(
            &path,
            format!(
                "{HEADER}Standard_Custom_GPU_v1,L4,nvidia,1,24,8,NL4,NL4_v1,false,,true,false\n"
            ),
        )
        .unwrap();
        let c = Catalog::from_csv_file(&path).unwrap();
        assert_eq!(c.len(), 1);
        assert!(c.is_gpu_sku("standard_custom_gpu_v1"));
        let err = Catalog::from_csv_file(&dir.path().join("nope.csv")).unwrap_err();
        assert!(err.to_string().contains("nope.csv: cannot read"), "{err}");
    }
}
