//! Multi-Instance GPU profiles per GPU: which profiles (`1g.10gb`,
//! `3g.40gb`...) one GPU of a model offers, and how many instances of each
//! fit one GPU. The table shipped with the binary is
//! `data/mig-profiles.csv` (sources per row); a catalog size whose GPUs
//! support MIG takes the row of its GPU ([`MigTable::gpu_of`]).
use super::Sku;
use std::sync::{Arc, OnceLock};

/// The MIG table built into the binary.
pub const EMBEDDED_MIG_CSV: &str = include_str!("../../../data/mig-profiles.csv");

/// The MIG profiles of one GPU.
#[derive(Clone, Debug, PartialEq)]
pub struct MigGpu {
    /// Short GPU model, as the catalog's `gpu_model` (`A100`).
    pub model: String,
    /// Memory of one GPU in GiB (`80`).
    pub memory_gib: f64,
    /// Each profile and the instances of it one GPU holds, in file order.
    pub profiles: Vec<(String, u32)>,
    pub source: String,
}

impl MigGpu {
    /// How many instances of `profile` (`1g.10gb`, `1g.10gb+me`; the
    /// media-extension suffix may also be written `.me` or `-me`, as
    /// resource names cannot hold `+`) one GPU holds; `None` when the GPU
    /// does not offer it.
    pub fn per_gpu(&self, profile: &str) -> Option<u32> {
        let wanted = media_spelling(profile);
        self.profiles
            .iter()
            .find(|(p, _)| p.eq_ignore_ascii_case(&wanted))
            .map(|(_, n)| *n)
    }

    /// `A100 80GB`.
    pub fn label(&self) -> String {
        format!("{} {}GB", self.model, self.memory_gib)
    }
}

/// `1g.10gb.me` and `1g.10gb-me` as the table writes them: `1g.10gb+me`.
fn media_spelling(profile: &str) -> String {
    for suffix in [".me", "-me"] {
        if let Some(base) = profile.strip_suffix(suffix) {
            return format!("{base}+me");
        }
    }
    profile.to_string()
}

/// Every GPU of the MIG table.
#[derive(Clone, Debug, Default)]
pub struct MigTable {
    gpus: Vec<Arc<MigGpu>>,
}

