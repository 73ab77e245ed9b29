//! The two webhook answers: `/mutate` (placement) and `/validate`
//! (policies). Each works the request's [`Subject`] out once and hands it
//! to placement and the policy engine. [`Admission`] is also the server's
//! [`Webhook`].
use crate::authz::{Authorizer, NoAuthorizer};
use crate::budgets::{self, BudgetLookup, StaticBudgets};
use crate::exceptions::webhook::{self as exception_webhook, Route};
use crate::exceptions::{Excepted, ExceptionLookup, NoExceptions};
use crate::gpu::catalog::Catalog;
use crate::gpu::{NoNodes, NodeLookup};
use crate::k8s::json::str_at;
use crate::k8s::{ClaimLookup, NamespaceLookup, NoClaims};
use crate::placement::ProfileSet;
use crate::policy::{AppliedMutation, PolicyEvaluation, PolicySet};
use crate::review::{GroupVersionResource, Operation, Request, Response};
use crate::server::{Answer, Endpoint, Hints, PolicyResult, Step, Webhook};
use crate::subject::{Lookups, Needs, Subject, SubjectKind};
use arc_swap::ArcSwap;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Everything loaded from the policy folder.
#[derive(Clone, Debug, Default)]
pub struct Bundle {
    pub policies: PolicySet,
    pub placement: ProfileSet,
}

/// An answer plus what produced it: read by the audit and the offline
/// commands, and given to the server as an [`Answer`].
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub response: Response,
    /// The placement profile that patched the object, if any.
    pub profile: Option<String>,
    /// Each policy binding evaluated.
    pub evaluations: Vec<PolicyEvaluation>,
    /// `/mutate`: what each MutatingAdmissionPolicy binding changed, in
    /// order, after placement.
    pub mutations: Vec<AppliedMutation>,
    /// GPUs one pod of the object asks for (`/validate`: from the subject's
    /// GPU facts; 0 for objects that make no pods).
    pub gpus_per_pod: i64,
    /// GPUs of the whole workload as its spec says (`gpu.workload.gpus`:
    /// replicas × GPUs per pod over its templates; `/validate` only).
    pub workload_gpus: i64,
    /// What `GpuPolicyException`s let through (`/validate` only).
    pub excepted: Vec<Excepted>,
}

/// What is told of the results exceptions let through (for metrics).
pub type ExceptedCounter = Arc<dyn Fn(&[Excepted]) + Send + Sync>;

/// Answers admission requests with the current bundle.
pub struct Admission {
    bundle: ArcSwap<Bundle>,
    namespaces: Arc<dyn NamespaceLookup>,
    claims: Arc<dyn ClaimLookup>,
    nodes: Arc<dyn NodeLookup>,
    exceptions: Arc<dyn ExceptionLookup>,
    authorizer: Arc<dyn Authorizer>,
    budgets: Arc<dyn BudgetLookup>,
    /// Whether `/mutate` keeps GPU pods to the sizes with room left in
    /// their budgets (see [`Admission::with_budget_narrowing`]).
    narrowing: bool,
    /// The usernames of Kueue's controller (see [`Admission::with_kueue_controllers`]).
    kueue_controllers: Vec<String>,
    /// Called with what exceptions let through on each answered request.
    on_excepted: Option<ExceptedCounter>,
    /// Which resources' reviews lately outgrew the inline slice.
    slice_fit: SliceFit,
}

/// How long a review may work on a connection's thread before it is
/// resumed on an answering thread. The shipped set judges a GPU pod in
/// about 0.1 ms; a request that needs more is resumed there, so a flood of
/// expensive validations costs the connections' threads at most this much
/// each.
const INLINE_SLICE: Duration = Duration::from_micros(300);

/// Where a review is started: a review that runs out of its inline slice
/// is evaluated again from the start on an answering thread, and the
/// slice's work is lost (a RayCluster of the shipped set, or a pod under
/// hundreds of policies, lost 0.3 ms on every review). So a resource two
/// of whose reviews ran out of the slice, with none between that took less
/// than a slice, has its next one started on an answering thread at once,
/// and one resumed there that took less than the slice gives its resource
/// the slice again. Two, so that one slow review (the first of a process,
/// on cold caches) moves nothing. A hint of where to start, never of what
/// a review answers: the resources are read on every review without a
/// lock, and written only when one's count moves.
struct SliceFit(ArcSwap<Vec<(GroupVersionResource, u8)>>);

