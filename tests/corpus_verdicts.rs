//! docs/corpus-verdicts.md stays true to the shipped policies: its table is
//! regenerated from the public manifests in `../shared/corpus` (beside the
//! clone in CI; the tests are skipped without it) through the code
//! `gpu-admission evaluate -f FILE --policies policies/` runs, and the test
//! fails when the document differs.
//!
//! The `verdict` and `policies` columns are generated; the `why this is
//! right` column is kept from the document (a new manifest needs one
//! written). Set `GPU_ADMISSION_BLESS=1` to rewrite the table from the
//! current output, then review the diff.
use crate::common::shared_data;

use gpu_admission::bundle::Loaded;
use gpu_admission::cli::evaluate::{self, EvaluateArgs, Format, OperationArg};
use gpu_admission::cli::policy_args::PolicyArgs;
use gpu_admission::offline::{self, Evaluation};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

const HEADER: &str = "| file | verdict | policies | why this is right |\n|---|---|---|---|\n";

/// The manifests of the corpus folder, by file name.
fn manifests(corpus: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension()
                .is_some_and(|x| x == "yaml" || x == "yml" || x == "json")
        })
        .collect();
    files.sort();
    files
}

/// The policy folder `policies`, loaded as `evaluate --policies` loads it:
/// once for every manifest judged against it.
fn load(policies: &Path) -> Loaded {
    let loaded = offline::with_evaluation_stack(|| policy_args(policies).load()).unwrap();
    loaded.unwrap_or_else(|e| panic!("{}: {e}", policies.display()))
}

fn policy_args(policies: &Path) -> PolicyArgs {
    PolicyArgs {
        policies: Some(policies.to_path_buf()),
        catalog: None,
    }
}

/// The shipped policy folder, loaded once for the whole test.
fn shipped() -> &'static Loaded {
    static SHIPPED: OnceLock<Loaded> = OnceLock::new();
    SHIPPED.get_or_init(|| load(&root().join("policies")))
}

/// What `gpu-admission evaluate -f FILE --policies policies/` answers.
fn evaluate(file: &Path) -> Vec<Evaluation> {
    evaluate_with(file, &root().join("policies"), shipped())
}

