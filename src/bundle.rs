//! The policy folder as one [`Bundle`]: validating policies with their
//! bindings and params, placement profiles, and policy tests.
use crate::admission::Bundle;
use crate::cel::gpu::GpuExtension;
use crate::cel::Extensions;
use crate::gpu::catalog::Catalog;
use crate::placement::{Infrastructure, Profile, ProfileSet, SkuTiers, API_VERSION};
use crate::policy::{self, Document, LoadError, LoadErrors, PolicyFile, PolicySet};
use std::hash::{Hash as _, Hasher as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

include!(concat!(env!("OUT_DIR"), "/embedded_policies.rs"));

/// API group of the project's own document kinds.
pub const API_GROUP: &str = "gpu-admission.io";

/// The kinds of [`API_GROUP`] a policy folder may hold.
const OWN_KINDS: [&str; 4] = [
    crate::placement::KIND,
    crate::k8s::template_sources::KIND,
    crate::exceptions::KIND,
    "PolicyTest",
];

/// Where policies come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicySource {
    /// The `policies/` folder built into the binary.
    Embedded,
    /// A folder on disk, read recursively.
    Dir(PathBuf),
}

impl PolicySource {
    /// The folder `dir` when one is given, else the built-in policies.
    pub fn of(dir: Option<&Path>) -> PolicySource {
        dir.map_or(PolicySource::Embedded, |dir| PolicySource::Dir(dir.into()))
    }

    pub fn describe(&self) -> String {
        match self {
            PolicySource::Embedded => "built-in policies".to_string(),
            PolicySource::Dir(dir) => dir.display().to_string(),
        }
    }

    /// The error of loading this source: every problem found, one a line.
    pub fn failed(&self, errors: LoadErrors) -> anyhow::Error {
        anyhow::anyhow!("{} has errors:\n{errors}", self.describe())
    }
}

/// A loaded policy folder.
#[derive(Clone, Debug, Default)]
pub struct Loaded {
    pub bundle: Bundle,
    /// `PolicyTest` documents of a folder, for `gpu-admission test` and
    /// `lint`; none for the built-in set, whose tests are
    /// [`embedded_tests`].
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

    /// SHA-256 (hex) of the files' contents in path order: the same
    /// policies give the same digest wherever the folder is mounted, and
    /// the same as [`policy_digest`] of the built-in set when the folder
    /// holds the shipped files.
    pub fn digest(&self) -> String {
        digest_texts(self.files.iter().map(|f| f.text.as_str()))
    }

    /// Parses and compiles the snapshot.
    pub fn load(&self, catalog: Arc<Catalog>) -> Result<Loaded, LoadErrors> {
        from_documents(policy::parse_files(&self.files)?, catalog)
    }
}

/// SHA-256 (hex) of the policy files of `source`; see [`Snapshot::digest`].
pub fn policy_digest(source: &PolicySource) -> Result<String, LoadErrors> {
    match source {
        PolicySource::Dir(dir) => Snapshot::read(dir).map(|s| s.digest()),
        PolicySource::Embedded => Ok(digest_texts(
            EMBEDDED_POLICIES.iter().map(|(_path, text)| *text),
        )),
    }
}