impl MigTable {
    /// The table shipped in the binary, parsed once per process.
    pub fn embedded() -> &'static MigTable {
        static TABLE: OnceLock<MigTable> = OnceLock::new();
        TABLE.get_or_init(|| match MigTable::from_csv_str(EMBEDDED_MIG_CSV) {
            Ok(table) => table,
            // The embedded file is checked by `embedded_table_parses`.
            Err(e) => panic!("embedded MIG table is invalid: {e}"),
        })
    }

    /// Reads MIG table CSV text (columns `gpu_model`, `gpu_memory_gib`,
    /// `profiles` as `profile=count;...`, `source`).
    pub fn from_csv_str(text: &str) -> Result<MigTable, String> {
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(true)
            .trim(csv::Trim::All)
            .comment(Some(b'#'))
            .from_reader(text.as_bytes());
        let headers = reader.headers().map_err(|e| e.to_string())?.clone();
        let column = |name: &str| {
            headers
                .iter()
                .position(|h| h == name)
                .ok_or_else(|| format!("header lacks column {name}"))
        };
        let (model, memory, profiles, source) = (
            column("gpu_model")?,
            column("gpu_memory_gib")?,
            column("profiles")?,
            column("source")?,
        );
        let mut gpus = Vec::new();
        for record in reader.records() {
            let record = record.map_err(|e| e.to_string())?;
            let line = record.position().map_or(0, |p| p.line());
            let field = |i: usize| record.get(i).unwrap_or("");
            let memory_gib = field(memory)
                .parse::<f64>()
                .ok()
                .filter(|m| m.is_finite() && *m > 0.0)
                .ok_or_else(|| format!("line {line}: gpu_memory_gib is not a number above 0"))?;
            let mut list = Vec::new();
            for entry in field(profiles).split(';').map(str::trim) {
                let parsed = entry
                    .split_once('=')
                    .and_then(|(p, n)| Some((p.trim().to_string(), n.trim().parse::<u32>().ok()?)))
                    .filter(|(p, n)| !p.is_empty() && *n > 0);
                match parsed {
                    Some(profile) => list.push(profile),
                    None => return Err(format!("line {line}: {entry:?} is not profile=count")),
                }
            }
            gpus.push(Arc::new(MigGpu {
                model: field(model).to_string(),
                memory_gib,
                profiles: list,
                source: field(source).to_string(),
            }));
        }
        Ok(MigTable { gpus })
    }

    /// The GPU of `sku` in this table, for a size whose GPUs support MIG:
    /// the same model, with memory per GPU within a tenth of the row's.
    pub fn gpu_of(&self, sku: &Sku) -> Option<Arc<MigGpu>> {
        if !sku.mig || sku.gpus < 1.0 {
            return None;
        }
        let per_gpu = sku.gpu_memory_gib? / sku.gpus;
        self.gpus
            .iter()
            .find(|g| {
                g.model.eq_ignore_ascii_case(&sku.gpu_model)
                    && (per_gpu - g.memory_gib).abs() <= g.memory_gib * 0.1
            })
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::super::Catalog;
    use super::*;

    #[test]
    fn embedded_table_parses() {
        let t = MigTable::from_csv_str(EMBEDDED_MIG_CSV).unwrap();
        assert_eq!(t.gpus.len(), 5);
        assert!(t.gpus.iter().all(|g| !g.source.is_empty()));
    }

    #[test]
    fn every_mig_size_of_the_catalog_has_its_gpu() {
        let c = Catalog::embedded();
        for sku in c.skus().iter().filter(|s| s.mig) {
            assert!(sku.mig_gpu.is_some(), "{}", sku.name);
        }
        let per = |size: &str, profile: &str| {
            c.get(size)
                .and_then(|s| s.mig_gpu.as_ref())
                .and_then(|g| g.per_gpu(profile))
        };
        // A100 40GB, A100 80GB, H100 80GB, H100 NVL 94GB, H200 141GB.
        assert_eq!(per("Standard_ND96asr_v4", "1g.5gb"), Some(7));
        assert_eq!(per("Standard_ND96asr_v4", "1g.10gb"), Some(4));
        assert_eq!(per("Standard_NC24ads_A100_v4", "1g.10gb"), Some(7));
        assert_eq!(per("Standard_NC24ads_A100_v4", "1g.5gb"), None);
        assert_eq!(per("Standard_ND96amsr_A100_v4", "3g.40gb"), Some(2));
        assert_eq!(per("Standard_ND96isr_H100_v5", "1g.20gb"), Some(4));
        assert_eq!(per("Standard_ND96isr_H100_v5", "1g.5gb"), None);
        assert_eq!(per("Standard_NC40ads_H100_v5", "2g.24gb"), Some(3));
        assert_eq!(per("Standard_NC40ads_H100_v5", "1g.10gb"), None);
        assert_eq!(per("Standard_NCC40ads_H100_v5", "7g.94gb"), Some(1));
        assert_eq!(per("Standard_ND96isr_H200_v5", "1g.18gb"), Some(7));
        assert_eq!(per("Standard_ND96isr_H200_v5", "1g.35gb"), Some(4));
        // Media extensions, however the suffix is spelled.
        for spelling in ["1g.10gb+me", "1g.10gb.me", "1g.10gb-me"] {
            assert_eq!(per("Standard_NC24ads_A100_v4", spelling), Some(1));
        }
        // No MIG: no GPU of the table.
        assert!(c.get("Standard_NC4as_T4_v3").unwrap().mig_gpu.is_none());
        let h100 = c.get("Standard_NC40ads_H100_v5").unwrap().mig_gpu.as_ref();
        assert_eq!(h100.unwrap().label(), "H100 94GB");
    }

    #[test]
    fn bad_rows_are_refused() {
        let head = "gpu_model,gpu_memory_gib,profiles,source\n";
        assert!(MigTable::from_csv_str(&format!("{head}A100,0,1g.5gb=7,x\n")).is_err());
        assert!(MigTable::from_csv_str(&format!("{head}A100,40,1g.5gb,x\n")).is_err());
        assert!(MigTable::from_csv_str(&format!("{head}A100,40,1g.5gb=0,x\n")).is_err());
        assert!(MigTable::from_csv_str("gpu_model,profiles\n").is_err());
    }
}
