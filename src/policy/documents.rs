//! One ValidatingAdmissionPolicy, MutatingAdmissionPolicy, binding or
//! params document, read into the engine's types ([`super::model`]).
//!
//! Each document is read by serde into a model with Kubernetes' own field
//! names (unknown fields are errors, as with kube-apiserver's strict field
//! validation), and its `validate()` makes the checks serde cannot express
//! and converts it into the engine's types. Every error names its field.
use super::annotations;
use super::load::{Document, LoadError, Source};
use super::matching::{MatchPolicy, MatchResources, Rule};
use super::model::*;
use crate::cel::{self, Compiled, Env};
use crate::k8s::doc::{from_value, Object, ObjectMeta};
use crate::k8s::labels::LabelSelectorDoc;
use crate::k8s::LabelSelector;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::collections::BTreeMap;

/// `reinvocationPolicy`: required and checked, not otherwise used: every
/// call of `/mutate` runs every matching mutating policy once, and the
/// webhook configuration's own reinvocationPolicy says whether the
/// apiserver calls again (which then changes nothing more).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
enum Reinvocation {
    Never,
    IfNeeded,
}

/// A params document: an object of any kind a policy's `paramKind` names,
/// of which only `metadata` is read (the whole object is the params value).
#[derive(Deserialize)]
struct ParamsObject {
    #[serde(default)]
    metadata: ObjectMeta,
}

/// Reads a document, reporting a serde error against it.
fn read<T: DeserializeOwned>(doc: &Document, errors: &mut Vec<LoadError>) -> Option<T> {
    from_value(&doc.value)
        .map_err(|e| errors.push(LoadError::at(&doc.source, e.field, e.message)))
        .ok()
}

/// Reads the metadata of a params document; `metadata.name` is required.
pub fn read_params(doc: &Document, errors: &mut Vec<LoadError>) -> Option<ObjectMeta> {
    let meta = read::<ParamsObject>(doc, errors)?.metadata;
    if meta.name.is_empty() {
        errors.push(LoadError::at(&doc.source, "metadata.name", "required"));
        return None;
    }
    Some(meta)
}

/// Collects the errors of one document.
struct Errors<'a> {
    source: &'a Source,
    errors: &'a mut Vec<LoadError>,
    /// Expressions compiled so far: the next one's [`Expr::id`].
    expressions: usize,
    /// Each compiled expression as written, by [`Expr::id`]: for type
    /// checking.
    written: Written,
}

/// How an expression is compiled: with its tree as written kept.
type Compile = fn(&Env, &str) -> Result<(Compiled, cel::schema::Parsed), cel::CompileError>;

/// How a policy document is read: the policy, and its expressions as
/// written for type checking.
pub type ReadPolicy = fn(&Env, &Document, &mut Vec<LoadError>) -> Option<(Policy, Written)>;

/// The expressions of a policy as written ([`cel::compile_written`]), by
/// [`Expr::id`]; `None` for one that did not compile.
#[derive(Default)]
pub struct Written(Vec<Option<cel::schema::Parsed>>);

impl Written {
    /// The expression numbered `id` as written.
    pub fn get(&self, id: usize) -> Option<&cel::schema::Parsed> {
        self.0.get(id)?.as_ref()
    }
}

