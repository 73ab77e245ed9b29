//! ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding documents,
//! read from JSON with every error naming its field.
use super::load::{Document, LoadError, Source};
use super::matching::{MatchPolicy, MatchResources, Rule, Scope};
use crate::cel::{self, Compiled, Env};
use crate::k8s::{LabelRequirement as Requirement, LabelSelector, SelectorOp};
use serde_json::Value;
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// Reads fields of one document and records errors against it.
pub struct Reader<'a> {
    pub source: &'a Source,
    pub errors: &'a mut Vec<LoadError>,
}

impl Reader<'_> {
    fn err(&mut self, field: &str, message: impl Into<String>) {
        self.errors.push(LoadError::at(self.source, field, message));
    }

    fn str<'v>(&mut self, v: &'v Value, key: &str, field: &str) -> Option<&'v str> {
        match v.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(_) => {
                self.err(&join(field, key), "must be a string");
                None
            }
        }
    }

    fn required_str(&mut self, v: &Value, key: &str, field: &str) -> Option<String> {
        let s = self.str(v, key, field).map(str::to_string);
        if s.as_deref().is_none_or(str::is_empty) {
            if v.get(key).is_none_or(Value::is_null) {
                self.err(&join(field, key), "required");
            }
            return None;
        }
        s
    }

    fn list<'v>(&mut self, v: &'v Value, key: &str, field: &str) -> &'v [Value] {
        match v.get(key) {
            None | Some(Value::Null) => &[],
            Some(Value::Array(a)) => a,
            Some(_) => {
                self.err(&join(field, key), "must be a list");
                &[]
            }
        }
    }

    fn strings(&mut self, v: &Value, key: &str, field: &str) -> Vec<String> {
        let f = join(field, key);
        let mut out = Vec::new();
        for (i, item) in self.list(v, key, field).iter().enumerate() {
            match item.as_str() {
                Some(s) => out.push(s.to_string()),
                None => self.err(&format!("{f}[{i}]"), "must be a string"),
            }
        }
        out
    }

    fn expr(&mut self, env: &Env, v: &Value, key: &str, field: &str) -> Option<Compiled> {
        let f = join(field, key);
        let source = self.required_str(v, key, field)?;
        match cel::compile(env, &source) {
            Ok(c) => Some(c),
            Err(e) => {
                self.errors.push(LoadError {
                    source: Some(self.source.clone()),
                    field: Some(f),
                    line: e.line,
                    column: e.column,
                    message: e.message,
                });
                None
            }
        }
    }

    pub fn selector(&mut self, v: Option<&Value>, field: &str) -> LabelSelector {
        let Some(v) = v.filter(|v| !v.is_null()) else {
            return LabelSelector::default();
        };
        let mut sel = LabelSelector::default();
        if let Some(labels) = v.get("matchLabels").filter(|l| !l.is_null()) {
            match labels.as_object() {
                Some(m) => {
                    for (k, val) in m {
                        match val.as_str() {
                            Some(s) => {
                                sel.match_labels.insert(k.clone(), s.to_string());
                            }
                            None => {
                                self.err(&format!("{field}.matchLabels.{k}"), "must be a string")
                            }
                        }
                    }
                }
                None => self.err(&format!("{field}.matchLabels"), "must be a map"),
            }
        }
        let exprs = self.list(v, "matchExpressions", field);
        for (i, e) in exprs.iter().enumerate() {
            let f = format!("{field}.matchExpressions[{i}]");
            let key = self.required_str(e, "key", &f).unwrap_or_default();
            let op = match self.str(e, "operator", &f) {
                Some("In") => SelectorOp::In,
                Some("NotIn") => SelectorOp::NotIn,
                Some("Exists") => SelectorOp::Exists,
                Some("DoesNotExist") => SelectorOp::DoesNotExist,
                other => {
                    self.err(
                        &format!("{f}.operator"),
                        format!(
                            "must be In, NotIn, Exists or DoesNotExist, not {}",
                            other.unwrap_or("nothing")
                        ),
                    );
                    continue;
                }
            };
            let values = self.strings(e, "values", &f);
            sel.match_expressions.push(Requirement {
                key,
                operator: op,
                values,
            });
        }
        sel
    }

    fn rules(&mut self, v: &Value, key: &str, field: &str) -> Vec<Rule> {
        let f = join(field, key);
        let mut out = Vec::new();
        for (i, r) in self.list(v, key, field).iter().enumerate() {
            let rf = format!("{f}[{i}]");
            let scope = match self.str(r, "scope", &rf) {
                None | Some("*") => Scope::All,
                Some("Cluster") => Scope::Cluster,
                Some("Namespaced") => Scope::Namespaced,
                Some(other) => {
                    self.err(
                        &format!("{rf}.scope"),
                        format!("must be *, Cluster or Namespaced, not {other}"),
                    );
                    Scope::All
                }
            };
            let operations = self.strings(r, "operations", &rf);
            for (j, op) in operations.iter().enumerate() {
                if !matches!(
                    op.as_str(),
                    "*" | "CREATE" | "UPDATE" | "DELETE" | "CONNECT"
                ) {
                    self.err(
                        &format!("{rf}.operations[{j}]"),
                        format!("must be *, CREATE, UPDATE, DELETE or CONNECT, not {op}"),
                    );
                }
            }
            out.push(Rule {
                operations,
                api_groups: self.strings(r, "apiGroups", &rf),
                api_versions: self.strings(r, "apiVersions", &rf),
                resources: self.strings(r, "resources", &rf),
                resource_names: self.strings(r, "resourceNames", &rf),
                scope,
            });
        }
        out
    }

    pub fn match_resources(&mut self, v: &Value, field: &str) -> MatchResources {
        let match_policy = match self.str(v, "matchPolicy", field) {
            None | Some("Equivalent") => MatchPolicy::Equivalent,
            Some("Exact") => MatchPolicy::Exact,
            Some(other) => {
                self.err(
                    &join(field, "matchPolicy"),
                    format!("must be Equivalent or Exact, not {other}"),
                );
                MatchPolicy::Equivalent
            }
        };
        MatchResources {
            namespace_selector: self.selector(
                v.get("namespaceSelector"),
                &join(field, "namespaceSelector"),
            ),
            object_selector: self.selector(v.get("objectSelector"), &join(field, "objectSelector")),
            resource_rules: self.rules(v, "resourceRules", field),
            exclude_resource_rules: self.rules(v, "excludeResourceRules", field),
            match_policy,
        }
    }
}

