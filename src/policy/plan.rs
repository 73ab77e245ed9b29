//! The plan: what the engine works out once from the loaded policies so
//! that each request does less, kept beside the policies, never written
//! into them. Each pass is one function of the policies and its result is
//! only ever an optimisation: with any pass turned off ([`Passes`]) the
//! verdicts are the same (tests/plan_passes.rs shows it over the shipped
//! set, the kubescape library and the PolicyTests), only slower.
//!
//! - **variable closures**: which of a policy's `variables` each
//!   expression needs (directly or through other variables), so that an
//!   evaluation works out only those, and binds them by name;
//! - **memo**: expressions written alike in several validating policies,
//!   reading neither params nor policy variables, share one slot: a request
//!   evaluates each once per evaluated object;
//! - **param refs**: the params a binding's `paramRef` finds when they do
//!   not depend on the request (a namespace is named);
//! - **params constants**: the parts of a validating policy's expressions
//!   that read nothing but `params` and do some work (an exemption list
//!   split and trimmed from a ConfigMap), worked out once per params
//!   object ([`cel::fold`]): a request then reads their values, and is
//!   charged what they cost;
//! - **binding index**: the bindings a request could match, by resource and
//!   operation;
//! - **shared matches**: match constraints written alike (a policy's
//!   `matchConstraints`, a binding's `matchResources`) share one slot: a
//!   request is judged against each once per evaluated object;
//! - **reaches**: what the policies a request could match can read of
//!   `object`, `oldObject` and `namespaceObject`: only that is converted
//!   into CEL values;
//! - **programs**: each expression compiled ([`cel::Program`]): operators
//!   resolved, comprehension variables in slots, results unboxed, the
//!   request's JSON read in place; the interpreter evaluates only the
//!   function calls the program leaves it, and only what those can reach
//!   of the objects is converted.
use super::index::{BindingIndex, PerBucket};
use super::matching::{MatchResources, MatchSlots};
use super::model::{Binding, Expr, Param, Policy};
use super::read::Loaded;
use crate::cel::fold::{self, Constants, Folded};
use crate::cel::{self, Compiled, Env};
use std::collections::HashMap;
use std::sync::Arc;

/// Which passes run. [`Passes::ALL`] is what the webhook and the CLI use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Passes {
    pub variable_closures: bool,
    pub memo: bool,
    pub param_refs: bool,
    pub params_constants: bool,
    pub binding_index: bool,
    pub shared_matches: bool,
    pub reaches: bool,
    pub programs: bool,
}

impl Passes {
    pub const ALL: Passes = Passes {
        variable_closures: true,
        memo: true,
        param_refs: true,
        params_constants: true,
        binding_index: true,
        shared_matches: true,
        reaches: true,
        programs: true,
    };

    /// Every pass but the one named (as in [`Passes::NAMES`]).
    pub fn without(name: &str) -> Option<Passes> {
        let mut passes = Passes::ALL;
        let switch = match name {
            "variable_closures" => &mut passes.variable_closures,
            "memo" => &mut passes.memo,
            "param_refs" => &mut passes.param_refs,
            "params_constants" => &mut passes.params_constants,
            "binding_index" => &mut passes.binding_index,
            "shared_matches" => &mut passes.shared_matches,
            "reaches" => &mut passes.reaches,
            "programs" => &mut passes.programs,
            _ => return None,
        };
        *switch = false;
        Some(passes)
    }

    /// The passes, by name.
    pub const NAMES: [&'static str; 8] = [
        "variable_closures",
        "memo",
        "param_refs",
        "params_constants",
        "binding_index",
        "shared_matches",
        "reaches",
        "programs",
    ];
}

impl Default for Passes {
    fn default() -> Passes {
        Passes::ALL
    }
}

/// The plan of a policy set.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    pub(crate) passes: Passes,
    pub(crate) validating: FamilyPlan,
    pub(crate) mutating: FamilyPlan,
    /// By slot ([`ExprPlan::memo_slot`]), an expression a request
    /// evaluates once for all validating policies that write it alike: the
    /// position of the first such policy and the expression's
    /// [`Expr::id`] there.
    pub(crate) memo: Vec<(usize, usize)>,
    /// What the validating policies a request could match (by its bucket
    /// of the binding index) can reach of `object` and `oldObject`, and
    /// what any of them can reach of `namespaceObject`.
    pub(crate) reaches: PerBucket<Reaches>,
}

