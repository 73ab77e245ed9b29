//! Policy files in Kubernetes' ValidatingAdmissionPolicy format: loading,
//! matching and evaluation, with kube-apiserver's semantics.
use crate::cel::{self, Env, Extensions};
use crate::exceptions::{Excepted, Exception};
use crate::k8s::{NamespaceLookup, TemplateSources};
use crate::review::{Operation, Request};
use crate::subject::Subject;
use eval::{Memo, Scope, Shared};
use matching::Judgements;
use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

mod annotations;
mod documents;
mod eval;
mod excepting;
mod index;
mod load;
mod matching;
mod model;
mod mutate;
pub mod plan;
mod read;
mod schemas;
mod watch;

pub use annotations::{EXCEPTIONS_ANNOTATION, VALIDATION_FAILURE_ANNOTATION};
pub use load::{
    parse_documents, parse_files, read_documents, read_files, Document, LoadError, LoadErrors,
    LoadNotice, NoticeLevel, PolicyFile, Source,
};
pub use matching::MatchResources;
pub use mutate::{AppliedMutation, Mutated};
pub use watch::{watch_dir, DirWatcher, WatchOptions, DEFAULT_RESCAN};

pub use documents::DESCRIPTION_ANNOTATION;
pub use model::POD_TEMPLATES_ANNOTATION;
use model::{Binding, Param, Policy};
pub use plan::Passes;
use plan::Plan;

/// API version of the policy documents.
pub const API_VERSIONS: &[&str] = &[
    "admissionregistration.k8s.io/v1",
    "admissionregistration.k8s.io/v1beta1",
];
/// API versions of MutatingAdmissionPolicy documents (the same shape in
/// each).
pub const MUTATING_API_VERSIONS: &[&str] = &[
    "admissionregistration.k8s.io/v1",
    "admissionregistration.k8s.io/v1beta1",
    "admissionregistration.k8s.io/v1alpha1",
];
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
    /// MutatingAdmissionPolicies, and their bindings in the order they run
    /// (by policy name).
    pub(crate) mutating: Vec<Policy>,
    pub(crate) mutating_bindings: Vec<(Binding, usize)>,
    pub(crate) params: Vec<Param>,
    /// What is worked out once from all of the above.
    pub(crate) plan: Plan,
    /// Every top-level variable some expression refers to.
    pub(crate) referenced: BTreeSet<String>,
    /// What loading ignored, as kube-apiserver does.
    pub(crate) notices: Vec<LoadNotice>,
    /// The documents compiled, for [`PolicySet::with_documents`].
    pub(crate) documents: Vec<Document>,
    /// One note per policy run on controllers' pod templates.
    pub(crate) template_notes: Vec<LoadNotice>,
    /// The workload kinds whose pod templates the pod policies judge.
    pub(crate) template_sources: TemplateSources,
    /// The set's own `GpuPolicyException` documents, honoured beside
    /// those of the subject ([`Subject::exceptions`]).
    pub(crate) exceptions: Vec<Arc<Exception>>,
}

/// Result of evaluating every policy against one request.
#[derive(Clone, Debug, Default)]
pub struct Verdict {
    /// One line per violated Deny binding: `<policy>: <message>`.
    pub denials: Vec<String>,
    pub warnings: Vec<String>,
    /// Under the keys the webhook returns them: [`VALIDATION_FAILURE_ANNOTATION`]
    /// and `<policy>.<key>` (see `annotations::returned_key`).
    pub audit_annotations: BTreeMap<String, String>,
    /// One entry per binding evaluated, for metrics.
    pub evaluations: Vec<PolicyEvaluation>,
    /// The `reason` of the first denial (`Invalid` unless the validation
    /// names another); `None` when nothing was denied.
    pub reason: Option<String>,
    /// The deadline passed before every binding was evaluated: the rest of
    /// the verdict is incomplete and must not be taken as an answer.
    pub timed_out: bool,
    /// What exceptions let through: each would have been a denial, a
    /// warning or an audit failure (warnings and audit failures are still
    /// given, naming the exception).
    pub excepted: Vec<Excepted>,
}

/// How one policy binding came out on one request.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyEvaluation {
    pub policy: std::sync::Arc<str>,
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
    /// The evaluation failed (CEL error, cost limit, missing params),
    /// whatever the failurePolicy: under Fail the request is also denied.
    Error,
    /// A validation failed, or the evaluation failed, under a Deny action
    /// and a `GpuPolicyException` let the request through.
    Excepted,
}

impl EvaluationResult {
    pub fn as_str(self) -> &'static str {
        match self {
            EvaluationResult::Pass => "pass",
            EvaluationResult::Deny => "deny",
            EvaluationResult::Warn => "warn",
            EvaluationResult::Error => "error",
            EvaluationResult::Excepted => "excepted",
        }
    }
}

impl PolicySet {
    /// Compiles policies, bindings and params with no host extensions.
    pub fn compile(docs: &[Document]) -> Result<PolicySet, LoadErrors> {
        PolicySet::compile_with(docs, Extensions::default())
    }

