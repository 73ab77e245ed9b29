//! GpuPolicyExceptions in `PolicyTest` documents: the exceptions a test
//! puts in the cluster (`spec.exceptions`), and the check of what they let
//! through against a case's `expect.excepted`.
use crate::admission::Bundle;
use crate::exceptions::{self, Exception};
use crate::offline;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

/// One policy result an exception is expected to let through.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ExpectedException {
    policy: String,
    /// `namespace/name`; any exception when left out.
    #[serde(default)]
    exception: Option<String>,
}

impl ExpectedException {
    fn matches(&self, policy: &str, exception: &str) -> bool {
        self.policy == policy && self.exception.as_deref().is_none_or(|e| e == exception)
    }
}

impl std::fmt::Display for ExpectedException {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.exception {
            Some(e) => write!(f, "{} by {e}", self.policy),
            None => write!(f, "{} by any exception", self.policy),
        }
    }
}

/// Compares what exceptions let through with `expect.excepted`: every
/// expected entry met, and nothing let through that no entry names (none
/// at all without `expect.excepted`).
pub(super) fn check_excepted(
    want: Option<&[ExpectedException]>,
    got: &[crate::exceptions::Excepted],
    failures: &mut Vec<String>,
) {
    let got: BTreeSet<(&str, &str)> = got
        .iter()
        .map(|e| (&*e.policy, e.exception.as_str()))
        .collect();
    let want = want.unwrap_or_default();
    for w in want {
        if !got.iter().any(|(p, e)| w.matches(p, e)) {
            let found: Vec<String> = got.iter().map(|(p, e)| format!("{p} by {e}")).collect();
            failures.push(format!(
                "expected an exception to let through {w}; let through: {found:?}"
            ));
        }
    }
    for (policy, exception) in &got {
        if !want.iter().any(|w| w.matches(policy, exception)) {
            failures.push(format!(
                "{policy} was let through by exception {exception}, which the case does not expect (add `- {{policy: {policy}, exception: {exception}}}` to expect.excepted)"
            ));
        }
    }
}

/// The exceptions of `spec.exceptions`: inline documents and the
/// GpuPolicyExceptions of `{file: PATH}` manifests, read with the set's
/// CEL environment. One without a namespace is in `default`.
pub(super) fn test_exceptions(
    bundle: &Bundle,
    entries: &[Value],
    base: &Path,
) -> Result<Vec<Arc<Exception>>, String> {
    let mut out: Vec<Arc<Exception>> = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let documents = match entry.get("file").and_then(Value::as_str) {
            Some(file) if entry.as_object().is_some_and(|m| m.len() == 1) => {
                let objects = offline::read_manifest(&base.join(file))
                    .map_err(|e| format!("spec.exceptions[{i}]: {e}"))?;
                let found: Vec<Value> = objects
                    .into_iter()
                    .filter(|o| o.get("kind").and_then(Value::as_str) == Some(exceptions::KIND))
                    .collect();
                if found.is_empty() {
                    return Err(format!(
                        "spec.exceptions[{i}]: {file} holds no {}",
                        exceptions::KIND
                    ));
                }
                found
            }
            _ => vec![entry.clone()],
        };
        for mut document in documents {
            if document.get("kind").and_then(Value::as_str) != Some(exceptions::KIND) {
                return Err(format!(
                    "spec.exceptions[{i}]: kind {:?} is not {}; give a GpuPolicyException or {{file: PATH}}",
                    document.get("kind").and_then(Value::as_str).unwrap_or_default(),
                    exceptions::KIND
                ));
            }
            if let Some(meta) = document.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.entry("namespace").or_insert(Value::from("default"));
            }
            let exception = bundle
                .policies
                .read_exception(&document)
                .map_err(|errors| {
                    let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
                    format!("spec.exceptions[{i}]: {}", errors.join("; "))
                })?;
            if out.iter().any(|e| e.id() == exception.id()) {
                return Err(format!(
                    "spec.exceptions[{i}]: GpuPolicyException {} is given twice",
                    exception.id()
                ));
            }
            out.push(Arc::new(exception));
        }
    }
    Ok(out)
}
