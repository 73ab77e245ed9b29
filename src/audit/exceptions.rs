//! GpuPolicyExceptions in the audit: the findings an exception lets
//! through (not violations: shown and counted apart), and the exceptions
//! themselves, with their state and what they let through in the run.
use super::{namespace_prefix, Finding, Report};
use crate::exceptions::Excepted;
use crate::exceptions::{self, Exception, State, EXPIRING_SOON};
use crate::k8s::json::str_at;
use crate::k8s::labels::{LabelSelector, SelectorOp};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::SystemTime;

/// A policy result on one object that an exception let through: it would
/// have been a finding.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExceptedFinding {
    pub policy: String,
    /// `deny`, `warn` or `audit`: what the policy's binding would have done.
    pub action: &'static str,
    pub api_version: String,
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    pub message: String,
    /// The exception's `namespace/name`.
    pub exception: String,
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// GPUs the object holds (as [`Finding::gpus`]).
    pub gpus: i64,
}

impl ExceptedFinding {
    /// `allowed by exception ns/name (reason, expires ...)`.
    pub fn allowed_by(&self) -> String {
        let expiry = self
            .expires_at
            .as_ref()
            .map_or("no expiry".into(), |at| format!("expires {at}"));
        let (exception, reason) = (&self.exception, self.reason.trim());
        format!("allowed by exception {exception} ({reason}, {expiry})")
    }
}

/// One GpuPolicyException as the report lists it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExceptionEntry {
    pub namespace: String,
    pub name: String,
    pub policies: Vec<String>,
    #[serde(rename = "match")]
    pub match_: MatchView,
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// `active`, `expired`, or `invalid` (it does not read: `errors` say
    /// why, and it lets nothing through).
    pub state: &'static str,
    /// Active and ending within 7 days.
    pub expiring_soon: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// What it let through in this run: one line per object and policy.
    pub let_through: Vec<String>,
}

impl ExceptionEntry {
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// An exception's `match`, as written.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MatchView {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// The label selector in `kubectl` form (`app=x,tier in (a,b)`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expression: Option<String>,
}

impl MatchView {
    /// One line: `kinds Pod, Job; names nccl-bench-*; selector app=x`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.kinds.is_empty() {
            parts.push(format!("kinds {}", self.kinds.join(", ")));
        }
        if !self.names.is_empty() {
            parts.push(format!("names {}", self.names.join(", ")));
        }
        if let Some(s) = &self.selector {
            parts.push(format!("selector {s}"));
        }
        if let Some(e) = &self.expression {
            parts.push(format!("expression {e}"));
        }
        parts.join("; ")
    }
}

/// A selector as `kubectl get -l` writes one.
fn selector_text(selector: &LabelSelector) -> String {
    let mut parts: Vec<String> = (selector.match_labels.iter())
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for r in &selector.match_expressions {
        parts.push(match r.operator {
            SelectorOp::In => format!("{} in ({})", r.key, r.values.join(",")),
            SelectorOp::NotIn => format!("{} notin ({})", r.key, r.values.join(",")),
            SelectorOp::Exists => r.key.clone(),
            SelectorOp::DoesNotExist => format!("!{}", r.key),
        });
    }
    if parts.is_empty() {
        "(every object)".to_string()
    } else {
        parts.join(",")
    }
}

/// A GpuPolicyException object that did not read, kept for the report.
#[derive(Clone, Debug, PartialEq)]
pub struct InvalidException {
    pub namespace: String,
    pub name: String,
    pub errors: Vec<String>,
}

impl InvalidException {
    pub fn new(object: &Value, errors: &[exceptions::ExceptionError]) -> InvalidException {
        InvalidException {
            namespace: str_at(object, "/metadata/namespace").to_string(),
            name: str_at(object, "/metadata/name").to_string(),
            errors: errors.iter().map(ToString::to_string).collect(),
        }
    }
}

/// Whether `object` is a GpuPolicyException (read as an exception, not
/// audited as an object).
pub fn is_exception(object: &Value) -> bool {
    str_at(object, "/apiVersion")
        .split_once('/')
        .is_some_and(|(group, _)| group == exceptions::GROUP)
        && str_at(object, "/kind") == exceptions::KIND
}

