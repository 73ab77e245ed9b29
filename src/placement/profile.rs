//! The `PlacementProfile` document: parsing and validation.
use crate::gpu::GpuResources;
use crate::k8s::json::{list, object, unknown_fields};
use crate::k8s::{
    FieldError, LabelSelector, NodeSelectorRequirement as Requirement, NodeSelectorTerm as Term,
    Taint, Toleration,
};
use serde_json::Value;
use std::fmt;

/// `apiVersion` of placement profiles.
pub const API_VERSION: &str = "gpu-admission.io/v1alpha1";
/// `kind` of placement profiles.
pub const KIND: &str = "PlacementProfile";

/// One placement profile: what to add to GPU pods it matches.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    pub name: String,
    /// GPU resources (names and `prefix*` patterns) the profile serves.
    pub resources: GpuResources,
    /// Higher wins when several profiles match a pod; ties go to the name
    /// that sorts first.
    pub priority: i32,
    pub namespace_selector: Option<LabelSelector>,
    pub pod_selector: Option<LabelSelector>,
    pub tolerations: Vec<Toleration>,
    /// Required node-selector terms, ORed: a node must match one of them.
    pub required: Vec<Term>,
    pub preferred: Vec<PreferredTerm>,
    /// The taint a GPU node pool served by this profile must carry.
    pub node_pool_taint: Option<Taint>,
    /// What happens to a GPU-only node pool without that taint.
    pub node_pool_taint_policy: NodePoolTaintPolicy,
}

/// What `/mutate` does with a GPU-only node pool that lacks the profile's
/// `nodePoolTaint` (`spec.nodePoolTaintPolicy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NodePoolTaintPolicy {
    /// Add the taint by mutation, with a warning.
    #[default]
    Add,
    /// Leave the pool alone: the validating policies deny it.
    Require,
}

impl NodePoolTaintPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            NodePoolTaintPolicy::Add => "Add",
            NodePoolTaintPolicy::Require => "Require",
        }
    }
}

/// A preferred scheduling term: a weight (1-100) and a node-selector term.
#[derive(Clone, Debug, PartialEq)]
pub struct PreferredTerm {
    pub weight: i32,
    pub preference: Term,
}

/// A profile document that cannot be used, naming the field at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ProfileError {
    /// `metadata.name`, when it could be read.
    pub profile: Option<String>,
    /// The field at fault, e.g. `spec.tolerations[0].effect`; empty for the
    /// document as a whole.
    pub field: String,
    pub message: String,
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(name) = &self.profile {
            write!(f, "{KIND} {name}: ")?;
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

impl From<FieldError> for ProfileError {
    fn from(e: FieldError) -> ProfileError {
        ProfileError::new(e.field, e.message)
    }
}

impl ProfileError {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> ProfileError {
        ProfileError {
            profile: None,
            field: field.into(),
            message: message.into(),
        }
    }
}

const SPEC_FIELDS: [&str; 10] = [
    "resources",
    "priority",
    "namespaceSelector",
    "podSelector",
    "tolerations",
    "requiredNodeSelectorTerms",
    "preferredNodeSelectorTerms",
    "nodePoolTaint",
    "nodePoolTaintPolicy",
    "description",
];

impl Profile {
    /// Reads a `PlacementProfile` document (YAML already turned into JSON).
    /// Unknown spec fields are errors, so a typo never silently disables a rule.
    pub fn from_value(v: &Value) -> Result<Profile, ProfileError> {
        let name = v
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .map(str::to_string);
        parse_profile(v).map_err(|mut e| {
            e.profile = name.filter(|n| !n.is_empty());
            e
        })
    }

    /// Whether the profile serves any of `resources`.
    pub fn serves<'a>(&self, mut resources: impl Iterator<Item = &'a str>) -> bool {
        resources.any(|r| self.resources.matches(r))
    }
}

