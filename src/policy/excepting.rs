//! Which `GpuPolicyException` lets a policy's failure on a request
//! through: the exceptions that take the request's object (the subject's,
//! from the cluster, and the set's own documents), each expression
//! evaluated at most once per request, and only when a policy it covers
//! has failed.
use super::eval::request_val;
use super::Inner;
use crate::cel;
use crate::exceptions::{Exception, State};
use crate::subject::Subject;
use kube_cel::cel::Value;
use std::sync::Arc;

pub(super) struct Excepting {
    candidates: Vec<Arc<Exception>>,
    /// Per candidate, whether its expression holds, once evaluated (true
    /// without one).
    holds: Vec<Option<bool>>,
}

impl Excepting {
    /// The exceptions that may let `subject`'s request through: those the
    /// subject found, then the set's own that are active at the subject's
    /// time and take its object.
    pub(super) fn new(inner: &Inner, subject: &Subject) -> Excepting {
        let mut candidates = subject.exceptions.clone();
        if let Some(namespace) = subject.namespace_name.as_deref() {
            candidates.extend(
                (inner.exceptions.iter())
                    .filter(|e| e.state(subject.exceptions_at) == State::Active)
                    .filter(|e| e.matches_object(subject.request, namespace))
                    .cloned(),
            );
        }
        let holds = candidates
            .iter()
            .map(|e| e.expression.is_none().then_some(true))
            .collect();
        Excepting { candidates, holds }
    }

    /// The first exception that covers `policy` and whose expression
    /// holds for the request.
    pub(super) fn find(
        &mut self,
        inner: &Inner,
        subject: &Subject,
        policy: &str,
    ) -> Option<Arc<Exception>> {
        for (i, exception) in self.candidates.iter().enumerate() {
            if !exception.covers(policy) {
                continue;
            }
            let holds =
                *self.holds[i].get_or_insert_with(|| expression_holds(inner, subject, exception));
            if holds {
                return Some(exception.clone());
            }
        }
        None
    }
}

/// Whether the exception's expression is true for the subject's request,
/// with the variables policies see of the object under admission (a
/// workload, not its template pods). An error or a non-bool is false: an
/// exception that cannot be judged lets nothing through.
fn expression_holds(inner: &Inner, subject: &Subject, exception: &Exception) -> bool {
    let Some(expression) = &exception.expression else {
        return true;
    };
    let req = subject.request;
    let reads = |name: &str| expression.reads(name);
    let mut ctx = inner.env.scope();
    let null = serde_json::Value::Null;
    for (name, value) in [
        ("object", req.object.as_ref()),
        ("oldObject", req.old_object.as_ref()),
        ("namespaceObject", subject.namespace.as_deref()),
    ] {
        if reads(name) {
            ctx.add_variable_as_val(name, cel::json_to_val(value.unwrap_or(&null)));
        }
    }
    if reads("request") && !subject.variables.has("request") {
        ctx.add_variable_as_val("request", request_val(req));
    }
    (inner.env).bind_host_variables(&mut ctx, req.object.as_ref(), &subject.variables, reads);
    let result = cel::with_policy_budget(|| cel::evaluate(expression.tree(), &ctx));
    match result {
        Ok(Value::Bool(b)) => b,
        Ok(_) => {
            tracing::debug!(exception = %exception.id(), "exception expression is not a bool: it lets nothing through");
            false
        }
        Err(e) => {
            tracing::debug!(exception = %exception.id(), error = %e, "exception expression failed: it lets nothing through");
            false
        }
    }
}
