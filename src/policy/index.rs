//! Which bindings a request could match, looked up by resource and
//! operation, so that a policy written for other resources costs nothing.
use super::matching::{matches_operation, MatchResources};
use crate::review::{Operation, Request};
use std::collections::HashMap;

const OPERATIONS: [Operation; 4] = [
    Operation::Create,
    Operation::Update,
    Operation::Delete,
    Operation::Connect,
];

/// Bindings (by position) keyed by the resources and operations their
/// policy's rules name. A rule with a resource wildcard (`*`, `*/scale`)
/// puts its binding on every request.
#[derive(Debug, Default)]
pub(crate) struct BindingIndex {
    by_resource: HashMap<(String, Operation), Vec<usize>>,
    always: Vec<usize>,
    /// Bindings indexed.
    len: usize,
}

/// A value worked out once per bucket of a [`BindingIndex`] from the
/// bindings a request of that bucket could match (see
/// [`BindingIndex::per_bucket`]).
#[derive(Debug, Default)]
pub(crate) struct PerBucket<T> {
    by_resource: HashMap<String, Vec<(Operation, T)>>,
    /// For a request no bucket names: from the wildcard bindings.
    always: T,
    /// For a request found under two resources (sent and requested): from
    /// every binding.
    every: T,
}

impl<T> PerBucket<T> {
    /// The value for the bindings `req` could match: its bucket's, or one
    /// worked out from more bindings than that (never fewer).
    pub(crate) fn get(&self, req: &Request) -> &T {
        let sent = &req.resource.resource;
        if req
            .request_resource
            .as_ref()
            .is_some_and(|r| &r.resource != sent)
        {
            return &self.every;
        }
        self.by_resource
            .get(sent.as_str())
            .and_then(|ops| ops.iter().find(|(op, _)| *op == req.operation))
            .map_or(&self.always, |(_, value)| value)
    }
}

