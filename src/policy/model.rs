//! The engine's types: policies with their compiled expressions, bindings,
//! params objects. Read from documents by [`super::documents`]; what the
//! engine works out from them once lives in [`super::plan`].
use super::matching::MatchResources;
use crate::cel::Compiled;
use crate::k8s::LabelSelector;
use kube_cel::cel::Value;
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub enum FailurePolicy {
    #[default]
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
    pub name: std::sync::Arc<str>,
    /// What the policy checks, in a sentence or two: the
    /// [`DESCRIPTION_ANNOTATION`] of the policy document.
    pub description: Option<String>,
    pub failure_policy: FailurePolicy,
    /// (apiVersion, kind) of params.
    pub param_kind: Option<(String, String)>,
    pub match_constraints: MatchResources,
    pub match_conditions: Vec<Named>,
    pub variables: Vec<Named>,
    pub validations: Vec<Validation>,
    pub audit_annotations: Vec<AuditAnnotation>,
    /// A MutatingAdmissionPolicy's mutations (none for a validating one).
    pub mutations: Vec<Mutation>,
    /// Some expression refers to `params`.
    pub uses_params: bool,
    /// Whether the policy is also run on the pod a controller's template
    /// describes (see [`Policy::judges_pod_templates`]); the annotation
    /// [`POD_TEMPLATES_ANNOTATION`] `"false"` turns it off.
    pub pod_templates: bool,
    /// How many expressions it has: their [`Expr::id`]s are `0..` this.
    pub expression_count: usize,
}

/// One expression of a policy: compiled, and numbered in the order the
/// policy's document was read (the plan keeps what it works out for the
/// expression under this number).
#[derive(Debug)]
pub struct Expr {
    pub id: usize,
    /// Where it is in the policy's document (`spec.validations[0].expression`).
    pub field: Box<str>,
    pub compiled: Compiled,
}

impl std::ops::Deref for Expr {
    type Target = Compiled;

    fn deref(&self) -> &Compiled {
        &self.compiled
    }
}

/// One `spec.mutations[]` item of a MutatingAdmissionPolicy.
#[derive(Debug)]
pub struct Mutation {
    pub patch_type: PatchType,
    pub expr: Expr,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// `jsonPatch.expression`: a list of `JSONPatch{op, path, from, value}`.
    JsonPatch,
    /// `applyConfiguration.expression`: an `Object{...}` merged as
    /// server-side apply merges.
    ApplyConfiguration,
}

impl PatchType {
    pub fn as_str(self) -> &'static str {
        match self {
            PatchType::JsonPatch => "JSONPatch",
            PatchType::ApplyConfiguration => "ApplyConfiguration",
        }
    }
}

/// The policy annotation that turns pod-template evaluation off (`"false"`).
pub const POD_TEMPLATES_ANNOTATION: &str = "gpu-admission.io/pod-templates";

impl Policy {
    /// Every expression of the policy: match conditions, variables, audit
    /// annotations, validations with their messages, mutations.
    pub fn expressions(&self) -> impl Iterator<Item = &Expr> {
        self.match_conditions
            .iter()
            .chain(&self.variables)
            .map(|n| &n.expr)
            .chain(self.audit_annotations.iter().map(|a| &a.expr))
            .chain(
                self.validations
                    .iter()
                    .flat_map(|v| std::iter::once(&v.expr).chain(&v.message_expr)),
            )
            .chain(self.mutations.iter().map(|m| &m.expr))
    }

    /// Whether the policy is run on the pod templates of controllers: it
    /// matches Pod CREATE and the annotation does not turn it off. It is
    /// still not run on the template of a kind its own rules name
    /// ([`MatchResources::names_resource`]): that kind it judges itself.
    pub fn judges_pod_templates(&self) -> bool {
        self.pod_templates && self.match_constraints.matches_pod_create()
    }
}

/// A named expression (match condition, variable).
#[derive(Debug)]
pub struct Named {
    pub name: String,
    pub expr: Expr,
}

/// An audit annotation of a policy.
#[derive(Debug)]
pub struct AuditAnnotation {
    /// Its `key` in the policy.
    pub key: String,
    /// The key the webhook returns it under
    /// ([`super::annotations::returned_key`]).
    pub returned_key: String,
    pub expr: Expr,
}

#[derive(Debug)]
pub struct Validation {
    pub expr: Expr,
    pub message: Option<String>,
    pub message_expr: Option<Expr>,
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

impl ParamRef {
    /// Whether this reference finds `param` of a policy whose paramKind is
    /// `kind`, for a request in `namespace`.
    pub(crate) fn finds(
        &self,
        kind: &(String, String),
        param: &Param,
        namespace: Option<&str>,
    ) -> bool {
        (param.api_version.as_str(), param.kind.as_str()) == (kind.0.as_str(), kind.1.as_str())
            && match &self.namespace {
                Some(ns) => param.namespace.as_deref() == Some(ns.as_str()),
                None => param.namespace.is_none() || param.namespace.as_deref() == namespace,
            }
            && match (&self.name, &self.selector) {
                (Some(n), _) => &param.name == n,
                (None, Some(sel)) => sel.matches(&param.labels),
                (None, None) => false,
            }
    }
}

/// A params object: a document of a kind some policy's `paramKind` names.
#[derive(Debug)]
pub(crate) struct Param {
    pub(crate) api_version: String,
    pub(crate) kind: String,
    pub(crate) name: String,
    pub(crate) namespace: Option<String>,
    pub(crate) labels: BTreeMap<String, String>,
    /// The whole object, converted to the interpreter's form once.
    pub(crate) value: Value,
}
