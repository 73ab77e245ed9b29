//! Policy files in Kubernetes' ValidatingAdmissionPolicy format: loading,
//! matching and evaluation, with kube-apiserver's semantics.
use crate::cel::{self, Env, EvalError, Extensions};
use crate::review::{GroupVersionKind, GroupVersionResource, Operation, Request};
use kube_cel::cel::{Context, Value};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

mod load;
mod matching;
mod model;
mod pool;
mod watch;

pub use load::{parse_documents, read_documents, Document, LoadError, LoadErrors, Source};
pub use matching::{LabelSelector, MatchResources};
pub use watch::{watch_dir, DirWatcher};

use model::{Action, Binding, FailurePolicy, Policy};

/// API version of the policy documents.
pub const API_VERSIONS: &[&str] = &[
    "admissionregistration.k8s.io/v1",
    "admissionregistration.k8s.io/v1beta1",
];
/// Audit annotation Kubernetes writes for validation failures under `Audit`.
pub const VALIDATION_FAILURE_ANNOTATION: &str =
    "validation.policy.admission.k8s.io/validation_failure";
/// Longest messageExpression result used (Kubernetes' 5 KiB).
const MAX_MESSAGE_LEN: usize = 5 * 1024;

/// Looks up Namespace objects for `namespaceObject` and namespaceSelector.
pub trait NamespaceLookup: Send + Sync {
    /// The Namespace object named `name`, as JSON, if known.
    fn namespace(&self, name: &str) -> Option<serde_json::Value>;
}

/// Compiled policies, bindings and params. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct PolicySet {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    env: Env,
    policies: Vec<Policy>,
    /// Bindings with the index of their policy, in file order.
    bindings: Vec<(Binding, usize)>,
    params: Vec<Param>,
    /// Every top-level variable some expression refers to.
    referenced: BTreeSet<String>,
}

#[derive(Debug)]
struct Param {
    api_version: String,
    kind: String,
    name: String,
    namespace: Option<String>,
    labels: BTreeMap<String, String>,
    value: Value,
}

/// Result of evaluating every policy against one request.
#[derive(Clone, Debug, Default)]
pub struct Verdict {
    /// One line per violated Deny binding: `<policy>: <message>`.
    pub denials: Vec<String>,
    pub warnings: Vec<String>,
    pub audit_annotations: BTreeMap<String, String>,
    /// One entry per binding evaluated, for metrics.
    pub evaluations: Vec<PolicyEvaluation>,
    /// The `reason` of the first denial (`Invalid` unless the validation
    /// names another); `None` when nothing was denied.
    pub reason: Option<String>,
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
    /// Compiles policies, bindings and params with no host extensions.
    pub fn compile(docs: &[Document]) -> Result<PolicySet, LoadErrors> {
        PolicySet::compile_with(docs, Extensions::default())
    }

