//! Offline policy tests: `PolicyTest` documents run against a loaded bundle
//! exactly as the webhook would answer (mutation first, then validation of
//! the mutated object).
use crate::admission::{Admission, Bundle};
use crate::namespaces::StaticNamespaces;
use crate::offline::{self, build_request};
use crate::policy::Document;
use crate::review::Operation;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

/// One `PolicyTest` document.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PolicyTest {
    #[serde(rename = "apiVersion")]
    _api_version: String,
    #[serde(rename = "kind")]
    _kind: String,
    #[serde(default)]
    metadata: Metadata,
    spec: TestSpec,
}

#[derive(Debug, Default, Deserialize)]
struct Metadata {
    #[serde(default)]
    name: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TestSpec {
    #[serde(default)]
    namespaces: Vec<NamespaceSpec>,
    cases: Vec<Case>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NamespaceSpec {
    name: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Case {
    name: String,
    #[serde(default)]
    operation: Option<Operation>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    object: Option<Value>,
    #[serde(default)]
    file: Option<String>,
    #[serde(default)]
    old_object: Option<Value>,
    #[serde(default)]
    user_info: Option<Value>,
    expect: Expect,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Expect {
    #[serde(default)]
    allowed: Option<bool>,
    #[serde(default)]
    denied: Vec<String>,
    #[serde(default)]
    warnings: Vec<String>,
    #[serde(default)]
    no_warnings: bool,
    #[serde(default)]
    audit: BTreeMap<String, String>,
    #[serde(default)]
    patched: Option<Value>,
    #[serde(default)]
    no_patch: bool,
}

/// The outcome of one test case.
#[derive(Debug, Clone)]
pub struct CaseResult {
    /// `file: test / case`.
    pub name: String,
    /// Empty when the case passed; otherwise one line per unmet expectation.
    pub failures: Vec<String>,
}

impl CaseResult {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Runs every case of every `PolicyTest` document against `bundle`.
pub fn run(bundle: &Bundle, tests: &[Document]) -> Vec<CaseResult> {
    let mut results = Vec::new();
    for doc in tests {
        let file = doc.source.file.display().to_string();
        let test: PolicyTest = match serde_json::from_value(doc.value.clone()) {
            Ok(t) => t,
            Err(err) => {
                results.push(CaseResult {
                    name: format!("{file}: document {}", doc.source.document),
                    failures: vec![format!("not a valid PolicyTest: {err}")],
                });
                continue;
            }
        };
        let mut namespaces = StaticNamespaces::new();
        for ns in &test.spec.namespaces {
            namespaces.insert(&ns.name, namespace_labels(&ns.name, &ns.labels));
        }
        let admission = Admission::new(bundle.clone(), Arc::new(namespaces));
        let base = doc.source.file.parent().unwrap_or(Path::new("."));
        for case in &test.spec.cases {
            let name = format!("{file}: {} / {}", test.metadata.name, case.name);
            let failures = match run_case(&admission, case, base) {
                Ok(failures) => failures,
                Err(err) => vec![err],
            };
            results.push(CaseResult { name, failures });
        }
    }
    results
}

/// A namespace's labels as the cluster would have them: the apiserver
/// always adds `kubernetes.io/metadata.name`.
pub fn namespace_labels(name: &str, labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut labels = labels.clone();
    labels
        .entry("kubernetes.io/metadata.name".to_string())
        .or_insert_with(|| name.to_string());
    labels
}

/// Formats results as the `test` command prints them; the last line is
/// `N passed, N failed`.
pub fn report(results: &[CaseResult], verbose: bool) -> String {
    let mut out = String::new();
    for r in results {
        if r.passed() {
            if verbose {
                let _ = writeln!(out, "PASS {}", r.name);
            }
        } else {
            let _ = writeln!(out, "FAIL {}", r.name);
            for f in &r.failures {
                let _ = writeln!(out, "     {f}");
            }
        }
    }
    let passed = results.iter().filter(|r| r.passed()).count();
    let _ = writeln!(out, "{} passed, {} failed", passed, results.len() - passed);
    out
}

fn run_case(admission: &Admission, case: &Case, base: &Path) -> Result<Vec<String>, String> {
    let object = match (&case.object, &case.file) {
        (Some(obj), None) => obj.clone(),
        (None, Some(file)) => read_first_document(&base.join(file))?,
        (Some(_), Some(_)) => return Err("give either object or file, not both".into()),
        (None, None) if case.old_object.is_some() => Value::Null,
        (None, None) => return Err("case has no object".into()),
    };
    let operation = case.operation.unwrap_or(Operation::Create);
    let mut req = build_request(
        object,
        case.old_object.clone(),
        operation,
        case.namespace.as_deref(),
    );
    if let Some(user) = &case.user_info {
        req.user_info = user.clone();
    }

    let result = offline::evaluate(admission, req);
    let mut failures = Vec::new();
    let expect = &case.expect;
    if expect.no_patch && result.patch.is_some() {
        failures.push(format!(
            "expected no patch, got {}",
            serde_json::to_string(&result.patch).unwrap_or_default()
        ));
    }
    if let Some(want) = &expect.patched {
        match &result.patched {
            Some(got) if got == want => {}
            Some(got) => failures.push(format!(
                "patched object differs:\n{}",
                json_diff(want, got).join("\n")
            )),
            None => failures.push("expected a patched object, got no patch".to_string()),
        }
    }
    let message = result.denials.join("\n");
    let expected_allowed = expect.allowed.or(if expect.denied.is_empty() {
        None
    } else {
        Some(false)
    });
    if let Some(want) = expected_allowed {
        if want != result.allowed {
            failures.push(if want {
                format!("expected allowed, got denied: {message}")
            } else {
                "expected denied, got allowed".to_string()
            });
        }
    }
    for want in &expect.denied {
        if !message.contains(want.as_str()) {
            failures.push(format!("denial does not contain {want:?}: {message:?}"));
        }
    }
    for want in &expect.warnings {
        if !result.warnings.iter().any(|w| w.contains(want.as_str())) {
            failures.push(format!(
                "no warning contains {want:?}: {:?}",
                result.warnings
            ));
        }
    }
    if expect.no_warnings && !result.warnings.is_empty() {
        failures.push(format!("expected no warnings, got {:?}", result.warnings));
    }
    for (key, want) in &expect.audit {
        match result.audit_annotations.get(key) {
            Some(v) if v.contains(want.as_str()) => {}
            Some(v) => failures.push(format!(
                "audit annotation {key} = {v:?} does not contain {want:?}"
            )),
            None => failures.push(format!(
                "no audit annotation {key}; got {:?}",
                result.audit_annotations.keys().collect::<Vec<_>>()
            )),
        }
    }
    Ok(failures)
}

fn read_first_document(path: &Path) -> Result<Value, String> {
    offline::read_manifest(path)
        .map_err(|e| e.to_string())?
        .into_iter()
        .next()
        .ok_or_else(|| format!("{}: no object", path.display()))
}

/// Differences between two JSON values, one line each, by JSON pointer.
pub fn json_diff(want: &Value, got: &Value) -> Vec<String> {
    let mut out = Vec::new();
    diff_at(&mut String::new(), want, got, &mut out);
    out
}

fn diff_at(path: &mut String, want: &Value, got: &Value, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            let keys: std::collections::BTreeSet<&String> = w.keys().chain(g.keys()).collect();
            for key in keys {
                let len = path.len();
                path.push('/');
                path.push_str(&key.replace('~', "~0").replace('/', "~1"));
                match (w.get(key), g.get(key)) {
                    (Some(a), Some(b)) => diff_at(path, a, b, out),
                    (Some(a), None) => out.push(format!("  missing {path}: want {a}")),
                    (None, Some(b)) => out.push(format!("  unexpected {path}: {b}")),
                    (None, None) => {}
                }
                path.truncate(len);
            }
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            for (i, (a, b)) in w.iter().zip(g).enumerate() {
                let len = path.len();
                let _ = write!(path, "/{i}");
                diff_at(path, a, b, out);
                path.truncate(len);
            }
        }
        _ if want != got => out.push(format!(
            "  {}: want {want}, got {got}",
            if path.is_empty() { "/" } else { path }
        )),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn diff_names_pointers() {
        let want = json!({"spec": {"tolerations": [{"key": "sku"}], "a": 1}});
        let got = json!({"spec": {"tolerations": [{"key": "gpu"}], "b": 2}});
        let diff = json_diff(&want, &got);
        assert_eq!(diff.len(), 3, "{diff:?}");
        assert!(diff[0].contains("/spec/a"));
        assert!(diff[1].contains("/spec/b"));
        assert!(diff[2].contains("/spec/tolerations/0/key"));
    }

    #[test]
    fn report_ends_with_counts() {
        let results = vec![
            CaseResult {
                name: "a".into(),
                failures: vec![],
            },
            CaseResult {
                name: "b".into(),
                failures: vec!["expected denied, got allowed".into()],
            },
        ];
        let text = report(&results, false);
        assert!(text.contains("FAIL b"));
        assert!(!text.contains("PASS a"));
        assert_eq!(text.lines().last(), Some("1 passed, 1 failed"));
    }
}
