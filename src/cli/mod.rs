//! Subcommands of the `gpu-admission` binary.
pub mod evaluate;
pub mod lint;
pub mod policy_args;
pub mod test;
