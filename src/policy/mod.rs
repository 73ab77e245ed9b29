//! Policy files in Kubernetes' ValidatingAdmissionPolicy format: loading,
//! matching and evaluation, with kube-apiserver's semantics.
use crate::cel::{self, Env, Extensions};
use crate::k8s::NamespaceLookup;
use crate::review::{Operation, Request};
use crate::subject::{judges_template, Subject};
use eval::{applies, Scope, Shared};
use kube_cel::cel::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

mod eval;
mod index;
mod load;
mod matching;
mod model;
mod watch;

pub use load::{
    parse_documents, parse_files, read_documents, read_files, Document, LoadError, LoadErrors,
    LoadNotice, NoticeLevel, PolicyFile, Source,
};
pub use matching::MatchResources;
pub use watch::{watch_dir, DirWatcher, WatchOptions, DEFAULT_RESCAN};

pub use model::POD_TEMPLATES_ANNOTATION;
use model::{Binding, Policy};

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

/// Stack a thread needs to evaluate policies ([`PolicySet::evaluate`]):
/// the CEL interpreter recurses per nesting level of expressions and
/// objects, and an unoptimised build needs tens of KiB per level, more than
/// the 2 MiB of a default thread. Reserved address space; pages are only
/// committed as used.
pub const EVALUATION_STACK: usize = 64 << 20;

/// Compiled policies, bindings and params. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct PolicySet {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
pub(crate) struct Inner {
    pub(crate) env: Env,
    pub(crate) policies: Vec<Policy>,
    /// Bindings with the index of their policy, in file order.
    pub(crate) bindings: Vec<(Binding, usize)>,
    /// The bindings a request could match, by resource and operation.
    pub(crate) index: index::BindingIndex,
    pub(crate) params: Vec<Param>,
    /// Every top-level variable some expression refers to.
    pub(crate) referenced: BTreeSet<String>,
    /// What loading ignored, as kube-apiserver does.
    pub(crate) notices: Vec<LoadNotice>,
    /// One note per policy run on controllers' pod templates.
    pub(crate) template_notes: Vec<LoadNotice>,
}

