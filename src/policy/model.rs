//! ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding documents.
//!
//! Each document is read by serde into a model with Kubernetes' own field
//! names (unknown fields are errors, as with kube-apiserver's strict field
//! validation), and its `validate()` makes the checks serde cannot express
//! and converts it into the engine's types. Every error names its field.
use super::load::{Document, LoadError, Source};
use super::matching::{
    LabelSelector, MatchPolicy, MatchResources, Requirement, Rule, Scope, SelectorOp,
};
use crate::cel::{self, Compiled, Env};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum FailurePolicy {
    Fail,
    Ignore,
}

impl FailurePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::Fail => "Fail",
            FailurePolicy::Ignore => "Ignore",
        }
    }
}

#[derive(Debug)]
pub struct Policy {
    pub name: String,
    pub failure_policy: FailurePolicy,
    /// (apiVersion, kind) of params.
    pub param_kind: Option<(String, String)>,
    pub match_constraints: MatchResources,
    pub match_conditions: Vec<Named>,
    pub variables: Vec<Named>,
    pub validations: Vec<Validation>,
    pub audit_annotations: Vec<Named>,
}

/// A named expression (match condition, variable, audit annotation).
#[derive(Debug)]
pub struct Named {
    pub name: String,
    pub expr: Compiled,
}

#[derive(Debug)]
pub struct Validation {
    pub expr: Compiled,
    pub message: Option<String>,
    pub message_expr: Option<Compiled>,
    pub reason: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum Action {
    Deny,
    Warn,
    Audit,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Deny => "Deny",
            Action::Warn => "Warn",
            Action::Audit => "Audit",
        }
    }
}

#[derive(Debug)]
pub struct Binding {
    pub name: String,
    pub policy_name: String,
    pub param_ref: Option<ParamRef>,
    pub match_resources: Option<MatchResources>,
    pub actions: Vec<Action>,
}

#[derive(Debug)]
pub struct ParamRef {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub selector: Option<LabelSelector>,
    /// `parameterNotFoundAction: Deny`.
    pub deny_when_missing: bool,
}

/// A field path and what is wrong there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// e.g. `spec.validations[0].expression`; empty for the whole document.
    pub field: String,
    pub message: String,
}

/// Reads `value` into `T`, an error naming the path of the field at fault.
/// serde's wording is turned into the engine's: a missing field is
/// `required` at its own path, and an unknown enum value says what it must
/// be.
pub fn from_value<'de, T: Deserialize<'de>>(value: &'de Value) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let mut field = if path == "." { String::new() } else { path };
        let text = e.into_inner().to_string();
        let quoted = |prefix: &str| {
            let rest = text.strip_prefix(prefix)?;
            let (name, rest) = rest.split_once('`')?;
            Some((name.to_string(), rest.to_string()))
        };
        let message = if let Some((name, _)) = quoted("missing field `") {
            field = join(&field, &name);
            "required".to_string()
        } else if let Some((_, rest)) = quoted("unknown field `") {
            // The path already ends with the unknown field.
            format!("unknown field{}", rest.replace('`', ""))
        } else if let Some((name, rest)) = quoted("unknown variant `") {
            let expected = rest.trim_start_matches(", expected ").replace('`', "");
            format!("must be {expected}, not {name}")
        } else {
            text
        };
        FieldError { field, message }
    })
}

fn join(field: &str, key: &str) -> String {
    if field.is_empty() {
        key.to_string()
    } else {
        format!("{field}.{key}")
    }
}

/// A Kubernetes object: `apiVersion`, `kind`, `metadata`, the kind's
/// `spec`, and the `status` a server export carries (ignored).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Object<S> {
    #[serde(rename = "apiVersion")]
    _api_version: IgnoredAny,
    #[serde(rename = "kind")]
    _kind: IgnoredAny,
    #[serde(default)]
    pub metadata: Option<ObjectMeta>,
    pub spec: Option<S>,
    #[serde(rename = "status", default)]
    _status: Option<IgnoredAny>,
}

/// The part of `metadata` the engine uses; every other field Kubernetes
/// sets (uid, annotations, managedFields, ...) is accepted and ignored.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ObjectMeta {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub labels: Option<BTreeMap<String, String>>,
}

impl<S> Object<S> {
    /// The non-empty `metadata.name`.
    pub fn name(&self) -> Option<String> {
        let meta = self.metadata.as_ref()?;
        meta.name.clone().filter(|n| !n.is_empty())
    }
}