/// At most this many resources are counted; any more are tried within
/// the slice as before.
const SLICE_MISFITS: usize = 64;

/// How many reviews in a row must outgrow the slice.
const SLICE_STRIKES: u8 = 2;

impl SliceFit {
    fn new() -> SliceFit {
        SliceFit(ArcSwap::from_pointee(Vec::new()))
    }

    /// The reviews of `resource` in a row that outgrew the slice.
    fn strikes(&self, resource: &GroupVersionResource) -> u8 {
        let misfits = self.0.load();
        let found = misfits.iter().find(|(r, _)| same(r, resource));
        found.map_or(0, |(_, n)| *n)
    }

    /// Whether a review of `resource` is started on the connection's thread.
    fn fits(&self, resource: &GroupVersionResource) -> bool {
        self.strikes(resource) < SLICE_STRIKES
    }

    /// What a review of `resource` showed: whether it fitted the slice.
    fn learn(&self, resource: &GroupVersionResource, fitted: bool) {
        let strikes = self.strikes(resource);
        if (fitted && strikes == 0) || (!fitted && strikes >= SLICE_STRIKES) {
            return;
        }
        self.0.rcu(|misfits| {
            let mut misfits = Vec::clone(misfits);
            let at = misfits.iter().position(|(r, _)| same(r, resource));
            match (at, fitted) {
                (Some(at), true) => {
                    misfits.swap_remove(at);
                }
                (Some(at), false) => misfits[at].1 = (misfits[at].1 + 1).min(SLICE_STRIKES),
                (None, false) if misfits.len() < SLICE_MISFITS => {
                    misfits.push((resource.clone(), 1));
                }
                (None, _) => {}
            }
            misfits
        });
    }
}

/// The same resource, whatever version was asked for.
fn same(a: &GroupVersionResource, b: &GroupVersionResource) -> bool {
    a.resource == b.resource && a.group == b.group
}

impl Admission {
    /// Answers with `bundle`; pods' DRA claims are not looked up until
    /// [`Admission::with_claims`] says where.
    pub fn new(bundle: Bundle, namespaces: Arc<dyn NamespaceLookup>) -> Admission {
        Admission {
            bundle: ArcSwap::from_pointee(bundle),
            namespaces,
            claims: Arc::new(NoClaims),
            nodes: Arc::new(NoNodes),
            exceptions: Arc::new(NoExceptions),
            authorizer: Arc::new(NoAuthorizer),
            budgets: Arc::new(StaticBudgets::default()),
            narrowing: false,
            kueue_controllers: vec![crate::kueue::DEFAULT_CONTROLLER.to_string()],
            on_excepted: None,
            slice_fit: SliceFit::new(),
        }
    }

    /// Lets requests through the policies that the `GpuPolicyException`s
    /// of `exceptions` cover (besides those of the policy folder).
    pub fn with_exceptions(mut self, exceptions: Arc<dyn ExceptionLookup>) -> Admission {
        self.exceptions = exceptions;
        self
    }

    /// Calls `count` with what exceptions let through, once per answered
    /// `/validate` that some exception changed (for metrics).
    pub fn on_excepted(mut self, count: ExceptedCounter) -> Admission {
        self.on_excepted = Some(count);
        self
    }

    /// Where the cluster's exceptions are looked up.
    pub fn exceptions(&self) -> &dyn ExceptionLookup {
        self.exceptions.as_ref()
    }

    /// Answers the CEL `authorizer` checks of policies with `authorizer`
    /// (without it, every check is denied: "no authorizer configured").
    pub fn with_authorizer(mut self, authorizer: Arc<dyn Authorizer>) -> Admission {
        self.authorizer = authorizer;
        self
    }

    /// Judges GPU pods and workload templates against the GpuBudgets of
    /// `budgets` (without it, there are none).
    pub fn with_budgets(mut self, budgets: Arc<dyn BudgetLookup>) -> Admission {
        self.budgets = budgets;
        self
    }

    /// With `on`, `/mutate` narrows a GPU pod's node affinity to the sizes
    /// with room left in the GpuBudgets covering its namespace, when some
    /// of the sizes it may land on have none (`serve --budget-narrowing`,
    /// docs/budgets.md).
    pub fn with_budget_narrowing(mut self, on: bool) -> Admission {
        self.narrowing = on;
        self
    }

