//! Dynamic Resource Allocation (`resource.k8s.io`): the ResourceClaims a
//! pod names in `spec.resourceClaims`, and where their specs come from (a
//! lookup, like the Namespace one: static for offline commands, a watched
//! cache in a cluster).
use crate::k8s::json::Pointer as _;
use crate::k8s::json::{items, str_at};
use serde_json::Value;
use std::collections::BTreeMap;

/// The API group of ResourceClaims, ResourceClaimTemplates and DeviceClasses.
pub const RESOURCE_GROUP: &str = "resource.k8s.io";

/// Looks up the ResourceClaims and ResourceClaimTemplates pods name.
pub trait ClaimLookup: Send + Sync {
    /// ResourceClaim `name` in `namespace`, as JSON, if known.
    fn resource_claim(&self, namespace: &str, name: &str) -> Option<Value>;
    /// ResourceClaimTemplate `name` in `namespace`, as JSON, if known.
    fn resource_claim_template(&self, namespace: &str, name: &str) -> Option<Value>;
}

/// The two kinds a pod's claim comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimKind {
    ResourceClaim,
    ResourceClaimTemplate,
}

impl ClaimKind {
    /// The kind of `object`, if it is a ResourceClaim or ResourceClaimTemplate
    /// of `resource.k8s.io` (any version).
    pub fn of(object: &Value) -> Option<ClaimKind> {
        let group = str_at(object, "/apiVersion").split('/').next()?;
        if group != RESOURCE_GROUP {
            return None;
        }
        match str_at(object, "/kind") {
            "ResourceClaim" => Some(ClaimKind::ResourceClaim),
            "ResourceClaimTemplate" => Some(ClaimKind::ResourceClaimTemplate),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ClaimKind::ResourceClaim => "ResourceClaim",
            ClaimKind::ResourceClaimTemplate => "ResourceClaimTemplate",
        }
    }

    /// Where the ResourceClaimSpec sits in an object of this kind.
    fn spec_pointer(self) -> &'static str {
        match self {
            ClaimKind::ResourceClaim => "/spec",
            ClaimKind::ResourceClaimTemplate => "/spec/spec",
        }
    }
}

/// The ResourceClaimSpec (`devices.requests`, ...) of a ResourceClaim
/// (`spec`) or ResourceClaimTemplate (`spec.spec`).
pub fn claim_spec(object: &Value) -> Option<&Value> {
    let kind = ClaimKind::of(object)?;
    object.at(kind.spec_pointer()).filter(|s| s.is_object())
}

/// One entry of a pod's `spec.resourceClaims`, with the claim spec it
/// resolves to.
#[derive(Clone, Debug, PartialEq)]
pub struct PodClaim {
    /// The name containers use in `resources.claims`.
    pub name: String,
    /// What the entry names: a ResourceClaim or a ResourceClaimTemplate,
    /// and its name. `None` when it names neither.
    pub source: Option<(ClaimKind, String)>,
    /// The ResourceClaimSpec of the named object, when the lookup knows it.
    pub spec: Option<Value>,
}

/// The claims of a pod spec (a Pod's or a template's), each looked up in
/// `namespace`, in spec order.
pub fn pod_claims(pod_spec: &Value, namespace: &str, lookup: &dyn ClaimLookup) -> Vec<PodClaim> {
    items(pod_spec.get("resourceClaims"))
        .filter(|c| c.is_object())
        .map(|c| {
            let name = str_at(c, "/name").to_string();
            let claim = str_at(c, "/resourceClaimName");
            let template = str_at(c, "/resourceClaimTemplateName");
            let (source, found) = if !claim.is_empty() {
                let found = lookup.resource_claim(namespace, claim);
                (Some((ClaimKind::ResourceClaim, claim.to_string())), found)
            } else if !template.is_empty() {
                let found = lookup.resource_claim_template(namespace, template);
                let source = (ClaimKind::ResourceClaimTemplate, template.to_string());
                (Some(source), found)
            } else {
                (None, None)
            };
            let spec = found.as_ref().and_then(claim_spec).cloned();
            PodClaim { name, source, spec }
        })
        .collect()
}

/// The claims (and requests within them) a container uses through
/// `resources.claims`: claim name and, when it names one, the request.
pub fn container_claims(container: &Value) -> Vec<(String, Option<String>)> {
    items(container.at("/resources/claims"))
        .filter(|c| c.is_object())
        .map(|c| {
            let request = str_at(c, "/request");
            let request = (!request.is_empty()).then(|| request.to_string());
            (str_at(c, "/name").to_string(), request)
        })
        .collect()
}

/// A lookup that knows no claim.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoClaims;

impl ClaimLookup for NoClaims {
    fn resource_claim(&self, _namespace: &str, _name: &str) -> Option<Value> {
        None
    }