fn join(field: &str, key: &str) -> String {
    if field.is_empty() {
        key.to_string()
    } else {
        format!("{field}.{key}")
    }
}

fn name_of(doc: &Document) -> Option<String> {
    doc.value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
}

const REASONS: &[&str] = &[
    "Unauthorized",
    "Forbidden",
    "Invalid",
    "RequestEntityTooLarge",
];

/// Reads a ValidatingAdmissionPolicy.
pub fn read_policy(env: &Env, doc: &Document, errors: &mut Vec<LoadError>) -> Option<Policy> {
    let before = errors.len();
    let mut r = Reader {
        source: &doc.source,
        errors,
    };
    let name = name_of(doc);
    if name.is_none() {
        r.err("metadata.name", "required");
    }
    let Some(spec) = doc.value.get("spec").filter(|s| s.is_object()) else {
        r.err("spec", "required");
        return None;
    };
    let failure_policy = match r.str(spec, "failurePolicy", "spec") {
        None | Some("Fail") => FailurePolicy::Fail,
        Some("Ignore") => FailurePolicy::Ignore,
        Some(other) => {
            r.err(
                "spec.failurePolicy",
                format!("must be Fail or Ignore, not {other}"),
            );
            FailurePolicy::Fail
        }
    };
    let param_kind = match spec.get("paramKind").filter(|p| !p.is_null()) {
        None => None,
        Some(pk) => {
            let api = r.required_str(pk, "apiVersion", "spec.paramKind");
            let kind = r.required_str(pk, "kind", "spec.paramKind");
            api.zip(kind)
        }
    };
    let match_constraints = match spec.get("matchConstraints").filter(|m| !m.is_null()) {
        Some(m) => {
            let mc = r.match_resources(m, "spec.matchConstraints");
            if mc.resource_rules.is_empty() {
                r.err("spec.matchConstraints.resourceRules", "required");
            }
            mc
        }
        None => {
            r.err("spec.matchConstraints", "required");
            MatchResources::default()
        }
    };
    let named = |r: &mut Reader, key: &str, name_key: &str, expr_key: &str| {
        let mut out = Vec::new();
        for (i, item) in r.list(spec, key, "spec").iter().enumerate() {
            let f = format!("spec.{key}[{i}]");
            let name = r.required_str(item, name_key, &f).unwrap_or_default();
            if let Some(expr) = r.expr(env, item, expr_key, &f) {
                out.push(Named { name, expr });
            }
        }
        out
    };
    let match_conditions = named(&mut r, "matchConditions", "name", "expression");
    let variables = named(&mut r, "variables", "name", "expression");
    let audit_annotations = named(&mut r, "auditAnnotations", "key", "valueExpression");
    let mut validations = Vec::new();
    for (i, item) in r.list(spec, "validations", "spec").iter().enumerate() {
        let f = format!("spec.validations[{i}]");
        let expr = r.expr(env, item, "expression", &f);
        let message = r.str(item, "message", &f).map(str::to_string);
        if message.as_deref().is_some_and(|m| m.contains('\n')) {
            r.err(&format!("{f}.message"), "must be a single line");
        }
        let message_expr = match item.get("messageExpression") {
            None | Some(Value::Null) => None,
            Some(_) => r.expr(env, item, "messageExpression", &f),
        };
        let reason = match r.str(item, "reason", &f) {
            None => "Invalid".to_string(),
            Some(x) if REASONS.contains(&x) => x.to_string(),
            Some(x) => {
                r.err(
                    &format!("{f}.reason"),
                    format!("must be one of {}, not {x}", REASONS.join(", ")),
                );
                "Invalid".to_string()
            }
        };
        if let Some(expr) = expr {
            validations.push(Validation {
                expr,
                message,
                message_expr,
                reason,
            });
        }
    }
    if r.list(spec, "validations", "spec").is_empty()
        && r.list(spec, "auditAnnotations", "spec").is_empty()
    {
        r.err(
            "spec.validations",
            "a policy needs validations or auditAnnotations",
        );
    }
    check_variables(
        &mut r,
        &variables,
        &match_conditions,
        &validations,
        &audit_annotations,
    );
    if errors.len() > before {
        return None;
    }
    Some(Policy {
        name: name?,
        failure_policy,
        param_kind,
        match_constraints,
        match_conditions,
        variables,
        validations,
        audit_annotations,
    })
}

