//! Evaluating one request: which bindings apply, the CEL variables of the
//! evaluated object, and what each binding's actions make of the result.
use super::matching::Judgements;
use super::model::{Action, Binding, Expr, FailurePolicy, Policy};
use super::plan::{PolicyPlan, Reaches};
use super::{
    annotations, EvaluationResult, Inner, PolicyEvaluation, Verdict, MAX_MESSAGE_LEN,
    VALIDATION_FAILURE_ANNOTATION,
};
use crate::cel::{self, EvalError, Val};
use crate::exceptions::Excepted;
use crate::review::Request;
use crate::subject::Subject;
use kube_cel::cel::common::types::{CelMap, CelMapEntries, CelMapKey};
use kube_cel::cel::parser::Expression;
use kube_cel::cel::{Context, Value};
#[cfg(test)]
use serde_json::json;
use smallvec::{smallvec, SmallVec};
use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Instant;

/// Whether `binding` of `policy` applies to `req`, judged afresh.
pub(super) fn applies(
    policy: &Policy,
    binding: &Binding,
    req: &Request,
    ns_labels: &BTreeMap<String, String>,
) -> bool {
    let constraints = &policy.match_constraints;
    let narrowing = binding.match_resources.as_ref();
    Judgements::new(0).applies(None, constraints, narrowing, req, ns_labels)
}

/// The CEL variables of one evaluated object, converted once and shared by
/// every policy.
pub(super) struct Scope<'e> {
    pub(super) ctx: Context<'e>,
    /// The JSON `object`, `oldObject` and `namespaceObject` were converted
    /// from, which programs read in place.
    pub(super) roots: cel::Roots<'e>,
}

/// The values of the expressions given a [`super::plan::ExprPlan::memo_slot`]
/// (written alike in several policies, reading neither params nor policy
/// variables) for one evaluated object: worked out in its `scope` by the
/// first policy that asks, kept in a program's form (a list of the
/// object's containers stays references into the request's JSON) with
/// the cost units that took. A later policy reads the value as kept and
/// is charged the same units, so its budget runs out where it would have;
/// an evaluation that failed is not kept (the next one fails alike, with
/// its own message).
pub(super) struct Memo<'m> {
    inner: &'m Inner,
    pub(super) scope: &'m Scope<'m>,
    kept: Vec<OnceLock<Kept<'m>>>,
}

/// A kept value and the cost units working it out used.
type Kept<'m> = (cel::Computed<'m>, u64);

/// What [`Variables`] read of a [`Memo`], whatever the memo borrows: the
/// value at a slot, lent for as long as the memo is.
pub(super) trait KeptValues: Sync {
    fn value(&self, slot: usize) -> Result<cel::Computed<'_>, EvalError>;
}

impl<'m> Memo<'m> {
    pub(super) fn new(inner: &'m Inner, scope: &'m Scope<'m>) -> Memo<'m> {
        let kept = std::iter::repeat_with(OnceLock::new);
        Memo {
            inner,
            scope,
            kept: kept.take(inner.plan.memo.len()).collect(),
        }
    }

    /// The value of the expression at `slot`: kept, or worked out with
    /// `evaluate` (which answers the units it used) and kept.
    fn get_or_evaluate(
        &self,
        slot: usize,
        evaluate: impl FnOnce() -> (Result<cel::Computed<'m>, EvalError>, u64),
    ) -> Result<cel::Computed<'_>, EvalError> {
        if let Some((value, cost)) = self.kept[slot].get() {
            cel::replay(*cost)?;
            return Ok(value.view());
        }
        let (result, used) = evaluate();
        let value = result?;
        Ok(self.kept[slot].get_or_init(|| (value, used)).0.view())
    }

    /// The expression the plan gave `slot`, worked out in the scope (it
    /// reads no params and no policy variables): by its program, reading
    /// the JSON in place, else by the interpreter.
    fn evaluate(&self, slot: usize) -> (Result<cel::Computed<'m>, EvalError>, u64) {
        let (pi, id) = self.inner.plan.memo[slot];
        let policy = &self.inner.policies[pi];
        let plan = &self.inner.plan.validating.policies[pi];
        let Some(expr) = policy.expressions().find(|e| e.id == id) else {
            unreachable!("the plan names an expression of the policy");
        };
        let ctx = &self.scope.ctx;
        match &plan.exprs[id].program {
            Some(program) => program.compute(ctx, self.scope.roots, None),
            None => {
                let (result, used) = cel::evaluate_val(expr.tree(), ctx);
                (result.map(cel::Computed::from_val), used)
            }
        }
    }
}

impl KeptValues for Memo<'_> {
    fn value(&self, slot: usize) -> Result<cel::Computed<'_>, EvalError> {
        self.get_or_evaluate(slot, || self.evaluate(slot))
    }
}

