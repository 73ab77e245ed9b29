//! MutatingAdmissionPolicies on one request: each matching binding, in the
//! order of its policy's name, turns the object as the previous ones left
//! it into the next, by JSON patch or by server-side-apply merge.
use super::eval::{applies, match_conditions, with_params, Scope, Shared, Variables};
use super::model::{FailurePolicy, PatchType};
use super::plan::Reaches;
use super::{EvaluationResult, Inner, PolicyEvaluation, PolicySet};
use crate::cel;
use crate::k8s::apply::{self, Schema};
use crate::k8s::json::Pointer as _;
use crate::review::Request;
use crate::subject::Subject;
use kube_cel::cel::Value;
use serde_json::Value as Json;
use std::time::Instant;

/// What the mutating policies made of one object.
#[derive(Clone, Debug, Default)]
pub struct Mutated {
    /// The object after every mutation that applied.
    pub object: Json,
    /// The operations each policy binding added, in order, each against
    /// the object as the previous one left it.
    pub applied: Vec<AppliedMutation>,
    /// Errors of policies whose failurePolicy is Fail: the request is to be
    /// refused (`<policy>: policy error (failurePolicy Fail): ...`).
    pub errors: Vec<String>,
    /// One entry per binding evaluated, for metrics.
    pub evaluations: Vec<PolicyEvaluation>,
}

/// The change one mutating policy binding made.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct AppliedMutation {
    pub policy: String,
    pub binding: String,
    /// RFC 6902 operations from the object before this binding to after it.
    pub patch: json_patch::Patch,
}

impl PolicySet {
    /// Whether some MutatingAdmissionPolicy is bound.
    pub fn has_mutations(&self) -> bool {
        !self.inner.mutating_bindings.is_empty()
    }

    /// Runs every mutating policy binding that matches the subject's
    /// request on `object` (the request's object, or what placement made of
    /// it). `None` when no binding matches. Runs on a thread with
    /// [`super::EVALUATION_STACK`] bytes of stack.
    pub fn mutate_subject(&self, subject: &Subject, object: &Json) -> Option<Mutated> {
        let inner = &*self.inner;
        let req = subject.request;
        let mut current = req.clone();
        current.object = Some(object.clone());
        let mut mutated = Mutated {
            object: object.clone(),
            ..Mutated::default()
        };
        let mut any = false;
        for bi in inner.plan.mutating.index.candidates(req) {
            let (binding, pi) = &inner.mutating_bindings[bi];
            let policy = &inner.mutating[*pi];
            if !applies(policy, binding, &current, &subject.namespace_labels) {
                continue;
            }
            any = true;
            let start = Instant::now();
            let result = cel::with_policy_budget(|| inner.run_mutating(bi, subject, &mut current));
            let result = match result {
                Ok(None) => continue,
                Ok(Some(patch)) => {
                    if !patch.0.is_empty() {
                        mutated.applied.push(AppliedMutation {
                            policy: policy.name.to_string(),
                            binding: binding.name.clone(),
                            patch,
                        });
                    }
                    EvaluationResult::Pass
                }
                Err(message) => {
                    match policy.failure_policy {
                        FailurePolicy::Fail => mutated.errors.push(format!(
                            "{}: policy error (failurePolicy Fail): {message}",
                            policy.name
                        )),
                        // Debug level: an error may quote a value from the object.
                        FailurePolicy::Ignore => tracing::debug!(
                            policy = %policy.name,
                            binding = %binding.name,
                            error = %message,
                            "mutation error ignored (failurePolicy Ignore)"
                        ),
                    }
                    EvaluationResult::Error
                }
            };
            mutated.evaluations.push(PolicyEvaluation {
                policy: policy.name.clone(),
                result,
                duration: start.elapsed(),
            });
        }
        if let Some(object) = current.object {
            mutated.object = object;
        }
        any.then_some(mutated)
    }
}

