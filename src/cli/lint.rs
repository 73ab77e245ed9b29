//! `gpu-admission lint DIR`: loads and compiles every document, checks the
//! PolicyTest documents as `test` would before running them, and reports
//! each error with file, document and field or expression position.
use crate::bundle::{self, PolicySource};
use crate::offline;
use crate::testing;
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
            for notice in policies
                .notices()
                .iter()
                .chain(policies.pod_template_notes())
            {
                println!("{notice}");
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
            for error in &errors.0 {
                println!("{error}");
            }
            println!("{} error(s)", errors.0.len());
            Ok(ExitCode::FAILURE)
        }
    }
}