/// Every `variables.x` must name a variable; a variable may only use the
/// ones defined before it.
fn check_variables(
    r: &mut Reader,
    variables: &[Named],
    conditions: &[Named],
    validations: &[Validation],
    annotations: &[Named],
) {
    let mut seen = std::collections::BTreeSet::new();
    for (i, v) in variables.iter().enumerate() {
        if !seen.insert(v.name.as_str()) {
            r.err(
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
                r.err(
                    &format!("spec.variables[{i}].expression"),
                    format!("variables.{used} is not defined before this variable"),
                );
            }
        }
    }
    let mut check = |field: String, expr: &Compiled| {
        for used in &expr.policy_variables {
            if !index.contains_key(used.as_str()) {
                r.err(
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

/// Reads a ValidatingAdmissionPolicyBinding.
pub fn read_binding(doc: &Document, errors: &mut Vec<LoadError>) -> Option<Binding> {
    let before = errors.len();
    let mut r = Reader {
        source: &doc.source,
        errors,
    };
    let name = name_of(doc);
    if name.is_none() {
        r.err("metadata.name", "required");
    }
    let Some(spec) = doc.value.get("spec").filter(|s| s.is_object()) else {
        r.err("spec", "required");
        return None;
    };
    let policy_name = r.required_str(spec, "policyName", "spec");
    let mut actions = Vec::new();
    for (i, a) in r
        .strings(spec, "validationActions", "spec")
        .iter()
        .enumerate()
    {
        match a.as_str() {
            "Deny" => actions.push(Action::Deny),
            "Warn" => actions.push(Action::Warn),
            "Audit" => actions.push(Action::Audit),
            other => r.err(
                &format!("spec.validationActions[{i}]"),
                format!("must be Deny, Warn or Audit, not {other}"),
            ),
        }
    }
    if actions.is_empty() {
        r.err(
            "spec.validationActions",
            "required: Deny, Warn and/or Audit",
        );
    }
    if actions.contains(&Action::Deny) && actions.contains(&Action::Warn) {
        r.err(
            "spec.validationActions",
            "Deny and Warn may not be used together (Deny already tells the user)",
        );
    }
    let param_ref = match spec.get("paramRef").filter(|p| !p.is_null()) {
        None => None,
        Some(p) => {
            let name = r.str(p, "name", "spec.paramRef").map(str::to_string);
            let namespace = r.str(p, "namespace", "spec.paramRef").map(str::to_string);
            let selector = p
                .get("selector")
                .filter(|s| !s.is_null())
                .map(|s| r.selector(Some(s), "spec.paramRef.selector"));
            if name.is_some() == selector.is_some() {
                r.err(
                    "spec.paramRef",
                    "exactly one of name or selector is required",
                );
            }
            let deny_when_missing = match r.str(p, "parameterNotFoundAction", "spec.paramRef") {
                Some("Deny") => true,
                Some("Allow") => false,
                Some(other) => {
                    r.err(
                        "spec.paramRef.parameterNotFoundAction",
                        format!("must be Allow or Deny, not {other}"),
                    );
                    true
                }
                None => {
                    r.err(
                        "spec.paramRef.parameterNotFoundAction",
                        "required: Allow or Deny",
                    );
                    true
                }
            };
            Some(ParamRef {
                name,
                namespace,
                selector,
                deny_when_missing,
            })
        }
    };
    let match_resources = spec
        .get("matchResources")
        .filter(|m| !m.is_null())
        .map(|m| r.match_resources(m, "spec.matchResources"));
    if errors.len() > before {
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