impl Inner {
    /// One binding on `current` (whose object it replaces on success): the
    /// patch from before to after, `None` when its match conditions
    /// exclude the object (or its paramRef finds nothing and allows that),
    /// or the error that stopped it (the object is then left as it was).
    fn run_mutating(
        &self,
        bi: usize,
        subject: &Subject,
        current: &mut Request,
    ) -> Result<Option<json_patch::Patch>, String> {
        let (binding, pi) = &self.mutating_bindings[bi];
        let found = self.plan.mutating.params_found[bi].as_deref();
        // Mutating policies are evaluated whole: nothing of them is folded.
        let params = (self.binding_params(&self.mutating[*pi], binding, found, current)?)
            .into_iter()
            .map(|(value, _)| value)
            .collect();
        let before = current.object.clone().unwrap_or(Json::Null);
        let result = self.run_mutations(*pi, subject, current, &before, params);
        if result.is_err() {
            // Under Ignore the next policy sees the object as if this one
            // had not run: none of its mutations are kept.
            current.object = Some(before);
        }
        result
    }

    /// [`Inner::run_mutating`] once its params are known; may leave
    /// `current` half-mutated when it fails.
    fn run_mutations(
        &self,
        pi: usize,
        subject: &Subject,
        current: &mut Request,
        before: &Json,
        params: smallvec::SmallVec<[Value; 1]>,
    ) -> Result<Option<json_patch::Patch>, String> {
        let (policy, plan) = (&self.mutating[pi], &self.plan.mutating.policies[pi]);
        let mut matched = false;
        fn scope<'s>(
            inner: &'s Inner,
            subject: &'s Subject,
            current: &'s Request,
            reach: &'s Reaches,
            shared: &mut Shared,
        ) -> Scope<'s> {
            Scope::new(inner, subject, current, &subject.variables, reach, shared)
        }
        for param in params {
            let mut shared = Shared::default();
            // Conditions are judged on the object as this binding found it.
            {
                let scope = scope(self, subject, current, &plan.reach, &mut shared);
                let inner_ctx = with_params(policy, &scope.ctx, &param);
                let ctx = inner_ctx.as_ref().unwrap_or(&scope.ctx);
                let vars = Variables::new(policy, plan, ctx, None, None, &scope.roots);
                if !match_conditions(policy, &vars)? {
                    continue;
                }
            }
            matched = true;
            // Each mutation sees what the previous one made.
            for (i, m) in policy.mutations.iter().enumerate() {
                let next = {
                    let scope = scope(self, subject, current, &plan.reach, &mut shared);
                    let inner_ctx = with_params(policy, &scope.ctx, &param);
                    let ctx = inner_ctx.as_ref().unwrap_or(&scope.ctx);
                    let vars = Variables::new(policy, plan, ctx, None, None, &scope.roots);
                    (vars.eval(&m.expr).map_err(|e| e.to_string()))
                        .and_then(|value| {
                            let object = current.object.as_ref().unwrap_or(&Json::Null);
                            apply_mutation(m.patch_type, object, &value)
                        })
                        .and_then(|next| check_object(before, &next).map(|()| next))
                        .map_err(|e| format!("mutations[{i}]: {e}"))?
                };
                current.object = Some(next);
            }
        }
        if !matched {
            return Ok(None);
        }
        let after = current.object.as_ref().unwrap_or(&Json::Null);
        Ok(Some(json_patch::diff(before, after)))
    }
}

/// Applies one mutation's result to `object`.
fn apply_mutation(patch_type: PatchType, object: &Json, value: &Value) -> Result<Json, String> {
    let json = value
        .json()
        .map_err(|_| format!("returned a {} that has no JSON form", cel::type_name(value)))?;
    match patch_type {
        PatchType::JsonPatch => {
            let patch = json_patch_of(json)?;
            let mut next = object.clone();
            json_patch::patch(&mut next, &patch).map_err(|e| format!("JSON patch: {e}"))?;
            Ok(next)
        }
        PatchType::ApplyConfiguration => {
            if !json.is_object() {
                return Err(format!(
                    "an apply configuration must be an Object{{...}}, not {}",
                    cel::type_name(value)
                ));
            }
            apply::merge(&Schema::of(object), object, &json)
                .map_err(|e| format!("apply configuration: {e}"))
        }
    }
}

