//! CEL environment: Kubernetes libraries, host extensions, cost limits.
//!
//! Every expression is parsed and checked once, at load ([`compile`]); a
//! request converts its object to a CEL value once and evaluates the compiled
//! trees under a cost budget ([`evaluate`]). The Kubernetes CEL libraries
//! (quantity, lists, sets, regex, strings, url, ip/cidr, format, semver) come
//! from `kube-cel`; host extensions ([`Extensions`]) add functions and
//! per-request variables on top.

pub mod authz;
mod compile;
mod env;
mod evaluate;
pub mod fold;
pub mod gpu;
pub mod image;
mod limits;
pub mod portability;
mod program;
mod reach;
pub mod schema;
mod signatures;
mod sku_sets;
mod strings;
mod tree;
pub mod variables;
mod walk;

pub use compile::{
    compile, compile_here, compile_mutation_written, compile_written, on_compile_stack,
    CompileError, Compiled,
};
pub use env::{Env, Extension, Extensions};
pub use evaluate::{
    aside, deadline_passed, describe_error, evaluate, evaluate_val, json_to_val, json_to_value,
    replay, to_value, type_name, with_deadline, with_policy_budget, EvalError,
};
/// The cel crate types extensions work with.
pub use kube_cel::cel::common::value::Val;
pub use kube_cel::cel::{Context, Value};
pub use limits::{Limits, EXPRESSION_COST_LIMIT, POLICY_COST_LIMIT};
pub use program::{Computed, Native, PolicyVariables, Program, Roots, VariableSource};
pub use reach::{json_to_val_within, Reach};
pub use tree::{to_tree, to_val, Hosts, SharedList, SharedLists, ToValError, Tree};

/// The variables Kubernetes gives admission policy expressions.
pub const BUILTIN_VARIABLES: &[&str] = &[
    "object",
    "oldObject",
    "request",
    "params",
    "namespaceObject",
    "variables",
    "authorizer",
];

#[cfg(test)]
mod tests;