impl Errors<'_> {
    fn push(&mut self, field: &str, message: impl Into<String>) {
        self.errors.push(LoadError::at(self.source, field, message));
    }

    /// A non-empty string, or `required` reported at `field`.
    fn required(&mut self, value: String, field: &str) -> Option<String> {
        if value.is_empty() {
            self.push(field, "required");
            return None;
        }
        Some(value)
    }

    fn compile(&mut self, env: &Env, source: String, field: &str) -> Option<Expr> {
        self.compile_with(cel::compile_written, env, source, field)
    }

    /// The next expression of the policy, compiled with `compile`, or its
    /// error reported at `field`.
    fn compile_with(
        &mut self,
        compile: Compile,
        env: &Env,
        source: String,
        field: &str,
    ) -> Option<Expr> {
        let source = self.required(source, field)?;
        let id = self.expressions;
        self.expressions += 1;
        self.written.0.resize_with(id + 1, || None);
        compile(env, &source)
            .map(|(compiled, written)| {
                self.written.0[id] = Some(written);
                Expr {
                    id,
                    field: field.into(),
                    compiled,
                }
            })
            .map_err(|e| {
                self.errors.push(LoadError {
                    source: Some(self.source.clone()),
                    field: Some(field.to_string()),
                    line: e.line,
                    column: e.column,
                    message: e.message,
                })
            })
            .ok()
    }

    fn selector(&mut self, s: LabelSelectorDoc, field: &str) -> LabelSelector {
        s.validate(field).unwrap_or_else(|e| {
            self.push(&e.field, e.message);
            LabelSelector::default()
        })
    }
}

/// `MatchResources` (`matchConstraints` of a policy, `matchResources` of
/// a binding).
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct MatchResourcesDoc {
    namespace_selector: LabelSelectorDoc,
    object_selector: LabelSelectorDoc,
    resource_rules: Vec<Rule>,
    exclude_resource_rules: Vec<Rule>,
    match_policy: MatchPolicy,
}

const OPERATIONS: [&str; 5] = ["*", "CREATE", "UPDATE", "DELETE", "CONNECT"];

impl MatchResourcesDoc {
    fn validate(self, field: &str, errors: &mut Errors) -> MatchResources {
        for (key, rules) in [
            ("resourceRules", &self.resource_rules),
            ("excludeResourceRules", &self.exclude_resource_rules),
        ] {
            for (i, r) in rules.iter().enumerate() {
                for (j, op) in r.operations.iter().enumerate() {
                    if !OPERATIONS.contains(&op.as_str()) {
                        let choices = OPERATIONS.join(", ");
                        let f = format!("{field}.{key}[{i}].operations[{j}]");
                        errors.push(&f, format!("must be one of {choices}, not {op}"));
                    }
                }
            }
        }
        MatchResources {
            namespace_selector: errors.selector(
                self.namespace_selector,
                &format!("{field}.namespaceSelector"),
            ),
            object_selector: errors
                .selector(self.object_selector, &format!("{field}.objectSelector")),
            resource_rules: self.resource_rules,
            exclude_resource_rules: self.exclude_resource_rules,
            match_policy: self.match_policy,
        }
    }
}