fn parse_profile(v: &Value) -> Result<Profile, ProfileError> {
    let doc = v
        .as_object()
        .ok_or_else(|| ProfileError::new("", "a PlacementProfile must be a mapping"))?;
    let api_version = doc.get("apiVersion").and_then(Value::as_str);
    if api_version != Some(API_VERSION) {
        return Err(ProfileError::new(
            "apiVersion",
            format!("must be {API_VERSION}"),
        ));
    }
    if doc.get("kind").and_then(Value::as_str) != Some(KIND) {
        return Err(ProfileError::new("kind", format!("must be {KIND}")));
    }
    unknown_fields(doc, "", &["apiVersion", "kind", "metadata", "spec"])?;
    let name = doc
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !is_dns_label_like(name) {
        return Err(ProfileError::new(
            "metadata.name",
            "required: lower-case letters, digits, '-' and '.'",
        ));
    }
    let spec =
        object(doc.get("spec"), "spec")?.ok_or_else(|| ProfileError::new("spec", "required"))?;
    unknown_fields(spec, "spec", &SPEC_FIELDS)?;
    if let Some(d) = spec.get("description") {
        if !d.is_string() {
            return Err(ProfileError::new("spec.description", "must be a string"));
        }
    }

    let resources = parse_resources(spec.get("resources"))?;
    let priority = match spec.get("priority") {
        None | Some(Value::Null) => 0,
        Some(p) => p
            .as_i64()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| ProfileError::new("spec.priority", "must be a 32-bit integer"))?,
    };
    let namespace_selector = object(spec.get("namespaceSelector"), "spec.namespaceSelector")?
        .map(|s| LabelSelector::parse_strict(s, "spec.namespaceSelector"))
        .transpose()?;
    let pod_selector = object(spec.get("podSelector"), "spec.podSelector")?
        .map(|s| LabelSelector::parse_strict(s, "spec.podSelector"))
        .transpose()?;

    let mut tolerations = Vec::new();
    for (i, t) in list(spec.get("tolerations"), "spec.tolerations")?
        .iter()
        .enumerate()
    {
        tolerations.push(Toleration::parse_strict(
            t,
            &format!("spec.tolerations[{i}]"),
        )?);
    }

    let mut required = Vec::new();
    for (i, t) in list(
        spec.get("requiredNodeSelectorTerms"),
        "spec.requiredNodeSelectorTerms",
    )?
    .iter()
    .enumerate()
    {
        required.push(parse_term(
            t,
            &format!("spec.requiredNodeSelectorTerms[{i}]"),
        )?);
    }

    let mut preferred = Vec::new();
    for (i, t) in list(
        spec.get("preferredNodeSelectorTerms"),
        "spec.preferredNodeSelectorTerms",
    )?
    .iter()
    .enumerate()
    {
        preferred.push(parse_preferred(
            t,
            &format!("spec.preferredNodeSelectorTerms[{i}]"),
        )?);
    }

    let node_pool_taint = object(spec.get("nodePoolTaint"), "spec.nodePoolTaint")?
        .map(|t| Taint::parse_strict(t, "spec.nodePoolTaint"))
        .transpose()?;
    let node_pool_taint_policy = match spec.get("nodePoolTaintPolicy") {
        None | Some(Value::Null) => NodePoolTaintPolicy::default(),
        Some(Value::String(s)) if s == "Add" => NodePoolTaintPolicy::Add,
        Some(Value::String(s)) if s == "Require" => NodePoolTaintPolicy::Require,
        Some(other) => {
            return Err(ProfileError::new(
                "spec.nodePoolTaintPolicy",
                format!("{other}: must be Add or Require"),
            ))
        }
    };
    if spec.contains_key("nodePoolTaintPolicy") && node_pool_taint.is_none() {
        return Err(ProfileError::new(
            "spec.nodePoolTaintPolicy",
            "needs spec.nodePoolTaint: the taint to add or require",
        ));
    }

    if tolerations.is_empty() && required.is_empty() && preferred.is_empty() {
        return Err(ProfileError::new(
            "spec",
            "sets none of tolerations, requiredNodeSelectorTerms, preferredNodeSelectorTerms",
        ));
    }
    if let Some(taint) = &node_pool_taint {
        // Kubernetes' ExtendedResourceToleration tolerates `<resource>:NoSchedule`
        // for every extended resource a pod asks for.
        let by_plugin = taint.effect == "NoSchedule" && resources.patterns().contains(&taint.key);
        if !by_plugin && !tolerations.iter().any(|t| t.tolerates(taint)) {
            return Err(ProfileError::new(
                "spec.nodePoolTaint",
                format!("{taint} is not tolerated by spec.tolerations: pods placed by this profile could not run on the pool"),
            ));
        }
    }

    Ok(Profile {
        name: name.to_string(),
        resources,
        priority,
        namespace_selector,
        pod_selector,
        tolerations,
        required,
        preferred,
        node_pool_taint,
        node_pool_taint_policy,
    })
}

fn parse_resources(v: Option<&Value>) -> Result<GpuResources, ProfileError> {
    let field = "spec.resources";
    let items = list(v, field)?;
    if items.is_empty() {
        return Err(ProfileError::new(
            field,
            "required: the GPU resources this profile serves, e.g. [nvidia.com/gpu]",
        ));
    }
    let mut resources = GpuResources::new(std::iter::empty::<&str>())
        .map_err(|e| ProfileError::new(field, e.to_string()))?;
    for (i, item) in items.iter().enumerate() {
        let f = format!("{field}[{i}]");
        let s = item
            .as_str()
            .ok_or_else(|| ProfileError::new(&f, "must be a string"))?;
        resources
            .insert(s)
            .map_err(|e| ProfileError::new(&f, e.to_string()))?;
    }
    Ok(resources)
}