/// Collects the errors of one document.
struct Errors<'a> {
    source: &'a Source,
    errors: &'a mut Vec<LoadError>,
}

impl Errors<'_> {
    fn push(&mut self, field: &str, message: impl Into<String>) {
        self.errors.push(LoadError::at(self.source, field, message));
    }

    /// A non-empty string, or `required` reported at `field`.
    fn required(&mut self, value: Option<String>, field: &str) -> Option<String> {
        let value = value.filter(|v| !v.is_empty());
        if value.is_none() {
            self.push(field, "required");
        }
        value
    }

    fn compile(&mut self, env: &Env, source: Option<String>, field: &str) -> Option<Compiled> {
        let source = self.required(source, field)?;
        match cel::compile(env, &source) {
            Ok(c) => Some(c),
            Err(e) => {
                self.errors.push(LoadError {
                    source: Some(self.source.clone()),
                    field: Some(field.to_string()),
                    line: e.line,
                    column: e.column,
                    message: e.message,
                });
                None
            }
        }
    }
}

/// A params document: an object of any kind a policy's `paramKind` names,
/// of which only `metadata` is read (the whole object is the params value).
#[derive(Deserialize)]
struct ParamsObject {
    metadata: Option<ObjectMeta>,
}

/// Where a params document is and its labels.
pub struct ParamsMeta {
    pub name: String,
    pub namespace: Option<String>,
    pub labels: BTreeMap<String, String>,
}

/// Reads the metadata of a params document; `metadata.name` is required.
pub fn read_params(doc: &Document, errors: &mut Vec<LoadError>) -> Option<ParamsMeta> {
    let object: ParamsObject = match from_value(&doc.value) {
        Ok(o) => o,
        Err(e) => {
            errors.push(LoadError::at(&doc.source, e.field, e.message));
            return None;
        }
    };
    let meta = object.metadata.unwrap_or_default();
    let Some(name) = meta.name.filter(|n| !n.is_empty()) else {
        errors.push(LoadError::at(&doc.source, "metadata.name", "required"));
        return None;
    };
    Some(ParamsMeta {
        name,
        namespace: meta.namespace,
        labels: meta.labels.unwrap_or_default(),
    })
}

/// Reads `doc` as an [`Object`], reporting a serde error against it.
fn read_object<S: for<'de> Deserialize<'de>>(
    doc: &Document,
    errors: &mut Vec<LoadError>,
) -> Option<Object<S>> {
    match from_value(&doc.value) {
        Ok(o) => Some(o),
        Err(e) => {
            errors.push(LoadError::at(&doc.source, e.field, e.message));
            None
        }
    }
}

/// `metav1.LabelSelector`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelSelectorDoc {
    pub match_labels: Option<BTreeMap<String, String>>,
    pub match_expressions: Option<Vec<LabelRequirementDoc>>,
}

/// `metav1.LabelSelectorRequirement`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelRequirementDoc {
    pub key: String,
    pub operator: SelectorOpDoc,
    pub values: Option<Vec<String>>,
}

#[derive(Clone, Copy, Debug, Deserialize)]
pub enum SelectorOpDoc {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl LabelSelectorDoc {
    /// The selector, or the field and the reason it is not a valid one.
    pub fn validate(self, field: &str) -> Result<LabelSelector, FieldError> {
        let mut match_expressions = Vec::new();
        for (i, r) in self
            .match_expressions
            .unwrap_or_default()
            .into_iter()
            .enumerate()
        {
            let f = format!("{field}.matchExpressions[{i}]");
            let error = |field: String, message: &str| FieldError {
                field,
                message: message.to_string(),
            };
            if r.key.is_empty() {
                return Err(error(format!("{f}.key"), "required"));
            }
            let values = r.values.unwrap_or_default();
            let operator = match r.operator {
                SelectorOpDoc::In => SelectorOp::In,
                SelectorOpDoc::NotIn => SelectorOp::NotIn,
                SelectorOpDoc::Exists => SelectorOp::Exists,
                SelectorOpDoc::DoesNotExist => SelectorOp::DoesNotExist,
            };
            match operator {
                SelectorOp::In | SelectorOp::NotIn if values.is_empty() => {
                    return Err(error(format!("{f}.values"), "required with In and NotIn"))
                }
                SelectorOp::Exists | SelectorOp::DoesNotExist if !values.is_empty() => {
                    return Err(error(
                        format!("{f}.values"),
                        "must be empty with Exists and DoesNotExist",
                    ))
                }
                _ => {}
            }
            match_expressions.push(Requirement {
                key: r.key,
                operator,
                values,
            });
        }
        Ok(LabelSelector {
            match_labels: self.match_labels.unwrap_or_default(),
            match_expressions,
        })
    }
}

/// `MatchResources` (`matchConstraints` of a policy, `matchResources` of
/// a binding).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct MatchResourcesDoc {
    namespace_selector: Option<LabelSelectorDoc>,
    object_selector: Option<LabelSelectorDoc>,
    resource_rules: Option<Vec<RuleDoc>>,
    exclude_resource_rules: Option<Vec<RuleDoc>>,
    match_policy: Option<MatchPolicyDoc>,
}