impl BindingIndex {
    /// `constraints[i]`: the match constraints of binding `i`'s policy (a
    /// binding's own matchResources can only narrow them).
    pub(crate) fn new<'a>(constraints: impl Iterator<Item = &'a MatchResources>) -> BindingIndex {
        let mut index = BindingIndex::default();
        for (i, m) in constraints.enumerate() {
            index.len = i + 1;
            let wildcard = m.resource_rules.iter().any(|r| {
                r.resources
                    .iter()
                    .any(|p| p.split('/').next().is_some_and(|base| base == "*"))
            });
            if wildcard {
                index.always.push(i);
                continue;
            }
            for rule in &m.resource_rules {
                let ops: Vec<Operation> = (OPERATIONS.into_iter())
                    .filter(|op| matches_operation(rule, *op))
                    .collect();
                for pattern in &rule.resources {
                    let base = pattern.split('/').next().unwrap_or_default();
                    for op in &ops {
                        let list = index
                            .by_resource
                            .entry((base.to_string(), *op))
                            .or_default();
                        if list.last() != Some(&i) {
                            list.push(i);
                        }
                    }
                }
            }
        }
        index
    }

    /// An index that puts every one of `len` bindings on every request.
    pub(crate) fn unindexed(len: usize) -> BindingIndex {
        BindingIndex {
            by_resource: HashMap::new(),
            always: (0..len).collect(),
            len,
        }
    }

    /// Whether any binding could match a request for `resource` (as sent,
    /// and as requested when different) with `operation`.
    pub(crate) fn any(
        &self,
        resource: &str,
        requested: Option<&str>,
        operation: Operation,
    ) -> bool {
        let named = |r: &str| {
            self.by_resource
                .get(&(r.to_string(), operation))
                .is_some_and(|l| !l.is_empty())
        };
        !self.always.is_empty() || named(resource) || requested.is_some_and(named)
    }

    /// The bindings that could match `req`, in file order: those whose
    /// rules name the resource as it was sent or as it was requested, and
    /// those with wildcard rules.
    pub(crate) fn candidates(&self, req: &Request) -> Vec<usize> {
        let mut out = self.always.clone();
        let sent = &req.resource.resource;
        let mut add = |resource: &str| {
            if let Some(list) = self.by_resource.get(&(resource.to_string(), req.operation)) {
                out.extend_from_slice(list);
            }
        };
        add(sent);
        if let Some(requested) = &req.request_resource {
            if &requested.resource != sent {
                add(&requested.resource);
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// `of` the bindings of each bucket (in file order, wildcard ones
    /// included), of the wildcard bindings alone, and of every binding:
    /// what [`PerBucket::get`] answers for a request.
    pub(crate) fn per_bucket<T>(&self, of: impl Fn(&[usize]) -> T) -> PerBucket<T> {
        let mut by_resource: HashMap<String, Vec<(Operation, T)>> = HashMap::new();
        for ((resource, op), list) in &self.by_resource {
            let mut bindings = self.always.clone();
            bindings.extend_from_slice(list);
            bindings.sort_unstable();
            bindings.dedup();
            by_resource
                .entry(resource.clone())
                .or_default()
                .push((*op, of(&bindings)));
        }
        let every: Vec<usize> = (0..self.len).collect();
        PerBucket {
            by_resource,
            always: of(&self.always),
            every: of(&every),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::matching::Rule;
    use serde_json::json;

    fn constraints(resources: &[&str], operations: &[&str]) -> MatchResources {
        MatchResources {
            resource_rules: vec![Rule {
                operations: operations.iter().map(|s| s.to_string()).collect(),
                api_groups: vec!["*".into()],
                api_versions: vec!["*".into()],
                resources: resources.iter().map(|s| s.to_string()).collect(),
                ..Rule::default()
            }],
            ..MatchResources::default()
        }
    }

    fn gvr(group: &str, resource: &str) -> crate::review::GroupVersionResource {
        crate::review::GroupVersionResource {
            group: group.into(),
            version: "v1".into(),
            resource: resource.into(),
        }
    }

    /// Five bindings; the third names every resource, for `wildcard_ops`.
    fn five(wildcard_ops: &[&str]) -> [MatchResources; 5] {
        [
            constraints(&["pods"], &["CREATE"]),
            constraints(&["deployments", "jobs"], &["CREATE", "UPDATE"]),
            constraints(&["*"], wildcard_ops),
            constraints(&["pods/ephemeralcontainers"], &["UPDATE"]),
            constraints(&["pods"], &["*"]),
        ]
    }

    #[test]
    fn requests_find_the_bindings_that_name_their_resource_and_operation() {
        let all = five(&["*"]);
        let index = BindingIndex::new(all.iter());
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        let mut req = Request::for_object(pod, Operation::Create, None);
        assert_eq!(index.candidates(&req), [0, 2, 4]);
        req.operation = Operation::Update;
        assert_eq!(index.candidates(&req), [2, 3, 4]);
        req.operation = Operation::Delete;
        assert_eq!(index.candidates(&req), [2, 4]);
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}});
        let mut req = Request::for_object(job, Operation::Update, None);
        assert_eq!(index.candidates(&req), [1, 2]);
        // Matched as requested too (matchPolicy: Equivalent).
        req.resource.resource = "cronjobs".into();
        req.request_resource = Some(gvr("batch", "jobs"));
        assert_eq!(index.candidates(&req), [1, 2]);

        let pods_only = BindingIndex::new([constraints(&["pods"], &["CREATE"])].iter());
        assert!(pods_only.any("pods", None, Operation::Create));
        assert!(!pods_only.any("pods", None, Operation::Delete));
        assert!(!pods_only.any("configmaps", None, Operation::Create));
        assert!(pods_only.any("configmaps", Some("pods"), Operation::Create));
        assert!(BindingIndex::new(all.iter()).any("configmaps", None, Operation::Delete));
    }

    /// What is worked out per bucket covers every binding a request could
    /// match: exactly its candidates when it is found under one resource.
    #[test]
    fn a_bucket_holds_the_candidates_of_its_requests() {
        let all = five(&["DELETE"]);
        let index = BindingIndex::new(all.iter());
        let buckets = index.per_bucket(<[usize]>::to_vec);
        let resources = ["pods", "deployments", "jobs", "configmaps", "cronjobs"];
        let object = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "x"}});
        for resource in resources {
            for op in OPERATIONS {
                let mut req = Request::for_object(object.clone(), op, None);
                req.resource.resource = resource.into();
                req.request_resource = None;
                assert_eq!(
                    buckets.get(&req),
                    &index.candidates(&req),
                    "{resource} {op:?}"
                );
                for requested in resources {
                    req.request_resource = Some(gvr("", requested));
                    let got = buckets.get(&req);
                    let want = index.candidates(&req);
                    assert!(
                        want.iter().all(|b| got.contains(b)),
                        "{resource} as {requested} {op:?}"
                    );
                    if requested == resource {
                        assert_eq!(got, &want);
                    }
                }
            }
        }
        // Wildcard rules are indexed whatever their operations.
        let unnamed = Request::for_object(object, Operation::Connect, None);
        assert_eq!(buckets.get(&unnamed), &[2]);
    }
}
