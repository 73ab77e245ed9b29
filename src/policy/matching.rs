//! Which requests a policy or binding applies to, as kube-apiserver decides:
//! resource rules, scope, namespace and object selectors, exclusions.
use crate::k8s::json::labels_of;
use crate::k8s::LabelSelector;
use crate::review::{GroupVersionKind, GroupVersionResource, Operation, Request};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// `matchConstraints` / `matchResources`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct MatchResources {
    pub namespace_selector: LabelSelector,
    pub object_selector: LabelSelector,
    pub resource_rules: Vec<Rule>,
    pub exclude_resource_rules: Vec<Rule>,
    pub match_policy: MatchPolicy,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
pub enum MatchPolicy {
    /// Also match the request as the apiserver converted it for the policy.
    #[default]
    Equivalent,
    /// Only match the resource exactly as the client requested it.
    Exact,
}

/// A `NamedRuleWithOperations`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Rule {
    pub operations: Vec<String>,
    pub api_groups: Vec<String>,
    pub api_versions: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    pub scope: Scope,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
pub enum Scope {
    #[default]
    #[serde(rename = "*")]
    All,
    Cluster,
    Namespaced,
}

impl MatchResources {
    /// Whether `req` is in scope. `namespace_labels` are the labels of the
    /// request's namespace (none for cluster-scoped requests).
    pub fn matches(&self, req: &Request, namespace_labels: &BTreeMap<String, String>) -> bool {
        self.in_scope(req, namespace_labels, false)
    }

    /// For bindings: an empty rule list does not narrow.
    pub fn narrows(&self, req: &Request, namespace_labels: &BTreeMap<String, String>) -> bool {
        self.in_scope(req, namespace_labels, true)
    }

    fn in_scope(&self, req: &Request, labels: &BTreeMap<String, String>, no_rules: bool) -> bool {
        let rule = |r: &Rule| rule_matches(r, req, self.match_policy);
        ((no_rules && self.resource_rules.is_empty()) || self.resource_rules.iter().any(rule))
            && !self.exclude_resource_rules.iter().any(rule)
            && self.matches_namespace(req, labels)
            && self.matches_object(req)
    }

    /// Whether the rules name `resource` of `group` itself (a main
    /// resource, in any version, for any operation or scope) and no
    /// exclusion takes it out whole: the policy was written for that kind.
    pub fn names_resource(&self, group: &str, resource: &str) -> bool {
        let names = |r: &Rule| {
            matches_list(&r.api_groups, group)
                && r.resources
                    .iter()
                    .any(|p| matches_resource(p, resource, ""))
        };
        self.resource_rules.iter().any(names)
            && !self
                .exclude_resource_rules
                .iter()
                .any(|r| r.resource_names.is_empty() && names(r))
    }

    /// Whether some rule matches a Pod CREATE (core `v1` `pods`), the
    /// request a controller's pod template is judged as.
    pub fn matches_pod_create(&self) -> bool {
        self.resource_rules.iter().any(|r| {
            matches_operation(r, Operation::Create)
                && matches_list(&r.api_groups, "")
                && matches_list(&r.api_versions, "v1")
                && r.resources.iter().any(|p| matches_resource(p, "pods", ""))
        })
    }

    fn matches_namespace(
        &self,
        req: &Request,
        namespace_labels: &BTreeMap<String, String>,
    ) -> bool {
        if self.namespace_selector.is_empty() {
            return true;
        }
        if is_namespace(&req.resource) {
            // A Namespace is matched on its own labels.
            let object = req.object.as_ref().or(req.old_object.as_ref());
            return self.namespace_selector.matches(&labels_of(object));
        }
        match req.namespace.as_deref() {
            // Cluster-scoped objects always match a namespaceSelector.
            None | Some("") => true,
            Some(_) => self.namespace_selector.matches(namespace_labels),
        }
    }

    fn matches_object(&self, req: &Request) -> bool {
        if self.object_selector.is_empty() {
            return true;
        }
        let on = |o: Option<&Value>| o.is_some() && self.object_selector.matches(&labels_of(o));
        on(req.object.as_ref()) || on(req.old_object.as_ref())
    }
}

/// Where a binding's judgements are kept among those of one evaluated
/// request (the plan's **shared matches**): the slot of its policy's
/// `matchConstraints`, and of its own `matchResources` when it has them.
/// Constraints written alike share a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MatchSlots {
    pub(crate) policy: usize,
    pub(crate) binding: Option<usize>,
}