/// A policy document's spec: the fields both kinds share (read by
/// [`Common::read`]), then its kind's own, in the order serde's errors list.
macro_rules! policy_spec {
    ($(#[$doc:meta])* $name:ident { $($field:ident: $type:ty,)* }) => {
        $(#[$doc])*
        #[derive(Default, Deserialize)]
        #[serde(default, rename_all = "camelCase", deny_unknown_fields)]
        struct $name {
            failure_policy: FailurePolicy,
            param_kind: Option<ParamKindDoc>,
            match_constraints: Option<MatchResourcesDoc>,
            match_conditions: Vec<NamedDoc>,
            variables: Vec<NamedDoc>,
            $($field: $type,)*
        }

        impl $name {
            fn common(&mut self, env: &Env, errors: &mut Errors) -> Common {
                let (kind, constraints) = (self.param_kind.take(), self.match_constraints.take());
                let conditions = std::mem::take(&mut self.match_conditions);
                let variables = std::mem::take(&mut self.variables);
                Common::read(env, errors, kind, constraints, conditions, variables)
            }
        }
    };
}

policy_spec!(
    /// `ValidatingAdmissionPolicySpec`.
    PolicySpec {
        validations: Vec<ValidationDoc>,
        audit_annotations: Vec<AuditAnnotationDoc>,
    }
);

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct ParamKindDoc {
    api_version: String,
    kind: String,
}

/// A `MatchCondition` or a `Variable`.
#[derive(Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct NamedDoc {
    name: String,
    expression: String,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct ValidationDoc {
    expression: String,
    message: Option<String>,
    message_expression: String,
    reason: Option<String>,
}

const REASONS: [&str; 4] = [
    "Unauthorized",
    "Forbidden",
    "Invalid",
    "RequestEntityTooLarge",
];

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct AuditAnnotationDoc {
    key: String,
    value_expression: String,
}

/// What validating and mutating policies share: params, matching,
/// match conditions and variables.
struct Common {
    /// How many errors the document had before its spec was read.
    before: usize,
    param_kind: Option<(String, String)>,
    match_constraints: MatchResources,
    match_conditions: Vec<Named>,
    variables: Vec<Named>,
}

impl Common {
    fn read(
        env: &Env,
        errors: &mut Errors,
        param_kind: Option<ParamKindDoc>,
        match_constraints: Option<MatchResourcesDoc>,
        match_conditions: Vec<NamedDoc>,
        variables: Vec<NamedDoc>,
    ) -> Common {
        let before = errors.errors.len();
        let param_kind = param_kind.and_then(|pk| {
            let api = errors.required(pk.api_version, "spec.paramKind.apiVersion");
            api.zip(errors.required(pk.kind, "spec.paramKind.kind"))
        });
        let match_constraints = match match_constraints {
            Some(m) if m.resource_rules.is_empty() => {
                errors.push("spec.matchConstraints.resourceRules", "required");
                m.validate("spec.matchConstraints", errors)
            }
            Some(m) => m.validate("spec.matchConstraints", errors),
            None => {
                errors.push("spec.matchConstraints", "required");
                MatchResources::default()
            }
        };
        let pairs = |items: Vec<NamedDoc>| items.into_iter().map(|n| (n.name, n.expression));
        let match_conditions = read_named(
            env,
            errors,
            pairs(match_conditions).collect(),
            ["matchConditions", "name", "expression"],
        );
        let variables = read_named(
            env,
            errors,
            pairs(variables).collect(),
            ["variables", "name", "expression"],
        );
        Common {
            before,
            param_kind,
            match_constraints,
            match_conditions,
            variables,
        }
    }

    /// The policy, unless some part of its document was wrong (the
    /// variables are checked against every expression first).
    fn policy(
        self,
        errors: &mut Errors,
        name: Option<String>,
        failure_policy: FailurePolicy,
        validations: Vec<Validation>,
        audit_annotations: Vec<Named>,
        mutations: Vec<Mutation>,
    ) -> Option<Policy> {
        let Common {
            before,
            param_kind,
            match_constraints,
            match_conditions,
            variables,
        } = self;
        check_variables(
            errors,
            param_kind.is_some(),
            &variables,
            &match_conditions,
            &validations,
            &audit_annotations,
            &mutations,
        );
        if errors.errors.len() > before {
            return None;
        }
        let name = name?;
        let audit_annotations = (audit_annotations.into_iter())
            .map(|a| AuditAnnotation {
                returned_key: annotations::returned_key(&name, &a.name),
                key: a.name,
                expr: a.expr,
            })
            .collect();
        let mut policy = Policy {
            name: name.into(),
            description: None,
            failure_policy,
            param_kind,
            match_constraints,
            match_conditions,
            variables,
            validations,
            audit_annotations,
            // A validating policy judges pod templates unless its
            // annotation says not to (see `read_policy`).
            pod_templates: mutations.is_empty(),
            mutations,
            uses_params: false,
            expression_count: errors.expressions,
        };
        let uses_params = policy.expressions().any(|e| e.reads("params"));
        policy.uses_params = uses_params;
        Some(policy)
    }
}

/// Named expressions at `spec.<key>[i]`, with their name and expression
/// fields (`[key, name_key, expr_key]`).
fn read_named(
    env: &Env,
    errors: &mut Errors,
    items: Vec<(String, String)>,
    [key, name_key, expr_key]: [&str; 3],
) -> Vec<Named> {
    let mut out = Vec::new();
    for (i, (name, expr)) in items.into_iter().enumerate() {
        let name = errors.required(name, &format!("spec.{key}[{i}].{name_key}"));
        let expr = errors.compile(env, expr, &format!("spec.{key}[{i}].{expr_key}"));
        out.extend(name.zip(expr).map(|(name, expr)| Named { name, expr }));
    }
    out
}

impl PolicySpec {
    fn validate(mut self, env: &Env, name: Option<String>, errors: &mut Errors) -> Option<Policy> {
        let common = self.common(env, errors);
        if self.validations.is_empty() && self.audit_annotations.is_empty() {
            errors.push(
                "spec.validations",
                "a policy needs validations or auditAnnotations",
            );
        }
        check_audit_keys(errors, &self.audit_annotations);
        let keyed = self
            .audit_annotations
            .into_iter()
            .map(|a| (a.key, a.value_expression));
        let audit_annotations = read_named(
            env,
            errors,
            keyed.collect(),
            ["auditAnnotations", "key", "valueExpression"],
        );
        let mut validations = Vec::new();
        for (i, v) in self.validations.into_iter().enumerate() {
            let f = format!("spec.validations[{i}]");
            let expr = errors.compile(env, v.expression, &format!("{f}.expression"));
            if v.message.as_deref().is_some_and(|m| m.contains('\n')) {
                errors.push(&format!("{f}.message"), "must be a single line");
            }
            // An empty messageExpression is none, as in Kubernetes.
            let message_expr = Some(v.message_expression).filter(|m| !m.is_empty());
            let message_expr = message_expr
                .and_then(|m| errors.compile(env, m, &format!("{f}.messageExpression")));
            let reason = v.reason.unwrap_or_else(|| "Invalid".to_string());
            if !REASONS.contains(&reason.as_str()) {
                let choices = REASONS.join(", ");
                errors.push(
                    &format!("{f}.reason"),
                    format!("must be one of {choices}, not {reason}"),
                );
            }
            validations.extend(expr.map(|expr| Validation {
                expr,
                message: v.message,
                message_expr,
                reason,
            }));
        }
        common.policy(
            errors,
            name,
            self.failure_policy,
            validations,
            audit_annotations,
            Vec::new(),
        )
    }
}

/// Audit annotation keys kube-apiserver accepts when the policy is
/// created: each valid (see [`annotations::key_error`]) and used once.
/// An empty key is reported as required where it is read.
fn check_audit_keys(errors: &mut Errors, docs: &[AuditAnnotationDoc]) {
    let mut first: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, a) in docs.iter().enumerate().filter(|(_, a)| !a.key.is_empty()) {
        let field = format!("spec.auditAnnotations[{i}].key");
        if let Some(error) = annotations::key_error(&a.key) {
            errors.push(&field, error);
        }
        if let Some(j) = first.get(a.key.as_str()) {
            errors.push(
                &field,
                format!(
                    "duplicate key {:?}: spec.auditAnnotations[{j}] has it",
                    a.key
                ),
            );
        } else {
            first.insert(&a.key, i);
        }
    }
}

/// A document's object as [`read_object`] reads it.
struct Read<'a, S> {
    name: Option<String>,
    annotations: BTreeMap<String, String>,
    spec: S,
    errors: Errors<'a>,
}