#[derive(Debug)]
pub(crate) struct Param {
    pub(crate) api_version: String,
    pub(crate) kind: String,
    pub(crate) name: String,
    pub(crate) namespace: Option<String>,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) value: Value,
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
    /// The deadline passed before every binding was evaluated: the rest of
    /// the verdict is incomplete and must not be taken as an answer.
    pub timed_out: bool,
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
        // Every expression of the set compiles on one large-stack thread
        // (the parser recurses), not one thread per expression.
        cel::on_compile_stack(|| PolicySet::compile_here(docs, extensions))
            .map_err(|e| LoadErrors(vec![LoadError::new(e)]))?
    }

    /// [`PolicySet::compile_with`] on the calling thread, which must have
    /// a large stack (see [`cel::on_compile_stack`]).
    fn compile_here(docs: &[Document], extensions: Extensions) -> Result<PolicySet, LoadErrors> {
        let env = Env::new(extensions);
        let mut errors = Vec::new();
        let is_vap_api = |d: &Document| API_VERSIONS.contains(&d.type_meta().0);
        let mut policies: Vec<Policy> = Vec::new();
        let mut policy_docs = BTreeMap::new();
        let mut template_notes = Vec::new();
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
                if p.judges_pod_templates() {
                    template_notes.push(pod_template_notice(&p, doc));
                }
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
        let mut notices = Vec::new();
        let mut notice = |level, doc: &Document, field: &str, message: String| {
            notices.push(LoadNotice {
                level,
                at: LoadError::at(&doc.source, field, message),
            })
        };
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
                    // As in kube-apiserver: a binding of a policy that does
                    // not exist does nothing.
                    None if !declared.contains(b.policy_name.as_str()) => notice(
                        NoticeLevel::Warning,
                        doc,
                        "spec.policyName",
                        format!(
                            "no ValidatingAdmissionPolicy named {}: binding {} is ignored",
                            b.policy_name, b.name
                        ),
                    ),
                    None => {}
                    Some(i) => {
                        let policy = &policies[i];
                        match (&policy.param_kind, &b.param_ref) {
                            (Some(_), None) => errors.push(LoadError::at(
                                &doc.source,
                                "spec.paramRef",
                                format!("required: policy {} has a paramKind", policy.name),
                            )),
                            // Kubernetes: "If the policy does not specify a
                            // ParamKind then this field is ignored, and the
                            // rules are evaluated without a param."
                            (None, Some(_)) => {
                                tracing::debug!(
                                    binding = %b.name,
                                    "paramRef ignored: policy {} has no paramKind",
                                    policy.name
                                );
                                notice(
                                    NoticeLevel::Note,
                                    doc,
                                    "spec.paramRef",
                                    format!(
                                        "ignored: policy {} has no paramKind, so it is evaluated without params",
                                        policy.name
                                    ),
                                );
                                let mut b = b;
                                b.param_ref = None;
                                bindings.push((b, i));
                            }
                            _ => bindings.push((b, i)),
                        }
                    }
                }
                continue;
            }
            if param_kinds.contains(&(api.to_string(), kind.to_string())) {
                if let Some(meta) = model::read_params(doc, &mut errors) {
                    params.push(Param {
                        api_version: api.to_string(),
                        kind: kind.to_string(),
                        name: meta.name,
                        namespace: meta.namespace,
                        labels: meta.labels,
                        // Converted to the interpreter's form here, once:
                        // each evaluation then binds it in O(1).
                        value: {
                            let value = cel::json_to_value(&doc.value);
                            value.clone().preconverted().unwrap_or(value)
                        },
                    });
                }
                continue;
            }
            // A Deployment kept next to its policy, the CRD of a params
            // kind: not the engine's, skipped.
            notice(
                NoticeLevel::Warning,
                doc,
                "",
                format!(
                    "skipped: kind {:?} (apiVersion {:?}) is not a ValidatingAdmissionPolicy, a ValidatingAdmissionPolicyBinding, or a params kind named by a policy's paramKind",
                    kind, api
                ),
            );
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
                index: index::BindingIndex::new(
                    bindings
                        .iter()
                        .map(|(_, pi)| &policies[*pi].match_constraints),
                ),
                env,
                policies,
                bindings,
                params,
                referenced,
                notices,
                template_notes,
            }),
        })
    }

    /// What loading ignored, as kube-apiserver does (documents of other
    /// kinds, bindings of missing policies, fields documented as ignored).
    pub fn notices(&self) -> &[LoadNotice] {
        &self.inner.notices
    }

    /// A note for each policy that is also run on the pod templates of
    /// controllers, naming their kinds (`lint` prints them).
    pub fn pod_template_notes(&self) -> &[LoadNotice] {
        &self.inner.template_notes
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

    /// Whether some binding could match `req` or, for a pod controller on
    /// CREATE or on an UPDATE that changes its template, the new pod its
    /// template describes: when not, the verdict is known without
    /// evaluating anything (allowed).
    pub fn may_match(&self, req: &Request) -> bool {
        let index = &self.inner.index;
        let requested = req.request_resource.as_ref().map(|r| r.resource.as_str());
        if index.any(&req.resource.resource, requested, req.operation) {
            return true;
        }
        judges_template(req) && index.any("pods", None, Operation::Create)
    }

    /// Whether some expression of the set refers to the top-level
    /// variable `name` (e.g. `gpu`): callers need not work out what no
    /// policy reads.
    pub fn references(&self, name: &str) -> bool {
        self.inner.referenced.contains(name)
    }

    /// Evaluates every binding that matches `req`, and, for pod
    /// controllers, every binding whose policy matches pod CREATE on the
    /// pod the controller's template describes (on CREATE, and on an UPDATE
    /// that changes the template). Runs on the calling thread, which
    /// needs a stack of [`EVALUATION_STACK`] bytes.
    pub fn evaluate(&self, req: &Request, namespaces: &dyn NamespaceLookup) -> Verdict {
        self.evaluate_until(req, namespaces, None)
    }

    /// [`PolicySet::evaluate`] that gives up once `deadline` has passed:
    /// running CEL stops within microseconds, no further binding starts, and
    /// the verdict says [`Verdict::timed_out`].
    pub fn evaluate_until(
        &self,
        req: &Request,
        namespaces: &dyn NamespaceLookup,
        deadline: Option<Instant>,
    ) -> Verdict {
        if self.inner.bindings.is_empty() {
            return Verdict::default();
        }
        self.evaluate_subject(&Subject::new(req, namespaces), deadline)
    }

    /// Evaluates every binding that matches the subject's request (and its
    /// template pod) with what the subject has worked out: namespace,
    /// template pod, host variables. Must run on a thread with
    /// [`EVALUATION_STACK`] bytes of stack.
    pub fn evaluate_subject(&self, subject: &Subject, deadline: Option<Instant>) -> Verdict {
        if self.inner.bindings.is_empty() {
            return Verdict::default();
        }
        let Some(deadline) = deadline else {
            return self.evaluate_bindings(subject, None);
        };
        let mut verdict =
            cel::with_deadline(deadline, || self.evaluate_bindings(subject, Some(deadline)));
        verdict.timed_out |= Instant::now() >= deadline;
        verdict
    }

    fn evaluate_bindings(&self, subject: &Subject, deadline: Option<Instant>) -> Verdict {
        let passed = || deadline.is_some_and(|d| Instant::now() >= d);
        let inner = &*self.inner;
        let req = subject.request;
        let ns_labels = &subject.namespace_labels;
        let mut verdict = Verdict::default();
        let mut shared = Shared::default();
        let mut direct: Option<Scope> = None;
        for bi in inner.index.candidates(req) {
            let (binding, pi) = &inner.bindings[bi];
            let policy = &inner.policies[*pi];
            if !applies(policy, binding, req, ns_labels) {
                continue;
            }
            if passed() {
                verdict.timed_out = true;
                return verdict;
            }
            let scope = direct.get_or_insert_with(|| Scope::new(inner, subject, req, &mut shared));
            inner.run_binding(policy, binding, req, scope, "", &mut verdict);
        }
        if let Some(template) = &subject.template {
            let pod_req = &template.request;
            let mut pod_scope: Option<Scope> = None;
            let controller = &req.resource;
            let requested = req.request_resource.as_ref().unwrap_or(controller);
            for bi in inner.index.candidates(pod_req) {
                let (binding, pi) = &inner.bindings[bi];
                let policy = &inner.policies[*pi];
                // A policy that names the controller's kind has judged the
                // controller itself above (or chose not to): running it on
                // the template too would judge the same pods twice.
                let names_controller = [controller, requested].iter().any(|r| {
                    policy
                        .match_constraints
                        .names_resource(&r.group, &r.resource)
                });
                if !policy.pod_templates
                    || names_controller
                    || !applies(policy, binding, pod_req, ns_labels)
                {
                    continue;
                }
                if passed() {
                    verdict.timed_out = true;
                    return verdict;
                }
                let scope = pod_scope
                    .get_or_insert_with(|| Scope::new(inner, subject, pod_req, &mut shared));
                inner.run_binding(policy, binding, req, scope, &template.prefix, &mut verdict);
            }
        }
        verdict
    }
}

/// The note `lint` prints for a policy run on controllers' pod templates:
/// which controller kinds, and how to turn it off.
fn pod_template_notice(policy: &Policy, doc: &Document) -> LoadNotice {
    let kinds: Vec<&str> = crate::k8s::workloads::TEMPLATE_KINDS
        .iter()
        .filter(|k| k.makes_pods)
        .filter(|k| {
            let resource = format!("{}s", k.kind.to_ascii_lowercase());
            !k.groups
                .iter()
                .any(|g| policy.match_constraints.names_resource(g, &resource))
        })
        .map(|k| k.kind)
        .collect();
    let message = if kinds.is_empty() {
        format!(
            "policy {} matches Pod CREATE and names every controller kind itself, so it is run on no pod template",
            policy.name
        )
    } else {
        format!(
            "policy {} matches Pod CREATE, so it is also run on the pod templates of {} (annotation {}: \"false\" turns that off)",
            policy.name,
            kinds.join(", "),
            POD_TEMPLATES_ANNOTATION
        )
    };
    LoadNotice {
        level: NoticeLevel::Note,
        at: LoadError::at(&doc.source, "spec.matchConstraints", message),
    }
}
