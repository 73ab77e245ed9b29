//! Subcommands of the `gpu-admission` binary. Each exposes its clap `Args`
//! and `run(args) -> anyhow::Result<ExitCode>`.
pub mod certs;
pub mod serve;