/// Reads a document's object and checks `metadata.name` and `spec`.
fn read_object<'a, S: DeserializeOwned>(
    doc: &'a Document,
    errors: &'a mut Vec<LoadError>,
) -> Option<Read<'a, S>> {
    let object: Object<S> = read(doc, errors)?;
    let mut errors = Errors {
        expressions: 0,
        source: &doc.source,
        errors,
        written: Written::default(),
    };
    let name = Some(object.metadata.name).filter(|n| !n.is_empty());
    if name.is_none() {
        errors.push("metadata.name", "required");
    }
    let Some(spec) = object.spec else {
        errors.push("spec", "required");
        return None;
    };
    Some(Read {
        name,
        annotations: object.metadata.annotations,
        spec,
        errors,
    })
}

/// The annotation that says, for people, what a policy checks (reports
/// show it beside the policy's findings).
pub const DESCRIPTION_ANNOTATION: &str = "gpu-admission.io/description";

/// Reads a ValidatingAdmissionPolicy.
pub fn read_policy(
    env: &Env,
    doc: &Document,
    errors: &mut Vec<LoadError>,
) -> Option<(Policy, Written)> {
    let Read {
        name,
        annotations,
        spec,
        mut errors,
    } = read_object::<PolicySpec>(doc, errors)?;
    let pod_templates = match annotations
        .get(POD_TEMPLATES_ANNOTATION)
        .map(String::as_str)
    {
        None | Some("true") => Some(true),
        Some("false") => Some(false),
        Some(other) => {
            errors.push(
                &format!("metadata.annotations[{POD_TEMPLATES_ANNOTATION}]"),
                format!("must be \"true\" or \"false\", not {other:?}"),
            );
            None
        }
    };
    let mut policy = spec.validate(env, name, &mut errors)?;
    policy.pod_templates = pod_templates?;
    policy.description = description(&annotations);
    Some((policy, errors.written))
}