    /// Looks up the ResourceClaims and ResourceClaimTemplates pods name in
    /// `claims`.
    pub fn with_claims(mut self, claims: Arc<dyn ClaimLookup>) -> Admission {
        self.claims = claims;
        self
    }

    /// Judges where pods can land against the nodes `nodes` knows (without
    /// it, by node labels alone).
    pub fn with_nodes(mut self, nodes: Arc<dyn NodeLookup>) -> Admission {
        self.nodes = nodes;
        self
    }

    /// Takes the UPDATEs of these users that only admit a queued workload
    /// as Kueue's, not judged again (without it, [`crate::kueue::DEFAULT_CONTROLLER`]'s).
    pub fn with_kueue_controllers(mut self, usernames: Vec<String>) -> Admission {
        self.kueue_controllers = usernames;
        self
    }

    /// This Admission judging against the nodes `nodes` knows instead (an
    /// audit judges against the nodes it read, in a cluster and of a dump
    /// alike); everything else shared.
    pub fn judging_nodes(&self, nodes: Arc<dyn NodeLookup>) -> Admission {
        Admission {
            bundle: ArcSwap::new(self.bundle.load_full()),
            namespaces: self.namespaces.clone(),
            claims: self.claims.clone(),
            nodes,
            exceptions: self.exceptions.clone(),
            authorizer: self.authorizer.clone(),
            budgets: self.budgets.clone(),
            narrowing: self.narrowing,
            kueue_controllers: self.kueue_controllers.clone(),
            on_excepted: self.on_excepted.clone(),
            slice_fit: SliceFit::new(),
        }
    }

    /// Replaces the bundle; requests in flight finish with the old one.
    pub fn replace(&self, bundle: Bundle) {
        self.bundle.store(Arc::new(bundle));
    }

    pub fn bundle(&self) -> Arc<Bundle> {
        self.bundle.load_full()
    }

    /// Where the namespaces of requests are looked up.
    pub fn namespaces(&self) -> &dyn NamespaceLookup {
        self.namespaces.as_ref()
    }

    /// Where pods' DRA claims are looked up.
    pub fn claims(&self) -> &dyn ClaimLookup {
        self.claims.as_ref()
    }

    /// Where the nodes pods land on are looked up.
    pub fn nodes(&self) -> &dyn NodeLookup {
        self.nodes.as_ref()
    }

    /// The `/mutate` answer: placement patch for pods on CREATE and for
    /// Karpenter NodePools on CREATE and UPDATE, then every matching
    /// MutatingAdmissionPolicy in the order of its name, each on what the
    /// previous step made; one patch against the object as it arrived.
    pub fn mutate(&self, req: &Request) -> Outcome {
        self.mutate_until(req, None)
    }

    /// [`Admission::mutate`] whose mutating policies stop evaluating once
    /// `deadline` has passed (their CEL then fails, as their
    /// failurePolicy says).
    pub fn mutate_until(&self, req: &Request, deadline: Option<Instant>) -> Outcome {
        let bundle = self.bundle.load();
        match route(&bundle, Endpoint::Mutate, req) {
            Route::Answered(response) => Outcome::of(response),
            _ => self.mutate_with(&bundle, req, deadline),
        }
    }

    /// The `/validate` answer: every matching policy binding.
    pub fn validate(&self, req: &Request) -> Outcome {
        self.validate_until(req, None)
    }

    /// [`Admission::validate`] that stops evaluating once `deadline` has
    /// passed and then answers with a retryable denial: an evaluation cut
    /// short never admits what it did not finish judging.
    pub fn validate_until(&self, req: &Request, deadline: Option<Instant>) -> Outcome {
        let until = deadline.map_or(Until::Never, Until::Deadline);
        let bundle = self.bundle.load();
        match route(&bundle, Endpoint::Validate, req) {
            Route::Answered(response) => Outcome::of(response),
            Route::Judged(warnings) => (self.validate_with(&bundle, req, until, &warnings)).0,
            Route::Policies => (self.validate_with(&bundle, req, until, &[])).0,
        }
    }

