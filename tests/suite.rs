//! The integration tests, one binary: each module is one area's tests,
//! named as its file in `tests/` is (`cargo test --test suite schemas::`
//! runs one). One binary links the crate and its dependencies once rather
//! than once a file, and its tests share the runner's threads.
//!
//! Tests that need a process of their own stay binaries of their own: a
//! global allocator (`decode_estimate`), a global tracing subscriber
//! (`server_logging`), hostile connections and memory (`hostile_*`, which
//! load the machine), and the tests CI runs again on the release build
//! (`release_checks`: the hostile clients, and the generated suites at
//! full size).

// Tests read fixtures with `Value::pointer`: clippy.toml keeps it out of
// the crate itself, where objects under admission are read per request.
#![allow(clippy::disallowed_methods)]

mod common;

mod access_review;
mod agents_and_init_containers_cluster;
mod answering_threads;
mod audit;
mod audit_budgets;
mod audit_exceptions_cluster;
mod audit_holding;
mod audit_html;
mod audit_kueue;
mod audit_unhealthy_gpus;
mod audit_utilization;
mod audit_waste;
mod budgets_cluster;
mod bypass_ephemeral_containers;
mod bypass_owner_references;
mod capacity_cluster;
mod capacity_e2e;
mod capacity_paths_cluster;
mod cel_conformance;
mod cel_kubernetes_decisions;
mod cli;
mod cli_exceptions;
mod cluster_fake;
mod cluster_faults;
mod cluster_path;
mod corpus_verdicts;
mod denial_messages_cluster;
mod docs_budgets;
mod docs_exceptions;
mod dra_cluster;
mod dra_nodes_cluster;
mod evaluate_cluster;
mod exception_guard_policy;
mod exceptions_cluster;
mod exempt_label_policy;
mod fit_and_reach_cluster;
mod gpu_boundary_cluster;
mod hide_by_default_cluster;
mod idle_patterns_cluster;
mod known_kinds;
mod kubescape_library;
mod kueue_cluster;
mod layering;
mod managed_certs;
mod mutating_policies;
mod observability;
mod placement;
mod plan_passes;
mod pod_fit_cluster;
mod policy_engine;
mod policy_exceptions;
mod policy_library;
mod policy_loading;
mod policy_matching;
mod policy_params;
mod policy_pod_templates;
mod policy_reload;
mod policy_reports_cluster;
mod policy_test_format;
mod schemas;
mod server_certs;
mod server_endpoints;
mod server_load;
mod server_readiness;
mod server_shutdown;
mod server_tls;
mod tiers_cluster;
mod tiers_e2e;
mod unhealthy_gpu_nodes_cluster;
mod webhook_e2e;
mod windows_cluster;
mod workload_kinds_cluster;
mod workload_kinds_corpus;
mod workload_kinds_custom;
mod workloads_cluster;
mod workloads_e2e;

/// Cargo does not look for test files here (`autotests = false`): a file
/// in `tests/` runs only as a module of a binary or as a `[[test]]` of
/// `Cargo.toml`, so one that is neither would never compile or run.
#[test]
fn every_test_file_is_a_module_or_a_binary() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |path: &std::path::Path| std::fs::read_to_string(path).unwrap();
    let manifest = read(&root.join("Cargo.toml"));
    let binaries: Vec<&str> = (manifest.lines())
        .filter_map(|l| l.strip_prefix("path = \"tests/")?.strip_suffix(".rs\""))
        .collect();
    let mut modules = Vec::new();
    for binary in &binaries {
        let source = read(&root.join(format!("tests/{binary}.rs")));
        let declared = source
            .lines()
            .filter_map(|l| l.strip_prefix("mod ")?.strip_suffix(';'));
        modules.extend(declared.map(str::to_string));
    }
    let mut orphans = Vec::new();
    for entry in std::fs::read_dir(root.join("tests")).unwrap() {
        let path = entry.unwrap().path();
        let (Some(stem), Some("rs")) = (
            path.file_stem().and_then(|s| s.to_str()),
            path.extension().and_then(|e| e.to_str()),
        ) else {
            continue;
        };
        if !binaries.contains(&stem) && !modules.iter().any(|m| m == stem) {
            orphans.push(stem.to_string());
        }
    }
    assert!(
        binaries.contains(&"suite") && modules.len() > 70,
        "{binaries:?} {modules:?}"
    );
    assert!(
        orphans.is_empty(),
        "tests/{{{}}}.rs: neither a module of tests/suite.rs (or another test binary) nor a [[test]] of Cargo.toml",
        orphans.join(",")
    );
}