/// What `gpu-admission evaluate -f FILE --policies POLICIES` answers, the
/// folder `policies` loaded as `loaded`.
fn evaluate_with(file: &Path, policies: &Path, loaded: &Loaded) -> Vec<Evaluation> {
    let args = EvaluateArgs {
        file: file.to_path_buf(),
        policies: policy_args(policies),
        namespace: None,
        namespace_labels: None,
        cluster: Vec::new(),
        operation: OperationArg::Create,
        old_filename: None,
        user: "gpu-admission-cli".to_string(),
        groups: Vec::new(),
        output: Format::Text,
        fail_on_deny: false,
        authz: None,
        at: None,
    };
    evaluate::evaluate_loaded(&args, loaded.clone())
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

fn verdict(e: &Evaluation) -> String {
    if !e.allowed {
        return "denied".into();
    }
    let mut parts = Vec::new();
    if e.patch.is_some() {
        parts.push("patched");
    }
    if !e.warnings.is_empty() {
        parts.push("warned");
    }
    if parts.is_empty() {
        "allowed".into()
    } else {
        parts.join(", ")
    }
}

/// The placement profile and the policies (in the order they spoke) behind
/// an object's answer; `none` when nothing was said.
fn policies(e: &Evaluation) -> String {
    let mut names: Vec<&str> = Vec::new();
    for line in e.denials.iter().chain(&e.warnings) {
        let name = line.split_once(": ").map_or(line.as_str(), |(p, _)| p);
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let names = names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ");
    match (e.patch.as_ref().and(e.profile.as_deref()), names.is_empty()) {
        (Some(profile), true) => format!("placement `{profile}`"),
        (Some(profile), false) => format!("placement `{profile}`; {names}"),
        (None, true) => "none".into(),
        (None, false) => names,
    }
}

/// One value for the file when every object has it, else `Kind value`
/// groups in the order the objects come.
fn verdict_column(results: &[Evaluation]) -> String {
    let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
    for e in results {
        let v = verdict(e);
        match groups.iter_mut().find(|(g, _)| *g == v) {
            Some((_, kinds)) => kinds.push(&e.kind),
            None => groups.push((v, vec![&e.kind])),
        }
    }
    match groups.as_slice() {
        [] => "no objects".into(),
        [(v, _)] => v.clone(),
        _ => groups
            .iter()
            .map(|(v, kinds)| format!("{} {v}", kinds.join(", ")))
            .collect::<Vec<_>>()
            .join("; "),
    }
}

/// The policies of the objects that had any: one value when they agree,
/// else `Kind: policies` for each.
fn policies_column(results: &[Evaluation]) -> String {
    let spoke: Vec<(&str, String)> = results
        .iter()
        .map(|e| (e.kind.as_str(), policies(e)))
        .filter(|(_, p)| p != "none")
        .collect();
    match spoke.first() {
        None => "none".into(),
        Some((_, first)) if spoke.iter().all(|(_, p)| p == first) => first.clone(),
        Some(_) => spoke
            .iter()
            .map(|(kind, p)| format!("{kind}: {p}"))
            .collect::<Vec<_>>()
            .join("; "),
    }
}

/// The document split around its table: text before, the `why` of each
/// row by file, text after.
fn split_doc(doc: &str) -> (&str, BTreeMap<String, String>, &str) {
    let start = doc.find(HEADER).expect("the verdict table header");
    let body = &doc[start + HEADER.len()..];
    let end = body.find("\n\n").map_or(body.len(), |i| i + 1);
    let mut why = BTreeMap::new();
    for row in body[..end].lines() {
        let cells: Vec<&str> = row
            .trim_start_matches("| ")
            .trim_end_matches(" |")
            .split(" | ")
            .collect();
        assert_eq!(cells.len(), 4, "a table row has four cells: {row}");
        let file = cells[0].trim_matches('`').to_string();
        why.insert(file, cells[3].to_string());
    }
    (&doc[..start], why, &body[end..])
}

#[test]
fn corpus_verdicts_doc_matches_the_policies() {
    let Some(corpus) = shared_data::shared_data("corpus") else {
        return;
    };
    let path = root().join("docs/corpus-verdicts.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let (before, why, after) = split_doc(&doc);
    let files = manifests(&corpus);
    assert!(files.len() >= 20, "{} corpus manifests", files.len());
    let mut table = String::from(HEADER);
    let mut unexplained = Vec::new();
    for file in &files {
        let name = file.file_name().unwrap().to_str().unwrap();
        let results = evaluate(file);
        let reason = why.get(name).cloned().unwrap_or_default();
        if reason.is_empty() {
            unexplained.push(name.to_string());
        }
        table.push_str(&format!(
            "| `{name}` | {} | {} | {reason} |\n",
            verdict_column(&results),
            policies_column(&results)
        ));
    }
    let regenerated = format!("{before}{table}{after}");
    if std::env::var_os("GPU_ADMISSION_BLESS").is_some() {
        std::fs::write(&path, &regenerated).unwrap();
    }
    let stale: Vec<&String> = why
        .keys()
        .filter(|f| !files.iter().any(|p| p.file_name().unwrap() == f.as_str()))
        .collect();
    assert!(
        stale.is_empty(),
        "rows without a manifest in ../shared/corpus: {stale:?}"
    );
    assert!(
        unexplained.is_empty(),
        "write the `why this is right` cell for: {unexplained:?}"
    );
    if regenerated != doc {
        let diff: Vec<String> = doc
            .lines()
            .zip(regenerated.lines())
            .filter(|(a, b)| a != b)
            .map(|(a, b)| format!("- {a}\n+ {b}"))
            .collect();
        panic!(
            "docs/corpus-verdicts.md differs from the policies' verdicts (GPU_ADMISSION_BLESS=1 rewrites it):\n{}",
            diff.join("\n")
        );
    }
}

/// Only the parts of the object (and of its namespace) that the policies
/// a request could match can reach are converted for CEL: the shipped
/// policies give every corpus object the same answer as when one more
/// policy, matching every request, makes all of them reachable.
#[test]
fn converting_only_what_is_reached_changes_no_answer() {
    let Some(corpus) = shared_data::shared_data("corpus") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    fn copy(from: &Path, to: &Path) -> std::io::Result<()> {
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            let target = to.join(entry.file_name());
            if entry.file_type()?.is_dir() {
                std::fs::create_dir_all(&target)?;
                copy(&entry.path(), &target)?;
            } else {
                std::fs::copy(entry.path(), &target)?;
            }
        }
        Ok(())
    }
    copy(&root().join("policies"), dir.path()).unwrap();
    std::fs::copy(
        root().join("tests/fixtures/policies/whole-object/whole-object.yaml"),
        dir.path().join("zz-whole-object.yaml"),
    )
    .unwrap();
    let answer = |e: &Evaluation| {
        serde_json::json!({
            "allowed": e.allowed,
            "denials": e.denials,
            "warnings": e.warnings,
            "audit": e.audit_annotations,
            "patch": e.patch,
            "mutations": e.mutations,
        })
    };
    let mut compared = 0;
    let every = load(dir.path());
    for file in manifests(&corpus) {
        let reached = evaluate(&file);
        let whole = evaluate_with(&file, dir.path(), &every);
        assert_eq!(reached.len(), whole.len(), "{}", file.display());
        for (r, w) in reached.iter().zip(&whole) {
            assert_eq!(answer(r), answer(w), "{} {}", file.display(), r.name);
            compared += 1;
        }
    }
    assert!(compared >= 27, "{compared} objects");
}

/// The corpus is the set of files its SOURCES.tsv lists (repository,
/// path, commit and SHA-256 of each), unchanged.
#[test]
fn corpus_manifests_are_the_listed_files() {
    let Some(corpus) = shared_data::shared_data("corpus") else {
        return;
    };
    let tsv = std::fs::read_to_string(corpus.join("SOURCES.tsv")).unwrap();
    let mut lines = tsv.lines();
    let header: Vec<&str> = lines.next().unwrap().split('\t').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("SOURCES.tsv has no {name} column"))
    };
    let (file, repo, sha) = (col("file"), col("repo"), col("sha256"));
    let mut listed = Vec::new();
    for line in lines {
        let cells: Vec<&str> = line.split('\t').collect();
        assert_eq!(cells.len(), header.len(), "{line}");
        assert!(!cells[repo].is_empty(), "{}: repo", cells[file]);
        assert!(cells[sha].len() >= 16, "{}: sha256 prefix", cells[file]);
        let bytes = std::fs::read(corpus.join(cells[file])).unwrap();
        let digest = sha256_hex(&bytes);
        assert!(
            digest.starts_with(cells[sha]),
            "{}: sha256 {digest} is not {}",
            cells[file],
            cells[sha]
        );
        listed.push(cells[file].to_string());
    }
    let files: Vec<String> = manifests(&corpus)
        .iter()
        .map(|p| p.file_name().unwrap().to_str().unwrap().to_string())
        .collect();
    listed.sort();
    assert_eq!(listed, files, "SOURCES.tsv lists exactly the manifests");
}

fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