    /// [`mutate`] with this Admission's lookups, and its budgets when
    /// narrowing is on.
    fn mutate_with(&self, bundle: &Bundle, req: &Request, deadline: Option<Instant>) -> Outcome {
        let narrowing = self.narrowing.then_some(self.budgets.as_ref());
        mutate(bundle, &self.lookups(), narrowing, req, deadline)
    }

    fn lookups(&self) -> Lookups<'_> {
        Lookups {
            namespaces: self.namespaces.as_ref(),
            claims: self.claims.as_ref(),
            nodes: self.nodes.as_ref(),
            exceptions: self.exceptions.as_ref(),
            kueue: &self.kueue_controllers,
        }
    }

    /// The `/validate` answer of the policies with `bundle` (`warnings`
    /// added to it), and whether it finished before `until` (when not,
    /// after a deadline, the answer is the retryable [`deadline_denial`]).
    fn validate_with(
        &self,
        bundle: &Bundle,
        req: &Request,
        until: Until,
        warnings: &[String],
    ) -> (Outcome, bool) {
        let lookups = self.lookups();
        let subject = Subject::read(req, &lookups, bundle.policies.template_sources());
        let budgeted = (subject.namespace_name.as_deref())
            .is_some_and(|ns| self.budgets.covers(ns, &subject.namespace_labels));
        let mut outcome = if !budgeted && !bundle.policies.may_match(&subject) {
            Outcome::of(Response::allow())
        } else if let Some(deadline) = until.deadline(&bundle.policies) {
            let authorizer = &self.authorizer;
            let budgets = self.budgets.as_ref();
            match validate(bundle, &lookups, authorizer, budgets, subject, deadline) {
                (outcome, true) => outcome,
                unfinished => return unfinished,
            }
        } else {
            return (Outcome::default(), false);
        };
        outcome.response.warnings.extend_from_slice(warnings);
        if let (Some(count), false) = (&self.on_excepted, outcome.excepted.is_empty()) {
            count(&outcome.excepted);
        }
        (outcome, true)
    }
}

/// Until when a `/validate` may evaluate policies.
#[derive(Clone, Copy)]
enum Until {
    /// On the connection's thread, within its slice: a set in which some
    /// policy reads `authorizer` is not evaluated there at all.
    Slice(Instant),
    /// On an answering thread, until the request's deadline.
    Deadline(Instant),
    Never,
}

impl Until {
    /// The deadline of the evaluation (`Some(None)`: none), or `None` when
    /// the policies are not to be evaluated now.
    fn deadline(self, policies: &PolicySet) -> Option<Option<Instant>> {
        match self {
            Until::Slice(end) if end > Instant::now() && !policies.references("authorizer") => {
                Some(Some(end))
            }
            Until::Slice(_) => None,
            Until::Deadline(deadline) => Some(Some(deadline)),
            Until::Never => Some(None),
        }
    }
}

impl Outcome {
    /// `response`, with nothing else to tell.
    fn of(response: Response) -> Outcome {
        Outcome {
            response,
            ..Outcome::default()
        }
    }
}

/// The server's side of [`Admission`]: what is cheap and shallow is
/// answered on the connection's thread, the rest resumed on an answering
/// thread with the evaluation stack.
impl Webhook for Admission {
    fn hints(&self) -> Hints {
        Hints {
            // Policy evaluation recurses per nesting level of expressions
            // and objects.
            stack: crate::policy::EVALUATION_STACK,
            inline_slice: INLINE_SLICE,
            metric_kinds: METRIC_KINDS,
        }
    }