/// The policy's [`DESCRIPTION_ANNOTATION`], on one line.
fn description(annotations: &BTreeMap<String, String>) -> Option<String> {
    annotations
        .get(DESCRIPTION_ANNOTATION)
        .map(|d| d.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|d| !d.is_empty())
}
/// Every `variables.x` must name a variable; a variable may only use the
/// ones defined before it. `params` is declared only for a policy with a
/// `paramKind`, as kube-apiserver declares it.
fn check_variables(
    r: &mut Errors,
    has_params: bool,
    variables: &[Named],
    conditions: &[Named],
    validations: &[Validation],
    annotations: &[Named],
    mutations: &[Mutation],
) {
    let mut seen = std::collections::BTreeSet::new();
    for (i, v) in variables.iter().enumerate() {
        if !seen.insert(v.name.as_str()) {
            r.push(
                &format!("spec.variables[{i}].name"),
                format!("variable {} is defined twice", v.name),
            );
        }
    }
    let index: BTreeMap<&str, usize> = variables
        .iter()
        .enumerate()
        .map(|(i, v)| (v.name.as_str(), i))
        .collect();
    // Every expression but the variables', by field; mutations are not
    // checked for `params` (a MutatingAdmissionPolicy may go without).
    let mut others: Vec<(String, &Compiled, bool)> = Vec::new();
    for (i, c) in conditions.iter().enumerate() {
        others.push((
            format!("spec.matchConditions[{i}].expression"),
            &c.expr,
            true,
        ));
    }
    for (i, v) in validations.iter().enumerate() {
        others.push((format!("spec.validations[{i}].expression"), &v.expr, true));
        if let Some(m) = &v.message_expr {
            let field = format!("spec.validations[{i}].messageExpression");
            others.push((field, m, true));
        }
    }
    for (i, a) in annotations.iter().enumerate() {
        let field = format!("spec.auditAnnotations[{i}].valueExpression");
        others.push((field, &a.expr, true));
    }
    for (i, m) in mutations.iter().enumerate() {
        let field = format!("spec.mutations[{i}].{}.expression", m.patch_type.field());
        others.push((field, &m.expr, false));
    }
    let mut check_params = |field: &str, expr: &Compiled| {
        if !has_params && expr.reads("params") {
            r.push(
                field,
                "undeclared reference to 'params': the policy has no spec.paramKind",
            );
        }
    };
    for (i, v) in variables.iter().enumerate() {
        check_params(&format!("spec.variables[{i}].expression"), &v.expr);
    }
    for (field, expr, params) in &others {
        if *params {
            check_params(field, expr);
        }
    }
    for (i, v) in variables.iter().enumerate() {
        for used in v.expr.policy_variables() {
            if index.get(used.as_str()).is_none_or(|j| *j >= i) {
                r.push(
                    &format!("spec.variables[{i}].expression"),
                    format!("variables.{used} is not defined before this variable"),
                );
            }
        }
    }
    for (field, expr, _) in &others {
        for used in expr.policy_variables() {
            if !index.contains_key(used.as_str()) {
                r.push(
                    field,
                    format!("variables.{used} is not defined in spec.variables"),
                );
            }
        }
    }
}

