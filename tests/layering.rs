//! The module layering docs/architecture.md describes, checked on the
//! sources: which modules may use which.
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// Lines of the module's sources (comments left out) that use one of the
/// `forbidden` modules of the crate.
fn uses(module: &str, forbidden: &[&str]) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let dir = root.join(module);
    let files = if dir.is_dir() {
        rust_files(&dir)
    } else {
        vec![root.join(format!("{module}.rs"))]
    };
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for other in forbidden {
                if code.contains(&format!("crate::{other}")) {
                    found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
    }
    found
}

#[test]
fn k8s_depends_on_nothing_else_in_the_crate() {
    let others = [
        "admission",
        "audit",
        "bundle",
        "cel",
        "certs",
        "cli",
        "exceptions",
        "gpu",
        "inventory",
        "offline",
        "placement",
        "policy",
        "report",
        "review",
        "server",
        "subject",
        "testing",
    ];
    let found = uses("k8s", &others);
    assert!(
        found.is_empty(),
        "k8s uses other modules:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_edge_knows_nothing_of_gpus_cel_or_policies() {
    let domain = [
        "gpu",
        "exceptions",
        "cel",
        "placement",
        "subject",
        "k8s",
        "policy",
        "admission",
        "exceptions",
    ];
    let found = uses("server", &domain);
    assert!(
        found.is_empty(),
        "server uses domain modules:\n{}",
        found.join("\n")
    );
}

/// The kinds the webhook gives the metrics are named on its side only:
/// the server's code (its tests aside) spells none of them.
#[test]
fn the_edge_names_no_kind() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/server");
    let mut found = Vec::new();
    for file in rust_files(&dir) {
        let text = std::fs::read_to_string(&file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (n, line) in code.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for kind in gpu_admission::admission::METRIC_KINDS {
                if code.contains(&format!("\"{kind}\"")) {
                    found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "server names kinds:\n{}",
        found.join("\n")
    );
}

#[test]
fn placement_does_not_depend_on_policy() {
    let found = uses("placement", &["policy", "admission", "server"]);
    assert!(found.is_empty(), "placement uses:\n{}", found.join("\n"));
}

#[test]
fn domain_modules_know_nothing_of_http() {
    for module in [
        "k8s",
        "authz",
        "gpu",
        "placement",
        "policy",
        "cel",
        "subject",
        "audit",
        "inventory",
        "exceptions",
    ] {
        let found = uses(module, &["server"]);
        assert!(
            found.is_empty(),
            "{module} uses the server:\n{}",
            found.join("\n")
        );
    }
}

#[test]
fn the_edge_serves_the_report_without_knowing_what_it_says() {
    let found = uses("server", &["audit", "inventory", "report"]);
    assert!(
        found.is_empty(),
        "server uses the report's domain:\n{}",
        found.join("\n")
    );
}

#[test]
fn exceptions_know_nothing_of_the_policy_engine_or_its_callers() {
    let found = uses(
        "exceptions",
        &["policy", "admission", "subject", "placement", "audit"],
    );
    assert!(found.is_empty(), "exceptions uses:\n{}", found.join("\n"));
}
