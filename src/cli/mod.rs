//! Subcommands of the `gpu-admission` binary. Each exposes its clap `Args`
//! and `run(args) -> anyhow::Result<ExitCode>`.
pub mod audit;
pub mod certs;
pub mod evaluate;
pub mod lint;
pub mod policy_args;
pub mod serve;
pub mod test;