/// `ValidatingAdmissionPolicyBindingSpec`.
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct BindingSpec {
    policy_name: String,
    param_ref: Option<ParamRefDoc>,
    match_resources: Option<MatchResourcesDoc>,
    validation_actions: Vec<Action>,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct ParamRefDoc {
    name: Option<String>,
    namespace: Option<String>,
    selector: Option<LabelSelectorDoc>,
    parameter_not_found_action: Option<ParameterNotFoundAction>,
}

#[derive(PartialEq, Deserialize)]
enum ParameterNotFoundAction {
    Allow,
    Deny,
}

impl BindingSpec {
    /// `validating`: whether `validationActions` are required.
    fn validate(
        self,
        name: Option<String>,
        errors: &mut Errors,
        validating: bool,
    ) -> Option<Binding> {
        let before = errors.errors.len();
        let policy_name = errors.required(self.policy_name, "spec.policyName");
        let actions = self.validation_actions;
        if validating && actions.is_empty() {
            errors.push(
                "spec.validationActions",
                "required: Deny, Warn and/or Audit",
            );
        }
        if actions.contains(&Action::Deny) && actions.contains(&Action::Warn) {
            errors.push(
                "spec.validationActions",
                "Deny and Warn may not be used together (Deny already tells the user)",
            );
        }
        let param_ref = self.param_ref.map(|p| p.validate(errors));
        let match_resources =
            (self.match_resources).map(|m| m.validate("spec.matchResources", errors));
        if errors.errors.len() > before {
            return None;
        }
        Some(Binding {
            name: name?,
            policy_name: policy_name?,
            param_ref,
            match_resources,
            actions,
        })
    }
}

impl ParamRefDoc {
    fn validate(self, errors: &mut Errors) -> ParamRef {
        if self.name.is_some() == self.selector.is_some() {
            errors.push(
                "spec.paramRef",
                "exactly one of name or selector is required",
            );
        }
        let action = self.parameter_not_found_action;
        if action.is_none() {
            errors.push(
                "spec.paramRef.parameterNotFoundAction",
                "required: Allow or Deny",
            );
        }
        ParamRef {
            name: self.name,
            namespace: self.namespace,
            selector: self
                .selector
                .map(|s| errors.selector(s, "spec.paramRef.selector")),
            deny_when_missing: action != Some(ParameterNotFoundAction::Allow),
        }
    }
}

/// Reads a ValidatingAdmissionPolicyBinding.
pub fn read_binding(doc: &Document, errors: &mut Vec<LoadError>) -> Option<Binding> {
    let Read {
        name,
        spec,
        mut errors,
        ..
    } = read_object::<BindingSpec>(doc, errors)?;
    spec.validate(name, &mut errors, true)
}

policy_spec!(
    /// `MutatingAdmissionPolicySpec`.
    MutatingPolicySpec {
        mutations: Vec<MutationDoc>,
        reinvocation_policy: Option<Reinvocation>,
    }
);

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct MutationDoc {
    patch_type: String,
    json_patch: Option<ExpressionDoc>,
    apply_configuration: Option<ExpressionDoc>,
}

/// `JSONPatch` and `ApplyConfiguration` of a mutation.
#[derive(Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ExpressionDoc {
    expression: String,
}