/// What one evaluated request was judged against the distinct match
/// constraints of a policy family: each judged at most once, however many
/// bindings share it.
pub(crate) struct Judgements(Vec<Option<bool>>);

impl Judgements {
    /// For `slots` distinct constraints (none: nothing is kept).
    pub(crate) fn new(slots: usize) -> Judgements {
        Judgements(vec![None; slots])
    }

    /// Whether a binding whose own `matchResources` are `binding` (kept
    /// at `slots`, when the plan gave it some) applies to `req`: its
    /// policy's `constraints` match and the binding's narrow.
    pub(crate) fn applies(
        &mut self,
        slots: Option<MatchSlots>,
        constraints: &MatchResources,
        binding: Option<&MatchResources>,
        req: &Request,
        labels: &BTreeMap<String, String>,
    ) -> bool {
        let mut judged = |slot: Option<usize>, judge: &dyn Fn() -> bool| match slot {
            Some(slot) => *self.0[slot].get_or_insert_with(judge),
            None => judge(),
        };
        judged(slots.map(|s| s.policy), &|| {
            constraints.matches(req, labels)
        }) && binding
            .is_none_or(|b| judged(slots.and_then(|s| s.binding), &|| b.narrows(req, labels)))
    }
}

fn is_namespace(gvr: &GroupVersionResource) -> bool {
    gvr.group.is_empty() && gvr.resource == "namespaces"
}

fn rule_matches(rule: &Rule, req: &Request, policy: MatchPolicy) -> bool {
    let sub = req.sub_resource.as_deref().unwrap_or("");
    let as_sent = (
        &req.resource,
        sub,
        req.request_kind.as_ref().unwrap_or(&req.kind),
    );
    let requested = (
        req.request_resource.as_ref().unwrap_or(&req.resource),
        req.request_sub_resource.as_deref().unwrap_or(sub),
        req.request_kind.as_ref().unwrap_or(&req.kind),
    );
    let common = matches_operation(rule, req.operation)
        && matches_scope(rule, req)
        && (rule.resource_names.is_empty() || rule.resource_names.contains(&req.name));
    if !common {
        return false;
    }
    let matches_gvr = |(gvr, sub, _kind): (&GroupVersionResource, &str, &GroupVersionKind)| {
        matches_list(&rule.api_groups, &gvr.group)
            && matches_list(&rule.api_versions, &gvr.version)
            && rule
                .resources
                .iter()
                .any(|r| matches_resource(r, &gvr.resource, sub))
    };
    match policy {
        MatchPolicy::Exact => matches_gvr(requested),
        MatchPolicy::Equivalent => matches_gvr(as_sent) || matches_gvr(requested),
    }
}

pub(super) fn matches_operation(rule: &Rule, op: Operation) -> bool {
    rule.operations
        .iter()
        .any(|o| o == "*" || o.eq_ignore_ascii_case(op.as_str()))
}

fn matches_scope(rule: &Rule, req: &Request) -> bool {
    let namespaced = req.namespace.as_deref().is_some_and(|n| !n.is_empty());
    match rule.scope {
        Scope::All => true,
        // A Namespace request carries its own name as namespace.
        Scope::Cluster => !namespaced || is_namespace(&req.resource),
        Scope::Namespaced => namespaced && !is_namespace(&req.resource),
    }
}

fn matches_list(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == "*" || v == value)
}

