//! Policy files in Kubernetes' ValidatingAdmissionPolicy format: loading,
//! matching and evaluation, with kube-apiserver's semantics.
use crate::cel::{self, Env, Extensions};
use crate::k8s::json::Pointer as _;
use crate::k8s::NamespaceLookup;
use crate::review::{Operation, Request};
use crate::subject::{judges_template, Subject};
use eval::{applies, Scope, Shared};
use kube_cel::cel::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

mod annotations;
mod eval;
mod index;
mod load;
mod matching;
mod model;
mod mutate;
mod watch;

pub use annotations::VALIDATION_FAILURE_ANNOTATION;
pub use load::{
    parse_documents, parse_files, read_documents, read_files, Document, LoadError, LoadErrors,
    LoadNotice, NoticeLevel, PolicyFile, Source,
};
pub use matching::MatchResources;
pub use mutate::{AppliedMutation, Mutated};
pub use watch::{watch_dir, DirWatcher, WatchOptions, DEFAULT_RESCAN};

pub use model::DESCRIPTION_ANNOTATION;
pub use model::POD_TEMPLATES_ANNOTATION;
use model::{Binding, Policy, Reaches};

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
    /// The bindings a request could match, by resource and operation.
    pub(crate) index: index::BindingIndex,
    /// MutatingAdmissionPolicies, and their bindings in the order they run
    /// (by policy name).
    pub(crate) mutating: Vec<Policy>,
    pub(crate) mutating_bindings: Vec<(Binding, usize)>,
    pub(crate) mutating_index: index::BindingIndex,
    pub(crate) params: Vec<Param>,
    /// Slots of expressions a request evaluates once for all policies
    /// ([`cel::Compiled::memo_slot`]).
    pub(crate) memo_slots: usize,
    /// Every top-level variable some expression refers to.
    pub(crate) referenced: BTreeSet<String>,
    /// What the policies a request could match (by its bucket of
    /// `index`) can reach of `object` and `oldObject`, and what any policy
    /// can reach of `namespaceObject`: all of them that is converted into
    /// CEL values for its validation.
    pub(crate) reaches: index::PerBucket<Reaches>,
    /// What loading ignored, as kube-apiserver does.
    pub(crate) notices: Vec<LoadNotice>,
    /// The documents compiled, for [`PolicySet::with_documents`].
    pub(crate) documents: Vec<Document>,
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