    /// Compiles `docs`: ValidatingAdmissionPolicies, their bindings, and
    /// params documents of a kind some policy's `paramKind` names. Any other
    /// document is an error. Every CEL expression is parsed and checked here.
    pub fn compile_with(
        docs: &[Document],
        extensions: Extensions,
    ) -> Result<PolicySet, LoadErrors> {
        let env = Env::new(extensions);
        let mut errors = Vec::new();
        let is_vap_api = |d: &Document| API_VERSIONS.contains(&d.type_meta().0);
        let mut policies: Vec<Policy> = Vec::new();
        let mut policy_docs = BTreeMap::new();
        // Names of every policy document, including those with errors, so
        // that their bindings are not reported again.
        let declared: BTreeSet<&str> = docs
            .iter()
            .filter(|d| is_vap_api(d) && d.type_meta().1 == "ValidatingAdmissionPolicy")
            .filter_map(|d| d.value.pointer("/metadata/name").and_then(|n| n.as_str()))
            .collect();
        for doc in docs
            .iter()
            .filter(|d| is_vap_api(d) && d.type_meta().1 == "ValidatingAdmissionPolicy")
        {
            if let Some(p) = model::read_policy(&env, doc, &mut errors) {
                if let Some(first) = policy_docs.insert(p.name.clone(), &doc.source) {
                    errors.push(LoadError::at(
                        &doc.source,
                        "metadata.name",
                        format!(
                            "policy {} is already defined in {} document {}",
                            p.name,
                            first.file.display(),
                            first.document
                        ),
                    ));
                    continue;
                }
                policies.push(p);
            }
        }
        let param_kinds: BTreeSet<(String, String)> = policies
            .iter()
            .filter_map(|p| p.param_kind.clone())
            .collect();
        let mut bindings = Vec::new();
        let mut params = Vec::new();
        let mut binding_names = BTreeSet::new();
        for doc in docs {
            let (api, kind) = doc.type_meta();
            if is_vap_api(doc) && kind == "ValidatingAdmissionPolicy" {
                continue;
            }
            if is_vap_api(doc) && kind == "ValidatingAdmissionPolicyBinding" {
                let Some(b) = model::read_binding(doc, &mut errors) else {
                    continue;
                };
                if !binding_names.insert(b.name.clone()) {
                    errors.push(LoadError::at(
                        &doc.source,
                        "metadata.name",
                        format!("binding {} is defined twice", b.name),
                    ));
                    continue;
                }
                match policies.iter().position(|p| p.name == b.policy_name) {
                    None if !declared.contains(b.policy_name.as_str()) => {
                        errors.push(LoadError::at(
                            &doc.source,
                            "spec.policyName",
                            format!("no ValidatingAdmissionPolicy named {}", b.policy_name),
                        ))
                    }
                    None => {}
                    Some(i) => {
                        let policy = &policies[i];
                        match (&policy.param_kind, &b.param_ref) {
                            (Some(_), None) => errors.push(LoadError::at(
                                &doc.source,
                                "spec.paramRef",
                                format!("required: policy {} has a paramKind", policy.name),
                            )),
                            (None, Some(_)) => errors.push(LoadError::at(
                                &doc.source,
                                "spec.paramRef",
                                format!(
                                    "policy {} has no paramKind, so it takes no params",
                                    policy.name
                                ),
                            )),
                            _ => bindings.push((b, i)),
                        }
                    }
                }
                continue;
            }
            if param_kinds.contains(&(api.to_string(), kind.to_string())) {
                let name = doc.value.pointer("/metadata/name").and_then(|v| v.as_str());
                match name {
                    Some(name) => params.push(Param {
                        api_version: api.to_string(),
                        kind: kind.to_string(),
                        name: name.to_string(),
                        namespace: doc
                            .value
                            .pointer("/metadata/namespace")
                            .and_then(|v| v.as_str())
                            .map(str::to_string),
                        labels: matching::labels_of(Some(&doc.value)),
                        value: cel::json_to_value(&doc.value),
                    }),
                    None => errors.push(LoadError::at(&doc.source, "metadata.name", "required")),
                }
                continue;
            }
            errors.push(LoadError::at(
                &doc.source,
                "",
                format!(
                    "unknown document kind {:?} (apiVersion {:?}): expected ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding, or a params kind named by a policy's paramKind",
                    kind, api
                ),
            ));
        }
        if !errors.is_empty() {
            return Err(LoadErrors(errors));
        }
        let referenced = policies
            .iter()
            .flat_map(|p| {
                p.match_conditions
                    .iter()
                    .chain(&p.variables)
                    .chain(&p.audit_annotations)
                    .map(|n| &n.expr)
                    .chain(
                        p.validations
                            .iter()
                            .flat_map(|v| std::iter::once(&v.expr).chain(&v.message_expr)),
                    )
            })
            .flat_map(|e| e.variables.iter().cloned())
            .collect();
        Ok(PolicySet {
            inner: Arc::new(Inner {
                env,
                policies,
                bindings,
                params,
                referenced,
            }),
        })
    }

    /// Policies loaded.
    pub fn len(&self) -> usize {
        self.inner.policies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.inner.policies.is_empty()
    }

    /// Bindings loaded.
    pub fn bindings(&self) -> usize {
        self.inner.bindings.len()
    }

