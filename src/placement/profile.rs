//! The `PlacementProfile` document: parsing and validation.
use crate::gpu::GpuResources;
use crate::k8s::doc::{from_value, Object};
use crate::k8s::json::Pointer as _;
use crate::k8s::labels::LabelSelectorDoc;
use crate::k8s::nodes::NodeSelectorRequirementDoc;
use crate::k8s::taints::{TaintDoc, TolerationDoc};
use crate::k8s::{FieldError, LabelSelector, NodeSelectorTerm as Term, Taint, Toleration};
use serde::de::IgnoredAny;
use serde::Deserialize;
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
    /// GPU resources (names and `prefix*` patterns) and DRA device classes
    /// the profile serves.
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
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

impl ProfileError {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> ProfileError {
        ProfileError {
            profile: None,
            field: field.into(),
            message: message.into(),
        }
    }
}

impl Profile {
    /// Reads a `PlacementProfile` document (YAML already turned into JSON).
    /// Unknown spec fields are errors, so a typo never silently disables a rule.
    pub fn from_value(v: &Value) -> Result<Profile, ProfileError> {
        let name = v
            .at("/metadata/name")
            .and_then(Value::as_str)
            .map(str::to_string);
        parse_profile(v).map_err(|mut e| {
            e.profile = name.filter(|n| !n.is_empty());
            e
        })
    }

    /// Whether the profile serves any of `resources` (resource names, or
    /// device classes of DRA claims).
    pub fn serves<'a>(&self, mut resources: impl Iterator<Item = &'a str>) -> bool {
        resources.any(|r| self.resources.matches(r) || self.resources.is_gpu_device_class(r))
    }
}

impl From<FieldError> for ProfileError {
    fn from(e: FieldError) -> ProfileError {
        ProfileError::new(e.field, e.message)
    }
}

/// `spec` of a `PlacementProfile`.
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct ProfileSpec {
    resources: Vec<String>,
    device_classes: Vec<String>,
    priority: i32,
    namespace_selector: Option<LabelSelectorDoc>,
    pod_selector: Option<LabelSelectorDoc>,
    tolerations: Vec<TolerationDoc>,
    required_node_selector_terms: Vec<TermDoc>,
    preferred_node_selector_terms: Vec<PreferredDoc>,
    node_pool_taint: Option<TaintDoc>,
    node_pool_taint_policy: Option<NodePoolTaintPolicy>,
    #[serde(rename = "description")]
    _description: String,
}

/// A `PreferredSchedulingTerm`.
#[derive(Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct PreferredDoc {
    weight: i64,
    preference: Option<TermDoc>,
}

/// A `NodeSelectorTerm`; `matchFields` is read only to be refused.
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct TermDoc {
    match_expressions: Vec<NodeSelectorRequirementDoc>,
    match_fields: Option<IgnoredAny>,
}

fn parse_profile(v: &Value) -> Result<Profile, ProfileError> {
    if !v.is_object() {
        return Err(ProfileError::new(
            "",
            "a PlacementProfile must be a mapping",
        ));
    }
    if v.get("apiVersion").and_then(Value::as_str) != Some(API_VERSION) {
        return Err(ProfileError::new(
            "apiVersion",
            format!("must be {API_VERSION}"),
        ));
    }
    if v.get("kind").and_then(Value::as_str) != Some(KIND) {
        return Err(ProfileError::new("kind", format!("must be {KIND}")));
    }
    let object: Object<ProfileSpec> = from_value(v)?;
    let name = object.metadata.name;
    if !is_dns_label_like(&name) {
        return Err(ProfileError::new(
            "metadata.name",
            "required: lower-case letters, digits, '-' and '.'",
        ));
    }
    let spec = object
        .spec
        .ok_or_else(|| ProfileError::new("spec", "required"))?;
    spec.validate(name)
}