fn parse_preferred(v: &Value, field: &str) -> Result<PreferredTerm, ProfileError> {
    let obj = object(Some(v), field)?.ok_or_else(|| ProfileError::new(field, "required"))?;
    unknown_fields(obj, field, &["weight", "preference"])?;
    let weight = obj
        .get("weight")
        .and_then(Value::as_i64)
        .filter(|w| (1..=100).contains(w))
        .ok_or_else(|| {
            ProfileError::new(
                format!("{field}.weight"),
                "required: an integer from 1 to 100",
            )
        })?;
    let preference = parse_term(
        obj.get("preference").unwrap_or(&Value::Null),
        &format!("{field}.preference"),
    )?;
    Ok(PreferredTerm {
        weight: weight as i32,
        preference,
    })
}

/// A node-selector term of a profile: `matchExpressions` only.
fn parse_term(v: &Value, field: &str) -> Result<Term, ProfileError> {
    let obj = object(Some(v), field)?
        .ok_or_else(|| ProfileError::new(field, "required: a node-selector term"))?;
    if obj.contains_key("matchFields") {
        return Err(ProfileError::new(
            format!("{field}.matchFields"),
            "not supported in profiles: node fields differ per node",
        ));
    }
    unknown_fields(obj, field, &["matchExpressions"])?;
    let exprs_field = format!("{field}.matchExpressions");
    let exprs = list(obj.get("matchExpressions"), &exprs_field)?;
    if exprs.is_empty() {
        return Err(ProfileError::new(
            exprs_field,
            "required: at least one requirement (an empty term matches no node)",
        ));
    }
    let mut requirements = Vec::new();
    for (i, e) in exprs.iter().enumerate() {
        requirements.push(Requirement::parse_strict(
            e,
            &format!("{exprs_field}[{i}]"),
        )?);
    }
    Ok(Term::new(requirements))
}

