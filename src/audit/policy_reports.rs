//! The audit's findings as policy reports, in either [`Schema`]:
//! `wgpolicyk8s.io/v1alpha2` PolicyReports (`kubectl get policyreports
//! -A`, Policy Reporter) or their successor `openreports.io/v1alpha1`
//! Reports (`kubectl get reports -A`), with the same results. One writer,
//! used by `audit -o policyreport|openreports` and by the periodic
//! report's in-cluster reports. One report named [`REPORT_NAME`] per
//! namespace (a ClusterPolicyReport or ClusterReport for cluster-scoped
//! objects), the costliest results first, messages capped at
//! [`MAX_MESSAGE`] characters, at most `max_results` results (the rest
//! counted in the summary and [`LEFT_OUT_ANNOTATION`]).
use super::{ExceptedFinding, Finding, Report};
pub use crate::cluster::policy_reports::Schema;
use crate::cluster::policy_reports::MANAGED_BY;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

/// The name of the report in each namespace.
pub const REPORT_NAME: &str = "gpu-admission";
/// The managed-by label value of the reports, and their results' `source`.
pub const MANAGER: &str = "gpu-admission";
/// Annotation saying how many findings of the namespace its report leaves
/// out (absent when none is).
pub const LEFT_OUT_ANNOTATION: &str = "gpu-admission.io/results-left-out";
/// Characters of a finding's message kept in its result.
pub const MAX_MESSAGE: usize = 512;

/// Every report of `report` in `schema`, made at `at` (the results'
/// timestamp), in namespace order: one per namespace with a finding,
/// something an exception let through, or a passing object; the
/// cluster-scoped ones (namespace `""`) in a cluster-scoped report.
pub fn reports(report: &Report, at: SystemTime, max_results: usize, schema: Schema) -> Vec<Value> {
    by_namespace(report, at, max_results, schema)
        .into_values()
        .collect()
}

/// [`reports`], by namespace (`""` for the cluster-scoped one).
pub fn by_namespace(
    report: &Report,
    at: SystemTime,
    max_results: usize,
    schema: Schema,
) -> BTreeMap<String, Value> {
    let namespace_of = |namespace: &Option<String>| namespace.clone().unwrap_or_default();
    let mut namespaces: BTreeSet<String> = report.passed.keys().cloned().collect();
    namespaces.extend(report.findings.iter().map(|f| namespace_of(&f.namespace)));
    namespaces.extend(report.excepted.iter().map(|e| namespace_of(&e.namespace)));
    let timestamp = timestamp(at);
    namespaces
        .into_iter()
        .map(|namespace| {
            let mut findings: Vec<&Finding> = (report.findings.iter())
                .filter(|f| namespace_of(&f.namespace) == namespace)
                .collect();
            let mut excepted: Vec<&ExceptedFinding> = (report.excepted.iter())
                .filter(|e| namespace_of(&e.namespace) == namespace)
                .collect();
            // The costliest first, then a stable order, so what a bound
            // leaves out is the cheapest and the same from run to run;
            // what exceptions let through after every finding.
            findings.sort_by(|a, b| {
                (b.gpus.cmp(&a.gpus))
                    .then_with(|| (&a.kind, &a.name, &a.policy).cmp(&(&b.kind, &b.name, &b.policy)))
            });
            excepted.sort_by(|a, b| {
                (b.gpus, &a.kind, &a.name, &a.policy).cmp(&(a.gpus, &b.kind, &b.name, &b.policy))
            });
            let fail = findings.iter().filter(|f| result_of(f) == "fail").count();
            let warn = findings.len() - fail;
            let left_out = (findings.len() + excepted.len()).saturating_sub(max_results);
            let results: Vec<Value> = (findings.iter().map(|f| entry(f, &timestamp)))
                .chain(excepted.iter().map(|e| skipped_entry(e, &timestamp)))
                .take(max_results)
                .collect();
            let mut metadata = json!({"name": REPORT_NAME, "labels": {MANAGED_BY: MANAGER}});
            if !namespace.is_empty() {
                metadata["namespace"] = json!(namespace);
            }
            if left_out > 0 {
                metadata["annotations"] = json!({LEFT_OUT_ANNOTATION: left_out.to_string()});
            }
            let mut object = json!({
                "apiVersion": schema.api_version(),
                "kind": schema.kind(namespace.is_empty()),
                "metadata": metadata,
                "summary": {
                    "pass": report.passed.get(&namespace).copied().unwrap_or(0),
                    "fail": fail,
                    "warn": warn,
                    "error": 0,
                    "skip": excepted.len(),
                },
                "results": results,
            });
            // OpenReports says who wrote the report and, for a
            // namespace's, what it covers.
            if schema == Schema::OpenReports {
                object["source"] = json!(MANAGER);
                if !namespace.is_empty() {
                    object["scope"] =
                        json!({"apiVersion": "v1", "kind": "Namespace", "name": namespace});
                }
            }
            (namespace, object)
        })
        .collect()
}

