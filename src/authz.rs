//! Authorization checks for the CEL `authorizer` variable: may a user do a
//! verb on a resource or a non-resource path? Answered by an
//! [`Authorizer`]: [`NoAuthorizer`] (every check denied), [`StaticAuthorizer`]
//! (a file of grants, for `evaluate` and `test`), or the cluster's
//! SubjectAccessReview API (`k8s::access_review`).
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// Who is asking: the request's `userInfo`, or a service account.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct User {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl User {
    /// The user of an AdmissionRequest's `userInfo`.
    pub fn from_user_info(info: &serde_json::Value) -> User {
        let text = |key: &str| info.get(key).and_then(|v| v.as_str()).unwrap_or_default();
        let strings = |v: &serde_json::Value| -> Vec<String> {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        User {
            username: text("username").to_string(),
            uid: text("uid").to_string(),
            groups: info.get("groups").map(strings).unwrap_or_default(),
            extra: info
                .get("extra")
                .and_then(|e| e.as_object())
                .map(|e| e.iter().map(|(k, v)| (k.clone(), strings(v))).collect())
                .unwrap_or_default(),
        }
    }

    /// The user a service account's tokens authenticate as.
    pub fn service_account(namespace: &str, name: &str) -> User {
        User {
            username: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".to_string(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".to_string(),
            ],
            ..User::default()
        }
    }
}

/// What is checked: a non-resource path, or a resource (empty strings
/// mean "any", as in a SubjectAccessReview).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    Path(String),
    Resource(ResourceTarget),
}

/// A resource check's attributes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ResourceTarget {
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

/// One check: may `user` do `verb` on `target`?
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Attributes {
    pub user: User,
    pub verb: String,
    pub target: Target,
}

/// An authorizer's answer, as CEL's `Decision` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub reason: String,
    /// Why the authorizer could not decide (the check is then denied).
    pub error: Option<String>,
}

impl Decision {
    pub fn allow(reason: impl Into<String>) -> Decision {
        Decision {
            allowed: true,
            reason: reason.into(),
            error: None,
        }
    }

    pub fn deny(reason: impl Into<String>) -> Decision {
        Decision {
            allowed: false,
            reason: reason.into(),
            error: None,
        }
    }

    pub fn error(error: impl Into<String>) -> Decision {
        Decision {
            allowed: false,
            reason: String::new(),
            error: Some(error.into()),
        }
    }
}

/// Answers authorization checks.
pub trait Authorizer: Send + Sync {
    fn authorize(&self, attributes: &Attributes) -> Decision;
}

/// Denies every check: what `authorizer` answers when no authorizer is
/// configured (offline without `--authz`).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoAuthorizer;

/// The reason [`NoAuthorizer`] gives.
pub const NO_AUTHORIZER: &str = "no authorizer configured";

impl Authorizer for NoAuthorizer {
    fn authorize(&self, _: &Attributes) -> Decision {
        Decision::deny(NO_AUTHORIZER)
    }
}

/// Allows exactly what a list of grants allows (the `--authz` file),
/// denies the rest.
#[derive(Clone, Debug, Default)]
pub struct StaticAuthorizer {
    grants: Vec<Grant>,
}

/// One allowed tuple of an `--authz` file. A field left out matches any
/// value, as does `"*"`; `user` or `userGroup` is required.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Grant {
    pub user: Option<String>,
    pub user_group: Option<String>,
    pub verb: String,
    pub api_group: Option<String>,
    pub resource: Option<String>,
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// A non-resource URL path (`/healthz`, `/metrics`, `/logs/*`).
    pub path: Option<String>,
}

impl StaticAuthorizer {
    /// Reads an `--authz` file: a YAML list of [`Grant`]s.
    pub fn load(path: &Path) -> Result<StaticAuthorizer, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        StaticAuthorizer::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<StaticAuthorizer, String> {
        let grants: Vec<Grant> = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
        for (i, g) in grants.iter().enumerate() {
            if g.user.is_some() == g.user_group.is_some() {
                return Err(format!(
                    "grant {i}: exactly one of user or userGroup is required"
                ));
            }
            if g.verb.is_empty() {
                return Err(format!("grant {i}: verb is required"));
            }
            let resource_fields = [
                &g.api_group,
                &g.resource,
                &g.subresource,
                &g.namespace,
                &g.name,
            ];
            if g.path.is_some() && resource_fields.iter().any(|f| f.is_some()) {
                return Err(format!(
                    "grant {i}: path is for non-resource checks and cannot go with apiGroup, resource, subresource, namespace or name"
                ));
            }
        }
        Ok(StaticAuthorizer { grants })
    }
}

impl Authorizer for StaticAuthorizer {
    fn authorize(&self, a: &Attributes) -> Decision {
        match self.grants.iter().position(|g| g.allows(a)) {
            Some(i) => Decision::allow(format!("allowed by --authz grant {i}")),
            None => Decision::deny("no --authz grant allows it"),
        }
    }
}