    /// Evaluates every binding that matches `req`, and, for pod
    /// controllers, every binding whose policy matches pods on the pod the
    /// controller's template describes. Runs on an evaluation thread with a
    /// large stack; never panics.
    pub fn evaluate(&self, req: &Request, namespaces: &dyn NamespaceLookup) -> Verdict {
        if self.inner.bindings.is_empty() {
            return Verdict::default();
        }
        let namespace = req.namespace.as_deref().filter(|n| !n.is_empty()).map(|n| {
            namespaces.namespace(n).unwrap_or_else(
                || json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}),
            )
        });
        if pool::on_worker() {
            return self.evaluate_here(req, namespace);
        }
        let set = self.clone();
        let req = req.clone();
        pool::run(move || set.evaluate_here(&req, namespace)).unwrap_or_else(|| Verdict {
            denials: vec!["gpu-admission: policy evaluation failed unexpectedly".to_string()],
            ..Verdict::default()
        })
    }

    fn evaluate_here(&self, req: &Request, namespace: Option<serde_json::Value>) -> Verdict {
        let inner = &*self.inner;
        let mut verdict = Verdict::default();
        let ns_labels = matching::labels_of(namespace.as_ref());
        let mut direct: Option<Scope> = None;
        for (binding, pi) in &inner.bindings {
            let policy = &inner.policies[*pi];
            if !applies(policy, binding, req, &ns_labels) {
                continue;
            }
            let scope = direct.get_or_insert_with(|| {
                Scope::new(
                    inner,
                    req,
                    req.object.as_ref(),
                    req.old_object.as_ref(),
                    namespace.as_ref(),
                )
            });
            inner.run_binding(policy, binding, req, scope, "", &mut verdict);
        }
        if let Some((pod_req, prefix)) = template_request(req) {
            let mut pod_scope: Option<Scope> = None;
            for (binding, pi) in &inner.bindings {
                let policy = &inner.policies[*pi];
                if !applies(policy, binding, &pod_req, &ns_labels) {
                    continue;
                }
                let scope = pod_scope.get_or_insert_with(|| {
                    Scope::new(
                        inner,
                        req,
                        pod_req.object.as_ref(),
                        pod_req.old_object.as_ref(),
                        namespace.as_ref(),
                    )
                });
                inner.run_binding(policy, binding, req, scope, &prefix, &mut verdict);
            }
        }
        verdict
    }
}

fn applies(
    policy: &Policy,
    binding: &Binding,
    req: &Request,
    ns_labels: &BTreeMap<String, String>,
) -> bool {
    policy.match_constraints.matches(req, ns_labels)
        && binding
            .match_resources
            .as_ref()
            .is_none_or(|m| m.narrows(req, ns_labels))
}

/// For a pod controller on CREATE or UPDATE: a Pod request for the pod its
/// template describes, and the `Kind name: ` prefix for messages.
fn template_request(req: &Request) -> Option<(Request, String)> {
    if !matches!(req.operation, Operation::Create | Operation::Update)
        || req.sub_resource.as_deref().is_some_and(|s| !s.is_empty())
    {
        return None;
    }
    let pod = crate::workload::pod_from_template(req.object.as_ref()?)?;
    let old_pod = req
        .old_object
        .as_ref()
        .and_then(crate::workload::pod_from_template);
    let name = if req.name.is_empty() {
        req.object
            .as_ref()?
            .pointer("/metadata/name")?
            .as_str()?
            .to_string()
    } else {
        req.name.clone()
    };
    let pod_kind = GroupVersionKind {
        group: String::new(),
        version: "v1".into(),
        kind: "Pod".into(),
    };
    let pod_resource = GroupVersionResource {
        group: String::new(),
        version: "v1".into(),
        resource: "pods".into(),
    };
    let prefix = format!("{} {}: ", req.kind.kind, name);
    let pod_req = Request {
        uid: req.uid.clone(),
        kind: pod_kind.clone(),
        resource: pod_resource.clone(),
        sub_resource: None,
        request_kind: Some(pod_kind),
        request_resource: Some(pod_resource),
        request_sub_resource: None,
        name: name.clone(),
        namespace: req.namespace.clone(),
        operation: req.operation,
        user_info: serde_json::Value::Null,
        object: Some(pod),
        old_object: old_pod,
        dry_run: req.dry_run,
        options: None,
    };
    Some((pod_req, prefix))
}

/// The CEL variables of one evaluated object, converted once and shared by
/// every policy.
struct Scope<'e> {
    ctx: Context<'e>,
}