/// The result entry of what an exception let through: `skip`, as Kyverno
/// reports what its PolicyExceptions let through, with the exception, its
/// reason and its end in `properties`.
fn skipped_entry(excepted: &ExceptedFinding, timestamp: &Value) -> Value {
    let e = excepted;
    let mut properties = json!({
        "action": e.action,
        "gpus": e.gpus.to_string(),
        "exception": e.exception,
        "exceptionReason": capped(&e.reason),
    });
    if let Some(at) = &e.expires_at {
        properties["exceptionExpiresAt"] = json!(at);
    }
    let resource = resource(&e.api_version, &e.kind, &e.namespace, &e.name, &None);
    let message = format!("{} ({})", e.message, e.allowed_by());
    let said = ("skip", "info", message.as_str());
    result_entry(&e.policy, said, resource, properties, timestamp)
}

/// `pass|fail|warn|error|skip` of a finding, as `audit -o policyreport`
/// says it: a violation the webhook denies is `fail`, one it only warns
/// about or audits is `warn`.
fn result_of(finding: &Finding) -> &'static str {
    match finding.action {
        "deny" => "fail",
        _ => "warn",
    }
}

/// The result entry of one finding.
fn entry(f: &Finding, timestamp: &Value) -> Value {
    let resource = resource(&f.api_version, &f.kind, &f.namespace, &f.name, &f.uid);
    let mut properties = json!({
        "action": f.action,
        "gpus": f.gpus.to_string(),
    });
    // GPUs asked for and not placed yet (Pending pods), when there are any.
    if f.gpus_pending > 0 {
        properties["gpusPending"] = json!(f.gpus_pending.to_string());
    }
    let severity = if f.action == "deny" { "high" } else { "medium" };
    let said = (result_of(f), severity, f.message.as_str());
    result_entry(&f.policy, said, resource, properties, timestamp)
}

/// The object a result is about.
fn resource(
    api_version: &str,
    kind: &str,
    namespace: &Option<String>,
    name: &str,
    uid: &Option<String>,
) -> Value {
    let mut resource = json!({"apiVersion": api_version, "kind": kind, "name": name});
    if let Some(namespace) = namespace {
        resource["namespace"] = json!(namespace);
    }
    if let Some(uid) = uid {
        resource["uid"] = json!(uid);
    }
    resource
}

/// A result of `policy` on `resource`: what it `said` (result, severity,
/// message, the message capped).
fn result_entry(
    policy: &str,
    (result, severity, message): (&str, &str, &str),
    resource: Value,
    properties: Value,
    timestamp: &Value,
) -> Value {
    json!({
        "source": MANAGER,
        "policy": policy,
        "rule": policy,
        "result": result,
        "scored": true,
        "severity": severity,
        "category": "GPU",
        "message": capped(message),
        "resources": [resource],
        "properties": properties,
        "timestamp": timestamp,
    })
}

fn capped(message: &str) -> String {
    match message.char_indices().nth(MAX_MESSAGE) {
        Some((end, _)) => format!("{}…", &message[..end]),
        None => message.to_string(),
    }
}

fn timestamp(at: SystemTime) -> Value {
    let since = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    json!({"seconds": since.as_secs(), "nanos": since.subsec_nanos()})
}