/// Validates each item of a list, the field named with its index.
fn each<T, U>(
    items: Vec<T>,
    field: &str,
    validate: impl Fn(T, &str) -> Result<U, ProfileError>,
) -> Result<Vec<U>, ProfileError> {
    let items = items.into_iter().enumerate();
    items
        .map(|(i, t)| validate(t, &format!("{field}[{i}]")))
        .collect()
}

impl ProfileSpec {
    fn validate(self, name: String) -> Result<Profile, ProfileError> {
        if self.resources.is_empty() && self.device_classes.is_empty() {
            return Err(ProfileError::new(
                "spec.resources",
                "required: the GPU resources this profile serves, e.g. [nvidia.com/gpu] (or spec.deviceClasses)",
            ));
        }
        let mut resources = GpuResources::new(std::iter::empty::<&str>())
            .map_err(|e| ProfileError::new("spec.resources", e.to_string()))?;
        for (i, item) in self.resources.iter().enumerate() {
            (resources.insert(item))
                .map_err(|e| ProfileError::new(format!("spec.resources[{i}]"), e.to_string()))?;
        }
        for (i, class) in self.device_classes.iter().enumerate() {
            (resources.insert_device_class(class)).map_err(|e| {
                ProfileError::new(format!("spec.deviceClasses[{i}]"), e.to_string())
            })?;
        }
        let selector = |s: Option<LabelSelectorDoc>, field: &str| s.map(|s| s.validate(field));
        let namespace_selector = selector(self.namespace_selector, "spec.namespaceSelector");
        let namespace_selector = namespace_selector.transpose()?;
        let pod_selector = selector(self.pod_selector, "spec.podSelector").transpose()?;
        let tolerations = each(
            self.tolerations,
            "spec.tolerations",
            |t: TolerationDoc, f: &str| Ok(t.validate(f)?),
        )?;
        let required = self.required_node_selector_terms;
        let required = each(
            required,
            "spec.requiredNodeSelectorTerms",
            TermDoc::validate,
        )?;
        let preferred = self.preferred_node_selector_terms;
        let preferred = each(
            preferred,
            "spec.preferredNodeSelectorTerms",
            PreferredDoc::validate,
        )?;
        let node_pool_taint = (self.node_pool_taint)
            .map(|t| t.validate("spec.nodePoolTaint").map_err(ProfileError::from))
            .transpose()?;
        if self.node_pool_taint_policy.is_some() && node_pool_taint.is_none() {
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
            let by_plugin =
                taint.effect == "NoSchedule" && resources.patterns().contains(&taint.key);
            if !by_plugin && !tolerations.iter().any(|t| t.tolerates(taint)) {
                return Err(ProfileError::new(
                    "spec.nodePoolTaint",
                    format!("{taint} is not tolerated by spec.tolerations: pods placed by this profile could not run on the pool"),
                ));
            }
        }
        Ok(Profile {
            name,
            resources,
            priority: self.priority,
            namespace_selector,
            pod_selector,
            tolerations,
            required,
            preferred,
            node_pool_taint,
            node_pool_taint_policy: self.node_pool_taint_policy.unwrap_or_default(),
        })
    }
}

impl PreferredDoc {
    fn validate(self, field: &str) -> Result<PreferredTerm, ProfileError> {
        let error =
            |name: &str, message: &str| ProfileError::new(format!("{field}.{name}"), message);
        if !(1..=100).contains(&self.weight) {
            return Err(error("weight", "required: an integer from 1 to 100"));
        }
        let preference = self
            .preference
            .ok_or_else(|| error("preference", "required: a node-selector term"))?;
        Ok(PreferredTerm {
            weight: self.weight as i32,
            preference: preference.validate(&format!("{field}.preference"))?,
        })
    }
}

