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
        "authz",
        "budgets",
        "bundle",
        "cel",
        "certs",
        "cli",
        "cluster",
        "daemon",
        "exceptions",
        "gpu",
        "inventory",
        "kueue",
        "offline",
        "placement",
        "policy",
        "periodic",
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
    let found = uses("server", &["audit", "inventory", "periodic"]);
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

/// Every module of the crate and the modules it may use, lowest layer
/// first: the table docs/architecture.md draws. A module may use only
/// modules listed before it, so the layers have no circle; a new module
/// must be placed here before it is used.
const LAYERS: &[(&str, &[&str])] = &[
    ("allocator", &[]),
    ("authz", &[]),
    ("k8s", &[]),
    ("review", &["k8s"]),
    ("gpu", &["k8s"]),
    ("budgets", &["gpu", "k8s"]),
    ("inventory", &["k8s"]),
    ("certs", &[]),
    ("kueue", &["k8s", "review"]),
    ("cel", &["authz", "gpu", "k8s"]),
    ("exceptions", &["cel", "k8s", "review"]),
    ("server", &["certs", "review"]),
    (
        "cluster",
        &[
            "authz",
            "budgets",
            "certs",
            "exceptions",
            "gpu",
            "inventory",
            "k8s",
        ],
    ),
    ("placement", &["gpu", "k8s", "review"]),
    (
        "subject",
        &[
            "authz",
            "cel",
            "exceptions",
            "gpu",
            "k8s",
            "kueue",
            "placement",
            "review",
        ],
    ),
    ("policy", &["cel", "exceptions", "k8s", "review", "subject"]),
    (
        "admission",
        &[
            "authz",
            "budgets",
            "cel",
            "exceptions",
            "gpu",
            "k8s",
            "kueue",
            "placement",
            "policy",
            "review",
            "server",
            "subject",
        ],
    ),
    (
        "bundle",
        &[
            "admission",
            "budgets",
            "cel",
            "exceptions",
            "gpu",
            "k8s",
            "placement",
            "policy",
        ],
    ),
    (
        "offline",
        &["admission", "exceptions", "k8s", "policy", "review"],
    ),
    (
        "audit",
        &[
            "admission",
            "budgets",
            "cluster",
            "exceptions",
            "gpu",
            "k8s",
            "kueue",
            "offline",
            "placement",
            "policy",
            "review",
        ],
    ),
    (
        "periodic",
        &[
            "admission",
            "audit",
            "bundle",
            "cluster",
            "inventory",
            "k8s",
            "policy",
            "server",
        ],
    ),
    (
        "testing",
        &[
            "admission",
            "authz",
            "budgets",
            "exceptions",
            "gpu",
            "k8s",
            "offline",
            "policy",
            "review",
        ],
    ),
    (
        "daemon",
        &["audit", "certs", "cluster", "kueue", "periodic", "server"],
    ),
    ("cli", &["*"]),
];

/// The crate's top-level modules, as the sources lay them out.
fn modules() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_stem()?.to_str()?.to_string();
            let module = p.is_dir() || p.extension().is_some_and(|e| e == "rs");
            (module && name != "lib" && name != "main").then_some(name)
        })
        .collect();
    out.sort();
    out
}

/// The product code of a source file: its unit tests (a `#[cfg(test)]`
/// block, a `tests.rs` file or a `tests/` folder) left out.
fn product_code(file: &Path) -> Option<String> {
    let is_test = file.file_stem().is_some_and(|s| s == "tests")
        || file.components().any(|c| c.as_os_str() == "tests");
    if is_test {
        return None;
    }
    let text = std::fs::read_to_string(file).unwrap();
    Some(
        text.split("#[cfg(test)]")
            .next()
            .unwrap_or_default()
            .to_string(),
    )
}

/// The crate's modules that `module`'s product code uses.
fn used_by(module: &str, all: &[String]) -> std::collections::BTreeSet<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let dir = root.join(module);
    let files = if dir.is_dir() {
        rust_files(&dir)
    } else {
        vec![root.join(format!("{module}.rs"))]
    };
    let mut used = std::collections::BTreeSet::new();
    for file in files {
        let Some(code) = product_code(&file) else {
            continue;
        };
        for line in code.lines() {
            let code = line.split("//").next().unwrap_or_default();
            for other in all {
                let path = format!("crate::{other}");
                let found = code.match_indices(&path).any(|(i, _)| {
                    let next = code[i + path.len()..].chars().next();
                    !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
                });
                if other != module && found {
                    used.insert(other.clone());
                }
            }
        }
    }
    used
}

#[test]
fn every_module_keeps_to_its_layer() {
    let all = modules();
    let placed: Vec<&str> = LAYERS.iter().map(|(m, _)| *m).collect();
    let unplaced: Vec<&String> = all
        .iter()
        .filter(|m| !placed.contains(&m.as_str()))
        .collect();
    assert!(
        unplaced.is_empty(),
        "modules with no place in LAYERS (and docs/architecture.md): {unplaced:?}"
    );
    let gone: Vec<&&str> = placed
        .iter()
        .filter(|m| !all.iter().any(|a| a == *m))
        .collect();
    assert!(
        gone.is_empty(),
        "LAYERS names modules that are gone: {gone:?}"
    );
    let mut wrong = Vec::new();
    for (i, (module, allowed)) in LAYERS.iter().enumerate() {
        for dep in allowed.iter().filter(|d| **d != "*") {
            // Only lower layers: the table itself has no circle.
            assert!(
                placed[..i].contains(dep),
                "{module} may use {dep}, which is not below it in LAYERS"
            );
        }
        if allowed.contains(&"*") {
            continue;
        }
        for used in used_by(module, &all) {
            if !allowed.contains(&used.as_str()) {
                wrong.push(format!("{module} uses {used}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "uses outside the layers:\n{}",
        wrong.join("\n")
    );
}

/// Only the cluster layer (and the CLI, which builds clients) talks to
/// kube-apiserver: no other product file names the `kube` crate.
#[test]
fn only_the_cluster_layer_talks_to_the_cluster() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    for file in rust_files(&root) {
        let relative = file.strip_prefix(&root).unwrap();
        let first = relative.components().next().unwrap().as_os_str();
        if first == "cluster" || first == "cli" {
            continue;
        }
        let Some(code) = product_code(&file) else {
            continue;
        };
        for (n, line) in code.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            // `kube::` as a path of its own, not the end of another name.
            let names_kube = code.match_indices("kube::").any(|(i, _)| {
                !code[..i]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_')
            });
            if names_kube {
                found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "kube used outside src/cluster:\n{}",
        found.join("\n")
    );
}