impl PatchType {
    /// The mutation field holding this type's expression.
    pub fn field(self) -> &'static str {
        match self {
            PatchType::JsonPatch => "jsonPatch",
            PatchType::ApplyConfiguration => "applyConfiguration",
        }
    }
}

impl MutatingPolicySpec {
    fn validate(mut self, env: &Env, name: Option<String>, errors: &mut Errors) -> Option<Policy> {
        let common = self.common(env, errors);
        if self.mutations.is_empty() {
            errors.push("spec.mutations", "required: at least one mutation");
        }
        if self.reinvocation_policy.is_none() {
            errors.push("spec.reinvocationPolicy", "required: Never or IfNeeded");
        }
        let mut mutations = Vec::new();
        for (i, m) in self.mutations.into_iter().enumerate() {
            let f = format!("spec.mutations[{i}]");
            let (patch_type, given, other) = match m.patch_type.as_str() {
                "JSONPatch" => (PatchType::JsonPatch, m.json_patch, m.apply_configuration),
                "ApplyConfiguration" => (
                    PatchType::ApplyConfiguration,
                    m.apply_configuration,
                    m.json_patch,
                ),
                "" => {
                    errors.push(
                        &format!("{f}.patchType"),
                        "required: JSONPatch or ApplyConfiguration",
                    );
                    continue;
                }
                other => {
                    errors.push(
                        &format!("{f}.patchType"),
                        format!("must be JSONPatch or ApplyConfiguration, not {other}"),
                    );
                    continue;
                }
            };
            let field = format!("{f}.{}", patch_type.field());
            if other.is_some() {
                let unused = match patch_type {
                    PatchType::JsonPatch => PatchType::ApplyConfiguration,
                    PatchType::ApplyConfiguration => PatchType::JsonPatch,
                };
                errors.push(
                    &format!("{f}.{}", unused.field()),
                    format!("must not be set when patchType is {}", patch_type.as_str()),
                );
            }
            let Some(given) = given else {
                errors.push(
                    &field,
                    format!("required when patchType is {}", patch_type.as_str()),
                );
                continue;
            };
            let expr = errors.compile_with(
                cel::compile_mutation_written,
                env,
                given.expression,
                &format!("{field}.expression"),
            );
            mutations.extend(expr.map(|expr| Mutation { patch_type, expr }));
        }
        let failure_policy = self.failure_policy;
        common.policy(errors, name, failure_policy, vec![], vec![], mutations)
    }
}

/// Reads a MutatingAdmissionPolicy.
pub fn read_mutating_policy(
    env: &Env,
    doc: &Document,
    errors: &mut Vec<LoadError>,
) -> Option<(Policy, Written)> {
    let Read {
        name,
        annotations,
        spec,
        mut errors,
    } = read_object::<MutatingPolicySpec>(doc, errors)?;
    let mut policy = spec.validate(env, name, &mut errors)?;
    policy.description = description(&annotations);
    Some((policy, errors.written))
}

/// `MutatingAdmissionPolicyBindingSpec`: a validating binding without
/// `validationActions`.
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct MutatingBindingSpec {
    policy_name: String,
    param_ref: Option<ParamRefDoc>,
    match_resources: Option<MatchResourcesDoc>,
}

/// Reads a MutatingAdmissionPolicyBinding (its `actions` are empty).
pub fn read_mutating_binding(doc: &Document, errors: &mut Vec<LoadError>) -> Option<Binding> {
    let Read {
        name,
        spec,
        mut errors,
        ..
    } = read_object::<MutatingBindingSpec>(doc, errors)?;
    let spec = BindingSpec {
        policy_name: spec.policy_name,
        param_ref: spec.param_ref,
        match_resources: spec.match_resources,
        validation_actions: Vec::new(),
    };
    spec.validate(name, &mut errors, false)
}