impl<'e> Scope<'e> {
    /// The variables for `evaluated`: the subject's request itself, or the
    /// pod of one of its templates, with that one's host `variables` (each
    /// template pod has its own `gpu`). `request` and `namespaceObject` are
    /// the same for all. Of `object`, `oldObject` and `namespaceObject`,
    /// only what `reach` says the policies evaluated in this scope can
    /// reach is converted. Programs read the objects and the host
    /// variables in place; the interpreter reads a host variable through
    /// the scope's resolver, converted on its first read.
    pub(super) fn new(
        inner: &'e Inner,
        subject: &'e Subject,
        evaluated: &'e Request,
        variables: &'e cel::Hosts,
        reach: &Reaches,
        shared: &mut Shared,
    ) -> Scope<'e> {
        let mut ctx = inner.env.scope();
        // Converting is most of the fixed cost of a request: only convert
        // what some expression of the set refers to (nothing else can be
        // looked up: unknown names are refused at load).
        let wanted = |name: &str| inner.referenced.contains(name);
        // Of the object, only what the policies evaluated here can reach
        // (never `managedFields` or `status` unless one reads them).
        let within = |v: Option<&serde_json::Value>, reach: &cel::Reach| {
            cel::json_to_val_within(v.unwrap_or(&NULL), reach)
        };
        if wanted("object") {
            let object = within(evaluated.object.as_ref(), &reach.object);
            ctx.add_variable_as_val("object", object);
        }
        if wanted("oldObject") {
            let old = within(evaluated.old_object.as_ref(), &reach.old_object);
            ctx.add_variable_as_val("oldObject", old);
        }
        if wanted("namespaceObject") {
            let namespace = shared
                .namespace
                .get_or_insert_with(|| within(subject.namespace.as_deref(), &reach.namespace));
            ctx.add_variable_as_val("namespaceObject", namespace.clone_as_boxed());
        }
        // The subject's host variables hold it when it was worked out for
        // the policies.
        if wanted("request") && !variables.has("request") {
            let request = shared
                .request
                .get_or_insert_with(|| request_val(subject.request));
            ctx.add_variable_as_val("request", request.clone_as_boxed());
        }
        if wanted("authorizer") {
            let authorizer = shared.authorizer.get_or_insert_with(|| {
                let req = subject.request;
                let target = crate::authz::Target::Resource(crate::authz::ResourceTarget {
                    group: req.resource.group.clone(),
                    resource: req.resource.resource.clone(),
                    subresource: req.sub_resource.clone().unwrap_or_default(),
                    namespace: req.namespace.clone().unwrap_or_default(),
                    name: req.name.clone(),
                });
                let user = crate::authz::User::from_user_info(&req.user_info);
                let value = cel::authz::variable(subject.authorizer.clone(), user, target);
                // A map of opaque values: the conversion cannot fail.
                let val: Result<Box<dyn Val>, _> = value.try_into();
                val.unwrap_or_else(|_| Box::new(CelMap::from(CelMapEntries::default())))
            });
            ctx.add_variable_as_val("authorizer", authorizer.clone_as_boxed());
        }
        (inner.env).bind_host_variables(&mut ctx, evaluated.object.as_ref(), variables, wanted);
        let roots = if inner.plan.passes.programs {
            cel::Roots {
                object: Some(evaluated.object.as_ref().unwrap_or(&NULL)),
                old_object: Some(evaluated.old_object.as_ref().unwrap_or(&NULL)),
                namespace: Some(subject.namespace.as_deref().unwrap_or(&NULL)),
                hosts: variables,
            }
        } else {
            cel::Roots::SCOPE
        };
        Scope { ctx, roots }
    }
}

/// The variables the object and its template pod share, converted once
/// (a clone of a converted value shares its contents).
#[derive(Default)]
pub(super) struct Shared {
    /// Converted with the first scope's reach: the scopes that share it
    /// have the same reach of the namespace (one per policy set, or the
    /// one policy's).
    namespace: Option<Box<dyn Val>>,
    request: Option<Box<dyn Val>>,
    /// One checker for the object and its template pod: one cache of
    /// answers per request.
    authorizer: Option<Box<dyn Val>>,
}

static NULL: serde_json::Value = serde_json::Value::Null;

/// `request` in the interpreter's form ([`crate::subject::request_tree`]).
pub(super) fn request_val(req: &Request) -> Box<dyn Val> {
    crate::subject::request_tree(req).to_val()
}

/// What one policy said about one object with one param.
#[derive(Default)]
struct Judged {
    skipped: bool,
    /// (message, validation index): the index of the validation that
    /// failed to evaluate, 0 for an error elsewhere (match conditions,
    /// audit annotations), as kube-apiserver records it.
    errors: Vec<(String, usize)>,
    /// (message, reason, validation index)
    failures: Vec<(String, String, usize)>,
    annotations: Vec<(String, String)>,
}