/// The plan of the validating or the mutating policies.
#[derive(Debug, Default)]
pub(crate) struct FamilyPlan {
    /// By position of the policy.
    pub(crate) policies: Vec<PolicyPlan>,
    /// The bindings a request could match.
    pub(crate) index: BindingIndex,
    /// By position of the binding: the params its `paramRef` finds
    /// (positions in the set's params) when they do not depend on the
    /// request; `None`: looked up on each request.
    pub(crate) params_found: Vec<Option<Vec<usize>>>,
    /// By position of the binding: where its judgements are kept (none
    /// without the pass).
    pub(crate) match_slots: Vec<MatchSlots>,
    /// How many distinct match constraints the bindings have.
    pub(crate) match_slot_count: usize,
}

/// The plan of one policy.
#[derive(Debug, Default)]
pub(crate) struct PolicyPlan {
    /// By [`Expr::id`].
    pub(crate) exprs: Vec<ExprPlan>,
    /// What its expressions can reach of `object`, `oldObject` and
    /// `namespaceObject`.
    pub(crate) reach: Reaches,
    /// For each params object of its paramKind (by position in the set's
    /// params) that gave any: the folded parts of its expressions worked
    /// out, by [`Expr::id`].
    pub(crate) constants: Vec<(usize, Vec<Option<Constants>>)>,
}

impl PolicyPlan {
    pub(crate) fn of(&self, expr: &Expr) -> &ExprPlan {
        &self.exprs[expr.id]
    }

    /// The folded tree of `expr` and its parts worked out for the params
    /// object at `param`, when there are such; `None`: evaluated whole.
    pub(crate) fn folded(
        &self,
        expr: &Expr,
        param: Option<usize>,
    ) -> Option<(&Folded, &Constants)> {
        let folded = self.of(expr).folded.as_deref()?;
        let (_, by_expr) = self.constants.iter().find(|(p, _)| Some(*p) == param)?;
        Some((folded, by_expr[expr.id].as_ref()?))
    }
}

/// The plan of one expression.
#[derive(Clone, Debug, Default)]
pub(crate) struct ExprPlan {
    /// Positions, in the policy's `variables`, of the variables the
    /// expression needs, directly or through other variables, in order.
    pub(crate) closure: Vec<usize>,
    /// The variables it reads by name: each with its position and the
    /// identifier it is bound to ([`cel::variables::ident`]).
    pub(crate) reads: Vec<(usize, String)>,
    /// Where a request keeps its value, shared with the expressions of
    /// other policies written the same.
    pub(crate) memo_slot: Option<usize>,
    /// The expression with its params-only parts taken out.
    pub(crate) folded: Option<Arc<Folded>>,
    /// Its compiled form, evaluated in place of its tree.
    pub(crate) program: Option<Arc<cel::Program>>,
    /// The compiled form of [`ExprPlan::folded`]'s tree.
    pub(crate) folded_program: Option<Arc<cel::Program>>,
}

/// What some expressions can reach of `object`, `oldObject` and
/// `namespaceObject`: all of them that is converted into CEL values for
/// those expressions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reaches {
    pub object: cel::Reach,
    pub old_object: cel::Reach,
    pub namespace: cel::Reach,
}

impl Reaches {
    pub fn of<'a>(expressions: impl IntoIterator<Item = &'a Compiled>) -> Reaches {
        let mut reaches = Reaches::default();
        for e in expressions {
            e.add_reach(&mut reaches.object, "object");
            e.add_reach(&mut reaches.old_object, "oldObject");
            e.add_reach(&mut reaches.namespace, "namespaceObject");
        }
        reaches
    }

    /// Everything of the three: what is converted without the pass.
    fn whole() -> Reaches {
        Reaches {
            object: cel::Reach::whole(),
            old_object: cel::Reach::whole(),
            namespace: cel::Reach::whole(),
        }
    }

    /// Adds what `other` reaches.
    pub fn merge(&mut self, other: &Reaches) {
        self.object.merge(&other.object);
        self.old_object.merge(&other.old_object);
        self.namespace.merge(&other.namespace);
    }
}