    /// A `GpuPolicyException` is chosen by its resource first and
    /// answered by its own webhook (which hands one it can read on to the
    /// policies). `/mutate` is answered at once when no
    /// MutatingAdmissionPolicy is bound (placement walks the pod a fixed
    /// number of levels deep and runs no CEL: a few microseconds, less than
    /// a hand-off), and so is a `/validate` no binding could match (nor its
    /// template pods). Any other `/validate` is evaluated within the slice
    /// and answered if every binding was; else the work is dropped,
    /// nothing of it observable, and the evaluation starts again when
    /// resumed. A set in which some policy reads `authorizer` is never
    /// evaluated within the slice: its checks may wait on the cluster
    /// (SubjectAccessReviews), which no clock can interrupt.
    fn answer(
        self: Arc<Self>,
        endpoint: Endpoint,
        request: &Arc<Request>,
        slice_end: Instant,
    ) -> Step {
        let bundle = self.bundle.load_full();
        let warnings = match route(&bundle, endpoint, request) {
            Route::Answered(response) => return Step::Done(Outcome::of(response).into()),
            Route::Judged(warnings) => warnings,
            Route::Policies => Vec::new(),
        };
        let done = match (endpoint, bundle.policies.has_mutations()) {
            (Endpoint::Mutate, false) => Some(self.mutate_with(&bundle, request, None)),
            (Endpoint::Mutate, true) => None,
            (Endpoint::Validate, _) if self.slice_fit.fits(&request.resource) => {
                let until = Until::Slice(slice_end);
                // Tried within the slice (one not already over, a set that
                // may be evaluated there): it fitted, or ran out.
                let tried = until.deadline(&bundle.policies).is_some();
                let (outcome, finished) = self.validate_with(&bundle, request, until, &warnings);
                if tried {
                    self.slice_fit.learn(&request.resource, finished);
                }
                finished.then_some(outcome)
            }
            (Endpoint::Validate, _) => None,
        };
        if let Some(outcome) = done {
            return Step::Done(outcome.into());
        }
        let request = request.clone();
        Step::Resume(Box::new(move |deadline| {
            let outcome = match endpoint {
                Endpoint::Mutate => self.mutate_with(&bundle, &request, Some(deadline)),
                Endpoint::Validate => {
                    let started = Instant::now();
                    let until = Until::Deadline(deadline);
                    let outcome = (self.validate_with(&bundle, &request, until, &warnings)).0;
                    // Only a review tried within the slice counts against
                    // its resource; one that fits it here counts for it.
                    if started.elapsed() <= INLINE_SLICE {
                        self.slice_fit.learn(&request.resource, true);
                    }
                    outcome
                }
            };
            outcome.into()
        }))
    }
}

impl From<Outcome> for Answer {
    fn from(outcome: Outcome) -> Answer {
        let policies = (outcome.evaluations.into_iter())
            .map(|e| PolicyResult {
                policy: e.policy,
                result: e.result.as_str(),
                duration: e.duration,
            })
            .collect();
        Answer {
            response: outcome.response,
            profile: outcome.profile,
            policies,
        }
    }
}

/// Kinds that get a `kind` metrics label of their own: those the webhooks
/// are sent and the audit reads; anything else is `other`.
pub const METRIC_KINDS: &[&str] = &[
    "Pod",
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "Job",
    "CronJob",
    "NodePool",
    "Workspace",
    "InferenceSet",
    "RAGEngine",
    "ManagedClustersAgentPool",
    "ManagedCluster",
    "AzureManagedMachinePool",
    "AzureASOManagedMachinePool",
    "AzureASOManagedControlPlane",
    "ResourceFlavor",
    "ClusterQueue",
    "LocalQueue",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "GpuPolicyException",
    // The workload kinds of the shipped PodTemplateSources
    // (policies/workload-kinds.yaml; Volcano's Job counts as Job).
    "RayCluster",
    "RayJob",
    "RayService",
    "PyTorchJob",
    "TFJob",
    "MPIJob",
    "XGBoostJob",
    "PaddleJob",
    "JAXJob",
    "Notebook",
    "TrainJob",
    "TrainingRuntime",
    "ClusterTrainingRuntime",
    "JobSet",
    "LeaderWorkerSet",
    "InferenceService",
    "ServingRuntime",
    "ClusterServingRuntime",
    "Workflow",
    "WorkflowTemplate",
    "ClusterWorkflowTemplate",
    "CronWorkflow",
    "SparkApplication",
];

/// What the `GpuPolicyException` webhook makes of `req` at `endpoint`,
/// before any policy runs.
fn route(bundle: &Bundle, endpoint: Endpoint, req: &Request) -> Route {
    let policies = &bundle.policies;
    exception_webhook::route(
        req,
        endpoint == Endpoint::Mutate,
        |object| policies.read_exception(object),
        |name| policies.has_policy(name),
    )
}