    /// Compiles `docs`: Validating and MutatingAdmissionPolicies, their
    /// bindings, and params documents of a kind some policy's `paramKind`
    /// names. A policy or binding kind under an apiVersion not listed in
    /// [`API_VERSIONS`] or [`MUTATING_API_VERSIONS`] is an error; documents
    /// of other kinds are skipped with a warning ([`PolicySet::notices`]).
    /// Every CEL expression is parsed and checked here.
    pub fn compile_with(
        docs: &[Document],
        extensions: Extensions,
    ) -> Result<PolicySet, LoadErrors> {
        PolicySet::compile_planned(docs, extensions, Passes::ALL)
    }

    /// [`PolicySet::compile_with`], with only the plan's passes `passes`
    /// (every one by default; see [`plan`]).
    pub fn compile_planned(
        docs: &[Document],
        extensions: Extensions,
        passes: Passes,
    ) -> Result<PolicySet, LoadErrors> {
        // Every expression of the set compiles on one large-stack thread
        // (the parser recurses), not one thread per expression.
        cel::on_compile_stack(|| {
            let env = Env::new(extensions);
            let loaded = read::read(&env, docs)?;
            let plan = plan::plan(&loaded, passes, &env);
            let referenced = (loaded.policies.iter())
                .chain(&loaded.mutating)
                .flat_map(Policy::expressions)
                .flat_map(|e| e.variables().iter().cloned())
                .collect();
            Ok(PolicySet {
                inner: Arc::new(Inner {
                    env,
                    policies: loaded.policies,
                    bindings: loaded.bindings,
                    mutating: loaded.mutating,
                    mutating_bindings: loaded.mutating_bindings,
                    params: loaded.params,
                    plan,
                    referenced,
                    notices: loaded.notices,
                    documents: docs.to_vec(),
                    template_notes: loaded.template_notes,
                    template_sources: TemplateSources::new(loaded.template_sources),
                    exceptions: loaded.exceptions,
                }),
            })
        })
        .map_err(|e| LoadErrors::from(LoadError::new(e)))?
    }

    /// The set compiled again with `extra` documents (bindings, params)
    /// beside its own, with the same host extensions.
    pub fn with_documents(&self, extra: &[Document]) -> Result<PolicySet, LoadErrors> {
        let mut docs = self.inner.documents.clone();
        docs.extend_from_slice(extra);
        PolicySet::compile_planned(
            &docs,
            self.inner.env.extensions().clone(),
            self.inner.plan.passes,
        )
    }

    /// The same documents planned with only the passes `passes`: the
    /// verdicts are the same whatever the passes (see [`plan`]).
    pub fn replanned(&self, passes: Passes) -> Result<PolicySet, LoadErrors> {
        PolicySet::compile_planned(
            &self.inner.documents,
            self.inner.env.extensions().clone(),
            passes,
        )
    }

    /// The workload kinds whose pod templates the pod policies judge: the
    /// built-in controllers and the kinds of the set's `PodTemplateSource`
    /// documents.
    pub fn template_sources(&self) -> &TemplateSources {
        &self.inner.template_sources
    }

    /// The set's own `GpuPolicyException` documents (for offline use:
    /// `evaluate`, `test`, `audit`), honoured by every evaluation.
    pub fn exceptions(&self) -> &[Arc<Exception>] {
        &self.inner.exceptions
    }

    /// Reads a `GpuPolicyException` object with the set's CEL environment
    /// (its expression compiled on a thread of its own).
    pub fn read_exception(
        &self,
        value: &serde_json::Value,
    ) -> Result<Exception, Vec<crate::exceptions::ExceptionError>> {
        crate::exceptions::read(value, &self.inner.env)
    }

    /// Whether the set has a validating policy named `name`.
    pub fn has_policy(&self, name: &str) -> bool {
        self.inner.policies.iter().any(|p| &*p.name == name)
    }

    /// What loading ignored, as kube-apiserver does (documents of other
    /// kinds, bindings of missing policies, fields documented as ignored).
    pub fn notices(&self) -> &[LoadNotice] {
        &self.inner.notices
    }

    /// Each policy's name and, when its document says, what it checks
    /// ([`DESCRIPTION_ANNOTATION`]), in file order.
    pub fn descriptions(&self) -> Vec<(&str, Option<&str>)> {
        self.inner
            .policies
            .iter()
            .map(|p| (&*p.name, p.description.as_deref()))
            .collect()
    }

    /// A note for each policy that is also run on the pod templates of
    /// controllers, naming their kinds (`lint` prints them).
    pub fn pod_template_notes(&self) -> &[LoadNotice] {
        &self.inner.template_notes
    }