impl<'e> Scope<'e> {
    fn new(
        inner: &'e Inner,
        req: &Request,
        object: Option<&serde_json::Value>,
        old_object: Option<&serde_json::Value>,
        namespace: Option<&serde_json::Value>,
    ) -> Scope<'e> {
        let mut ctx = inner.env.scope();
        let to_value =
            |v: Option<&serde_json::Value>| v.map(cel::json_to_value).unwrap_or(Value::Null);
        ctx.add_variable_from_value("object", to_value(object));
        ctx.add_variable_from_value("oldObject", to_value(old_object));
        ctx.add_variable_from_value("namespaceObject", to_value(namespace));
        ctx.add_variable_from_value("request", cel::json_to_value(&request_value(req)));
        for (name, value) in inner.env.extension_variables(object, &inner.referenced) {
            ctx.add_variable_from_value(name, value);
        }
        Scope { ctx }
    }
}

/// `request` as Kubernetes shows it to CEL (no uid, object or oldObject).
fn request_value(req: &Request) -> serde_json::Value {
    let user = &req.user_info;
    json!({
        "kind": req.kind,
        "resource": req.resource,
        "subResource": req.sub_resource.clone().unwrap_or_default(),
        "requestKind": req.request_kind.as_ref().unwrap_or(&req.kind),
        "requestResource": req.request_resource.as_ref().unwrap_or(&req.resource),
        "requestSubResource": req.request_sub_resource.clone().or_else(|| req.sub_resource.clone()).unwrap_or_default(),
        "name": req.name,
        "namespace": req.namespace.clone().unwrap_or_default(),
        "operation": req.operation.as_str(),
        "userInfo": {
            "username": user.get("username").cloned().unwrap_or(json!("")),
            "uid": user.get("uid").cloned().unwrap_or(json!("")),
            "groups": user.get("groups").cloned().unwrap_or(json!([])),
            "extra": user.get("extra").cloned().unwrap_or(json!({})),
        },
        "dryRun": req.dry_run,
        "options": req.options.clone().unwrap_or(serde_json::Value::Null),
    })
}

/// What one policy said about one object with one param.
#[derive(Default)]
struct Outcome {
    skipped: bool,
    errors: Vec<String>,
    /// (message, reason, validation index)
    failures: Vec<(String, String, usize)>,
    annotations: Vec<(String, String)>,
}

impl Inner {
    fn run_binding(
        &self,
        policy: &Policy,
        binding: &Binding,
        req: &Request,
        scope: &Scope,
        prefix: &str,
        verdict: &mut Verdict,
    ) {
        let start = Instant::now();
        let mut outcomes = Vec::new();
        match (&policy.param_kind, &binding.param_ref) {
            (Some(kind), Some(pref)) => {
                let found: Vec<&Param> = self
                    .params
                    .iter()
                    .filter(|p| {
                        (p.api_version.as_str(), p.kind.as_str())
                            == (kind.0.as_str(), kind.1.as_str())
                    })
                    .filter(|p| match &pref.namespace {
                        Some(ns) => p.namespace.as_deref() == Some(ns.as_str()),
                        None => p.namespace.is_none() || p.namespace == req.namespace,
                    })
                    .filter(|p| match (&pref.name, &pref.selector) {
                        (Some(n), _) => &p.name == n,
                        (None, Some(sel)) => sel.matches(&p.labels),
                        (None, None) => false,
                    })
                    .collect();
                if found.is_empty() {
                    if pref.deny_when_missing {
                        // A configuration error, as in kube-apiserver: it
                        // follows failurePolicy, not validationActions.
                        result_error(
                            verdict,
                            policy,
                            start,
                            format!(
                                "no params found for binding {} ({} {}) and its parameterNotFoundAction is Deny",
                                binding.name,
                                kind.1,
                                pref.name.as_deref().unwrap_or("by selector")
                            ),
                        );
                        return;
                    }
                } else {
                    for p in found {
                        outcomes.push(cel::with_policy_budget(|| {
                            self.evaluate_policy(policy, scope, p.value.clone())
                        }));
                    }
                }
            }
            _ => outcomes.push(cel::with_policy_budget(|| {
                self.evaluate_policy(policy, scope, Value::Null)
            })),
        }
        if outcomes.iter().all(|o| o.skipped) {
            return;
        }
        let mut result = EvaluationResult::Pass;
        for outcome in outcomes {
            for (k, v) in outcome.annotations {
                verdict.audit_annotations.insert(k, v);
            }
            let mut failures = outcome.failures;
            if !outcome.errors.is_empty() {
                result = EvaluationResult::Error;
                if policy.failure_policy == FailurePolicy::Ignore {
                    // Debug level: a function error may quote a value from the object.
                    tracing::debug!(policy = %policy.name, binding = %binding.name, errors = ?outcome.errors, "policy error ignored (failurePolicy Ignore)");
                } else {
                    for e in outcome.errors {
                        failures.push((
                            format!(
                                "policy error (failurePolicy {}): {e}",
                                policy.failure_policy.as_str()
                            ),
                            "Invalid".to_string(),
                            0,
                        ));
                    }
                }
            }
            for (message, reason, index) in failures {
                let line = format!("{}: {prefix}{message}", policy.name);
                for action in &binding.actions {
                    match action {
                        Action::Deny => {
                            result = EvaluationResult::Deny;
                            verdict.reason.get_or_insert_with(|| reason.clone());
                            verdict.denials.push(line.clone());
                        }
                        Action::Warn => {
                            if result != EvaluationResult::Deny {
                                result = EvaluationResult::Warn;
                            }
                            verdict.warnings.push(line.clone());
                        }
                        Action::Audit => {
                            if result == EvaluationResult::Pass {
                                result = EvaluationResult::Warn;
                            }
                            add_audit_failure(
                                verdict,
                                policy,
                                binding,
                                index,
                                &format!("{prefix}{message}"),
                            );
                        }
                    }
                }
            }
        }
        verdict.evaluations.push(PolicyEvaluation {
            policy: policy.name.clone(),
            result,
            duration: start.elapsed(),
        });
    }