/// The plan of `loaded`, with the passes `passes` turns on.
pub(super) fn plan(loaded: &Loaded, passes: Passes, env: &Env) -> Plan {
    let mut validating = family(&loaded.policies, &loaded.bindings, &loaded.params, passes);
    let mut mutating = family(
        &loaded.mutating,
        &loaded.mutating_bindings,
        &loaded.params,
        passes,
    );
    // Shared values need every function to answer alike for alike
    // arguments.
    let memo = if passes.memo && env.all_pure() {
        memo_slots(&loaded.policies, &mut validating.policies)
    } else {
        Vec::new()
    };
    if passes.params_constants {
        for (policy, plan) in loaded.policies.iter().zip(&mut validating.policies) {
            params_constants(policy, plan, &loaded.params, env);
        }
    }
    if passes.programs {
        programs(&loaded.policies, &mut validating.policies, env);
        programs(&loaded.mutating, &mut mutating.policies, env);
        if passes.reaches {
            for (policy, plan) in loaded.policies.iter().zip(&mut validating.policies) {
                plan.reach = interpreter_reach(policy, plan);
            }
        }
    }
    let reaches = bucket_reaches(&validating, &loaded.bindings);
    Plan {
        passes,
        validating,
        mutating,
        memo,
        reaches,
    }
}

/// Pass: each expression's compiled form ([`cel::Program`]): what the
/// interpreter works out at each node of its tree worked out once, the
/// same answers given faster.
fn programs(policies: &[Policy], plans: &mut [PolicyPlan], env: &Env) {
    for (policy, plan) in policies.iter().zip(plans) {
        for expr in policy.expressions() {
            let expr_plan = &mut plan.exprs[expr.id];
            expr_plan.program = env.program(expr.tree()).map(Arc::new);
            expr_plan.folded_program = (expr_plan.folded.as_ref())
                .and_then(|f| env.program(&f.ast))
                .map(Arc::new);
        }
    }
}

/// What the interpreter can reach of the objects when `policy` is
/// evaluated by its programs (which read them in place): the subtrees and
/// arguments its programs (of the expression, and of its tree with the
/// params-only parts taken out) hand the interpreter, and the whole of
/// each expression the interpreter evaluates (one without programs).
fn interpreter_reach(policy: &Policy, plan: &PolicyPlan) -> Reaches {
    let mut reaches = Reaches::default();
    for expr in policy.expressions() {
        let expr_plan = &plan.exprs[expr.id];
        let programs = match (&expr_plan.program, &expr_plan.folded) {
            (Some(program), None) => vec![program],
            (Some(program), Some(_)) => match &expr_plan.folded_program {
                Some(folded) => vec![program, folded],
                None => Vec::new(),
            },
            (None, _) => Vec::new(),
        };
        if programs.is_empty() {
            reaches.merge(&Reaches::of([&expr.compiled]));
        }
        for tree in programs.iter().flat_map(|p| p.interpreted_trees()) {
            reaches.object.add(tree, "object");
            reaches.old_object.add(tree, "oldObject");
            reaches.namespace.add(tree, "namespaceObject");
        }
    }
    reaches
}

/// The plan of one family (validating or mutating): the passes made per
/// policy and per binding.
fn family(
    policies: &[Policy],
    bindings: &[(Binding, usize)],
    params: &[Param],
    passes: Passes,
) -> FamilyPlan {
    let (match_slots, match_slot_count) = match passes.shared_matches {
        true => shared_matches(policies, bindings),
        false => (Vec::new(), 0),
    };
    FamilyPlan {
        policies: policies
            .iter()
            .map(|p| PolicyPlan {
                exprs: variable_closures(p, passes.variable_closures),
                reach: if passes.reaches {
                    Reaches::of(p.expressions().map(|e| &e.compiled))
                } else {
                    Reaches::whole()
                },
                constants: Vec::new(),
            })
            .collect(),
        index: if passes.binding_index {
            BindingIndex::new(
                bindings
                    .iter()
                    .map(|(_, pi)| &policies[*pi].match_constraints),
            )
        } else {
            BindingIndex::unindexed(bindings.len())
        },
        params_found: bindings
            .iter()
            .map(|(b, pi)| {
                passes
                    .param_refs
                    .then(|| params_found(&policies[*pi], b, params))
                    .flatten()
            })
            .collect(),
        match_slots,
        match_slot_count,
    }
}

