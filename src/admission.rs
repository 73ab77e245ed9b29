//! The two webhook answers: `/mutate` (placement) and `/validate`
//! (policies). Each works the request's [`Subject`] out once and hands it
//! to placement and the policy engine. [`Admission`] is also the server's
//! [`Webhook`].
use crate::authz::{Authorizer, NoAuthorizer};
use crate::cel::gpu::gpu_val;
use crate::exceptions::{webhook as exception_webhook, Excepted, ExceptionLookup, NoExceptions};
use crate::gpu::facts::PlacementFacts;
use crate::gpu::{NoNodes, NodeLookup};
use crate::k8s::{ClaimLookup, NamespaceLookup, NoClaims};
use crate::placement::{self, ProfileSet};
use crate::policy::{AppliedMutation, PolicyEvaluation, PolicySet};
use crate::review::{Operation, Request, Response};
use crate::server::{Answer, Endpoint, Hints, PolicyResult, Step, Webhook};
use crate::subject::{Subject, SubjectKind};
use arc_swap::ArcSwap;
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
    /// The usernames of Kueue's controller (see [`Admission::with_kueue_controllers`]).
    kueue_controllers: Vec<String>,
    /// Called with what exceptions let through on each answered request.
    on_excepted: Option<ExceptedCounter>,
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
            kueue_controllers: vec![crate::kueue::DEFAULT_CONTROLLER.to_string()],
            on_excepted: None,
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
            kueue_controllers: self.kueue_controllers.clone(),
            on_excepted: self.on_excepted.clone(),
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
        mutate_with(&self.bundle.load(), self.lookups(), req, deadline)
    }

    /// The `/validate` answer: every matching policy binding.
    pub fn validate(&self, req: &Request) -> Outcome {
        self.validate_until(req, None)
    }

    /// [`Admission::validate`] that stops evaluating once `deadline` has
    /// passed and then answers with a retryable denial: an evaluation cut
    /// short never admits what it did not finish judging.
    pub fn validate_until(&self, req: &Request, deadline: Option<Instant>) -> Outcome {
        let bundle = self.bundle.load();
        let outcome = validate_with(&bundle, self.lookups(), &self.authorizer, req, deadline).0;
        self.count_excepted(&outcome);
        outcome
    }

    fn lookups(&self) -> Lookups<'_> {
        (
            self.namespaces.as_ref(),
            self.claims.as_ref(),
            self.nodes.as_ref(),
            self.exceptions.as_ref(),
            &self.kueue_controllers,
        )
    }

    fn count_excepted(&self, outcome: &Outcome) {
        if let (Some(count), false) = (&self.on_excepted, outcome.excepted.is_empty()) {
            count(&outcome.excepted);
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
            // The shipped set judges a GPU pod in about 0.1 ms; a request
            // that needs more is resumed on an answering thread, so a
            // flood of expensive validations costs the connections'
            // threads at most this much each.
            inline_slice: Duration::from_micros(300),
            metric_kinds: METRIC_KINDS,
        }
    }

    /// `/mutate` is answered at once when no MutatingAdmissionPolicy is
    /// bound (placement walks the pod a fixed number of levels deep and
    /// runs no CEL: a few microseconds, less than a hand-off), and so is a
    /// `/validate` no binding could match (nor its template pod). Any other
    /// `/validate` is evaluated within the slice and answered if every
    /// binding was; else the work is dropped, nothing of it observable, and
    /// the evaluation starts again when resumed. A set in which some policy
    /// reads `authorizer` is never evaluated within the slice: its checks
    /// may wait on the cluster (SubjectAccessReviews), which no clock can
    /// interrupt.
    fn answer(
        self: Arc<Self>,
        endpoint: Endpoint,
        request: &Arc<Request>,
        slice_end: Instant,
    ) -> Step {
        let bundle = self.bundle.load_full();
        let policies = &bundle.policies;
        let done = match endpoint {
            Endpoint::Mutate if !policies.has_mutations() => {
                Some(mutate_with(&bundle, self.lookups(), request, None))
            }
            Endpoint::Mutate => None,
            Endpoint::Validate
                if !policies.may_match(request, &self.kueue_controllers)
                    && !exception_webhook::is_exception(request) =>
            {
                Some(Outcome {
                    response: Response::allow(),
                    ..Outcome::default()
                })
            }
            Endpoint::Validate
                if slice_end > Instant::now() && !policies.references("authorizer") =>
            {
                let lookups = self.lookups();
                let (outcome, finished) =
                    validate_with(&bundle, lookups, &self.authorizer, request, Some(slice_end));
                if finished {
                    self.count_excepted(&outcome);
                }
                finished.then_some(outcome)
            }
            Endpoint::Validate => None,
        };
        if let Some(outcome) = done {
            return Step::Done(outcome.into());
        }
        let request = request.clone();
        Step::Resume(Box::new(move |deadline| {
            let lookups = self.lookups();
            let outcome = match endpoint {
                Endpoint::Mutate => mutate_with(&bundle, lookups, &request, Some(deadline)),
                Endpoint::Validate => {
                    let (outcome, _) =
                        validate_with(&bundle, lookups, &self.authorizer, &request, Some(deadline));
                    self.count_excepted(&outcome);
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
];

/// Where a subject's namespace, DRA claims, the cluster's nodes and the
/// policy exceptions of its namespace are looked up; the usernames of
/// Kueue's controller.
pub type Lookups<'a> = (
    &'a dyn NamespaceLookup,
    &'a dyn ClaimLookup,
    &'a dyn NodeLookup,
    &'a dyn ExceptionLookup,
    &'a [String],
);

/// The subject of `req` with everything the policies read: its pod's DRA
/// claims (looked up in `claims`), its GPU facts,
/// how placement sees its pod, and the `gpu` variable when some policy
/// refers to it.
pub fn subject<'r>(
    bundle: &Bundle,
    req: &'r Request,
    (namespaces, claims, nodes, exceptions, kueue): Lookups,
) -> Subject<'r> {
    let profiles = &bundle.placement;
    let sources = bundle.policies.template_sources();
    let mut subject = Subject::new_with_kueue(req, namespaces, sources, kueue)
        .with_claims(claims)
        .with_nodes(nodes)
        .with_exceptions(exceptions);
    place_templates(profiles, &mut subject);
    let mut subject = subject.with_gpu(profiles.catalog(), profiles.gpu_resources());
    let judge = |pod: &serde_json::Value, facts: &mut crate::gpu::facts::GpuFacts| {
        let judgement = placement::judge(profiles, pod, &facts.request, &subject.namespace_labels);
        facts.placement = PlacementFacts {
            profile: judgement.profile.unwrap_or_default(),
            conflict: judgement.conflict.unwrap_or_default(),
            skus: judgement.skus,
        };
    };
    match subject.kind {
        // A pod's scheduling fields cannot change after it is created.
        SubjectKind::Pod
            if req.operation == Operation::Create
                && req.sub_resource.as_deref().unwrap_or_default().is_empty() =>
        {
            if let (Some(pod), Some(mut facts)) = (req.object.as_ref(), subject.gpu.take()) {
                judge(pod, &mut facts);
                subject.gpu = Some(facts);
            }
        }
        // A new or changed template makes new pods; an update that leaves
        // every template as it was (scaling, finalizers) is not judged.
        SubjectKind::Controller => {
            for template in &mut subject.templates {
                if let (Some(pod), Some(facts)) =
                    (template.request.object.as_ref(), template.gpu.as_mut())
                {
                    judge(pod, facts);
                }
            }
            // A built-in controller's own facts are its template's.
            let built_in = subject.templates.first().filter(|t| t.label.is_empty());
            if let (Some(template), Some(facts)) = (built_in, subject.gpu.as_mut()) {
                if let Some(placed) = &template.gpu {
                    facts.placement = placed.placement.clone();
                }
            }
        }
        _ => {}
    }
    if bundle.policies.references("gpu") {
        if let Some(facts) = &subject.gpu {
            let value = gpu_val(facts);
            subject.variables.push(("gpu".to_string(), value));
        }
        for template in &mut subject.templates {
            // A built-in controller's own facts are its template's: its
            // converted value is shared, not converted twice.
            let own = subject.variables.iter().find(|(n, _)| n == "gpu");
            let value = match (template.label.is_empty(), own) {
                (true, Some((_, value))) => Some(value.clone_as_boxed()),
                _ => template.gpu.as_ref().map(gpu_val),
            };
            if let Some(value) = value {
                template.variables.push(("gpu".to_string(), value));
            }
        }
    }
    subject
}

/// A workload's template pods as `/mutate` will make their pods: the
/// placement of a Pod CREATE (tier pin, tolerations, GPUs hidden from
/// containers that ask for none) applied to each, so that what is admitted
/// as a template is admitted as pods, and the other way round.
fn place_templates(profiles: &placement::ProfileSet, subject: &mut Subject) {
    for i in 0..subject.templates.len() {
        // With the node snapshot, as /mutate sees the pods: whether GPUs
        // are hidden by default turns on where they can land.
        let pod = subject
            .template_pod(i)
            .with_gpu(profiles.catalog(), profiles.gpu_resources());
        let plan = placement::plan_subject(profiles, &pod);
        if plan.patch.0.is_empty() {
            continue;
        }
        if let Some(pod) = subject.templates[i].request.object.as_mut() {
            if let Err(e) = json_patch::patch(pod, &plan.patch) {
                tracing::error!("placement patch does not apply to a template pod: {e}");
            }
        }
    }
}

/// [`Admission::mutate_until`] with `bundle`. The subject is built once:
/// with everything the policies read when some MutatingAdmissionPolicy is
/// bound, else with what placement reads.
fn mutate_with(
    bundle: &Bundle,
    lookups: Lookups,
    req: &Request,
    deadline: Option<Instant>,
) -> Outcome {
    if exception_webhook::is_exception(req) {
        let patch = exception_webhook::record_requester(req);
        return Outcome {
            response: Response::allow().with_patch(patch),
            ..Outcome::default()
        };
    }
    let profiles = &bundle.placement;
    let runs_policies = bundle.policies.has_mutations();
    let subject = if runs_policies {
        subject(bundle, req, lookups)
    } else {
        let (namespaces, claims, nodes, _, kueue) = lookups;
        Subject::new_with_kueue(req, namespaces, bundle.policies.template_sources(), kueue)
            .with_claims(claims)
            .with_nodes(nodes)
            .with_gpu(profiles.catalog(), profiles.gpu_resources())
    };
    let plan = placement::plan_subject(profiles, &subject);
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
                let replaced = replace_object(req, mutated.object);
                let (namespaces, claims, nodes, _, kueue) = lookups;
                let again = Subject::new_with_kueue(
                    &replaced,
                    namespaces,
                    bundle.policies.template_sources(),
                    kueue,
                )
                .with_claims(claims)
                .with_nodes(nodes)
                .with_gpu(profiles.catalog(), profiles.gpu_resources());
                let replan = placement::plan_subject(profiles, &again);
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

/// `req` with `object` in place of its object: the same request as
/// placement sees it after the mutating policies.
fn replace_object(req: &Request, object: serde_json::Value) -> Request {
    let mut replaced = req.clone();
    replaced.object = Some(object);
    replaced
}

/// The `/validate` answer, and whether every binding was evaluated before
/// `deadline` (when not, the answer is [`deadline_denial`]).
fn validate_with(
    bundle: &Bundle,
    lookups: Lookups,
    authorizer: &Arc<dyn Authorizer>,
    req: &Request,
    deadline: Option<Instant>,
) -> (Outcome, bool) {
    if !exception_webhook::is_exception(req) {
        return validate_policies(bundle, lookups, authorizer, req, deadline);
    }
    // A GpuPolicyException itself: one that cannot be read is refused
    // before any policy runs; the policies judge one that can.
    let (denials, warnings) = exception_webhook::judge(
        req,
        |object| bundle.policies.read_exception(object),
        |name| bundle.policies.has_policy(name),
    );
    if !denials.is_empty() {
        let mut response = Response::deny(denials.join("\n"));
        response.reason = Some("Invalid".into());
        response.code = Some(422);
        let outcome = Outcome {
            response,
            ..Outcome::default()
        };
        return (outcome, true);
    }
    let (mut outcome, finished) = validate_policies(bundle, lookups, authorizer, req, deadline);
    if finished {
        outcome.response.warnings.extend(warnings);
    }
    (outcome, finished)
}

/// The `/validate` answer of the policy set: the subject built once, every
/// binding that matches it evaluated.
fn validate_policies(
    bundle: &Bundle,
    lookups: Lookups,
    authorizer: &Arc<dyn Authorizer>,
    req: &Request,
    deadline: Option<Instant>,
) -> (Outcome, bool) {
    let subject = subject(bundle, req, lookups).with_authorizer(authorizer.clone());
    let gpus_per_pod = match subject.kind {
        SubjectKind::Pod | SubjectKind::Controller => subject.gpu.as_ref().map_or(0, |g| g.total),
        _ => 0,
    };
    let workload_gpus = subject.gpu.as_ref().map_or(0, |g| g.workload.gpus);
    if let Some(count) = subject.too_many_templates {
        let response = Response::deny(format!(
            "gpu-admission: {} {} holds {count} pod templates; at most {} are judged: split it into smaller objects",
            req.kind.kind,
            req.display_name(),
            crate::subject::MAX_TEMPLATES
        ));
        return (
            Outcome {
                response,
                ..Outcome::default()
            },
            true,
        );
    }
    let verdict = bundle.policies.evaluate_subject(&subject, deadline);
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