/// What of the policy folder a subject is worked out with: for the
/// policies, or for placement alone.
fn needs(bundle: &Bundle, policies: bool) -> Needs<'_> {
    Needs {
        profiles: &bundle.placement,
        sources: bundle.policies.template_sources(),
        policies,
        gpu_variable: bundle.policies.references("gpu"),
        request_variable: bundle.policies.references("request"),
        shared_lists: bundle.policies.shared_lists(),
    }
}

/// Placement (narrowed to the sizes with room in the budgets of
/// `narrowing`, when given), then the MutatingAdmissionPolicies in the
/// order of their names, each on what the previous step made; one patch
/// against the object as it arrived. The subject is built once: with
/// everything the policies read when some MutatingAdmissionPolicy is
/// bound, else with what placement reads.
fn mutate(
    bundle: &Bundle,
    lookups: &Lookups,
    narrowing: Option<&dyn BudgetLookup>,
    req: &Request,
    deadline: Option<Instant>,
) -> Outcome {
    let profiles = &bundle.placement;
    let runs_policies = bundle.policies.has_mutations();
    let subject = Subject::build(req, lookups, &needs(bundle, runs_policies));
    let plan = place(&subject, lookups, profiles, narrowing);
    let mut patch = plan.patch;
    let mut warnings = plan.warnings;
    let mut outcome = Outcome {
        profile: plan.profile,
        ..Outcome::default()
    };
    if let (true, Some(original)) = (runs_policies, req.object.as_ref()) {
        let mut placed = original.clone();
        if let Err(e) = json_patch::patch(&mut placed, &patch) {
            // Placement builds its patch from this very object.
            tracing::error!("placement patch does not apply to its own object: {e}");
            outcome.response = Response::deny(format!(
                "gpu-admission: the placement patch does not apply: {e}"
            ));
            return outcome;
        }
        let mutate = || bundle.policies.mutate_subject(&subject, &placed);
        let mutated = match deadline {
            Some(deadline) => crate::cel::with_deadline(deadline, mutate),
            None => mutate(),
        };
        if let Some(mutated) = mutated {
            outcome.evaluations = mutated.evaluations;
            if !mutated.errors.is_empty() {
                let mut denied = Response::deny(mutated.errors.join("\n"));
                denied.warnings = warnings;
                outcome.response = denied;
                return outcome;
            }
            patch.0.extend(json_patch::diff(&placed, &mutated.object).0);
            outcome.mutations = mutated.applied;
            if mutated.object != placed {
                // Placement again on what the policies made of the pod (a
                // sidecar or init container they add gets its pin, a
                // toleration they add its affinity), so that one call is a
                // fixed point: a second one adds nothing.
                let mut replaced = req.clone();
                replaced.object = Some(mutated.object);
                let again = Subject::build(&replaced, lookups, &needs(bundle, false));
                let replan = again.plan(profiles, None);
                patch.0.extend(replan.patch.0);
                outcome.profile = outcome.profile.or(replan.profile);
                warnings.extend(replan.warnings);
            }
        }
    }
    let mut response = Response::allow().with_patch(patch);
    warnings.dedup();
    response.warnings = warnings;
    outcome.response = response;
    outcome
}

/// Placement's plan for `subject`. With budget narrowing (`budgets`), a
/// GPU pod's CREATE in a namespace a GpuBudget covers, placed as it would
/// be, that may land on sizes some of which have no room left for its
/// GPUs and some have, is kept to those with room, and told so in a
/// warning (docs/budgets.md).
fn place(
    subject: &Subject,
    lookups: &Lookups,
    profiles: &ProfileSet,
    budgets: Option<&dyn BudgetLookup>,
) -> crate::placement::Plan {
    let plan = subject.plan(profiles, None);
    let (req, labels) = (subject.request, &subject.namespace_labels);
    let pod = subject.kind == SubjectKind::Pod
        && req.operation == Operation::Create
        && req.sub_resource.is_none();
    let (Some(budgets), Some(namespace), true) = (budgets, subject.namespace_name.as_deref(), pod)
    else {
        return plan;
    };
    let room = (budgets.covers(namespace, labels))
        .then(|| subject.placed_facts(&plan.patch, lookups, profiles))
        .flatten()
        .and_then(|facts| {
            budgets::with_room(budgets, namespace, labels, &facts, profiles.catalog())
        });
    let Some(room) = room else {
        return plan;
    };
    let mut narrowed = subject.plan(profiles, Some(&room.sizes));
    if narrowed.patch == plan.patch {
        return plan;
    }
    narrowed.warnings.push(room.warning);
    narrowed
}

