//! Subcommands of the `gpu-admission` binary. Each exposes its clap `Args`
//! and `run(args) -> anyhow::Result<ExitCode>`.
pub mod audit;
pub mod certs;
pub mod dump;
pub mod evaluate;
pub mod flags;
pub mod lint;
pub mod policy_args;
pub mod serve;
pub mod serve_budgets;
pub mod serve_certs;
pub mod serve_exceptions;
pub mod test;
pub mod utilization_args;

/// The authorizer of `evaluate --authz FILE` and `test --authz FILE`: the
/// file's grants, or none (every `authorizer` check denied).
fn authorizer(
    file: Option<&std::path::Path>,
) -> anyhow::Result<std::sync::Arc<dyn crate::authz::Authorizer>> {
    Ok(match file {
        Some(path) => std::sync::Arc::new(
            crate::authz::StaticAuthorizer::load(path)
                .map_err(|e| anyhow::anyhow!("--authz {e}"))?,
        ),
        None => std::sync::Arc::new(crate::authz::NoAuthorizer),
    })
}