    /// For each policy (validating, then mutating) by name, what its
    /// expressions use beyond kube-apiserver's CEL environment
    /// ([`cel::portability`]); empty when it would load there as written.
    pub fn beyond_kubernetes(&self) -> Vec<(&str, BTreeSet<String>)> {
        self.inner
            .policies
            .iter()
            .chain(&self.inner.mutating)
            .map(|p| {
                let beyond = p
                    .expressions()
                    .flat_map(|e| cel::portability::beyond_kubernetes(e))
                    .collect();
                (&*p.name, beyond)
            })
            .collect()
    }

    /// Policies loaded.
    pub fn len(&self) -> usize {
        self.inner.policies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.inner.policies.is_empty()
    }

    /// MutatingAdmissionPolicies loaded.
    pub fn mutating_len(&self) -> usize {
        self.inner.mutating.len()
    }

    /// Bindings loaded.
    pub fn bindings(&self) -> usize {
        self.inner.bindings.len()
    }

    /// Whether some binding could match the subject's request or the new
    /// pods its judged templates describe (a workload on CREATE, or on an
    /// UPDATE that changes a template): when not, the verdict is known
    /// without evaluating anything (allowed).
    pub fn may_match(&self, subject: &Subject) -> bool {
        let index = &self.inner.plan.validating.index;
        let req = subject.request;
        let requested = req.request_resource.as_ref().map(|r| r.resource.as_str());
        if index.any(&req.resource.resource, requested, req.operation) {
            return true;
        }
        let judged = !subject.templates.is_empty() || subject.too_many_templates.is_some();
        judged && index.any("pods", None, Operation::Create)
    }

    /// Whether some expression of the set refers to the top-level
    /// variable `name` (e.g. `gpu`): callers need not work out what no
    /// policy reads.
    pub fn references(&self, name: &str) -> bool {
        self.inner.referenced.contains(name)
    }

    /// The lists host variables share, converted once
    /// ([`crate::cel::SharedLists`]): the SKU lists of the catalog and the
    /// placement profiles, for the `gpu` variable.
    pub fn shared_lists(&self) -> &crate::cel::SharedLists {
        self.inner.env.extensions().shared_lists()
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
        let subject = Subject::new(req, namespaces, &self.inner.template_sources);
        self.evaluate_subject(&subject, deadline)
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
        // The clock is read once per evaluated binding: the end of one is
        // the start of the next, and the deadline is checked against it.
        let mut now = Instant::now();
        let passed = |now: Instant| deadline.is_some_and(|d| now >= d);
        let inner = &*self.inner;
        let req = subject.request;
        let ns_labels = &subject.namespace_labels;
        let mut verdict = Verdict::default();
        let mut shared = Shared::default();
        let mut excepting = excepting::Excepting::new(inner, subject);
        let mut run = Run {
            subject,
            excepting: &mut excepting,
        };
        let controller = &req.resource;
        let requested = req.request_resource.as_ref().unwrap_or(controller);
        // The request itself, then the pod of each of its templates.
        let templates =
            (subject.templates.iter()).map(|t| (&t.request, &t.variables, t.prefix.as_str(), true));
        let evaluated = std::iter::once((req, &subject.variables, "", false)).chain(templates);
        for (evaluated, variables, prefix, is_template) in evaluated {
            // Made for the first binding that applies: the scope, and the
            // values its policies share, which borrow from it.
            let scope: OnceCell<Scope> = OnceCell::new();
            let memo: OnceCell<Memo> = OnceCell::new();
            let family = &inner.plan.validating;
            let mut judgements = Judgements::new(family.match_slot_count);
            for bi in inner.plan.validating.index.candidates(evaluated) {
                let (binding, pi) = &inner.bindings[bi];
                let policy = &inner.policies[*pi];
                // A policy that names the workload's kind has judged the
                // workload itself (or chose not to): running it on its
                // templates too would judge the same pods twice.
                let names_controller = || {
                    [controller, requested]
                        .iter()
                        .any(|r| (policy.match_constraints).names_resource(&r.group, &r.resource))
                };
                let slots = family.match_slots.get(bi).copied();
                let constraints = &policy.match_constraints;
                let narrowing = binding.match_resources.as_ref();
                if (is_template && (!policy.pod_templates || names_controller()))
                    || !judgements.applies(slots, constraints, narrowing, evaluated, ns_labels)
                {
                    continue;
                }
                if passed(now) {
                    verdict.timed_out = true;
                    return verdict;
                }
                let memo = memo.get_or_init(|| {
                    let reach = inner.plan.reaches.get(evaluated);
                    let scope = scope.get_or_init(|| {
                        Scope::new(inner, subject, evaluated, variables, reach, &mut shared)
                    });
                    // The scope is the evaluated object's, not the first binding's.
                    now = Instant::now();
                    Memo::new(inner, scope)
                });
                now = inner.run_binding(bi, &mut run, memo, prefix, now, &mut verdict);
            }
        }
        annotations::add_excepted(&mut verdict);
        verdict
    }
}

/// What the bindings of one request share: its subject, and the
/// exceptions that may let a failure through.
struct Run<'a, 'r> {
    subject: &'a Subject<'r>,
    excepting: &'a mut excepting::Excepting,
}