/// The `violations` of one object that remain once `excepted` let theirs
/// through: an exception that applies to an object covers every result of
/// the policy on it (its own and its template pods', whatever the
/// message), so a policy with an excepted result has no violation left.
pub(super) fn split_excepted(
    violations: Vec<(String, &'static str, String)>,
    excepted: &[Excepted],
) -> Vec<(String, &'static str, String)> {
    violations
        .into_iter()
        .filter(|(policy, _, _)| !excepted.iter().any(|e| *e.policy == **policy))
        .collect()
}

/// The excepted results of one object, as report entries.
pub(super) fn excepted_findings(excepted: &[Excepted], template: &Finding) -> Vec<ExceptedFinding> {
    let mut out: Vec<ExceptedFinding> = Vec::new();
    for finding in excepted.iter().map(|e| ExceptedFinding {
        policy: e.policy.to_string(),
        action: match e.action {
            "Deny" => "deny",
            "Warn" => "warn",
            _ => "audit",
        },
        api_version: template.api_version.clone(),
        kind: template.kind.clone(),
        namespace: template.namespace.clone(),
        name: template.name.clone(),
        message: e
            .message
            .split_once(": ")
            .map_or(e.message.as_str(), |(_, m)| m)
            .to_string(),
        exception: e.exception.clone(),
        reason: e.reason.clone(),
        expires_at: e.expires_at.clone(),
        gpus: template.gpus,
    }) {
        // A binding that warns and audits lets one result through once,
        // shown as its first action (as findings are).
        let seen = out.iter().any(|o| {
            o.policy == finding.policy
                && o.exception == finding.exception
                && o.message == finding.message
        });
        if !seen {
            out.push(finding);
        }
    }
    out
}

/// The report's exception entries: every exception of `known` (each id
/// once, the first kept) and every one of `invalid`, with its state at
/// `now` and what `excepted` says it let through. Expiring ones first,
/// then expired, invalid, and the rest, each by namespace and name.
pub fn entries(
    known: &[Arc<Exception>],
    invalid: &[InvalidException],
    excepted: &[ExceptedFinding],
    now: SystemTime,
) -> Vec<ExceptionEntry> {
    let mut let_through: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for f in excepted {
        let ns = namespace_prefix(&f.namespace);
        let line = format!(
            "{} {ns}{} through {} ({})",
            f.kind, f.name, f.policy, f.action
        );
        let lines = let_through.entry(&f.exception).or_default();
        if !lines.contains(&line) {
            lines.push(line);
        }
    }
    let mut out: Vec<ExceptionEntry> = Vec::new();
    for e in known {
        if out
            .iter()
            .any(|o| o.namespace == e.namespace && o.name == e.name)
        {
            continue;
        }
        let state = e.state(now);
        out.push(ExceptionEntry {
            namespace: e.namespace.clone(),
            name: e.name.clone(),
            policies: e.policies.clone(),
            match_: MatchView {
                kinds: e.kinds.clone(),
                names: e.names.clone(),
                selector: e.selector.as_ref().map(selector_text),
                expression: e.expression.as_ref().map(|c| c.source().to_string()),
            },
            reason: e.reason.trim().to_string(),
            requested_by: e.requested_by.clone(),
            expires_at: e.expires_at.as_ref().map(|(_, t)| t.clone()),
            state: state.as_str(),
            expiring_soon: e.expiring_soon(now),
            errors: Vec::new(),
            let_through: let_through.remove(e.id().as_str()).unwrap_or_default(),
        });
    }
    for e in invalid {
        out.push(ExceptionEntry {
            namespace: e.namespace.clone(),
            name: e.name.clone(),
            state: "invalid",
            errors: e.errors.clone(),
            ..ExceptionEntry::default()
        });
    }
    let rank = |e: &ExceptionEntry| match (e.expiring_soon, e.state) {
        (true, _) => 0,
        (_, "expired") => 1,
        (_, "invalid") => 2,
        _ => 3,
    };
    out.sort_by(|a, b| (rank(a), &a.namespace, &a.name).cmp(&(rank(b), &b.namespace, &b.name)));
    out
}

/// Sets the report's exception list from `known` and `invalid` and the
/// excepted findings it holds.
pub fn list(
    report: &mut Report,
    known: &[Arc<Exception>],
    invalid: &[InvalidException],
    now: SystemTime,
) {
    report.exceptions = entries(known, invalid, &report.excepted, now);
}

/// The text report's exception part: what was let through, then each
/// exception (expiring and expired ones first).
pub fn render_text(report: &Report) -> String {
    let mut out = String::new();
    for note in &report.exception_notes {
        let _ = writeln!(out, "\nnote: {note}");
    }
    if report.exceptions.is_empty() && report.excepted.is_empty() {
        return out;
    }
    let soon = report.exceptions.iter().filter(|e| e.expiring_soon).count();
    let expired = (report.exceptions.iter())
        .filter(|e| e.state == State::Expired.as_str())
        .count();
    let _ = writeln!(
        out,
        "\nGpuPolicyExceptions: {}, {soon} expiring within {} days, {expired} expired; {} policy results let through (not counted as findings)",
        report.exceptions.len(),
        EXPIRING_SOON.as_secs() / 86_400,
        report.excepted.len()
    );
    for e in &report.exceptions {
        let flag = match (e.expiring_soon, e.state) {
            (true, _) => " [EXPIRING SOON]",
            (_, "expired") => " [EXPIRED: delete it]",
            (_, "invalid") => " [INVALID: lets nothing through]",
            _ => "",
        };
        let _ = writeln!(out, "  {}{flag}", e.id());
        if !e.errors.is_empty() {
            for err in &e.errors {
                let _ = writeln!(out, "    error: {err}");
            }
            continue;
        }
        let _ = writeln!(
            out,
            "    policies {}; {}; expires {}; requested by {}",
            e.policies.join(", "),
            e.match_.describe(),
            e.expires_at.as_deref().unwrap_or("never"),
            e.requested_by.as_deref().unwrap_or("(not recorded)")
        );
        let _ = writeln!(out, "    reason: {}", e.reason);
        for line in &e.let_through {
            let _ = writeln!(out, "    let through: {line}");
        }
    }
    for f in &report.excepted {
        let ns = namespace_prefix(&f.namespace);
        let _ = writeln!(
            out,
            "{} {ns}{}: [{}] {}: {} — {}",
            f.kind,
            f.name,
            f.action,
            f.policy,
            f.message,
            f.allowed_by()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::labels::LabelRequirement;

    fn result(policy: &str, message: &str, action: &'static str) -> Excepted {
        Excepted {
            policy: policy.into(),
            exception: "ml/e".into(),
            reason: "r".into(),
            expires_at: None,
            message: format!("{policy}: {message}"),
            action,
        }
    }

    #[test]
    fn excepted_lines_leave_the_violations_and_others_stay() {
        let violations = vec![
            (
                "no-latest".to_string(),
                "deny",
                "image is latest".to_string(),
            ),
            (
                "no-sleep".to_string(),
                "warn",
                "sleeps (allowed by GpuPolicyException ml/e (r; no expiry))".to_string(),
            ),
            ("no-sleep".to_string(), "audit", "sleeps".to_string()),
            ("gpu-max".to_string(), "deny", "too many GPUs".to_string()),
        ];
        let excepted = [
            result("no-latest", "image is latest", "Deny"),
            result("no-sleep", "sleeps", "Warn"),
            result("no-sleep", "sleeps", "Audit"),
        ];
        let left = split_excepted(violations, &excepted);
        assert_eq!(
            left,
            [("gpu-max".to_string(), "deny", "too many GPUs".to_string())]
        );
        let template = Finding {
            policy: String::new(),
            action: "deny",
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: Some("ml".into()),
            name: "p".into(),
            uid: None,
            message: String::new(),
            gpus: 2,
            gpus_pending: 0,
        };
        let found = excepted_findings(&excepted, &template);
        let shown: Vec<(&str, &str, &str)> = found
            .iter()
            .map(|f| (f.policy.as_str(), f.action, f.message.as_str()))
            .collect();
        // A warning that is also audited is shown once, as a warning.
        assert_eq!(
            shown,
            [
                ("no-latest", "deny", "image is latest"),
                ("no-sleep", "warn", "sleeps")
            ]
        );
        assert_eq!(
            found[0].allowed_by(),
            "allowed by exception ml/e (r, no expiry)"
        );
    }

    #[test]
    fn selectors_read_as_kubectl_writes_them() {
        let selector = LabelSelector {
            match_labels: [("app".to_string(), "bench".to_string())].into(),
            match_expressions: vec![
                LabelRequirement {
                    key: "tier".into(),
                    operator: SelectorOp::In,
                    values: vec!["a".into(), "b".into()],
                },
                LabelRequirement {
                    key: "debug".into(),
                    operator: SelectorOp::DoesNotExist,
                    values: vec![],
                },
            ],
        };
        assert_eq!(selector_text(&selector), "app=bench,tier in (a,b),!debug");
        assert_eq!(selector_text(&LabelSelector::default()), "(every object)");
    }

    #[test]
    fn entries_list_expiring_then_expired_then_invalid_then_the_rest() {
        let env = crate::cel::Env::new(crate::cel::Extensions::default());
        let read = |name: &str, expires: &str| {
            let value = serde_json::json!({
                "apiVersion": "gpu-admission.io/v1alpha1", "kind": "GpuPolicyException",
                "metadata": {"name": name, "namespace": "ml"},
                "spec": {"policies": ["p"], "match": {"names": ["x"]}, "reason": " why ", "expiresAt": expires},
            });
            Arc::new(exceptions::read(&value, &env).unwrap())
        };
        let now = exceptions::parse_time("2026-06-01T00:00:00Z").unwrap();
        let known = vec![
            read("a-later", "2026-09-01T00:00:00Z"),
            read("b-soon", "2026-06-03T00:00:00Z"),
            read("c-gone", "2026-05-01T00:00:00Z"),
            read("a-later", "2026-06-02T00:00:00Z"),
        ];
        let invalid = [InvalidException {
            namespace: "ml".into(),
            name: "d-bad".into(),
            errors: vec!["spec.reason: required".into()],
        }];
        let listed: Vec<(String, &str, bool)> = entries(&known, &invalid, &[], now)
            .into_iter()
            .map(|e| (e.name, e.state, e.expiring_soon))
            .collect();
        assert_eq!(
            listed,
            [
                ("b-soon".to_string(), "active", true),
                ("c-gone".to_string(), "expired", false),
                ("d-bad".to_string(), "invalid", false),
                ("a-later".to_string(), "active", false),
            ]
        );
    }
}
