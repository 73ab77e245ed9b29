//! Policy files in Kubernetes' ValidatingAdmissionPolicy format: loading,
//! matching and evaluation.
use crate::review::Request;
use std::collections::BTreeMap;

/// Looks up Namespace objects for `namespaceObject` and namespaceSelector.
pub trait NamespaceLookup: Send + Sync {
    /// The Namespace object named `name`, as JSON, if known.
    fn namespace(&self, name: &str) -> Option<serde_json::Value>;
}

/// Compiled policies, bindings and params.
#[derive(Clone, Debug, Default)]
pub struct PolicySet {}

/// Result of evaluating every policy against one request.
#[derive(Clone, Debug, Default)]
pub struct Verdict {
    /// One line per violated Deny binding: `<policy>: <message>`.
    pub denials: Vec<String>,
    pub warnings: Vec<String>,
    pub audit_annotations: BTreeMap<String, String>,
    /// One entry per binding evaluated, for metrics.
    pub evaluations: Vec<PolicyEvaluation>,
}

/// How one policy binding came out on one request.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyEvaluation {
    pub policy: String,
    pub result: EvaluationResult,
    pub duration: std::time::Duration,
}

/// A bounded set of outcomes, usable as a metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvaluationResult {
    /// Matched, and every validation passed.
    Pass,
    /// A validation failed under a Deny action.
    Deny,
    /// A validation failed under Warn or Audit only.
    Warn,
    /// The evaluation failed (CEL error, cost limit, missing params).
    Error,
}

impl EvaluationResult {
    pub fn as_str(self) -> &'static str {
        match self {
            EvaluationResult::Pass => "pass",
            EvaluationResult::Deny => "deny",
            EvaluationResult::Warn => "warn",
            EvaluationResult::Error => "error",
        }
    }
}

impl PolicySet {
    /// Evaluates every matching binding (placeholder until the engine lands).
    pub fn evaluate(&self, _req: &Request, _namespaces: &dyn NamespaceLookup) -> Verdict {
        Verdict::default()
    }
}
