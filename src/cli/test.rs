//! `gpu-admission test DIR`: runs the PolicyTest documents under DIR.
use crate::bundle::{self, PolicySource};
use crate::offline;
use crate::policy;
use crate::testing;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Clone, Debug, clap::Args)]
pub struct TestArgs {
    /// Folder holding PolicyTest documents, and the policies under test
    /// unless --policies names another folder.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Take the policies from this folder instead of DIR.
    #[arg(long, value_name = "DIR")]
    pub policies: Option<PathBuf>,
    /// SKU catalog CSV replacing the built-in one.
    #[arg(long, value_name = "CSV")]
    pub catalog: Option<PathBuf>,
    /// Print passing cases too.
    #[arg(short, long)]
    pub verbose: bool,
    /// Grants the policies' `authorizer` checks answer from (a YAML list of
    /// {user | userGroup, verb, apiGroup, resource, subresource, namespace,
    /// name, path}); without it every check is denied.
    #[arg(long, value_name = "FILE")]
    pub authz: Option<PathBuf>,
}

/// Summary of a test run.
pub struct Summary {
    pub passed: usize,
    pub failed: usize,
    pub report: String,
}

pub fn run(args: TestArgs) -> anyhow::Result<ExitCode> {
    let summary = run_tests(&args)?;
    print!("{}", summary.report);
    Ok(if summary.failed == 0 && summary.passed > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Loads policies and tests and runs them; an error only when they cannot
/// be loaded.
pub fn run_tests(args: &TestArgs) -> anyhow::Result<Summary> {
    offline::with_evaluation_stack(|| run_tests_here(args))?
}

fn run_tests_here(args: &TestArgs) -> anyhow::Result<Summary> {
    let catalog = bundle::catalog(args.catalog.as_deref())?;
    let tests_dir = PolicySource::Dir(args.dir.clone());
    let source = args
        .policies
        .clone()
        .map_or(tests_dir.clone(), PolicySource::Dir);
    let loaded = bundle::load_with(&source, catalog).map_err(|e| source.failed(e))?;
    let tests = match &args.policies {
        None => loaded.tests,
        Some(_) => policy::read_documents(&args.dir)
            .map_err(|e| tests_dir.failed(e))?
            .into_iter()
            .filter(|d| d.value.get("kind").and_then(|k| k.as_str()) == Some("PolicyTest"))
            .collect(),
    };
    let bundle = loaded.bundle;
    if tests.is_empty() {
        anyhow::bail!("no PolicyTest documents under {}", args.dir.display());
    }
    let authorizer = super::authorizer(args.authz.as_deref())?;
    let results = testing::run_with_authorizer(&bundle, &tests, authorizer).map_err(|errors| {
        anyhow::anyhow!("{} has PolicyTest errors:\n{errors}", args.dir.display())
    })?;
    let passed = results.iter().filter(|r| r.passed()).count();
    Ok(Summary {
        passed,
        failed: results.len() - passed,
        report: testing::report(&results, args.verbose),
    })
}