/// The operations a `jsonPatch` expression returned (a list of
/// `JSONPatch{op, path, from, value}`).
pub(super) fn json_patch_of(json: Json) -> Result<json_patch::Patch, String> {
    let Json::Array(items) = json else {
        return Err("a JSON patch expression must return a list of JSONPatch".into());
    };
    let mut ops = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let Json::Object(fields) = item else {
            return Err(format!(
                "JSONPatch [{i}] is not a JSONPatch{{op, path, value}}"
            ));
        };
        if let Some(unknown) = fields
            .keys()
            .find(|k| !["op", "path", "from", "value"].contains(&k.as_str()))
        {
            return Err(format!(
                "JSONPatch [{i}] has no field {unknown} (fields: op, path, from, value)"
            ));
        }
        let op: json_patch::PatchOperation = serde_json::from_value(Json::Object(fields))
            .map_err(|e| format!("JSONPatch [{i}]: {e}"))?;
        ops.push(op);
    }
    Ok(json_patch::Patch(ops))
}

/// A mutation must leave an object of the same identity, whose keyed
/// lists have their keys.
fn check_object(before: &Json, after: &Json) -> Result<(), String> {
    if !after.is_object() {
        return Err("the mutated object is not an object".into());
    }
    for pointer in [
        "/apiVersion",
        "/kind",
        "/metadata/name",
        "/metadata/namespace",
    ] {
        if before.at(pointer) != after.at(pointer) {
            return Err(format!(
                "invalid object: a mutation may not change {}",
                pointer[1..].replace('/', ".")
            ));
        }
    }
    apply::check(&Schema::of(after), after).map_err(|e| format!("invalid object: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_patch_values_become_operations() {
        let patch = json_patch_of(json!([
            {"op": "add", "path": "/metadata/labels/a~1b", "value": "x"},
            {"op": "test", "path": "/spec/example", "value": "Red"},
            {"op": "move", "from": "/a", "path": "/b"},
        ]))
        .unwrap();
        assert_eq!(patch.0.len(), 3);
        assert_eq!(
            serde_json::to_value(&patch).unwrap()[0],
            json!({"op": "add", "path": "/metadata/labels/a~1b", "value": "x"})
        );
        for (bad, want) in [
            (json!({"op": "add"}), "must return a list"),
            (json!(["add"]), "is not a JSONPatch"),
            (
                json!([{"op": "add", "path": "/a", "valu": 1}]),
                "has no field valu",
            ),
            (
                json!([{"op": "upsert", "path": "/a", "value": 1}]),
                "JSONPatch [0]",
            ),
            (
                json!([{"op": "add", "path": "a", "value": 1}]),
                "JSONPatch [0]",
            ),
        ] {
            let err = json_patch_of(bad.clone()).unwrap_err();
            assert!(err.contains(want), "{bad}: {err}");
        }
    }

    #[test]
    fn a_mutation_may_not_change_what_the_object_is() {
        let before = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}});
        let mut renamed = before.clone();
        renamed["metadata"]["name"] = json!("q");
        assert!(check_object(&before, &renamed)
            .unwrap_err()
            .contains("may not change metadata.name"));
        let mut nameless = before.clone();
        nameless["spec"]["containers"] = json!([{"image": "x"}]);
        assert!(check_object(&before, &nameless)
            .unwrap_err()
            .contains("list key name is required"));
        let mut labelled = before.clone();
        labelled["metadata"]["labels"] = json!({"a": "b"});
        assert_eq!(check_object(&before, &labelled), Ok(()));
    }
}
