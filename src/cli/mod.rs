//! Subcommands of the `gpu-admission` binary.