impl Inner {
    /// Evaluates binding `bi` on `req` in `memo`'s scope and adds what it
    /// says to `verdict`; returns when it finished.
    pub(super) fn run_binding(
        &self,
        bi: usize,
        run: &mut super::Run,
        memo: &Memo,
        prefix: &str,
        start: Instant,
        verdict: &mut Verdict,
    ) -> Instant {
        let req = run.subject.request;
        let (binding, pi) = &self.bindings[bi];
        let (policy, plan) = (&self.policies[*pi], &self.plan.validating.policies[*pi]);
        let found = self.plan.validating.params_found[bi].as_deref();
        let params = match self.binding_params(policy, binding, found, req) {
            Ok(params) => params,
            Err(message) => {
                // A configuration error, as in kube-apiserver: it follows
                // failurePolicy, not validationActions.
                return result_error(verdict, policy, start, message);
            }
        };
        let outcomes: SmallVec<[Judged; 1]> = params
            .into_iter()
            .map(|p| cel::with_policy_budget(|| self.evaluate_policy(policy, plan, memo, p)))
            .collect();
        if outcomes.iter().all(|o| o.skipped) {
            return Instant::now();
        }
        let mut result = EvaluationResult::Pass;
        let mut errored = false;
        for outcome in outcomes {
            for (k, v) in outcome.annotations {
                verdict.audit_annotations.insert(k, v);
            }
            let mut failures = outcome.failures;
            if !outcome.errors.is_empty() {
                errored = true;
                if policy.failure_policy == FailurePolicy::Ignore {
                    // Debug level: a function error may quote a value from the object.
                    let errors: Vec<&str> = outcome.errors.iter().map(|(e, _)| &e[..]).collect();
                    tracing::debug!(policy = %policy.name, binding = %binding.name, ?errors, "policy error ignored (failurePolicy Ignore)");
                } else {
                    for (e, index) in outcome.errors {
                        failures.push((
                            format!(
                                "policy error (failurePolicy {}): {e}",
                                policy.failure_policy.as_str()
                            ),
                            "Invalid".to_string(),
                            index,
                        ));
                    }
                }
            }
            for (message, reason, index) in failures {
                let line = format!("{}: {prefix}{message}", policy.name);
                let exception = run.excepting.find(self, run.subject, &policy.name);
                if let Some(exception) = &exception {
                    for action in &binding.actions {
                        verdict.excepted.push(Excepted {
                            policy: policy.name.clone(),
                            exception: exception.id(),
                            reason: exception.reason.clone(),
                            expires_at: exception.expires_at.as_ref().map(|(_, t)| t.clone()),
                            message: line.clone(),
                            action: action.as_str(),
                        });
                    }
                }
                for action in &binding.actions {
                    match (action, &exception) {
                        // The requester still hears of it, with the
                        // exception's reason and end.
                        (Action::Deny | Action::Warn, Some(exception)) => {
                            if result != EvaluationResult::Deny {
                                result = EvaluationResult::Excepted;
                            }
                            verdict
                                .warnings
                                .push(format!("{line} (allowed by {})", exception.describe()));
                        }
                        (Action::Deny, None) => {
                            result = EvaluationResult::Deny;
                            verdict.reason.get_or_insert_with(|| reason.clone());
                            verdict.denials.push(line.clone());
                        }
                        (Action::Warn, None) => {
                            if result != EvaluationResult::Deny {
                                result = EvaluationResult::Warn;
                            }
                            verdict.warnings.push(line.clone());
                        }
                        (Action::Audit, _) => {
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
        // Counted as an error whatever failurePolicy made of it: under Fail
        // the error is also a denial, but not a verdict on the object.
        if errored {
            result = EvaluationResult::Error;
        }
        record(verdict, policy, result, start)
    }

    /// The params `binding` evaluates `policy` with, one evaluation each:
    /// `null` when the policy has no paramKind or the binding no paramRef,
    /// none when its paramRef finds nothing and allows that, an error when
    /// it finds nothing and denies. `found`: the params the plan found for
    /// the binding at load, if it did.
    pub(super) fn binding_params(
        &self,
        policy: &Policy,
        binding: &Binding,
        found: Option<&[usize]>,
        req: &Request,
    ) -> Result<BindingParams, String> {
        let (Some(kind), Some(pref)) = (&policy.param_kind, &binding.param_ref) else {
            return Ok(smallvec![(Value::Null, None)]);
        };
        let found: BindingParams = match found {
            Some(found) => found
                .iter()
                .map(|&i| (self.params[i].value.clone(), Some(i)))
                .collect(),
            None => (self.params.iter().enumerate())
                .filter(|(_, p)| pref.finds(kind, p, req.namespace.as_deref()))
                .map(|(i, p)| (p.value.clone(), Some(i)))
                .collect(),
        };
        if found.is_empty() && pref.deny_when_missing {
            return Err(format!(
                "no params found for binding {} ({} {}) and its parameterNotFoundAction is Deny",
                binding.name,
                kind.1,
                pref.name.as_deref().unwrap_or("by selector")
            ));
        }
        Ok(found)
    }

    /// Evaluates `policy` (planned as `plan`) with `params` (the params
    /// object at `param` in the set, or none).
    fn evaluate_policy(
        &self,
        policy: &Policy,
        plan: &PolicyPlan,
        memo: &Memo,
        (params, param): (Value, Option<usize>),
    ) -> Judged {
        let scope = memo.scope;
        let inner_ctx = with_params(policy, &scope.ctx, &params);
        let ctx = inner_ctx.as_ref().unwrap_or(&scope.ctx);
        let vars = Variables::new(policy, plan, ctx, Some(memo), param, &scope.roots);
        let mut outcome = Judged::default();
        match match_conditions(policy, &vars) {
            Ok(true) => {}
            Ok(false) => {
                outcome.skipped = true;
                return outcome;
            }
            Err(e) => {
                outcome.errors.push((e, 0));
                return outcome;
            }
        }
        for (i, v) in policy.validations.iter().enumerate() {
            match vars.eval(&v.expr) {
                Ok(Value::Bool(true)) => {}
                Ok(Value::Bool(false)) => {
                    let message = v
                        .message_expr
                        .as_ref()
                        .and_then(|m| match vars.eval(m) {
                            Ok(Value::String(s)) => {
                                let s = s.trim();
                                (!s.is_empty() && !s.contains('\n') && s.len() <= MAX_MESSAGE_LEN)
                                    .then(|| s.to_string())
                            }
                            _ => None,
                        })
                        .or_else(|| v.message.clone().filter(|m| !m.trim().is_empty()))
                        .unwrap_or_else(|| {
                            format!("failed expression: {}", v.expr.source().trim())
                        });
                    outcome.failures.push((message, v.reason.clone(), i));
                }
                Ok(other) => outcome.errors.push((
                    format!(
                        "validations[{i}] returned {}, not bool",
                        cel::type_name(&other)
                    ),
                    i,
                )),
                Err(e) => outcome.errors.push((format!("validations[{i}]: {e}"), i)),
            }
        }
        for a in &policy.audit_annotations {
            match vars.eval(&a.expr) {
                Ok(Value::String(s)) => {
                    if let Some(value) = annotations::value(&s) {
                        let key = a.returned_key.clone();
                        outcome.annotations.push((key, value.to_string()));
                    }
                }
                Ok(Value::Null) => {}
                Ok(other) => outcome.errors.push((
                    format!(
                        "auditAnnotations {} returned {}, not string",
                        a.key,
                        cel::type_name(&other)
                    ),
                    0,
                )),
                Err(e) => outcome
                    .errors
                    .push((format!("auditAnnotations {}: {e}", a.key), 0)),
            }
        }
        outcome
    }
}

/// A scope with `params` when some expression of the policy reads them.
pub(super) fn with_params<'a>(
    policy: &Policy,
    ctx: &'a Context<'a>,
    params: &Value,
) -> Option<Context<'a>> {
    policy.uses_params.then(|| {
        let mut inner = ctx.new_inner_scope();
        inner.add_variable_from_value("params", params.clone());
        inner
    })
}

/// Whether every match condition holds: `Ok(false)` as soon as one is
/// false (the policy is skipped), else the first error.
pub(super) fn match_conditions<'v>(
    policy: &'v Policy,
    vars: &'v Variables<'v>,
) -> Result<bool, String> {
    let mut condition_error = None;
    for (i, c) in policy.match_conditions.iter().enumerate() {
        match vars.eval(&c.expr) {
            Ok(Value::Bool(false)) => return Ok(false),
            Ok(Value::Bool(true)) => {}
            Ok(other) => {
                condition_error.get_or_insert(format!(
                    "matchConditions[{i}] ({}) returned {}, not bool",
                    c.name,
                    cel::type_name(&other)
                ));
            }
            Err(e) => {
                condition_error.get_or_insert(format!("matchConditions[{i}] ({}): {e}", c.name));
            }
        }
    }
    condition_error.map_or(Ok(true), Err)
}

/// Records a binding that could not be evaluated at all; returns when.
fn result_error(
    verdict: &mut Verdict,
    policy: &Policy,
    start: Instant,
    message: String,
) -> Instant {
    if policy.failure_policy == FailurePolicy::Fail {
        verdict.reason.get_or_insert_with(|| "Invalid".to_string());
        verdict.denials.push(format!(
            "{}: policy error (failurePolicy Fail): {message}",
            policy.name
        ));
    }
    record(verdict, policy, EvaluationResult::Error, start)
}

/// Records how the evaluation of `policy` begun at `start` came out;
/// returns when it ended.
fn record(
    verdict: &mut Verdict,
    policy: &Policy,
    result: EvaluationResult,
    start: Instant,
) -> Instant {
    let end = Instant::now();
    verdict.evaluations.push(PolicyEvaluation {
        policy: policy.name.clone(),
        result,
        duration: end - start,
    });
    end
}

fn add_audit_failure(
    verdict: &mut Verdict,
    policy: &Policy,
    binding: &Binding,
    index: usize,
    message: &str,
) {
    let entry = ValidationFailure {
        message,
        policy: &policy.name,
        binding: &binding.name,
        expression_index: index,
        validation_actions: binding.actions.iter().map(|a| a.as_str()).collect(),
    };
    // Serialising borrowed strings and a list of `&str` cannot fail.
    let entry = serde_json::to_string(&entry).unwrap_or_default();
    let list = verdict
        .audit_annotations
        .entry(VALIDATION_FAILURE_ANNOTATION.to_string())
        .or_default();
    // The list is kept as its JSON text, each entry appended to it.
    match list.pop() {
        Some(']') => list.push(','),
        _ => list.push('['),
    }
    list.push_str(&entry);
    list.push(']');
}

/// One entry of the validation failure annotation: kube-apiserver's
/// `ValidationFailureValue`, its fields in the same order.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ValidationFailure<'a> {
    message: &'a str,
    policy: &'a str,
    binding: &'a str,
    expression_index: usize,
    validation_actions: Vec<&'static str>,
}

/// Each params value a binding is evaluated with, and its position in the
/// set's params (none for `null`).
pub(super) type BindingParams = SmallVec<[(Value, Option<usize>); 1]>;

/// What an evaluation runs: an expression's program, or a tree the
/// interpreter walks (one the plan folded, or one without a program).
#[derive(Clone, Copy)]
pub(super) enum Tree<'t> {
    /// A program, with the JSON it reads in place.
    Program(&'t cel::Program, &'t cel::Roots<'t>),
    Parsed(&'t Expression),
}

impl Tree<'_> {
    fn evaluate_val(self, ctx: &Context) -> (Result<Box<dyn Val>, EvalError>, u64) {
        match self {
            Tree::Program(p, roots) => p.evaluate_val(ctx, roots),
            Tree::Parsed(tree) => cel::evaluate_val(tree, ctx),
        }
    }
}

/// A policy's `variables`, evaluated lazily and at most once per request,
/// as kube-apiserver does: a variable is worked out when an expression
/// first reads it, so one that only a failing validation's branch reads
/// costs an admitted request nothing. Kept in a program's form
/// ([`cel::Computed`]), which later programs read as it is (a list of the
/// object's containers stays references into the request's JSON), and in
/// the interpreter's form once the interpreter reads it.
pub(super) struct Variables<'v> {
    policy: &'v Policy,
    plan: &'v PolicyPlan,
    /// The scope the policy's expressions are evaluated in (with its params).
    ctx: &'v Context<'v>,
    /// Each variable, by position: its value once worked out, and that
    /// value in the interpreter's form once the interpreter reads it.
    values: Vec<VariableCells<'v>>,
    /// The values of expressions every policy of the request sees alike.
    memo: Option<&'v dyn KeptValues>,
    /// The position of the params object evaluated with, whose parts the
    /// plan may have worked out ([`PolicyPlan::folded`]).
    param: Option<usize>,
    /// The JSON programs read in place.
    roots: &'v cel::Roots<'v>,
}

