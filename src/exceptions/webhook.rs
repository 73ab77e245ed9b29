//! What the webhooks do to `GpuPolicyException` objects themselves:
//! `/mutate` records who asked (`spec.requestedBy`, from the request's
//! authenticated user, never from what the author wrote), and `/validate`
//! refuses one the engine could not read, with the field at fault, and
//! warns about policies it names that are not loaded. Who may create one
//! is not decided here: kube-apiserver's guard policy does that, and also
//! checks `requestedBy`, so a request that skips this webhook cannot
//! record another name.
use super::{ExceptionError, API_VERSION, GROUP, KIND};
use crate::k8s::json::str_at;
use crate::k8s::Patch;
use crate::review::{Operation, Request, Response};
use serde_json::Value;

/// Whether `req` is about a `GpuPolicyException`.
pub fn is_exception(req: &Request) -> bool {
    req.kind.group == GROUP && req.kind.kind == KIND
}

/// What this webhook makes of a request, before any policy runs.
#[derive(Debug)]
pub enum Route {
    /// Not a `GpuPolicyException`: the policies' alone.
    Policies,
    /// Answered here: `/mutate` records the requester, `/validate`
    /// refuses an exception the engine cannot read (422 Invalid).
    Answered(Response),
    /// An exception the engine can read, for the policies to judge; these
    /// warnings go with their answer.
    Judged(Vec<String>),
}

/// Routes `req` (`mutate`: for `/mutate`, else `/validate`), `read` and
/// `known` as [`judge`] takes them.
pub fn route(
    req: &Request,
    mutate: bool,
    read: impl FnOnce(&Value) -> Result<super::Exception, Vec<ExceptionError>>,
    known: impl Fn(&str) -> bool,
) -> Route {
    if !is_exception(req) {
        return Route::Policies;
    }
    if mutate {
        return Route::Answered(Response::allow().with_patch(record_requester(req)));
    }
    let (denials, warnings) = judge(req, read, known);
    if denials.is_empty() {
        return Route::Judged(warnings);
    }
    let mut response = Response::deny(denials.join("\n"));
    response.reason = Some("Invalid".into());
    response.code = Some(422);
    Route::Answered(response)
}

/// The patch that sets `spec.requestedBy` to the creating user (CREATE)
/// or back to what it was (UPDATE); none when it already says so, or
/// when there is nothing to record.
pub fn record_requester(req: &Request) -> json_patch::Patch {
    let wanted = requester(req).filter(|u| !u.is_empty());
    let (Some(object), Some(wanted)) = (req.object.as_ref(), wanted) else {
        return json_patch::Patch(Vec::new());
    };
    if str_at(object, "/spec/requestedBy") == wanted || object.get("spec").is_none() {
        return json_patch::Patch(Vec::new());
    }
    let mut patch = Patch::new(object);
    match patch.set(&["spec", "requestedBy"], Value::String(wanted.to_string())) {
        Ok(()) => json_patch::Patch(patch.into_operations()),
        // A `spec` that is not an object: the apiserver's schema refuses it.
        Err(_) => json_patch::Patch(Vec::new()),
    }
}

/// What `/validate` says of an exception object: denials (it cannot be
/// read, each error at its field) and warnings (policies it names that
/// `known` does not know: it lets nothing through until one is loaded).
pub fn judge(
    req: &Request,
    read: impl FnOnce(&Value) -> Result<super::Exception, Vec<ExceptionError>>,
    known: impl Fn(&str) -> bool,
) -> (Vec<String>, Vec<String>) {
    let Some(object) = req.object.as_ref() else {
        return (Vec::new(), Vec::new());
    };
    if matches!(req.operation, Operation::Delete | Operation::Connect) {
        return (Vec::new(), Vec::new());
    }
    if let Some(api) = object.get("apiVersion").and_then(Value::as_str) {
        if api != API_VERSION {
            return (Vec::new(), Vec::new());
        }
    }
    let wrong = requester_mismatch(req, object);
    let name = format!("{KIND} {}", req.display_name());
    if let Some(wrong) = wrong {
        return (
            vec![format!("{name}: spec.requestedBy: {wrong}")],
            Vec::new(),
        );
    }
    match read(object) {
        Err(errors) => (
            errors.iter().map(|e| format!("{name}: {e}")).collect(),
            Vec::new(),
        ),
        Ok(exception) => {
            let warnings = (exception.policies.iter().enumerate())
                .filter(|(_, p)| *p != super::ALL_POLICIES && !known(p))
                .map(|(i, p)| {
                    format!("{name}: spec.policies[{i}]: no policy {p} is loaded; the exception lets nothing through until one is")
                })
                .collect();
            (Vec::new(), warnings)
        }
    }
}

/// What `spec.requestedBy` must say: on CREATE the creating user, on
/// UPDATE what it was.
fn requester(req: &Request) -> Option<&str> {
    match req.operation {
        Operation::Create => req.user_info.get("username").and_then(Value::as_str),
        Operation::Update => (req.old_object.as_ref()).map(|old| str_at(old, "/spec/requestedBy")),
        _ => None,
    }
}

/// Why `spec.requestedBy` is not what the request says it must be
/// ([`requester`]), if it is not. The guard policy in kube-apiserver
/// checks the same; this check stands where that policy is not installed.
fn requester_mismatch(req: &Request, object: &Value) -> Option<String> {
    let written = str_at(object, "/spec/requestedBy");
    let wanted = requester(req).filter(|w| *w != written)?;
    Some(match req.operation {
        Operation::Create => format!("must be the creating user {wanted:?}, not {written:?}: leave it out, gpu-admission records it"),
        _ => format!("cannot change (it was {wanted:?}): it records who created the exception"),
    })
}
