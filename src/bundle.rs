//! The policy folder as one [`Bundle`]: validating policies with their
//! bindings and params, placement profiles, and policy tests.
use crate::admission::Bundle;
use crate::cel::gpu::GpuExtension;
use crate::cel::Extensions;
use crate::gpu::catalog::Catalog;
use crate::placement::{Profile, ProfileSet, SkuTiers};
use crate::policy::{self, Document, LoadError, LoadErrors, PolicyFile, PolicySet};
use std::hash::{Hash as _, Hasher as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

include!(concat!(env!("OUT_DIR"), "/embedded_policies.rs"));

/// API group of the project's own document kinds.
pub const API_GROUP: &str = "gpu-admission.io";

/// Where policies come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicySource {
    /// The `policies/` folder built into the binary.
    Embedded,
    /// A folder on disk, read recursively.
    Dir(PathBuf),
}

impl PolicySource {
    pub fn describe(&self) -> String {
        match self {
            PolicySource::Embedded => "built-in policies".to_string(),
            PolicySource::Dir(dir) => dir.display().to_string(),
        }
    }
}

/// A loaded policy folder.
#[derive(Clone, Debug, Default)]
pub struct Loaded {
    pub bundle: Bundle,
    /// `PolicyTest` documents, for `gpu-admission test`.
    pub tests: Vec<Document>,
}

/// Loads and compiles everything in `source` with the built-in SKU
/// catalog. Every error found is returned, each naming its file and
/// document.
pub fn load(source: &PolicySource) -> Result<Loaded, LoadErrors> {
    load_with(source, Catalog::embedded_arc())
}

/// [`load`] with a given SKU catalog (`--catalog FILE`).
pub fn load_with(source: &PolicySource, catalog: Arc<Catalog>) -> Result<Loaded, LoadErrors> {
    match source {
        PolicySource::Dir(dir) => Snapshot::read(dir)?.load(catalog),
        PolicySource::Embedded => from_documents(embedded_documents()?, catalog),
    }
}

/// A policy folder as read at one moment (one `..data` version of a
/// mounted ConfigMap), not yet parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    files: Vec<PolicyFile>,
}

/// What a [`Snapshot`] holds, in 64 bits: two snapshots with the same
/// files and text have the same fingerprint. For noticing change, not for
/// security (whoever can write the folder decides the policies anyway).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fingerprint(u64);

impl Snapshot {
    /// Reads every policy file under `dir`; see [`policy::read_files`].
    pub fn read(dir: &Path) -> Result<Snapshot, LoadErrors> {
        policy::read_files(dir).map(|files| Snapshot { files })
    }

    pub fn fingerprint(&self) -> Fingerprint {
        // SipHash with fixed keys: the same content hashes the same way for
        // the life of the process, which is all a comparison needs.
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.files.hash(&mut hasher);
        Fingerprint(hasher.finish())
    }

    /// Parses and compiles the snapshot.
    pub fn load(&self, catalog: Arc<Catalog>) -> Result<Loaded, LoadErrors> {
        from_documents(policy::parse_files(&self.files)?, catalog)
    }
}

/// The catalog at `path`, or the built-in one.
pub fn catalog(path: Option<&Path>) -> anyhow::Result<Arc<Catalog>> {
    match path {
        None => Ok(Catalog::embedded_arc()),
        Some(path) => Catalog::from_csv_file(path)
            .map(Arc::new)
            .map_err(|e| anyhow::anyhow!("SKU catalog {}: {e}", path.display())),
    }
}

/// The shipped policy files as documents, named `policies/<path>`.
pub fn embedded_documents() -> Result<Vec<Document>, LoadErrors> {
    let mut documents = Vec::new();
    let mut errors = Vec::new();
    for (path, text) in EMBEDDED_POLICIES {
        let file = Path::new("policies").join(path);
        match policy::parse_documents(&file, text) {
            Ok(docs) => documents.extend(docs),
            Err(LoadErrors(errs)) => errors.extend(errs),
        }
    }
    if errors.is_empty() {
        Ok(documents)
    } else {
        Err(LoadErrors(errors))
    }
}

/// Sorts documents by kind and compiles them. Placement profiles come
/// first: the GPU resources they name are GPU resources for policies too.
pub fn from_documents(
    documents: Vec<Document>,
    catalog: Arc<Catalog>,
) -> Result<Loaded, LoadErrors> {
    let mut policy_docs = Vec::new();
    let mut profiles = Vec::new();
    let mut tests = Vec::new();
    let mut errors = Vec::new();
    for doc in documents {
        match own_kind(&doc.value) {
            Some("PlacementProfile") => match Profile::from_value(&doc.value) {
                Ok(profile) => profiles.push(profile),
                Err(err) => errors.push(LoadError {
                    source: Some(doc.source.clone()),
                    field: None,
                    line: None,
                    column: None,
                    message: err.to_string(),
                }),
            },
            Some("PolicyTest") => tests.push(doc),
            Some(other) => errors.push(LoadError {
                source: Some(doc.source.clone()),
                field: Some("kind".to_string()),
                line: None,
                column: None,
                message: format!(
                    "unknown kind {other} in {API_GROUP}: expected PlacementProfile or PolicyTest"
                ),
            }),
            None => policy_docs.push(doc),
        }
    }
    // The tier lists are the params of gpu-sku-allowlist; /mutate keeps GPU
    // pods to the same sizes.
    let tiers = policy_docs
        .iter()
        .find_map(|d| SkuTiers::from_config_map(&d.value));
    let placement = match ProfileSet::new(profiles) {
        Ok(set) => {
            let set = set.with_catalog(catalog.clone());
            Some(match tiers {
                Some(tiers) => set.with_tiers(tiers),
                None => set,
            })
        }
        Err(err) => {
            errors.push(LoadError {
                source: None,
                field: None,
                line: None,
                column: None,
                message: err.to_string(),
            });
            None
        }
    };
    let resources = placement
        .as_ref()
        .map(|p| p.gpu_resources().clone())
        .unwrap_or_default();
    let extensions = Extensions::new().with(GpuExtension::new(catalog, resources));
    let policies = match PolicySet::compile_with(&policy_docs, extensions) {
        Ok(set) => Some(set),
        Err(LoadErrors(errs)) => {
            errors.extend(errs);
            None
        }
    };
    match (policies, placement) {
        (Some(policies), Some(placement)) if errors.is_empty() => Ok(Loaded {
            bundle: Bundle {
                policies,
                placement,
            },
            tests,
        }),
        _ => Err(LoadErrors(errors)),
    }
}

/// The kind of one of the project's own documents, if it is one.
fn own_kind(value: &serde_json::Value) -> Option<&str> {
    let api_version = value.get("apiVersion")?.as_str()?;
    let (group, _version) = api_version.split_once('/')?;
    if group != API_GROUP {
        return None;
    }
    value.get("kind")?.as_str()
}