    fn resource_claim_template(&self, _namespace: &str, _name: &str) -> Option<Value> {
        None
    }
}

/// Claims known up front: the ResourceClaim and ResourceClaimTemplate
/// documents of a manifest or a policy test file.
#[derive(Clone, Debug, Default)]
pub struct StaticClaims {
    /// (kind, namespace, name) -> object.
    objects: BTreeMap<(&'static str, String, String), Value>,
}

impl StaticClaims {
    pub fn new() -> StaticClaims {
        StaticClaims::default()
    }

    /// Adds `object` if it is a ResourceClaim or ResourceClaimTemplate; one
    /// without a namespace is in `default_namespace`. Returns whether it was.
    pub fn insert(&mut self, object: &Value, default_namespace: &str) -> bool {
        let Some(kind) = ClaimKind::of(object) else {
            return false;
        };
        let namespace = match str_at(object, "/metadata/namespace") {
            "" => default_namespace,
            ns => ns,
        };
        let name = str_at(object, "/metadata/name").to_string();
        let key = (kind.as_str(), namespace.to_string(), name);
        self.objects.insert(key, object.clone());
        true
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    fn get(&self, kind: ClaimKind, namespace: &str, name: &str) -> Option<Value> {
        let key = (kind.as_str(), namespace.to_string(), name.to_string());
        self.objects.get(&key).cloned()
    }
}

impl ClaimLookup for StaticClaims {
    fn resource_claim(&self, namespace: &str, name: &str) -> Option<Value> {
        self.get(ClaimKind::ResourceClaim, namespace, name)
    }

    fn resource_claim_template(&self, namespace: &str, name: &str) -> Option<Value> {
        self.get(ClaimKind::ResourceClaimTemplate, namespace, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(namespace: Option<&str>) -> Value {
        let mut t = json!({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu"},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
            ]}}}
        });
        if let Some(ns) = namespace {
            t["metadata"]["namespace"] = json!(ns);
        }
        t
    }

    #[test]
    fn static_claims_keep_claims_and_templates_by_namespace() {
        let mut claims = StaticClaims::new();
        assert!(claims.insert(&template(None), "ml"));
        assert!(claims.insert(
            &json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": "shared", "namespace": "team"}, "spec": {"devices": {}}}),
            "ml"
        ));
        assert!(!claims.insert(
            &json!({"apiVersion": "v1", "kind": "ResourceClaim", "metadata": {"name": "x"}}),
            "ml"
        ));
        assert!(claims.resource_claim_template("ml", "one-gpu").is_some());
        assert!(claims.resource_claim_template("team", "one-gpu").is_none());
        assert!(claims.resource_claim("ml", "one-gpu").is_none());
        assert!(claims.resource_claim("team", "shared").is_some());
    }

    #[test]
    fn pod_claims_resolve_in_the_pod_namespace() {
        let mut lookup = StaticClaims::new();
        lookup.insert(&template(Some("ml")), "default");
        let spec = json!({
            "resourceClaims": [
                {"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
                {"name": "shared", "resourceClaimName": "missing"},
                {"name": "odd"},
                "junk"
            ],
            "containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}, {"name": "shared", "request": "r"}]}}]
        });
        let claims = pod_claims(&spec, "ml", &lookup);
        assert_eq!(claims.len(), 3);
        assert_eq!(claims[0].name, "gpu");
        assert_eq!(
            claims[0].source,
            Some((ClaimKind::ResourceClaimTemplate, "one-gpu".to_string()))
        );
        assert_eq!(
            claims[0].spec.as_ref().unwrap()["devices"]["requests"][0]["name"],
            "gpu"
        );
        assert_eq!(
            claims[1].source,
            Some((ClaimKind::ResourceClaim, "missing".to_string()))
        );
        assert_eq!(claims[1].spec, None);
        assert_eq!(claims[2].source, None);
        assert!(pod_claims(&spec, "other", &lookup)[0].spec.is_none());
        assert_eq!(
            container_claims(&spec["containers"][0]),
            vec![
                ("gpu".to_string(), None),
                ("shared".to_string(), Some("r".to_string()))
            ]
        );
    }

    #[test]
    fn claim_specs_of_both_kinds() {
        assert_eq!(
            claim_spec(&template(None)).unwrap()["devices"]["requests"][0]["exactly"]
                ["deviceClassName"],
            "gpu.nvidia.com"
        );
        let claim = json!({"apiVersion": "resource.k8s.io/v1beta2", "kind": "ResourceClaim",
            "spec": {"devices": {"requests": []}}});
        assert!(claim_spec(&claim).is_some());
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "spec": {}});
        assert_eq!(claim_spec(&pod), None);
    }
}