/// The `/validate` answer of the policy set for a subject whose kind,
/// namespace and templates are read: worked out for the policies, every
/// binding that matches it evaluated; and whether it finished before
/// `deadline` (when not, the answer is the retryable [`deadline_denial`]).
fn validate(
    bundle: &Bundle,
    lookups: &Lookups,
    authorizer: &Arc<dyn Authorizer>,
    budgets: &dyn BudgetLookup,
    subject: Subject,
    deadline: Option<Instant>,
) -> (Outcome, bool) {
    if let Some(denial) = subject.unjudgeable_templates() {
        let mut denied = Response::deny(denial);
        (denied.code, denied.reason) = (Some(status_code("Invalid")), Some("Invalid".into()));
        return (Outcome::of(denied), true);
    }
    let subject =
        (subject.work_out(lookups, &needs(bundle, true))).with_authorizer(authorizer.clone());
    let verdict = bundle.policies.evaluate_subject(&subject, deadline);
    let gpus_per_pod = match subject.kind {
        SubjectKind::Pod | SubjectKind::Controller => subject.gpu.as_ref().map_or(0, |g| g.total),
        _ => 0,
    };
    let workload_gpus = subject.gpu.as_ref().map_or(0, |g| g.workload.gpus);
    if verdict.timed_out {
        let outcome = Outcome {
            response: deadline_denial(),
            evaluations: verdict.evaluations,
            gpus_per_pod,
            workload_gpus,
            ..Outcome::default()
        };
        return (outcome, false);
    }
    let mut response = if verdict.denials.is_empty() {
        Response::allow()
    } else {
        let mut denied = Response::deny(verdict.denials.join("\n"));
        if let Some(reason) = verdict.reason {
            denied.code = Some(status_code(&reason));
            denied.reason = Some(reason);
        }
        denied
    };
    response.warnings = verdict.warnings;
    response.audit_annotations = verdict.audit_annotations;
    if response.allowed {
        budget(&subject, budgets, bundle.placement.catalog(), &mut response);
    }
    let outcome = Outcome {
        response,
        evaluations: verdict.evaluations,
        gpus_per_pod,
        workload_gpus,
        excepted: verdict.excepted,
        ..Outcome::default()
    };
    (outcome, true)
}

/// The budget stage, once the policies allowed: a GPU pod's CREATE, or a
/// workload's templates when judged, against the GpuBudgets covering the
/// request's namespace (the request's, never the object's); a pod that
/// passes is recorded as admitted unless it is a dry run.
fn budget(subject: &Subject, budgets: &dyn BudgetLookup, catalog: &Catalog, to: &mut Response) {
    let req = subject.request;
    let Some(namespace) = subject.namespace_name.as_deref() else {
        return;
    };
    // Whether a budget covers the namespace, before any charge is worked
    // out: most namespaces have none.
    if !budgets.covers(namespace, &subject.namespace_labels) {
        return;
    }
    let pod = subject.kind == SubjectKind::Pod
        && req.operation == Operation::Create
        && req.sub_resource.is_none();
    let asks: Vec<budgets::Ask> = if pod {
        let charge = subject
            .gpu
            .as_ref()
            .and_then(|g| budgets::charge(g, catalog));
        (charge.into_iter())
            .map(|charge| budgets::Ask {
                prefix: String::new(),
                charge,
                replicas: 1,
            })
            .collect()
    } else {
        (subject.templates.iter())
            .filter_map(|t| {
                let charge = budgets::charge(t.gpu.as_ref()?, catalog)?;
                let (prefix, replicas) = (t.prefix.clone(), t.replicas);
                Some(budgets::Ask {
                    prefix,
                    charge,
                    replicas,
                })
            })
            .collect()
    };
    if asks.is_empty() {
        return;
    }
    let name = str_at(
        req.object.as_ref().unwrap_or(&Value::Null),
        "/metadata/name",
    );
    let admitted = (pod && !req.dry_run && !name.is_empty()).then_some(name);
    let labels = &subject.namespace_labels;
    let verdict = budgets::judge(budgets, namespace, labels, &asks, admitted);
    to.warnings.extend(verdict.warnings);
    if !verdict.denials.is_empty() {
        let mut denied = Response::deny(verdict.denials.join("\n"));
        denied.warnings = std::mem::take(&mut to.warnings);
        denied.audit_annotations = std::mem::take(&mut to.audit_annotations);
        *to = denied;
    }
}