    fn evaluate_policy(&self, policy: &Policy, scope: &Scope, params: Value) -> Outcome {
        let mut ctx = scope.ctx.new_inner_scope();
        ctx.add_variable_from_value("params", params);
        let mut vars = Variables {
            policy,
            values: vec![None; policy.variables.len()],
        };
        let mut outcome = Outcome::default();
        let mut condition_error = None;
        for (i, c) in policy.match_conditions.iter().enumerate() {
            match vars.eval(&ctx, &c.expr) {
                Ok(Value::Bool(false)) => {
                    outcome.skipped = true;
                    return outcome;
                }
                Ok(Value::Bool(true)) => {}
                Ok(other) => {
                    condition_error.get_or_insert(format!(
                        "matchConditions[{i}] ({}) returned {}, not bool",
                        c.name,
                        cel::type_name(&other)
                    ));
                }
                Err(e) => {
                    condition_error
                        .get_or_insert(format!("matchConditions[{i}] ({}): {e}", c.name));
                }
            }
        }
        if let Some(e) = condition_error {
            outcome.errors.push(e);
            return outcome;
        }
        for (i, v) in policy.validations.iter().enumerate() {
            match vars.eval(&ctx, &v.expr) {
                Ok(Value::Bool(true)) => {}
                Ok(Value::Bool(false)) => {
                    let message = v
                        .message_expr
                        .as_ref()
                        .and_then(|m| match vars.eval(&ctx, m) {
                            Ok(Value::String(s)) => {
                                let s = s.trim();
                                (!s.is_empty() && !s.contains('\n') && s.len() <= MAX_MESSAGE_LEN)
                                    .then(|| s.to_string())
                            }
                            _ => None,
                        })
                        .or_else(|| v.message.clone().filter(|m| !m.trim().is_empty()))
                        .unwrap_or_else(|| format!("failed expression: {}", v.expr.source.trim()));
                    outcome.failures.push((message, v.reason.clone(), i));
                }
                Ok(other) => outcome.errors.push(format!(
                    "validations[{i}] returned {}, not bool",
                    cel::type_name(&other)
                )),
                Err(e) => outcome.errors.push(format!("validations[{i}]: {e}")),
            }
        }
        for a in &policy.audit_annotations {
            match vars.eval(&ctx, &a.expr) {
                Ok(Value::String(s)) if !s.is_empty() => outcome
                    .annotations
                    .push((format!("{}/{}", policy.name, a.name), s.to_string())),
                Ok(Value::String(_) | Value::Null) => {}
                Ok(other) => outcome.errors.push(format!(
                    "auditAnnotations {} returned {}, not string",
                    a.name,
                    cel::type_name(&other)
                )),
                Err(e) => outcome
                    .errors
                    .push(format!("auditAnnotations {}: {e}", a.name)),
            }
        }
        outcome
    }
}