/// `pods`, `pods/status`, `pods/*`, `*`, `*/status`, `*/*`.
fn matches_resource(pattern: &str, resource: &str, sub: &str) -> bool {
    let (p_res, p_sub) = match pattern.split_once('/') {
        Some((r, s)) => (r, Some(s)),
        None => (pattern, None),
    };
    let res_ok = p_res == "*" || p_res == resource;
    let sub_ok = match p_sub {
        None => sub.is_empty(),
        Some("*") => true,
        Some(s) => s == sub,
    };
    res_ok && sub_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::{LabelRequirement, SelectorOp};

    #[test]
    fn resource_patterns_follow_kubernetes() {
        assert!(matches_resource("pods", "pods", ""));
        assert!(!matches_resource("pods", "pods", "status"));
        assert!(matches_resource("pods/*", "pods", "status"));
        assert!(matches_resource("pods/*", "pods", ""));
        assert!(matches_resource("*", "deployments", ""));
        assert!(!matches_resource("*", "deployments", "scale"));
        assert!(matches_resource("*/scale", "deployments", "scale"));
        assert!(matches_resource("*/*", "deployments", "scale"));
        assert!(!matches_resource("pods/log", "pods", "exec"));
    }

    fn rule(groups: &[&str], resources: &[&str], operations: &[&str]) -> Rule {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        Rule {
            operations: strings(operations),
            api_groups: strings(groups),
            api_versions: vec!["*".into()],
            resources: strings(resources),
            ..Rule::default()
        }
    }

    #[test]
    fn a_policy_names_the_controller_kinds_its_rules_cover() {
        let m = MatchResources {
            resource_rules: vec![
                rule(&[""], &["pods"], &["CREATE"]),
                rule(&["apps"], &["deployments", "daemonsets"], &["UPDATE"]),
            ],
            exclude_resource_rules: vec![rule(&["apps"], &["daemonsets"], &["*"])],
            ..MatchResources::default()
        };
        assert!(m.names_resource("apps", "deployments"));
        assert!(!m.names_resource("apps", "daemonsets"), "excluded whole");
        assert!(!m.names_resource("apps", "statefulsets"));
        assert!(!m.names_resource("batch", "deployments"));
        assert!(m.matches_pod_create());
        let everything = MatchResources {
            resource_rules: vec![rule(&["*"], &["*"], &["*"])],
            ..MatchResources::default()
        };
        assert!(everything.names_resource("batch", "jobs"));
        let pods_update = MatchResources {
            resource_rules: vec![rule(&[""], &["pods", "pods/status"], &["UPDATE"])],
            ..MatchResources::default()
        };
        assert!(!pods_update.matches_pod_create());
    }

    /// Constraints sharing a slot are judged once per request; a binding's
    /// are read as narrowing (empty rules narrow nothing), in a slot of
    /// their own even when written as a policy's.
    #[test]
    fn judgements_are_kept_by_slot() {
        let req = Request::for_object(
            serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}),
            Operation::Create,
            None,
        );
        let labels = BTreeMap::new();
        let pods = MatchResources {
            resource_rules: vec![rule(&[""], &["pods"], &["CREATE"])],
            ..MatchResources::default()
        };
        let jobs = MatchResources {
            resource_rules: vec![rule(&["batch"], &["jobs"], &["CREATE"])],
            ..MatchResources::default()
        };
        let empty = MatchResources::default();
        let at = |policy, binding| {
            Some(MatchSlots {
                policy,
                binding: Some(binding),
            })
        };
        let mut judged = Judgements::new(3);
        assert!(judged.applies(at(0, 1), &pods, Some(&empty), &req, &labels));
        assert_eq!(judged.0, vec![Some(true), Some(true), None]);
        assert!(!judged.applies(at(0, 2), &pods, Some(&jobs), &req, &labels));
        // A kept judgement is what is read, not the constraints again.
        judged.0[0] = Some(false);
        assert!(!judged.applies(at(0, 1), &pods, Some(&empty), &req, &labels));
        // Without slots, judged afresh; an empty policy matches nothing.
        let mut fresh = Judgements::new(0);
        assert!(fresh.applies(None, &pods, None, &req, &labels));
        assert!(!fresh.applies(None, &empty, None, &req, &labels));
    }

    #[test]
    fn selectors_follow_kubernetes() {
        let labels: BTreeMap<String, String> = [("tier".to_string(), "gpu".to_string())]
            .into_iter()
            .collect();
        let sel = |op, values: &[&str]| LabelSelector {
            match_labels: BTreeMap::new(),
            match_expressions: vec![LabelRequirement {
                key: "tier".into(),
                operator: op,
                values: values.iter().map(|s| s.to_string()).collect(),
            }],
        };
        assert!(sel(SelectorOp::In, &["gpu"]).matches(&labels));
        assert!(!sel(SelectorOp::NotIn, &["gpu"]).matches(&labels));
        assert!(sel(SelectorOp::NotIn, &["gpu"]).matches(&BTreeMap::new()));
        assert!(sel(SelectorOp::Exists, &[]).matches(&labels));
        assert!(sel(SelectorOp::DoesNotExist, &[]).matches(&BTreeMap::new()));
        assert!(LabelSelector::default().matches(&labels));
    }
}
