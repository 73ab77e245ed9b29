//! The Azure GPU SKU catalog: which VM sizes carry GPUs, how many, of what
//! kind, and whether AKS still supports them. One size is a [`Sku`]
//! (`sku`: its facts and the node labels it implies); the catalog file is
//! read by `file`; here the sizes are held in file order and looked up by
//! name.
//!
//! The catalog shipped with the binary is `data/azure-gpu-skus.csv`
//! (embedded at build time); a team can replace it with its own file
//! ([`Catalog::from_csv_file`]).
mod file;
pub mod mig;
mod room;
#[cfg(test)]
mod shipped_rows;
mod sku;

pub use file::CatalogError;
pub use mig::{MigGpu, MigTable};
pub use room::Allocatable;
pub use sku::{labels, Sku, SkuLabel};

use super::SkuList;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

/// The catalog built into the binary.
pub const EMBEDDED_CSV: &str = include_str!("../../../data/azure-gpu-skus.csv");

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
        let (mut skus, as_of) = file::read(text, file)?;
        // Sizes whose GPUs support MIG take their GPU's profiles.
        for sku in &mut skus {
            sku.mig_gpu = MigTable::embedded().gpu_of(sku);
        }
        let mut index = HashMap::new();
        let mut exact = ExactNames::default();
        for (i, sku) in skus.iter().enumerate() {
            for key in std::iter::once(&sku.name).chain(&sku.aliases) {
                index.insert(normalize(key), i);
                exact.insert(key, i);
            }
        }
        let names = skus.iter().map(|s| s.name.clone()).collect();
        Ok(Catalog {
            skus,
            index,
            exact,
            as_of,
            names,
        })
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

fn embedded_static() -> &'static std::sync::Arc<Catalog> {
    static EMBEDDED: std::sync::OnceLock<std::sync::Arc<Catalog>> = std::sync::OnceLock::new();
    EMBEDDED.get_or_init(|| std::sync::Arc::new(Catalog::embedded()))
}

#[cfg(test)]
mod tests {
    use super::sku::strip_standard;
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
        for spelt in ["standard_nc24ads_a100_v4", "NC24ads_A100_v4"] {
            assert_eq!(c.get(spelt).unwrap().name, "Standard_NC24ads_A100_v4");
        }
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
}