/// Gives each expression of `policies` that reads neither params nor
/// policy variables, and is written the same in another of their
/// expressions, the slot of its text; returns the number of slots. Such an
/// expression has one value per evaluated object whichever policy asks.
fn assign_memo_slots(policies: &mut [Policy]) -> usize {
    let shared = |e: &cel::Compiled| {
        !e.variables.contains("params")
            && !e.variables.contains("variables")
            && e.policy_variables.is_empty()
            && e.variable_closure.is_empty()
            && !e.reads_variables_map
    };
    let mut written: std::collections::HashMap<String, usize> = Default::default();
    for e in policies.iter().flat_map(Policy::expressions) {
        if shared(e) {
            *written.entry(e.source.clone()).or_default() += 1;
        }
    }
    let mut slots: std::collections::HashMap<String, usize> = Default::default();
    for e in policies.iter_mut().flat_map(Policy::expressions_mut) {
        if shared(e) && written[&e.source] > 1 {
            let next = slots.len();
            e.memo_slot = Some(*slots.entry(e.source.clone()).or_insert(next));
        }
    }
    slots.len()
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
        let mut notices = Vec::new();
        let mut validating = Family::read(Family::VALIDATING, &env, docs, &mut errors);
        let mutating = Family::read(Family::MUTATING, &env, docs, &mut errors);
        notices.append(&mut validating.key_notices);
        let param_kinds: BTreeSet<(String, String)> = (validating.policies.iter())
            .chain(&mutating.policies)
            .filter_map(|p| p.param_kind.clone())
            .collect();
        let mut bindings = Vec::new();
        let mut mutating_bindings = Vec::new();
        let (mut binding_names, mut mutating_names) = (BTreeSet::new(), BTreeSet::new());
        let mut params = Vec::new();
        for doc in docs {
            let (api, kind) = doc.type_meta();
            let mut handled = false;
            for (family, out, names) in [
                (&validating, &mut bindings, &mut binding_names),
                (&mutating, &mut mutating_bindings, &mut mutating_names),
            ] {
                if family.owns(doc) {
                    handled = true;
                    if let Some(bound) = family.bind(doc, names, &mut errors, &mut notices) {
                        out.push(bound);
                    }
                }
            }
            if handled {
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
            // A policy or binding under an apiVersion the engine does not
            // read (a typo of the group, a version not served) would
            // otherwise be skipped, silently switching it off.
            if let Some(accepted) = Family::api_versions_of(kind) {
                errors.push(LoadError::unknown_api_version(doc, accepted));
                continue;
            }
            // A Deployment kept next to its policy, the CRD of a params
            // kind: not the engine's, skipped.
            notices.push(LoadNotice {
                level: NoticeLevel::Warning,
                at: LoadError::at(
                    &doc.source,
                    "",
                    format!(
                        "skipped: kind {:?} (apiVersion {:?}) is not a ValidatingAdmissionPolicy, a MutatingAdmissionPolicy, one of their bindings, or a params kind named by a policy's paramKind",
                        kind, api
                    ),
                ),
            });
        }
        if !errors.is_empty() {
            return Err(LoadErrors(errors));
        }
        let validating_notes = validating.template_notes;
        let (mut policies, mutating) = (validating.policies, mutating.policies);
        // What a paramRef that names a namespace finds does not depend on
        // the request: worked out here, once.
        for (bound, family) in [
            (&mut bindings, &policies),
            (&mut mutating_bindings, &mutating),
        ] {
            for (binding, pi) in bound.iter_mut() {
                let (Some(kind), Some(pref)) = (&family[*pi].param_kind, &mut binding.param_ref)
                else {
                    continue;
                };
                if pref.namespace.is_some() {
                    let found = (params.iter().enumerate())
                        .filter(|(_, p)| pref.finds(kind, p, None))
                        .map(|(i, _)| i)
                        .collect();
                    pref.found = Some(found);
                }
            }
        }
        // Expressions written alike in several validating policies that
        // read no params and no policy variables: a request evaluates each
        // once per evaluated object (see `eval::Memo`).
        let memo_slots = if env.all_pure() {
            assign_memo_slots(&mut policies)
        } else {
            0
        };
        // The parts of validating policies' expressions that read only
        // `params`, worked out once per params object (see `cel::fold`).
        for policy in &mut policies {
            let Some(kind) = policy.param_kind.clone() else {
                continue;
            };
            for (i, param) in params.iter().enumerate() {
                if (param.api_version.as_str(), param.kind.as_str()) != (&kind.0[..], &kind.1[..]) {
                    continue;
                }
                let constants =
                    cel::fold::PolicyConstants::work_out(policy.expressions(), &env, &param.value);
                if !constants.is_empty() {
                    policy.param_constants.push((i, constants));
                }
            }
        }
        // Mutating policies run in the order of their names (each binding
        // of one policy in file order), each seeing the previous result.
        mutating_bindings.sort_by(|(_, a), (_, b)| mutating[*a].name.cmp(&mutating[*b].name));
        let referenced = policies
            .iter()
            .chain(&mutating)
            .flat_map(Policy::expressions)
            .flat_map(|e| e.variables.iter().cloned())
            .collect();
        let index = |bindings: &[(Binding, usize)], policies: &[Policy]| {
            index::BindingIndex::new(
                bindings
                    .iter()
                    .map(|(_, pi)| &policies[*pi].match_constraints),
            )
        };
        let validating_index = index(&bindings, &policies);
        // The namespace is converted once per request for every scope (see
        // `eval::Shared`): every bucket converts what any policy reaches.
        let mut namespace = crate::cel::Reach::default();
        for p in &policies {
            namespace.merge(&p.reach.namespace);
        }
        let reaches = validating_index.per_bucket(|candidates| {
            let mut reaches = Reaches::default();
            for &bi in candidates {
                reaches.merge(&policies[bindings[bi].1].reach);
            }
            reaches.namespace = namespace.clone();
            reaches
        });
        Ok(PolicySet {
            inner: Arc::new(Inner {
                index: validating_index,
                reaches,
                mutating_index: index(&mutating_bindings, &mutating),
                env,
                policies,
                bindings,
                mutating,
                mutating_bindings,
                params,
                memo_slots,
                referenced,
                notices,
                documents: docs.to_vec(),
                template_notes: validating_notes,
            }),
        })
    }

    /// The set compiled again with `extra` documents (bindings, params)
    /// beside its own, with the same host extensions.
    pub fn with_documents(&self, extra: &[Document]) -> Result<PolicySet, LoadErrors> {
        let mut docs = self.inner.documents.clone();
        docs.extend_from_slice(extra);
        PolicySet::compile_with(&docs, self.inner.env.extensions().clone())
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
                    .flat_map(cel::portability::beyond_kubernetes)
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
        // The clock is read once per evaluated binding: the end of one is
        // the start of the next, and the deadline is checked against it.
        let mut now = Instant::now();
        let passed = |now: Instant| deadline.is_some_and(|d| now >= d);
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
            if passed(now) {
                verdict.timed_out = true;
                return verdict;
            }
            if direct.is_none() {
                let reach = inner.reaches.get(req);
                direct = Some(Scope::new(inner, subject, req, reach, &mut shared));
                // The scope is the request's, not the first binding's.
                now = Instant::now();
            }
            let scope = direct.as_ref().expect("set above");
            now = inner.run_binding((policy, binding), req, scope, "", now, &mut verdict);
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
                if passed(now) {
                    verdict.timed_out = true;
                    return verdict;
                }
                if pod_scope.is_none() {
                    let reach = inner.reaches.get(pod_req);
                    pod_scope = Some(Scope::new(inner, subject, pod_req, reach, &mut shared));
                    now = Instant::now();
                }
                let scope = pod_scope.as_ref().expect("set above");
                now = inner.run_binding(
                    (policy, binding),
                    req,
                    scope,
                    &template.prefix,
                    now,
                    &mut verdict,
                );
            }
        }
        verdict
    }
}