/// The answer when policies could not all be evaluated in time.
pub fn deadline_denial() -> Response {
    let mut response = Response::deny(
        "gpu-admission: policy evaluation did not finish before the request's deadline; the request was not evaluated and can be retried",
    );
    response.reason = Some("Timeout".into());
    response.code = Some(504);
    response
}

/// The HTTP code kube-apiserver gives a validation `reason`.
fn status_code(reason: &str) -> u16 {
    match reason {
        "Unauthorized" => 401,
        "Forbidden" => 403,
        "RequestEntityTooLarge" => 413,
        "Invalid" => 422,
        _ => 403,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request_for(group: &str, resource: &str) -> GroupVersionResource {
        GroupVersionResource {
            group: group.into(),
            version: "v1".into(),
            resource: resource.into(),
        }
    }

    /// A resource is given the slice until two reviews of it in a row
    /// outgrow it, and again once one resumed elsewhere fitted it; each
    /// resource apart, whatever its version.
    #[test]
    fn a_slice_is_given_by_what_the_last_review_of_the_resource_showed() {
        let fit = SliceFit::new();
        let pods = request_for("", "pods");
        let rayclusters = request_for("ray.io", "rayclusters");
        assert!(fit.fits(&pods) && fit.fits(&rayclusters));
        // One slow review moves nothing; two in a row do.
        fit.learn(&rayclusters, false);
        assert!(fit.fits(&rayclusters));
        fit.learn(&rayclusters, true);
        fit.learn(&rayclusters, false);
        assert!(fit.fits(&rayclusters), "one since it fitted");
        fit.learn(&rayclusters, false);
        assert!(!fit.fits(&rayclusters));
        assert!(fit.fits(&pods));
        fit.learn(&rayclusters, false);
        fit.learn(&rayclusters, true);
        assert!(fit.fits(&rayclusters));
        // Another version of the same resource is the same resource.
        fit.learn(&request_for("ray.io", "rayclusters"), false);
        fit.learn(&request_for("ray.io", "rayclusters"), false);
        assert!(!fit.fits(&GroupVersionResource {
            version: "v1alpha1".into(),
            ..request_for("ray.io", "rayclusters")
        }));
        assert!(fit.fits(&request_for("ray.io", "rayjobs")));
        // A bounded list: past it, resources are tried within the slice.
        for i in 0..2 * SLICE_MISFITS {
            let resource = request_for("example.com", &format!("r{i}"));
            fit.learn(&resource, false);
            fit.learn(&resource, false);
        }
        assert_eq!(fit.0.load().len(), SLICE_MISFITS);
        assert!(!fit.fits(&rayclusters));
        assert!(fit.fits(&request_for("example.com", "r100")));
    }

    /// Only a review tried within the slice counts: a set that reads
    /// `authorizer` is never tried there, so its reviews, however many,
    /// count neither for nor against their resource.
    #[test]
    fn reviews_never_tried_within_the_slice_do_not_count() {
        let yaml = r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: asks}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  validations:
  - expression: "authorizer.group('').resource('pods').namespace('ml').check('create').allowed() || true"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: asks}
spec: {policyName: asks, validationActions: [Deny]}
"#;
        let docs = crate::policy::parse_documents(std::path::Path::new("asks.yaml"), yaml).unwrap();
        let bundle = Bundle {
            policies: PolicySet::compile(&docs).unwrap(),
            ..Bundle::default()
        };
        let namespaces = crate::k8s::namespaces::StaticNamespaces::new();
        let admission = Arc::new(Admission::new(bundle, Arc::new(namespaces)));
        let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ml"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
        let request = Arc::new(Request::for_object(pod, Operation::Create, Some("ml")));
        let slice_end = || Instant::now() + Duration::from_secs(600);
        for _ in 0..3 {
            let step = (admission.clone()).answer(Endpoint::Validate, &request, slice_end());
            assert!(
                matches!(step, Step::Resume(_)),
                "never answered within a slice"
            );
        }
        assert!(admission.slice_fit.0.load().is_empty());
    }
}
