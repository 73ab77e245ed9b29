//! `gpu-admission lint DIR`: loads and compiles every document, checks the
//! PolicyTest documents as `test` would before running them, and reports
//! each error with file, document and field or expression position.
use crate::bundle::{self, PolicySource};
use crate::offline;
use crate::policy::{LoadNotice, NoticeLevel};
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
    /// What type checking finds (a field no matched kind has, values of
    /// different types compared) is an error, not a warning.
    #[arg(long)]
    pub strict: bool,
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
            if typing > 0 && args.strict {
                println!("{typing} error(s)");
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