#[derive(Deserialize)]
enum MatchPolicyDoc {
    Equivalent,
    Exact,
}

/// `NamedRuleWithOperations`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RuleDoc {
    operations: Option<Vec<OperationDoc>>,
    api_groups: Option<Vec<String>>,
    api_versions: Option<Vec<String>>,
    resources: Option<Vec<String>>,
    resource_names: Option<Vec<String>>,
    scope: Option<ScopeDoc>,
}

#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
enum OperationDoc {
    #[serde(rename = "*")]
    All,
    Create,
    Update,
    Delete,
    Connect,
}

impl OperationDoc {
    fn as_str(self) -> &'static str {
        match self {
            OperationDoc::All => "*",
            OperationDoc::Create => "CREATE",
            OperationDoc::Update => "UPDATE",
            OperationDoc::Delete => "DELETE",
            OperationDoc::Connect => "CONNECT",
        }
    }
}

#[derive(Deserialize)]
enum ScopeDoc {
    #[serde(rename = "*")]
    All,
    Cluster,
    Namespaced,
}

impl MatchResourcesDoc {
    fn validate(self, field: &str, errors: &mut Errors) -> MatchResources {
        let mut selector = |s: Option<LabelSelectorDoc>, key: &str| {
            s.unwrap_or_default()
                .validate(&join(field, key))
                .unwrap_or_else(|e| {
                    errors.push(&e.field, e.message);
                    LabelSelector::default()
                })
        };
        let namespace_selector = selector(self.namespace_selector, "namespaceSelector");
        let object_selector = selector(self.object_selector, "objectSelector");
        let rules = |rules: Option<Vec<RuleDoc>>| -> Vec<Rule> {
            rules
                .unwrap_or_default()
                .into_iter()
                .map(|r| Rule {
                    operations: (r.operations.unwrap_or_default().into_iter())
                        .map(|o| o.as_str().to_string())
                        .collect(),
                    api_groups: r.api_groups.unwrap_or_default(),
                    api_versions: r.api_versions.unwrap_or_default(),
                    resources: r.resources.unwrap_or_default(),
                    resource_names: r.resource_names.unwrap_or_default(),
                    scope: match r.scope {
                        None | Some(ScopeDoc::All) => Scope::All,
                        Some(ScopeDoc::Cluster) => Scope::Cluster,
                        Some(ScopeDoc::Namespaced) => Scope::Namespaced,
                    },
                })
                .collect()
        };
        MatchResources {
            namespace_selector,
            object_selector,
            resource_rules: rules(self.resource_rules),
            exclude_resource_rules: rules(self.exclude_resource_rules),
            match_policy: match self.match_policy {
                None | Some(MatchPolicyDoc::Equivalent) => MatchPolicy::Equivalent,
                Some(MatchPolicyDoc::Exact) => MatchPolicy::Exact,
            },
        }
    }
}

/// `ValidatingAdmissionPolicySpec`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PolicySpec {
    failure_policy: Option<FailurePolicy>,
    param_kind: Option<ParamKindDoc>,
    match_constraints: Option<MatchResourcesDoc>,
    match_conditions: Option<Vec<NamedDoc>>,
    variables: Option<Vec<NamedDoc>>,
    validations: Option<Vec<ValidationDoc>>,
    audit_annotations: Option<Vec<AuditAnnotationDoc>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ParamKindDoc {
    api_version: Option<String>,
    kind: Option<String>,
}

/// A `MatchCondition` or a `Variable`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NamedDoc {
    name: Option<String>,
    expression: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ValidationDoc {
    expression: Option<String>,
    message: Option<String>,
    message_expression: Option<String>,
    reason: Option<ReasonDoc>,
}