/// Records a binding that could not be evaluated at all.
fn result_error(verdict: &mut Verdict, policy: &Policy, start: Instant, message: String) {
    if policy.failure_policy == FailurePolicy::Fail {
        verdict.reason.get_or_insert_with(|| "Invalid".to_string());
        verdict.denials.push(format!(
            "{}: policy error (failurePolicy Fail): {message}",
            policy.name
        ));
    }
    verdict.evaluations.push(PolicyEvaluation {
        policy: policy.name.clone(),
        result: EvaluationResult::Error,
        duration: start.elapsed(),
    });
}

fn add_audit_failure(
    verdict: &mut Verdict,
    policy: &Policy,
    binding: &Binding,
    index: usize,
    message: &str,
) {
    let entry = json!({
        "message": message,
        "policy": policy.name,
        "binding": binding.name,
        "expressionIndex": index,
        "validationActions": binding.actions.iter().map(|a| a.as_str()).collect::<Vec<_>>(),
    });
    let slot = verdict
        .audit_annotations
        .entry(VALIDATION_FAILURE_ANNOTATION.to_string())
        .or_insert_with(|| "[]".to_string());
    let mut list: Vec<serde_json::Value> = serde_json::from_str(slot).unwrap_or_default();
    list.push(entry);
    *slot = serde_json::Value::Array(list).to_string();
}

/// A policy's `variables`, evaluated lazily and at most once per request:
/// an expression evaluates only the variables it refers to (and those they
/// refer to), when it is itself evaluated.
struct Variables<'p> {
    policy: &'p Policy,
    values: Vec<Option<Result<Value, EvalError>>>,
}

impl Variables<'_> {
    fn eval(&mut self, ctx: &Context, expr: &cel::Compiled) -> Result<Value, EvalError> {
        if expr.policy_variables.is_empty() {
            return cel::evaluate(expr, ctx);
        }
        let needed = self.closure(&expr.policy_variables);
        for &i in &needed {
            if self.values[i].is_none() {
                let var = &self.policy.variables[i];
                let direct = self.closure(&var.expr.policy_variables);
                let result = self.eval_with(ctx, &var.expr, &direct);
                self.values[i] = Some(result);
            }
        }
        self.eval_with(ctx, expr, &needed)
    }

    /// Indices of the named variables and everything they use, in order.
    fn closure(&self, names: &BTreeSet<String>) -> Vec<usize> {
        let vars = &self.policy.variables;
        let mut wanted = vec![false; vars.len()];
        for (i, v) in vars.iter().enumerate() {
            if names.contains(&v.name) {
                wanted[i] = true;
            }
        }
        // Variables only use earlier ones, so one backward pass suffices.
        for i in (0..vars.len()).rev() {
            if wanted[i] {
                for (j, v) in vars.iter().enumerate().take(i) {
                    if vars[i].expr.policy_variables.contains(&v.name) {
                        wanted[j] = true;
                    }
                }
            }
        }
        (0..vars.len()).filter(|i| wanted[*i]).collect()
    }

    fn eval_with(
        &self,
        ctx: &Context,
        expr: &cel::Compiled,
        needed: &[usize],
    ) -> Result<Value, EvalError> {
        let mut map = std::collections::HashMap::new();
        for &i in needed {
            if let Some(Ok(v)) = &self.values[i] {
                map.insert(self.policy.variables[i].name.clone(), v.clone());
            }
        }
        let mut child = ctx.new_inner_scope();
        child.add_variable_from_value("variables", map);
        match cel::evaluate(expr, &child) {
            Err(EvalError::Runtime(msg)) => {
                // A failed variable surfaces as a missing key: report its own error.
                for &i in needed {
                    let name = &self.policy.variables[i].name;
                    if let Some(Err(e)) = &self.values[i] {
                        if msg == format!("no such key: {name}") {
                            return Err(match e {
                                EvalError::CostLimit(m) => {
                                    EvalError::CostLimit(format!("variables.{name}: {m}"))
                                }
                                EvalError::Runtime(m) => {
                                    EvalError::Runtime(format!("variables.{name}: {m}"))
                                }
                            });
                        }
                    }
                }
                Err(EvalError::Runtime(msg))
            }
            other => other,
        }
    }
}