impl Grant {
    fn allows(&self, a: &Attributes) -> bool {
        let any = |field: &Option<String>, value: &str| {
            field.as_deref().is_none_or(|f| f == "*" || f == value)
        };
        let who = match (&self.user, &self.user_group) {
            (Some(u), _) => u == "*" || *u == a.user.username,
            (_, Some(g)) => g == "*" || a.user.groups.contains(g),
            (None, None) => false,
        };
        let what = match &a.target {
            Target::Path(path) => {
                self.api_group.is_none()
                    && self.resource.is_none()
                    && self.subresource.is_none()
                    && self.namespace.is_none()
                    && self.name.is_none()
                    && self.path.as_deref().is_none_or(|p| path_matches(p, path))
            }
            Target::Resource(r) => {
                self.path.is_none()
                    && any(&self.api_group, &r.group)
                    && any(&self.resource, &r.resource)
                    && any(&self.subresource, &r.subresource)
                    && any(&self.namespace, &r.namespace)
                    && any(&self.name, &r.name)
            }
        };
        who && (self.verb == "*" || self.verb == a.verb) && what
    }
}

/// RBAC's non-resource URL rule: exact, `*`, or a prefix ending in `*`.
fn path_matches(pattern: &str, path: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => path.starts_with(prefix),
        None => pattern == path,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(user: &str, groups: &[&str], verb: &str, target: Target) -> Attributes {
        Attributes {
            user: User {
                username: user.into(),
                groups: groups.iter().map(|g| g.to_string()).collect(),
                ..User::default()
            },
            verb: verb.into(),
            target,
        }
    }

    fn pods(namespace: &str) -> Target {
        Target::Resource(ResourceTarget {
            resource: "pods".into(),
            namespace: namespace.into(),
            ..ResourceTarget::default()
        })
    }

    #[test]
    fn grants_allow_what_they_name_and_nothing_else() {
        let authz = StaticAuthorizer::parse(
            r#"
- {user: alice, verb: create, apiGroup: "", resource: pods, namespace: team-a}
- {userGroup: admins, verb: "*"}
- {user: bob, verb: get, path: /healthz}
- {user: carol, verb: get, path: /logs/*}
"#,
        )
        .unwrap();
        let allowed = |a: &Attributes| authz.authorize(a).allowed;
        assert!(allowed(&check("alice", &[], "create", pods("team-a"))));
        assert!(!allowed(&check("alice", &[], "create", pods("team-b"))));
        assert!(!allowed(&check("alice", &[], "delete", pods("team-a"))));
        assert!(allowed(&check("dave", &["admins"], "delete", pods("x"))));
        assert!(allowed(&check(
            "dave",
            &["admins"],
            "get",
            Target::Path("/metrics".into())
        )));
        assert!(allowed(&check(
            "bob",
            &[],
            "get",
            Target::Path("/healthz".into())
        )));
        assert!(!allowed(&check("bob", &[], "get", pods("team-a"))));
        assert!(allowed(&check(
            "carol",
            &[],
            "get",
            Target::Path("/logs/x".into())
        )));
        let d = authz.authorize(&check("eve", &[], "get", pods("a")));
        assert_eq!(d, Decision::deny("no --authz grant allows it"));
    }

    #[test]
    fn bad_grants_are_refused() {
        for (text, message) in [
            ("- {verb: get}", "exactly one of user or userGroup"),
            (
                "- {user: a, userGroup: b, verb: get}",
                "exactly one of user or userGroup",
            ),
            ("- {user: a, verb: ''}", "verb is required"),
            (
                "- {user: a, verb: get, path: /x, resource: pods}",
                "path is for non-resource",
            ),
            (
                "- {user: a, verb: get, resources: pods}",
                "unknown field `resources`",
            ),
        ] {
            let err = StaticAuthorizer::parse(text).unwrap_err();
            assert!(err.contains(message), "{text}: {err}");
        }
    }

    #[test]
    fn no_authorizer_denies_with_its_reason() {
        let d = NoAuthorizer.authorize(&check("a", &[], "get", pods("x")));
        assert_eq!(d, Decision::deny(NO_AUTHORIZER));
    }

    #[test]
    fn users_come_from_user_info_and_service_accounts() {
        let u = User::from_user_info(&serde_json::json!({
            "username": "alice", "uid": "1", "groups": ["dev", "system:authenticated"],
            "extra": {"scopes": ["a"]}}));
        assert_eq!(u.username, "alice");
        assert_eq!(u.groups, vec!["dev", "system:authenticated"]);
        assert_eq!(u.extra["scopes"], vec!["a"]);
        let sa = User::service_account("ml", "trainer");
        assert_eq!(sa.username, "system:serviceaccount:ml:trainer");
        assert!(sa.groups.contains(&"system:serviceaccounts:ml".to_string()));
    }
}
