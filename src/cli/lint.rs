//! `gpu-admission lint DIR`: loads and compiles every document, checks the
//! PolicyTest documents as `test` would before running them, and reports
//! each error with file, document and field or expression position; with
//! `-f`, checks the GpuBudgets of cluster objects against the Kueue
//! ClusterQueues beside them, as `audit` does.
use super::dump::{is_namespace, namespace_labels};
use crate::audit::budgets::{budget_mismatches, is_budget, MISMATCH};
use crate::bundle::{self, PolicySource};
use crate::k8s::StaticNamespaces;
use crate::kueue::ClusterQueue;
use crate::placement::ProfileSet;
use crate::policy::{self, Document, LoadError, LoadNotice, NoticeLevel};
use crate::{budgets, offline, testing};
use serde_json::Value;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Clone, Debug, clap::Args)]
pub struct LintArgs {
    /// Policy folder to check (recursive).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// SKU catalog CSV replacing the built-in one.
    #[arg(long, value_name = "CSV")]
    pub catalog: Option<PathBuf>,
    /// What type checking finds (a field no matched kind has, values of
    /// different types compared), and where -f's GpuBudgets and Kueue
    /// disagree, are errors, not warnings.
    #[arg(long)]
    pub strict: bool,
    /// Cluster objects, files or folders (manifests, or Lists from
    /// `kubectl get ... -o json`): their GpuBudgets are checked against the
    /// Kueue ClusterQueues serving the namespaces they cover. Namespaces
    /// among them give their labels.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

pub fn run(args: LintArgs) -> anyhow::Result<ExitCode> {
    let catalog = bundle::catalog(args.catalog.as_deref())?;
    let source = PolicySource::Dir(args.dir.clone());
    let loaded = offline::with_evaluation_stack(|| {
        bundle::load_with(&source, catalog)
            .and_then(|loaded| testing::check(&loaded.tests).map(|()| loaded))
    })?;
    match loaded {
        Ok(loaded) => {
            // What kube-apiserver would accept and ignore: said, not failed.
            let policies = &loaded.bundle.policies;
            let notices = policies.notices().iter();
            let typing = print_notices(notices.chain(policies.pod_template_notes()), args.strict);
            let placement = &loaded.bundle.placement;
            let errors = if args.strict { typing } else { 0 }
                + lint_budgets(&args.files, placement, args.strict);
            if errors > 0 {
                println!("{errors} error(s)");
                return Ok(ExitCode::FAILURE);
            }
            let portability = policies.beyond_kubernetes();
            let portable = portability.iter().filter(|(_, b)| b.is_empty()).count();
            for (name, beyond) in portability.iter().filter(|(_, b)| !b.is_empty()) {
                println!(
                    "{name}: uses {} beyond kube-apiserver {}'s CEL",
                    beyond.iter().cloned().collect::<Vec<_>>().join(", "),
                    crate::cel::portability::KUBERNETES_VERSION
                );
            }
            println!(
                "kube-apiserver {}: {portable} of {} policies would load as written",
                crate::cel::portability::KUBERNETES_VERSION,
                portability.len()
            );
            let count = |n: usize, one: &str, many: &str| match n {
                0 => String::new(),
                1 => format!("1 {one}, "),
                n => format!("{n} {many}, "),
            };
            let mutating = count(
                policies.mutating_len(),
                "mutating policy",
                "mutating policies",
            );
            let kinds = count(
                policies.template_sources().custom().len(),
                "workload kind",
                "workload kinds",
            );
            let exceptions = count(
                policies.exceptions().len(),
                "policy exception",
                "policy exceptions",
            );
            println!(
                "{}: ok ({} policies, {mutating}{kinds}{exceptions}{} placement profiles, {} tests)",
                args.dir.display(),
                policies.len(),
                loaded.bundle.placement.len(),
                loaded.tests.len()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(errors) => {
            let typing = print_notices(errors.1.iter(), args.strict);
            for error in &errors.0 {
                println!("{error}");
            }
            let typing = if args.strict { typing } else { 0 };
            println!("{} error(s)", errors.0.len() + typing);
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Prints `notices`, type checking's as errors when `strict`; returns how
/// many are type checking's.
fn print_notices<'a>(notices: impl Iterator<Item = &'a LoadNotice>, strict: bool) -> usize {
    let mut typing = 0;
    for notice in notices {
        if notice.level == NoticeLevel::Typing {
            typing += 1;
            if strict {
                println!("error: {}", notice.at);
                continue;
            }
        }
        println!("{notice}");
    }
    typing
}

/// Prints what is wrong with the GpuBudgets among the objects of `files`:
/// each that does not read (an error), and each disagreement with a
/// ClusterQueue serving a namespace it covers (the audit's
/// [`budget_mismatches`]) at the ClusterQueue's document, an error when
/// `strict`. Returns the number of errors.
fn lint_budgets(files: &[PathBuf], placement: &ProfileSet, strict: bool) -> usize {
    if files.is_empty() {
        return 0;
    }
    let (mut documents, mut errors) = (Vec::new(), Vec::new());
    for file in files {
        match policy::read_documents(file) {
            Ok(docs) => documents.extend(docs),
            Err(e) => errors.extend(e.0),
        }
    }
    // A List's items, each at the List's document and its field
    // (`items[2]`).
    let documents: Vec<(Document, String)> = (documents.into_iter())
        .flat_map(
            |doc| match doc.value.get("items").and_then(Value::as_array) {
                Some(items) if doc.type_meta().1.ends_with("List") => (items.iter().enumerate())
                    .map(|(i, value)| {
                        let doc = Document {
                            value: value.clone(),
                            ..doc.clone()
                        };
                        (doc, format!("items[{i}]"))
                    })
                    .collect(),
                _ => vec![(doc, String::new())],
            },
        )
        .collect();
    let within = |item: &str, field: &str| match (item, field) {
        ("", field) => field.to_string(),
        (item, "") => item.to_string(),
        (item, field) => format!("{item}.{field}"),
    };
    let mut budgets = Vec::new();
    for (doc, item) in documents.iter().filter(|(d, _)| is_budget(&d.value)) {
        match budgets::read(&doc.value) {
            Ok(budget) => budgets.push(budget),
            Err(errs) => errors.extend(
                (errs.into_iter())
                    .map(|e| LoadError::at(&doc.source, within(item, &e.field), e.message)),
            ),
        }
    }
    let objects: Vec<Value> = documents.iter().map(|(d, _)| d.value.clone()).collect();
    let mut namespaces = StaticNamespaces::new();
    for (name, labels) in (objects.iter().filter(|o| is_namespace(o)))
        .filter_map(|ns| namespace_labels(ns, &Default::default()))
    {
        namespaces.insert(&name, labels);
    }
    let found = budget_mismatches(&objects, &budgets, placement, &namespaces);
    let level = if strict { "error" } else { "warning" };
    for finding in &found {
        let message = format!("[{MISMATCH}] {}", finding.message);
        let queue = (documents.iter()).find(|(d, _)| {
            ClusterQueue::from_object(&d.value).map(|q| q.name) == finding.cluster_queue
        });
        let at = queue.map(|(q, item)| LoadError::at(&q.source, item.as_str(), &message));
        println!("{level}: {}", at.unwrap_or_else(|| LoadError::new(message)));
    }
    for error in &errors {
        println!("error: {error}");
    }
    let queues = objects.iter().filter_map(ClusterQueue::from_object).count();
    let (budgets, disagree) = (budgets.len(), found.len());
    println!("{budgets} GpuBudget(s), {queues} ClusterQueue(s): {disagree} disagreement(s)");
    errors.len() + if strict { disagree } else { 0 }
}