fn is_dns_label_like(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && !name.starts_with(['-', '.'])
        && !name.ends_with(['-', '.'])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(spec: Value) -> Value {
        json!({"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "gpu"}, "spec": spec})
    }

    fn minimal() -> Value {
        json!({
            "resources": ["nvidia.com/gpu"],
            "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
        })
    }

    fn error(spec: Value) -> ProfileError {
        Profile::from_value(&doc(spec)).unwrap_err()
    }

    #[test]
    fn reads_a_full_profile() {
        let p = Profile::from_value(&doc(json!({
            "resources": ["nvidia.com/gpu", "nvidia.com/mig-*"],
            "priority": 10,
            "namespaceSelector": {"matchLabels": {"team": "ml"}},
            "podSelector": {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
            "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
            "requiredNodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.azure.com/accelerator", "operator": "In", "values": ["nvidia"]}]},
                {"matchExpressions": [{"key": "karpenter.azure.com/sku-gpu-manufacturer", "operator": "In", "values": ["nvidia"]}]}
            ],
            "preferredNodeSelectorTerms": [
                {"weight": 50, "preference": {"matchExpressions": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}}
            ],
            "nodePoolTaint": {"key": "sku", "value": "gpu", "effect": "NoSchedule"},
            "nodePoolTaintPolicy": "Require"
        })))
        .unwrap();
        assert_eq!(p.name, "gpu");
        assert_eq!(p.node_pool_taint_policy, NodePoolTaintPolicy::Require);
        assert_eq!(p.priority, 10);
        assert!(p.resources.matches("nvidia.com/mig-1g.10gb"));
        assert_eq!(p.required.len(), 2);
        assert_eq!(p.preferred[0].weight, 50);
        assert_eq!(p.node_pool_taint.unwrap().to_string(), "sku=gpu:NoSchedule");
        assert!(p.namespace_selector.is_some() && p.pod_selector.is_some());
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (
                json!({"tolerations": minimal()["tolerations"]}),
                "spec.resources",
            ),
            (
                json!({"resources": ["gpu"], "tolerations": []}),
                "spec.resources[0]",
            ),
            (
                json!({"resources": ["nvidia.com/gpu"], "tolerations": [{"key": "sku", "value": "gpu", "effect": "Never"}]}),
                "spec.tolerations[0].effect",
            ),
            (
                json!({"resources": ["nvidia.com/gpu"], "tolerations": [{"operator": "Exists", "key": "sku", "value": "x"}]}),
                "spec.tolerations[0].value",
            ),
            (
                json!({"resources": ["nvidia.com/gpu"], "requiredNodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "In"}]}]}),
                "spec.requiredNodeSelectorTerms[0].matchExpressions[0].values",
            ),
            (
                json!({"resources": ["nvidia.com/gpu"], "requiredNodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Near", "values": ["x"]}]}]}),
                "spec.requiredNodeSelectorTerms[0].matchExpressions[0].operator",
            ),
            (
                json!({"resources": ["nvidia.com/gpu"], "requiredNodeSelectorTerms": [{"matchExpressions": []}]}),
                "spec.requiredNodeSelectorTerms[0].matchExpressions",
            ),
            (
                json!({"resources": ["nvidia.com/gpu"], "requiredNodeSelectorTerms": [{"matchFields": []}]}),
                "spec.requiredNodeSelectorTerms[0].matchFields",
            ),
            (
                json!({"resources": ["nvidia.com/gpu"], "preferredNodeSelectorTerms": [{"weight": 0, "preference": {}}]}),
                "spec.preferredNodeSelectorTerms[0].weight",
            ),
            (
                json!({"resources": ["nvidia.com/gpu"], "tolerance": []}),
                "spec.tolerance",
            ),
            (json!({"resources": ["nvidia.com/gpu"]}), "spec"),
            (
                json!({"resources": ["nvidia.com/gpu"], "tolerations": minimal()["tolerations"], "priority": "high"}),
                "spec.priority",
            ),
            (
                json!({"resources": ["nvidia.com/gpu"], "tolerations": minimal()["tolerations"], "podSelector": {"matchLabels": {"a": 1}}}),
                "spec.podSelector.matchLabels.a",
            ),
            (
                json!({"resources": ["nvidia.com/gpu"], "tolerations": minimal()["tolerations"], "nodePoolTaint": {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}}),
                "spec.nodePoolTaint",
            ),
            (
                json!({"resources": ["nvidia.com/gpu"], "tolerations": minimal()["tolerations"], "nodePoolTaint": {"key": "sku", "value": "gpu"}}),
                "spec.nodePoolTaint.effect",
            ),
            (
                json!({"resources": ["nvidia.com/gpu"], "tolerations": minimal()["tolerations"], "nodePoolTaint": {"key": "sku", "value": "gpu", "effect": "NoSchedule"}, "nodePoolTaintPolicy": "Deny"}),
                "spec.nodePoolTaintPolicy",
            ),
            (
                json!({"resources": ["nvidia.com/gpu"], "tolerations": minimal()["tolerations"], "nodePoolTaintPolicy": "Add"}),
                "spec.nodePoolTaintPolicy",
            ),
        ];
        for (spec, field) in cases {
            let e = error(spec.clone());
            assert_eq!(e.field, field, "{spec}: {e}");
            assert_eq!(e.profile.as_deref(), Some("gpu"));
            assert!(
                e.to_string()
                    .starts_with(&format!("PlacementProfile gpu: {field}: ")),
                "{e}"
            );
        }
    }

    #[test]
    fn checks_the_document_envelope() {
        let mut d = doc(minimal());
        d["apiVersion"] = json!("v1");
        assert_eq!(Profile::from_value(&d).unwrap_err().field, "apiVersion");
        let mut d = doc(minimal());
        d["kind"] = json!("ConfigMap");
        assert_eq!(Profile::from_value(&d).unwrap_err().field, "kind");
        let mut d = doc(minimal());
        d["metadata"]["name"] = json!("Bad_Name");
        assert_eq!(Profile::from_value(&d).unwrap_err().field, "metadata.name");
        let mut d = doc(minimal());
        d["status"] = json!({});
        assert_eq!(Profile::from_value(&d).unwrap_err().field, "status");
        assert_eq!(Profile::from_value(&json!([])).unwrap_err().field, "");
    }

    #[test]
    fn node_pool_taint_may_rely_on_extended_resource_toleration() {
        let p = Profile::from_value(&doc(json!({
            "resources": ["nvidia.com/gpu"],
            "tolerations": minimal()["tolerations"],
            "nodePoolTaint": {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
        })));
        assert!(p.is_ok(), "{p:?}");
    }

    #[test]
    fn node_pool_taint_policy_defaults_to_add() {
        let mut spec = minimal();
        spec["nodePoolTaint"] = json!({"key": "sku", "value": "gpu", "effect": "NoSchedule"});
        let p = Profile::from_value(&doc(spec.clone())).unwrap();
        assert_eq!(p.node_pool_taint_policy, NodePoolTaintPolicy::Add);
        spec["nodePoolTaintPolicy"] = json!("Add");
        let p = Profile::from_value(&doc(spec)).unwrap();
        assert_eq!(p.node_pool_taint_policy, NodePoolTaintPolicy::Add);
        assert_eq!(NodePoolTaintPolicy::Require.as_str(), "Require");
    }
}