/// A variable's value, or the error evaluating it gave.
type VariableValue<'v> = Result<cel::Computed<'v>, EvalError>;

/// A variable's value once worked out, and that value in the interpreter's form.
type VariableCells<'v> = (OnceLock<VariableValue<'v>>, OnceLock<Box<dyn Val>>);

/// One whose own evaluation failed is unbound: where an expression needs
/// it, the variable's error is reported (see [`Variables::eval_with`]).
impl<'v> cel::VariableSource<'v> for Variables<'v> {
    fn value(&'v self, ident: &str, before: usize) -> Option<&'v cel::Computed<'v>> {
        let i = self.position(ident, before)?;
        self.read(i).as_ref().ok()
    }

    fn val(&'v self, ident: &str, before: usize) -> Option<&'v dyn Val> {
        let i = self.position(ident, before)?;
        self.read(i).as_ref().ok()?;
        self.val_at(i)
    }
}

impl<'v> Variables<'v> {
    /// `ctx`: the scope of the policy's expressions; `memo`: the evaluated
    /// object's values of expressions written alike in other policies;
    /// `param`: the params object whose parts the plan worked out.
    pub(super) fn new(
        policy: &'v Policy,
        plan: &'v PolicyPlan,
        ctx: &'v Context<'v>,
        memo: Option<&'v dyn KeptValues>,
        param: Option<usize>,
        roots: &'v cel::Roots<'v>,
    ) -> Variables<'v> {
        Variables {
            policy,
            plan,
            ctx,
            values: std::iter::repeat_with(Default::default)
                .take(policy.variables.len())
                .collect(),
            memo,
            param,
            roots,
        }
    }

    pub(super) fn eval(&'v self, expr: &'v Expr) -> Result<Value, EvalError> {
        self.eval_with(expr, self.values.len())?.to_value()
    }

    /// The position of the variable `ident` spells among those declared
    /// before `before`.
    fn position(&self, ident: &str, before: usize) -> Option<usize> {
        let name = cel::variables::name(ident)?;
        let variables = &self.policy.variables[..before];
        variables.iter().position(|v| v.name == name)
    }

    /// The variable at `i`, worked out on the first call.
    fn value(&'v self, i: usize) -> &'v VariableValue<'v> {
        self.values[i]
            .0
            .get_or_init(|| self.eval_with(&self.policy.variables[i].expr, i))
    }

    /// [`Variables::value`] read by an expression: when worked out now,
    /// charged to the policy, as when worked out before the expression.
    fn read(&'v self, i: usize) -> &'v VariableValue<'v> {
        match self.values[i].0.get() {
            Some(value) => value,
            None => cel::aside(|| self.value(i)),
        }
    }

    /// The variable at `i`, worked out, in the interpreter's form.
    fn val_at(&'v self, i: usize) -> Option<&'v dyn Val> {
        let (value, val) = &self.values[i];
        let value = value.get()?.as_ref().ok()?;
        Some(val.get_or_init(|| value.to_val()).as_ref())
    }

    /// Evaluates `expr` with the variables before position `before` that it
    /// reads worked out on their first read, and the `variables` map, of
    /// every variable it may need, when it reads that whole. A variable
    /// whose own evaluation failed is left unbound: when `expr` trips over
    /// it, the variable's error is reported.
    fn eval_with(&'v self, expr: &'v Expr, before: usize) -> VariableValue<'v> {
        let plan = self.plan.of(expr);
        let ctx = self.ctx;
        let whole = match &plan.program {
            Some(program) => Tree::Program(program, self.roots),
            None => Tree::Parsed(expr.tree()),
        };
        if let (Some(slot), Some(memo)) = (plan.memo_slot, self.memo) {
            // Reads no params and no variables: nothing below applies.
            return memo.value(slot);
        }
        let folded = self.plan.folded(expr, self.param);
        let variables = cel::PolicyVariables {
            source: self,
            before,
        };
        let reads = (!plan.reads.is_empty()).then_some(variables);
        let result = match (&plan.program, folded) {
            // A program reads the variables as they are kept.
            (Some(program), None) if !expr.reads_variables_map() => {
                program.compute(ctx, *self.roots, reads).0
            }
            (None, None) if plan.closure.is_empty() => {
                whole.evaluate_val(ctx).0.map(cel::Computed::from_val)
            }
            (_, folded) => {
                let mut child = ctx.new_inner_scope();
                let tree = match folded {
                    Some((folded, constants)) => {
                        constants.bind(folded, &mut child);
                        match &plan.folded_program {
                            Some(program) => Tree::Program(program, self.roots),
                            None => Tree::Parsed(&folded.ast),
                        }
                    }
                    None => whole,
                };
                if let Some(variables) = &reads {
                    child.set_variable_resolver(variables);
                }
                if expr.reads_variables_map() {
                    let needed = &plan.closure;
                    let mut map =
                        CelMapEntries::with_capacity_and_hasher(needed.len(), Default::default());
                    for &i in needed {
                        if self.value(i).is_ok() {
                            if let Some(v) = self.val_at(i) {
                                let name = self.policy.variables[i].name.as_str();
                                map.insert(CelMapKey::from(name), v.clone_as_boxed());
                            }
                        }
                    }
                    child.add_variable_as_val("variables", Box::new(CelMap::from(map)));
                }
                tree.evaluate_val(&child).0.map(cel::Computed::from_val)
            }
        };
        match result {
            Err(EvalError::Runtime(msg)) => {
                // A failed variable surfaces as an unbound identifier (or a
                // missing key of the map): report its own error.
                for &i in &plan.closure {
                    let name = &self.policy.variables[i].name;
                    if let Some(Err(e)) = self.values[i].0.get() {
                        let unbound =
                            format!("undeclared reference to '{}'", cel::variables::ident(name));
                        if msg == unbound || msg == format!("no such key: {name}") {
                            return Err(match e {
                                EvalError::CostLimit(m) => {
                                    EvalError::CostLimit(format!("variables.{name}: {m}"))
                                }
                                EvalError::Runtime(m) => {
                                    EvalError::Runtime(format!("variables.{name}: {m}"))
                                }
                                EvalError::Deadline(m) => EvalError::Deadline(m.clone()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::review::Operation;

    /// A kept value is charged what working it out cost: under a budget
    /// that allows it the value, under one too small the cost-limit error
    /// the evaluation itself would have met, having used the whole budget.
    #[test]
    fn a_kept_value_charges_what_it_cost() {
        use kube_cel::cel::budget::with_budget;
        use kube_cel::cel::common::types::CelString;
        let loaded = crate::bundle::load(&crate::bundle::PolicySource::Embedded).unwrap();
        let scope = Scope {
            ctx: Context::default(),
            roots: cel::Roots::SCOPE,
        };
        let memo = Memo {
            inner: &loaded.bundle.policies.inner,
            scope: &scope,
            kept: vec![OnceLock::new(), OnceLock::new()],
        };
        let string = |s: &str| cel::Computed::from_val(Box::new(CelString::from(s)));
        let text = |v: &Result<cel::Computed, EvalError>| match v {
            Ok(v) => v
                .to_val()
                .downcast_ref::<CelString>()
                .map(|s| s.to_string()),
            Err(e) => Some(e.to_string()),
        };
        let (first, used) = with_budget(10_000, || {
            text(&memo.get_or_evaluate(0, || (Ok(string("kept")), 500)))
        });
        assert_eq!((first.as_deref(), used), (Some("kept"), 0));
        let never = || -> (Result<cel::Computed, EvalError>, u64) { panic!("kept") };
        let (again, used) = with_budget(10_000, || text(&memo.get_or_evaluate(0, never)));
        assert_eq!((again.as_deref(), used), (Some("kept"), 500));
        let (short, used) = with_budget(400, || {
            matches!(memo.get_or_evaluate(0, never), Err(EvalError::CostLimit(_)))
        });
        assert!(short, "the cost-limit error");
        assert_eq!(used, 400);
        // A failure is not kept: the next evaluation runs.
        let failed = memo.get_or_evaluate(1, || (Err(EvalError::Runtime("no".into())), 3));
        assert!(failed.is_err());
        let ran = memo.get_or_evaluate(1, || (Ok(string("ran")), 3));
        assert_eq!(text(&ran).as_deref(), Some("ran"));
    }

    /// In the shipped set, the conditions and variables several policies
    /// write alike are kept per request; nothing that reads params or
    /// policy variables is.
    #[test]
    fn the_shipped_set_keeps_what_policies_write_alike() {
        let loaded = crate::bundle::load(&crate::bundle::PolicySource::Embedded).unwrap();
        let inner = &loaded.bundle.policies.inner;
        assert!(!inner.plan.memo.is_empty());
        let mut kept = BTreeMap::<usize, Vec<&str>>::new();
        for (policy, plan) in inner.policies.iter().zip(&inner.plan.validating.policies) {
            for e in policy.expressions() {
                if let Some(slot) = plan.of(e).memo_slot {
                    assert!(!e.reads("params"), "{}", e.source());
                    assert!(e.policy_variables().is_empty(), "{}", e.source());
                    kept.entry(slot).or_default().push(e.source());
                }
            }
        }
        assert_eq!(kept.len(), inner.plan.memo.len());
        for (slot, sources) in &kept {
            assert!(sources.len() > 1 && sources.iter().all(|s| *s == sources[0]));
            // The expression the slot is worked out from is written so.
            let (pi, id) = inner.plan.memo[*slot];
            let first = inner.policies[pi].expressions().find(|e| e.id == id);
            assert_eq!(first.map(|e| e.source()), Some(sources[0]));
        }
        assert!(kept.values().any(|s| s[0] == "gpu.requested"), "{kept:?}");
    }

    /// Evaluated by their programs, which read objects in place, the
    /// shipped policies have the interpreter read little of a pod: only
    /// what the functions the programs hand it are given.
    #[test]
    fn the_shipped_programs_leave_little_of_the_object_to_convert() {
        let loaded = crate::bundle::load(&crate::bundle::PolicySource::Embedded).unwrap();
        let inner = &loaded.bundle.policies.inner;
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        let req = Request::for_object(pod, Operation::Create, Some("ml"));
        let reach = inner.plan.reaches.get(&req);
        assert!(!reach.object.is_whole());
        let spec = reach.object.field("spec");
        assert!(
            spec.is_none_or(|s| s.field("containers").is_none()),
            "{reach:?}"
        );
    }

    /// Every expression of the shipped set is evaluated by its program, and
    /// what a program leaves to the interpreter is a few function calls:
    /// the `azure.*` SKU functions, string functions, conversions.
    #[test]
    fn the_shipped_set_is_compiled() {
        let loaded = crate::bundle::load(&crate::bundle::PolicySource::Embedded).unwrap();
        let inner = &loaded.bundle.policies.inner;
        let (mut expressions, mut interpreted) = (0, 0);
        for (policy, plan) in inner.policies.iter().zip(&inner.plan.validating.policies) {
            for e in policy.expressions() {
                let program = plan.of(e).program.as_ref();
                let program = program.unwrap_or_else(|| panic!("no program: {}", e.source()));
                expressions += 1;
                interpreted += program.interpreted();
            }
        }
        assert!(expressions > 200, "{expressions}");
        assert!(
            interpreted < expressions / 2,
            "{interpreted} of {expressions}"
        );
    }

    /// The exemption lists of the shipped policies (split and trimmed from
    /// their ConfigMap) are worked out once, at load, for the ConfigMap
    /// their binding names; so is which ConfigMap that is.
    #[test]
    fn the_shipped_exemption_lists_are_worked_out_at_load() {
        let loaded = crate::bundle::load(&crate::bundle::PolicySource::Embedded).unwrap();
        let inner = &loaded.bundle.policies.inner;
        for name in ["gpu-visible-devices-leak", "gpu-node-isolation"] {
            let pi = inner
                .policies
                .iter()
                .position(|p| &*p.name == name)
                .unwrap();
            let condition = inner.policies[pi]
                .match_conditions
                .iter()
                .find(|c| c.expr.source().contains("exemptNamespaces"))
                .expect("an exemption condition");
            let (param, _) = inner
                .params
                .iter()
                .enumerate()
                .find(|(_, p)| p.name == "gpu-node-isolation")
                .expect("its ConfigMap");
            let plan = &inner.plan.validating.policies[pi];
            assert!(
                plan.folded(&condition.expr, Some(param)).is_some(),
                "{name}"
            );
        }
        // Every shipped binding names its ConfigMap's namespace: what its
        // paramRef finds is worked out at load too.
        let found = &inner.plan.validating.params_found;
        assert!(inner.bindings.iter().any(|(b, _)| b.param_ref.is_some()));
        for (bi, (binding, _)) in inner.bindings.iter().enumerate() {
            if binding.param_ref.is_some() {
                assert!(
                    found[bi].as_ref().is_some_and(|f| f.len() == 1),
                    "{}",
                    binding.name
                );
            }
        }
    }

    /// The shipped policies read part of an object: what an admitted
    /// object carries for the apiserver's own use is not converted, and of
    /// a pod only what the policies for pods read.
    #[test]
    fn the_shipped_set_reaches_part_of_the_object() {
        let loaded = crate::bundle::load(&crate::bundle::PolicySource::Embedded).unwrap();
        // What the expressions read, as the interpreter evaluates them.
        let interpreted = (loaded.bundle.policies)
            .replanned(super::super::Passes::without("programs").unwrap())
            .unwrap();
        let inner = &interpreted.inner;
        let of = |object: serde_json::Value| {
            let req = Request::for_object(object, Operation::Create, Some("ml"));
            inner.plan.reaches.get(&req).clone()
        };
        let pod = of(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}));
        let job = of(json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}}));
        for reach in [&pod.object, &job.object] {
            assert!(!reach.is_whole());
            let metadata = reach.field("metadata").expect("metadata is read");
            assert!(!metadata.is_whole());
            for unread in [
                "managedFields",
                "uid",
                "resourceVersion",
                "creationTimestamp",
            ] {
                assert!(metadata.field(unread).is_none(), "{unread}");
            }
            assert!(reach.field("status").is_none());
        }
        // gpu-job-lifetime reads a Job's spec whole (its `jobSpec` variable).
        assert!(job.object.field("spec").is_some_and(cel::Reach::is_whole));
        // No policy for pods reads their volumes (the SKU policies'
        // `has(object.spec)` only looks for the spec); gpu-node-isolation
        // compares the tolerations and node selection of an UPDATE's two
        // objects.
        let spec = pod.object.field("spec").expect("spec is read");
        assert!(!spec.is_whole());
        assert!(spec.field("containers").is_some_and(cel::Reach::is_whole));
        assert!(spec.field("volumes").is_none());
        for read in ["affinity", "tolerations", "nodeSelector"] {
            assert!(spec.field(read).is_some_and(cel::Reach::is_whole), "{read}");
        }
        // Of the namespace, its labels (`namespaceObject != null` only asks
        // whether there is one).
        for reaches in [&pod, &job] {
            let namespace = &reaches.namespace;
            assert!(!namespace.is_whole());
            let metadata = namespace.field("metadata").expect("labels are read");
            assert!(metadata.field("labels").is_some_and(cel::Reach::is_whole));
            assert!(metadata.field("managedFields").is_none());
            assert!(namespace.field("status").is_none());
        }
    }

    /// A policy for pods `p` with `spec` (indented under `spec:`), bound as
    /// `b` with `actions`.
    fn pod_policy(spec: &str, actions: &str) -> super::super::PolicySet {
        let yaml = format!(
            "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: p}}
spec:
  matchConstraints:
    resourceRules:
    - {{apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [pods]}}
{spec}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: b}}
spec:
  policyName: p
  validationActions: {actions}
"
        );
        let docs = super::super::parse_documents(std::path::Path::new("p.yaml"), &yaml).unwrap();
        super::super::PolicySet::compile(&docs).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`pod_policy`] evaluated on a pod without labels.
    fn evaluate_on_pod(spec: &str, actions: &str) -> Verdict {
        evaluate_pod(&pod_policy(spec, actions))
    }

    fn evaluate_pod(set: &super::super::PolicySet) -> Verdict {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "trainer", "namespace": "ml"},
            "spec": {"containers": [{"name": "train", "image": "pytorch"}]}});
        let req = Request::for_object(pod, Operation::Create, None);
        set.evaluate(&req, &crate::k8s::namespaces::StaticNamespaces::new())
    }

    /// A variable a program worked out is kept as the program made it (the
    /// filtered containers stay the request's JSON) and read alike by later
    /// programs, by the functions they hand to the interpreter and by a
    /// message; one that failed reports its own error wherever it is read.
    /// The verdict is the interpreter's: the same with programs off.
    #[test]
    fn kept_variables_are_read_alike_by_programs_and_the_interpreter() {
        let spec = r#"  variables:
  - {name: containers, expression: 'object.spec.containers.filter(c, has(c.image))'}
  - {name: first, expression: 'variables.containers[0].name'}
  - {name: missing, expression: 'object.spec.volumes[0].name'}
  validations:
  - expression: 'variables.containers.size() == 1 && variables.first.matches("^tr")'
  - expression: 'variables.containers.exists(c, c.image.matches(variables.first))'
    messageExpression: '"image of " + variables.first + ": " + variables.containers.map(c, c.image).join(", ")'
  - expression: 'variables.missing.matches("x")'
  - expression: 'variables.missing == "x"'"#;
        let set = pod_policy(spec, "[Deny]");
        let verdict = evaluate_pod(&set);
        let missing = "variables.missing: no such key: volumes";
        assert_eq!(
            verdict.denials,
            [
                "p: image of train: pytorch".to_string(),
                format!("p: policy error (failurePolicy Fail): validations[2]: {missing}"),
                format!("p: policy error (failurePolicy Fail): validations[3]: {missing}"),
            ]
        );
        let interpreted = set
            .replanned(super::super::Passes::without("programs").unwrap())
            .unwrap();
        assert_eq!(evaluate_pod(&interpreted).denials, verdict.denials);
    }

    /// As kube-apiserver, a variable is worked out when an expression first
    /// reads it: variables only a failing validation's message reads cost
    /// an admitted request nothing. Forty variables of about 300,000 units
    /// each are more than the policy's budget of 10,000,000 when all are
    /// worked out (read in the expression), and nothing when none is (read
    /// only on the branch not taken).
    #[test]
    fn variables_are_worked_out_on_their_first_read() {
        let variables: String = (0..40)
            .map(|i| {
                format!(
                    "  - {{name: w{i}, expression: 'variables.base.map(a, variables.base.map(b, variables.base.map(c, c))).size()'}}\n"
                )
            })
            .collect();
        let all: Vec<String> = (0..40).map(|i| format!("variables.w{i}")).collect();
        let base = format!("{:?}", (0..40).collect::<Vec<_>>());
        let sum = all.join(" + ");
        let policy = |expression: &str| {
            format!(
                "  variables:\n  - {{name: base, expression: '{base}'}}\n{variables}  validations:\n  - expression: '{expression}'\n    messageExpression: '\"sizes \" + string({sum})'"
            )
        };
        // On a stack like serve's answering threads': a variable read deep
        // in an expression is worked out there. Within 1,000,000 units of
        // the request's (the policy's 10,000,000 start from what is left),
        // so that a debug build stops as soon.
        let on_evaluation_stack = |spec: String| {
            std::thread::Builder::new()
                .stack_size(crate::policy::EVALUATION_STACK)
                .spawn(move || {
                    kube_cel::cel::budget::with_budget(1_000_000, || {
                        evaluate_on_pod(&spec, "[Deny]")
                    })
                    .0
                })
                .unwrap()
                .join()
                .unwrap()
        };
        let unread = on_evaluation_stack(policy("object.kind == \"Pod\""));
        assert!(unread.denials.is_empty(), "{:?}", unread.denials);
        let read = on_evaluation_stack(policy(&format!("object.kind == \"Pod\" && {sum} > 0")));
        assert!(
            read.denials
                .iter()
                .any(|d| d.contains("the policy used more than")),
            "{:?}",
            read.denials
        );
    }

    /// The `expressionIndex` of each entry of the validation failure
    /// annotation, in increasing order.
    fn audited_indexes(verdict: &Verdict) -> Vec<u64> {
        let list = &verdict.audit_annotations[VALIDATION_FAILURE_ANNOTATION];
        let list: Vec<serde_json::Value> = serde_json::from_str(list).unwrap();
        let mut indexes: Vec<u64> = (list.iter())
            .map(|e| e["expressionIndex"].as_u64().unwrap())
            .collect();
        indexes.sort();
        indexes
    }

    /// As kube-apiserver: an error under failurePolicy Fail is recorded
    /// with the index of the validation that failed to evaluate; an error
    /// before any validation (a match condition) with 0.
    #[test]
    fn an_audited_error_names_its_validation() {
        let spec = "  validations:
  - expression: 'true'
  - expression: \"object.metadata.labels.team == 'ml'\"
  - expression: 'false'";
        let v = evaluate_on_pod(spec, "[Audit]");
        assert_eq!(audited_indexes(&v), [1, 2]);
        let list = &v.audit_annotations[VALIDATION_FAILURE_ANNOTATION];
        assert!(
            list.contains("policy error (failurePolicy Fail): validations[1]"),
            "{list}"
        );
        let not_bool = "  validations:
  - expression: 'true'
  - expression: 'true'
  - expression: \"'yes'\"";
        assert_eq!(audited_indexes(&evaluate_on_pod(not_bool, "[Audit]")), [2]);
        let condition = "  matchConditions:
  - {name: team, expression: \"object.metadata.labels.team == 'ml'\"}
  validations:
  - expression: 'true'
  - expression: 'true'";
        assert_eq!(audited_indexes(&evaluate_on_pod(condition, "[Audit]")), [0]);
    }

    /// An evaluation that errored counts as `error` whatever the
    /// failurePolicy; under Fail the error still denies (or warns, or is
    /// audited) through the binding's actions.
    #[test]
    fn an_error_is_counted_as_an_error_under_either_failure_policy() {
        let results = |v: &Verdict| -> Vec<EvaluationResult> {
            v.evaluations.iter().map(|e| e.result).collect()
        };
        let errs = "  validations:
  - expression: \"object.metadata.labels.team == 'ml'\"";
        let v = evaluate_on_pod(errs, "[Deny]");
        assert_eq!(results(&v), [EvaluationResult::Error]);
        assert_eq!(v.denials.len(), 1, "{:?}", v.denials);
        assert!(v.denials[0].starts_with("p: policy error (failurePolicy Fail): validations[0]"));
        let v = evaluate_on_pod(errs, "[Warn, Audit]");
        assert_eq!(results(&v), [EvaluationResult::Error]);
        assert_eq!(v.warnings.len(), 1, "{:?}", v.warnings);
        let ignored = format!("  failurePolicy: Ignore\n{errs}");
        let v = evaluate_on_pod(&ignored, "[Deny]");
        assert_eq!(results(&v), [EvaluationResult::Error]);
        assert!(v.denials.is_empty(), "{:?}", v.denials);
        let (not_bool, violated) = ("'1'", "'false'");
        for (expression, actions, want) in [
            (not_bool, "[Deny]", EvaluationResult::Error),
            // A violation is still a verdict.
            (violated, "[Deny]", EvaluationResult::Deny),
            (violated, "[Audit]", EvaluationResult::Warn),
        ] {
            let spec = format!("  validations:\n  - expression: {expression}");
            let got = results(&evaluate_on_pod(&spec, actions));
            assert_eq!(got, [want], "{expression} {actions}");
        }
    }

    /// The failure list is the JSON kube-apiserver writes, fields in the
    /// order of its `ValidationFailureValue`, one entry per failure.
    #[test]
    fn the_validation_failure_list_is_kube_apiservers_json() {
        let spec = "  validations:
  - {expression: 'false', message: no GPUs here}
  - {expression: 'false', message: not today}";
        let v = evaluate_on_pod(spec, "[Warn, Audit]");
        assert_eq!(
            v.audit_annotations[VALIDATION_FAILURE_ANNOTATION],
            concat!(
                r#"[{"message":"no GPUs here","policy":"p","binding":"b","expressionIndex":0,"validationActions":["Warn","Audit"]},"#,
                r#"{"message":"not today","policy":"p","binding":"b","expressionIndex":1,"validationActions":["Warn","Audit"]}]"#
            )
        );
        assert_eq!(VALIDATION_FAILURE_ANNOTATION, "validation_failure");
    }
}
