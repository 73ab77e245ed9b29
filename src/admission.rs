//! The two webhook answers: `/mutate` (placement) and `/validate` (policies).
use crate::k8s::{workloads, NamespaceLookup};
use crate::placement::{self, ProfileSet};
use crate::policy::{PolicyEvaluation, PolicySet};
use crate::review::{Operation, Request, Response};
use arc_swap::ArcSwap;
use std::sync::Arc;
use std::time::Instant;

/// Everything loaded from the policy folder.
#[derive(Clone, Debug, Default)]
pub struct Bundle {
    pub policies: PolicySet,
    pub placement: ProfileSet,
}

/// An answer plus what produced it, for logs and metrics.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub response: Response,
    /// The placement profile that patched the object, if any.
    pub profile: Option<String>,
    /// Each policy binding evaluated.
    pub evaluations: Vec<PolicyEvaluation>,
}

/// Answers admission requests with the current bundle.
pub struct Admission {
    bundle: ArcSwap<Bundle>,
    namespaces: Arc<dyn NamespaceLookup>,
}

impl Admission {
    pub fn new(bundle: Bundle, namespaces: Arc<dyn NamespaceLookup>) -> Admission {
        Admission {
            bundle: ArcSwap::from_pointee(bundle),
            namespaces,
        }
    }

    /// Replaces the bundle; requests in flight finish with the old one.
    pub fn replace(&self, bundle: Bundle) {
        self.bundle.store(Arc::new(bundle));
    }

    pub fn bundle(&self) -> Arc<Bundle> {
        self.bundle.load_full()
    }

    /// The `/mutate` answer: placement patch for pods on CREATE and for
    /// Karpenter NodePools on CREATE and UPDATE.
    pub fn mutate(&self, req: &Request) -> Outcome {
        let bundle = self.bundle.load();
        let plan =
            placement::plan_with_namespaces(&bundle.placement, req, self.namespaces.as_ref());
        let mut response = Response::allow().with_patch(plan.patch);
        response.warnings = plan.warnings;
        Outcome {
            response,
            profile: plan.profile,
            evaluations: Vec::new(),
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
        let bundle = self.bundle.load();
        let mut verdict = bundle
            .policies
            .evaluate_until(req, self.namespaces.as_ref(), deadline);
        if verdict.timed_out {
            return Outcome {
                response: deadline_denial(),
                profile: None,
                evaluations: verdict.evaluations,
            };
        }
        verdict
            .denials
            .extend(self.placement_conflicts(&bundle, req));
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
        Outcome {
            response,
            profile: None,
            evaluations: verdict.evaluations,
        }
    }

    /// Denials for GPU pods (and pod templates) whose own node selection
    /// contradicts the placement profile that would place them: mutation
    /// leaves them alone rather than make them unschedulable.
    ///
    /// Pods are judged on CREATE only (their scheduling fields cannot change
    /// later); controllers on CREATE and UPDATE, since a template edit makes
    /// new pods.
    fn placement_conflicts(&self, bundle: &Bundle, req: &Request) -> Vec<String> {
        let is_pod = req.kind.group.is_empty() && req.kind.kind == "Pod";
        let judged = match req.operation {
            Operation::Create => true,
            Operation::Update => !is_pod,
            Operation::Delete | Operation::Connect => false,
        };
        let Some(object) = req.object.as_ref().filter(|_| judged) else {
            return Vec::new();
        };
        if req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) {
            return Vec::new();
        }
        let (pod, prefix) = if is_pod {
            (std::borrow::Cow::Borrowed(object), String::new())
        } else if let Some(pod) = workloads::pod_from_template(object) {
            (
                std::borrow::Cow::Owned(pod),
                format!("{} {}: ", req.kind.kind, req.name),
            )
        } else {
            return Vec::new();
        };
        let labels = match req.namespace.as_deref() {
            Some(ns) => placement::namespace_labels(ns, self.namespaces.as_ref()),
            None => Default::default(),
        };
        placement::conflicts(&bundle.placement, &pod, &labels)
            .into_iter()
            .map(|c| format!("{PLACEMENT_POLICY}: {prefix}{c}"))
            .collect()
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

/// The name denials from placement conflicts go under.
pub const PLACEMENT_POLICY: &str = "gpu-placement";