/// Pass: gives each binding the slots of its policy's match constraints
/// and of its own, one slot for each distinct constraints (and how they
/// are read: a binding's empty rules do not narrow); returns the slots by
/// binding and their number.
fn shared_matches<'p>(
    policies: &'p [Policy],
    bindings: &'p [(Binding, usize)],
) -> (Vec<MatchSlots>, usize) {
    let mut slots: HashMap<(&MatchResources, bool), usize> = HashMap::new();
    let mut slot = |m: &'p MatchResources, narrows: bool| {
        let next = slots.len();
        *slots.entry((m, narrows)).or_insert(next)
    };
    let match_slots = (bindings.iter())
        .map(|(b, pi)| MatchSlots {
            policy: slot(&policies[*pi].match_constraints, false),
            binding: b.match_resources.as_ref().map(|m| slot(m, true)),
        })
        .collect();
    (match_slots, slots.len())
}

/// Pass: for each expression of `policy`, the variables it needs and
/// reads. Off, every expression gets every variable it may read (a
/// variable, those before it), so all of them are worked out and bound.
fn variable_closures(policy: &Policy, on: bool) -> Vec<ExprPlan> {
    let variables = &policy.variables;
    let mut plans = vec![ExprPlan::default(); policy.expression_count];
    for expr in policy.expressions() {
        let position = variables.iter().position(|v| v.expr.id == expr.id);
        let closure: Vec<usize> = if on {
            let uses = expr.policy_variables();
            let mut wanted: Vec<bool> = variables.iter().map(|v| uses.contains(&v.name)).collect();
            // Variables only use earlier ones: one backward pass suffices.
            for i in (0..variables.len()).rev() {
                if wanted[i] {
                    for j in 0..i {
                        if variables[i]
                            .expr
                            .policy_variables()
                            .contains(&variables[j].name)
                        {
                            wanted[j] = true;
                        }
                    }
                }
            }
            (0..variables.len()).filter(|i| wanted[*i]).collect()
        } else {
            (0..position.unwrap_or(variables.len())).collect()
        };
        let reads = if on {
            (variables.iter().enumerate())
                .filter(|(_, v)| expr.policy_variables().contains(&v.name))
                .map(|(i, v)| (i, cel::variables::ident(&v.name)))
                .collect()
        } else {
            closure
                .iter()
                .map(|&i| (i, cel::variables::ident(&variables[i].name)))
                .collect()
        };
        plans[expr.id] = ExprPlan {
            closure,
            reads,
            ..ExprPlan::default()
        };
    }
    plans
}

/// Pass: gives each expression of the validating `policies` that reads
/// neither params nor policy variables, and is written the same in another
/// of their expressions, the slot of its text; returns, by slot, the first
/// policy (its position) and expression (its id) written so. Such an
/// expression has one value per evaluated object whichever policy asks.
fn memo_slots(policies: &[Policy], plans: &mut [PolicyPlan]) -> Vec<(usize, usize)> {
    let shared = |e: &Expr| {
        !e.reads("params")
            && !e.reads("variables")
            && e.policy_variables().is_empty()
            && !e.reads_variables_map()
    };
    let mut written: HashMap<&str, usize> = HashMap::new();
    for e in policies.iter().flat_map(Policy::expressions) {
        if shared(e) {
            *written.entry(e.source()).or_default() += 1;
        }
    }
    let mut slots: HashMap<&str, usize> = HashMap::new();
    let mut first = Vec::new();
    for (pi, (policy, plan)) in policies.iter().zip(plans).enumerate() {
        for e in policy.expressions() {
            if shared(e) && written[e.source()] > 1 {
                let slot = *slots.entry(e.source()).or_insert_with(|| {
                    first.push((pi, e.id));
                    first.len() - 1
                });
                plan.exprs[e.id].memo_slot = Some(slot);
            }
        }
    }
    first
}

/// Pass: the params `binding`'s `paramRef` finds, when it names a
/// namespace (what it finds then does not depend on the request).
fn params_found(policy: &Policy, binding: &Binding, params: &[Param]) -> Option<Vec<usize>> {
    let (Some(kind), Some(pref)) = (&policy.param_kind, &binding.param_ref) else {
        return None;
    };
    pref.namespace.as_ref()?;
    Some(
        (params.iter().enumerate())
            .filter(|(_, p)| pref.finds(kind, p, None))
            .map(|(i, _)| i)
            .collect(),
    )
}