impl TermDoc {
    /// A node-selector term of a profile: `matchExpressions` only.
    fn validate(self, field: &str) -> Result<Term, ProfileError> {
        if self.match_fields.is_some() {
            return Err(ProfileError::new(
                format!("{field}.matchFields"),
                "not supported in profiles: node fields differ per node",
            ));
        }
        let exprs_field = format!("{field}.matchExpressions");
        if self.match_expressions.is_empty() {
            return Err(ProfileError::new(
                exprs_field,
                "required: at least one requirement (an empty term matches no node)",
            ));
        }
        let requirements = each(
            self.match_expressions,
            &exprs_field,
            |r: NodeSelectorRequirementDoc, f: &str| Ok(r.validate(f)?),
        )?;
        Ok(Term::new(requirements))
    }
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
    fn device_classes_are_served_like_resources() {
        let p = Profile::from_value(&doc(json!({
            "deviceClasses": ["gpu.nvidia.com"],
            "tolerations": minimal()["tolerations"]
        })))
        .unwrap();
        assert!(p.serves(["gpu.nvidia.com"].into_iter()));
        assert!(!p.serves(["mig.nvidia.com", "nvidia.com/gpu"].into_iter()));
        let e = error(
            json!({"resources": ["nvidia.com/gpu"], "deviceClasses": ["nvidia.com/gpu"],
            "tolerations": minimal()["tolerations"]}),
        );
        assert_eq!(e.field, "spec.deviceClasses[0]");
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            json!(["spec.resources", {"tolerations": minimal()["tolerations"]}]),
            json!(["spec.resources[0]", {"resources": ["gpu"], "tolerations": []}]),
            json!(["spec.tolerations[0].effect", {"resources": ["nvidia.com/gpu"], "tolerations": [{"key": "sku", "value": "gpu", "effect": "Never"}]}]),
            json!(["spec.tolerations[0].value", {"resources": ["nvidia.com/gpu"], "tolerations": [{"operator": "Exists", "key": "sku", "value": "x"}]}]),
            json!(["spec.requiredNodeSelectorTerms[0].matchExpressions[0].values", {"resources": ["nvidia.com/gpu"], "requiredNodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "In"}]}]}]),
            json!(["spec.requiredNodeSelectorTerms[0].matchExpressions[0].operator", {"resources": ["nvidia.com/gpu"], "requiredNodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Near", "values": ["x"]}]}]}]),
            json!(["spec.requiredNodeSelectorTerms[0].matchExpressions", {"resources": ["nvidia.com/gpu"], "requiredNodeSelectorTerms": [{"matchExpressions": []}]}]),
            json!(["spec.requiredNodeSelectorTerms[0].matchFields", {"resources": ["nvidia.com/gpu"], "requiredNodeSelectorTerms": [{"matchFields": []}]}]),
            json!(["spec.preferredNodeSelectorTerms[0].weight", {"resources": ["nvidia.com/gpu"], "preferredNodeSelectorTerms": [{"weight": 0, "preference": {}}]}]),
            json!(["spec.tolerance", {"resources": ["nvidia.com/gpu"], "tolerance": []}]),
            json!(["spec", {"resources": ["nvidia.com/gpu"]}]),
            json!(["spec.priority", {"resources": ["nvidia.com/gpu"], "tolerations": minimal()["tolerations"], "priority": "high"}]),
            json!(["spec.podSelector.matchLabels.a", {"resources": ["nvidia.com/gpu"], "tolerations": minimal()["tolerations"], "podSelector": {"matchLabels": {"a": 1}}}]),
            json!(["spec.nodePoolTaint", {"resources": ["nvidia.com/gpu"], "tolerations": minimal()["tolerations"], "nodePoolTaint": {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}}]),
            json!(["spec.nodePoolTaint.effect", {"resources": ["nvidia.com/gpu"], "tolerations": minimal()["tolerations"], "nodePoolTaint": {"key": "sku", "value": "gpu"}}]),
            json!(["spec.nodePoolTaintPolicy", {"resources": ["nvidia.com/gpu"], "tolerations": minimal()["tolerations"], "nodePoolTaint": {"key": "sku", "value": "gpu", "effect": "NoSchedule"}, "nodePoolTaintPolicy": "Deny"}]),
            json!(["spec.nodePoolTaintPolicy", {"resources": ["nvidia.com/gpu"], "tolerations": minimal()["tolerations"], "nodePoolTaintPolicy": "Add"}]),
        ];
        for case in cases {
            let (field, spec) = (case[0].as_str().unwrap(), &case[1]);
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
        for (pointer, value, field) in [
            ("/apiVersion", json!("v1"), "apiVersion"),
            ("/kind", json!("ConfigMap"), "kind"),
            ("/metadata/name", json!("Bad_Name"), "metadata.name"),
        ] {
            let mut d = doc(minimal());
            *d.pointer_mut(pointer).unwrap() = value;
            assert_eq!(Profile::from_value(&d).unwrap_err().field, field);
        }
        let mut d = doc(minimal());
        d["specs"] = json!({});
        assert_eq!(Profile::from_value(&d).unwrap_err().field, "specs");
        assert_eq!(Profile::from_value(&json!([])).unwrap_err().field, "");
    }

    #[test]
    fn a_server_export_loads() {
        let mut d = doc(minimal());
        d["metadata"] = json!({
            "name": "gpu",
            "uid": "6f1c2a9e-3b7d-4c1e-9a55-0d2f8e4b7c13",
            "resourceVersion": "4711",
            "generation": 2,
            "creationTimestamp": "2026-11-29T14:00:00Z",
            "labels": {"team": "ml"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
            "managedFields": [{"manager": "kubectl", "operation": "Apply"}]
        });
        d["status"] = json!({"observedGeneration": 2});
        assert_eq!(Profile::from_value(&d).unwrap().name, "gpu");
    }

    #[test]
    fn unknown_fields_are_named_at_any_depth() {
        let mut spec = minimal();
        spec["tolerations"][0]["effects"] = json!("NoSchedule");
        let e = error(spec);
        assert_eq!(e.field, "spec.tolerations[0].effects");
        assert!(e.message.starts_with("unknown field"), "{e}");
        let mut spec = minimal();
        spec["podSelector"] = json!({"matchExpression": []});
        assert_eq!(error(spec).field, "spec.podSelector.matchExpression");
        let mut spec = minimal();
        spec["requiredNodeSelectorTerms"] =
            json!([{"matchExpressions": [{"key": "a", "operator": "In", "value": ["x"]}]}]);
        assert_eq!(
            error(spec).field,
            "spec.requiredNodeSelectorTerms[0].matchExpressions[0].value"
        );
    }

    #[test]
    fn label_selectors_match_like_kubernetes() {
        let labels = std::collections::BTreeMap::from([
            ("team".to_string(), "ml".to_string()),
            ("tier".to_string(), "gold".to_string()),
        ]);
        let sel = |v: Value| {
            let mut spec = minimal();
            spec["podSelector"] = v;
            Profile::from_value(&doc(spec)).map(|p| p.pod_selector.unwrap())
        };
        let matches = |v: Value| sel(v).unwrap().matches(&labels);
        assert!(matches(json!({})));
        assert!(matches(json!({"matchLabels": {"team": "ml"}})));
        assert!(!matches(json!({"matchLabels": {"team": "web"}})));
        for expression in [
            json!({"key": "tier", "operator": "In", "values": ["gold", "silver"]}),
            json!({"key": "env", "operator": "NotIn", "values": ["prod"]}),
            json!({"key": "team", "operator": "Exists"}),
        ] {
            assert!(
                matches(json!({"matchExpressions": [expression]})),
                "{expression}"
            );
        }
        let absent = json!({"key": "team", "operator": "DoesNotExist"});
        assert!(!matches(json!({"matchExpressions": [absent]})));
        let e = sel(json!({"matchExpressions": [{"key": "n", "operator": "Gt", "values": ["1"]}]}))
            .unwrap_err();
        assert_eq!(e.field, "spec.podSelector.matchExpressions[0].operator");
        assert!(e.message.contains("not Gt"), "{e}");
        let e = sel(json!({"matchExpressions": [{"key": "n", "operator": "In"}]})).unwrap_err();
        assert_eq!(e.field, "spec.podSelector.matchExpressions[0].values");
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