/// SHA-256 over each text's length and bytes, so no two lists of texts
/// run together into the same input.
fn digest_texts<'a>(texts: impl Iterator<Item = &'a str>) -> String {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    for text in texts {
        context.update(&(text.len() as u64).to_be_bytes());
        context.update(text.as_bytes());
    }
    context
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
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

/// The catalog at `path` as reports name it: its path, or `built-in`.
pub fn catalog_name(path: Option<&Path>) -> String {
    path.map_or_else(|| "built-in".to_string(), |path| path.display().to_string())
}

/// The folder of the shipped set that holds its `PolicyTest`s, and only
/// them (a test of this module holds it to that).
const EMBEDDED_TESTS: &str = "tests/";

/// The shipped policy files as documents, named `policies/<path>`: what a
/// server of the built-in set serves. Its `PolicyTest`s, three quarters
/// of its text, are read only where asked for ([`embedded_tests`]).
pub fn embedded_documents() -> Result<Vec<Document>, LoadErrors> {
    parse_embedded(|path| !path.starts_with(EMBEDDED_TESTS))
}

/// The shipped set's `PolicyTest` documents (`policies/tests/`).
pub fn embedded_tests() -> Result<Vec<Document>, LoadErrors> {
    parse_embedded(|path| path.starts_with(EMBEDDED_TESTS))
}

/// The shipped files whose path (inside `policies/`) `wanted` takes, as
/// documents named `policies/<path>`.
fn parse_embedded(wanted: impl Fn(&str) -> bool) -> Result<Vec<Document>, LoadErrors> {
    let mut documents = Vec::new();
    let mut errors = Vec::new();
    for (path, text) in EMBEDDED_POLICIES.iter().filter(|(path, _)| wanted(path)) {
        let file = Path::new("policies").join(path);
        match policy::parse_documents(&file, text) {
            Ok(docs) => documents.extend(docs),
            Err(LoadErrors(errs, _)) => errors.extend(errs),
        }
    }
    if errors.is_empty() {
        Ok(documents)
    } else {
        Err(LoadErrors(errors, Vec::new()))
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
                Err(err) => errors.push(LoadError::at(&doc.source, "", err.to_string())),
            },
            Some("PolicyTest") => tests.push(doc),
            // Read with the policies: they say which kinds' templates the
            // pod policies judge.
            Some(crate::k8s::template_sources::KIND) => policy_docs.push(doc),
            // Read with the policies, which honour them.
            Some(crate::exceptions::KIND) => policy_docs.push(doc),
            // A cluster object: here, nothing would enforce it.
            Some(crate::budgets::KIND) => errors.push(LoadError::at(&doc.source, "kind",
                "a GpuBudget is not a policy document: apply it to the cluster (docs/budgets.md); `gpu-admission lint DIR -f FILE` checks it against Kueue's ClusterQueues")),
            Some(other) => errors.push(LoadError::at(&doc.source, "kind", format!(
                "unknown kind {other} in {API_GROUP}: expected PlacementProfile, PodTemplateSource, GpuPolicyException or PolicyTest"
            ))),
            // One of ours under another group (a typo): an error, not a
            // document skipped.
            None if OWN_KINDS.contains(&doc.type_meta().1) => {
                errors.push(LoadError::unknown_api_version(&doc, &[API_VERSION]));
            }
            None => policy_docs.push(doc),
        }
    }
    // The tier lists are the params of gpu-sku-allowlist; /mutate keeps GPU
    // pods to the same sizes.
    let tiers = policy_docs
        .iter()
        .find_map(|d| SkuTiers::from_config_map(&d.value));
    // The exemption lists of the node-isolation policies: /mutate hides
    // GPUs by default from pods that can land on GPU nodes, except GPU
    // infrastructure as those policies know it (no lists: not by default).
    let infrastructure = policy_docs
        .iter()
        .find_map(|d| Infrastructure::from_config_map(&d.value));
    let placement = match ProfileSet::new(profiles) {
        Ok(set) => {
            let set = set.with_catalog(catalog.clone());
            let set = tiers.into_iter().fold(set, ProfileSet::with_tiers);
            Some(
                infrastructure
                    .into_iter()
                    .fold(set, ProfileSet::with_infrastructure),
            )
        }
        Err(err) => {
            errors.push(LoadError::new(err.to_string()));
            None
        }
    };
    let resources = placement
        .as_ref()
        .map(|p| p.gpu_resources().clone())
        .unwrap_or_default();
    // The SKU lists of the catalog and profiles, converted once for the
    // `gpu` variable.
    let lists = placement
        .as_ref()
        .map(ProfileSet::sku_lists)
        .unwrap_or_default();
    let gpu = GpuExtension::new(catalog, resources).sharing(lists);
    let extensions = Extensions::new().with(gpu);
    let mut typing = Vec::new();
    let policies = match PolicySet::compile_with(&policy_docs, extensions) {
        Ok(set) => Some(set),
        Err(LoadErrors(errs, notices)) => {
            errors.extend(errs);
            typing = notices;
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
        _ => Err(LoadErrors(errors, typing)),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_digest_is_the_same_for_the_shipped_folder_and_the_built_in_set() {
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies");
        let built_in = policy_digest(&PolicySource::Embedded).unwrap();
        assert_eq!(built_in.len(), 64);
        assert!(built_in.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(
            policy_digest(&PolicySource::Dir(shipped)).unwrap(),
            built_in
        );
    }

    /// The built-in set is its policies alone, and its tests are the
    /// shipped folder's tests: every PolicyTest is under `tests/`, and
    /// nothing else is.
    #[test]
    fn the_shipped_tests_are_their_folder_and_the_folder_is_tests() {
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies");
        let folder = load(&PolicySource::Dir(shipped)).unwrap();
        let built_in = load(&PolicySource::Embedded).unwrap();
        assert!(built_in.tests.is_empty());
        let tests = embedded_tests().unwrap();
        assert!(tests.len() >= 40, "{} tests", tests.len());
        assert!(tests.iter().all(|d| d.type_meta().1 == "PolicyTest"));
        let named = |docs: &[Document]| -> Vec<String> {
            let mut names: Vec<String> = (docs.iter())
                .map(|d| {
                    let file = d.source.file.to_string_lossy();
                    let inside = file.rsplit("policies/").next().unwrap_or_default();
                    format!("{inside} document {}", d.source.document)
                })
                .collect();
            names.sort();
            names
        };
        assert_eq!(named(&tests), named(&folder.tests));
        assert!(embedded_documents()
            .unwrap()
            .iter()
            .all(|d| d.type_meta().1 != "PolicyTest"));
        assert_eq!(built_in.bundle.policies.len(), folder.bundle.policies.len());
    }

    #[test]
    fn every_shipped_policy_says_what_it_checks() {
        let loaded = load(&PolicySource::Embedded).unwrap();
        let descriptions = loaded.bundle.policies.descriptions();
        assert!(descriptions.len() >= 20, "{descriptions:?}");
        for (name, description) in descriptions {
            let description = description.unwrap_or_default();
            assert!(
                description.len() > 40 && !description.contains('\n'),
                "{name}: {description:?}"
            );
        }
    }

    #[test]
    fn own_kinds_under_another_group_are_errors() {
        for kind in OWN_KINDS {
            let text = format!(
                "apiVersion: gpu-admision.io/v1alpha1\nkind: {kind}\nmetadata: {{name: a}}\n"
            );
            let docs = policy::parse_documents(Path::new("p.yaml"), &text).unwrap();
            let err = from_documents(docs, Catalog::embedded_arc()).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("p.yaml: document 1 (line 1): apiVersion: \"gpu-admision.io/v1alpha1\" is not an apiVersion of kind {kind}; accepted: gpu-admission.io/v1alpha1")
            );
        }
        // Other kinds, a ConfigMap a policy's params may be, load as before.
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n";
        let docs = policy::parse_documents(Path::new("p.yaml"), text).unwrap();
        assert!(from_documents(docs, Catalog::embedded_arc()).is_ok());
    }

    #[test]
    fn policy_digest_changes_with_any_file() {
        let dir = tempfile::tempdir().unwrap();
        let policy = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n";
        std::fs::write(dir.path().join("a.yaml"), policy).unwrap();
        let source = PolicySource::Dir(dir.path().to_path_buf());
        let before = policy_digest(&source).unwrap();
        assert_eq!(policy_digest(&source).unwrap(), before);
        std::fs::write(
            dir.path().join("a.yaml"),
            policy.replace("{name: a}", "{name: b}"),
        )
        .unwrap();
        assert_ne!(policy_digest(&source).unwrap(), before);
    }
}