/// Pass: the folded form of each expression of the validating `policy`
/// that reads `params`, and its parts worked out for each params object of
/// the policy's paramKind (see [`cel::fold`]). Mutating policies are
/// evaluated whole.
fn params_constants(policy: &Policy, plan: &mut PolicyPlan, params: &[Param], env: &Env) {
    let Some(kind) = &policy.param_kind else {
        return;
    };
    for expr in policy.expressions() {
        plan.exprs[expr.id].folded = fold::fold_expression(env, expr);
    }
    for (i, param) in params.iter().enumerate() {
        if (param.api_version.as_str(), param.kind.as_str()) != (&kind.0[..], &kind.1[..]) {
            continue;
        }
        let by_expr: Vec<Option<Constants>> = (plan.exprs.iter())
            .map(|e| {
                let folded = e.folded.as_deref()?;
                Constants::work_out(folded, env, &param.value)
            })
            .collect();
        if by_expr.iter().any(Option::is_some) {
            plan.constants.push((i, by_expr));
        }
    }
}

/// Pass: what each bucket of the validating binding index reaches (the
/// reaches of the policies of its bindings); `namespaceObject` is
/// converted once per request for every scope, so each bucket converts
/// what any policy reaches of it.
fn bucket_reaches(validating: &FamilyPlan, bindings: &[(Binding, usize)]) -> PerBucket<Reaches> {
    let mut namespace = cel::Reach::default();
    for p in &validating.policies {
        namespace.merge(&p.reach.namespace);
    }
    validating.index.per_bucket(|candidates| {
        let mut reaches = Reaches::default();
        for &bi in candidates {
            reaches.merge(&validating.policies[bindings[bi].1].reach);
        }
        reaches.namespace = namespace.clone();
        reaches
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{parse_documents, PolicySet};

    const POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: p}
spec:
  paramKind: {apiVersion: example.com/v1, kind: Limits}
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  matchConditions:
  - {name: named, expression: "has(object.metadata.name)"}
  variables:
  - {name: containers, expression: "object.spec.containers"}
  - {name: names, expression: "variables.containers.map(c, c.name)"}
  - {name: unused, expression: "object.metadata.labels"}
  validations:
  - expression: "variables.names.size() <= params.max"
  - expression: "object.spec.containers.all(c, c.image != '')"
  - expression: "variables.size() > 0"
  - expression: "!(object.metadata.name in params.reserved.split(','))"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: q}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [deployments]}
  validations:
  - expression: "object.spec.containers.all(c, c.image != '')"
  - expression: "object.metadata.namespace != 'default'"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: p-in-ns}