#[derive(Clone, Copy, Deserialize)]
enum ReasonDoc {
    Unauthorized,
    Forbidden,
    Invalid,
    RequestEntityTooLarge,
}

impl ReasonDoc {
    fn as_str(self) -> &'static str {
        match self {
            ReasonDoc::Unauthorized => "Unauthorized",
            ReasonDoc::Forbidden => "Forbidden",
            ReasonDoc::Invalid => "Invalid",
            ReasonDoc::RequestEntityTooLarge => "RequestEntityTooLarge",
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AuditAnnotationDoc {
    key: Option<String>,
    value_expression: Option<String>,
}

impl PolicySpec {
    fn validate(self, env: &Env, name: Option<&str>, errors: &mut Errors) -> Option<Policy> {
        let before = errors.errors.len();
        let param_kind = self.param_kind.and_then(|pk| {
            let api = errors.required(pk.api_version, "spec.paramKind.apiVersion");
            let kind = errors.required(pk.kind, "spec.paramKind.kind");
            api.zip(kind)
        });
        let match_constraints = match self.match_constraints {
            Some(m) => {
                let mc = m.validate("spec.matchConstraints", errors);
                if mc.resource_rules.is_empty() {
                    errors.push("spec.matchConstraints.resourceRules", "required");
                }
                mc
            }
            None => {
                errors.push("spec.matchConstraints", "required");
                MatchResources::default()
            }
        };
        let mut named = |items: Vec<NamedDoc>, key: &str| -> Vec<Named> {
            let mut out = Vec::new();
            for (i, item) in items.into_iter().enumerate() {
                let f = format!("spec.{key}[{i}]");
                let name = errors.required(item.name, &format!("{f}.name"));
                let expr = errors.compile(env, item.expression, &format!("{f}.expression"));
                if let Some((name, expr)) = name.zip(expr) {
                    out.push(Named { name, expr });
                }
            }
            out
        };
        let match_conditions = named(self.match_conditions.unwrap_or_default(), "matchConditions");
        let variables = named(self.variables.unwrap_or_default(), "variables");
        let annotations = self.audit_annotations.unwrap_or_default();
        let validations = self.validations.unwrap_or_default();
        if validations.is_empty() && annotations.is_empty() {
            errors.push(
                "spec.validations",
                "a policy needs validations or auditAnnotations",
            );
        }
        let mut audit_annotations = Vec::new();
        for (i, a) in annotations.into_iter().enumerate() {
            let f = format!("spec.auditAnnotations[{i}]");
            let key = errors.required(a.key, &format!("{f}.key"));
            let expr = errors.compile(env, a.value_expression, &format!("{f}.valueExpression"));
            if let Some((name, expr)) = key.zip(expr) {
                audit_annotations.push(Named { name, expr });
            }
        }
        let mut compiled = Vec::new();
        for (i, v) in validations.into_iter().enumerate() {
            let f = format!("spec.validations[{i}]");
            let expr = errors.compile(env, v.expression, &format!("{f}.expression"));
            if v.message.as_deref().is_some_and(|m| m.contains('\n')) {
                errors.push(&format!("{f}.message"), "must be a single line");
            }
            // An empty messageExpression is no messageExpression, as in
            // Kubernetes.
            let message_expr = v.message_expression.filter(|m| !m.is_empty());
            let message_expr = message_expr
                .and_then(|m| errors.compile(env, Some(m), &format!("{f}.messageExpression")));
            if let Some(expr) = expr {
                compiled.push(Validation {
                    expr,
                    message: v.message,
                    message_expr,
                    reason: v.reason.unwrap_or(ReasonDoc::Invalid).as_str().to_string(),
                });
            }
        }
        check_variables(
            errors,
            &variables,
            &match_conditions,
            &compiled,
            &audit_annotations,
        );
        if errors.errors.len() > before {
            return None;
        }
        Some(Policy {
            name: name?.to_string(),
            failure_policy: self.failure_policy.unwrap_or(FailurePolicy::Fail),
            param_kind,
            match_constraints,
            match_conditions,
            variables,
            validations: compiled,
            audit_annotations,
        })
    }
}

/// Reads a ValidatingAdmissionPolicy.
pub fn read_policy(env: &Env, doc: &Document, errors: &mut Vec<LoadError>) -> Option<Policy> {
    let object: Object<PolicySpec> = read_object(doc, errors)?;
    let mut errors = Errors {
        source: &doc.source,
        errors,
    };
    let name = object.name();
    if name.is_none() {
        errors.push("metadata.name", "required");
    }
    let Some(spec) = object.spec else {
        errors.push("spec", "required");
        return None;
    };
    spec.validate(env, name.as_deref(), &mut errors)
}

/// Every `variables.x` must name a variable; a variable may only use the
/// ones defined before it.
fn check_variables(
    r: &mut Errors,
    variables: &[Named],
    conditions: &[Named],
    validations: &[Validation],
    annotations: &[Named],
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
    for (i, v) in variables.iter().enumerate() {
        for used in &v.expr.policy_variables {
            if index.get(used.as_str()).is_none_or(|j| *j >= i) {
                r.push(
                    &format!("spec.variables[{i}].expression"),
                    format!("variables.{used} is not defined before this variable"),
                );
            }
        }
    }
    let mut check = |field: String, expr: &Compiled| {
        for used in &expr.policy_variables {
            if !index.contains_key(used.as_str()) {
                r.push(
                    &field,
                    format!("variables.{used} is not defined in spec.variables"),
                );
            }
        }
    };
    for (i, c) in conditions.iter().enumerate() {
        check(format!("spec.matchConditions[{i}].expression"), &c.expr);
    }
    for (i, v) in validations.iter().enumerate() {
        check(format!("spec.validations[{i}].expression"), &v.expr);
        if let Some(m) = &v.message_expr {
            check(format!("spec.validations[{i}].messageExpression"), m);
        }
    }
    for (i, a) in annotations.iter().enumerate() {
        check(
            format!("spec.auditAnnotations[{i}].valueExpression"),
            &a.expr,
        );
    }
}

/// `ValidatingAdmissionPolicyBindingSpec`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BindingSpec {
    policy_name: Option<String>,
    param_ref: Option<ParamRefDoc>,
    match_resources: Option<MatchResourcesDoc>,
    validation_actions: Option<Vec<Action>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ParamRefDoc {
    name: Option<String>,
    namespace: Option<String>,
    selector: Option<LabelSelectorDoc>,
    parameter_not_found_action: Option<ParameterNotFoundAction>,
}

#[derive(Deserialize)]
enum ParameterNotFoundAction {
    Allow,
    Deny,
}

impl ParamRefDoc {
    fn validate(self, errors: &mut Errors) -> ParamRef {
        if self.name.is_some() == self.selector.is_some() {
            errors.push(
                "spec.paramRef",
                "exactly one of name or selector is required",
            );
        }
        let selector = self.selector.map(|s| {
            s.validate("spec.paramRef.selector").unwrap_or_else(|e| {
                errors.push(&e.field, e.message);
                LabelSelector::default()
            })
        });
        let deny_when_missing = match self.parameter_not_found_action {
            Some(ParameterNotFoundAction::Allow) => false,
            Some(ParameterNotFoundAction::Deny) => true,
            None => {
                errors.push(
                    "spec.paramRef.parameterNotFoundAction",
                    "required: Allow or Deny",
                );
                true
            }
        };
        ParamRef {
            name: self.name,
            namespace: self.namespace,
            selector,
            deny_when_missing,
        }
    }
}

impl BindingSpec {
    fn validate(self, name: Option<&str>, errors: &mut Errors) -> Option<Binding> {
        let before = errors.errors.len();
        let policy_name = errors.required(self.policy_name, "spec.policyName");
        let actions = self.validation_actions.unwrap_or_default();
        if actions.is_empty() {
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
        let match_resources = self
            .match_resources
            .map(|m| m.validate("spec.matchResources", errors));
        if errors.errors.len() > before {
            return None;
        }
        Some(Binding {
            name: name?.to_string(),
            policy_name: policy_name?,
            param_ref,
            match_resources,
            actions,
        })
    }
}

/// Reads a ValidatingAdmissionPolicyBinding.
pub fn read_binding(doc: &Document, errors: &mut Vec<LoadError>) -> Option<Binding> {
    let object: Object<BindingSpec> = read_object(doc, errors)?;
    let mut errors = Errors {
        source: &doc.source,
        errors,
    };
    let name = object.name();
    if name.is_none() {
        errors.push("metadata.name", "required");
    }
    let Some(spec) = object.spec else {
        errors.push("spec", "required");
        return None;
    };
    spec.validate(name.as_deref(), &mut errors)
}