/// Validating or mutating policies and their bindings: read the same way,
/// with their own kinds.
struct Family<'d> {
    kinds: &'static FamilyKinds,
    policies: Vec<Policy>,
    /// Names of every policy document, including those with errors, so
    /// that their bindings are not reported again.
    declared: BTreeSet<&'d str>,
    /// One note per policy also run on controllers' pod templates (only
    /// validating policies are).
    template_notes: Vec<LoadNotice>,
    /// What `lint` says of audit annotation keys: one returned under
    /// another key than `<policy>.<key>`, two policies that return the same.
    key_notices: Vec<LoadNotice>,
}

struct FamilyKinds {
    api_versions: &'static [&'static str],
    policy: &'static str,
    binding: &'static str,
    read_policy: fn(&Env, &Document, &mut Vec<LoadError>) -> Option<Policy>,
    read_binding: fn(&Document, &mut Vec<LoadError>) -> Option<Binding>,
    /// Whether a binding without `paramRef` of a policy with `paramKind`
    /// is evaluated with null params (Kubernetes' documented mutating
    /// example does this) instead of being an error.
    params_optional: bool,
    /// Whether its policies are also run on controllers' pod templates.
    judges_templates: bool,
}

impl<'d> Family<'d> {
    const VALIDATING: &'static FamilyKinds = &FamilyKinds {
        api_versions: API_VERSIONS,
        policy: "ValidatingAdmissionPolicy",
        binding: "ValidatingAdmissionPolicyBinding",
        read_policy: model::read_policy,
        read_binding: model::read_binding,
        params_optional: false,
        judges_templates: true,
    };
    const MUTATING: &'static FamilyKinds = &FamilyKinds {
        api_versions: MUTATING_API_VERSIONS,
        policy: "MutatingAdmissionPolicy",
        binding: "MutatingAdmissionPolicyBinding",
        read_policy: model::read_mutating_policy,
        read_binding: model::read_mutating_binding,
        params_optional: true,
        judges_templates: false,
    };

    /// The apiVersions of `kind` when it is a policy or binding kind of a
    /// family.
    fn api_versions_of(kind: &str) -> Option<&'static [&'static str]> {
        [Family::VALIDATING, Family::MUTATING]
            .into_iter()
            .find(|k| kind == k.policy || kind == k.binding)
            .map(|k| k.api_versions)
    }

    /// Reads the family's policy documents; names must be unique.
    fn read(
        kinds: &'static FamilyKinds,
        env: &Env,
        docs: &'d [Document],
        errors: &mut Vec<LoadError>,
    ) -> Family<'d> {
        let is_policy = |d: &Document| {
            let (api, kind) = d.type_meta();
            kinds.api_versions.contains(&api) && kind == kinds.policy
        };
        let declared = docs
            .iter()
            .filter(|d| is_policy(d))
            .filter_map(|d| d.value.at("/metadata/name").and_then(|n| n.as_str()))
            .collect();
        let mut policies: Vec<Policy> = Vec::new();
        let mut template_notes = Vec::new();
        let mut key_notices = Vec::new();
        let mut returned_keys = BTreeMap::new();
        let mut sources: BTreeMap<String, &Source> = BTreeMap::new();
        for doc in docs.iter().filter(|d| is_policy(d)) {
            let Some(p) = (kinds.read_policy)(env, doc, errors) else {
                continue;
            };
            key_notices.extend(annotations::key_notices(&p, doc, &mut returned_keys));
            if kinds.judges_templates && p.judges_pod_templates() {
                template_notes.push(pod_template_notice(&p, doc));
            }
            if let Some(first) = sources.insert(p.name.to_string(), &doc.source) {
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
        Family {
            kinds,
            policies,
            declared,
            template_notes,
            key_notices,
        }
    }

    /// Whether `doc` is one of the family's policies or bindings.
    fn owns(&self, doc: &Document) -> bool {
        let (api, kind) = doc.type_meta();
        self.kinds.api_versions.contains(&api)
            && (kind == self.kinds.policy || kind == self.kinds.binding)
    }

    /// Reads a binding document and finds its policy, as kube-apiserver
    /// does: a binding of a missing policy does nothing (a warning), a
    /// `paramRef` for a policy without `paramKind` is ignored (a note).
    /// `None` for policy documents, read already.
    fn bind(
        &self,
        doc: &Document,
        names: &mut BTreeSet<String>,
        errors: &mut Vec<LoadError>,
        notices: &mut Vec<LoadNotice>,
    ) -> Option<(Binding, usize)> {
        if doc.type_meta().1 != self.kinds.binding {
            return None;
        }
        let mut notice = |level, field: &str, message: String| {
            notices.push(LoadNotice {
                level,
                at: LoadError::at(&doc.source, field, message),
            })
        };
        let mut b = (self.kinds.read_binding)(doc, errors)?;
        if !names.insert(b.name.clone()) {
            errors.push(LoadError::at(
                &doc.source,
                "metadata.name",
                format!("binding {} is defined twice", b.name),
            ));
            return None;
        }
        let Some(i) = self.policies.iter().position(|p| *p.name == *b.policy_name) else {
            if !self.declared.contains(b.policy_name.as_str()) {
                notice(
                    NoticeLevel::Warning,
                    "spec.policyName",
                    format!(
                        "no {} named {}: binding {} is ignored",
                        self.kinds.policy, b.policy_name, b.name
                    ),
                );
            }
            return None;
        };
        let policy = &self.policies[i];
        match (&policy.param_kind, &b.param_ref) {
            (Some(_), None) if self.kinds.params_optional => notice(
                NoticeLevel::Note,
                "spec.paramRef",
                format!(
                    "absent: policy {} has a paramKind, so it is evaluated with params null",
                    policy.name
                ),
            ),
            (Some(_), None) => {
                errors.push(LoadError::at(
                    &doc.source,
                    "spec.paramRef",
                    format!("required: policy {} has a paramKind", policy.name),
                ));
                return None;
            }
            // Kubernetes: "If the policy does not specify a ParamKind then
            // this field is ignored, and the rules are evaluated without a
            // param."
            (None, Some(_)) => {
                tracing::debug!(
                    binding = %b.name,
                    "paramRef ignored: policy {} has no paramKind",
                    policy.name
                );
                notice(
                    NoticeLevel::Note,
                    "spec.paramRef",
                    format!(
                        "ignored: policy {} has no paramKind, so it is evaluated without params",
                        policy.name
                    ),
                );
                b.param_ref = None;
            }
            _ => {}
        }
        Some((b, i))
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