spec: {policyName: p, validationActions: [Deny], paramRef: {name: small, namespace: limits, parameterNotFoundAction: Deny}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: p-per-request}
spec: {policyName: p, validationActions: [Deny], paramRef: {name: small, parameterNotFoundAction: Deny}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: q}
spec: {policyName: q, validationActions: [Deny]}
---
apiVersion: example.com/v1
kind: Limits
metadata: {name: small, namespace: limits}
max: 2
reserved: "kube-apiserver,etcd"
"#;

    fn loaded(passes: Passes) -> PolicySet {
        PolicySet::compile_planned(
            &parse_documents(std::path::Path::new("plan.yaml"), POLICY).unwrap(),
            Default::default(),
            passes,
        )
        .unwrap()
    }

    /// The plan of policy `name`'s expression with source `source`.
    fn expr_plan<'s>(set: &'s PolicySet, name: &str, source: &str) -> &'s ExprPlan {
        let inner = &*set.inner;
        let pi = inner
            .policies
            .iter()
            .position(|p| &*p.name == name)
            .unwrap();
        let policy = &inner.policies[pi];
        let expr = policy.expressions().find(|e| e.source() == source).unwrap();
        inner.plan.validating.policies[pi].of(expr)
    }

    #[test]
    fn variable_closures_follow_variables_through_variables() {
        let set = loaded(Passes::ALL);
        let uses_names = expr_plan(&set, "p", "variables.names.size() <= params.max");
        assert_eq!(uses_names.closure, vec![0, 1]);
        assert_eq!(uses_names.reads.len(), 1);
        assert_eq!(uses_names.reads[0].0, 1);
        assert!(expr_plan(&set, "p", "has(object.metadata.name)")
            .closure
            .is_empty());
        // Reading `variables` whole reads none by name.
        let whole = expr_plan(&set, "p", "variables.size() > 0");
        assert!(whole.reads.is_empty());
        // Off: every expression is given every variable before it.
        let set = loaded(Passes::without("variable_closures").unwrap());
        let plan = expr_plan(&set, "p", "has(object.metadata.name)");
        assert_eq!(plan.closure, vec![0, 1, 2]);
        assert_eq!(plan.reads.len(), 3);
        let names = expr_plan(&set, "p", "variables.containers.map(c, c.name)");
        assert_eq!(
            names.closure,
            vec![0],
            "a variable gets only those before it"
        );
    }

    #[test]
    fn bindings_of_one_policy_share_its_match_slot() {
        let set = loaded(Passes::ALL);
        let family = &set.inner.plan.validating;
        let slots: Vec<MatchSlots> = family.match_slots.clone();
        // p-in-ns, p-per-request (both of p), q.
        assert_eq!(slots.len(), 3);
        assert_eq!(slots[0], slots[1]);
        assert_ne!(slots[0].policy, slots[2].policy);
        assert!(slots.iter().all(|s| s.binding.is_none()));
        assert_eq!(family.match_slot_count, 2);
        let set = loaded(Passes::without("shared_matches").unwrap());
        assert!(set.inner.plan.validating.match_slots.is_empty());
    }

    #[test]
    fn the_memo_shares_expressions_written_alike_without_params() {
        let set = loaded(Passes::ALL);
        let shared = "object.spec.containers.all(c, c.image != '')";
        let (p, q) = (expr_plan(&set, "p", shared), expr_plan(&set, "q", shared));
        assert!(p.memo_slot.is_some());
        assert_eq!(p.memo_slot, q.memo_slot);
        assert_eq!(set.inner.plan.memo.len(), 1);
        let alone = expr_plan(&set, "q", "object.metadata.namespace != 'default'");
        assert_eq!(alone.memo_slot, None, "written once");
        let set = loaded(Passes::without("memo").unwrap());
        assert!(set.inner.plan.memo.is_empty());
        assert_eq!(expr_plan(&set, "p", shared).memo_slot, None);
    }

    #[test]
    fn param_refs_with_a_namespace_are_found_once() {
        let set = loaded(Passes::ALL);
        let found = &set.inner.plan.validating.params_found;
        assert_eq!(found, &vec![Some(vec![0]), None, None]);
        let set = loaded(Passes::without("param_refs").unwrap());
        assert_eq!(set.inner.plan.validating.params_found, vec![None; 3]);
    }

    #[test]
    fn params_only_parts_are_worked_out_per_params_object() {
        let split = "!(object.metadata.name in params.reserved.split(','))";
        let set = loaded(Passes::ALL);
        let inner = &*set.inner;
        let (policy, plan) = (&inner.policies[0], &inner.plan.validating.policies[0]);
        let expr = policy.expressions().find(|e| e.source() == split).unwrap();
        let (folded, _) = plan
            .folded(expr, Some(0))
            .expect("worked out for the Limits");
        assert_eq!(folded.parts.len(), 1);
        assert!(
            plan.folded(expr, None).is_none(),
            "no params object, no parts"
        );
        // A field read alone is not worth it.
        let read = policy
            .expressions()
            .find(|e| e.source().contains("params.max"))
            .unwrap();
        assert!(plan.of(read).folded.is_none());
        let set = loaded(Passes::without("params_constants").unwrap());
        let inner = &*set.inner;
        let expr = inner.policies[0]
            .expressions()
            .find(|e| e.source() == split)
            .unwrap();
        assert!(inner.plan.validating.policies[0]
            .folded(expr, Some(0))
            .is_none());
    }

    #[test]
    fn the_binding_index_and_reaches_narrow_by_resource() {
        use crate::review::{Operation, Request};
        let set = loaded(Passes::ALL);
        let plan = &set.inner.plan;
        let pod = Request::for_object(
            serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}),
            Operation::Create,
            Some("ml"),
        );
        assert_eq!(plan.validating.index.candidates(&pod), vec![0, 1]);
        // Programs read the object in place: only what they hand the
        // interpreter (the `split` of a params string) is converted.
        let reach = plan.reaches.get(&pod);
        assert!(!reach.object.is_whole());
        assert!(reach.object.field("spec").is_none());
        // Without them, what the expressions read.
        let set = loaded(Passes::without("programs").unwrap());
        let reach = set.inner.plan.reaches.get(&pod);
        assert!(!reach.object.is_whole());
        assert!(reach.object.field("spec").is_some());
        assert!(reach.old_object.field("spec").is_none());
        let set = loaded(Passes::without("binding_index").unwrap());
        assert_eq!(
            set.inner.plan.validating.index.candidates(&pod),
            vec![0, 1, 2]
        );
        let set = loaded(Passes::without("reaches").unwrap());
        assert!(set.inner.plan.reaches.get(&pod).object.is_whole());
    }
}
