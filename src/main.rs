//! The `gpu-admission` binary: argument parsing only; each subcommand lives
//! in `gpu_admission::cli`.
use clap::{Parser, Subcommand};
use gpu_admission::cli;
use std::process::ExitCode;

gpu_admission::mimalloc_as_malloc!();

/// Kubernetes admission webhook and CEL policy engine for GPU workloads.
#[derive(Debug, Parser)]
#[command(name = "gpu-admission", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the admission webhook server (HTTPS /mutate and /validate).
    Serve(Box<cli::serve::ServeArgs>),
    /// Show what the webhook would do to each object of a manifest.
    Evaluate(cli::evaluate::EvaluateArgs),
    /// Run the PolicyTest documents under a folder.
    Test(cli::test::TestArgs),
    /// Load and compile every policy under a folder; report each error.
    Lint(cli::lint::LintArgs),
    /// Report what existing objects violate and the GPUs they hold.
    Audit(cli::audit::AuditArgs),
    /// Create or renew a local CA and serving certificate; print the caBundle.
    Certs(cli::certs::CertsArgs),
}

fn main() -> ExitCode {
    let Cli { command } = Cli::parse();
    let result = match command {
        Command::Serve(args) => cli::serve::run(*args),
        Command::Evaluate(args) => cli::evaluate::run(args),
        Command::Test(args) => cli::test::run(args),
        Command::Lint(args) => cli::lint::run(args),
        Command::Audit(args) => cli::audit::run(args),
        Command::Certs(args) => cli::certs::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
